"""Which network torso reads an env's observations (spec.ppo.policy, spec.dqn.policy), written once for
the trainer (kuberl_trainer.networks builds it), `kuberl validate` (envspaces, which makes the env) and
the operator (rules, for an ALE id's frames, without gymnasium): a forced torso that cannot read the
observations was refused only by the trainer, once the job's pods (GPU pods, for Atari) had started.

`auto` picks the Nature DQN CNN for image observations (a uint8 Box of 2 or 3 dimensions, each side at
least MIN_SIDE: envspaces.is_image) and an MLP otherwise.
"""

from __future__ import annotations

from .validation import Problem

POLICIES = ("auto", "mlp", "cnn")
MIN_SIDE = 36  # the Nature CNN's three convolutions (8/4, 4/2, 3/1) need frames at least this high and wide


def torso(image: bool, requested: str) -> str:
    """"cnn" or "mlp": the forced one, or for `auto` the CNN where the observations are images."""
    return ("cnn" if image else "mlp") if requested == "auto" else requested


def torso_problem(image: bool, shape: tuple[int, ...], described: str, requested: str) -> str | None:
    """Why the torso `requested` cannot read observations of `shape` (`described`: the space as a person
    reads it); None when it can."""
    if requested not in POLICIES:
        return f"expected one of {', '.join(POLICIES)} (got {requested!r})"
    if requested == "mlp" and image:
        return f"'mlp' cannot learn from {shape} pixel observations; use 'cnn' or 'auto'"
    if requested == "cnn" and not image:
        return (f"'cnn' needs uint8 image observations (H, W), (C, H, W) or (H, W, C), at least {MIN_SIDE}x{MIN_SIDE};"
                f" the env gives {described}; use 'mlp' or 'auto'")
    return None


def network_problem(algorithm: str, image: bool, shape: tuple[int, ...], described: str, policy: str,
                    normalize_observation: bool) -> Problem | None:
    """The network options of spec.<algorithm> that these observations (as the networks read them) refuse:
    a forced torso that cannot read them, or PPO's observation normaliser on frames."""
    if problem := torso_problem(image, shape, described, policy):
        return Problem(f"spec.{algorithm}.policy", problem)
    if normalize_observation and torso(image, policy) == "cnn":
        return Problem(f"spec.{algorithm}.normalizeObservation", "not for pixels (the CNN scales uint8 frames by 1/255)")
    return None
