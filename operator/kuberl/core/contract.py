"""The contract between operator, pod and trainer: exit codes, reasons, env names.

The trainer writes one line `TERMINATION_MARKER<Reason>: <message>` to the
termination log. torch's launcher turns every child failure into exit 1, so the
reason, not the exit code, is what tells the operator a failure is permanent.
With `FallbackToLogsOnError` the kubelet puts the log's tail in the same field
when the file is empty, so only a line that starts with the marker (which no log
line does: the trainer prints its reason unmarked) states a reason.
"""

import hashlib
import math
import os
import re
import stat
from collections.abc import Mapping

from . import safetext

# sysexits.h EX_CONFIG: a configuration error, never retried.
EXIT_CONFIG_ERROR = 78
EXIT_OK = 0

REASON_CONFIG_ERROR = "ConfigError"  # permanent: fail the job at once
REASON_SUCCEEDED = "Succeeded"  # target reached or budget spent
REASON_STOPPED = "Stopped"  # SIGTERM/SIGINT; a resumable checkpoint was saved
REASON_CRASHED = "Crashed"  # anything else: retryable
REASON_PEER_LOST = "PeerLost"  # a collective failed or timed out: retryable
REASON_CHECKPOINT_VOLUME_FULL = "CheckpointVolumeFull"  # a save did not fit: retryable (the claim may be expanded)
REASON_NO_USABLE_CHECKPOINT = "NoUsableCheckpoint"  # permanent: checkpoints exist, none loads (kept, named)
REASON_CHECKPOINT_READ_ONLY = "CheckpointVolumeReadOnly"  # permanent: no restart makes a volume writable
REASON_CHECKPOINT_FORBIDDEN = "CheckpointVolumeForbidden"  # permanent: the trainer's user may not use the volume
# permanent: a loss or the weights went NaN or infinite; the last finite checkpoint is kept, and a restart resuming it
# with the same hyperparameters diverges again (kuberl_trainer.divergence)
REASON_DIVERGED = "Diverged"
# The checkpoint volume failed under a running job (EIO, ESTALE, ENOTCONN; EROFS on a volume that was writable when
# the rank started: the kernel remounted it after errors): retried, NOT counted toward backoffLimit. It is the
# storage's fault, not the workload's, as a preemption is (Kubernetes' podFailurePolicy `Ignore` on DisruptionTarget,
# JobSet's RestartJobSetAndIgnoreMaxRestarts); a new pod re-stages the volume (CSI NodeStage: fsck and a fresh
# mount, maybe on another node). Bounded by the uncounted restarts' CrashLoopBackOff-like backoff, not a budget.
REASON_CHECKPOINT_VOLUME_UNAVAILABLE = "CheckpointVolumeUnavailable"
# Reasons that fail the job at once, whatever the restart budget.
PERMANENT_REASONS = frozenset({REASON_CONFIG_ERROR, REASON_NO_USABLE_CHECKPOINT, REASON_CHECKPOINT_READ_ONLY,
                               REASON_CHECKPOINT_FORBIDDEN, REASON_DIVERGED})
# Reasons a failed pod states that restart the gang without spending backoffLimit.
UNCOUNTED_REASONS = frozenset({REASON_CHECKPOINT_VOLUME_UNAVAILABLE})
TRAINER_REASONS = frozenset({*PERMANENT_REASONS, *UNCOUNTED_REASONS, REASON_SUCCEEDED, REASON_STOPPED, REASON_CRASHED,
                             REASON_PEER_LOST, REASON_CHECKPOINT_VOLUME_FULL})

# The trainer's checkpoint files, ckpt-<updates, 10 digits>.pt: it resumes from the newest that loads, and
# `kuberl run` names the one it expects.
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")

# A checkpoint file is `KUBERLCKPT<version> <sha256 of payload>\n<payload>` (kuberl_trainer.checkpoint): its frame
# is read here, without torch, so `kuberl run` names the checkpoint the trainer will take by the trainer's own rule.
CHECKPOINT_HEADER = re.compile(rb"^KUBERLCKPT(\d{1,6}) ([0-9a-f]{64})$")
CHECKPOINT_HEADER_BYTES = 96  # a header line is shorter: what is read before a file is known to be a checkpoint
NOT_A_CHECKPOINT = "not a kuberl checkpoint (bad header)"
CHECKSUM_MISMATCH = "checksum mismatch (truncated or corrupted)"


def checkpoint_header(line: bytes) -> tuple[int, bytes] | None:
    """(format version, the payload's sha256 as hex bytes) from a checkpoint file's first line (its newline
    stripped), or None: not a kuberl checkpoint."""
    match = CHECKPOINT_HEADER.match(line)
    return None if match is None else (int(match.group(1)), match.group(2))


def payload_matches(digest: bytes, chunks) -> bool:
    """Whether the payload given as `chunks` (bytes) hashes to the header's `digest`."""
    hashed = hashlib.sha256()
    for chunk in chunks:
        hashed.update(chunk)
    return hashed.hexdigest().encode() == digest


def checkpoint_flaw(path: str) -> str | None:
    """Why the trainer skips the checkpoint file at `path` for its frame alone (NOT_A_CHECKPOINT, CHECKSUM_MISMATCH, not
    a regular file), or None when its header and checksum hold: the trainer still decodes the payload and checks
    what it was trained as. Reads in chunks: memory stays small whatever the file's size. OSError is raised."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        head = f.readline(CHECKPOINT_HEADER_BYTES)
        header = checkpoint_header(head.rstrip(b"\n"))
        if header is None:
            return NOT_A_CHECKPOINT
        remaining = max(0, info.st_size - len(head))  # no more than fstat said, as the trainer reads it

        def chunks():
            left = remaining
            while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                left -= len(chunk)
                yield chunk

        return None if payload_matches(header[1], chunks()) else CHECKSUM_MISMATCH

# Starts the termination-log line; a log line never does (see module docstring).
TERMINATION_MARKER = "kuberl.dev/reason "


# The kubelet keeps the LAST 4096 bytes of a termination message (pkg/kubelet/kuberuntime getTerminationMessage:
# tail.ReadAtMost(path, MaxContainerTerminationMessageLength)): a longer line loses its marker, and with it its
# reason (a permanent ConfigError read as a crash). Cut in UTF-8 bytes: 4000 characters of 'é' are 8000.
MAX_STATED_BYTES = 4000


def stated_line(reason: str, message: str) -> str:
    """`<Reason>: <message>` on one line, its control characters escaped (safetext: the message may quote a file
    or a spec), cut to MAX_STATED_BYTES of UTF-8: what the trainer states."""
    line = safetext.one_line(f"{reason}: {message}".replace("\n", " "))
    return line.encode()[:MAX_STATED_BYTES].decode(errors="ignore")


def termination_line(reason: str, message: str) -> str:
    """The one line the trainer writes to its termination log: the marker, then `stated_line`."""
    return TERMINATION_MARKER + stated_line(reason, message)


def stated_reason(message: str | None) -> tuple[str, str] | None:
    """(reason, text) when `message` is a marked line naming one of the trainer's
    reasons; None for anything else (a log tail, an external script's output)."""
    if not message or not message.startswith(TERMINATION_MARKER):
        return None
    text = message[len(TERMINATION_MARKER):].strip()
    reason = text.split(":", 1)[0].strip()
    return (reason, text) if reason in TRAINER_REASONS else None

def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of command, args and env values (the kubelet's expansion.Expand): `$(VAR)` becomes
    VAR's value when defined and stays as written otherwise; `$$` is a literal `$`."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


# Environment variables the operator renders and the trainer reads.
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_NNODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"  # set by torchrun for each child: the ranks of this pod
ENV_JOB = "KUBERL_JOB"
ENV_RESTART = "KUBERL_RESTART"
ENV_METRICS_ADDR = "KUBERL_METRICS_ADDR"
ENV_CONFIG = "KUBERL_CONFIG"
# torch's launcher reads its flags from PET_<FLAG> (torch/distributed/argparse_util.py).
ENV_PET_NNODES = "PET_NNODES"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"
ENV_PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"  # always MASTER_ADDR:MASTER_PORT: the static backend prefers it too
ENV_PET_RDZV_ID = "PET_RDZV_ID"
ENV_PET_RDZV_CONF = "PET_RDZV_CONF"  # is_host=true on worker 0 only: c10d's store lives there
ENV_PET_LOCAL_ADDR = "PET_LOCAL_ADDR"  # this pod's DNS name: where c10d's workers find group rank 0
# How long torch's launcher (torchrun, in a pod of several processes) waits for its
# children after passing on a SIGTERM before it kills them (torch/distributed/launcher/api.py
# reads it; 30 s unset): kuberl sets the pod's grace period, so a stop's checkpoint has it all.
ENV_TORCH_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
# Set by kuberl's launcher (a pod of several processes) in the environment of the ranks it starts
# after the pod was told to stop (SIGTERM/SIGINT while the launcher imported torch): each rank stops
# at its first update, rank 0 saving, as a rank signalled during its own imports does. A KUBERL_
# name: no spec may set it.
ENV_STOP_REQUESTED = "KUBERL_STOP_REQUESTED"
# Set only when pods run as local processes: the directory that stands in for
# the pod's filesystem root, so absolute mount paths in the rendered pod need
# no rewriting.
ENV_FS_ROOT = "KUBERL_FS_ROOT"

# The identity kuberl gives each pod: a spec's env may not set these (two pods
# both rank 0 wait forever), nor any KUBERL_ name. Tuning names stay the user's:
# OMP_NUM_THREADS, PYTHONUNBUFFERED, TORCH_ELASTIC_SHUTDOWN_TIMEOUT, and torch launcher flags kuberl does not
# set (PET_MAX_RESTARTS, PET_RDZV_BACKEND: a script's own choice).
RESERVED_ENV_NAMES = frozenset({
    ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_NNODES, ENV_NODE_RANK, ENV_NPROC_PER_NODE,
    ENV_WORLD_SIZE, ENV_RANK, ENV_LOCAL_RANK,
    ENV_PET_NNODES, ENV_PET_NODE_RANK, ENV_PET_NPROC_PER_NODE, ENV_PET_MASTER_ADDR, ENV_PET_MASTER_PORT,
    ENV_PET_RDZV_ENDPOINT, ENV_PET_RDZV_ID, ENV_PET_RDZV_CONF, ENV_PET_LOCAL_ADDR,
    ENV_JOB, ENV_RESTART, ENV_METRICS_ADDR, ENV_CONFIG, ENV_FS_ROOT,
})
RESERVED_ENV_PREFIXES = ("KUBERL_",)


# torch's launcher tells the processes it starts that its agent hosts the rendezvous store (torch.distributed's
# _create_c10d_store: every rank a client); set in a spec, a one-process pod's rank 0 is a client too and no one
# hosts the store. Refused in the trainer container; under torchrun the agent sets its own.
ENV_TORCH_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"


def is_reserved_env(name: str) -> bool:
    return name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES)

# The operator pod's configuration beyond `kuberl operator` flags, set by the
# chart (charts/kuberl/templates/_helpers.tpl); tests/unit/test_chart.py checks
# the chart sets exactly these.
ENV_OPERATOR_TRAINER_IMAGE = "KUBERL_TRAINER_IMAGE"  # image of jobs that set no spec.image
ENV_OPERATOR_TRAINER_IMAGE_PULL_POLICY = "KUBERL_TRAINER_IMAGE_PULL_POLICY"  # for jobs that set none
ENV_OPERATOR_TRAINER_IMAGE_PULL_SECRETS = "KUBERL_TRAINER_IMAGE_PULL_SECRETS"  # comma-separated Secret names
# The most of them the operator takes: each job records them (status.trainerDefaults.imagePullSecrets, the CRD's
# maxItems), so a record it writes always fits.
MAX_TRAINER_PULL_SECRETS = 64
ENV_OPERATOR_TRAINER_CPU_PER_PROCESS = "KUBERL_TRAINER_CPU_PER_PROCESS"  # default CPU request per process (1)
ENV_OPERATOR_TRAINER_MEMORY_PER_PROCESS = "KUBERL_TRAINER_MEMORY_PER_PROCESS"  # default memory request per process (2Gi)
ENV_OPERATOR_TRAINER_POD_DEFAULTS = "KUBERL_TRAINER_POD_DEFAULTS"  # JSON: a platform's labels, env, tolerations ... (poddefaults)
ENV_OPERATOR_LOG_LEVEL = "KUBERL_LOG_LEVEL"  # debug, info, warning or error
ENV_OPERATOR_METRICS_ENABLED = "KUBERL_METRICS_ENABLED"  # "true"/"false": serve /metrics on --metrics-port
ENV_OPERATOR_POD_NAMESPACE = "KUBERL_POD_NAMESPACE"  # the operator's own namespace (downward API)
ENV_OPERATOR_POD_INDEX = "KUBERL_POD_INDEX"  # StatefulSet ordinal, expanded into --priority when peering


# A Succeeded message ends with the final numbers, so the job's status shows
# where training ended, not the last scrape before rank 0 exited.
_FINAL_NUMBERS = re.compile(r"\[final timesteps=(\d{1,16}) evalReturn=([-+0-9.eE]{1,32}|none)\]")
# What reaches a job's status from a pod (these final numbers, rank 0's metrics page) is the tenant's to write: only
# integers a JSON reader keeps exactly, and finite returns of a sane size (no NaN, infinity or 301-digit number, which
# the status write, or `kubectl get`, cannot take)
MAX_STATUS_TIMESTEPS = 2**53
MAX_STATUS_GAUGE = 1e15


# Algorithms whose training episodes act with learningStarts' random actions, then sampled (SAC) or noised (TD3) ones:
# the mean of their last 100 is far below the evaluation's deterministic policy (Pendulum's SAC: -1,260 beside eval
# -188 as it succeeded) and, named only "return", read as not learning. The metric keeps its name.
EXPLORING_ALGORITHMS = frozenset({"sac", "td3"})


def training_return_label(algorithm: str | None) -> str:
    """The name of the training episodes' mean return in rank 0's progress line and `kuberl run`'s bar."""
    return "exploring return" if algorithm in EXPLORING_ALGORITHMS else "return"


def shown_return(value: float | None) -> str:
    """A return as progress lines and a run's last line write it: one decimal from 10 up (CartPole's 494.9), three
    significant digits below (FrozenLake's 0.685 was "0.7" beside a success.targetReturn of 0.7 it had not met); "-"
    for none yet."""
    if value is None:
        return "-"
    if abs(value) >= 10 or not math.isfinite(value):
        return f"{value:.1f}"
    text = f"{value:.3g}"
    return text if "." in text or "e" in text else f"{text}.0"


def final_numbers(timesteps: int, eval_return: float | None) -> str:
    shown = "none" if eval_return is None else f"{eval_return:.6g}"
    return f"[final timesteps={timesteps} evalReturn={shown}]"


def parse_final_numbers(message: str | None) -> tuple[int, float | None] | None:
    """The final numbers a Succeeded message ends with; None without them, or when they are not numbers status holds."""
    found = _FINAL_NUMBERS.search(message or "")
    if not found:
        return None
    timesteps, eval_return = int(found.group(1)), None
    if found.group(2) != "none":
        try:
            eval_return = float(found.group(2))
        except ValueError:  # '-.', 'e': the pattern's letters, not a number
            return None
        if not math.isfinite(eval_return) or abs(eval_return) > MAX_STATUS_GAUGE:
            return None
    return (timesteps, eval_return) if timesteps <= MAX_STATUS_TIMESTEPS else None
