"""One algorithm boundary: every algorithm is chosen from __main__'s table,
implements session.Algorithm, runs session.run_updates through one
TrainingSession (final model included), and imports no other algorithm."""

import ast
import importlib
import inspect
import os
import threading
import time
import typing
from pathlib import Path

import pytest
import torch
from kuberl.core import contract, trainerconfig
from kuberl.core.spec import JobSpec
from kuberl_trainer import __main__ as entry
from kuberl_trainer import checkpoint, session
from kuberl_trainer.distributed import Dist

from tests.support.jobs import make_job
from tests.unit.trainer_support import ENV_OF

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
BLOCKS = {"ppo": {"numSteps": 16}, "dqn": {"learningStarts": 32, "batchSize": 16, "bufferSize": 256},
          "sac": {"learningStarts": 32, "batchSize": 16, "bufferSize": 256, "hiddenSizes": [16]},
          "td3": {"learningStarts": 32, "batchSize": 16, "bufferSize": 256, "hiddenSizes": [16]}}
ALGORITHM_MODULES = {name: entry.make.__module__ for name, entry in entry.ALGORITHMS.items()}


def imported_modules(module_name: str) -> set[str]:
    """Every module `module_name` imports, relative imports resolved."""
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    package = module.__package__
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from . import ppo` imports a module
    return found


def test_each_algorithm_the_spec_offers_lives_in_its_own_module():
    offered = {a for arg in typing.get_args(JobSpec.model_fields["algorithm"].annotation) for a in typing.get_args(arg)}
    assert set(entry.ALGORITHMS) == offered
    assert len(set(ALGORITHM_MODULES.values())) == len(ALGORITHM_MODULES)


@pytest.mark.parametrize("name", sorted(ALGORITHM_MODULES))
def test_no_algorithm_module_imports_another(name):
    others = set(ALGORITHM_MODULES.values()) - {ALGORITHM_MODULES[name]}
    assert imported_modules(ALGORITHM_MODULES[name]) & others == set()


def test_the_session_imports_no_algorithm():
    assert imported_modules(session.__name__) & set(ALGORITHM_MODULES.values()) == set()


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_every_algorithm_has_the_protocol_methods_with_their_parameters(name):
    trainer_class = entry.ALGORITHMS[name].make
    methods = {m: f for m, f in vars(session.Algorithm).items() if inspect.isfunction(f) and not m.startswith("_")}
    assert methods
    for method, declared in methods.items():
        implemented = getattr(trainer_class, method, None)
        assert implemented is not None, method
        assert list(inspect.signature(implemented).parameters) == list(inspect.signature(declared).parameters), method


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_every_algorithm_trains_and_writes_its_final_model_through_one_session(name, tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm(name, **BLOCKS[name]).replace(env={"id": ENV_OF[name]}).with_spec(
        totalTimesteps=256, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS[name].make(ONE_PROCESS, spec.hyperparameters, ENV_OF[name], 2, {}, 256, 1, 0)
    for member in session.Algorithm.__annotations__:
        assert hasattr(trainer, member), member
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lambda _line: None)
    outcome = session.run_updates(trainer, training)
    assert outcome == "budget" and trainer.budget_spent() and trainer.counters.global_step > 0
    training.finish(trainer, outcome)
    model = torch.load(training.final_model, weights_only=True)  # tensors and plain values only
    assert (model["algorithm"], model["env_id"], model["timesteps"]) == (name, ENV_OF[name], trainer.counters.global_step)
    for key, tensor in trainer.agent.state_dict().items():
        assert torch.equal(model["agent"][key], tensor), key


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_every_algorithms_rank_state_is_plain_data_for_native_envs_and_none_for_others(name):
    hp = make_job().minimal().with_spec(algorithm=name, totalTimesteps=10_000).spec().hyperparameters
    make = entry.ALGORITHMS[name].make
    # gymnasium's native vector envs (CartPole's) have discrete actions: SAC's and TD3's envs are all of the other kind
    native, other = (None, ENV_OF[name]) if ENV_OF[name] == "Pendulum-v1" else ("CartPole-v1", "Acrobot-v1")
    if native is not None:
        trainer = make(ONE_PROCESS, hp, native, 2, {}, 10_000, 1, 0)
        trainer.update(stop_vote=False, success_vote=False)
        saved = checkpoint.decode(checkpoint.encode({"per_rank": [trainer.rank_state()]}))["per_rank"][0]
        resumed = make(ONE_PROCESS, hp, native, 2, {}, 10_000, 1, 1)
        resumed.load_rank(saved)
        assert (resumed.next_obs == trainer.next_obs).all()
    assert make(ONE_PROCESS, hp, other, 2, {}, 10_000, 1, 0).rank_state() is None


@pytest.mark.parametrize("reported_at_the_last_update", [False, True])
def test_the_run_ends_with_one_progress_line_for_its_last_steps_never_a_rate_of_zero(
        reported_at_the_last_update, tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=128, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 128, 1, 0)
    lines: list[str] = []
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lines.append)
    outcome = session.run_updates(trainer, training)
    if reported_at_the_last_update:  # what after_update does when a progress line falls due then
        training.report(trainer.counters.global_step)
    training.finish(trainer, outcome)
    progress = [line for line in lines if line.startswith("timesteps ")]
    assert [line.split()[1] for line in progress].count(str(trainer.counters.global_step)) == 1, progress
    assert not any(" steps/s 0 " in line for line in progress), progress


def test_a_stopped_rank_names_the_checkpoint_where_the_pod_sees_it_and_only_rank_0_names_it(tmp_path, monkeypatch):
    """Ctrl-C under `kuberl run` said rank 1 was "resumable from …/pods/job-1/root/checkpoints/…", a directory rank 1
    never mounts, and rank 0's host path past the console's mapping of /checkpoints/ (the path kuberl's own line shows)."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=128, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 128, 1, 0)
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lambda _line: None)
    trainer.update(stop_vote=True, success_vote=False)
    message = training.finish(trainer, "stopped")
    assert message == f"stopped at timesteps {trainer.counters.global_step}; resumable from {config.checkpoint_dir}"
    assert config.checkpoint_dir.startswith("/checkpoints/") and str(tmp_path) not in message
    assert session.stopped_message(900, False, config.checkpoint_dir) == "stopped at timesteps 900; resumable from rank 0's checkpoint"

    lines: list[str] = []
    resumed = session.TrainingSession(config, ONE_PROCESS, None, 1, threading.Event(), log=lines.append)
    resumed.load()
    said = [line for line in lines if line.startswith("resuming from ")]
    assert said and said[0].startswith(f"resuming from {config.checkpoint_dir}/ckpt-"), lines  # not the host's pods/…/root


def test_a_resumed_run_states_the_timesteps_left_where_a_fresh_one_states_its_budget(tmp_path, monkeypatch):
    """The start line said "at least 8 updates of 32 steps" after a resume at 96 of 256 timesteps: the whole
    budget again, as if the run began anew. Once the checkpoint is loaded, the run says what is left."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=256, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))

    def run_said(restart: int, updates: int) -> tuple[list[str], object]:
        trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 256, 1, restart)
        lines: list[str] = []
        stop = threading.Event()
        training = session.TrainingSession(config, ONE_PROCESS, None, restart, stop, log=lines.append)
        update = trainer.update

        def update_then_stop(*args):
            report = update(*args)
            if trainer.counters.updates == updates:
                stop.set()
            return report

        monkeypatch.setattr(trainer, "update", update_then_stop)
        training.finish(trainer, session.run_updates(trainer, training))
        return lines, trainer

    first, trainer = run_said(0, 3)
    assert "training 256 timesteps: at least 8 updates of 32 steps" in first, first
    done = trainer.counters.global_step
    again, _ = run_said(1, 4)
    assert f"resuming at {done} of 256 timesteps: {256 - done} left, at least {-(-(256 - done) // 32)} updates of 32 steps" in again, again


def test_a_rank_other_than_0_that_spent_the_budget_claims_neither_an_eval_return_nor_the_model(tmp_path, monkeypatch):
    """Rank 1 said "eval return -; model …/final-model.pt [final … evalReturn=none]" beside rank 0's "eval return 9.6":
    it neither evaluates nor writes the model (nor mounts the checkpoint volume)."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=64, workers=2, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    rank1 = Dist(1, 2, 0, 1, torch.device("cpu"), None)
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 64, 1, 0)
    training = session.TrainingSession(config, rank1, None, 0, threading.Event(), log=lambda _line: None)
    trainer.update(stop_vote=False, success_vote=False)
    message = training.finish(trainer, "budget")
    assert message == f"budget of 64 timesteps spent (timesteps {trainer.counters.global_step}); rank 0 writes the model"
    assert not os.path.exists(training.final_model)


def test_the_last_progress_line_just_after_a_periodic_one_gives_a_rate_over_seconds_not_one_update(tmp_path, monkeypatch):
    """`kuberl run` of cartpole-dqn.yaml ended `timesteps 48127  steps/s 1,728` then `timesteps 48637  steps/s 77,375`:
    the final line's rate was one update's steps over the milliseconds since the periodic line."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=128, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    clock = [100.0]
    monkeypatch.setattr(session.time, "monotonic", lambda: clock[0])
    lines: list[str] = []
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lines.append)
    clock[0] = 105.0
    training.report(10_000)  # periodic, 5 s on
    clock[0] = 105.005
    training.report(10_500)  # the final line, one update later
    clock[0] = 115.005
    training.report(20_500)  # a periodic line after it measures from it again
    rates = [line.split("steps/s ")[1].split()[0] for line in lines if line.startswith("timesteps ")]
    assert rates == ["2,000", "2,098", "1,000"], lines


def test_a_checkpoint_volume_failing_at_start_or_at_a_save_ends_rank_0_naming_the_checkpoint_it_resumes_from(tmp_path, monkeypatch):
    """An I/O error reading the volume at start was a counted 'Crashed: OSError: [Errno 5]'; at a save after a resume
    it named nothing to resume from. Now both are CheckpointVolumeUnavailable, the save's naming the checkpoint loaded."""
    import errno

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    monkeypatch.setattr(checkpoint, "READ_RETRY_SECONDS", (0.0, 0.0, 0.0))
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=128, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 128, 1, 0)
    first = session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lambda _line: None)
    trainer.update(stop_vote=True, success_vote=False)
    first.finish(trainer, "stopped")
    saved = checkpoint.list_checkpoints(first.checkpoint_dir)
    assert len(saved) == 1

    real_read = checkpoint._read_bytes

    def unreadable(path, limit):
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    monkeypatch.setattr(checkpoint, "_read_bytes", unreadable)
    checkpoint._verified.clear()
    at_start = session.TrainingSession(config, ONE_PROCESS, None, 1, threading.Event(), log=lambda _line: None)
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as failed:
        at_start.load()
    assert str(failed.value).startswith(f"reading {at_start.checkpoint_dir} failed with EIO"), str(failed.value)
    assert "its checkpoints are left as they are" in str(failed.value)
    assert checkpoint.list_checkpoints(first.checkpoint_dir) == saved

    monkeypatch.setattr(checkpoint, "_read_bytes", real_read)
    resumed = session.TrainingSession(config, ONE_PROCESS, None, 2, threading.Event(), log=lambda _line: None)
    resumed.load()
    trainer.update(stop_vote=False, success_vote=False)
    monkeypatch.setattr(checkpoint, "write_atomic", lambda path, data: unreadable(path, 0))
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as at_save:
        resumed.save(trainer)
    assert f"last good checkpoint: {os.path.basename(saved[0])} (same directory)" in str(at_save.value), str(at_save.value)


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_a_stop_asked_for_while_the_rollout_is_collected_ends_that_update(name, tmp_path, monkeypatch):
    """The stop vote was read as an update began: a Ctrl-C (or a pod's SIGTERM) during a rollout waited for the whole
    next rollout too. On a 2-core laptop running the Pong example (a rollout of about two minutes) the ranks were
    killed past the 120 s grace, no checkpoint saved."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm(name, **BLOCKS[name]).with_spec(totalTimesteps=100_000, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS[name].make(ONE_PROCESS, spec.hyperparameters, ENV_OF[name], 2, {}, 100_000, 1, 0)
    stop = threading.Event()
    step = trainer.envs.step

    def step_then_stop(actions):  # the signal handler's set(), while the first rollout is collected
        stop.set()
        return step(actions)

    monkeypatch.setattr(trainer.envs, "step", step_then_stop)
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, stop, log=lambda _line: None)
    assert session.run_updates(trainer, training) == "stopped"
    assert trainer.counters.updates == 1


def ppo_stopped_while_learning(stop_at_step: int, tmp_path, monkeypatch, **ppo) -> tuple[list, object, object]:
    """A PPO run (4 epochs of 2 minibatches) whose stop is asked for at its first update's `stop_at_step`th
    minibatch step: the reports, the trainer and the session."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16, updateEpochs=4, numMinibatches=2, **ppo).with_spec(
        totalTimesteps=100_000, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 100_000, 1, 0)
    stop, steps, reports = threading.Event(), [], []
    step, update = trainer.learner.step, trainer.update

    def step_then_stop(*args):  # the signal handler's set(), while a minibatch is learned from
        steps.append(1)
        if len(steps) == stop_at_step:
            stop.set()
        return step(*args)

    def update_recording(*args):
        reports.append(update(*args))
        return reports[-1]

    monkeypatch.setattr(trainer.learner, "step", step_then_stop)
    monkeypatch.setattr(trainer, "update", update_recording)
    training = session.TrainingSession(config, ONE_PROCESS, None, 0, stop, log=lambda _line: None)
    assert session.run_updates(trainer, training) == "stopped"
    return reports, trainer, training


@pytest.mark.parametrize("ppo", [{}, {"learnWhileCollecting": True}], ids=["synchronous", "learning-while-collecting"])
def test_a_stop_asked_for_while_ppo_learns_ends_the_learning_after_that_epoch_with_a_whole_checkpoint(ppo, tmp_path, monkeypatch):
    """The stop vote was read at the rollout's all-reduce only: a stop during learning waited for every epoch.
    On a 2-core CPU the Pong example's 4 epochs take 13-18 s per rank (3-4 s each), four ranks sharing the
    cores about four times that. Now every rank reads it, together, between epochs, as target KL ends them."""
    reports, trainer, training = ppo_stopped_while_learning(3, tmp_path, monkeypatch, **ppo)  # the second epoch's first step
    assert [(r.epochs_run, r.stop) for r in reports] == [(2, True)]
    assert trainer.counters.updates == 1
    training.finish(trainer, "stopped")
    resumed = session.TrainingSession(training.config, ONE_PROCESS, None, 1, threading.Event(), log=lambda _line: None)
    shared, _ = resumed.load()
    assert shared["counters"] == vars(trainer.counters)  # the update counted whole: its rollout, learned from twice
    for name, tensor in trainer.agent.state_dict().items():
        assert torch.equal(shared["agent"][name], tensor), name


def test_a_stop_asked_for_in_a_deterministic_run_waits_for_every_epoch(tmp_path, monkeypatch):
    """A resume of an update cut short would train other weights than the uninterrupted run."""
    was = torch.get_deterministic_debug_mode()
    # the trainer's own switch (seed_everything): use_deterministic_algorithms also imports torch._inductor
    torch.set_deterministic_debug_mode("error")
    try:
        reports, _, _ = ppo_stopped_while_learning(3, tmp_path, monkeypatch)
    finally:
        torch.set_deterministic_debug_mode(was)
    assert [(r.epochs_run, r.stop) for r in reports] == [(4, True)]


def test_a_stop_while_ppo_learns_ends_the_rollout_collected_alongside_at_its_next_step(monkeypatch):
    """learnWhileCollecting: learning ended at the stop vote, then the update waited for the next rollout, collected
    on its own thread, to its last step, to throw it away (the run stops at this update). It ends at its next step."""
    spec = make_job().algorithm("ppo", numSteps=64, updateEpochs=4, numMinibatches=2, learnWhileCollecting=True).with_spec(
        totalTimesteps=100_000, workers=1, seed=1).spec()
    trainer = entry.ALGORITHMS["ppo"].make(ONE_PROCESS, spec.hyperparameters, "CartPole-v1", 2, {}, 100_000, 1, 0)
    stop, ahead, step, env_step = threading.Event(), [], trainer.learner.step, trainer.envs.step

    def slow_step_ahead(actions):  # the collector thread's steps take 50 ms: 3.2 s for the rollout whole
        if threading.current_thread().name.startswith("rollout"):
            ahead.append(1)
            time.sleep(0.05)
        return env_step(actions)

    def step_then_stop(*args):
        stop.set()
        return step(*args)

    monkeypatch.setattr(trainer.envs, "step", slow_step_ahead)
    monkeypatch.setattr(trainer.learner, "step", step_then_stop)
    report = trainer.update(stop.is_set, False)
    assert (report.epochs_run, report.stop) == (1, True)
    assert 0 < len(ahead) < 32, ahead  # the rollout ahead began, and ended long before its 64 steps
    assert not trainer.rollout_ready  # nothing half-collected is learned from
    monkeypatch.setattr(trainer.learner, "step", step)
    collected: list[int] = []
    monkeypatch.setattr(trainer.envs, "step", lambda actions: collected.append(1) or env_step(actions))
    trainer.update(False, False)
    assert len(collected) == 2 * 64  # a later update collects its own rollout whole, and the next one ahead
    trainer.collector.shutdown()


@pytest.mark.parametrize(("algorithm", "label"), [("ppo", "return"), ("dqn", "return"),
                                                  ("sac", "exploring return"), ("td3", "exploring return")])
def test_the_progress_lines_training_return_is_named_for_how_its_episodes_act(algorithm, label, tmp_path, monkeypatch):
    """Pendulum's SAC said `return -1260.4  eval -188.1` as it succeeded: its episodes' mean, learningStarts' random
    actions and sampled ones after, read as not learning beside the deterministic policy's evaluation."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm(algorithm, **BLOCKS[algorithm]).replace(env={"id": ENV_OF[algorithm]}).with_spec(
        totalTimesteps=128, workers=1, seed=1).spec()
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    lines: list[str] = []
    session.TrainingSession(config, ONE_PROCESS, None, 0, threading.Event(), log=lines.append).report(64)
    [progress] = [line for line in lines if line.startswith("timesteps ")]
    assert progress.endswith(f"  {label} -  eval -"), progress
