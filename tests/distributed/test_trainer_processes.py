"""The trainer as pods run it: real processes, gloo on 127.0.0.1, signals,
termination-log reasons, checkpoints on disk."""

import json
import os
import signal
import socket
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core import contract, metricnames
from kuberl_trainer import checkpoint
from kuberl_trainer.ppo import Agent

from .support import (
    Job,
    Ranks,
    forged_checkpoint,
    garbage_checkpoint,
    make_job,
    old_format_checkpoint,
    spec,
)


def assert_same_final_model(one, other) -> None:
    """Two jobs' final models hold the same timesteps and bitwise the same weights."""
    a = torch.load(one.final_model, weights_only=False)
    b = torch.load(other.final_model, weights_only=False)
    assert a["timesteps"] == b["timesteps"]
    for name, tensor in a["agent"].items():
        assert torch.equal(tensor, b["agent"][name]), name


def sampled_return(model_path, episodes=10) -> float:
    """The saved policy, sampling its actions as the trainer's evaluation does."""
    saved = torch.load(model_path, weights_only=False)
    env = gym.make(saved["env_id"])
    agent = Agent(4, env.action_space, saved["hidden_sizes"])
    agent.load_state_dict(saved["agent"])
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                action = int(agent.act(torch.as_tensor(obs)[None])[0].item())
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


@pytest.mark.parametrize("background", [False, True], ids=["evaluation-between-updates", "evaluation-while-training"])
def test_two_ranks_solve_cartpole(tmp_path, background):
    job = make_job(tmp_path, totalTimesteps=150_000, env={"numEnvs": 8},
                   success={"targetReturn": 475, "evalEpisodes": 20, "evalEvery": 5, "evalWhileTraining": background})
    ranks = Ranks(job)
    assert ranks.wait(timeout=150) == [0, 0], ranks.log(0)
    assert job.termination_log(0).startswith(f"{contract.REASON_SUCCEEDED}: eval return"), ranks.log(0)
    torch.manual_seed(0)
    # on seeds the trainer never evaluated: far above an untrained policy (about 22), below the 475 the
    # evaluation saw, as sampled returns vary by seed (431.8 on this machine's float rounding, 450+ on others')
    assert sampled_return(job.final_model, episodes=20) >= 400
    progress = [json.loads(line) for line in (job.checkpoint_dir / "progress.jsonl").read_text().splitlines()]
    assert progress and progress[-1]["timesteps"] <= 150_000 and progress[-1]["eval_return"] >= 475


@pytest.mark.parametrize("ppo", [{}, {"learnWhileCollecting": True}], ids=["synchronous", "learning-while-collecting"])
def test_sigterm_leaves_a_checkpoint_and_the_next_run_continues(tmp_path, ppo):
    job = make_job(tmp_path, checkpoint={"everyUpdates": 10}, ppo=ppo)
    ranks = Ranks(job)
    ranks.wait_for_updates(15)
    assert ranks.metric(1, metricnames.WORLD_SIZE) == 2  # every rank exports, labelled by rank
    assert ranks.metric(0, metricnames.RESUMED_TIMESTEPS) == 0  # found no checkpoint: started from zero
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=30) == [0, 0]
    assert job.termination_log(0).startswith(f"{contract.REASON_STOPPED}: ") and "resumable" in job.termination_log(0)
    newest, saved = checkpoint.load_newest(str(job.checkpoint_dir))
    assert saved["counters"]["updates"] >= 15
    stopped_at = saved["counters"]["global_step"]
    # progress.jsonl names each checkpoint with its timesteps: what a run's summary reports
    named = [r for r in map(json.loads, (job.checkpoint_dir / "progress.jsonl").read_text().splitlines()) if "checkpoint" in r]
    assert (named[-1]["checkpoint"], named[-1]["timesteps"]) == (os.path.basename(newest), stopped_at)

    resumed = Ranks(job)
    resumed.wait_for_updates(saved["counters"]["updates"] + 1)
    assert resumed.metric(0, metricnames.ENV_STEPS_TOTAL) > stopped_at  # continues, never from 0
    assert resumed.metric(0, metricnames.RESUMED_TIMESTEPS) == stopped_at  # what the operator holds against status
    resumed.kill()
    assert f"resuming from {job.config['paths']['checkpointDir']}/ckpt-" in resumed.log(0)  # the pod's path, as kubectl logs shows it
    # the stop's checkpoint was written: no loss is said, none counted
    assert "the last stop asked of rank 0" not in resumed.log(0) and resumed.metric(0, metricnames.CHECKPOINTS_SKIPPED) in (0, None)


def test_a_sigterm_ends_ppos_learning_after_an_epoch_and_saves_what_it_learned(tmp_path):
    """A SIGTERM was read at the rollout's all-reduce alone: one during learning waited for every epoch, then
    for the next update (the Pong example's four epochs: 13-18 s on a 2-core CPU). Whenever it comes now, the
    update it ends learns for fewer epochs than updateEpochs: its Adam step count says how many it ran.
    One that comes in the last epoch is read at that epoch's end, as in any other, and cuts nothing (CI saw
    it once in eight epochs' worth of chances): such a try says nothing, and another is made."""
    epochs, minibatches = 8, 4
    for attempt in range(4):
        job = make_job(tmp_path / str(attempt), world_size=1, ppo={"updateEpochs": epochs, "numMinibatches": minibatches})
        ranks = Ranks(job)
        ranks.wait_for_updates(3)
        ranks.signal(0, signal.SIGTERM)
        assert ranks.wait(timeout=30) == [0], ranks.log(0)
        assert job.termination_log(0).startswith(f"{contract.REASON_STOPPED}: ")
        _, saved = checkpoint.load_newest(str(job.checkpoint_dir))
        updates = saved["counters"]["updates"]
        steps = int(saved["optimizer"]["state"][0]["step"])
        whole = (updates - 1) * epochs * minibatches  # the updates before the last learned every epoch
        assert whole + minibatches <= steps <= whole + epochs * minibatches, (updates, steps)
        assert (steps - whole) % minibatches == 0  # the last one stopped at an epoch's end, never inside one
        if steps < whole + epochs * minibatches:
            return  # cut short: fewer epochs than updateEpochs
    pytest.fail("four SIGTERMs in a row came in their update's last epoch: was any learning cut short?")


def test_a_sigterm_during_the_imports_stops_every_rank_at_the_first_update_with_a_checkpoint(tmp_path):
    """Ctrl-C in `kuberl run`'s first seconds killed a rank still importing torch (SIGTERM's default), while a
    peer past its imports sat in the rendezvous waiting for it until the grace period's SIGKILL: 30 s of silence."""
    job = make_job(tmp_path, checkpoint={"everyUpdates": 1000})
    ranks = Ranks(job)
    for rank in (0, 1):  # each as soon as its handler is in, torch not imported yet (a fixed 0.3 s could come before)
        ranks.wait_for_handler(rank)
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=60) == [0, 0], (ranks.log(0), ranks.log(1))
    assert job.termination_log(0).startswith(f"{contract.REASON_STOPPED}: stopped at timesteps ")
    assert checkpoint.load_newest(str(job.checkpoint_dir)) is not None  # the same command resumes from it


def test_a_stop_during_rank_0_s_evaluation_abandons_it_and_checkpoints_within_seconds(tmp_path):
    """Rank 0 evaluated to the end before it looked at the stop: 4 Pendulum episodes of 100,000 steps took 20 s
    here (Atari's, minutes), while the grace period (30 s by default) ran out for the whole gang, and the SIGKILL
    after it lost every update since the last checkpoint. A stop now abandons the evaluation (deterministic mode
    excepted: its resume repeats an uninterrupted run)."""
    job = make_job(tmp_path, env={"id": "Pendulum-v1", "numEnvs": 2, "kwargs": {"max_episode_steps": 100_000}},
                   success={"targetReturn": 1_000_000, "evalEpisodes": 4, "evalEvery": 2},
                   checkpoint={"everyUpdates": 1}, ppo={"numSteps": 16, "numMinibatches": 1, "updateEpochs": 1})
    ranks = Ranks(job)
    deadline = time.monotonic() + 60
    while "ckpt-0000000001.pt" not in ranks.log(0):  # update 2, whose evaluation is next, takes milliseconds
        assert time.monotonic() < deadline and all(p.poll() is None for p in ranks.procs), ranks.log(0)
        time.sleep(0.02)
    time.sleep(1.0)
    signalled = time.monotonic()
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=60) == [0, 0], ranks.log(0)
    assert time.monotonic() - signalled < 10, ranks.log(0)
    assert "evaluation at update 2 abandoned after " in ranks.log(0), ranks.log(0)
    assert job.termination_log(0).startswith(f"{contract.REASON_STOPPED}: stopped at timesteps ")
    _, saved = checkpoint.load_newest(str(job.checkpoint_dir))
    assert saved["counters"]["updates"] >= 2 and saved["eval_return"] is None  # no evaluation recorded


def test_a_forged_checkpoint_never_runs_and_the_job_resumes_from_the_last_good_one(tmp_path):
    """Newest first in the directory: a pickle that would touch a marker
    (checksum recomputed), a payload that is not a checkpoint, then the good
    one rewritten in the previous format version (numpy arrays inside)."""
    job = make_job(tmp_path, checkpoint={"everyUpdates": 5, "keep": 2})
    ranks = Ranks(job)
    ranks.wait_for_updates(7)
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=30) == [0, 0], ranks.log(0)
    good, saved = checkpoint.load_newest(str(job.checkpoint_dir))
    with open(good, "wb") as f:
        f.write(old_format_checkpoint(saved))
    marker = tmp_path / "forged-checkpoint-ran"
    (job.checkpoint_dir / "ckpt-9999999999.pt").write_bytes(forged_checkpoint(marker, 2))
    (job.checkpoint_dir / "ckpt-9999999998.pt").write_bytes(forged_checkpoint(marker, 1))
    (job.checkpoint_dir / "ckpt-9999999997.pt").write_bytes(garbage_checkpoint())

    resumed = Ranks(job)
    resumed.wait_for_updates(saved["counters"]["updates"] + 6)  # past one periodic save
    for rank in (0, 1):  # a stop, not a kill: a kill between a save and its prune leaves keep + 1 files (CI of stop 24)
        resumed.signal(rank, signal.SIGTERM)
    assert resumed.wait(timeout=30) == [0, 0], resumed.log(0)
    assert not marker.exists()
    log = resumed.log(0)
    pod_good = f"{job.config['paths']['checkpointDir']}/{os.path.basename(good)}"  # the pod's path, as kubectl logs shows it
    assert f"resuming from {pod_good} (timesteps {saved['counters']['global_step']})" in log, log
    assert log.count("skipping checkpoint") == 3, log
    kept = sorted(p.name for p in job.checkpoint_dir.glob("ckpt-*.pt"))
    assert len(kept) == 2 and not any(name.startswith("ckpt-999") for name in kept), kept


def test_a_checkpoint_from_a_newer_format_version_ends_the_job_naming_the_file(tmp_path):
    job = make_job(tmp_path, world_size=1)
    future = job.checkpoint_dir / "ckpt-0000000040.pt"
    future.parent.mkdir(parents=True)
    future.write_bytes(checkpoint._framed(checkpoint.VERSION + 1, b"what a newer trainer writes"))
    assert Ranks(job).wait(timeout=60) == [contract.EXIT_CONFIG_ERROR]
    assert job.termination_log(0).startswith(f"{contract.REASON_CONFIG_ERROR}: checkpoint {future} has format version")


def uninterrupted(tmp_path, settings: dict) -> Job:
    """The job of `settings` (deterministic) run whole by two ranks."""
    whole = make_job(tmp_path, raw_spec=settings)
    ranks = Ranks(whole)
    assert ranks.wait(timeout=120) == [0, 0], ranks.log(0)
    return whole


def stopped_then_resumed(tmp_path, settings: dict, stop_after: int, updates: int) -> Job:
    """The job of `settings` (deterministic, `updates` updates) stopped by SIGTERM on both ranks after `stop_after`
    updates, then resumed to its end."""
    split = make_job(tmp_path, raw_spec=settings)
    ranks = Ranks(split)
    ranks.wait_for_updates(stop_after)
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=30) == [0, 0], ranks.log(0) + ranks.log(1)
    _, saved = checkpoint.load_newest(str(split.checkpoint_dir))
    assert stop_after <= saved["counters"]["updates"] < updates, saved["counters"]  # stopped mid-run, resumed from there
    resumed = Ranks(split)
    assert resumed.wait(timeout=120) == [0, 0], resumed.log(0) + resumed.log(1)
    return split


def uninterrupted_and_stopped_then_resumed(tmp_path, settings: dict, stop_after: int, updates: int) -> tuple[Job, Job]:
    """(the whole run's job, the stopped and resumed one's), of `settings`."""
    return uninterrupted(tmp_path / "whole", settings), stopped_then_resumed(tmp_path / "split", settings, stop_after, updates)


DETERMINISTIC_UPDATES = 24  # the stop after 8 leaves 16 updates of room for a loaded machine (the recurrent test: 12)


@pytest.fixture(scope="module")
def deterministic_run(tmp_path_factory) -> tuple[dict, Job]:
    """One uninterrupted deterministic run, the reference of both bitwise tests below: each launch of two ranks
    costs their imports and rendezvous, more than its updates."""
    settings = spec(totalTimesteps=DETERMINISTIC_UPDATES * 2 * 4 * 32, deterministic=True)
    return settings, uninterrupted(tmp_path_factory.mktemp("whole"), settings)


def test_deterministic_stop_and_resume_is_bitwise_equal_to_an_uninterrupted_run(tmp_path, deterministic_run):
    settings, whole = deterministic_run
    assert_same_final_model(whole, stopped_then_resumed(tmp_path, settings, stop_after=8, updates=DETERMINISTIC_UPDATES))


def test_deterministic_gang_restarted_before_its_first_checkpoint_is_bitwise_equal_to_an_uninterrupted_run(tmp_path, deterministic_run):
    """A rank killed before the first save (in the rendezvous, `kuberl run` killed in its first seconds) restarts
    the gang from zero as generation 1, whose seeds differed from generation 0's: the run ended at other weights
    and other timesteps than an uninterrupted one, with deterministic mode on (bench/chaos.py, rendezvous-kill)."""
    settings, whole = deterministic_run
    restarted = make_job(tmp_path, raw_spec=settings)
    ranks = Ranks(restarted, extra_env={contract.ENV_RESTART: "1"})  # nothing to resume from: a fresh start
    assert ranks.wait(timeout=120) == [0, 0], ranks.log(0) + ranks.log(1)

    assert_same_final_model(whole, restarted)


def test_a_killed_peer_ends_the_survivor_within_the_collective_timeout(tmp_path):
    job = make_job(tmp_path, runPolicy={"collectiveTimeoutSeconds": 10})
    ranks = Ranks(job)
    ranks.wait_for_updates(5)
    ranks.signal(1, signal.SIGKILL)
    started = time.monotonic()
    code = ranks.procs[0].wait(timeout=30)
    assert time.monotonic() - started < 15
    assert code != 0
    assert job.termination_log(0).startswith(f"{contract.REASON_PEER_LOST}: "), ranks.log(0)
    ranks.kill()


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda s: s["env"].update(id="NoSuchEnv-v0"), "spec.env.id"),
        (lambda s: s["env"].update(id="collections:NoSuchClass"), "spec.env.id"),
        (lambda s: s["ppo"].update(learningRate=-1), "spec.ppo.learningRate"),
        (lambda s: s["ppo"].update(numMinibatches=4000), "spec.ppo.numMinibatches"),
        # made without complaint, then failing the first step: every restart would fail there again
        (lambda s: s["env"].update(kwargs={"max_episode_steps": "x"}), "spec.env.kwargs"),
    ],
)
def test_a_bad_configuration_exits_78_naming_the_field(tmp_path, mutate, field):
    job = make_job(tmp_path, world_size=1)
    mutate(job.config["spec"])
    from .support import write_config

    write_config(job)
    assert Ranks(job).wait(timeout=60) == [contract.EXIT_CONFIG_ERROR]
    assert job.termination_log(0).startswith(f"{contract.REASON_CONFIG_ERROR}: {field}")


def test_a_replay_buffer_no_machine_can_hold_exits_78_at_once_naming_the_field(tmp_path):
    """100M Atari transitions are ~659 GiB: numpy would only reserve them, and the kernel kill the
    rank once the buffer filled past the pod's limit, hours in, to be restarted and killed again."""
    job = make_job(tmp_path, world_size=1, algorithm="dqn", env={"id": "ALE/Pong-v5", "numEnvs": 1},
                   dqn={"bufferSize": 100_000_000}, totalTimesteps=10**9)  # a budget that fills it (budget_rows)
    started = time.monotonic()
    assert Ranks(job).wait(timeout=60) == [contract.EXIT_CONFIG_ERROR]
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CONFIG_ERROR}: spec.dqn.bufferSize: a replay buffer of 100,000,000 "
                             "transitions of ALE/Pong-v5 takes 658.6 GiB per rank"), reason
    assert time.monotonic() - started < 30


def test_a_held_metrics_port_ends_the_rank_naming_the_field_and_retryable(tmp_path):
    """Another container of the pod (or a socket of anything else) holding the rank's
    metrics port: the rank says which port and field, as Crashed (a restart may find it
    free), not bind()'s traceback."""
    job = make_job(tmp_path, world_size=1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", job.metrics_port(0)))
        holder.listen()
        ranks = Ranks(job)
        assert ranks.wait(timeout=60) == [1]
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CRASHED}: metrics port {job.metrics_port(0)} on 127.0.0.1"), reason
    assert "spec.metrics.port" in reason and "Traceback" not in ranks.log(0)
