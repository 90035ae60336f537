"""A run whose numbers went non-finite (a loss, a weight, an optimiser's moment), decided and said.

Once a loss is NaN or infinite the optimiser writes NaN into the weights, and a checkpoint written from then on
holds NaN: the last `checkpoint.keep` of them rotated every finite one out, and the final model the user got could
not act. The session never writes such a checkpoint or model (checkpoint.nonfinite judges the state); it ends the
run, every rank alike, under contract.REASON_DIVERGED, saying what went non-finite and when, which finite
checkpoint is kept, and what to change.

It is permanent: a restart resumes the same checkpoint with the same hyperparameters, and in deterministic mode
the same RNG state, so it diverges again (the same way, or a few updates on), each time on a GPU node's hours.
What ends it is a change to the job (a lower learning rate, a clip, smaller rewards), resumed from the kept
checkpoint.

Detection reads only numbers already on the host: each update's losses (read there for progress.jsonl) and a
checkpoint's or model's tensors (one host read per device per save, torch.save reads them all anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kuberl.core import safetext

NAMED = 2  # non-finite values named in a line; the rest counted

# what a user changes, per hyperparameter block, where the algorithm has it: lower rates, a tighter clip, rewards scaled
LOWER = ("learning_rate", "policy_learning_rate", "q_learning_rate", "max_grad_norm")
SCALE_REWARDS = "normalize_reward"


@dataclass(frozen=True)
class Divergence:
    """What went non-finite (`what`: named values, or a loss on another rank) and where the run stood."""

    what: str
    updates: int
    timesteps: int


def nonfinite_losses(losses: Mapping[str, float]) -> list[str]:
    """The names of an update's losses (UpdateReport.losses, host floats) that are NaN or infinite."""
    return [name for name, value in losses.items() if not math.isfinite(value)]


def named(paths: Sequence[str]) -> str:
    """`value_loss`, or `agent.critic.0.weight, agent.critic.0.bias and 34 more`; each path escaped onto one line and
    cut short, as a checkpoint's keys are the file's own (anyone's who can write the volume)."""
    shown = ", ".join(_short(path) for path in paths[:NAMED])
    return shown if len(paths) <= NAMED else f"{shown} and {len(paths) - NAMED} more"


def _short(path: str, width: int = 120) -> str:
    line = safetext.one_line(path[: 4 * width])
    return line if len(line) <= width else line[: width - 1] + "…"


def advice(algorithm: str, hyperparameters: object) -> str:
    """What to change, naming the job's own fields and their values: `try a lower spec.ppo.learningRate (0.0025) or
    maxGradNorm (0.5), spec.ppo.normalizeReward: true, or smaller rewards`. A field the algorithm has not is not named."""
    fields = getattr(type(hyperparameters), "model_fields", {})
    block = f"spec.{algorithm}."
    lower = [f"{fields[name].alias or name} ({getattr(hyperparameters, name):g})" for name in LOWER if name in fields]
    tries = [f"a lower {block}{' or '.join(lower)}"] if lower else []
    if SCALE_REWARDS in fields and not getattr(hyperparameters, SCALE_REWARDS):
        tries.append(f"{block}{fields[SCALE_REWARDS].alias or SCALE_REWARDS}: true")
    tries.append("smaller rewards")
    return "try " + ", ".join(tries[:-1]) + (", or " if len(tries) > 2 else " or ") + tries[-1]


def diverged_message(divergence: Divergence, kept: tuple[str, int] | None, advice_line: str) -> str:
    """The termination message: what went non-finite and when, the finite checkpoint kept (its path as the pod
    sees it, and timesteps; None: none was written), and what to try. Short: the job's status keeps about 380
    characters of it, its end."""
    where = f"last finite checkpoint kept: {kept[0]} (timesteps {kept[1]})" if kept else "no finite checkpoint was written"
    return f"{divergence.what} not finite at update {divergence.updates} (timesteps {divergence.timesteps}); {where}; {advice_line}"


def continuing(kept: tuple[str, int] | None, local: bool) -> str | None:
    """Rank 0's log line on going on from the kept checkpoint once the job is changed (None: there is none).
    `local`: `kuberl run`, whose --resume continues a run whose hyperparameters changed; on a cluster they are
    immutable, so a new job continues it."""
    if kept is None:
        return None
    if local:
        return f"`kuberl run --resume` with the job changed continues from {kept[0]}"
    return f"a new job continues from {kept[0]} once it is copied into that job's checkpoint directory"
