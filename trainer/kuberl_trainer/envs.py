"""Per-rank vectorised environments.

gymnasium's native vector implementation where the env has one (CartPole's
steps 64 envs in one numpy call), else SyncVectorEnv. Both use gymnasium's
next-step autoreset: the step after an episode ends returns the reset
observation with reward 0 and ignores the action. The trainer masks those
steps out; `EpisodeTracker` counts episodes the same way.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from kuberl.core.envclass import missing_attribute, split_env_id
from kuberl.core.envspaces import FLATTENED, flat_dtype, flatten_problem, space_problem
from kuberl.core.installhint import pip_install, with_this_pip

from . import atari
from .envid import UnknownEnv


def rank_seed(job_seed: int, rank: int, restart: int) -> int:
    """Distinct, reproducible seeds per (job seed, rank, restart generation)."""
    return int(np.random.SeedSequence([job_seed, rank, restart]).generate_state(1)[0])


def where_imported(module_name: str, error: Exception) -> str:
    """Where this process looked for a "module:Class" env's module that it did not find (not a module that one
    imports, which its own error names): `kuberl run`'s pods start in the directory it ran from, a cluster's in the
    image's working directory, and neither says so ("No module named 'myenvs'")."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if not missing or not (module_name == missing or module_name.startswith(missing + ".")):
        return ""
    path = os.environ.get("PYTHONPATH")
    return (f" (looked in the working directory {os.getcwd()}{f', PYTHONPATH {path}' if path else ''} and this Python's"
            f" packages: install it in the image, or under kuberl run start from the directory that holds"
            f" {missing.split('.')[0]}.py)")


def missing_dependency(module_name: str, error: Exception) -> str:
    """Where a "module:Class" env's module (or a module it imports) imports one this Python lacks, and how to install
    it: the trainer said only "cannot import 'myenvs:Corridor': No module named 'pettingzoo'", naming neither the
    line nor the Python it must go into (a bare pip is often another Python's, installhint)."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if not missing or module_name == missing or module_name.startswith(missing + "."):
        return ""  # the env's module itself: where_imported says where it was looked for
    machinery = os.path.dirname(importlib.__file__)
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)[1:]  # [0]: resolve_env's own
              if not frame.filename.startswith("<") and os.path.dirname(frame.filename) != machinery]
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return (f" (imported{at}; this Python, {sys.executable}, does not have it: {pip_install(sys.executable)} the package"
            f" that provides {missing.split('.')[0]}, or install it in the image)")


def resolve_env(env_id: str) -> str | type:
    """A registered gymnasium id as it is, or the class a "module:Class" id names; UnknownEnv naming spec.env.id."""
    if ":" in env_id:
        module_name, attributes = split_env_id(env_id)
        try:
            obj = importlib.import_module(module_name)
        except (ImportError, AttributeError) as e:
            raise UnknownEnv(f"spec.env.id: cannot import {env_id!r}: {e}{where_imported(module_name, e)}{missing_dependency(module_name, e)}") from e
        except SyntaxError as e:  # the same at every restart: the spec's error, not a crash to retry
            raise UnknownEnv(f"spec.env.id: cannot import {env_id!r}: SyntaxError: {e}") from e
        for position, part in enumerate(attributes):
            try:
                obj = getattr(obj, part)
            except AttributeError as e:  # the nearest names, as kuberl validate reads them (envclass)
                owner = f"module {module_name!r}" if position == 0 else repr(f"{module_name}:{'.'.join(attributes[:position])}")
                raise UnknownEnv(f"spec.env.id: {missing_attribute(env_id, owner, position, dir(obj))}") from e
        return obj  # type: ignore[return-value]
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        raise UnknownEnv(f"spec.env.id: {env_id!r} is not a registered gymnasium id") from e
    return env_id


def flatten_observations(envs: gym.vector.VectorEnv, env_id: str) -> gym.vector.VectorEnv:
    """`envs` with Discrete, MultiDiscrete, Dict and Tuple observations flattened into one vector, as SB3
    reads them (one-hot Discrete parts; a Dict's keys in the space's sorted order, as MultiInputPolicy's
    CombinedExtractor concatenates them): gymnasium's FlattenObservation. What cannot be read flattened
    (envspaces.flatten_problem) is refused naming spec.env.id."""
    space = envs.single_observation_space
    if not isinstance(space, FLATTENED):
        return envs
    problem = flatten_problem(space)
    if problem:
        envs.close()
        raise UnknownEnv(f"spec.env.id: {env_id!r} has {problem}")
    return gym.wrappers.vector.DtypeObservation(gym.wrappers.vector.FlattenObservation(envs), flat_dtype(space))


def check_spaces(envs: gym.vector.VectorEnv, env_id: str, actions: tuple[type[gym.Space], ...]) -> None:
    """Raises UnknownEnv naming spec.env.id when `space_problem` finds one (a configuration error: every
    restart would meet it again), closing `envs`."""
    problem = space_problem(envs.single_observation_space, envs.single_action_space, actions)
    if problem is not None:
        envs.close()
        raise UnknownEnv(f"spec.env.id: {env_id!r} has {problem}")


# What a constructor raises from the values it was given (FrozenLake's map_name "5x5": KeyError), as
# `kuberl validate` names them (envspaces.env_problem): the same at every restart.
REFUSED_VALUES = (ValueError, LookupError, AssertionError)


def make_envs(env_id: str, num_envs: int, kwargs: dict | None = None, backend: str = "auto",
              halves: int = 1) -> gym.vector.VectorEnv:
    """A vector env with next-step autoreset; raises UnknownEnv naming spec.env.id.
    `halves=2` asks for two halves a caller can step apart (`send_half`/`recv_half`):
    only Atari's threaded backend has them, the others ignore it."""

    if atari.is_atari(env_id):  # pixels, preprocessed per spec.env.kwargs.protocol
        return atari.make_atari_envs(env_id, num_envs, kwargs, backend,
                                     num_threads=atari.env_threads(torch.get_num_threads()),
                                     halves=halves if num_envs >= 2 else 1)
    if backend not in ("auto", "gymnasium"):
        raise UnknownEnv(f"spec.env.backend: {backend!r} runs Atari (ALE) ids only; {env_id!r} needs backend: gymnasium")
    target = resolve_env(env_id)
    kwargs = dict(kwargs or {})
    # What the spec asked for cannot be made: a ConfigError naming the field, not a Crashed
    # rank that every restart would meet again (a Box2D env in an image without Box2D,
    # kwargs gymnasium itself refuses such as `wrappers` or `vector_kwargs`).
    try:
        if isinstance(target, str):
            native = gym.spec(target).vector_entry_point is not None
            envs = gym.make_vec(
                target,
                num_envs=num_envs,
                vectorization_mode="vector_entry_point" if native else "sync",
                **kwargs,
            )
        else:
            envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.PassiveEnvChecker(target(**kwargs))] * num_envs)
    except (gym.error.DependencyNotInstalled, ImportError) as e:  # ImportError: HalfCheetah-v2's entry point, moved out of gymnasium
        # its install hint with the pip of the Python that runs the trainer (.venv/bin/python here), not a bare pip
        raise UnknownEnv(f"spec.env.id: {env_id!r} needs a package the trainer image lacks: {with_this_pip(str(e), sys.executable)}") from e
    except (TypeError, gym.error.Error, AttributeError, *REFUSED_VALUES) as e:  # AttributeError: a class with no spaces
        field = "spec.env.kwargs" if kwargs else "spec.env.id"
        said = f"{type(e).__name__}: {e}" if isinstance(e, (AttributeError, *REFUSED_VALUES)) else str(e)  # KeyError's own words: '5x5'
        raise UnknownEnv(f"{field}: {env_id!r} refused {'them' if kwargs else 'to be made'}: {said}") from e
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        raise UnknownEnv(f"spec.env.id: {env_id!r} uses autoreset mode {mode}; kuberl expects next-step")
    guard_first_step(envs, env_id, kwargs)
    return flatten_observations(envs, env_id)


# What an env raises from the values the spec gave it, at its first reset or step: CartPole's
# `max_episode_steps: "x"` is taken at construction and fails its first step comparing an int
# with a str; Pendulum's `g: "x"` fails in its physics; an env of gym's API before 0.26 (reset returning the
# observation alone) fails the vector env's reading of its info (AttributeError: 'numpy.float32' … 'items').
REFUSED_AT_FIRST_STEP = (TypeError, ValueError, AssertionError, AttributeError)
# What gymnasium's reset and step return (gym before 0.26: the observation alone, and 4 values)
API_RETURNS = {"reset": (2, "(obs, info)"), "step": (5, "(obs, reward, terminated, truncated, info)")}


def guard_first_step(envs: gym.vector.VectorEnv, env_id: str, kwargs: dict) -> None:
    """Until `envs` has stepped once, a REFUSED_AT_FIRST_STEP error from its reset or step
    becomes UnknownEnv naming the field: every restart would meet it again (same kwargs,
    same code), so it is the spec's error, not a crash to retry. The guards are instance
    attributes that remove themselves after the first step: no cost per step after it."""
    field = "spec.env.kwargs" if kwargs else "spec.env.id"
    reset, step = envs.reset, envs.step

    def refused(call: str, e: Exception) -> UnknownEnv:
        why = old_api(call) or misshapen(call, e)
        return UnknownEnv(f"{field}: {env_id!r} failed its first {call}: {type(e).__name__}: {e}{why}")

    def old_api(call: str) -> str:
        """What an AttributeError about 'items' or "not enough values to unpack (expected 5, got 4)" meant: a user's
        env written for gym before 0.26, whose reset returns the observation alone and whose step returns 4 values."""
        first = getattr(envs, "envs", None)
        if not first:
            return ""
        count, shape = API_RETURNS[call]
        env = first[0].unwrapped  # gymnasium's env checker would refuse a 4-value step before returning it
        try:
            returned = env.reset(seed=0)
            if call == "step" and isinstance(returned, tuple) and len(returned) == API_RETURNS["reset"][0]:
                returned = env.step(env.action_space.sample())
        except Exception:  # noqa: BLE001 — the call's own failure is already said
            return ""
        if isinstance(returned, tuple) and len(returned) == count:
            return ""
        got = f"{len(returned)} values" if isinstance(returned, tuple) else f"the observation alone ({type(returned).__name__})"
        return (f" (its {call} returned {got}, where gymnasium's returns {shape}: an env written for gym before 0.26;"
                f" return {shape} from {call})")

    def misshapen(call: str, e: Exception) -> str:
        """What numpy's "Output array is the wrong shape" meant: a user's env whose reset returns an observation
        its observation_space does not describe (the vector env copies it into an array of the space's shape)."""
        if call != "reset" or not isinstance(e, ValueError) or not getattr(envs, "envs", None):
            return ""
        try:
            obs, _ = envs.envs[0].reset(seed=0)
        except Exception:  # noqa: BLE001 — the reset's own failure is already said
            return ""
        declared = getattr(envs.single_observation_space, "shape", None)
        if declared is None or np.shape(obs) == tuple(declared):
            return ""
        return f" (its reset returned an observation of shape {np.shape(obs)}; its observation_space is {envs.single_observation_space})"

    def guarded_reset(*args, **kw):
        try:
            return reset(*args, **kw)
        except REFUSED_AT_FIRST_STEP as e:
            raise refused("reset", e) from e

    def guarded_step(*args, **kw):
        try:
            result = step(*args, **kw)
        except REFUSED_AT_FIRST_STEP as e:
            raise refused("step", e) from e
        for name, guard in (("reset", guarded_reset), ("step", guarded_step)):
            if vars(envs).get(name) is guard:  # a wrapper put over it (a benchmark's timer) keeps it
                delattr(envs, name)
        return result

    guarded_reset.first_step_guard = guarded_step.first_step_guard = True  # not env state (env_state)
    envs.reset, envs.step = guarded_reset, guarded_step


def env_state(envs: gym.vector.VectorEnv) -> dict | None:
    """The simulator state of one of gymnasium's native vector envs (CartPole's:
    positions, step counts, RNG) as plain data, so a deterministic resume
    continues the very same episodes; None for every other env (SyncVectorEnv
    of separate envs, Atari's emulators, user classes), whose state is not
    plain data and which resume without it."""
    if isinstance(envs, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv, gym.vector.VectorWrapper)):
        return None
    if not type(envs).__module__.startswith("gymnasium.envs."):
        return None
    state: dict = {}
    for name, value in vars(envs).items():
        if getattr(value, "first_step_guard", False):
            continue
        if isinstance(value, np.random.Generator):
            state[name] = {"$rng": value.bit_generator.state}
        elif isinstance(value, np.ndarray) and not value.dtype.hasobject:
            state[name] = value.copy()
        elif value is None or isinstance(value, (bool, int, float, str, np.generic)):
            state[name] = value
        elif not isinstance(value, (gym.Space, gym.envs.registration.EnvSpec)):
            return None  # something not plain (a renderer, a jax array): no state rather than half of it
    return state


def restore_env_state(envs: gym.vector.VectorEnv, state: dict) -> None:
    """Set what env_state took, attribute by attribute, onto an env built
    from the same spec; refuses names the env does not have."""
    for name, value in state.items():
        if not hasattr(envs, name):
            raise ValueError(f"env state names {name!r}, which {type(envs).__name__} does not have")
        if isinstance(value, dict) and set(value) == {"$rng"}:
            generator = np.random.default_rng()
            generator.bit_generator.state = value["$rng"]
            value = generator
        setattr(envs, name, value)


@dataclass
class EpisodeTracker:
    """Returns and lengths of the episodes each env is running, in numpy
    (no per-step allocation); `valid` is False on autoreset steps."""

    num_envs: int
    returns: np.ndarray = field(init=False)
    lengths: np.ndarray = field(init=False)
    valid: np.ndarray = field(init=False)
    finished_returns: list[float] = field(default_factory=list)
    finished_lengths: list[int] = field(default_factory=list)
    finished_at: list[int] = field(default_factory=list)  # the vector step since the last drain each one ended at
    steps: int = 0  # vector steps since the last drain

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.num_envs, np.float64)
        self.lengths = np.zeros(self.num_envs, np.int64)
        self.valid = np.ones(self.num_envs, bool)

    def step(self, rewards: np.ndarray, done: np.ndarray) -> None:
        """Account one vector step taken while `self.valid` held."""
        self.returns += rewards * self.valid
        self.lengths += self.valid
        self.steps += 1
        ended = done & self.valid
        if ended.any():
            self.finished_returns.extend(self.returns[ended].tolist())
            self.finished_lengths.extend(self.lengths[ended].tolist())
            self.finished_at.extend([self.steps] * int(ended.sum()))
            self.returns[ended] = 0.0
            self.lengths[ended] = 0
        # next step resets the envs that just ended: it is not a transition
        self.valid = ~done

    def drain(self) -> tuple[list[float], list[int]]:
        return self.drain_episodes()[:2]

    def drain_episodes(self) -> tuple[list[float], list[int], list[float]]:
        """The episodes finished since the last drain: their returns, lengths, and how far into the steps since
        then each ended (a fraction in (0, 1]), which places it at its global step once the update's all-reduce
        has counted every rank's steps."""
        returns, lengths = self.finished_returns, self.finished_lengths
        at = [step / self.steps for step in self.finished_at]
        self.finished_returns, self.finished_lengths, self.finished_at, self.steps = [], [], [], 0
        return returns, lengths, at
