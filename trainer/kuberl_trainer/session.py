"""The one boundary between the algorithms and everything around them.

An algorithm (ppo.py, dqn.py, sac.py, td3.py; chosen from the table in __main__) implements
`Algorithm`: one `update()` at a time, its replicated and per-rank state,
evaluation and its final model's contents. `run_updates` is the loop every
algorithm runs; a `Session` is what the loop calls at update boundaries:
`TrainingSession` does metrics, the progress line and progress.jsonl,
rank-0 evaluation and its stop vote, checkpoints (save, resume, broadcast)
and the final model; `BareSession` does nothing, for benchmarks and tests.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from kuberl.core import contract, fingerprint, names, safetext
from kuberl.core.trainerconfig import TrainerConfig

from . import checkpoint, distributed, evaluation
from .device import on_host, stream_after_current
from .distributed import Dist, PeerLost
from .divergence import (
    Divergence,
    advice,
    continuing,
    diverged_message,
    named,
    nonfinite_losses,
)
from .envs import rank_seed
from .metrics import TrainerMetrics
from .paths import host_path, on_this_machine, pod_path
from .startup import Startup
from .tensorboard import Scalars, hyperparameters, run_name
from .tracking import TrackedRun, close_all
from .tracking_mlflow import mlflow_run, tags
from .tracking_wandb import wandb_run

PROGRESS_EVERY_SECONDS = 5.0
RECENT_EPISODES = 100
EVAL_SEED_STREAM = 1_000_003  # keeps evaluation seeds apart from every rank's
SESSION_KEYS = ("elapsed_seconds", "per_rank", "eval_return", "trained_as", "best_eval_return")  # what a checkpoint holds besides the algorithm's shared state
MAX_COUNTER = 2**62  # counters are all-reduced as int64
# In the checkpoint directory while a stop asked of rank 0 has no checkpoint yet: a start that finds it knows the last
# stop was killed before its save (no temp file tells that when the kill came before the first byte was written).
STOP_PENDING = ".stop-pending.json"


# --- What an algorithm and the loop share ----------------------------------------



# Rank 0's evaluations (every other rank waiting for them at the next all-reduce) that took at least this share of its
# time, after this many of them, are said once, with what trains faster
EVALUATION_SHARE_NOTED = 0.5
EVALUATIONS_BEFORE_NOTE = 3


def evaluation_share_note(eval_seconds: float, wall_seconds: float, evaluations: int, eval_episodes: int,
                          eval_every: int) -> str | None:
    """What to say when rank 0's evaluations have taken most of this generation's time (None: they have not): the
    CartPole example's 20 episodes every 5 updates, on LunarLander-v3's episodes of up to 1,000 steps, stepped more
    evaluation than training, and the run crawled at a fifth of its speed without a word of why."""
    if evaluations < EVALUATIONS_BEFORE_NOTE or wall_seconds <= 0 or eval_seconds < EVALUATION_SHARE_NOTED * wall_seconds:
        return None
    return (f"evaluation took {eval_seconds / wall_seconds:.0%} of rank 0's time so far ({eval_seconds / evaluations:.1f} s"
            f" for each of {evaluations}: {eval_episodes} episode(s) every {eval_every} update(s)), every rank waiting for it:"
            " a larger success.evalEvery, fewer success.evalEpisodes, or success.evalWhileTraining: true (rank 0 evaluates"
            " beside training) trains faster")


def update_statistics(report: UpdateReport) -> dict[str, float | None]:
    """An update's statistics as progress.jsonl records them: its losses (UpdateReport.losses: PPO's policy and value
    loss, entropy, approximate KL, clip fraction; DQN's TD loss and mean Q; SAC's) and its learning rate, each to
    6 significant digits; one that is not finite (a diverged loss) is null, which JSON can hold."""
    values = {name: float(value) for name, value in {**report.losses, "learning_rate": report.learning_rate}.items()}
    return {name: float(f"{value:.6g}") if math.isfinite(value) else None for name, value in values.items()}


def evaluation_due(updates: int, eval_every: int) -> bool:
    """Whether rank 0 evaluates after update `updates`: every success.evalEvery updates, with or without a
    targetReturn (an untargeted run logs, exports and keeps the best of its evaluations as a targeted one does)."""
    return updates % eval_every == 0


def final_evaluation_due(outcome: str, updates: int, evaluated_at: int | None, started_at: int, target_met: bool,
                         eval_every: int) -> bool:
    """Whether rank 0 evaluates the final weights as the run ends: its budget spent after an update this generation
    trained (`started_at`: the updates it resumed at) that no evaluation scored (`evaluated_at`: the updates of the
    weights last evaluated, None: none yet), and no target met already. Without it a budget ending between two
    evalEvery updates left the model the user gets unscored: the last eval return, progress.jsonl, the metric and
    best-model.pt were those of older weights. A stop ends without one (the grace period is the checkpoint's), and so
    does a run shorter than evalEvery updates: an evalEvery above the budget is how evaluation is kept off (make
    gpu-check's rates, a Pong test's untrained episodes of thousands of steps)."""
    return (outcome == "budget" and updates > started_at and evaluated_at != updates and not target_met
            and updates >= eval_every)


# What a stop's grace period keeps after the tracked runs' end: rank 0's termination message and exit
EXIT_MARGIN_SECONDS = 2.0


def stop_deadline(stop_asked_at: float | None, grace_seconds: float) -> float | None:
    """The monotonic time by which rank 0 stops waiting on tracking services, where a stop was asked at
    `stop_asked_at`: its grace period less EXIT_MARGIN_SECONDS. None: no stop, no such bound."""
    return None if stop_asked_at is None else stop_asked_at + grace_seconds - EXIT_MARGIN_SECONDS


def meets_target(eval_return: float, target: float | None) -> bool:
    """Whether an evaluation stops the run: only a success.targetReturn that is set, and reached."""
    return target is not None and eval_return >= target


# A stop vote, or what reads it when the update's all-reduce is made (Session.stop_requested): a stop asked for while
# the rollout was collected then ends this update, where a vote read as the update began waited for the next one, a
# whole rollout more (on a 2-core laptop running the Pong example, longer than the grace period: killed unsaved).
Vote = bool | Callable[[], bool]

@dataclass
class Counters:
    """Global (all ranks) progress, identical on every rank."""

    global_step: int = 0
    updates: int = 0
    episodes: int = 0


@dataclass
class UpdateReport:
    """What one update tells the loop and the session (metrics, progress,
    checkpoints). `stop`, `target_met` and `diverged` are the ranks' votes, summed in
    the update's all-reduce; when the target is met nothing was learned. `diverged`: a rank
    saw a non-finite loss or state at the update before (the session's divergence_vote)."""

    counters: Counters
    local_steps: int
    episode_return_sum: float  # all ranks, episodes finished this update
    episode_return_count: int
    learning_rate: float
    losses: dict[str, float]
    rollout_seconds: float
    update_seconds: float
    allreduce_seconds: float
    epochs_run: int
    stop: bool = False
    target_met: bool = False
    episodes: list[tuple[int, float, int]] = field(default_factory=list)  # rank 0's own: (global step, return, length)
    diverged: bool = False


class Algorithm(Protocol):
    """A trainer for one algorithm, built as `make(ctx, hyperparameters,
    env_id, num_envs, env_kwargs, total_timesteps, seed, restart,
    env_backend=...)` (the table in __main__)."""

    ctx: Dist
    counters: Counters
    TENSORBOARD_TAGS: Mapping[str, tuple[str, float]]  # its statistics' CleanRL tags where not PPO's (tensorboard.Renames)
    total_timesteps: int  # the job's budget, in real transitions
    batch_per_rank: int  # env steps per rank per update
    divergence_vote: bool  # this rank's, carried by the next update's all-reduce (UpdateReport.diverged)

    def budget_spent(self) -> bool: ...
    def update(self, stop_vote: Vote, success_vote: bool) -> UpdateReport: ...
    def shared_state(self) -> dict:
        """Replicated state: identical on every rank, so rank 0 alone saves it."""
    def rank_state(self) -> dict | None:
        """This rank's own state, as plain data (deterministic mode only); None
        when it cannot be taken."""
    def load_shared(self, state: dict) -> None: ...
    def loaded_problem(self, state: dict) -> str | None:
        """Why a checkpoint's shared state, alike in kind, cannot be this job's (None: it can)."""
    def upgraded(self, shared: dict) -> tuple[dict, list[str]]:
        """A checkpoint's shared state written by an older trainer, in today's terms, and what changed."""
    def load_rank(self, state: dict) -> None: ...
    def rank_state_problem(self, own: object) -> str | None:
        """Why a checkpoint's state of this rank differs in kind from its own (None: alike)."""
    def evaluate(self, env_id: str, episodes: int, env_kwargs: dict, seed: int,
                 stop: Callable[[], bool] | None = None) -> float:
        """Raises evaluation.Interrupted when `stop()` says so before a step."""
    def frozen_copy(self) -> Algorithm:
        """The algorithm as it is now, to evaluate (and take a final model from) on another
        thread while training goes on: copies of its networks, normalisers and counters."""
    def final_model(self) -> dict:
        """What the final model file holds of this algorithm (weights, the
        network's shape, normalisers), as tensors and plain values; the
        session adds the env id, timesteps and evaluation return."""


class Session(Protocol):
    """The plumbing the loop calls at update boundaries."""

    restart: int
    resumed_from: str | None  # the checkpoint file load() read (rank 0 only)
    log: Callable[[str], None]  # a line for the run's log (rank 0's)

    def stop_requested(self) -> bool: ...
    def success_vote(self) -> bool: ...
    def divergence_vote(self) -> bool: ...
    def load(self) -> tuple[dict, dict | None] | None: ...
    def after_update(self, report: UpdateReport, algorithm: Algorithm) -> None: ...


def run_updates(algorithm: Algorithm, session: Session) -> str:
    """Resume from the session's checkpoint, then update until the budget is
    spent, rank 0's evaluation met the target, a stop was voted, or a rank saw a loss
    or state go non-finite. Returns "budget", "target", "stopped" or "diverged"."""
    loaded = session.load()
    if loaded is not None:
        shared, own = loaded
        shared, upgrades = algorithm.upgraded(shared)
        for line in upgrades:
            session.log(line)
        # every rank got the same state, so every rank refuses it alike (a config error, not a crash)
        state = {k: v for k, v in shared.items() if k not in SESSION_KEYS}
        if problem := checkpoint.mismatch(algorithm.shared_state(), state) or algorithm.loaded_problem(state):
            raise checkpoint.CheckpointMismatch(session.resumed_from or "rank 0 resumed from", problem,
                                                written_for(shared.get("trained_as"), getattr(session, "spec", None), problem))
        algorithm.load_shared(shared)
        if own is not None and (unlike := algorithm.rank_state_problem(own)):
            # a rank's own state is optional (deterministic mode's): one the file's editor changed is left out, as
            # a world size's that differs is, and the resume is not bitwise; loaded, it crashed every start
            session.log(f"the checkpoint's per-rank state is not this rank's ({unlike}): resuming without it")
        elif own is not None:
            algorithm.load_rank(own)
    session.log(budget_line(algorithm, resumed=loaded is not None))
    while not algorithm.budget_spent():
        algorithm.divergence_vote = session.divergence_vote()  # voted in the update's all-reduce, with no collective of its own
        try:
            report = algorithm.update(session.stop_requested, session.success_vote())  # the stop: read at the all-reduce
        except Exception as e:
            if not algorithm.divergence_vote:
                raise
            # weights this rank saw diverge failed the rollout before the vote (torch's sampling refuses NaN
            # probabilities): every rank holding them fails alike, and a peer that did not ends at its next collective
            session.log(f"update {algorithm.counters.updates + 1} failed on weights that diverged: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}")
            return "diverged"
        if report.diverged:  # before after_update: nothing of these weights is evaluated or saved
            return "diverged"
        if report.target_met:
            return "target"
        session.after_update(report, algorithm)
        if report.stop:
            return "stopped"
    return "budget"


def written_for(recorded: object, spec: Any, problem: str) -> str | None:
    """This job, described, where a checkpoint whose state has keys this trainer's lacks, or lacks some it has
    (`problem`, checkpoint.mismatch's), records it was trained as this job: another version of the trainer wrote it,
    not another job (a shape that differs is a network's, which `kuberl run --resume` may have changed). None else."""
    keys = " lacks " in problem or problem.endswith("which this job's has not")
    if not keys or spec is None or trained_as_problem(recorded) is not None or recorded != trained_as(spec):
        return None
    return describe_trained_as(recorded)


def budget_line(algorithm: Algorithm, resumed: bool) -> str:
    """What the run has left to train, said once its checkpoint is loaded: a resume states where it
    resumes, not the whole budget again. Updates are a floor: autoreset steps are not timesteps."""
    total, done = algorithm.total_timesteps, algorithm.counters.global_step
    per_update = algorithm.batch_per_rank * algorithm.ctx.world_size
    left = max(0, total - done)
    updates = f"at least {math.ceil(left / per_update):,} updates of {per_update:,} steps"
    if not resumed:
        return f"training {total:,} timesteps: {updates}"
    return f"resuming at {done:,} of {total:,} timesteps: {left:,} left, {updates}"


# --- Sessions ---------------------------------------------------------------------


class BareSession:
    """The Session protocol with no checkpoints, metrics or evaluation, for
    benchmarks and tests: records each update's report and asks to stop once
    `max_updates` are done (never, when None)."""

    restart = 0
    resumed_from = None

    def __init__(self, max_updates: int | None = None):
        self.max_updates, self.reports, self.logged = max_updates, [], []
        self.voted = False

    def log(self, line: str) -> None:
        self.logged.append(line)

    def stop_requested(self) -> bool:
        """True once, at the last update's all-reduce: a planned end, so that update learns whole
        (PPO reads a stop between its epochs too, where one asked for cuts the learning short)."""
        due = self.max_updates is not None and len(self.reports) >= self.max_updates - 1 and not self.voted
        self.voted |= due
        return due

    def success_vote(self) -> bool:
        return False

    def divergence_vote(self) -> bool:
        return False

    def load(self) -> None:
        return None

    def after_update(self, report: UpdateReport, algorithm: Algorithm) -> None:
        self.reports.append(report)


class TrainingSession:
    def __init__(self, config: TrainerConfig, ctx: Dist, metrics: TrainerMetrics | None,
                 restart: int, stop: threading.Event, log=print, startup: Startup | None = None):
        self.config, self.spec, self.ctx, self.metrics = config, config.spec, ctx, metrics
        self.startup = startup
        self.restart, self.stop, self.log = restart, stop, log
        self.checkpoint_dir = host_path(config.checkpoint_dir)
        self.final_model = host_path(config.final_model)
        # the best evaluated weights, beside the final model (the last ones), as SB3's EvalCallback keeps best_model
        self.best_model = os.path.join(os.path.dirname(self.final_model), names.BEST_MODEL) if self.final_model else None
        self.best_eval_return: float | None = None  # carried by checkpoints: a resumed run keeps the best of the earlier
        self.best_unmarked = False  # a new best, marked on its evaluation's progress.jsonl line
        self.started = time.monotonic()
        self.elapsed_before = 0.0  # wall seconds of earlier generations, from the checkpoint
        self.recent: deque[tuple[float, int]] = deque()
        self.eval_return: float | None = None
        self.evaluated_at: int | None = None  # the updates of the weights last evaluated (final_evaluation_due)
        self.start_updates = 0  # the updates this generation resumed at
        self.target_met = False
        self.last_report = (self.started, 0)
        self.report_before = self.last_report  # the line before the last: a final line's rate reaches back to it
        self.start_step = 0
        self.boundary = (0, 0)  # (global_step, updates) at the last update boundary: a state whole enough to save
        self.last_checkpoint = (-1, -1)  # (updates, global_step) of the newest checkpoint written or loaded
        self.resumed_from: str | None = None
        self.last_good: str | None = None  # the newest checkpoint known to load: named if the volume fails
        self.progress_unwritable = False
        # progress.jsonl's numbers, for TensorBoard, and what the run learns with (CleanRL's hyperparameters text)
        learned = fingerprint.learned_values(self.spec)
        self.scalars = Scalars(self.checkpoint_dir, log, hyperparameters(learned),
                               run_name(self.spec.env.id, self.spec.algorithm, self.spec.seed)) if ctx.is_main else None
        self.trackers = tracking_runs(config, learned, restart, log) if ctx.is_main else []  # more sinks of the same lines
        self.tensorboard_tags: Mapping[str, tuple[str, float]] = {}  # the algorithm's (after_update)
        self.last_update: UpdateReport | None = None  # its statistics go into progress.jsonl (update_statistics)
        self.grace_warned = False  # outlasts_grace said once
        self.evaluations = (0, 0.0)  # rank 0's on the training thread, and their seconds (evaluation_share_note)
        self.evaluation_share_said = False
        self.stop_lock = threading.Lock()  # STOP_PENDING: written once a stop is asked, removed once its checkpoint is
        self.stop_saved = False
        self.stop_asked_at = time.monotonic() if stop.is_set() else None  # where the grace period began (_mark_stop)
        self.exported = (0, 0)  # counter values already exported (steps, episodes)
        # spec.success.evalWhileTraining: rank 0 evaluates a frozen copy on a thread of its own
        self.evaluator = (ThreadPoolExecutor(1, thread_name_prefix="evaluation")
                          if ctx.is_main and self.spec.success.eval_while_training else None)
        self.evaluation_in_flight: tuple[Future, Algorithm] | None = None
        self.model_that_met: Algorithm | None = None  # the evaluated copy, when a copy met the target
        self.met_at: int | None = None
        self.divergence: Divergence | None = None  # the first non-finite loss or state this rank saw
        self.ended_diverged = False  # finish ended the run on a divergence (its reason: contract.REASON_DIVERGED)

    # -- the Session protocol --------------------------------------------------

    def stop_requested(self) -> bool:
        return self.stop.is_set()

    def success_vote(self) -> bool:
        return self.target_met

    def divergence_vote(self) -> bool:
        return self.divergence is not None

    def load(self) -> tuple[dict, dict | None] | None:
        """The checkpoint to resume from (`_load`); every rank then says how long its startup took."""
        loaded = self._load()
        if self.ctx.is_main:
            threading.Thread(target=self._mark_stop, name="stop-pending", daemon=True).start()
            for tracker in self.trackers:  # the volume is read: the run record is where it will be
                tracker.start()
        if self.startup is not None:
            self.startup.mark("metrics and resume")
            print(self.startup.line(self.ctx.rank), flush=True)
            self.startup = None
        return loaded

    def _load(self) -> tuple[dict, dict | None] | None:
        """Rank 0 reads the newest valid checkpoint and broadcasts it,
        re-encoded as plain data (checkpoint.encode), so no rank ever
        unpickles what was read from disk; in deterministic mode each rank
        also gets its own env and RNG state."""
        data = None
        if self.ctx.is_main:
            found, skipped, cut = self._read_volume()
            grace = self.spec.run_policy.termination_grace_period_seconds
            pending = read_stop_pending(self.checkpoint_dir)
            lost = stop_lost(pending, found[1]["counters"]["updates"] if found is not None else 0)
            if self.metrics is not None:  # a save cut off, or a stop killed before its save, lost a newer checkpoint
                self.metrics.checkpoints_skipped.set(len(skipped) + max(len(cut), int(lost)))
                self.metrics.resumed_timesteps.set(found[1]["counters"]["global_step"] if found is not None else 0)
            if cut:
                self.log(cut_saves_line(cut, found[0] if found is not None else None, grace))
            if pending is not None:
                self.log(stop_pending_line(pending, found, grace, lost))
            if found is not None:
                path, state = found
                self.resumed_from = path
                self.last_good = path
                self.log(f"resuming from {pod_path(path)} (timesteps {state['counters']['global_step']})")
                if skipped:
                    self.log(f"{len(skipped)} newer checkpoint(s) skipped, each named above: their training is done again")
                data = checkpoint.encode(state)
            elif earlier := checkpoint.same_named_jobs(self.checkpoint_dir, self.config.job):
                own = pod_path(self.checkpoint_dir)
                self.log(f"starting from zero: {own} holds no checkpoint of this job, but {pod_path(earlier[0])} is one of an "
                         f"earlier job named {self.config.job} ({len(earlier)} such job(s) on this volume); a job resumes only "
                         f"from its own directory, named by its uid. To continue from it, copy it into {own}: the job's next "
                         "start resumes from it")
        data = distributed.broadcast_bytes(self.ctx, data)
        if data is None:
            return None
        state = checkpoint.decode(data)
        per_rank = state.pop("per_rank", None)
        if per_rank is not None and not isinstance(per_rank, list):
            raise checkpoint.CheckpointMismatch(self.resumed_from or "rank 0 resumed from",
                                                f"per-rank state is {type(per_rank).__name__}, not a list")
        own = None
        if per_rank is not None and len(per_rank) == self.ctx.world_size:
            own = per_rank[self.ctx.rank]
        elif per_rank is not None:
            self.log(f"the checkpoint's per-rank state is for {len(per_rank)} rank(s), not {self.ctx.world_size}: resuming without it")
        elif self.spec.deterministic:
            self.log("the checkpoint holds no per-rank env state (kept only for gymnasium's native vector envs): "
                     "this resume is not bitwise equal to an uninterrupted run")
        self.elapsed_before = float(state.get("elapsed_seconds", 0.0))
        # the last evaluation's return, shown until the next one (a restart used to say "eval -")
        self.eval_return = state.get("eval_return")
        self.best_eval_return = state.get("best_eval_return")
        if self.eval_return is not None and self.metrics is not None and self.ctx.is_main:
            self.metrics.eval_return.set(self.eval_return)
        self.start_step = state["counters"]["global_step"]
        self.last_report = self.report_before = (time.monotonic(), self.start_step)
        self.last_checkpoint = (state["counters"]["updates"], self.start_step)
        self.start_updates = state["counters"]["updates"]
        self.boundary = (self.start_step, self.last_checkpoint[0])
        if self.ctx.is_main:  # where the curve resumes: `kuberl plot` draws its marker here, not at the next report
            self.curve_point(self.start_step, resumed=True)
        return state, own

    def _read_volume(self) -> tuple[tuple[str, dict] | None, list[tuple[str, str]], list[tuple[str, int]]]:
        """Rank 0's look at the checkpoint volume at start: (the newest usable checkpoint, those skipped, the temp files
        of saves cut off mid-write that it removed, with their sizes). A
        volume that fails while it looks (an I/O error outlasting the read retries) raises
        CheckpointVolumeUnavailable: no verdict on the files, and a new pod mounts the volume anew."""
        try:
            with checkpoint.volume_access(self.checkpoint_dir):  # a volume it may not use fails now, by name
                checkpoint.check_writable(self.checkpoint_dir)  # a read-only volume fails now, not at the first save
                cut = [removed for directory in {self.checkpoint_dir, os.path.dirname(self.final_model or self.checkpoint_dir)}
                       for removed in checkpoint.remove_stale_temps(directory)]
                start_over = self.spec.checkpoint.when_none_usable == "StartOver"
                skipped: list[tuple[str, str]] = []  # each said by name as it is skipped
                found = checkpoint.load_newest(self.checkpoint_dir, accept=self._resumable, start_over=start_over,
                                               skipped=skipped, set_aside=True)
        except checkpoint.CheckpointVolumeUnavailable:
            raise
        except OSError as e:
            if checkpoint.volume_failure(e.errno, writable_at_start=False) == checkpoint.UNAVAILABLE:
                raise checkpoint.CheckpointVolumeUnavailable("reading", self.checkpoint_dir, e, at_start=True) from e
            raise
        if found is not None and "trained_as" not in found[1]:
            self.log(f"{pod_path(found[0])} records no env and algorithm (a trainer before 2026-11-28 wrote it): resuming "
                     f"it unchecked as {describe_trained_as(trained_as(self.spec))}")
        return found, skipped, cut

    def _resumable(self, state: dict) -> str | None:
        """`_resumable`, and a checkpoint trained as something else than this job (trained_as) refused naming both:
        a foreign checkpoint whose tensors happen to fit (CartPole-v0's in a CartPole-v1 job, observation
        normalisation switched) resumed in silence, weights that meant other inputs."""
        if (why := _resumable(state)) is not None:
            return why
        if bad := checkpoint.nonfinite({key: value for key, value in state.items() if key != "per_rank"}):
            return f"{named(bad)} not finite (written as the run diverged, by a trainer that did not check)"
        recorded, own = state.get("trained_as"), trained_as(self.spec)
        if recorded is None:
            return None
        if (wrong := trained_as_problem(recorded)) is not None:  # before comparing: a tensor's == is no bool
            return wrong
        if recorded == own:
            return None
        return f"trained on {describe_trained_as(recorded)}; this job is {describe_trained_as(own)}"

    def after_update(self, report: UpdateReport, algorithm: Algorithm) -> None:
        counters = report.counters
        self.boundary = (counters.global_step, counters.updates)
        self.remember_episodes(report.episode_return_sum, report.episode_return_count)
        self.last_update = report  # formatted only when a progress line is written: DQN makes thousands a second
        self.tensorboard_tags = algorithm.TENSORBOARD_TAGS
        if self.scalars is not None and report.episodes:
            self.scalars.episodes(report.episodes)
        if report.episodes:
            for tracker in self.trackers:
                tracker.episodes(report.episodes)
        if self.divergence is None and (bad := nonfinite_losses(report.losses)):
            self.record_divergence(f"rank {self.ctx.rank}'s {named(bad)}", counters)
        if self.metrics is not None:
            self._record(report)
        success = self.spec.success
        if self.ctx.is_main and self.divergence is None:  # weights that diverged are not evaluated: the run ends next update
            if self.evaluation_in_flight is not None and self.evaluation_in_flight[0].done():
                self.evaluation_finished()
            if evaluation_due(counters.updates, success.eval_every):
                if self.evaluator is None:
                    if self.evaluate(algorithm):
                        self.curve_point(counters.global_step, evaluation=True)
                elif self.evaluation_in_flight is None and not self.target_met:  # one running: skipped; one met: done
                    self.start_evaluation(algorithm)
        if counters.updates % self.spec.checkpoint.every_updates == 0:
            self.save(algorithm)
        if self.ctx.is_main and time.monotonic() - self.last_report[0] >= PROGRESS_EVERY_SECONDS:
            self.report(counters.global_step)

    # -- pieces ------------------------------------------------------------------

    def remember_episodes(self, return_sum: float, count: int) -> None:
        """An update's ended episodes into the window of the fewest latest updates that hold
        RECENT_EPISODES. An update that ended none changes neither sum, so it is not kept:
        the window stays about RECENT_EPISODES long instead of one entry per update (12,000
        for Pong's 900-step episodes on 8 envs, summed at every update)."""
        if not count:
            return
        self.recent.append((return_sum, count))
        while len(self.recent) > 1 and sum(c for _, c in list(self.recent)[1:]) >= RECENT_EPISODES:
            self.recent.popleft()

    @property
    def episode_return_mean(self) -> float | None:
        count = sum(c for _, c in self.recent)
        return sum(s for s, _ in self.recent) / count if count else None

    def wall_seconds(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _record(self, report: UpdateReport) -> None:
        metrics, counters = self.metrics, report.counters
        metrics.env_steps.inc(max(0, counters.global_step - self.exported[0]))
        metrics.episodes.inc(max(0, counters.episodes - self.exported[1]))
        self.exported = (counters.global_step, counters.episodes)
        metrics.policy_updates.inc()
        if self.episode_return_mean is not None:
            metrics.episode_return.set(self.episode_return_mean)
        metrics.learning_rate.set(report.learning_rate)
        for name, gauge in metrics.losses.items():
            gauge.set(report.losses.get(name, 0.0))
        metrics.rollout_duration.observe(report.rollout_seconds)
        metrics.update_duration.observe(report.update_seconds)
        metrics.allreduce_duration.observe(report.allreduce_seconds)

    def evaluation_arguments(self, algorithm: Algorithm) -> tuple[str, int, dict, int]:
        env = self.spec.env
        return env.id, self.spec.success.eval_episodes, env.kwargs, rank_seed(self.spec.seed, EVAL_SEED_STREAM, algorithm.counters.updates)

    def evaluate(self, algorithm: Algorithm) -> bool:
        """Rank 0's evaluation on the training thread; False when a stop (SIGTERM) abandoned it: the grace period is
        the checkpoint's, and an evaluation (minutes of long episodes) outlasted it, so the SIGKILL after it lost
        every update since the last checkpoint. Deterministic mode evaluates to the end: its resume repeats what an
        uninterrupted run does, whose evaluation there may have met the target."""
        stop = None if self.spec.deterministic else self.stop.is_set
        began = time.monotonic()
        try:
            eval_return = algorithm.evaluate(*self.evaluation_arguments(algorithm), stop=stop)
        except evaluation.Interrupted as e:
            self.log(f"evaluation at update {algorithm.counters.updates} abandoned {e}: a stop came, and the checkpoint"
                     " is written first")
            return False
        self.evaluated(algorithm, eval_return)
        ended, success = time.monotonic(), self.spec.success
        count, seconds = self.evaluations[0] + 1, self.evaluations[1] + ended - began
        self.evaluations = (count, seconds)
        note = evaluation_share_note(seconds, ended - self.started, count, success.eval_episodes, success.eval_every)
        if note and not self.evaluation_share_said and not self.target_met:
            self.log(note)
            self.evaluation_share_said = True
        return True

    def evaluated(self, algorithm: Algorithm, eval_return: float) -> None:
        """Record `algorithm`'s evaluation (on the main thread): the return, the success vote
        and which weights met the target, the metrics."""
        self.eval_return, self.evaluated_at = eval_return, algorithm.counters.updates
        self.target_met = meets_target(eval_return, self.spec.success.target_return)
        self.model_that_met = algorithm if self.target_met else None
        # the timesteps of the weights that met it: the vote's update collects one more rollout it does not learn from
        self.met_at = algorithm.counters.global_step if self.target_met else None
        if (self.ctx.is_main and self.best_model and (self.best_eval_return is None or eval_return > self.best_eval_return)
                and self.write_model(algorithm, self.best_model, eval_return)):  # rank 0 evaluates: its weights are the ones scored
            self.best_eval_return, self.best_unmarked = eval_return, True
        if self.metrics is not None:
            self.metrics.eval_return.set(eval_return)
            self.metrics.success.set(1 if self.target_met else 0)

    def start_evaluation(self, algorithm: Algorithm) -> None:
        """evalWhileTraining: a frozen copy of the weights evaluated on the evaluator thread,
        which only computes the return; the session records it on this thread."""
        frozen = algorithm.frozen_copy()
        stream = stream_after_current(self.ctx.device)  # on a GPU: beside training's kernels, after the copy's

        def evaluate() -> float:
            with stream:
                return frozen.evaluate(*self.evaluation_arguments(frozen))

        self.evaluation_in_flight = (self.evaluator.submit(evaluate), frozen)

    def evaluation_finished(self) -> None:
        """evalWhileTraining: the evaluation in flight, waited for and recorded, into
        progress.jsonl at the timesteps of the weights it evaluated (its failure is raised here)."""
        future, frozen = self.evaluation_in_flight
        self.evaluation_in_flight = None
        self.evaluated(frozen, future.result())
        self.curve_point(frozen.counters.global_step, evaluation=True, while_training=True)

    def report(self, global_step: int) -> None:
        now = time.monotonic()
        since, steps_then = self.last_report
        if now - since < PROGRESS_EVERY_SECONDS:  # the run's last line, just after a periodic one: one update's rate is noise
            since, steps_then = self.report_before
        rate = (global_step - steps_then) / max(now - since, 1e-9)
        self.report_before, self.last_report = self.last_report, (now, global_step)
        if self.metrics is not None:
            self.metrics.steps_per_second.set(rate)
        mean = self.episode_return_mean
        self.log(
            f"timesteps {global_step}  steps/s {rate:,.0f}  {contract.training_return_label(self.spec.algorithm)} {_fmt(mean)}"
            f"  eval {_fmt(self.eval_return)}"
        )
        self.curve_point(global_step, rate)

    def curve_point(self, global_step: int, rate: float | None = None, checkpoint_file: str | None = None,
                    evaluation: bool = False, while_training: bool = False, resumed: bool = False) -> None:
        """One line of progress.jsonl (what `kuberl plot` draws): at every
        progress line, every evaluation (marked: every line repeats the last
        eval return; one `while_training` also marked so, as its line carries
        a training return later than its timesteps), every checkpoint (naming
        its file, so a run's summary knows the newest checkpoint's timesteps)
        and a resume (marked, at the timesteps and wall time of the checkpoint
        it loaded)."""
        line = {
            "timesteps": global_step,
            "wall_seconds": round(self.wall_seconds(), 3),
            "episode_return_mean": self.episode_return_mean,
            "eval_return": self.eval_return,
            "steps_per_second": None if rate is None else round(rate, 1),
            "restart": self.restart,
            # the last update's losses and learning rate, at its own timesteps (kuberl plot draws them under the returns)
            **({"update": update_statistics(self.last_update)}
               if (rate is not None or evaluation) and not while_training and self.last_update is not None else {}),
            **({"checkpoint": checkpoint_file} if checkpoint_file else {}),
            **({"evaluation": True} if evaluation else {}),
            **({"evaluated_while_training": True} if while_training else {}),
            **({"resumed": True} if resumed else {}),
            **({"best": True} if evaluation and self.best_unmarked else {}),  # best-model.pt holds these weights
        }
        self.best_unmarked = self.best_unmarked and not evaluation
        try:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
            append_line(os.path.join(self.checkpoint_dir, "progress.jsonl"), json.dumps(line))
        except OSError as e:  # the directory is the tenant's: a curve point lost is not worth the run
            if not self.progress_unwritable:
                self.log(f"progress.jsonl not written: {e}")
            self.progress_unwritable = True
        if self.scalars is not None:
            self.scalars.write(line, self.tensorboard_tags)
        for tracker in self.trackers:
            tracker.write(line, self.tensorboard_tags)

    def save(self, algorithm: Algorithm, collectives: bool = True) -> bool:
        """Rank 0 writes the replicated state; deterministic mode first
        gathers every rank's env and RNG state (all ranks are here together).
        Whether this state is on disk (rank 0; True elsewhere): a state holding a NaN
        or an infinity is not written, so it never rotates a finite checkpoint out."""
        per_rank = None
        if self.spec.deterministic and collectives:
            # as plain data (checkpoint.encode), not gather_object's pickle: rank 0 runs nothing a peer sends
            gathered = distributed.gather_bytes(self.ctx, checkpoint.encode({"own": algorithm.rank_state()}))
            per_rank = None if gathered is None else [checkpoint.decode(data)["own"] for data in gathered]
            if per_rank is not None and any(own is None for own in per_rank):
                per_rank = None  # envs whose state is not plain data resume without it (envs.env_state)
        if not self.ctx.is_main:
            return True
        # the target's update collects a rollout it does not learn from: same updates, more steps, saved again
        if (algorithm.counters.updates, algorithm.counters.global_step) == self.last_checkpoint:
            self.stop_checkpointed()  # this state is on disk already
            return True
        state = {**algorithm.shared_state(), "elapsed_seconds": self.wall_seconds(),
                 "eval_return": self.eval_return, "trained_as": trained_as(self.spec), "best_eval_return": self.best_eval_return}
        if bad := checkpoint.nonfinite(state):  # per-rank state aside: an env's own numbers are not the model's
            self.refused(f"the checkpoint's {named(bad)}", "checkpoint", algorithm.counters)
            return False
        state["per_rank"] = per_rank
        started = time.monotonic()
        path = checkpoint.save(self.checkpoint_dir, algorithm.counters.updates, state, self.spec.checkpoint.keep,
                               volume=self.volume(), last_good=self.last_good)
        took = time.monotonic() - started
        self.last_checkpoint = (algorithm.counters.updates, algorithm.counters.global_step)
        self.last_good = path
        if self.metrics is not None:
            self.metrics.checkpointed(took)
        self.log(f"checkpoint {pod_path(path)} (timesteps {algorithm.counters.global_step})")
        if (warning := self.outlasts_grace(took)) is not None:
            self.log(warning)
        self.stop_checkpointed()
        self.curve_point(algorithm.counters.global_step, checkpoint_file=os.path.basename(path))
        return True

    def refused(self, what: str, file: str, counters: Counters) -> None:
        """Rank 0 did not write a checkpoint or model (`file`) whose `what` is not finite: said, and recorded as the
        run's divergence (the first one seen), which the next update's all-reduce ends the run on."""
        kept = f"{pod_path(self.last_good)} stays the last finite checkpoint" if self.last_good else "no finite checkpoint was written"
        self.log(f"{file} not written at update {counters.updates} (timesteps {counters.global_step}): {what} not finite; {kept}")
        self.record_divergence(what, counters)

    def record_divergence(self, what: str, counters: Counters) -> None:
        """The first non-finite `what` this rank saw, and where the run stood: voted at the next update's all-reduce."""
        if self.divergence is None:
            self.divergence = Divergence(what, counters.updates, counters.global_step)

    def gang_diverged(self, algorithm: Algorithm) -> bool:
        """Whether any rank saw a non-finite loss or state by the run's end (its budget spent, its target met), in one
        all-reduce at the end only, so every rank ends alike. Rank 0 first judges the state the final checkpoint and
        model would hold: the last update's loss is voted in no later update's all-reduce."""
        if self.ctx.is_main and self.divergence is None and (bad := checkpoint.nonfinite(algorithm.shared_state())):
            self.record_divergence(f"the final state's {named(bad)}", algorithm.counters)
        vote = torch.tensor([float(self.divergence is not None)], dtype=torch.float64)  # host: gloo's or all_reduce_sum's copy
        try:
            return bool(distributed.all_reduce_sum(self.ctx, vote)[0] > 0)
        except PeerLost:  # a peer killed after the last update: this rank's own word, as the run ended before this vote
            return self.divergence is not None

    def divergence_message(self) -> str:
        """The termination message of a run that diverged (divergence.diverged_message), marked ended_diverged. Only
        rank 0 names it: it alone knows the checkpoints. What it did not see itself was another rank's loss, voted
        at the update after its last boundary."""
        self.ended_diverged = True
        if not self.ctx.is_main:
            return "training diverged: rank 0 says what went non-finite and which checkpoint is kept"
        seen = self.divergence or Divergence("another rank's loss", self.boundary[1], self.boundary[0])
        kept = (pod_path(self.last_good), self.last_checkpoint[1]) if self.last_good else None
        if (line := continuing(kept, on_this_machine())) is not None:
            self.log(line)
        return diverged_message(seen, kept, advice(self.spec.algorithm, self.spec.hyperparameters))

    def _mark_stop(self) -> None:
        """Rank 0's watcher: once a stop is asked, STOP_PENDING records it (where training stood) in the checkpoint
        directory, from this thread, at once: a SIGKILL may end the training thread inside an update, before a
        byte of the stop's checkpoint is written. Best effort: a volume that refuses it changes nothing else."""
        self.stop.wait()
        if self.stop_asked_at is None:
            self.stop_asked_at = time.monotonic()
        with self.stop_lock:
            if self.stop_saved:
                return
            timesteps, updates = self.boundary
            record = {"askedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "updates": updates, "timesteps": timesteps}
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(self.checkpoint_dir, STOP_PENDING), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                             | os.O_NONBLOCK, 0o644)
                try:
                    os.write(fd, json.dumps(record).encode())
                finally:
                    os.close(fd)

    def stop_checkpointed(self) -> None:
        """A checkpoint holding this boundary's state is written: a stop asked now or before has what it needs."""
        if self.stop.is_set():
            self.stop_settled()

    def stop_settled(self) -> None:
        """Rank 0's ending is decided and said (a checkpoint written, or its log saying why none is: a peer lost mid-update,
        deterministic mode): STOP_PENDING is removed, and a stop from now on writes none. Left, it read at the next start
        as a rank 0 killed before its save, beside the checkpoint it did skip (e2e: a truncated checkpoint counted twice)."""
        if not self.ctx.is_main:
            return  # only rank 0 writes the record
        with self.stop_lock:
            self.stop_saved = True
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.checkpoint_dir, STOP_PENDING))

    def outlasts_grace(self, took: float) -> str | None:
        """The warning, once per run, for a save that took longer than the pod's grace period: a stop (suspend, a gang
        restart, an eviction) SIGKILLs rank 0 while its last save is being written, and the training since the
        checkpoint before is lost. None when it fits, or once said."""
        grace = self.spec.run_policy.termination_grace_period_seconds
        if took <= grace or self.grace_warned:
            return None
        self.grace_warned = True
        return (f"warning: this checkpoint took {took:.1f}s to save, longer than the {grace}s a stop gives rank 0 "
                f"(spec.runPolicy.terminationGracePeriodSeconds): a stop's save is killed mid-write and the training "
                f"since the checkpoint before it is lost. Raise terminationGracePeriodSeconds to {math.ceil(took * 2)} or more")

    def save_after_peer_lost(self, algorithm: Algorithm) -> bool:
        """Rank 0's checkpoint when a peer left while the gang was stopping (no collectives): whether one was
        written. Only the state of an update boundary is saved: a peer lost in the middle of an update (its
        gradient all-reduce) left the weights partly trained on a rollout whose steps were counted already,
        which a resume then counted again."""
        counters = algorithm.counters
        if (counters.global_step, counters.updates) != self.boundary:
            self.log(f"a peer left in the middle of update {counters.updates + 1}: not checkpointed (its state is torn); "
                     f"a resume redoes the training since the last checkpoint")
            return False
        return self.save_without_peers(algorithm)

    def end_after_peer_lost(self, algorithm: Algorithm) -> bool:
        """A peer lost: rank 0's checkpoint where the gang was stopping (save_after_peer_lost), the stop settled, and
        with a checkpoint the tracked runs ended KILLED as finish ends a stop's: their queued lines sent, the run
        resumable. Whether one was written."""
        saved = self.stop.is_set() and self.ctx.is_main and self.save_after_peer_lost(algorithm)
        self.stop_settled()  # saved, or its log said why not: the restart's reason is the lost peer, not a killed save
        if saved:
            self.close_tracking("KILLED")
        return saved

    def save_without_peers(self, algorithm: Algorithm) -> bool:
        """Rank 0's save when a peer is gone (no gather): whether one was written. Deterministic mode writes none:
        without every rank's envs and RNGs a resume is not bitwise equal, and the last whole checkpoint (or the
        start, whose seeds are the same) is."""
        if self.spec.deterministic:
            self.log("a peer left: not checkpointed (deterministic mode needs every rank's env and RNG state); "
                     "a resume redoes the training since the last checkpoint")
            return False
        return self.save(algorithm, collectives=False)

    def volume(self) -> str:
        """The checkpoint volume, as a user finds it: the claim, its requested size and where it is mounted (not the
        job's directory in it, `<job>-<uid>`: with a long job name that pushed the claim out of a restart's reason)."""
        ckpt = self.spec.checkpoint
        if on_this_machine():  # `kuberl run`: no claim, a directory of this disk (which it shows where it lies here)
            return f"{pod_path(self.checkpoint_dir)}/"
        if ckpt.claim_name:
            return f"claim {ckpt.claim_name} (spec.checkpoint.claimName) at {names.CHECKPOINT_MOUNT_DIR}"
        return f"claim {names.pvc_name(self.config.job)} of spec.checkpoint.size {ckpt.size} at {names.CHECKPOINT_MOUNT_DIR}"

    def finish(self, algorithm: Algorithm, outcome: str) -> str:
        """Final checkpoint or model, the final weights evaluated first where final_evaluation_due says; returns the
        termination-log message. A run that diverged (voted in an update's all-reduce, or in `gang_diverged` as the
        budget or target ends it) writes neither: the reason names the finite checkpoint it keeps."""
        if outcome != "stopped" and self.gang_diverged(algorithm):
            outcome = "diverged"
        if outcome == "diverged":
            if self.ctx.is_main and algorithm.counters.global_step > self.last_report[1]:
                self.report(algorithm.counters.global_step)  # progress.jsonl's last line: its losses, null
            self.stop_settled()  # a stop asked meanwhile has its answer: nothing to save
            self.close_tracking("FAILED")
            return self.divergence_message()
        waited = outcome == "budget" and self.evaluation_in_flight is not None
        if waited:
            self.evaluation_finished()  # its return is the run's last word on the model
        steps = algorithm.counters.global_step
        # the weights the user gets, scored where a periodic evaluation's go (a met target ends the run as success)
        scored = (self.ctx.is_main and final_evaluation_due(outcome, algorithm.counters.updates, self.evaluated_at,
                                                            self.start_updates, self.target_met, self.spec.success.eval_every)
                  and self.evaluate(algorithm))
        if scored:
            self.curve_point(steps, evaluation=True)
        if outcome == "budget" and self.target_met:  # the last evaluation met it as the budget ended
            outcome = "target"
        # the weights that met the target: with evalWhileTraining a copy from some updates ago
        model = self.model_that_met if outcome == "target" and self.model_that_met is not None else algorithm
        if self.ctx.is_main and steps > self.last_report[1]:  # a line already says these steps: no "steps/s 0"
            self.report(steps)
        elif waited and not scored:  # progress.jsonl's last line (a run's summary) at these steps, not at the evaluated copy's
            self.curve_point(steps)
        if outcome == "stopped":
            try:
                saved = self.save(algorithm)
            except PeerLost:  # a peer already left: rank 0 holds the replicated state
                saved = self.save_without_peers(algorithm)
            if self.ctx.is_main and not saved and self.divergence is not None:  # a stop's state that diverged: not resumable
                self.stop_settled()
                self.close_tracking("FAILED")
                return self.divergence_message()
            self.close_tracking("KILLED")  # resumable: the next generation logs on into the run
            return stopped_message(steps, self.ctx.is_main, self.config.checkpoint_dir)
        # the state at the end, checkpointed: a resume (a higher success.targetReturn, a larger budget) goes on from
        # here, not from the last periodic checkpoint (CartPole met its target at 38,644 and resumed at 30,483)
        self.save(algorithm)
        if self.ctx.is_main:
            self.write_final_model(model)
            self.stop_checkpointed()  # a stop that came as the run ended: the model holds it all
            self.close_tracking("FINISHED", self.final_model)
        if outcome == "target" and not self.ctx.is_main:
            return f"rank 0's evaluation met the target; stopped at timesteps {steps} (rank 0 names the evaluated weights' own)"
        if not self.ctx.is_main:  # rank 0 evaluates and writes the model: "eval return -; model …" here misled
            return f"budget of {self.spec.total_timesteps} timesteps spent (timesteps {steps}); rank 0 writes the model"
        final = contract.final_numbers(steps, self.eval_return)
        if outcome == "target":
            at = self.met_at if self.met_at is not None else model.counters.global_step
            lagged = "" if model is algorithm or at == steps else f" (the weights of then, evaluated while training went on to {steps})"
            return (f"eval return {_fmt(self.eval_return)} >= {self.spec.success.target_return} at timesteps {at}{lagged}; "
                    f"model {self.config.final_model} {final}")
        return f"budget of {self.spec.total_timesteps} timesteps spent (timesteps {steps}, eval return {_fmt(self.eval_return)}); model {self.config.final_model} {final}"

    def close_tracking(self, status: str, model: str | None = None) -> None:
        """Rank 0's tracked runs, if any, ended as `status` (MLflow's RunStatus), with the final model, against one
        deadline, and within a stop's grace period (stop_deadline): a wait past it had the kubelet (or kuberl run)
        SIGKILL rank 0 after its checkpoint, its termination message unwritten."""
        grace = self.spec.run_policy.termination_grace_period_seconds
        close_all(self.trackers, status, model, lambda: stop_deadline(self.stop_asked_at, grace))

    def write_final_model(self, algorithm: Algorithm) -> bool:
        return self.write_model(algorithm, self.final_model, self.eval_return)

    def write_model(self, algorithm: Algorithm, path: str, eval_return: float | None) -> bool:
        """The algorithm's part (final_model) plus what every model file
        carries, written atomically as a checkpoint is; loadable with
        torch.load(weights_only=True), on a machine without a GPU too (its
        tensors are written from host memory). Whether it was written: weights
        holding a NaN or an infinity are not (refused, the run's divergence)."""
        model = {
            **on_host(algorithm.final_model()),
            "format": 1,  # kuberl_trainer.policy documents the file and loads it
            "algorithm": self.spec.algorithm,
            "env_id": self.spec.env.id,
            "env_kwargs": dict(self.spec.env.kwargs),
            "timesteps": algorithm.counters.global_step,
            "eval_return": eval_return,
        }
        if bad := checkpoint.nonfinite(model):  # host tensors: no device read
            self.refused(f"{os.path.basename(path)}'s {named(bad)}", os.path.basename(path), algorithm.counters)
            return False
        buffer = io.BytesIO()
        torch.save(model, buffer)
        checkpoint.retrying(path, lambda: checkpoint.write_on_volume(
            path, buffer.getvalue(), volume=self.volume(), last_good=self.last_good))
        return True


def tracking_runs(config: TrainerConfig, learned: Mapping[str, Any], restart: int, log: Callable[[str], None]) -> list[TrackedRun]:
    """Rank 0's tracked runs, one per service spec.tracking names: MLflow (its experiment: the job's name unless
    named), W&B."""
    tracking, checkpoints = config.spec.tracking, host_path(config.checkpoint_dir)
    found = []
    if tracking.mlflow is not None:
        found.append(mlflow_run(checkpoints, tracking.mlflow.experiment or config.job, learned,
                                tags(config.job, config.namespace, config.uid, restart), log=log))
    if tracking.wandb is not None:
        w = tracking.wandb
        found.append(wandb_run(checkpoints, w.project, w.entity, w.group, w.tags, learned, config.job, config.namespace,
                               config.uid, restart, log=log))
    return found


def append_line(path: str, line: str) -> None:
    """Append `line` to a regular file; a FIFO, a device or a link under the name raises OSError
    instead of blocking (a FIFO nobody reads) or writing where it should not (the file a link names)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_stop_pending(directory: str) -> dict | None:
    """STOP_PENDING's record, removed (None: there is none). The directory is the tenant's: a link or anything but a
    regular file there is not read, and a record that does not parse is one with nothing known but that it was."""
    path = os.path.join(directory, STOP_PENDING)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(ValueError, RecursionError):  # 4 KiB of "[" nest deeper than json decodes
        record = json.loads(data)
        if isinstance(record, dict):
            return {key: record[key] for key, kind in (("askedAt", str), ("updates", int), ("timesteps", int))
                    if type(record.get(key)) is kind}
    return {}


def stop_lost(pending: dict | None, resumed_updates: int) -> bool:
    """Whether the stop `pending` records lost updates a checkpoint should hold: the newest whole one is older
    than where training stood when the stop came (unknown: lost)."""
    return pending is not None and pending.get("updates", resumed_updates + 1) > resumed_updates


def stop_pending_line(pending: dict, found: tuple[str, dict] | None, grace: int, lost: bool) -> str:
    """What a start says of a stop whose checkpoint was never written (STOP_PENDING was left)."""
    when = safetext.one_line(str(pending.get("askedAt", "")))[:32]
    where = f" at update {pending['updates']:,} (timesteps {pending.get('timesteps', 0):,})" if "updates" in pending else ""
    said = (f"the last stop asked of rank 0{f' ({when})' if when else ''}{where} ended before its checkpoint was written: "
            f"rank 0 was killed, as when spec.runPolicy.terminationGracePeriodSeconds ({grace}s) runs out before the "
            "update in flight and the save are done")
    if found is None:
        return f"{said}. No checkpoint is left: training starts over"
    resumed = f"{pod_path(found[0])} (update {found[1]['counters']['updates']:,})"
    if lost:
        return f"{said}. Resuming from {resumed}: the training after it is done again"
    return f"{said}. {resumed} holds every update before the stop: only the update in flight is done again"


def cut_saves_line(cut: list[tuple[str, int]], resumed: str | None, grace: int) -> str:
    """What a start says of the saves an earlier rank 0 was killed in the middle of (their temp files, removed): the
    training they held is lost, and the likeliest why. Said beside the checkpoints skipped, never left to a removal."""
    files = ", ".join(f"{os.path.basename(path)} ({size} bytes)" for path, size in cut[:3])
    more = f" and {len(cut) - 3} more" if len(cut) > 3 else ""
    whole = f"resuming from {pod_path(resumed)}, the newest whole checkpoint" if resumed else "no whole checkpoint is left"
    return (f"{len(cut)} save(s) cut off mid-write: the rank writing it was killed ({files}{more} removed), as when a "
            f"stop's save outlasts spec.runPolicy.terminationGracePeriodSeconds ({grace}s). {whole}: the training after "
            "it is done again")


def stopped_message(steps: int, is_main: bool, checkpoint_dir: str) -> str:
    """A stopped rank's termination message. The directory is the pod's own path (/checkpoints/…, which `kuberl
    run` shows where it lies here), and only rank 0 names it: no other rank mounts the checkpoint volume."""
    where = checkpoint_dir if is_main else "rank 0's checkpoint"
    return f"stopped at timesteps {steps}; resumable from {where}"


def trained_as(spec) -> dict:
    """What a checkpoint's weights mean, beyond their shapes (which run_updates' mismatch checks): the algorithm,
    the env they were trained on, and whether they see normalised observations. Hyperparameters that change only
    how learning goes on (a learning rate, a budget) are not here: `kuberl run --resume` may change those."""
    hp = spec.hyperparameters
    return {"algorithm": spec.algorithm, "env": spec.env.id,
            "normalizeObservation": bool(getattr(hp, "normalize_observation", False))}


TRAINED_AS_TYPES = {"algorithm": str, "env": str, "normalizeObservation": bool}  # what trained_as writes
TRAINED_AS_SHOWN = 80  # characters of a recorded string a refusal shows: any env id a person reads, not a tenant's megabyte


def trained_as_problem(record: object) -> str | None:
    """Why a checkpoint's trained_as is not what `trained_as` writes (None: it is). The file is the tenant's: a
    list, a tensor or a huge int there is refused by its type's name, never printed, compared or made a bool."""
    if not isinstance(record, dict):
        return f"trained_as is {type(record).__name__}, not a mapping"
    for key, kind in TRAINED_AS_TYPES.items():
        if type(record.get(key)) is not kind:
            found = "missing" if key not in record else type(record[key]).__name__
            return f"trained_as.{key} is {found}, not {'text' if kind is str else 'true or false'}"
    return None


def describe_trained_as(record: dict) -> str:
    """`CartPole-v1 with ppo` (and `, observations normalised` when they were), of a record `trained_as_problem`
    passed: each string on one line, escaped (safetext) and cut to TRAINED_AS_SHOWN characters, as it reaches the
    log, the termination message and so the job's status and Events."""
    normalised = ", observations normalised" if record["normalizeObservation"] else ""
    return f"{_shown(record['env'])} with {_shown(record['algorithm'])}{normalised}"


def _shown(text: str) -> str:
    escaped = safetext.one_line(text)
    return escaped if len(escaped) <= TRAINED_AS_SHOWN else f"{escaped[:TRAINED_AS_SHOWN]}… ({len(text)} characters)"


def _resumable(state: dict) -> str | None:
    """Why a decoded checkpoint cannot be resumed from (None: it can)."""
    counters = state.get("counters")
    if not isinstance(counters, dict) or not all(
        type(counters.get(k)) is int and 0 <= counters[k] <= MAX_COUNTER for k in ("global_step", "updates", "episodes")
    ):
        return f"counters (global_step, updates, episodes) are not integers from 0 to {MAX_COUNTER}"
    elapsed = state.get("elapsed_seconds", 0.0)
    if type(elapsed) not in (int, float) or not 0 <= elapsed < float("inf"):
        return "elapsed_seconds is not a finite, non-negative number"
    for key in ("eval_return", "best_eval_return"):
        value = state.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
            return f"{key} is neither absent nor a finite number"
    return None


def _fmt(value: float | None) -> str:
    return contract.shown_return(value)
