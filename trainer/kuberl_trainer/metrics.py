"""Prometheus exporter, one registry per rank, names from kuberl.core.metricnames.

Every series carries `rltj` (the job) and `rank`. Counters are global
(all-reduced) values, so rank 0's steps counter is the job's progress.
"""

from __future__ import annotations

import math
import time

import torch
from kuberl.core import metricnames as m
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class MetricsPortTaken(RuntimeError):
    """The rank's metrics port is held by another socket: retryable (it may free up)."""


class TrainerMetrics:
    def __init__(self, job: str, rank: int, world_size: int, device: torch.device | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {m.LABEL_RLTJ: job, m.LABEL_RANK: str(rank)}

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, list(m.LABELS), registry=self.registry).labels(**labels)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, list(m.LABELS), registry=self.registry).labels(**labels)

        def histogram(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, list(m.LABELS), registry=self.registry, buckets=DURATION_BUCKETS).labels(**labels)

        self.env_steps = counter(m.ENV_STEPS_TOTAL, "Env steps across all ranks (all-reduced).")
        self.episodes = counter(m.EPISODES_TOTAL, "Episodes finished across all ranks (all-reduced).")
        self.policy_updates = counter(m.POLICY_UPDATES_TOTAL, "Policy updates (rollout + optimisation rounds).")
        self.checkpoints = counter(m.CHECKPOINTS_TOTAL, "Checkpoints written by this rank.")
        self.episode_return = gauge(m.EPISODE_RETURN, "Mean return of recent episodes, all ranks.")
        self.eval_return = gauge(m.EVAL_RETURN, "Mean return of the latest evaluation (rank 0).")
        self.steps_per_second = gauge(m.STEPS_PER_SECOND, "Global env steps per second since the last report.")
        self.learning_rate = gauge(m.LEARNING_RATE, "Current learning rate.")
        self.world_size = gauge(m.WORLD_SIZE, "Ranks in the process group.")
        self.success = gauge(m.SUCCESS, "1 once the success target is met.")
        self.last_checkpoint = gauge(m.LAST_CHECKPOINT_TIMESTAMP, "Unix time of the last checkpoint written.")
        self.checkpoints_skipped = gauge(m.CHECKPOINTS_SKIPPED, "Checkpoints newer than the one this start resumed from "
                                         "that could not be used (truncated, corrupt, refused): their training is done again.")
        self.checkpoint_save_seconds = gauge(m.CHECKPOINT_SAVE_SECONDS, "Seconds rank 0's last checkpoint took to write; "
                                             "longer than the pod's grace period, a stop's checkpoint is killed mid-write.")
        self.resumed_timesteps = gauge(m.RESUMED_TIMESTEPS, "Timesteps of the checkpoint this start resumed from; 0: it "
                                       "found none and started from zero (NaN until rank 0 has looked).")
        self.losses = {name: gauge(metric, doc) for name, (metric, doc) in m.LOSS_GAUGES.items()}  # by statistic name
        self.rollout_duration = histogram(m.ROLLOUT_DURATION, "Time an update waited for its rollout (with ppo.learnWhileCollecting, only the part the update did not hide).")
        self.update_duration = histogram(m.UPDATE_DURATION, "Time of one optimisation round (epochs x minibatches).")
        self.allreduce_duration = histogram(m.ALLREDUCE_DURATION, "Time of the update's counter all-reduce.")
        if device is not None and device.type == "cuda":
            gauge(m.GPU_MEMORY_TOTAL, "Memory of this rank's GPU.").set(torch.cuda.get_device_properties(device).total_memory)
            # read when scraped: the allocator's figure between updates, with no work in the training loop
            gauge(m.GPU_MEMORY_RESERVED, "GPU memory torch's caching allocator holds for this rank (torch.cuda.memory_reserved)."
                  ).set_function(lambda: torch.cuda.memory_reserved(device))
        self.world_size.set(world_size)
        self.success.set(0)
        # unknown until the first episodes end and the first evaluation runs (a resumed rank too): NaN, which
        # the operator reads as none, not 0, a return no run reached (kubectl get rltj's RETURN and EVAL)
        self.episode_return.set(math.nan)
        self.eval_return.set(math.nan)
        self.resumed_timesteps.set(math.nan)  # a scrape before rank 0 looked must not read as "started from zero"

    def serve(self, addr: str, base_port: int, local_rank: int = 0) -> None:
        """Serve on base_port + local_rank (spec.metrics.port is local rank 0's). A port
        something else holds ends the rank naming the field, not with bind()'s traceback."""
        port = base_port + local_rank
        try:
            start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            raise MetricsPortTaken(
                f"metrics port {port} on {addr} (spec.metrics.port {base_port} + local rank {local_rank}) cannot be"
                f" served: {e.strerror or e}; another process or container of the pod holds it, or it lies in the"
                " kernel's ephemeral range (ip_local_port_range) where outgoing connections take ports:"
                " choose another spec.metrics.port") from None

    def checkpointed(self, seconds: float = 0.0) -> None:
        self.checkpoints.inc()
        self.last_checkpoint.set(time.time())
        self.checkpoint_save_seconds.set(seconds)
