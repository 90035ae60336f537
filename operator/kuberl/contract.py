"""The contract between operator, pod and trainer: exit codes and reasons.

The trainer writes one line `<Reason>: <message>` to the termination log. torch's
launcher turns every child failure into exit 1, so the reason, not the exit
code, is what tells the operator a failure is permanent.
"""

import re

# sysexits.h EX_CONFIG: a configuration error, never retried.
EXIT_CONFIG_ERROR = 78
EXIT_OK = 0

REASON_CONFIG_ERROR = "ConfigError"  # permanent: fail the job at once
REASON_SUCCEEDED = "Succeeded"  # target reached or budget spent
REASON_STOPPED = "Stopped"  # SIGTERM/SIGINT; a resumable checkpoint was saved
REASON_CRASHED = "Crashed"  # anything else: retryable
REASON_PEER_LOST = "PeerLost"  # a collective failed or timed out: retryable

# Environment variables the operator renders and the trainer reads.
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_NNODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_JOB = "KUBERL_JOB"
ENV_RESTART = "KUBERL_RESTART"
ENV_METRICS_ADDR = "KUBERL_METRICS_ADDR"
ENV_CONFIG = "KUBERL_CONFIG"
# Set only when pods run as local processes: the directory that stands in for
# the pod's filesystem root, so absolute mount paths in the rendered pod need
# no rewriting.
ENV_FS_ROOT = "KUBERL_FS_ROOT"

# The operator pod's configuration beyond `kuberl operator` flags, set by the
# chart (charts/kuberl/templates/_helpers.tpl); tests/unit/test_chart.py checks
# the chart sets exactly these.
ENV_OPERATOR_TRAINER_IMAGE = "KUBERL_TRAINER_IMAGE"  # image of jobs that set no spec.image
ENV_OPERATOR_TRAINER_IMAGE_PULL_POLICY = "KUBERL_TRAINER_IMAGE_PULL_POLICY"  # for jobs that set none
ENV_OPERATOR_TRAINER_IMAGE_PULL_SECRETS = "KUBERL_TRAINER_IMAGE_PULL_SECRETS"  # comma-separated Secret names
ENV_OPERATOR_LOG_LEVEL = "KUBERL_LOG_LEVEL"  # debug, info, warning or error
ENV_OPERATOR_METRICS_ENABLED = "KUBERL_METRICS_ENABLED"  # "true"/"false": serve /metrics on --metrics-port
ENV_OPERATOR_POD_NAMESPACE = "KUBERL_POD_NAMESPACE"  # the operator's own namespace (downward API)
ENV_OPERATOR_POD_INDEX = "KUBERL_POD_INDEX"  # StatefulSet ordinal, expanded into --priority when peering


# A Succeeded message ends with the final numbers, so the job's status shows
# where training ended, not the last scrape before rank 0 exited.
_FINAL_NUMBERS = re.compile(r"\[final timesteps=(\d+) evalReturn=([-+0-9.eE]+|none)\]")


def final_numbers(timesteps: int, eval_return: float | None) -> str:
    shown = "none" if eval_return is None else f"{eval_return:.6g}"
    return f"[final timesteps={timesteps} evalReturn={shown}]"


def parse_final_numbers(message: str | None) -> tuple[int, float | None] | None:
    found = _FINAL_NUMBERS.search(message or "")
    if not found:
        return None
    return int(found.group(1)), None if found.group(2) == "none" else float(found.group(2))
