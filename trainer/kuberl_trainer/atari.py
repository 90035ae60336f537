"""Atari (the Arcade Learning Environment) from pixels, as vector envs.

Two evaluation protocols, chosen by name in `spec.env.kwargs.protocol`:

- `modern` (default; Machado et al. 2018, what `ALE/<Game>-v5` means):
  sticky actions with probability 0.25, full games (no life-loss
  episodes), at most 108,000 frames per episode.
- `nature` (Mnih et al. 2015; `<Game>NoFrameskip-v4` behaviour, as in
  DI-engine's Pong DQN config): no sticky actions, otherwise the same.

Both then apply the standard preprocessing: up to 30 no-op actions after a
reset, the action repeated for 4 frames with the max of the last two frames
kept, 84x84 grayscale, the last 4 frames stacked. Observations are
(frameStack, 84, 84) uint8 and stay uint8 until they reach the device.
Rewards reach the trainer unclipped (reported returns are the game's
score); the trainer clips them to their sign for learning only when
`clips_rewards(envs)` says so.

The protocol, not the id's version, sets frame skip and sticky actions:
"ALE/Pong-v5" and "PongNoFrameskip-v4" name the same game. Because the
preprocessing repeats actions itself, the emulator is built with
frameskip=1 (gymnasium's AtariPreprocessing refuses an env that already
skips frames).

Keys of `spec.env.kwargs` read here: protocol, frameStack, noopMax,
episodicLife (a life loss ends the learning episode, the game goes on;
reported returns are then per life), clipRewards (default true). Any other
key goes to gymnasium.make (e.g. mode, difficulty).

Backends (`spec.env.backend`): `ale` (what `auto` picks) runs ale-py's own
threaded C++ vector env (`ale_py.AtariVectorEnv`) on the rank's CPU share;
`gymnasium` runs gymnasium's wrappers (AtariPreprocessing,
FrameStackObservation) per env on one core; `envpool` runs EnvPool's C++
thread pool. All three take the same protocol and give the same observation
layout; `ale` and `gymnasium` give bit-equal frames, rewards and episode ends
for a fixed seed and actions (tests/unit/test_atari.py).
"""

from __future__ import annotations

import difflib
import itertools
import sys

import gymnasium as gym
import numpy as np
from kuberl.core import atarikwargs
from kuberl.core.atarikwargs import DEFAULT_PROTOCOL, AtariOptions  # noqa: F401 - atari.DEFAULT_PROTOCOL, as before
from kuberl.core.installhint import pip_install

from .envid import UnknownEnv


def install_extra(extra: str) -> str:
    """The command that installs one of the trainer's extras where it is missing: this interpreter's pip."""
    return f"{pip_install(sys.executable)} 'kuberl-trainer[{extra}]'"


ATARI_EXTRA = install_extra("atari")
ENVPOOL_EXTRA = install_extra("envpool")
CLIP_REWARDS = "kuberl.clip_rewards"  # vector env metadata key: clip to sign for learning
FRAME_STACK = "kuberl.frame_stack"  # vector env metadata key: observations are stacks of this many frames
MAX_FRAMES_PER_EPISODE = 108_000
FRAME_SKIP = 4
SCREEN_SIZE = atarikwargs.SCREEN_SIZE  # validate and the operator read an ALE id's observations as this makes them


class AtariConfigError(UnknownEnv):
    """An Atari setting that can never run; the message starts with its field."""


def _ale_registered() -> bool:
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


def is_atari(env_id: str) -> bool:
    """An ALE id: one only ale-py registers (atarikwargs.is_ale_id: PongNoFrameskip-v4 too where ale-py is missing,
    which game_of then names), or a registered id whose entry point is ALE's."""
    if atarikwargs.is_ale_id(env_id):
        return True
    if ":" in env_id or not _ale_registered():
        return False
    spec = gym.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def game_of(env_id: str) -> str:
    """The ALE id's game ("Pong" for ALE/Pong-v5 and PongNoFrameskip-v4),
    checked against the ids ale-py registers; raises AtariConfigError
    naming spec.env.id."""
    if not _ale_registered():
        raise AtariConfigError(f"spec.env.id: {env_id!r} is an Atari id but ale-py is not installed ({ATARI_EXTRA})")
    spec = gym.registry.get(env_id)
    if spec is None or not str(spec.entry_point).startswith("ale_py"):
        known = sorted(k for k, s in gym.registry.items() if k.startswith("ALE/"))
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (ale-py's ids look like ALE/Pong-v5)"
        raise AtariConfigError(f"spec.env.id: {env_id!r} is not an Atari game ale-py knows{hint}")
    return spec.name.replace("NoFrameskip", "").replace("Deterministic", "")


def options(kwargs: dict | None) -> AtariOptions:
    """Parse kuberl's keys of spec.env.kwargs for an ALE id (atarikwargs.options, which validate reads too)."""
    try:
        return atarikwargs.options(kwargs)
    except atarikwargs.AtariOptionError as e:
        raise AtariConfigError(str(e)) from None


def clips_rewards(envs: gym.vector.VectorEnv) -> bool:
    """Whether the trainer should learn from sign-clipped rewards."""
    return bool(envs.metadata.get(CLIP_REWARDS, False))


def frame_stack(envs: gym.vector.VectorEnv) -> int:
    """Frames per observation when observations are frame stacks (each
    step shifts in one new frame, so a replay buffer may keep only the
    newest), else 1."""
    return int(envs.metadata.get(FRAME_STACK, 1))


def learning_rewards(envs: gym.vector.VectorEnv, rewards: np.ndarray) -> np.ndarray:
    """Rewards as the learner sees them; the env's own stay for reporting."""
    return np.sign(rewards).astype(np.float32) if clips_rewards(envs) else rewards


# --- gymnasium backend -------------------------------------------------------


class EpisodicLife(gym.Wrapper):
    """A life loss ends the learning episode while the game goes on: reset()
    after a life loss takes a no-op step instead of resetting the emulator."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        terminated = terminated or 0 < lives < self.lives
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


def make_one(game: str, opts: AtariOptions) -> gym.Env:
    """One preprocessed env: (frame_stack, 84, 84) uint8 observations."""
    try:
        env = gym.make(
            f"ALE/{game}-v5",
            frameskip=1,  # AtariPreprocessing skips frames itself
            repeat_action_probability=opts.sticky_actions,
            max_num_frames_per_episode=MAX_FRAMES_PER_EPISODE,
            **opts.make_kwargs,
        )
    except TypeError as e:
        raise AtariConfigError(f"spec.env.kwargs: ALE refused them: {e}") from e
    if opts.episodic_life:
        env = EpisodicLife(env)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=opts.noop_max, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE, grayscale_obs=True, scale_obs=False,
    )
    return gym.wrappers.FrameStackObservation(env, stack_size=opts.frame_stack)


def make_gymnasium(game: str, num_envs: int, opts: AtariOptions) -> gym.vector.VectorEnv:
    make_one(game, opts).close()  # refuses bad kwargs here, not inside the vector env
    return gym.vector.SyncVectorEnv([lambda: make_one(game, opts)] * num_envs)


# --- EnvPool backend ---------------------------------------------------------


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """EnvPool's Atari pool behind gymnasium's VectorEnv API.

    EnvPool seeds at construction, so a seeded reset rebuilds the pool; its
    autoreset is next-step, like gymnasium's."""

    def __init__(self, task: str, num_envs: int, num_threads: int, make_kwargs: dict):
        import envpool

        self._make = lambda seed: envpool.make(
            task, env_type="gymnasium", num_envs=num_envs, num_threads=num_threads, seed=seed, **make_kwargs)
        self.pool = self._make(0)
        self.num_envs = num_envs
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.pool.close()
            self.pool = self._make(int(seed) % 2**31)
        return self.pool.reset()

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.pool.step(np.asarray(actions, np.int32))
        return obs, reward.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs):
        self.pool.close()


def make_ale(game: str, num_envs: int, opts: AtariOptions, num_threads: int, halves: int = 1) -> gym.vector.VectorEnv:
    if problem := atarikwargs.backend_problem(opts, "ale"):  # mode, difficulty, ...: gymnasium.make's, not AtariVectorEnv's
        raise AtariConfigError(problem)
    return ALEVectorEnv(game, num_envs, opts, num_threads, halves)


def envpool_tasks() -> list[str]:
    try:
        import envpool
    except ImportError as e:
        raise AtariConfigError(
            f"spec.env.backend: envpool is unavailable here ({e}); {ENVPOOL_EXTRA}, or use backend: gymnasium") from e
    return list(envpool.list_all_envs())


def make_envpool(game: str, num_envs: int, opts: AtariOptions, num_threads: int) -> gym.vector.VectorEnv:
    task = f"{game}-v5"  # EnvPool's spelling of ALE/Pong-v5
    tasks = envpool_tasks()
    if task not in tasks:
        close = difflib.get_close_matches(task, tasks, n=3, cutoff=0.6)
        raise AtariConfigError(f"spec.env.id: EnvPool has no task {task!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    if problem := atarikwargs.backend_problem(opts, "envpool"):
        raise AtariConfigError(problem)
    return EnvPoolVectorEnv(task, num_envs, num_threads, {
        "stack_num": opts.frame_stack,
        "img_height": SCREEN_SIZE,
        "img_width": SCREEN_SIZE,
        "frame_skip": FRAME_SKIP,
        "noop_max": max(1, opts.noop_max),  # EnvPool 1.2.5 segfaults on 0; 1 is its minimum
        "episodic_life": opts.episodic_life,
        "reward_clip": False,  # clipped by the trainer, for learning only
        "repeat_action_probability": opts.sticky_actions,
        "use_fire_reset": False,  # as gymnasium's AtariPreprocessing
        "max_episode_steps": MAX_FRAMES_PER_EPISODE // FRAME_SKIP,
    })


# --- ale-py's threaded vector env ---------------------------------------------------


def rom_id(game: str) -> str:
    """ale-py's ROM id of a game ("MsPacman" -> "ms_pacman")."""
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(game))


class ALEVectorEnv(gym.vector.VectorEnv):
    """ale-py's `AtariVectorEnv` (C++, one pool of threads stepping every env
    at once) with kuberl's protocol set explicitly: its own defaults clip
    rewards, press FIRE at reset and differ from gymnasium's wrappers.

    Its frame stacks start zero-padded; gymnasium's and EnvPool's repeat the
    episode's first frame, and so does the replay buffer when it rebuilds a
    stack. Observations are padded the same way here, so every backend (and
    the buffer) shows a learner the same observation.

    `halves=2` runs the envs as two synchronous pools of half the envs each:
    `send_half`/`recv_half` step one half while the caller acts on the other
    (a GPU rank's overlap); `step` steps both. Env i is seeded `seed + i`
    either way, so the split changes no trajectory."""

    def __init__(self, game: str, num_envs: int, opts: AtariOptions, num_threads: int, halves: int = 1):
        from ale_py import AtariVectorEnv

        if halves not in (1, 2) or num_envs < halves:
            raise ValueError(f"halves: 1, or 2 with at least 2 envs (got {halves} for {num_envs})")
        bounds = [0, num_envs // 2, num_envs] if halves == 2 else [0, num_envs]
        self.parts = [slice(a, b) for a, b in itertools.pairwise(bounds)]
        self.pools = [AtariVectorEnv(
            rom_id(game), part.stop - part.start,
            num_threads=num_threads,
            thread_affinity_offset=-1,  # no pinning: a pod's cpuset need not start at core 0
            batch_size=0,  # synchronous: every env of the pool steps every time (per-env trajectories)
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            repeat_action_probability=opts.sticky_actions,
            noop_max=opts.noop_max,
            episodic_life=opts.episodic_life,
            max_num_frames_per_episode=MAX_FRAMES_PER_EPISODE,
            frameskip=FRAME_SKIP,
            stack_num=opts.frame_stack,
            img_height=SCREEN_SIZE,
            img_width=SCREEN_SIZE,
            grayscale=True,
            maxpool=True,
            full_action_space=False,
            reward_clipping=False,  # clipped by the trainer, for learning only
            use_fire_reset=False,  # as gymnasium's AtariPreprocessing
        ) for part in self.parts]
        self.num_envs = num_envs
        self.single_observation_space = self.pools[0].single_observation_space
        self.single_action_space = self.pools[0].single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.frames_in_episode = np.ones(num_envs, np.int64)  # frames of the current episode in each stack
        self.episode_ended = np.zeros(num_envs, bool)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        results = [pool.reset(seed=None if seed is None else (int(seed) + part.start) % 2**31)
                   for pool, part in zip(self.pools, self.parts, strict=True)]
        self.frames_in_episode[:] = 1
        self.episode_ended[:] = False
        obs = self._pad(np.concatenate([obs for obs, _ in results]), slice(None))
        return obs, {key: np.concatenate([info[key] for _, info in results]) for key in results[0][1]}

    def send_half(self, half: int, actions: np.ndarray) -> None:
        """Start stepping one half's envs (returns at once)."""
        self.pools[half].send(np.asarray(actions, np.int32))

    def recv_half(self, half: int):
        """The half's step results, as `step` returns them for its envs."""
        obs, reward, terminated, truncated, info = self.pools[half].recv()
        part = self.parts[half]
        order = np.argsort(info["env_id"])  # the pool's envs in their own order
        obs, reward, terminated, truncated = obs[order], reward[order], terminated[order], truncated[order]
        self.frames_in_episode[part] = np.where(self.episode_ended[part], 1, self.frames_in_episode[part] + 1)
        self.episode_ended[part] = terminated | truncated
        return self._pad(obs, part), reward.astype(np.float64), terminated, truncated, {k: v[order] for k, v in info.items()}

    def step(self, actions):
        actions = np.asarray(actions)
        for half, part in enumerate(self.parts):
            self.send_half(half, actions[part])
        results = [self.recv_half(half) for half in range(len(self.parts))]
        if len(results) == 1:
            return results[0]
        return (*(np.concatenate(column) for column in list(zip(*results, strict=True))[:4]),
                {key: np.concatenate([r[4][key] for r in results]) for key in results[0][4]})

    def _pad(self, obs: np.ndarray, part: slice) -> np.ndarray:
        """Fill a young episode's zero frames with its first frame."""
        stack = obs.shape[1]
        for env in np.flatnonzero(self.frames_in_episode[part] < stack):
            first = stack - self.frames_in_episode[part][env]
            obs[env, :first] = obs[env, first]
        return obs

    def close_extras(self, **kwargs):
        for pool in self.pools:
            pool.close()


SLOW_BUILD_ENVS = 16  # from here on, building a rank's envs takes seconds: say so before starting


def build_note(env_id: str, num_envs: int, backend: str) -> str | None:
    """A line for rank 0 before it builds many Atari envs, so a quiet start is not taken
    for a hang: ale-py makes each emulator's colour tables (0.1-0.2 s), one after another."""
    if num_envs < SLOW_BUILD_ENVS or not is_atari(env_id):
        return None
    how = "EnvPool builds them on its threads" if backend == "envpool" else "about 0.1-0.2 s each, one after another"
    return f"building {num_envs} {env_id} envs per rank ({how})"


def env_threads(cpu_threads: int) -> int:
    """Env threads for a rank given its CPU share (OMP_NUM_THREADS, from the pod's
    limits.cpu / processes): all of a small share, else one core left for the
    Python thread that acts (and feeds the GPU) while the envs step."""
    return cpu_threads if cpu_threads <= 2 else cpu_threads - 1


# --- entry point ---------------------------------------------------------------


BACKENDS = ("auto", "ale", "gymnasium", "envpool")


def make_atari_envs(env_id: str, num_envs: int, kwargs: dict | None = None, backend: str = "auto",
                    num_threads: int = 1, halves: int = 1) -> gym.vector.VectorEnv:
    """A preprocessed Atari vector env; raises AtariConfigError naming the field.
    `auto` is ale-py's threaded vector env (in two halves on request: ALEVectorEnv)."""
    opts = options(kwargs)
    game = game_of(env_id)
    if backend == "envpool":
        envs = make_envpool(game, num_envs, opts, num_threads)
    elif backend == "gymnasium":
        envs = make_gymnasium(game, num_envs, opts)
    elif backend in ("auto", "ale"):
        envs = make_ale(game, num_envs, opts, num_threads, halves)
    else:
        raise AtariConfigError(f"spec.env.backend: expected one of {', '.join(map(repr, BACKENDS))} (got {backend!r})")
    envs.metadata[CLIP_REWARDS] = opts.clip_rewards
    envs.metadata[FRAME_STACK] = opts.frame_stack
    return envs
