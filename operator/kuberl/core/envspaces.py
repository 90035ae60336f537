"""Which env spaces kuberl's networks learn on, written once for the trainer (which refuses an env it
has made, naming spec.env.id) and `kuberl validate` (which makes a registered gymnasium id, without
torch, to say so before any pod starts).

Imports gymnasium: import this module only where gymnasium is installed (the trainer's image, a
user's machine), never in the operator, whose image has no gymnasium.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from . import atarikwargs, replaymemory, returnceiling, torsos
from .installhint import pip_install, with_this_pip
from .safetext import without_colours
from .torsos import MIN_SIDE
from .validation import Problem

# the action spaces each algorithm's networks emit (its trainer class reads its row)
ACTION_SPACES: dict[str, tuple[type[gym.Space], ...]] = {
    "ppo": (gym.spaces.Discrete, gym.spaces.Box),
    "dqn": (gym.spaces.Discrete,),
    "sac": (gym.spaces.Box,),
    "td3": (gym.spaces.Box,),
}
# observation spaces read through gymnasium's FlattenObservation, as SB3 reads them
FLATTENED = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Dict, gym.spaces.Tuple)


def frame_layout(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """(channels, height, width, channels_last) of a (H, W), (C, H, W) or (H, W, C) frame:
    channels last when the last dimension is the smallest (SB3's rule)."""
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    if shape[2] < min(shape[0], shape[1]):
        return shape[2], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


def is_image(space: gym.Space) -> bool:
    """Frames the CNN can read: a uint8 Box of 2 or 3 dimensions, each side at least MIN_SIDE."""
    frames = isinstance(space, gym.spaces.Box) and space.dtype == "uint8" and len(space.shape) in (2, 3)
    return frames and min(frame_layout(tuple(space.shape))[1:3]) >= MIN_SIDE


def network_problem(observation: gym.Space, algorithm: str, policy: str, normalize_observation: bool) -> Problem | None:
    """torsos.network_problem of these observations, as the networks read them (flattened)."""
    return torsos.network_problem(algorithm, is_image(observation), tuple(observation.shape or ()), str(observation),
                                  policy, normalize_observation)


def leaves(space: gym.Space) -> Iterator[gym.Space]:
    """The spaces a Dict or Tuple holds, at any depth; any other space is its own leaf."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        for part in (space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces):
            yield from leaves(part)
    else:
        yield space


def flatten_problem(space: gym.Space) -> str | None:
    """Why a FLATTENED observation space cannot be read flattened (None when it can): a part that is an
    image the CNN would read, or that gymnasium cannot flatten (Text, Graph, Sequence, MiniGrid's mission)."""
    parts = list(leaves(space))
    images = [part for part in parts if is_image(part)]
    if images:
        return (f"observation space {space} holding an image {images[0]} (kuberl's networks read an image or a vector,"
                " not both: a \"module:Class\" env id that returns gymnasium.wrappers.FilterObservation(env, [the image's"
                " key]) keeps the image alone)")
    unflattenable = [part for part in parts if not isinstance(part, (gym.spaces.Box, gym.spaces.MultiBinary, *FLATTENED))]
    if unflattenable:
        return f"observation space {space} holding {unflattenable[0]}, which cannot be flattened into a vector"
    return None


def flat_dtype(space: gym.Space) -> type:
    """What a flattened observation is stored as: one-hot parts alone (Discrete, MultiDiscrete) as uint8, else
    float32. gymnasium flattens Discrete to int64, which a replay buffer kept at 8 bytes per 0 or 1 (Taxi: 4,000
    bytes per observation; SB3 stores the index); every network reads it as float."""
    one_hot = all(isinstance(part, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) for part in leaves(space))
    return np.uint8 if one_hot else np.float32


def supported_actions(actions: tuple[type[gym.Space], ...]) -> str:
    """The words every refusal of an algorithm's action space ends with."""
    names = " or ".join("Discrete (numbered from 0)" if kind is gym.spaces.Discrete else "float Box" for kind in actions)
    return f"supported by this algorithm: {names} actions"


def space_problem(observation: gym.Space, action: gym.Space, actions: tuple[type[gym.Space], ...]) -> str | None:
    """Why kuberl's networks cannot learn on these spaces (None when they can). Observations: a Box of
    at least one dimension (any numeric dtype: vectors are cast to float, uint8 frames go to the CNN) or
    MultiBinary, after flattening. Actions: the `actions` types the algorithm emits, a Discrete numbered
    from 0 and a float Box. Anything else crashed deep in the trainer, or (a Discrete observation's index
    read as one number) learned silently from the wrong features."""
    observations_supported = ("supported: Box observations of at least one dimension (vectors, or uint8 frames), or"
                              " MultiBinary; Discrete, MultiDiscrete, Dict and Tuple ones of these are flattened")
    if not isinstance(observation, (gym.spaces.Box, gym.spaces.MultiBinary)) or not observation.shape:
        return f"observation space {observation}; {observations_supported}"
    actions_supported = supported_actions(actions)
    if not isinstance(action, actions):
        return f"action space {action}; {actions_supported}"
    if isinstance(action, gym.spaces.Discrete) and int(action.start) != 0:
        return f"action space {action} starts at {int(action.start)}; {actions_supported}"
    if isinstance(action, gym.spaces.Box) and not np.issubdtype(action.dtype, np.floating):
        return f"action space {action} of {action.dtype}; {actions_supported}"
    if isinstance(action, gym.spaces.Box) and len(action.shape) != 1:
        return f"action space {action} of shape {action.shape}; {actions_supported} of one dimension"
    return None


# Algorithms whose actor maps tanh onto the action box and whose critics read its actions as they are (SAC, TD3)
SQUASHED = ("sac", "td3")
# The largest action bound those learn within: the critics' squared errors grow with the actions' square, and 1e9's
# is far inside float32's 3.4e38; a box of +-3e38 (or a float64 one of +-1e300, inf as float32) gave NaN losses at once.
MAX_SQUASHED_BOUND = 1e9


def squashed_box_problem(action: gym.spaces.Box) -> str | None:
    """Why an actor that maps tanh onto the float Box `action` cannot act in it (None where it can): an unbounded
    box, one with no dimension, one whose dimension has no width (low == high: nothing to learn there, and SAC's
    log-probability of its one action is -inf, NaN losses), or one bounded past MAX_SQUASHED_BOUND."""
    supported = supported_actions(ACTION_SPACES["sac"])
    low, high = np.asarray(action.low, np.float64), np.asarray(action.high, np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return f"action space {action}, unbounded; {supported} with finite bounds"
    if low.size == 0:
        return f"action space {action}, with no action to take; {supported} of at least one dimension"
    if (narrow := np.flatnonzero(high <= low)).size:
        i = int(narrow[0])
        return (f"action space {action}, whose dimension {i} has no width (low {low[i]:g}, high {high[i]:g}): no action"
                f" there to learn; {supported} with each dimension wider than a point")
    if max(np.abs(low).max(), np.abs(high).max()) > MAX_SQUASHED_BOUND:
        return (f"action space {action}, bounded past +-{MAX_SQUASHED_BOUND:g}: the critics' squared errors overflow"
                " float32 (NaN losses); rescale the env's actions (gymnasium.wrappers.RescaleAction, to [-1, 1] as"
                f" SAC and TD3 are tuned for); {supported} within +-{MAX_SQUASHED_BOUND:g}")
    return None


def spaces_problem(observation: gym.Space, action: gym.Space, algorithm: str) -> str | None:
    """`flatten_problem`, then `space_problem` on the spaces as the networks will read them, then, for an actor
    squashed into its box, `squashed_box_problem`."""
    if isinstance(observation, FLATTENED):
        problem = flatten_problem(observation)
        if problem:
            return problem
        observation = gym.spaces.flatten_space(observation)
    problem = space_problem(observation, action, ACTION_SPACES[algorithm])
    if problem is None and algorithm in SQUASHED and isinstance(action, gym.spaces.Box):
        problem = squashed_box_problem(action)
    return problem


# What making an env raises when this machine lacks what the trainer's image may have: left to the trainer.
NOT_HERE = (gym.error.DependencyNotInstalled, gym.error.NamespaceNotFound, ImportError)


# Kwargs up to this JSON size are made here; an env may build tables from larger ones (FrozenLake's `desc`: a 1 MB map
# took 76 s and 2 GB), which is no cost for reading a file: larger ones are left to the trainer, as user code is.
MAX_MADE_KWARGS_BYTES = 4096


# What gym.make and make_vec take themselves, beside the env's own arguments
MAKE_KWARGS = ("max_episode_steps", "render_mode", "disable_env_checker", "autoreset")


def kwarg_hint(env_id: str, error: Exception) -> str:
    """`; did you mean 'max_episode_steps'?` when `error` is an env refusing a keyword argument
    (`max_episode_step`) close to one it or gymnasium takes; else ''."""
    import difflib
    import inspect
    import re

    from gymnasium.envs.registration import load_env_creator

    found = re.search(r"unexpected keyword argument '([^']{1,100})'", str(error)) if isinstance(error, TypeError) else None
    spec = gym.registry.get(env_id)
    if found is None or spec is None:
        return ""
    names = set(MAKE_KWARGS) | set(spec.kwargs)
    for entry in (spec.entry_point, spec.vector_entry_point):
        try:
            creator = load_env_creator(entry) if isinstance(entry, str) else entry
            names |= set(inspect.signature(creator).parameters) if creator is not None else set()
        except (ImportError, AttributeError, ValueError, TypeError):  # nothing to offer from this one
            continue
    names -= {"self", "num_envs", "args", "kwargs"}
    close = difflib.get_close_matches(found.group(1), sorted(names), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def env_problem(env_id: str, kwargs: dict[str, Any], algorithm: str, backend: str = "auto", policy: str = "auto",
                normalize_observation: bool = False, notes: list[str] | None = None) -> Problem | None:
    """What `kuberl validate` can tell of spec.env by making the env here, as the trainer makes it (one
    copy): kwargs the env refuses, spaces the algorithm cannot learn on, a forced network torso (`policy`)
    that cannot read its observations; a package it needs that is missing here goes to `notes`, with this
    Python's pip in its install hint. Only registered gymnasium ids are made (a classic-control env takes
    a millisecond or two), with kwargs of at most MAX_MADE_KWARGS_BYTES; a "module:Class" (the user's code, not run to validate a file) and an env whose
    package is missing here are left to the trainer. An Atari id is not made (kuberl preprocesses its
    frames): its kwargs are read as the trainer reads them (atarikwargs), its observations are frames."""
    spec = gym.registry.get(env_id)
    if atarikwargs.is_ale_id(env_id) or (spec is not None and str(spec.entry_point).startswith("ale_py")):
        if gym.spaces.Discrete not in ACTION_SPACES[algorithm]:  # not made here, but every Atari game's actions are
            return Problem("spec.env.id", f"{env_id!r} has Discrete actions (Atari); {supported_actions(ACTION_SPACES[algorithm])}")
        if notes is not None and not any(known.startswith("ALE/") for known in gym.registry):
            notes.append(f"spec.env.id: {env_id!r} is an Atari id, and ale-py is not installed here: its game is not checked"
                         f" and kuberl run here would fail (a trainer image with it runs it):"
                         f" {pip_install(sys.executable)} 'kuberl-trainer[atari]'")
        problem = atarikwargs.kwargs_problem(kwargs, backend)
        return problem or atarikwargs.network_problem(kwargs, backend, algorithm, policy, normalize_observation)
    if spec is None or len(json.dumps(kwargs, default=str)) > MAX_MADE_KWARGS_BYTES:
        return None
    field = "spec.env.kwargs" if kwargs else "spec.env.id"
    native = spec.vector_entry_point is not None
    try:
        with warnings.catch_warnings(record=True) as said:  # gymnasium's own ("is out of date"): notes, not stderr's two lines
            warnings.simplefilter("always")
            envs = gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point" if native else "sync", **kwargs)
        if notes is not None:
            notes += list(dict.fromkeys(f"spec.env.id: gymnasium says: {without_colours(str(w.message)).strip().removeprefix('WARN: ')}"
                                        for w in said))
    except NOT_HERE as e:
        if notes is not None and not isinstance(e, gym.error.NamespaceNotFound):
            notes.append(f"spec.env.id: {env_id!r} not checked: it needs a package not installed here (kuberl run here"
                         f" would fail): {with_this_pip(str(e), sys.executable)}")
        return None
    except Exception as e:  # noqa: BLE001 - whatever the env raises from these kwargs, the trainer would meet it too
        return Problem(field, f"{env_id!r} refused {'them' if kwargs else 'to be made'}: {type(e).__name__}: {e}"
                              + kwarg_hint(env_id, e))
    try:
        observation = envs.single_observation_space
        problem = spaces_problem(observation, envs.single_action_space, algorithm)
    finally:
        envs.close()
    if problem:
        return Problem("spec.env.id", f"{env_id!r} has {problem}")
    flat = gym.spaces.flatten_space(observation) if isinstance(observation, FLATTENED) else observation
    return network_problem(flat, algorithm, policy, normalize_observation)


def job_env_problems(spec: Any, notes: list[str] | None = None) -> list[Problem]:
    """`env_problem` of a parsed job (rules.JobSpec) that kuberl's trainer runs; none for trainer: custom."""
    if spec.trainer != "kuberl":
        return []
    options = getattr(spec, spec.algorithm)  # spec.ppo or spec.dqn; None where left out (its defaults)
    problem = env_problem(spec.env.id, dict(spec.env.kwargs), spec.algorithm, spec.env.backend,
                          getattr(options, "policy", "auto"), getattr(options, "normalize_observation", False), notes)
    if problem is None and spec.algorithm in replaymemory.BUFFER_FIELDS and replaymemory.memory_limit(spec) is not None:
        problem = replaymemory.spec_problem(spec, made_replay(spec))
    return [problem] if problem else []


def made_replay(spec: Any) -> replaymemory.Replay | None:
    """The replay buffer a job's trainer would make of a registered gymnasium env, its spaces made here as
    env_problem makes them and read as the trainer reads them (flattened, as `flat_dtype`); None for an Atari id
    (replaymemory.job_replay reads its frames without making it), or an env not made here (env_problem's rules)."""
    registered = gym.registry.get(spec.env.id)
    kwargs = dict(spec.env.kwargs)
    if (registered is None or atarikwargs.is_ale_id(spec.env.id) or str(registered.entry_point).startswith("ale_py")
            or len(json.dumps(kwargs, default=str)) > MAX_MADE_KWARGS_BYTES):
        return None
    mode = "vector_entry_point" if registered.vector_entry_point is not None else "sync"
    try:
        with warnings.catch_warnings():  # env_problem has said gymnasium's words already
            warnings.simplefilter("ignore")
            envs = gym.make_vec(spec.env.id, num_envs=1, vectorization_mode=mode, **kwargs)
    except Exception:  # noqa: BLE001 - env_problem has said why (or the trainer will)
        return None
    try:
        observation, action = envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
    if isinstance(observation, FLATTENED):
        shape, dtype = gym.spaces.flatten_space(observation).shape, np.dtype(flat_dtype(observation)).name
    else:
        shape, dtype = observation.shape, observation.dtype.name
    return replaymemory.for_algorithm(spec.algorithm, spec.hyperparameters, spec.env.num_envs, tuple(shape), dtype,
                                      tuple(action.shape or ()), 1, spec.total_timesteps, spec.world_size)


def target_ceiling_problem(spec: Any) -> Problem | None:
    """A warning (returnceiling.target_problem) when a parsed job's success.targetReturn is above what its
    registered env can return, its entry point and step limit read from gymnasium's registry here; None for
    trainer: custom, a "module:Class" env, an id not registered here, or an env whose rewards are not known."""
    if spec.trainer != "kuberl" or spec.success.target_return is None:
        return None
    registered = gym.registry.get(spec.env.id)
    if registered is None or not isinstance(registered.entry_point, str):
        return None
    ceiling = returnceiling.return_ceiling(registered.entry_point, registered.max_episode_steps, dict(spec.env.kwargs),
                                           dict(registered.kwargs or {}))
    return returnceiling.target_problem(spec.success.target_return, spec.env.id, ceiling)
