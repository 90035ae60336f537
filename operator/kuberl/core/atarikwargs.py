"""kuberl's own keys of spec.env.kwargs for an Atari (ALE) id, and the keys its backends take, read once for
the trainer (kuberl_trainer.atari, which documents the protocols) and `kuberl validate` (envspaces.env_problem),
and the operator's judge (rules.validate_job, an id `is_ale_id` knows), which name what the trainer would refuse at start
without an emulator. Pure: no gymnasium, no ale-py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import torsos
from .validation import Problem

# ale-py's Gym-era ids, <Game>NoFrameskip-v0 and -v4 (the Nature papers' spelling, CleanRL's Atari scripts'
# default: BreakoutNoFrameskip-v4): no other package's. Its bare <Game>-v4 could be anyone's, so it is not here.
NO_FRAMESKIP_ID = re.compile(r"[A-Z][A-Za-z0-9]*NoFrameskip-v[04]")


def is_ale_id(env_id: str) -> bool:
    """An id only ale-py registers, known by its name alone (without ale-py): its ALE/ namespace, or NO_FRAMESKIP_ID."""
    return env_id.startswith("ALE/") or NO_FRAMESKIP_ID.fullmatch(env_id) is not None


@dataclass(frozen=True)
class Protocol:
    sticky_actions: float  # probability that the emulator repeats the previous action
    noop_max: int
    episodic_life: bool


PROTOCOLS = {
    "modern": Protocol(sticky_actions=0.25, noop_max=30, episodic_life=False),
    "nature": Protocol(sticky_actions=0.0, noop_max=30, episodic_life=False),
}
DEFAULT_PROTOCOL = "modern"


@dataclass(frozen=True)
class AtariOptions:
    """kuberl's own keys of spec.env.kwargs, checked, with the rest apart."""

    protocol: str
    frame_stack: int
    noop_max: int
    episodic_life: bool
    clip_rewards: bool
    make_kwargs: dict[str, Any]

    @property
    def sticky_actions(self) -> float:
        return PROTOCOLS[self.protocol].sticky_actions


class AtariOptionError(ValueError):
    """An Atari setting that can never run; the message starts with its field."""


def _flag(kwargs: dict, key: str, default: bool) -> bool:
    value = kwargs.get(key, default)
    if not isinstance(value, bool):
        raise AtariOptionError(f"spec.env.kwargs.{key}: expected true or false (got {value!r})")
    return value


def _count(kwargs: dict, key: str, default: int, low: int, high: int) -> int:
    value = kwargs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise AtariOptionError(f"spec.env.kwargs.{key}: expected an integer from {low} to {high} (got {value!r})")
    return value


OWN_KEYS = ("protocol", "frameStack", "noopMax", "episodicLife", "clipRewards")
PROTOCOL_KEYS = ("frameskip", "repeat_action_probability", "max_num_frames_per_episode")


def options(kwargs: dict | None) -> AtariOptions:
    """Parse kuberl's keys of spec.env.kwargs for an ALE id; raises AtariOptionError naming the key."""
    kwargs = dict(kwargs or {})
    protocol = kwargs.get("protocol", DEFAULT_PROTOCOL)
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:  # a list or mapping is no key: TypeError
        raise AtariOptionError(
            f"spec.env.kwargs.protocol: expected one of {', '.join(map(repr, PROTOCOLS))} (got {protocol!r})")
    defaults = PROTOCOLS[protocol]
    for key in PROTOCOL_KEYS:
        if key in kwargs:
            raise AtariOptionError(f"spec.env.kwargs.{key}: set by the protocol ({protocol!r}); choose the protocol instead")
    return AtariOptions(
        protocol=protocol,
        frame_stack=_count(kwargs, "frameStack", 4, 1, 16),
        noop_max=_count(kwargs, "noopMax", defaults.noop_max, 0, 1000),
        episodic_life=_flag(kwargs, "episodicLife", defaults.episodic_life),
        clip_rewards=_flag(kwargs, "clipRewards", True),
        make_kwargs={k: v for k, v in kwargs.items() if k not in OWN_KEYS},
    )


def backend_problem(opts: AtariOptions, backend: str) -> str | None:
    """Why `backend` cannot take the kwargs that are not kuberl's (gymnasium.make's: mode, difficulty, ...), which
    only backend gymnasium passes on; None when it can. `auto` is ale."""
    if not opts.make_kwargs or backend == "gymnasium":
        return None
    key = next(iter(opts.make_kwargs))
    if backend == "envpool":
        return f"spec.env.kwargs.{key}: not an option of backend envpool"
    return f"spec.env.kwargs.{key}: not an option of backend ale (gymnasium.make's keys need backend: gymnasium)"


def kwargs_problem(kwargs: dict[str, Any], backend: str) -> Problem | None:
    """`options` and `backend_problem` of an ALE id's spec.env, at the field they name; None when the trainer takes them."""
    try:
        problem = backend_problem(options(kwargs), backend)
    except AtariOptionError as e:
        problem = str(e)
    if problem is None:
        return None
    field, _, message = problem.partition(": ")
    return Problem(field, message)


SCREEN_SIZE = 84  # kuberl_trainer.atari's frames: an ALE id's observations are (frameStack, 84, 84) uint8


def observation(kwargs: dict[str, Any], backend: str) -> tuple[tuple[int, int, int], str] | None:
    """(shape, dtype name) of the observations the trainer makes of an ALE id whose kwargs it takes (kwargs_problem
    is None): (frameStack, 84, 84) uint8 frames on every backend; None for gymnasium.make's other observation
    types (backend gymnasium), which are the trainer's to tell."""
    if backend == "gymnasium" and kwargs.get("obs_type", "rgb") != "rgb":
        return None
    return (options(kwargs).frame_stack, SCREEN_SIZE, SCREEN_SIZE), "uint8"


def network_problem(kwargs: dict[str, Any], backend: str, algorithm: str, policy: str,
                    normalize_observation: bool) -> Problem | None:
    """torsos' rule on the frames the trainer makes of an ALE id whose kwargs it takes (kwargs_problem is None):
    no MLP, no observation normaliser."""
    frames = observation(kwargs, backend)
    if frames is None:
        return None
    shape = frames[0]
    return torsos.network_problem(algorithm, True, shape, f"Box(0, 255, {shape}, uint8)", policy, normalize_observation)
