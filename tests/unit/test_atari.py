"""Atari envs, CNN torsos, frame-deduplicating replay and the bf16 path, on CPU.

Real ALE emulators, a few hundred steps each."""

import sys
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer import atari, device, envs, networks
from kuberl_trainer.ppo import Agent, ppo_loss
from kuberl_trainer.replay import ReplayBuffer

FRAME = (84, 84)
BACKENDS = ["ale", "gymnasium", pytest.param("envpool", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("envpool") is None, reason="envpool (the trainer's envpool extra) is not installed"))]


def rollout(vec: gym.vector.VectorEnv, steps: int, seed: int = 3):
    obs, _ = vec.reset(seed=seed)
    rng = np.random.default_rng(seed)
    history = [obs]
    for _ in range(steps):
        obs, *_ = vec.step(rng.integers(0, vec.single_action_space.n, vec.num_envs))
        history.append(obs)
    return np.stack(history)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_observations_are_stacked_uint8_84x84_frames(env_id, backend):
    vec = envs.make_envs(env_id, 2, {}, backend)
    try:
        assert vec.single_observation_space == gym.spaces.Box(0, 255, (4, *FRAME), np.uint8)
        assert vec.single_action_space == gym.spaces.Discrete(6)
        history = rollout(vec, 40)
    finally:
        vec.close()
    assert history.shape == (41, 2, 4, *FRAME) and history.dtype == np.uint8
    assert (history[0] == history[0][:, :1]).all(), "a reset fills the stack with its first frame"
    assert (history[1:, :, :-1] == history[:-1, :, 1:]).all(), "each step shifts in exactly one new frame"
    assert history[-1].std() > 0, "frames carry the screen, not zeros"
    assert atari.frame_stack(vec) == 4 and atari.clips_rewards(vec)


def test_protocols_set_sticky_actions_and_the_emulator_never_skips_frames_itself():
    for protocol, sticky in (("modern", 0.25), ("nature", 0.0)):
        vec = atari.make_atari_envs("ALE/Pong-v5", 1, {"protocol": protocol}, "gymnasium")
        ale_env = vec.envs[0].unwrapped
        assert ale_env.ale.getFloat("repeat_action_probability") == pytest.approx(sticky)
        assert ale_env._frameskip == 1  # AtariPreprocessing skips 4 and max-pools the last two
        vec.close()
    assert atari.options({}).protocol == atari.DEFAULT_PROTOCOL == "modern"
    opts = atari.options({"protocol": "nature", "frameStack": 2, "noopMax": 0, "clipRewards": False, "mode": 1})
    assert (opts.frame_stack, opts.noop_max, opts.clip_rewards, opts.make_kwargs) == (2, 0, False, {"mode": 1})


def test_rewards_are_clipped_for_learning_only():
    vec = atari.make_atari_envs("ALE/Pong-v5", 1)
    raw = np.array([3.0, -2.0, 0.0, 1.0])
    assert atari.learning_rewards(vec, raw).tolist() == [1.0, -1.0, 0.0, 1.0]
    assert raw.tolist() == [3.0, -2.0, 0.0, 1.0]  # the env's own rewards (reported returns) untouched
    vec.close()
    unclipped = atari.make_atari_envs("ALE/Pong-v5", 1, {"clipRewards": False})
    assert atari.learning_rewards(unclipped, raw) is raw
    unclipped.close()
    cartpole = envs.make_envs("CartPole-v1", 1)
    assert atari.learning_rewards(cartpole, raw) is raw and atari.frame_stack(cartpole) == 1
    cartpole.close()


def test_episodic_life_ends_the_learning_episode_but_not_the_game():
    vec = atari.make_atari_envs("ALE/Breakout-v5", 1, {"episodicLife": True, "protocol": "nature"}, "gymnasium")
    ale = vec.envs[0].unwrapped.ale
    vec.reset(seed=1)
    lives_at_end = None
    for _ in range(3000):
        _, _, terminated, _, _ = vec.step(np.array([1]))  # FIRE, then drift
        if terminated[0]:
            lives_at_end = ale.lives()
            break
    assert lives_at_end is not None and lives_at_end > 0, "a life loss, not game over, ended the episode"
    vec.step(np.array([0]))  # the autoreset step
    assert ale.lives() == lives_at_end, "the game went on after the life loss"
    vec.close()


@pytest.mark.parametrize(("env_id", "kwargs", "backend", "field", "words"), [
    ("ALE/Pongg-v5", {}, "gymnasium", "spec.env.id", "did you mean ALE/Pong-v5"),
    ("ALE/Pong-v5", {"protocol": "v4"}, "gymnasium", "spec.env.kwargs.protocol", "'modern', 'nature'"),
    ("ALE/Pong-v5", {"frameskip": 4}, "gymnasium", "spec.env.kwargs.frameskip", "set by the protocol"),
    ("ALE/Pong-v5", {"frameStack": 0}, "gymnasium", "spec.env.kwargs.frameStack", "from 1 to 16"),
    ("ALE/Pong-v5", {"episodicLife": "yes"}, "gymnasium", "spec.env.kwargs.episodicLife", "true or false"),
    ("ALE/Pong-v5", {"difficult": 1}, "gymnasium", "spec.env.kwargs", "refused"),
    ("CartPole-v1", {}, "envpool", "spec.env.backend", "Atari (ALE) ids only"),
    ("CartPole-v1", {}, "ale", "spec.env.backend", "Atari (ALE) ids only"),
    ("ALE/Pong-v5", {"mode": 1}, "ale", "spec.env.kwargs.mode", "not an option of backend ale"),
])
def test_bad_atari_settings_are_configuration_errors_naming_the_field(env_id, kwargs, backend, field, words):
    with pytest.raises(envs.UnknownEnv) as raised:
        envs.make_envs(env_id, 1, kwargs, backend)
    assert str(raised.value).startswith(field + ":") and words in str(raised.value)


@pytest.mark.skipif(__import__("importlib").util.find_spec("envpool") is None, reason="envpool is not installed")
def test_a_game_envpool_does_not_have_is_a_configuration_error_naming_the_id():
    with pytest.raises(atari.AtariConfigError, match=r"^spec\.env\.id: EnvPool has no task 'TicTacToe3D-v5'"):
        envs.make_envs("ALE/TicTacToe3D-v5", 1, {}, "envpool")


@pytest.mark.skipif(__import__("importlib").util.find_spec("envpool") is None, reason="envpool is not installed")
def test_envpool_without_no_ops_runs_instead_of_crashing():
    vec = envs.make_envs("ALE/Pong-v5", 1, {"noopMax": 0}, "envpool")  # EnvPool itself segfaults on noop_max=0
    obs, _ = vec.reset(seed=1)
    assert obs.shape == (1, 4, *FRAME)
    vec.close()


def test_envpool_missing_is_a_configuration_error_naming_the_backend(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool now raises ImportError
    with pytest.raises(atari.AtariConfigError, match=r"^spec\.env\.backend: envpool is unavailable here"):
        envs.make_envs("ALE/Pong-v5", 1, {}, "envpool")


def test_ale_py_missing_says_the_pip_of_the_interpreter_that_needs_it(monkeypatch):
    """`kuberl run` of the Pong examples after `make train` (which installs no ale-py) said `pip install
    'kuberl-trainer[atari]'`: the README's user never activates .venv, so that `pip` was another Python's."""
    monkeypatch.setattr(atari, "_ale_registered", lambda: False)
    with pytest.raises(atari.AtariConfigError) as refused:
        atari.game_of("ALE/Pong-v5")
    assert str(refused.value) == (f"spec.env.id: 'ALE/Pong-v5' is an Atari id but ale-py is not installed"
                                  f" ({sys.executable} -m pip install 'kuberl-trainer[atari]')")


# --- networks ------------------------------------------------------------------

PIXELS = gym.spaces.Box(0, 255, (4, *FRAME), np.uint8)
VECTOR = gym.spaces.Box(-1, 1, (4,), np.float32)


def test_policy_auto_picks_the_cnn_for_pixels_and_forcing_a_wrong_one_names_the_field():
    assert networks.choose(PIXELS, "auto", "spec.ppo.policy") == "cnn"
    assert networks.choose(VECTOR, "auto", "spec.ppo.policy") == "mlp"
    assert networks.choose(gym.spaces.Box(0, 255, FRAME, np.uint8), "cnn", "f") == "cnn"
    with pytest.raises(networks.PolicyMismatch, match=r"^spec\.dqn\.policy: 'mlp' cannot learn from \(4, 84, 84\) pixel"):
        networks.choose(PIXELS, "mlp", "spec.dqn.policy")
    with pytest.raises(networks.PolicyMismatch, match=r"^spec\.ppo\.policy: 'cnn' needs uint8 image"):
        networks.choose(VECTOR, "cnn", "spec.ppo.policy")


def test_the_nature_dqn_has_its_published_shape_and_reads_uint8():
    q = networks.QCNN((4, *FRAME), 6)
    # Mnih et al. 2015: 32x8x8/4, 64x4x4/2, 64x3x3/1, 512, one output per action
    assert sum(p.numel() for p in q.parameters()) == 8224 + 32832 + 36928 + 1606144 + 3078
    frames = torch.randint(0, 256, (2, 4, *FRAME), dtype=torch.uint8)
    values = q(frames)
    assert values.shape == (2, 6) and values.dtype == torch.float32
    torch.testing.assert_close(values, q(frames.float()))  # scaling happens inside, whatever the dtype
    single = networks.NatureCNN(FRAME)
    assert single(frames[:, 0]).shape == (2, networks.CNN_FEATURES)


def test_ppo_agent_with_a_cnn_shares_one_torso_and_keeps_mlp_checkpoints_unchanged():
    encoder, features = networks.encoder(PIXELS, "auto", "spec.ppo.policy")
    agent = Agent(features, gym.spaces.Discrete(6), [], encoder)
    frames = torch.randint(0, 256, (3, 4, *FRAME), dtype=torch.uint8)
    action, log_prob, value = agent.act(frames)
    assert action.shape == log_prob.shape == value.shape == (3,)
    mlp_agent = Agent(4, gym.spaces.Discrete(2), [64, 64])
    assert not any(k.startswith("encoder") for k in mlp_agent.state_dict())


# --- bf16 autocast: the code a GPU runs, on CPU ------------------------------------


def test_bf16_autocast_runs_the_network_in_bf16_and_the_rl_maths_in_fp32():
    torch.manual_seed(0)
    encoder, features = networks.encoder(PIXELS, "cnn", "spec.ppo.policy")
    agent = Agent(features, gym.spaces.Discrete(6), [], encoder)
    frames = torch.randint(0, 256, (8, 4, *FRAME), dtype=torch.uint8)
    actions = torch.randint(0, 6, (8,))
    seen = []
    handle = agent.encoder.convs[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    with device.autocast(torch.device("cpu"), "bf16"):
        log_prob, entropy, value = agent(frames, actions)
    handle.remove()
    assert seen == [torch.bfloat16], "the convolutions ran in bf16"
    assert log_prob.dtype == entropy.dtype == value.dtype == torch.float32
    ref_log_prob, _, ref_value = agent(frames, actions)
    torch.testing.assert_close(log_prob, ref_log_prob, atol=0.05, rtol=0.05)
    torch.testing.assert_close(value, ref_value, atol=0.05, rtol=0.05)
    ones = torch.ones(8)
    loss, _ = ppo_loss(log_prob, entropy, value, ref_log_prob.detach(), ref_value.detach(), ones, ones, ones / 8, PPOConfig())
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in agent.parameters() if p.grad is not None)
    assert device.autocast(torch.device("cpu"), "fp32").__class__.__name__ == "nullcontext"


def test_host_buffers_are_plain_numpy_on_cpu_and_copies_keep_uint8():
    buffer = device.host_zeros((2, 4, *FRAME), np.uint8, torch.device("cpu"))
    assert isinstance(buffer, np.ndarray) and buffer.dtype == np.uint8
    on_device = device.to_device(buffer, torch.device("cpu"))
    assert on_device.dtype == torch.uint8 and on_device.data_ptr() == buffer.ctypes.data  # no copy on CPU


# --- replay memory -------------------------------------------------------------------

# One 84x84 uint8 frame per transition, plus action (int64), reward (float32)
# and four flags: 7056 + 8 + 4 + 4 = 7072 bytes. Storing obs and next_obs
# stacks instead would take 2 x 4 x 7056 = 56448 bytes.
REPLAY_BYTES_PER_TRANSITION_BOUND = 84 * 84 + 16


def test_replay_memory_per_transition_is_one_frame_measured_with_tracemalloc():
    capacity = 4000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buffer = ReplayBuffer(capacity, 4, (4, *FRAME), np.uint8, n_step=3, frame_stack=4)
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    transitions = buffer.rows * buffer.num_envs
    assert transitions >= capacity
    assert allocated <= transitions * REPLAY_BYTES_PER_TRANSITION_BOUND + 64 * 1024  # + the arrays' own headers
    assert buffer.bytes_per_transition <= REPLAY_BYTES_PER_TRANSITION_BOUND


def test_replay_rebuilds_the_stacks_pong_gave():
    vec = atari.make_atari_envs("ALE/Pong-v5", 2)
    buffer = ReplayBuffer(500, 2, (4, *FRAME), np.uint8, n_step=3, frame_stack=4)
    obs, _ = vec.reset(seed=5)
    seen = []
    rng = np.random.default_rng(0)
    for _ in range(60):
        actions = rng.integers(0, 6, 2)
        next_obs, reward, terminated, truncated, _ = vec.step(actions)
        buffer.add(obs, actions, reward, terminated, truncated, np.ones(2, bool))
        seen.append(obs)
        obs = next_obs
    vec.close()
    rows = np.repeat(np.arange(60), 2)
    columns = np.tile(np.arange(2), 60)
    assert (buffer.observations(rows, columns) == np.stack(seen)[rows, columns]).all()


def test_the_threaded_backend_is_bit_equal_to_gymnasiums_wrappers_without_randomness():
    """protocol nature, noopMax 0: no sticky actions, no no-ops, so nothing random is
    left. Same seed, same actions: the same stacks (reset padding included), rewards
    and episode ends, through autoresets."""
    kwargs = {"protocol": "nature", "noopMax": 0}
    threaded, wrapped = (envs.make_envs("ALE/Pong-v5", 2, kwargs, b) for b in ("ale", "gymnasium"))
    try:
        seen = [(threaded.reset(seed=11)[0], wrapped.reset(seed=11)[0])]
        rng, ended = np.random.default_rng(2), 0
        for _ in range(900):  # a random Pong game ends after about 760 steps
            actions = rng.integers(0, 6, 2)
            a, b = threaded.step(actions), wrapped.step(actions)
            for x, y in zip(a[:4], b[:4], strict=True):
                assert np.array_equal(x, y)
            assert a[1].dtype == b[1].dtype == np.float64
            ended += int(a[2].sum() + a[3].sum())
            seen.append((a[0], b[0]))
    finally:
        threaded.close()
        wrapped.close()
    assert ended >= 1, "the run must cross an episode end and its autoreset"
    assert all(np.array_equal(x, y) for x, y in seen)


def test_the_threaded_backend_sets_every_default_that_differs_from_kuberls_protocol(monkeypatch):
    import ale_py

    made = {}

    class Recording(ale_py.AtariVectorEnv):
        def __init__(self, game, num_envs, **kw):
            made.update(kw, game=game)
            super().__init__(game, num_envs, **kw)

    monkeypatch.setattr(ale_py, "AtariVectorEnv", Recording)
    envs.make_envs("ALE/MsPacman-v5", 1, {"episodicLife": True}, "auto").close()
    assert made["game"] == "ms_pacman"
    assert made["repeat_action_probability"] == 0.25  # the modern protocol (ALE's own default: 0)
    assert (made["reward_clipping"], made["use_fire_reset"]) == (False, False)  # ALE's: True, True
    assert (made["noop_max"], made["episodic_life"], made["frameskip"], made["stack_num"]) == (30, True, 4, 4)
    assert made["max_num_frames_per_episode"] == atari.MAX_FRAMES_PER_EPISODE and made["batch_size"] == 0


def test_no_op_starts_have_the_same_distribution_on_both_backends():
    """Up to 30 no-ops after a reset: the emulator frame each episode starts at."""
    threaded = envs.make_envs("ALE/Pong-v5", 16, {"protocol": "nature"}, "ale")
    wrapped = envs.make_envs("ALE/Pong-v5", 1, {"protocol": "nature"}, "gymnasium")  # one, reset 16 times: faster
    starts = {"ale": threaded.reset(seed=4)[1]["episode_frame_number"],
              "gymnasium": np.concatenate([wrapped.reset(seed=4 + k)[1]["episode_frame_number"] for k in range(16)])}
    threaded.close()
    wrapped.close()
    for backend, frames in starts.items():
        assert 0 <= frames.min() and frames.max() <= 30, backend
        assert len(set(frames.tolist())) >= 8, backend  # spread over the range, not one fixed start
        assert abs(frames.mean() - 15) < 4.5, (backend, frames.mean())  # uniform over 0 or 1 to 30 (seeded: the same draws every run)


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 2), (3, 2), (16, 15)])
def test_env_threads_take_the_ranks_cpu_share_leaving_one_core_on_larger_ones(cpus, threads):
    assert atari.env_threads(cpus) == threads


def test_atari_envs_have_no_checkpointable_state():
    """ALE's emulator state is not plain data (restoring it meant unpickling
    from the checkpoint): Atari jobs resume without env state."""
    pong = envs.make_envs("ALE/Pong-v5", 2, {"protocol": "modern"})
    pong.reset(seed=1)
    assert envs.env_state(pong) is None
    pong.close()


def test_the_threaded_backend_in_two_halves_gives_the_same_trajectories():
    """halves=2 (the GPU rank's overlap) steps each half on its own; the same seed
    and actions give what one pool gives, through episode ends (life losses here)."""
    kwargs = {"protocol": "modern", "episodicLife": True}
    whole, halved = (atari.make_atari_envs("ALE/Breakout-v5", 4, kwargs, "ale", halves=h) for h in (1, 2))
    try:
        for x, y in zip(whole.reset(seed=9)[0], halved.reset(seed=9)[0], strict=True):
            assert np.array_equal(x, y)
        rng, ended = np.random.default_rng(4), 0
        for _ in range(300):
            actions = rng.integers(0, 4, 4)
            for half, part in enumerate(halved.parts):
                halved.send_half(half, actions[part])
            apart = [halved.recv_half(half) for half in range(2)]
            together = whole.step(actions)
            for k in range(4):
                assert np.array_equal(together[k], np.concatenate([apart[0][k], apart[1][k]]))
            ended += int(together[2].sum())
    finally:
        whole.close()
        halved.close()
    assert ended >= 2


def test_ppo_overlapped_rollout_records_what_the_envs_did():
    """PPO's overlapped collect (forced on, on CPU), replayed on one synchronous
    pool with the actions it chose: the same observations, rewards, episode ends
    and autoreset mask, step by step."""
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    kwargs, steps = {"protocol": "modern", "episodicLife": True}, 96
    ctx = Dist(0, 1, 0, 1, torch.device("cpu"), None)
    trainer = PPOTrainer(ctx, PPOConfig(num_steps=steps, num_minibatches=1), "ALE/Breakout-v5", 4, kwargs, 10**6, 5, 0,
                         overlap=True)
    assert trainer.overlap
    trainer.collect()
    trainer.envs.close()
    buf = trainer.buf
    replay = atari.make_atari_envs("ALE/Breakout-v5", 4, kwargs, "ale")
    obs, _ = replay.reset(seed=trainer.seed)
    valid = np.ones(4, bool)
    for t in range(steps):
        assert np.array_equal(buf.obs[t], obs) and np.array_equal(buf.valid[t], valid)
        obs, reward, terminated, truncated, _ = replay.step(buf.actions[t])
        assert np.array_equal(buf.rewards[t], np.sign(reward))
        assert np.array_equal(buf.terminated[t], terminated) and np.array_equal(buf.truncated[t], truncated)
        valid = ~(terminated | truncated)
    replay.close()
    assert np.array_equal(trainer.next_obs, obs)
    assert not buf.valid.all(), "the rollout must cross a life loss and its autoreset"


@pytest.mark.parametrize("backend", ["ale", "gymnasium"])
def test_a_seeded_reset_restarts_a_used_atari_env_as_a_new_one_starts(backend):
    """What lets rank 0 keep its evaluation envs (BaseAlgorithm.evaluation_envs): under
    the modern protocol (sticky actions, no-op starts), an env that has played and been
    reset with a seed plays on exactly as a freshly built one reset with that seed."""
    kept = envs.make_envs("ALE/Pong-v5", 2, {}, backend)
    fresh = envs.make_envs("ALE/Pong-v5", 2, {}, backend)
    try:
        rollout(kept, 60, seed=11)  # an evaluation with another seed, ended mid-episode
        np.testing.assert_array_equal(rollout(kept, 60, seed=5), rollout(fresh, 60, seed=5))
    finally:
        kept.close()
        fresh.close()


def test_rank_0_builds_its_atari_evaluation_envs_once(monkeypatch):
    from kuberl_trainer import base
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    trainer = PPOTrainer(Dist(0, 1, 0, 1, torch.device("cpu"), None), PPOConfig(num_steps=8), "ALE/Pong-v5",
                         2, {"frameStack": 2}, 64, 1, 0)
    built = []
    monkeypatch.setattr(base, "make_envs", lambda *args, **kwargs: built.append(args) or envs.make_envs(*args, **kwargs))
    kept = []
    for episodes in (1, 1, 2):
        with trainer.evaluation_envs("ALE/Pong-v5", episodes, {"frameStack": 2}) as vec:
            kept.append(vec)
    assert kept[0] is kept[1] and len(built) == 2  # another shape of evaluation: new envs
    assert kept[0].closed and not kept[2].closed
    for _ in range(2):
        with trainer.evaluation_envs("CartPole-v1", 1, {}):
            pass
    assert len(built) == 4  # any other env: a fresh set each time


def test_rank_0_says_it_is_building_many_atari_envs_before_the_seconds_it_takes():
    assert atari.build_note("ALE/Pong-v5", 64, "auto") == (
        "building 64 ALE/Pong-v5 envs per rank (about 0.1-0.2 s each, one after another)")
    assert "EnvPool builds them on its threads" in atari.build_note("ALE/Pong-v5", 64, "envpool")
    assert atari.build_note("ALE/Pong-v5", 8, "auto") is None  # a second or so: nothing to explain
    assert atari.build_note("CartPole-v1", 64, "auto") is None
