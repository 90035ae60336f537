"""`python -m kuberl_trainer --config FILE`: one rank of a kuberl job.

Exit and termination-log contract (kuberl.core.contract): 0 with "Succeeded: …"
(target met or budget spent) or "Stopped: … resumable" (SIGTERM/SIGINT);
78 with "ConfigError: spec.x.y: …" for a configuration that can never run, or
"Diverged: …" (a loss or the state went NaN or infinite; the last finite checkpoint
kept, and a restart would resume it to diverge again);
1 with "PeerLost: …" (a collective failed), "CheckpointVolumeFull: …" (a save
did not fit its claim), "CheckpointVolumeUnavailable: …" (the volume failed under
the job: an I/O error, a read-only remount; not counted toward backoffLimit) or
"Crashed: …" (anything else), all retried by the operator.

Deterministic mode (spec.deterministic): deterministic torch kernels, every
RNG seeded, and checkpoints that also carry each rank's env and RNG state, so
a run stopped and resumed ends bitwise equal to an uninterrupted one; seeds leave
the restart generation out, so a gang restarted before its first checkpoint
repeats the uninterrupted run too.
"""

from __future__ import annotations

import gc

# A pod's launch (not an import by tests or tools): no cyclic garbage collection while the
# imports create ~185,000 objects. Every full pass over them walked all made so far, a fifth of
# the launch-to-first-step time (2.40 against 3.02 s on a loaded 2-core machine, min of 6);
# startup is a real share of a CartPole solve. main() freezes what the imports made and
# turns the collector back on.
PAUSED_GC_FOR_IMPORTS = __name__ == "__main__"
if PAUSED_GC_FOR_IMPORTS:
    gc.disable()

import os
import signal
import threading

# A pod's launch: the first SIGTERM/SIGINT is remembered from before the imports (seconds of them), not a death
# there. A rank killed mid-import (Ctrl-C in `kuberl run`'s first seconds) left a peer that had got past its
# imports blocked in the rendezvous, waiting for it until the grace period ran out (30 s of silence); now every
# rank meets, and all stop at the first update boundary, rank 0 with a checkpoint.
STOPPED_EARLY = threading.Event()
if PAUSED_GC_FOR_IMPORTS:
    for _signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_signum, lambda _signum, _frame: STOPPED_EARLY.set())
    # A pod of several processes told to stop before its launcher started this rank (kuberl_trainer.launch)
    if os.environ.get("KUBERL_STOP_REQUESTED"):  # contract.ENV_STOP_REQUESTED, not imported yet
        STOPPED_EARLY.set()
    # kuberl_trainer.launch starts its ranks with these held (launch.HELD_FOR_RANKS): one sent since arrives now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM, signal.SIGINT))

import argparse
import contextlib
import json
import sys
import traceback
from collections.abc import Callable
from typing import NamedTuple, NoReturn

import numpy as np
import torch
from kuberl.core import contract, names, trainerconfig
from kuberl.core.validation import InvalidJob

from . import atari, dqn, fused, learners, ppo, sac, td3
from .budget import BufferTooLarge
from .checkpoint import (
    CheckpointVolumeFull,
    CheckpointVolumeUnavailable,
    UnusableCheckpoint,
)
from .device import describe as describe_device
from .device import gpus_missing
from .device import tune as tune_device
from .distributed import BadEnvironment, PeerLost, RendezvousPortTaken, process_group
from .envs import UnknownEnv
from .metrics import MetricsPortTaken, TrainerMetrics
from .networks import PolicyMismatch
from .paths import host_path
from .session import Algorithm, TrainingSession
from .startup import (
    Startup,
    one_line_warnings,
    one_write_per_line,
)
from .termination import write_reason


class AlgorithmEntry(NamedTuple):
    make: Callable[..., Algorithm]  # (ctx, hyperparameters, env_id, num_envs, env_kwargs, total_timesteps, seed, restart, env_backend=)


# spec.algorithm -> its trainer: the only place that names the algorithms
ALGORITHMS: dict[str, AlgorithmEntry] = {
    "ppo": AlgorithmEntry(ppo.PPOTrainer),
    "dqn": AlgorithmEntry(dqn.DQNTrainer),
    "sac": AlgorithmEntry(sac.SACTrainer),
    "td3": AlgorithmEntry(td3.TD3Trainer),
}

# torch's teardown of DDP and the process group can block on a peer that
# already left; what ran stays referenced here and the OS tears it down (os._exit).
_KEEP_ALIVE: list[object] = []


class ConfigError(ValueError):
    """A configuration that can never run; the message starts with its field."""


def load_config(path: str) -> trainerconfig.TrainerConfig:
    try:
        with open(host_path(path)) as f:
            document = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"--config: cannot read {path}: {e}") from e
    return trainerconfig.load(document)  # the spec's own rules (kuberl.core.rules' CROSS_FIELD_RULES) included


def seed_everything(seed: int, deterministic: bool) -> None:
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # use_deterministic_algorithms(True) also sets inductor's flag, importing torch._inductor and torch._dynamo
        # (about 2.5 s of CPU per rank) for a trainer that never compiles; "error" sets the same flag for every op
        torch.set_deterministic_debug_mode("error")
        torch.backends.cudnn.benchmark = False


def install_stop_handlers(stop: threading.Event) -> None:
    """First SIGTERM/SIGINT: stop at the next update boundary. A second SIGINT
    interrupts at once."""

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def run(config: trainerconfig.TrainerConfig, stop: threading.Event, startup: Startup | None = None) -> tuple[str, str]:
    """Train one rank; returns (reason, message) for the termination log."""
    startup = startup or Startup()
    spec = config.spec
    restart = int(os.environ.get(contract.ENV_RESTART, "0") or 0)
    seed_everything(spec.seed, spec.deterministic)
    # torch._dynamo imported while the CUDA context is made and the envs reset, which wait outside the GIL
    dynamo = learners.imports_torch_dynamo(atari.is_atari(spec.env.id), spec.gpus_per_worker > 0, spec.hyperparameters)
    policy = spec.run_policy
    with process_group(spec.rendezvous.backend, policy.collective_timeout_seconds, policy.rendezvous_timeout_seconds,
                       background_imports=("torch._dynamo",) if dynamo else ()) as ctx:
        startup.mark("rendezvous")
        if ctx.device.type == "cuda":  # its own phase: creating the context is a GPU node's first cost
            torch.empty(0, device=ctx.device)
            torch.cuda.synchronize(ctx.device)
            startup.mark("cuda context")
        tune_device(ctx.device, spec.deterministic)
        fused.flush_subnormals()  # this thread runs the learner: Adam's dead moments cost no more than live ones
        if ctx.is_main and (note := atari.build_note(spec.env.id, spec.env.num_envs, spec.env.backend)):
            print(f"kuberl trainer: {note}", flush=True)
        # deterministic mode: a gang restarted before its first checkpoint trains what an uninterrupted run trains
        # (a resume restores every rank's RNGs and envs from the checkpoint, whatever the seeds)
        seed_generation = 0 if spec.deterministic else restart
        try:
            trainer = ALGORITHMS[spec.algorithm].make(ctx, spec.hyperparameters, spec.env.id, spec.env.num_envs, spec.env.kwargs,
                                                      spec.total_timesteps, spec.seed, seed_generation, env_backend=spec.env.backend)
        except (UnknownEnv, PolicyMismatch, BufferTooLarge) as e:
            raise ConfigError(str(e)) from e
        _KEEP_ALIVE.append(trainer)
        startup.mark("envs", at=trainer.envs_ready_at)
        startup.mark("networks")
        metrics = TrainerMetrics(config.job, ctx.rank, ctx.world_size, ctx.device)
        metrics.serve(os.environ.get(contract.ENV_METRICS_ADDR, "127.0.0.1"), spec.metrics.port, ctx.local_rank)
        log = print if ctx.is_main else (lambda *_a, **_k: None)
        session = TrainingSession(config, ctx, metrics, restart, stop, log=lambda s: log(s, flush=True), startup=startup)
        if ctx.is_main:
            print(f"kuberl trainer: job {config.job}, {ctx.world_size} rank(s), backend {ctx.backend or 'none'}, "
                  f"{'rollouts collected while the one before is learned from, ' if getattr(trainer.hp, 'learn_while_collecting', False) else ''}"
                  f"rank 0 on {describe_device(ctx.device)}", flush=True)  # the budget left: run_updates says it, once resumed
            if note := gpus_missing(spec.gpus_per_worker, ctx.device):
                print(f"kuberl trainer: {note}", flush=True)
        try:
            try:
                outcome = trainer.train(session)
            except PeerLost:
                if session.end_after_peer_lost(trainer):  # rank 0 holds the replicated state
                    return contract.REASON_STOPPED, f"stopped at timesteps {trainer.counters.global_step} (a peer left first); resumable"
                raise
            message = session.finish(trainer, outcome)
        except BaseException as e:  # the tracked runs end as what ended them, not left RUNNING (a second end is none)
            end_tracking(session, e)
            raise
        if session.ended_diverged:  # voted in an update, as the run ended (finish's own vote), or a stop's state
            return contract.REASON_DIVERGED, message
        return (contract.REASON_STOPPED if outcome == "stopped" else contract.REASON_SUCCEEDED), message


def ended_as(error: BaseException) -> str:
    """A tracked run's status (MLflow's RunStatus) when `error` ended the generation: KILLED where a restart resumes
    it as a stop's (a peer left, an interrupt), FAILED for a crash."""
    return "KILLED" if isinstance(error, (PeerLost, KeyboardInterrupt)) else "FAILED"


def end_tracking(session: TrainingSession, error: BaseException) -> None:
    """The tracked runs ended as `error` ended the generation; what fails in that (a Ctrl-C while it waits, a closed
    stdout) is said and left, so `error` stays what the termination log reports (raised from here, a Ctrl-C in the
    wait had a full volume's crash reported as "interrupted twice")."""
    try:
        session.close_tracking(ended_as(error))
    except BaseException as e:  # noqa: BLE001 — the run's own error is raised next, whatever this one is
        with contextlib.suppress(OSError):
            print(f"kuberl trainer: the tracked runs were not ended ({type(e).__name__}: {e}) after"
                  f" {type(error).__name__}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kuberl_trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.environ.get(contract.ENV_CONFIG, f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"))
    startup = Startup()  # imports are done: the first phase ends here
    if PAUSED_GC_FOR_IMPORTS:
        gc.freeze()  # the imports' objects live as long as the process: no collection need walk them
        gc.enable()
        one_write_per_line(sys.stdout, sys.stderr)
        one_line_warnings()
    args = parser.parse_args(argv)
    stop = STOPPED_EARLY if PAUSED_GC_FOR_IMPORTS else threading.Event()  # a pod's launch: set if a signal came already
    install_stop_handlers(stop)
    try:
        config = load_config(args.config)
        reason, message = run(config, stop, startup)
    except InvalidJob as e:
        write_reason(contract.REASON_CONFIG_ERROR, "; ".join(str(p) for p in e.problems))
        return contract.EXIT_CONFIG_ERROR
    except UnusableCheckpoint as e:  # retrying cannot change these; the reason names which
        write_reason(e.reason, str(e))
        return contract.EXIT_CONFIG_ERROR
    except (ConfigError, UnknownEnv, BadEnvironment) as e:  # retrying cannot change these
        # UnknownEnv here: an env made without complaint that failed its first reset or step (envs.guard_first_step)
        write_reason(contract.REASON_CONFIG_ERROR, str(e))
        return contract.EXIT_CONFIG_ERROR
    except PeerLost as e:
        write_reason(contract.REASON_PEER_LOST, str(e))
        return 1
    except CheckpointVolumeFull as e:  # retryable (the claim may be expanded); its own reason, so restarts say why
        write_reason(contract.REASON_CHECKPOINT_VOLUME_FULL, str(e))
        return 1
    except CheckpointVolumeUnavailable as e:  # retryable, uncounted: the storage failed under the job, not the workload
        write_reason(contract.REASON_CHECKPOINT_VOLUME_UNAVAILABLE, str(e))
        return 1
    except (MetricsPortTaken, RendezvousPortTaken) as e:  # retryable, and its message says everything a traceback would
        write_reason(contract.REASON_CRASHED, str(e))
        return 1
    except KeyboardInterrupt:
        write_reason(contract.REASON_STOPPED, "interrupted twice; not checkpointed since the last periodic checkpoint")
        return 130
    except Exception as e:  # noqa: BLE001 — every other failure is retryable
        traceback.print_exc()
        write_reason(contract.REASON_CRASHED, f"{type(e).__name__}: {e}")
        return 1
    write_reason(reason, message)
    return contract.EXIT_CONFIG_ERROR if reason in contract.PERMANENT_REASONS else contract.EXIT_OK  # Diverged


def exit_process(code: int) -> NoReturn:
    """End the process without the interpreter's teardown: destroying gloo's or NCCL's process group could block on a
    peer that left, and C++ threads still joinable at exit (ale-py's vector env's, the process group's) abort the
    process with `terminate called without an active exception`, turning a finished run's exit 0 into a signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_process(main())
