"""The hand-fused PPO step computes what the nn.Module path computes:
ppo_loss + autograd + clip_grad_norm_ + torch.optim.Adam, on the same
weights and minibatches (losses, gradients, parameters, Adam moments)."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer import fused, learners
from kuberl_trainer.ppo import STAT_NAMES, Agent, ppo_loss
from torch import nn

OBS_DIM, BATCH = 4, 64


pytestmark = pytest.mark.usefixtures("one_thread")


def module_step(agent, optimizer, obs, rows, hp, keep_grads: bool = True):
    """learners.AutogradPPOLearner.step's maths, without DDP (one micro-batch): the stats, and the gradients
    before clipping (None without `keep_grads`: bench/fused_step.py times this step, and copies would count)."""
    actions = rows[:, :-5]
    actions = actions.squeeze(-1) if agent.discrete else actions
    old_log_prob, old_value, advantages, returns, valid = rows[:, -5:].unbind(1)
    weight = valid / valid.sum().clamp(min=1.0)
    if hp.norm_advantage:
        mean = (advantages * weight).sum()
        std = ((advantages - mean).square() * valid).sum().div((valid.sum() - 1).clamp(min=1.0)).sqrt()  # Bessel's, as CleanRL
        advantages = (advantages - mean) / (std + 1e-8)
    new_log_prob, entropy, new_value = agent(obs, actions)
    loss, stats = ppo_loss(new_log_prob, entropy, new_value, old_log_prob, old_value, advantages, returns, weight, hp)
    loss.backward()
    grads = [p.grad.clone() for p in agent.parameters()] if keep_grads else None
    nn.utils.clip_grad_norm_(agent.parameters(), hp.max_grad_norm, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return torch.stack([stats[name] for name in STAT_NAMES]), grads


def minibatch(agent, rng, batch=BATCH, obs_dim=OBS_DIM):
    """Observations and table rows as PPOTrainer.learn builds them, with old
    log-probs and values near the current ones (so ratios straddle the clip)
    and a few autoreset rows."""
    obs = torch.from_numpy(rng.normal(size=(batch, obs_dim)).astype(np.float32))
    with torch.no_grad():
        action, log_prob, value = agent.act(obs)
    action = action.float().reshape(batch, -1)
    noise = lambda scale: torch.from_numpy(rng.normal(scale=scale, size=batch).astype(np.float32))
    valid = torch.from_numpy((rng.random(batch) > 0.1).astype(np.float32))
    table = torch.stack([log_prob + noise(0.3), value + noise(0.3), noise(1.0), value + noise(1.0), valid], 1)
    return obs, torch.cat([action, table], 1)


CASES = {
    "discrete": (gym.spaces.Discrete(3), {}),
    "discrete, clipped value, entropy": (gym.spaces.Discrete(2), {"clip_value_loss": True, "ent_coef": 0.01}),
    "continuous": (gym.spaces.Box(-1, 1, (2,), np.float32), {"clip_value_loss": False, "ent_coef": 0.01}),
    "one hidden layer, raw advantages": (gym.spaces.Discrete(2), {"norm_advantage": False, "hidden_sizes": [16]}),
}


@pytest.mark.parametrize("case", CASES)
def test_fused_steps_equal_the_module_path(case):
    space, overrides = CASES[case]
    hp = PPOConfig(**{"hidden_sizes": [32, 32], "max_grad_norm": 0.1, **overrides})
    torch.manual_seed(0)
    reference = Agent(OBS_DIM, space, list(hp.hidden_sizes))
    agent = copy.deepcopy(reference)
    optimizer = torch.optim.Adam(reference.parameters(), lr=3e-3, eps=1e-5, fused=True)
    step = fused.FusedPPOStep(agent, hp, torch.optim.Adam(agent.parameters(), lr=3e-3, eps=1e-5))
    rng = np.random.default_rng(1)
    for _ in range(6):
        obs, rows = minibatch(reference, rng)
        expected_stats, expected_grads = module_step(reference, optimizer, obs, rows, hp)
        stats = step.step(obs, rows)
        np.testing.assert_allclose(stats.numpy(), expected_stats.numpy(), rtol=1e-4, atol=1e-6)
        # the unclipped gradient, before Adam consumed it (clipping scales it uniformly)
        scale = min(1.0, hp.max_grad_norm / (torch.linalg.vector_norm(torch.cat([g.flatten() for g in expected_grads])) + 1e-6))
        for param, grad in zip(agent.parameters(), expected_grads, strict=True):
            fused_grad = step._slot(step.grad, param)
            np.testing.assert_allclose(fused_grad.numpy(), grad.numpy() * float(scale), rtol=1e-4, atol=1e-6)
    for name, (mine, theirs) in enumerate(zip(agent.parameters(), reference.parameters(), strict=True)):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=str(name))
        state, expected = step.optimizer.state[mine], optimizer.state[theirs]
        assert float(state["step"]) == float(expected["step"]) == 6
        np.testing.assert_allclose(state["exp_avg"].numpy(), expected["exp_avg"].numpy(), rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(state["exp_avg_sq"].numpy(), expected["exp_avg_sq"].numpy(), rtol=1e-4, atol=1e-9)


def test_the_agent_sees_the_fused_weights():
    """Acting, state dicts and checkpoints read the agent: its parameters are views of the flat vector."""
    hp = PPOConfig(hidden_sizes=[8, 8])
    agent = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    step = fused.FusedPPOStep(agent, hp, torch.optim.Adam(agent.parameters(), lr=1e-2))
    for name, value in agent.state_dict().items():
        assert torch.equal(value, before[name]), name  # copied in unchanged
    obs, rows = minibatch(agent, np.random.default_rng(0))
    step.step(obs, rows)
    assert not torch.equal(agent.actor[0].weight, before["actor.0.weight"])
    assert agent.actor[0].weight.data_ptr() == step.view["W0"][0].data_ptr()


def test_unsupported_agents_are_refused():
    cpu = torch.device("cpu")
    assert fused.supports(Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8]), cpu)
    assert not fused.supports(Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8]), cpu, "bf16")
    uneven = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    uneven.critic[2] = nn.Linear(8, 4)
    uneven.critic[4] = nn.Linear(4, 1)
    assert not fused.supports(uneven, cpu)
    with pytest.raises(ValueError, match="tanh MLP"):
        fused.FusedPPOStep(uneven, PPOConfig(), torch.optim.Adam(uneven.parameters()))


def test_the_optimizer_state_round_trips_through_a_state_dict():
    """Checkpoints hold torch.optim.Adam's state dict, whichever path wrote it."""
    hp = PPOConfig(hidden_sizes=[8, 8])
    torch.manual_seed(0)
    agent = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    step = fused.FusedPPOStep(agent, hp, torch.optim.Adam(agent.parameters(), lr=1e-2, eps=1e-5))
    rng = np.random.default_rng(0)
    for _ in range(3):
        step.step(*minibatch(agent, rng))
    saved = copy.deepcopy({"agent": agent.state_dict(), "optimizer": step.optimizer.state_dict()})
    assert [float(s["step"]) for s in saved["optimizer"]["state"].values()] == [3.0] * len(list(agent.parameters()))

    # the nn.Module path resumes from it ...
    reference = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    reference.load_state_dict(saved["agent"])
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, fused=True)
    optimizer.load_state_dict(saved["optimizer"])
    # ... and so does a fresh fused step: both take the same next step
    resumed = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    resumed_step = fused.FusedPPOStep(resumed, hp, torch.optim.Adam(resumed.parameters(), lr=1e-2, eps=1e-5))
    resumed.load_state_dict(saved["agent"])
    resumed_step.optimizer.load_state_dict(saved["optimizer"])
    resumed_step.adopt_optimizer_state()
    obs, rows = minibatch(agent, rng)
    module_step(reference, optimizer, obs, rows, hp)
    resumed_step.step(obs, rows)
    for mine, theirs in zip(resumed.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-7)
        assert float(resumed_step.optimizer.state[mine]["step"]) == float(optimizer.state[theirs]["step"]) == 4


def test_adam_state_keeps_torch_adams_state_dict_and_loads_it_both_ways():
    """The fused path keeps Adam's state without constructing torch.optim.Adam (whose first construction
    imports torch._dynamo, 0.87 s); what it writes must be torch's format exactly, and either side must
    resume from the other's checkpoint and take the same next step."""
    hp = PPOConfig(hidden_sizes=[8, 8])
    rng = np.random.default_rng(0)

    def stepped(optimizer_of, steps=3, seed=0):
        torch.manual_seed(seed)
        agent = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
        step = fused.FusedPPOStep(agent, hp, optimizer_of(agent))
        for batch in batches[:steps]:
            step.step(*batch)
        return agent, step

    torch.manual_seed(0)
    probe = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
    batches = [minibatch(probe, rng) for _ in range(4)]
    light_agent, light = stepped(lambda a: fused.AdamState(a.parameters(), lr=1e-2, eps=1e-5))
    torch_agent, real = stepped(lambda a: torch.optim.Adam(a.parameters(), lr=1e-2, eps=1e-5, fused=True))
    written, expected = light.optimizer.state_dict(), real.optimizer.state_dict()
    assert written["param_groups"] == expected["param_groups"]
    assert written["state"].keys() == expected["state"].keys()
    for key, state in expected["state"].items():
        assert {k: (v.dtype, tuple(v.shape)) for k, v in written["state"][key].items()} == {
            k: (v.dtype, tuple(v.shape)) for k, v in state.items()}
        for name in state:
            torch.testing.assert_close(written["state"][key][name], state[name])

    for source, target in (("light", "torch"), ("torch", "light")):
        saved = copy.deepcopy({"light": (light_agent, written), "torch": (torch_agent, expected)}[source])
        resumed = Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8])
        optimizer = (fused.AdamState(resumed.parameters(), lr=5.0) if target == "light"
                     else torch.optim.Adam(resumed.parameters(), lr=5.0, fused=True))
        step = fused.FusedPPOStep(resumed, hp, optimizer)
        resumed.load_state_dict(saved[0].state_dict())
        optimizer.load_state_dict(saved[1])
        step.adopt_optimizer_state()
        assert optimizer.param_groups[0]["lr"] == 1e-2 and optimizer.param_groups[0]["eps"] == 1e-5  # the saved settings
        step.step(*batches[3])
        _, uninterrupted = stepped(lambda a: fused.AdamState(a.parameters(), lr=1e-2, eps=1e-5), steps=4)
        for mine, theirs in zip(step.flat, uninterrupted.flat, strict=True):
            assert float(mine) == pytest.approx(float(theirs), rel=1e-5, abs=1e-7), (source, target)
    with pytest.raises(ValueError, match="does not match this network"):
        fused.AdamState(Agent(OBS_DIM, gym.spaces.Discrete(2), [8]).parameters(), lr=1e-2).load_state_dict(written)
    # a checkpoint's state that is not Adam's for these parameters is refused as a ValueError, never half-loaded
    fresh = fused.AdamState(Agent(OBS_DIM, gym.spaces.Discrete(2), [8, 8]).parameters(), lr=1e-2)
    for broken in ({**written, "state": {**written["state"], 99: written["state"][0]}},
                   {**written, "state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(3)}}},
                   {**written, "state": {0: {"step": "1", "exp_avg": "x", "exp_avg_sq": [1]}}}):
        with pytest.raises(ValueError, match="is not Adam's for this network"):
            fresh.load_state_dict(broken)
        assert fresh.state == {} and fresh.param_groups[0]["lr"] == 1e-2


def test_a_trainer_that_learns_fused_never_imports_torch_dynamo():
    """Startup: the fused trainers build no torch optimiser, so torch._dynamo (0.87 s) is not imported
    by the time the first update and checkpoint state are done, in deterministic mode too (seeded as a rank
    seeds: torch.use_deterministic_algorithms imported it with torch._inductor, 2.5 s per rank)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from kuberl_trainer.__main__ import seed_everything\n"
        "seed_everything(1, deterministic=True)\n"
        "assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()\n"
        "from kuberl_trainer.distributed import Dist\n"
        "from kuberl_trainer.ppo import PPOTrainer\n"
        "from kuberl.core.spec import PPOConfig\n"
        "t = PPOTrainer(Dist(0, 1, 0, 1, torch.device('cpu'), None), PPOConfig(num_steps=8), 'CartPole-v1', 2, {}, 10**6, seed=1, restart=0)\n"
        "t.update(False, False); t.shared_state()\n"
        "assert type(t.learner).__name__ == 'FusedPPOStep'\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False", result.stdout + result.stderr


def test_ppo_trainer_learns_through_the_fused_step_as_through_the_module_path(monkeypatch):
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    hp = PPOConfig(num_steps=16, num_minibatches=2, update_epochs=2, hidden_sizes=[16, 16], ent_coef=0.01)

    def trainer():
        return PPOTrainer(Dist(0, 1, 0, 1, torch.device("cpu"), None), hp, "CartPole-v1", 4, {}, 10**6, seed=5, restart=0)

    fast = trainer()
    with monkeypatch.context() as m:
        m.setattr(fused, "supports", lambda *args, **kwargs: False)
        reference = trainer()
    assert isinstance(fast.learner, fused.FusedPPOStep) and not isinstance(reference.learner, fused.FusedPPOStep)
    for _ in range(3):
        fast_report, reference_report = fast.update(False, False), reference.update(False, False)
        assert fast_report.local_steps == reference_report.local_steps  # same weights act alike
        for name in STAT_NAMES:
            assert fast_report.losses[name] == pytest.approx(reference_report.losses[name], rel=1e-3, abs=1e-6), name
    for (name, mine), theirs in zip(fast.agent.state_dict().items(), reference.agent.state_dict().values(), strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    saved, expected = fast.shared_state()["optimizer"], reference.shared_state()["optimizer"]
    for key, state in expected["state"].items():
        assert float(saved["state"][key]["step"]) == float(state["step"]) == 3 * 2 * 2
        np.testing.assert_allclose(saved["state"][key]["exp_avg"].numpy(), state["exp_avg"].numpy(), rtol=1e-3, atol=1e-7)


# --- DQN ---------------------------------------------------------------------------


def q_module_step(agent, target, optimizer, batch, hp):
    """DQNTrainer.gradient_step's maths without DDP."""
    from kuberl_trainer.dqn import dqn_loss, td_targets

    obs, actions, returns, discount, next_obs = batch
    with torch.no_grad():
        next_q_online = agent(next_obs) if hp.double_dqn else None
        targets = td_targets(returns, discount, target(next_obs), next_q_online)
    loss = dqn_loss(agent(obs), actions, targets, hp.loss)
    loss.backward()
    grads = [p.grad.clone() for p in agent.parameters()]
    nn.utils.clip_grad_norm_(agent.parameters(), hp.max_grad_norm, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), grads


def q_batch(rng, batch=32, obs_dim=OBS_DIM, actions=3):
    f32 = lambda a: torch.from_numpy(np.asarray(a, np.float32))
    discount = np.where(rng.random(batch) < 0.2, 0.0, 0.99**3)  # some terminated
    return (f32(rng.normal(size=(batch, obs_dim))), torch.from_numpy(rng.integers(0, actions, batch)),
            f32(rng.normal(scale=2.0, size=batch)), f32(discount), f32(rng.normal(size=(batch, obs_dim))))


@pytest.mark.parametrize(("double_dqn", "loss"), [(True, "huber"), (False, "huber"), (True, "mse")])
def test_fused_q_steps_equal_the_module_path(double_dqn, loss):
    from kuberl.core.spec import DQNConfig
    from kuberl_trainer.dqn import QNetwork, soft_update

    hp = DQNConfig(double_dqn=double_dqn, max_grad_norm=0.05, hidden_sizes=[32, 32], loss=loss)
    torch.manual_seed(0)
    reference, reference_target = QNetwork(OBS_DIM, 3, [32, 32]), QNetwork(OBS_DIM, 3, [32, 32])
    agent, target = copy.deepcopy(reference), copy.deepcopy(reference_target)
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2, fused=True)
    step = fused.FusedQStep(agent, target, hp, torch.optim.Adam(agent.parameters(), lr=1e-2))
    rng = np.random.default_rng(2)
    for i in range(8):
        if i % 3 == 2:  # the target follows at times, halfway
            soft_update(reference_target, reference, 0.5)
            step.update_target(0.5)
        batch = q_batch(rng)
        expected_loss, expected_grads = q_module_step(reference, reference_target, optimizer, batch, hp)
        loss = step.step(*batch)
        assert float(loss) == pytest.approx(float(expected_loss), rel=1e-4)
        scale = min(1.0, hp.max_grad_norm / (torch.linalg.vector_norm(torch.cat([g.flatten() for g in expected_grads])) + 1e-6))
        for param, grad in zip(agent.parameters(), expected_grads, strict=True):
            np.testing.assert_allclose(step._slot(step.grad, param).numpy(), grad.numpy() * float(scale), rtol=1e-4, atol=1e-6)
    for mine, theirs in zip([*agent.parameters(), *target.parameters()],
                            [*reference.parameters(), *reference_target.parameters()], strict=True):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-6)
    for mine, theirs in zip(agent.parameters(), reference.parameters(), strict=True):
        state, expected = step.optimizer.state[mine], optimizer.state[theirs]
        assert float(state["step"]) == float(expected["step"]) == 8
        np.testing.assert_allclose(state["exp_avg_sq"].numpy(), expected["exp_avg_sq"].numpy(), rtol=1e-4, atol=1e-10)


# vanilla: learn() takes a whole draw's TD targets at once
@pytest.mark.parametrize(("double_dqn", "loss"), [(True, "huber"), (False, "huber"), (False, "mse")])
def test_dqn_trainer_learns_through_the_fused_step_as_through_the_module_path(monkeypatch, double_dqn, loss):
    from kuberl.core.spec import DQNConfig
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.dqn import DQNTrainer

    hp = DQNConfig(learning_starts=64, batch_size=32, train_frequency=16, gradient_steps=4, target_update_interval=32,
                   hidden_sizes=[16, 16], tau=0.5, double_dqn=double_dqn, loss=loss)

    def trainer():
        return DQNTrainer(Dist(0, 1, 0, 1, torch.device("cpu"), None), hp, "CartPole-v1", 4, {}, 10**6, seed=3, restart=0)

    fast = trainer()
    with monkeypatch.context() as m:
        m.setattr(fused, "supports_q", lambda *args, **kwargs: False)
        reference = trainer()
    assert isinstance(fast.learner, learners.FusedQLearner) and isinstance(reference.learner, learners.AutogradQLearner)
    for _ in range(10):  # past learningStarts, with target updates
        fast_report, reference_report = fast.update(False, False), reference.update(False, False)
        for name in ("value_loss", "q_value"):  # the fused mean Q is error + target, the reference's Q itself
            assert fast_report.losses.get(name, 0) == pytest.approx(reference_report.losses.get(name, 0), rel=1e-3), name
    assert fast.last_target_update > 0
    for network in ("agent", "target"):
        for (name, mine), theirs in zip(getattr(fast, network).state_dict().items(),
                                        getattr(reference, network).state_dict().values(), strict=True):
            np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6, err_msg=f"{network}.{name}")
    saved, expected = fast.shared_state()["optimizer"], reference.shared_state()["optimizer"]
    for key, state in expected["state"].items():
        assert float(saved["state"][key]["step"]) == float(state["step"]) > 0
        np.testing.assert_allclose(saved["state"][key]["exp_avg"].numpy(), state["exp_avg"].numpy(), rtol=1e-3, atol=1e-7)


def test_fused_q_greedy_acts_as_the_network_does():
    from kuberl.core.spec import DQNConfig
    from kuberl_trainer.dqn import QNetwork

    torch.manual_seed(1)
    agent, target = QNetwork(OBS_DIM, 5, [16, 16]), QNetwork(OBS_DIM, 5, [16, 16])
    step = fused.FusedQStep(agent, target, DQNConfig(hidden_sizes=[16, 16]), torch.optim.Adam(agent.parameters()))
    obs = np.random.default_rng(0).normal(size=(256, OBS_DIM)).astype(np.float32)
    with torch.no_grad():
        expected = agent.greedy(torch.from_numpy(obs)).numpy()
    assert len(set(expected)) > 1
    np.testing.assert_array_equal(step.greedy(obs), expected)
    step.step(*q_batch(np.random.default_rng(1), actions=5))  # the views follow the optimiser's writes
    with torch.no_grad():
        np.testing.assert_array_equal(step.greedy(obs), agent.greedy(torch.from_numpy(obs)).numpy())


def test_numpy_tanh_in_place_matches_torch():
    """fused.tanh_ replaces torch's (10x slower here) tanh on the hidden
    activations: the same values to float32 rounding, in the same memory."""
    values = torch.cat([torch.linspace(-20, 20, 4001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 1e4])])
    hidden = values.clone().reshape(1, -1)
    assert fused.tanh_(hidden) is hidden
    np.testing.assert_allclose(hidden.flatten().numpy(), torch.tanh(values).numpy(), rtol=2e-7, atol=1e-7)
    assert float(hidden.flatten()[-1]) == 1.0 and float(hidden.flatten()[-2]) == -1.0


def test_flushed_subnormal_moments_move_no_weight():
    """fused.flush_subnormals: Adam's moments of parameters whose gradient turned 0
    (dead ReLU units) decay into subnormals and stay there; flushing them to zero
    leaves every weight the very same bits."""
    smallest_normal = torch.finfo(torch.float32).tiny
    rng = np.random.default_rng(0)
    gradients = [torch.from_numpy(rng.normal(size=64).astype(np.float32)) for _ in range(900)]
    for g in gradients[5:]:
        g[:32] = 0.0  # the first half dies after 5 steps

    def train(flush: bool) -> tuple[torch.Tensor, torch.Tensor]:
        weight = nn.Parameter(torch.from_numpy(rng.normal(size=64).astype(np.float32)))
        adam = fused.FlatAdam([("w", (64,))], fused.AdamState([weight], lr=2.3e-3), None, 1)
        adam.bind({weight: adam.view["w"]})
        try:
            if flush:
                fused.flush_subnormals()
            for g in gradients:
                adam.grad.copy_(g)
                adam.apply_gradient(10.0)
        finally:
            torch.set_flush_denormal(False)
        return adam.flat.clone(), adam.exp_avg.clone()

    state = rng.bit_generator.state
    plain, plain_moment = train(flush=False)
    rng.bit_generator.state = state
    flushed, flushed_moment = train(flush=True)
    dead = plain_moment[:32].abs()
    assert bool(((dead > 0) & (dead < smallest_normal)).all())  # stuck in the subnormals, unflushed
    assert bool((flushed_moment[:32] == 0).all())
    assert torch.equal(plain, flushed)


def test_flat_adam_is_torch_adams_fused_update_bit_for_bit():
    """FlatAdam.adam runs the kernel torch.optim.Adam(fused=True) runs: after many steps (the learning
    rate changed between them, as annealing does) the weights and moments are the same bits."""
    generator = torch.Generator().manual_seed(0)
    weight = nn.Parameter(torch.randn(67_586, generator=generator))
    reference = nn.Parameter(weight.detach().clone())
    mine = fused.FlatAdam([("w", tuple(weight.shape))], fused.AdamState([weight], lr=2.3e-3), None, 1)
    mine.bind({weight: mine.view["w"]})
    theirs = torch.optim.Adam([reference], lr=2.3e-3, fused=True)
    for step in range(50):
        gradient = torch.randn(weight.shape, generator=generator) * 10.0 ** (step % 5 - 2)
        for optimizer in (mine.optimizer, theirs):
            optimizer.param_groups[0]["lr"] = 2.3e-3 * (1 - step / 50)
        mine.grad.copy_(gradient)
        mine.adam()
        reference.grad = gradient.clone()
        theirs.step()
    state = theirs.state[reference]
    assert torch.equal(mine.flat, reference.detach())
    assert torch.equal(mine.exp_avg, state["exp_avg"]) and torch.equal(mine.exp_avg_sq, state["exp_avg_sq"])
    assert float(mine.optimizer.state[weight]["step"]) == float(state["step"]) == 50


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 6, 64])
def test_the_gradient_average_has_the_bits_of_ddps_division_for_every_world_size(world_size):
    """A power of two multiplies by its reciprocal (cheaper than a division); tiny, huge, subnormal,
    signed-zero, infinite and NaN gradients come out as div_ makes them."""
    from kuberl_trainer.fused import divide_in_place

    torch.manual_seed(world_size)
    magnitudes = 10.0 ** torch.randint(-45, 38, (200_000,)).double()
    values = (torch.randn(200_000).double() * magnitudes).float()
    values = torch.cat([values, torch.tensor([1e-45, -1e-45, 3e-45, 1.1754942e-38, 0.0, -0.0, float("inf"), float("nan")])])
    ours = divide_in_place(values.clone(), world_size)
    ddp = values.clone().div_(world_size)
    assert torch.equal(ours.view(torch.int32), ddp.view(torch.int32))
