"""DDP maths with real gloo processes: a 2-rank update equals one process on
the concatenated batch; ranks stay equal; counters add up; resume broadcasts."""

import json
import os

import pytest
import torch
from kuberl_trainer import checkpoint, distributed

from .support import Ranks, check_graphed_ranks, make_job, run_workers


@pytest.fixture(scope="module")
def two_ranks_and_plain(tmp_path_factory):
    ddp, plain = tmp_path_factory.mktemp("ddp"), tmp_path_factory.mktemp("plain")
    return run_workers("equivalence", ddp, 2), run_workers("equivalence", plain, 1)[0]


def test_two_half_batches_equal_one_concatenated_batch(two_ranks_and_plain):
    ranks, plain = two_ranks_and_plain
    moved = False
    for name, expected in plain["after_one"].items():
        torch.testing.assert_close(ranks[0]["after_one"][name], expected, rtol=1e-5, atol=1e-6)
        moved |= not torch.allclose(expected, ranks[0]["after_many"][name])
    assert moved
    for got, expected in zip(ranks[0]["moments"], plain["moments"], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)  # sum vs mean, no_sync scaling


def test_parameters_stay_equal_across_ranks(two_ranks_and_plain):
    ranks, _ = two_ranks_and_plain
    for name, tensor in ranks[0]["after_many"].items():
        assert torch.equal(tensor, ranks[1]["after_many"][name]), name


def test_episode_counts_differ_per_rank_and_sum_globally(two_ranks_and_plain):
    ranks, _ = two_ranks_and_plain
    local = [r["local_episodes"] for r in ranks]
    assert local[0] != local[1] and sum(local[0]) > 0
    assert ranks[0]["global_episodes"] == ranks[1]["global_episodes"] == [a + b for a, b in zip(*local, strict=True)]


def test_ranks_see_different_first_observations(two_ranks_and_plain):
    ranks, _ = two_ranks_and_plain
    assert not (ranks[0]["first_obs"] == ranks[1]["first_obs"]).all(axis=1).any()


def test_right_after_resume_every_rank_holds_the_saved_state(tmp_path):
    job = make_job(tmp_path, checkpoint={"everyUpdates": 5})
    ranks = Ranks(job)
    ranks.wait_for_updates(12)
    ranks.kill()
    _, saved = checkpoint.load_newest(str(job.checkpoint_dir))
    assert saved["counters"]["updates"] >= 10

    out = tmp_path / "resume"
    out.mkdir()
    config = {**job.config, "paths": {**job.config["paths"], "checkpointDir": str(job.checkpoint_dir)}}
    (out / "config.json").write_text(json.dumps(config))
    for state in run_workers("resume", out, 2):
        assert state["counters"] == saved["counters"]
        for name, tensor in saved["agent"].items():
            assert torch.equal(state["agent"][name], tensor), name
        for key, value in saved["optimizer"]["state"].items():
            for field, tensor in value.items():
                assert torch.equal(state["optimizer"]["state"][key][field], tensor), (key, field)


@pytest.fixture(scope="module")
def two_rank_scenarios(tmp_path_factory) -> dict[str, list[dict]]:
    """workers.two_rank_scenarios: what each rank saw of each of its scenarios, by scenario."""
    ranks = run_workers("two_rank_scenarios", tmp_path_factory.mktemp("scenarios"), 2)
    return {scenario: [seen[scenario] for seen in ranks] for scenario in ranks[0]}


def test_fused_ranks_start_from_rank0_weights_without_constructing_ddp(two_rank_scenarios):
    """The fused path takes of DDP only its initial broadcast
    (distributed.take_rank0_parameters): ranks seeded differently still start
    equal, DQN's target equal to its online network, and torch._dynamo (which
    DDP's constructor imports, 0.8 s) stays unimported."""
    ranks = two_rank_scenarios["initial"]
    for part in ("ppo", "dqn", "dqn_target"):
        for name, tensor in ranks[0][part].items():
            assert torch.equal(tensor, ranks[1][part][name]), (part, name)
    for name, tensor in ranks[0]["dqn"].items():
        assert torch.equal(tensor, ranks[0]["dqn_target"][name]), name
    assert [r["dynamo_imported"] for r in ranks] == [False, False]


def test_ranks_with_different_networks_refuse_to_start(tmp_path):
    ranks = run_workers("mismatch", tmp_path, 2)
    for r in ranks:
        assert r["error"] is not None and "different sizes" in r["error"] and "same spec" in r["error"], r


@pytest.fixture(scope="module")
def gradient_sync(tmp_path_factory):
    return run_workers("gradient_sync", tmp_path_factory.mktemp("sync"), 2)


def test_gradient_all_reduce_sums_on_time_and_late_and_reports_a_lost_peer(gradient_sync):
    """distributed.all_reduce_gradient (the fused steps' one sync): it yields
    the CPU while it waits, so it must still sum when the peer is later than
    its spin window, and a peer that leaves must surface as PeerLost on the
    rank still waiting, not as a hang or a bare RuntimeError."""
    ranks = gradient_sync
    for r in ranks:
        assert torch.equal(r["on_time"], torch.full((1000,), 3.0))
        assert torch.equal(r["late"], torch.full((1000,), 3.0))
    assert ranks[0]["lost"] is not None, "rank 0 summed with a peer that had left"
    # one engine: each gradient sum is one torch.distributed all-reduce of the whole flat buffer
    assert ranks[1]["through_torch"] == [1000, 1000]
    # the window the process group chose from this machine's CPU quota, for 2 processes of one pod
    assert [r["yield"] for r in ranks] == [distributed.yield_window(distributed.read_cpu_quota(), 2)] * 2


def test_processes_of_one_pod_split_its_cpus(gradient_sync):
    """LOCAL_WORLD_SIZE processes share a pod's CPUs: each takes its own
    slice (its gloo threads then wake on the core its training thread yields),
    and never more torch threads than it has CPUs."""
    ranks = gradient_sync
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one CPU: nothing to split")
    slices = [set(r["cpus"]) for r in ranks]
    assert all(slices) and not slices[0] & slices[1] and slices[0] | slices[1] <= allowed
    assert len(slices[0]) == len(slices[1])
    assert all(r["threads"] <= len(s) for r, s in zip(ranks, slices, strict=True))


def test_gloos_event_loop_never_preempts_the_worker_holding_its_lock(gradient_sync):
    """Every gloo event loop thread of a rank is SCHED_BATCH
    (distributed.calm_gloo_loop). Found by name: this fails, rather than
    silently losing the fix, if a torch upgrade renames the thread."""
    for r in gradient_sync:
        assert r["loop_policies"] and all(p == os.SCHED_BATCH for p in r["loop_policies"]), r["loop_policies"]


def test_bytes_of_every_rank_reach_rank_0_whole_and_unpickled(tmp_path):
    """Deterministic mode's per-rank state travels as checkpoint.encode's bytes (gather_bytes), where
    gather_object had rank 0 unpickle whatever a peer that passed for a rank sent it."""
    ranks = run_workers("gather", tmp_path, 3)
    assert ranks[0]["gathered"] == [b"\x07" * 5, b"", b"\x09" * 3]
    assert ranks[1]["gathered"] is None and ranks[2]["gathered"] is None


def test_a_stop_one_rank_is_asked_for_while_learning_ends_every_ranks_learning_after_the_same_epoch(two_rank_scenarios):
    """A stop is read between epochs, every rank's in one all-reduce: rank 1's signal, in its second epoch,
    ends both ranks' learning after that epoch (the same backward passes: DDP would hang otherwise) and
    ends the run at this update on both. It waited for every epoch, and then a whole update more."""
    ranks = two_rank_scenarios["stop_while_learning"]
    assert [(r["epochs_run"], r["steps"], r["stop"]) for r in ranks] == [(2, 4, True)] * 2
    for name, tensor in ranks[0]["agent"].items():
        assert torch.equal(tensor, ranks[1]["agent"][name]), name


def test_a_stop_one_rank_is_asked_for_while_dqn_learns_ends_every_ranks_gradient_steps_at_the_same_vote(two_rank_scenarios):
    """DQN read a stop at its iteration's all-reduce alone: a stop while it learned waited for every gradient step
    (5 s on the Pong example; with gradientSteps in the hundreds, past a pod's grace period). Now, as PPO's epochs,
    its steps end at the next vote (every 16 of 64 while untimed): rank 1's stop at step 20 ends both at 32."""
    ranks = two_rank_scenarios["dqn_stop_while_learning"]
    for rank in ranks:
        *before, (steps_run, stopped) = rank["reports"]
        assert (steps_run, stopped) == (32, True) and all(not stop for _, stop in before), rank["reports"]
        assert rank["steps"] == 32
    for name, tensor in ranks[0]["agent"].items():
        assert torch.equal(tensor, ranks[1]["agent"][name]), name


def test_ranks_whose_epochs_take_milliseconds_read_a_stop_at_the_rollouts_all_reduce_alone(two_rank_scenarios):
    """A vote is an all-reduce (3 ms between two ranks on a loaded 2-core machine): CartPole's epochs, a few ms,
    would pay one per epoch for a stop that waits for one short update at most."""
    ranks = two_rank_scenarios["votes_where_epochs_are_long"]
    for rank in ranks:
        assert rank["counts"] == [1 + 4, 1, 1]  # the rollout's all-reduce, then one vote per epoch until measured
        assert rank["stops"] == [False, False, True]  # rank 1's stop in the second update's learning: the third's
        assert rank["epoch_seconds"] < rank["vote_seconds"] / 4  # measured (not inf), and short beside the votes' period


def test_the_graphed_learners_between_two_gloo_ranks_learn_what_ddp_learns(tmp_path):
    """workers.graphed_ranks, as tests/gpu/test_nccl_ranks.py runs it on two GPUs over NCCL, here on gloo with
    graph=False: the worker and the checks a multi-GPU node will run, run where there is none."""
    ranks = run_workers("graphed_ranks", tmp_path, 2)
    check_graphed_ranks(ranks, "gloo")
    assert not any(learner["captured"] for seen in ranks for learner in seen["learners"].values())


def test_dqns_graphed_learner_keeps_ranks_equal_and_learns_what_ddp_learns(two_rank_scenarios):
    """learners.GraphedQLearner (a GPU rank's DQN learner in fp32) sums one flat gradient between its
    graphs and takes rank 0's weights without DDP: two ranks that started apart end equal, their target
    networks too, at the weights DDP's reference learner reaches on the same batches."""
    ranks = two_rank_scenarios["graphed_q"]
    for name in ("reference", "graphed"):
        for a, b in zip(ranks[0][name]["agent"], ranks[1][name]["agent"], strict=True):
            assert torch.equal(a, b), name
    for name in ("reference", "graphed"):
        for a, b in zip(ranks[0][name]["target"], ranks[1][name]["target"], strict=True):
            assert torch.equal(a, b), name  # rank 0's weights copied to the target everywhere
    for a, b in zip(ranks[0]["graphed"]["agent"], ranks[0]["reference"]["agent"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # a sum then / 2 against DDP's / 2 then sum
    assert ranks[0]["graphed"]["allreduces"] == 10  # one per gradient step: 5 draws of 2
