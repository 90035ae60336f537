"""What happens at update boundaries around the algorithm: metrics, the
progress line and progress.jsonl, rank-0 evaluation and its stop vote,
checkpoints (save, resume, broadcast), the final model.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections import deque

import torch
from kuberl import contract
from kuberl.trainerconfig import TrainerConfig

from . import checkpoint, distributed
from .distributed import Dist, PeerLost
from .envs import rank_seed
from .metrics import TrainerMetrics
from .paths import host_path
from .ppo import PPOTrainer, UpdateReport

PROGRESS_EVERY_SECONDS = 5.0
RECENT_EPISODES = 100
EVAL_SEED_STREAM = 1_000_003  # keeps evaluation seeds apart from every rank's


class BareSession:
    """The Session protocol with no checkpoints, metrics or evaluation, for
    benchmarks and tests: records each update's report and asks to stop once
    `max_updates` are done (never, when None)."""

    restart = 0

    def __init__(self, max_updates: int | None = None):
        self.max_updates, self.reports = max_updates, []

    def stop_requested(self) -> bool:
        return self.max_updates is not None and len(self.reports) >= self.max_updates - 1

    def success_vote(self) -> bool:
        return False

    def load(self) -> None:
        return None

    def after_update(self, report: UpdateReport, trainer: PPOTrainer) -> None:
        self.reports.append(report)


class TrainingSession:
    def __init__(self, config: TrainerConfig, ctx: Dist, metrics: TrainerMetrics | None,
                 restart: int, stop: threading.Event, log=print):
        self.config, self.spec, self.ctx, self.metrics = config, config.spec, ctx, metrics
        self.restart, self.stop, self.log = restart, stop, log
        self.checkpoint_dir = host_path(config.checkpoint_dir)
        self.final_model = host_path(config.final_model)
        self.started = time.monotonic()
        self.elapsed_before = 0.0  # wall seconds of earlier generations, from the checkpoint
        self.recent: deque[tuple[float, int]] = deque()
        self.eval_return: float | None = None
        self.target_met = False
        self.last_report = (self.started, 0)
        self.start_step = 0
        self.last_checkpoint_update = -1
        self.exported = (0, 0)  # counter values already exported (steps, episodes)

    # -- the Session protocol --------------------------------------------------

    def stop_requested(self) -> bool:
        return self.stop.is_set()

    def success_vote(self) -> bool:
        return self.target_met

    def load(self) -> tuple[dict, dict | None] | None:
        """Rank 0 reads the newest valid checkpoint and broadcasts it,
        re-encoded as plain data (checkpoint.encode), so no rank ever
        unpickles what was read from disk; in deterministic mode each rank
        also gets its own env and RNG state."""
        data = None
        if self.ctx.is_main:
            found = checkpoint.load_newest(self.checkpoint_dir, accept=_resumable)
            if found is not None:
                path, state = found
                self.log(f"resuming from {path} (timesteps {state['counters']['global_step']})")
                data = checkpoint.encode(state)
        data = distributed.broadcast_bytes(self.ctx, data)
        if data is None:
            return None
        state = checkpoint.decode(data)
        per_rank = state.pop("per_rank", None)
        own = None
        if per_rank is not None and len(per_rank) == self.ctx.world_size:
            own = per_rank[self.ctx.rank]
        elif per_rank is not None:
            self.log(f"the checkpoint's per-rank state is for {len(per_rank)} rank(s), not {self.ctx.world_size}: resuming without it")
        self.elapsed_before = float(state.get("elapsed_seconds", 0.0))
        self.start_step = state["counters"]["global_step"]
        self.last_report = (time.monotonic(), self.start_step)
        self.last_checkpoint_update = state["counters"]["updates"]
        return state, own

    def after_update(self, report: UpdateReport, trainer: PPOTrainer) -> None:
        counters = report.counters
        self.recent.append((report.episode_return_sum, report.episode_return_count))
        while len(self.recent) > 1 and sum(c for _, c in list(self.recent)[1:]) >= RECENT_EPISODES:
            self.recent.popleft()
        if self.metrics is not None:
            self._record(report)
        success = self.spec.success
        if self.ctx.is_main and success.target_return is not None and counters.updates % success.eval_every == 0:
            self.evaluate(trainer)
            self.curve_point(counters.global_step)
        if counters.updates % self.spec.checkpoint.every_updates == 0:
            self.save(trainer)
        if self.ctx.is_main and time.monotonic() - self.last_report[0] >= PROGRESS_EVERY_SECONDS:
            self.report(counters.global_step)

    # -- pieces ------------------------------------------------------------------

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
        metrics.policy_loss.set(report.losses.get("policy_loss", 0.0))
        metrics.value_loss.set(report.losses.get("value_loss", 0.0))
        metrics.entropy.set(report.losses.get("entropy", 0.0))
        metrics.approx_kl.set(report.losses.get("approx_kl", 0.0))
        metrics.rollout_duration.observe(report.rollout_seconds)
        metrics.update_duration.observe(report.update_seconds)
        metrics.allreduce_duration.observe(report.allreduce_seconds)

    def evaluate(self, trainer: PPOTrainer) -> None:
        env, success = self.spec.env, self.spec.success
        seed = rank_seed(self.spec.seed, EVAL_SEED_STREAM, trainer.counters.updates)
        self.eval_return = trainer.evaluate(env.id, success.eval_episodes, env.kwargs, seed)
        self.target_met = self.eval_return >= success.target_return
        if self.metrics is not None:
            self.metrics.eval_return.set(self.eval_return)
            self.metrics.success.set(1 if self.target_met else 0)

    def report(self, global_step: int) -> None:
        now = time.monotonic()
        since, steps_then = self.last_report
        rate = (global_step - steps_then) / max(now - since, 1e-9)
        self.last_report = (now, global_step)
        if self.metrics is not None:
            self.metrics.steps_per_second.set(rate)
        mean = self.episode_return_mean
        self.log(
            f"timesteps {global_step}  steps/s {rate:,.0f}  return {_fmt(mean)}  eval {_fmt(self.eval_return)}"
        )
        self.curve_point(global_step, rate)

    def curve_point(self, global_step: int, rate: float | None = None) -> None:
        """One line of progress.jsonl (what `kuberl plot` draws): at every
        progress line and every evaluation, so short runs get a curve too."""
        line = {
            "timesteps": global_step,
            "wall_seconds": round(self.wall_seconds(), 3),
            "episode_return_mean": self.episode_return_mean,
            "eval_return": self.eval_return,
            "steps_per_second": None if rate is None else round(rate, 1),
            "restart": self.restart,
        }
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        with open(os.path.join(self.checkpoint_dir, "progress.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")

    def save(self, trainer: PPOTrainer, collectives: bool = True) -> None:
        """Rank 0 writes the replicated state; deterministic mode first
        gathers every rank's env and RNG state (all ranks are here together)."""
        per_rank = None
        if self.spec.deterministic and collectives:
            per_rank = distributed.gather_objects(self.ctx, trainer.rank_state())
            if per_rank is not None and any(own is None for own in per_rank):
                per_rank = None  # envs whose state is not plain data resume without it (envs.env_state)
        if not self.ctx.is_main or trainer.counters.updates == self.last_checkpoint_update:
            return
        state = {**trainer.shared_state(), "elapsed_seconds": self.wall_seconds(), "per_rank": per_rank}
        path = checkpoint.save(self.checkpoint_dir, trainer.counters.updates, state, self.spec.checkpoint.keep)
        self.last_checkpoint_update = trainer.counters.updates
        if self.metrics is not None:
            self.metrics.checkpointed()
        self.log(f"checkpoint {path} (timesteps {trainer.counters.global_step})")

    def finish(self, trainer: PPOTrainer, outcome: str) -> str:
        """Final checkpoint or model; returns the termination-log message."""
        steps = trainer.counters.global_step
        if self.ctx.is_main:
            self.report(steps)
        if outcome == "stopped":
            try:
                self.save(trainer)
            except PeerLost:  # a peer already left: rank 0 holds the replicated state
                self.save(trainer, collectives=False)
            return f"stopped at timesteps {steps}; resumable from {self.checkpoint_dir}"
        if self.ctx.is_main:
            self.write_final_model(trainer)
        if outcome == "target" and not self.ctx.is_main:
            return f"rank 0's evaluation met the target at timesteps {steps}"
        final = contract.final_numbers(steps, self.eval_return)
        if outcome == "target":
            return f"eval return {self.eval_return:.1f} >= {self.spec.success.target_return} at timesteps {steps}; model {self.config.final_model} {final}"
        return f"budget of {self.spec.total_timesteps} timesteps spent (timesteps {steps}, eval return {_fmt(self.eval_return)}); model {self.config.final_model} {final}"

    def write_final_model(self, trainer: PPOTrainer) -> None:
        buffer = io.BytesIO()
        torch.save(
            {
                "agent": trainer.agent.state_dict(),
                "obs_norm": trainer.obs_norm.state_dict() if trainer.hp.normalize_observation else None,
                "env_id": self.spec.env.id,
                "hidden_sizes": list(trainer.hp.hidden_sizes),
                "timesteps": trainer.counters.global_step,
                "eval_return": self.eval_return,
            },
            buffer,
        )
        checkpoint.write_atomic(self.final_model, buffer.getvalue())


def _resumable(state: dict) -> str | None:
    """Why a decoded checkpoint cannot be resumed from (None: it can)."""
    counters = state.get("counters")
    if not isinstance(counters, dict) or not all(isinstance(counters.get(k), int) for k in ("global_step", "updates", "episodes")):
        return "no integer counters (global_step, updates, episodes)"
    return None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
