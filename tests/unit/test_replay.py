"""The replay buffer against hand-built cases and real gymnasium vector envs
(next-step autoreset, terminated vs truncated, frame stacks)."""

import gymnasium as gym
import numpy as np
import pytest
from kuberl_trainer.envs import EpisodeTracker
from kuberl_trainer.replay import ReplayBuffer, n_step_returns

GAMMA = 0.5


def test_n_step_returns_by_hand():
    rewards = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0], [3.0, 9.0, 9.0], [1.0, 1.0, 1.0]])
    terminated = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], bool)
    truncated = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 1]], bool)
    returns, discount, steps = n_step_returns(rewards, terminated, truncated, GAMMA)
    # no end: 1 + .5 + .25, bootstrap .125 from 3 steps on
    # terminated on the 2nd step: 1 + .5*2, no bootstrap
    # truncated on the 1st step: 3, bootstrap .5 from the final observation
    # truncated on the last step of the window: same as no end
    np.testing.assert_allclose(returns, [1.75, 2.0, 3.0, 1.75])
    np.testing.assert_allclose(discount, [0.125, 0.0, 0.5, 0.125])
    np.testing.assert_array_equal(steps, [3, 2, 1, 3])


class Counting(gym.Env):
    """Episodes of fixed lengths; the observation names (episode, t), the
    reward is t + 1, so every transition is recognisable. Episodes ending
    on an even index terminate, odd ones are truncated."""

    def __init__(self, lengths, frame=False):
        self.lengths, self.frame = lengths, frame
        self.observation_space = (gym.spaces.Box(0, 255, (2, 2), np.uint8) if frame
                                  else gym.spaces.Box(-1e6, 1e6, (2,), np.float32))
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t = -1, 0

    def _obs(self):
        if self.frame:
            return np.full((2, 2), (self.episode * 16 + self.t) % 256, np.uint8)
        return np.array([self.episode, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.lengths[self.episode % len(self.lengths)]
        terminated = end and self.episode % 2 == 0
        return self._obs(), float(self.t), terminated, end and not terminated, {}


def fill(buffer, envs, steps, seed=0):
    """Steps the envs the way the trainer does, recording each env's episodes
    as lists of (obs, reward) plus how they ended."""
    tracker = EpisodeTracker(envs.num_envs)
    obs, _ = envs.reset(seed=seed)
    episodes = [[{"obs": [o], "rewards": [], "terminated": None}] for o in obs]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.integers(0, 2, envs.num_envs)
        next_obs, reward, terminated, truncated, _ = envs.step(actions)
        buffer.add(obs, actions, reward, terminated, truncated, tracker.valid)
        for e in range(envs.num_envs):
            current = episodes[e][-1]
            if tracker.valid[e]:
                current["obs"].append(next_obs[e])
                current["rewards"].append(reward[e])
                if terminated[e] or truncated[e]:
                    current["terminated"] = bool(terminated[e])
            else:  # autoreset step: next_obs is the new episode's first
                episodes[e].append({"obs": [next_obs[e]], "rewards": [], "terminated": None})
        tracker.step(reward, terminated | truncated)
        obs = next_obs
    return episodes


def expected(episode, t, n):
    """The n-step transition from step t of a recorded episode, by hand."""
    length = len(episode["rewards"])
    m = min(n, length - t)
    ret = sum(GAMMA**k * episode["rewards"][t + k] for k in range(m))
    ends_here = t + m == length and episode["terminated"] is not None
    discount = 0.0 if ends_here and episode["terminated"] else GAMMA**m
    return ret, discount, episode["obs"][t + m]


def every_start(buffer):
    lo, hi = buffer.start_range()
    rows = np.repeat(np.arange(lo, hi), buffer.num_envs)
    envs = np.tile(np.arange(buffer.num_envs), hi - lo)
    keep = buffer.valid[rows % buffer.rows, envs]
    return rows[keep], envs[keep]


@pytest.mark.parametrize("n_step", [1, 3])
def test_every_transition_matches_the_hand_computed_one(n_step):
    envs = gym.vector.SyncVectorEnv([lambda: Counting([3, 5]), lambda: Counting([4, 2, 6])])
    buffer = ReplayBuffer(capacity=200, num_envs=2, obs_shape=(2,), n_step=n_step)
    episodes = fill(buffer, envs, 60)
    rows, env_ids = every_start(buffer)
    batch = buffer.transitions(rows, env_ids, GAMMA)
    seen = set()
    for i, e in enumerate(env_ids):
        episode_id, t = (int(v) for v in batch.obs[i])
        ret, discount, next_obs = expected(episodes[e][episode_id], t, n_step)
        assert batch.returns[i] == pytest.approx(ret), (e, episode_id, t)
        assert batch.discount[i] == pytest.approx(discount), (e, episode_id, t)
        np.testing.assert_array_equal(batch.next_obs[i], next_obs)  # truncation: the final observation
        seen.add((e, episode_id, t))
    # every real step is a start (the last n rows wait for their successors); no autoreset step is
    lo, hi = buffer.start_range()
    assert len(seen) == len(rows) == int(buffer.valid[np.arange(lo, hi) % buffer.rows].sum())
    assert all(t < len(episodes[e][ep]["rewards"]) for e, ep, t in seen)


def test_sampling_skips_autoreset_rows_and_overwritten_data():
    envs = gym.vector.SyncVectorEnv([lambda: Counting([3]), lambda: Counting([2])])
    buffer = ReplayBuffer(capacity=40, num_envs=2, obs_shape=(2,), n_step=2)
    fill(buffer, envs, 100)  # five times the capacity
    batch = buffer.sample(4096, GAMMA, np.random.default_rng(0))
    rows, env_ids = buffer.sample_indices(4096, np.random.default_rng(0))
    assert buffer.valid[rows % buffer.rows, env_ids].all()
    assert rows.min() >= buffer.oldest
    # env 1's episodes last 2 steps: starts at t=0 and t=1 only, about equally often
    starts = batch.obs[env_ids == 1][:, 1]
    assert set(np.unique(starts)) == {0.0, 1.0}
    assert 0.4 < (starts == 0).mean() < 0.6


def test_frame_stacks_are_rebuilt_exactly_as_gymnasium_stacks_them():
    def make(lengths):
        return lambda: gym.wrappers.FrameStackObservation(Counting(lengths, frame=True), 4, padding_type="reset")

    envs = gym.vector.SyncVectorEnv([make([3, 6]), make([7, 2])])
    buffer = ReplayBuffer(capacity=64, num_envs=2, obs_shape=(4, 2, 2), obs_dtype=np.uint8, n_step=3, frame_stack=4)
    tracker = EpisodeTracker(2)
    obs, _ = envs.reset(seed=0)
    seen = []  # (logical row, env, stacked obs as the env returned it)
    for step in range(90):
        for e in range(2):
            seen.append((step, e, obs[e].copy()))
        next_obs, reward, terminated, truncated, _ = envs.step(np.zeros(2, np.int64))
        buffer.add(obs, np.zeros(2), reward, terminated, truncated, tracker.valid)
        tracker.step(reward, terminated | truncated)
        obs = next_obs
    lo, hi = buffer.start_range()
    checked = 0
    for row, e, stacked in seen:
        if lo <= row < hi + buffer.n_step:  # starts and bootstrap rows
            np.testing.assert_array_equal(buffer.observations(np.array([row]), np.array([e]))[0], stacked)
            checked += 1
    assert checked > 50
    assert buffer.obs.dtype == np.uint8


def test_memory_per_transition_is_one_uint8_frame():
    frame = 84 * 84
    buffer = ReplayBuffer(capacity=4000, num_envs=4, obs_shape=(4, 84, 84), obs_dtype=np.uint8,
                          n_step=3, frame_stack=4)
    naive = 2 * 4 * frame  # obs and next_obs, each a stack of 4 frames
    assert buffer.bytes_per_transition <= frame + 16  # action (8), reward (4), four flags
    assert buffer.nbytes < naive * 4000 / 7


def test_state_round_trip_samples_the_same():
    envs = gym.vector.SyncVectorEnv([lambda: Counting([3, 5]), lambda: Counting([4])])
    buffer = ReplayBuffer(capacity=30, num_envs=2, obs_shape=(2,), n_step=3)
    fill(buffer, envs, 50)
    copy = ReplayBuffer(capacity=30, num_envs=2, obs_shape=(2,), n_step=3)
    copy.load_state_dict(buffer.state_dict())
    a = buffer.sample(64, GAMMA, np.random.default_rng(1))
    b = copy.sample(64, GAMMA, np.random.default_rng(1))
    for name in ("obs", "actions", "returns", "discount", "next_obs"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_the_buffer_counts_the_real_transitions_it_took_and_keeps_the_count_in_its_state():
    """What learningStarts counts (a transition, as SB3's num_timesteps): autoreset rows are none. A state from
    before the count (an older trainer's deterministic checkpoint) counts its held rows that are real, and rows
    already overwritten whole (learningStarts is at most bufferSize: such a buffer is past it anyway)."""
    envs = gym.vector.SyncVectorEnv([lambda: Counting([3, 5]), lambda: Counting([4])])
    buffer = ReplayBuffer(capacity=30, num_envs=2, obs_shape=(2,), n_step=3)
    add, real = buffer.add, []
    buffer.add = lambda *args: real.append(int(np.sum(args[-1]))) or add(*args)
    fill(buffer, envs, 50)
    assert buffer.real_added == sum(real) < buffer.added * 2 and buffer.oldest > 0  # autoreset rows; rows overwritten
    held = np.arange(buffer.oldest, buffer.added) % buffer.rows
    copy = ReplayBuffer(capacity=30, num_envs=2, obs_shape=(2,), n_step=3)
    copy.load_state_dict(buffer.state_dict())
    assert copy.real_added == buffer.real_added
    older = {k: v for k, v in buffer.state_dict().items() if k != "real_added"}
    copy.load_state_dict(older)
    assert copy.real_added == int(buffer.valid[held].sum()) + buffer.oldest * 2


def test_frame_stack_needs_stacked_observations():
    with pytest.raises(ValueError, match="frame_stack=4"):
        ReplayBuffer(capacity=10, num_envs=1, obs_shape=(84, 84), frame_stack=4)


def full_buffer(rows: int) -> ReplayBuffer:
    """A buffer of `rows` vector steps of 1 env, through the public state API."""
    buffer = ReplayBuffer(capacity=rows, num_envs=1, obs_shape=(4,))
    valid = np.ones((rows, 1), bool)
    valid[1::50] = False  # an autoreset row after every 50-step episode
    state = buffer.state_dict()
    state["added"] = rows
    state["arrays"] = {name: np.resize(array, (rows, *array.shape[1:])) for name, array in state["arrays"].items()}
    state["arrays"]["valid"] = valid
    buffer.load_state_dict(state)
    return buffer


class Reads(np.ndarray):
    """A buffer's array that counts the elements read from it (indexed, or passed to a ufunc, a reduction or a numpy
    function); what it hands back is a plain array, so reads are counted once."""

    elements = 0

    def __getitem__(self, key):
        got = super().__getitem__(key)
        Reads.elements += np.size(got)
        return got.view(np.ndarray) if isinstance(got, np.ndarray) else got

    @staticmethod
    def plain(values):
        if isinstance(values, Reads):
            Reads.elements += values.size
            return values.view(np.ndarray)
        if isinstance(values, (list, tuple)):
            return type(values)(Reads.plain(value) for value in values)
        return values

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return getattr(ufunc, method)(*Reads.plain(inputs), **{k: Reads.plain(v) for k, v in kwargs.items()})

    def __array_function__(self, func, types, args, kwargs):
        return func(*Reads.plain(args), **{k: Reads.plain(v) for k, v in kwargs.items()})


def test_sampling_cost_does_not_grow_with_the_buffer():
    """Each gradient step samples once: a check that scans every row (1M here) cost 5.3 ms per sample, more than the
    step itself. The elements a sample reads from the buffer's arrays are counted, not timed (a timed bound fails on a
    loaded CI machine): about a thousand for a batch of 64 whatever the buffer holds, a scan adds every row."""

    def elements_per_sample(buffer):
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "valid", "first"):
            setattr(buffer, name, getattr(buffer, name).view(Reads))
        rng, Reads.elements = np.random.default_rng(0), 0
        for _ in range(20):
            buffer.sample(64, GAMMA, rng)
        return Reads.elements / 20

    small, large = full_buffer(1_000), full_buffer(1_000_000)
    assert large.can_sample() and not large.valid[1]
    small_reads, large_reads = elements_per_sample(small), elements_per_sample(large)
    assert 64 < small_reads and large_reads < 2 * small_reads, (small_reads, large_reads)


def test_a_buffer_of_autoreset_rows_only_cannot_sample():
    buffer = ReplayBuffer(capacity=10, num_envs=2, obs_shape=(1,))
    for _ in range(4):
        buffer.add(np.zeros((2, 1), np.float32), np.zeros(2, np.int64), np.zeros(2, np.float32),
                   np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, bool))
    assert not buffer.can_sample()
    with pytest.raises(ValueError, match="no sampleable transition"):
        buffer.sample(1, GAMMA, np.random.default_rng(0))
