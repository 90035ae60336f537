"""The real trainer and its session as a single process runs them (rank 0 of 1, on the CPU), for the unit tests
that train CartPole for a few updates: test_trainer_best_model.py, test_trainer_eval_while_training.py,
test_trainer_resume_marker.py and test_boundary_checkpoint.py."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable

import torch
from kuberl.core import trainerconfig
from kuberl.core.spec import JobSpec
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session
from kuberl_trainer.distributed import Dist

from tests.support.jobs import make_job

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
# Blocks that make each algorithm learn within a few hundred timesteps of CartPole.
SMALL_BLOCKS = {"ppo": {"numSteps": 16}, "dqn": {"learningStarts": 4, "batchSize": 4, "bufferSize": 256},
                "sac": {"learningStarts": 4, "batchSize": 4, "bufferSize": 256, "hiddenSizes": [16]},
                "td3": {"learningStarts": 4, "batchSize": 4, "bufferSize": 256, "hiddenSizes": [16]}}
# The env each algorithm's every-algorithm tests run on: one whose actions its networks emit.
ENV_OF = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1", "td3": "Pendulum-v1"}


def small_job(name: str):
    """The job builder with algorithm `name`, its SMALL_BLOCKS block and its ENV_OF env."""
    return make_job().algorithm(name, **SMALL_BLOCKS[name]).replace(env={"id": ENV_OF[name]})


def one_process_run(spec: JobSpec, restart: int = 0,
                    log: Callable[[str], None] = lambda _line: None) -> tuple[object, session.TrainingSession]:
    """The trainer `spec` names (its env, 2 envs, seed 1, its totalTimesteps) and its TrainingSession at
    generation `restart`, as the trainer's entry point builds them; checkpoints go under KUBERL_FS_ROOT."""
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    trainer = entry.ALGORITHMS[spec.algorithm].make(ONE_PROCESS, spec.hyperparameters, spec.env.id, 2, {},
                                                    spec.total_timesteps, 1, restart)
    return trainer, session.TrainingSession(config, ONE_PROCESS, None, restart, threading.Event(), log=log)


def scored_evaluations(trainer) -> list[tuple[int, int, float]]:
    """trainer.evaluate, still the real evaluation, with each call's (updates, global_step, return) appended to the
    list returned, as of the update it runs after."""
    evaluate, scored = trainer.evaluate, []

    def evaluate_and_record(*args, **kwargs):
        scored.append((trainer.counters.updates, trainer.counters.global_step, evaluate(*args, **kwargs)))
        return scored[-1][2]

    trainer.evaluate = evaluate_and_record
    return scored


def progress_rows(run: session.TrainingSession) -> list[dict]:
    """The run's progress.jsonl, a dict a line (what `kuberl plot` and a run's summary read)."""
    with open(os.path.join(run.checkpoint_dir, "progress.jsonl")) as f:
        return [json.loads(line) for line in f]


def generation(spec: JobSpec, restart: int, stop_after: int | None = None) -> tuple[session.TrainingSession, list[str], str]:
    """One generation of the job, run to its budget or stopped (as SIGTERM stops it) after `stop_after` updates:
    its session, what it said, and its outcome."""
    said: list[str] = []
    trainer, run = one_process_run(spec, restart=restart, log=said.append)
    if stop_after is not None:
        after_update = run.after_update

        def stop_later(report, algorithm):
            after_update(report, algorithm)
            if algorithm.counters.updates - run.start_updates >= stop_after:
                run.stop.set()

        run.after_update = stop_later
    outcome = session.run_updates(trainer, run)
    run.finish(trainer, outcome)
    return run, said, outcome


def tensorboard_points(run: session.TrainingSession) -> dict[str, list[tuple[int, float]]]:
    """What the run's TensorBoard writer wrote, by tag (every point, read with TensorBoard's own reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run.scalars.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: sorted((e.step, e.value) for e in events.Scalars(tag)) for tag in events.Tags()["scalars"]}
