"""Recurrent PPO (spec.ppo.lstm) in one process: the rollout's resets fall where episodes start and
replaying each env's sequence from its first state gives back the log-probs and values it acted with;
micro-batches of whole sequences sum to the minibatch's gradient; the reference learner and a torch
actor that carries state are chosen whatever `fast` says; the state goes through deterministic
mode's rank state, and into evaluation, the final model and load_policy fresh per episode."""

import numpy as np
import pytest
import torch
from kuberl.core.spec import LSTMConfig, PPOConfig
from kuberl_trainer import learners, policy, recurrent
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer, RecurrentAgent

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
MASKED = "kuberl_trainer.masked:CartPoleNoVelocity"
pytestmark = pytest.mark.usefixtures("one_thread")


def small_trainer(total=2048, fast=True, env_id=MASKED, **hp):
    config = PPOConfig(**{"num_steps": 64, "num_minibatches": 2, "update_epochs": 1, "hidden_sizes": [16],
                          "lstm": LSTMConfig(hidden_size=8), **hp})
    return PPOTrainer(ONE_PROCESS, config, env_id, 4, {}, total, seed=3, restart=0, fast=fast)


def replayed(trainer: PPOTrainer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rollout's (log-probs, values, its recorded log-probs) replayed as learning reads it: all envs, env-major."""
    buf, steps, n = trainer.buf, trainer.hp.num_steps, trainer.envs.num_envs
    rows = recurrent.sequence_rows(np.arange(n), steps, n)
    flat = lambda a: torch.from_numpy(a.reshape(steps * n, *a.shape[2:])[rows])
    with torch.no_grad():
        log_prob, _, value = trainer.agent(flat(buf.obs), flat(buf.actions), *buf.initial_state, flat(buf.starts))
    return log_prob, value, flat(buf.log_probs)


def test_the_rollouts_resets_are_where_episodes_start_and_replaying_it_gives_back_what_it_acted_with():
    trainer = small_trainer()
    trainer.collect()  # 64 steps of 4 envs: the random policy's episodes end within them
    first = trainer.buf.starts[0].copy()
    trainer.collect()  # the second rollout starts from the states the first left
    buf = trainer.buf
    assert not buf.valid.all(), "no episode ended: the case tests nothing"
    assert buf.starts.tolist() == recurrent.episode_starts(buf.valid, buf.starts[0]).tolist()
    assert buf.starts[1:].sum() == (1 - buf.valid[:-1]).sum() > 0
    assert first.tolist() == [0, 0, 0, 0]  # the first rollout: every state fresh anyway
    assert torch.count_nonzero(buf.initial_state[0]) > 0  # carried over, not zeros
    log_prob, value, recorded = replayed(trainer)
    values = torch.from_numpy(buf.values.reshape(-1)[recurrent.sequence_rows(np.arange(4), 64, 4)])
    assert torch.allclose(log_prob, recorded, atol=1e-5) and torch.allclose(value, values, atol=1e-5)


def test_replayed_without_its_resets_the_sequence_differs_where_an_episode_started():
    trainer = small_trainer()
    trainer.collect()
    trainer.collect()
    buf = trainer.buf
    _, value, _ = replayed(trainer)
    buf.starts[:] = 0  # as if states ran on across episodes
    _, leaked, _ = replayed(trainer)  # the values: the initial actor's log-probs are all near log(1/2)
    rows = recurrent.sequence_rows(np.arange(4), 64, 4)
    recorded = torch.from_numpy(buf.values.reshape(-1)[rows])
    assert torch.allclose(value, recorded, atol=1e-5) and not torch.allclose(leaked, recorded, atol=1e-4)


def test_the_bootstrap_value_reads_each_envs_state_after_the_rollout():
    trainer = small_trainer()
    trainer.collect()
    state = trainer.behaviour.current_state(4)
    obs = torch.as_tensor(trainer.next_obs)
    with torch.no_grad():
        expected = trainer.agent.value(obs, state).numpy()
        fresh = trainer.agent.value(obs, trainer.agent.lstm.zero_state(4, torch.device("cpu"))).numpy()
    assert np.allclose(trainer.next_value, expected, atol=1e-6) and not np.allclose(trainer.next_value, fresh, atol=1e-4)


@pytest.mark.parametrize("fast", [True, False])
def test_a_recurrent_agent_learns_and_acts_in_torch_whatever_fast_says(fast):
    trainer = small_trainer(fast=fast)
    assert isinstance(trainer.agent, RecurrentAgent)
    assert type(trainer.learner) is learners.AutogradPPOLearner
    assert type(trainer.actor) is learners.RecurrentTorchPolicy
    before = {k: v.clone() for k, v in trainer.agent.state_dict().items()}
    report = trainer.update(False, False)
    assert set(report.losses) == {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
    assert all(np.isfinite(v) for v in report.losses.values())
    moved = [k for k, v in trainer.agent.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("lstm.") for k in moved) and any(k.startswith("actor.") for k in moved)


def one_step_weights(grad_accumulation: int) -> dict[str, torch.Tensor]:
    trainer = small_trainer(num_minibatches=1, grad_accumulation=grad_accumulation, norm_advantage=False)
    trainer.collect()
    advantages, returns = trainer.advantages(False)
    trainer.learn(advantages, returns)
    return trainer.agent.state_dict()


def test_a_recurrent_policy_learns_in_bf16_on_the_cpu():
    """spec.ppo.precision bf16 with spec.ppo.lstm ended the first update here (oneDNN's LSTM under bf16 autocast)."""
    trainer = small_trainer(num_steps=16, precision="bf16")
    trainer.collect()
    losses, epochs = trainer.learn(*trainer.advantages(False))
    assert epochs == 1 and all(np.isfinite(value) for value in losses.values())
    trainer.envs.close()


def test_micro_batches_of_whole_sequences_sum_to_the_minibatchs_gradient():
    one, three = one_step_weights(1), one_step_weights(3)  # 4 envs in 3 micro-batches: 1, 2 and 1 sequences
    assert all(torch.allclose(one[k], three[k], atol=1e-5) for k in one)


def test_deterministic_modes_rank_state_carries_each_envs_lstm_state_and_pending_resets():
    trainer = small_trainer(env_id="CartPole-v1")  # gymnasium's native vector CartPole: its state is plain data
    trainer.collect()
    saved = trainer.rank_state()
    h, c = (torch.from_numpy(a) for a in saved["lstm_state"])
    assert torch.equal(h, trainer.behaviour.state[0]) and torch.equal(c, trainer.behaviour.state[1])
    assert saved["next_starts"].tolist() == (1 - trainer.buf.valid[-1]).tolist()
    resumed = small_trainer(env_id="CartPole-v1")
    resumed.load_rank(saved)
    assert torch.equal(resumed.behaviour.current_state(4)[0], h)
    resumed.load_shared(trainer.shared_state())
    resumed.collect()
    torch.set_rng_state(saved["torch_rng"])  # one process: both sample from torch's one default generator
    trainer.collect()
    assert np.array_equal(resumed.buf.log_probs, trainer.buf.log_probs)
    assert np.array_equal(resumed.buf.values, trainer.buf.values)


def test_a_resume_without_rank_state_starts_every_env_from_a_fresh_state():
    trainer = small_trainer()
    trainer.collect()
    assert trainer.rank_state() is None  # a wrapped env's state is no plain data: resumed from the shared state only
    resumed = small_trainer()
    resumed.load_shared(trainer.shared_state())
    assert torch.count_nonzero(resumed.behaviour.current_state(4)[0]) == 0


def test_evaluation_and_the_final_model_play_alike_each_episode_from_a_fresh_state(tmp_path):
    trainer = small_trainer()
    trainer.update(False, False)
    model = trainer.final_model()
    assert model["lstm_hidden_size"] == 8
    scored = trainer.evaluate(MASKED, 4, {}, seed=5)
    again = trainer.evaluate(MASKED, 4, {}, seed=5)  # a fresh state each evaluation: the same score
    assert scored == again
    path = tmp_path / "final-model.pt"
    torch.save({"format": policy.FORMAT, "algorithm": "ppo", "env_id": MASKED, "env_kwargs": {}, **model}, path)
    played = policy.load_policy(str(path), sample=False, env_modules=["kuberl_trainer.masked"])  # no draws to advance
    assert isinstance(played.network, RecurrentAgent)
    first = policy.evaluate(played, 4, seed=5)
    assert policy.evaluate(played, 4, seed=5).tolist() == first.tolist()  # state reset per evaluation


def test_load_policy_carries_the_state_between_calls_and_resets_it_where_told(tmp_path):
    trainer = small_trainer()
    path = tmp_path / "final-model.pt"
    torch.save({"format": policy.FORMAT, "algorithm": "ppo", "env_id": MASKED, "env_kwargs": {}, **trainer.final_model()}, path)
    played = policy.load_policy(str(path), sample=False, env_modules=["kuberl_trainer.masked"])
    obs = np.array([0.01, -0.02], np.float32)
    played(obs)
    assert torch.count_nonzero(played.state[0]) > 0
    played.reset()
    assert played.state is None
    with pytest.raises(policy.UnusableModel, match="--export: a recurrent policy"):
        policy.export_torchscript(played, str(tmp_path / "policy.pt"))


def test_kuberl_eval_export_refuses_a_recurrent_model_before_playing_it(tmp_path, capsys):
    from kuberl.cli import main

    path = tmp_path / "final-model.pt"
    torch.save({"format": policy.FORMAT, "algorithm": "ppo", "env_id": MASKED, "env_kwargs": {}, **small_trainer().final_model()}, path)
    exported = tmp_path / "policy.ts"
    assert main(["eval", str(path), "--export", str(exported), "--allow-env-module", "kuberl_trainer.masked"]) == 1
    out, err = capsys.readouterr()
    assert "--export: a recurrent policy (spec.ppo.lstm)" in err and "mean return" not in out and not exported.exists()


def test_a_gaussian_policy_carries_its_state_through_learning_and_its_evaluations_mean_actions():
    trainer = small_trainer(env_id="Pendulum-v1", num_steps=16)
    report = trainer.update(False, False)
    assert all(np.isfinite(v) for v in report.losses.values())
    evaluated = trainer.actor.reseeded(0)
    obs = np.zeros((2, 3), np.float32)
    first, second = evaluated.greedy(obs), evaluated.greedy(obs)
    assert first.shape == (2, 1) and not np.allclose(first, second, atol=1e-7)  # the same observation, a state moved on
    assert np.isfinite(trainer.evaluate("Pendulum-v1", 2, {}, seed=1))
