"""A trained model used outside training: `kuberl_trainer.policy.load_policy`, `kuberl eval`, TorchScript export."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from kuberl.cli import main
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import __main__ as entry
from kuberl_trainer import policy as policies
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.session import BareSession

from tests.support.jobs import make_job

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
EXAMPLE_JOB = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "cartpole-ppo.yaml"


def save_final_model(trainer, algorithm: str, env_id: str, path) -> str:
    """What TrainingSession.write_final_model writes (its keys come from there, checked below)."""
    model = {**trainer.final_model(), "format": 1, "algorithm": algorithm, "env_id": env_id, "env_kwargs": {},
             "timesteps": trainer.counters.global_step, "eval_return": None}
    torch.save(model, str(path))
    return str(path)


def test_the_session_writes_the_keys_the_loader_documents():
    import inspect

    from kuberl_trainer.session import TrainingSession

    source = inspect.getsource(TrainingSession.write_model)  # final-model.pt and best-model.pt alike
    for key in ("format", "algorithm", "env_id", "env_kwargs", "timesteps", "eval_return"):
        assert f'"{key}"' in source, key


def test_a_dqn_model_plays_exactly_as_the_trainers_evaluation(tmp_path):
    trainer = DQNTrainer(ONE_PROCESS, DQNConfig(hidden_sizes=[16], learning_starts=0, train_frequency=1),
                         "CartPole-v1", 4, {}, 400, seed=3, restart=0)
    trainer.train(BareSession(max_updates=50))
    path = save_final_model(trainer, "dqn", "CartPole-v1", tmp_path / "final-model.pt")
    policy = policies.load_policy(path)
    assert policies.evaluate(policy, 4, seed=11).mean() == trainer.evaluate("CartPole-v1", 4, {}, 11)


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_a_continuous_off_policy_model_plays_exactly_as_the_trainers_evaluation(algorithm, tmp_path):
    """build_network rebuilds SAC's and TD3's actors from the final model; both act with their noiseless action."""
    hp = make_job().minimal().algorithm(algorithm, learningStarts=16, batchSize=8, bufferSize=256,
                                        hiddenSizes=[16]).spec().hyperparameters
    trainer = entry.ALGORITHMS[algorithm].make(ONE_PROCESS, hp, "Pendulum-v1", 2, {}, 400, 3, 0)
    trainer.train(BareSession(max_updates=12))
    path = save_final_model(trainer, algorithm, "Pendulum-v1", tmp_path / "final-model.pt")
    policy = policies.load_policy(path)
    assert type(policy.network) is type(trainer.agent)
    assert policies.evaluate(policy, 2, seed=11).mean() == pytest.approx(trainer.evaluate("Pendulum-v1", 2, {}, 11), rel=1e-5)


def test_a_ppo_model_applies_its_observation_normaliser_and_acts_as_the_trainer(tmp_path):
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True),
                         "Pendulum-v1", 2, {}, 64, seed=1, restart=0)
    trainer.train(BareSession(max_updates=2))
    assert trainer.obs_norm.count > 0
    path = save_final_model(trainer, "ppo", "Pendulum-v1", tmp_path / "final-model.pt")
    policy = policies.load_policy(path)
    obs = np.stack([policy.observation_space.sample() for _ in range(5)])
    expected = trainer.agent.greedy(torch.as_tensor(trainer.obs_norm.normalize(obs), dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(policy(obs), np.clip(expected, -2, 2), rtol=1e-5, atol=1e-6)
    assert policy(obs[0]).shape == (1,)  # one observation in, one action out
    assert policies.evaluate(policy, 3, seed=5).mean() == pytest.approx(trainer.evaluate("Pendulum-v1", 3, {}, 5), rel=1e-4)


def test_the_torchscript_export_acts_like_the_policy(tmp_path):
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True),
                         "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    trainer.train(BareSession(max_updates=2))
    policy = policies.load_policy(save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "m.pt"), sample=False)
    policies.export_torchscript(policy, str(tmp_path / "policy.ts"))
    exported = torch.jit.load(str(tmp_path / "policy.ts"))
    obs = np.random.default_rng(0).normal(0, 1, (64, 4)).astype(np.float32)
    np.testing.assert_array_equal(exported(torch.as_tensor(obs)).numpy(), policy(obs))


def test_a_continuous_torchscript_exports_actions_without_gradients_and_leaves_the_policy_alone(tmp_path):
    """Pendulum's exported actions required grad: `exported(obs).numpy()`, the first thing one writes, raised."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "Pendulum-v1", 2, {}, 64, seed=1, restart=0)
    trainer.train(BareSession(max_updates=1))
    policy = policies.load_policy(save_final_model(trainer, "ppo", "Pendulum-v1", tmp_path / "m.pt"), sample=False)
    before = [p.requires_grad for p in policy.network.parameters()]
    policies.export_torchscript(policy, str(tmp_path / "policy.ts"))
    obs = np.random.default_rng(0).normal(0, 1, (8, 3)).astype(np.float32)
    actions = torch.jit.load(str(tmp_path / "policy.ts"))(torch.as_tensor(obs))
    assert not actions.requires_grad
    np.testing.assert_allclose(actions.numpy(), policy.network.greedy(torch.as_tensor(obs)).detach().numpy(), rtol=1e-6)
    assert [p.requires_grad for p in policy.network.parameters()] == before


def test_what_is_not_a_model_is_refused_without_running_it(tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    torch.save({"algorithm": Boom()}, str(tmp_path / "pickle.pt"))
    with pytest.raises(policies.UnusableModel):
        policies.read_model(str(tmp_path / "pickle.pt"))
    assert not (tmp_path / "ran").exists()
    buffer = io.BytesIO()
    torch.save({"algorithm": "ppo"}, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(tmp_path / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            out.writestr(item.filename, src.read(item))
    with pytest.raises(policies.UnusableModel, match="compressed"):
        policies.read_model(str(tmp_path / "deflated.pt"))
    torch.save({"algorithm": "ppo"}, str(tmp_path / "partial.pt"))
    with pytest.raises(policies.UnusableModel, match="missing env_id, agent, hidden_sizes"):
        policies.read_model(str(tmp_path / "partial.pt"))
    with pytest.raises(policies.UnusableModel, match="no final-model.pt and no checkpoint"):
        policies.find_model(str(tmp_path))


def test_kuberl_eval_prints_mean_and_std_and_writes_a_gif_and_an_export(tmp_path, capsys):
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    gif, ts = tmp_path / "episode.gif", tmp_path / "policy.ts"
    assert main(["eval", path, "--episodes", "3", "--video", str(gif), "--export", str(ts)]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1: mean return" in out and "± " in out and "over 3 episode(s)" in out
    assert f"; model {path})" in out  # outside the working directory: its absolute path, not ../../tmp/...
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames > 5 and image.size == (600, 400)
    assert torch.jit.load(str(ts))(torch.zeros(2, 4)).shape == (2,)
    assert main(["eval", str(tmp_path / "missing.pt")]) == 1
    assert "no such file" in capsys.readouterr().err


def endless_pendulum(tmp_path) -> str:
    """A model of Pendulum-v1, which never ends by itself, with spec.env.kwargs max_episode_steps 10**9: played to
    its end, `kuberl eval` ran on for days whatever the policy."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "Pendulum-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "Pendulum-v1", tmp_path / "final-model.pt")
    model = torch.load(path, weights_only=True)
    torch.save({**model, "env_kwargs": {"max_episode_steps": 10**9}}, path)
    return path


def test_kuberl_eval_cuts_an_episode_at_max_steps_and_says_so(tmp_path, capsys):
    path = endless_pendulum(tmp_path)
    assert main(["eval", path, "--episodes", "2", "--max-steps", "50"]) == 0
    out, err = capsys.readouterr()
    assert "Pendulum-v1: mean return" in out and "over 2 episode(s)" in out
    assert err == ("kuberl eval: warning: 2 of 2 episode(s) had not ended after --max-steps 50 steps: their returns count"
                   " those steps only (the env lets an episode run longer: max_episode_steps in its kwargs or registration);"
                   " raise --max-steps to play them further\n")
    returns, cut = policies.play(policies.load_policy(path), 2, seed=0, max_steps=50)
    assert cut.all() and (returns < 0).all()  # Pendulum's reward is a cost of each of the 50 steps
    with pytest.raises(SystemExit):
        main(["eval", path, "--max-steps", "0"])
    assert "--max-steps: expected a positive int (got '0')" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a million envs, all made before the first step
        main(["eval", path, "--episodes", "1000000"])
    assert "--episodes: expected at most 10000, spec.success.evalEpisodes' bound" in capsys.readouterr().err


def test_kuberl_eval_bounds_every_episode_by_default(tmp_path, capsys, monkeypatch):
    """Without --max-steps an episode is cut at the CLI's default, which is the trainer's (the CLI imports no torch)."""
    from kuberl import cli

    assert cli.EVAL_MAX_STEPS == policies.MAX_EVAL_STEPS
    monkeypatch.setattr(cli, "EVAL_MAX_STEPS", 30)
    assert main(["eval", endless_pendulum(tmp_path), "--episodes", "1"]) == 0
    assert "1 of 1 episode(s) had not ended after --max-steps 30 steps" in capsys.readouterr().err
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    assert main(["eval", save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "cartpole.pt"), "--episodes", "2"]) == 0
    assert capsys.readouterr().err == ""  # episodes that end are not cut, and nothing is said


def test_kuberl_eval_says_its_episodes_as_they_end_on_stderr(tmp_path, capsys, monkeypatch):
    """`kuberl eval` printed nothing until its result (an Atari model's 10 episodes: minutes): a line as episodes end,
    at most one each PROGRESS_EVERY_SECONDS (here every step that ends one), the result alone on stdout."""
    monkeypatch.setattr(policies, "PROGRESS_EVERY_SECONDS", 0.0)
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    assert main(["eval", path, "--episodes", "8"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines and all(re.fullmatch(r"episodes [1-7]/8  mean return -?[0-9.]+  [0-9]+s", line) for line in lines), err
    assert [int(line.split()[1].split("/")[0]) for line in lines] == sorted({int(line.split()[1].split("/")[0]) for line in lines})
    assert "episodes" not in out and "over 8 episode(s)" in out


def test_eval_progress_says_more_ended_episodes_at_most_once_a_period_and_not_the_last():
    now, said = [0.0], []
    progress = policies.EpisodeProgress(4, said.append, clock=lambda: now[0])
    returns = np.array([10.0, 20.0, 30.0, 40.0])
    now[0] = 2.0
    progress(returns, np.array([False, True, True, True]))  # within the first period: not yet
    now[0] = 6.0
    progress(returns, np.array([False, False, True, True]))
    progress(returns, np.array([False, False, False, True]))  # the same period
    now[0] = 20.0
    progress(returns, np.array([False, False, False, False]))  # all ended: the result line says it
    assert said == ["episodes 2/4  mean return 15.0  6s"]


def test_kuberl_eval_says_when_its_video_cut_the_episode(tmp_path):
    total, frames, ended = policies.record(policies.load_policy(endless_pendulum(tmp_path)), str(tmp_path / "p.gif"), max_frames=5)
    assert (frames, ended) == (5, False) and total < 0


def test_kuberl_eval_video_says_nothing_of_a_display_it_does_not_need(tmp_path):
    """On a machine without a desktop session (ssh, a container) `--video` printed SDL's
    "error: XDG_RUNTIME_DIR is invalid or not set in the environment." after a successful run."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    headless = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "eval", path, "--episodes", "1", "--video", str(tmp_path / "e.gif")],
                          env=headless, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "e.gif").exists()


def test_kuberl_eval_refuses_a_video_or_export_it_could_not_write_before_playing_any_episode(tmp_path, capsys):
    """`--video missing/x.gif` and `--export DIR` ended in tracebacks after every episode was played; `--video x.mp4`
    was refused only after them."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    missing = tmp_path / "missing"
    for flag, target, why in (("--video", f"{missing}/x.gif", f"no directory {missing}"),
                              ("--video", str(tmp_path / "x.mp4"), "only .gif is written"),
                              ("--export", str(tmp_path), "is a directory; name a file"),
                              ("--export", f"{missing}/p.ts", f"no directory {missing}")):
        assert main(["eval", path, flag, target]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err == f"kuberl eval: {flag} {target}: {why}\n", (out, err)


def test_kuberl_eval_of_the_job_file_points_at_its_run_directory(tmp_path, capsys):
    """`kuberl eval job.yaml` answered "payload is not a torch.save zip: File is not a zip file"."""
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: kuberl.dev/v1alpha1\nkind: RLTrainingJob\nmetadata: {name: cartpole-ppo}\nspec: {}\n")
    assert main(["eval", str(job)]) == 1
    assert capsys.readouterr().err == (f"kuberl eval: {job}: a job file, not a model: give the run directory kuberl run"
                                       " trained it in, runs/cartpole-ppo\n")
    (tmp_path / "odd.yaml").write_text("- a list\n")
    assert main(["eval", str(tmp_path / "odd.yaml")]) == 1
    assert capsys.readouterr().err.endswith("trained it in, runs/<job>\n")


def test_kuberl_eval_of_a_directory_of_one_run_plays_that_run(tmp_path, capsys):
    """`kuberl eval runs` answered "holds runs, not one run": now it plays its runs, here the one, which saved nothing."""
    (tmp_path / "runs" / "cartpole-ppo").mkdir(parents=True)
    (tmp_path / "runs" / "cartpole-ppo" / "job.yaml").write_text("{}\n")
    assert main(["eval", str(tmp_path / "runs")]) == 1
    assert capsys.readouterr().err.startswith(f"kuberl eval: {tmp_path}/runs/cartpole-ppo: this run saved no final-model.pt")


def a_run_with_a_model(runs, name: str, seed: int, env_id: str = "CartPole-v1", learning_rate: float = 0.0003) -> str:
    """runs/<name> as kuberl run leaves one: job.yaml, fingerprint.json (the learned values that set it apart: seed
    and learning rate), checkpoints/<uid>/final-model.pt (an untrained tiny PPO)."""
    torch.manual_seed(seed)  # the networks' initial weights: another policy per seed
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), env_id, 2, {}, 64, seed=seed, restart=0)
    (runs / name / "checkpoints" / "uid").mkdir(parents=True)
    job = EXAMPLE_JOB.read_text().replace("id: CartPole-v1", f"id: {env_id}")
    (runs / name / "job.yaml").write_text(job)  # the job the model is checked against
    save_final_model(trainer, "ppo", env_id, runs / name / "checkpoints" / "uid" / "final-model.pt")
    learned = {"algorithm": "ppo", "seed": seed, "env": {"id": env_id}, "ppo": {"learningRate": learning_rate}}
    (runs / name / "fingerprint.json").write_text(json.dumps({"fingerprint": name, "learned": learned}))
    return str(runs / name)


def test_kuberl_eval_of_several_runs_scores_each_on_the_same_episodes_and_names_the_best(tmp_path, capsys):
    """Which of a job's runs (seeds, a learning rate tried) learned best meant one kuberl eval each, read side by side."""
    runs = tmp_path / "runs"
    first = a_run_with_a_model(runs, "cartpole-ppo", 1)
    second = a_run_with_a_model(runs, "cartpole-ppo.0badc0de", 2, learning_rate=0.001)
    (runs / "broken").mkdir()
    (runs / "broken" / "job.yaml").write_text("{}\n")  # a run that saved nothing: said, the others still scored
    assert main(["eval", str(runs), "--episodes", "3"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    # each named with the learned values that set it apart from the job's other run
    named = {first: f"{first} (ppo.learningRate 0.0003, seed 1)", second: f"{second} (ppo.learningRate 0.001, seed 2)"}
    assert [line.split("  ")[0] for line in lines[:2]] == list(named.values()) and all("CartPole-v1: mean return" in line for line in lines[:2])
    means = {run: float(line.split("mean return ")[1].split()[0]) for run, line in zip(named, lines[:2], strict=True)}
    best = max(means, key=means.get)
    assert lines[2] == f"best: {named[best]} (mean return {means[best]:.1f} over 3 episode(s), --seed 0)", out
    assert err.startswith(f"kuberl eval: {runs}/broken: this run saved no final-model.pt"), err
    for single in (first, second):  # each scored as kuberl eval of it alone scores it: the same episodes
        assert main(["eval", single, "--episodes", "3"]) == 0
        assert f"mean return {means[single]:.1f} ±" in capsys.readouterr().out
    assert main(["eval", first, second, "--video", str(tmp_path / "x.gif")]) == 1
    assert capsys.readouterr().err == "kuberl eval: --video is of one model: give one run (got 2)\n"


def test_kuberl_eval_of_runs_on_several_envs_names_the_best_of_each_env_not_across_envs(tmp_path, capsys):
    """After the README's quickstart (CartPole PPO and DQN, Pendulum SAC) `kuberl eval runs` named a CartPole run the
    best of all three: CartPole's 500 against Pendulum's -150 compares nothing."""
    runs = tmp_path / "runs"
    a_run_with_a_model(runs, "acrobot", 1, env_id="Acrobot-v1")
    first, second = a_run_with_a_model(runs, "cartpole-a", 1), a_run_with_a_model(runs, "cartpole-b", 2)
    assert main(["eval", str(runs), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4, lines
    means = {line.split()[0]: float(line.split("mean return ")[1].split()[0]) for line in lines[:3]}
    best = max((first, second), key=means.get)  # runs of two jobs: told apart by their names, no values added
    assert lines[3] == f"best on CartPole-v1: {best} (mean return {means[best]:.1f} over 2 episode(s), --seed 0)", lines
    shutil.rmtree(second)  # one run per env: nothing to compare, no best named
    assert main(["eval", str(runs), "--episodes", "2"]) == 0
    assert not any(line.startswith("best") for line in capsys.readouterr().out.splitlines())


def test_a_configurations_seeds_and_their_returns_are_named_in_seed_order_whatever_order_their_runs_sort_in(tmp_path, capsys):
    """docs/local-runs.md's loop, seeds 1, 2, 3, makes runs/<job>.<fingerprint> whose hashes sorted them 1, 3, 2:
    `kuberl eval runs` said `seeds 1, 3, 2` with each one's mean in that order, where the docs show 1, 2, 3; its
    lines of each seed's run still came 1, 3, 2 above a mean naming 1, 2, 3."""
    runs = tmp_path / "runs"
    for name, seed in (("aaaa0001", 1), ("bbbb0003", 3), ("cccc0002", 2)):
        a_run_with_a_model(runs, f"cartpole-ppo.{name}", seed)
    assert main(["eval", str(runs), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    seeds = [int(line.split("seed ")[1].split(")")[0]) for line in lines[:3]]
    assert seeds == [1, 2, 3], lines  # a line each, in the order the mean names them
    means = {int(line.split("seed ")[1].split(")")[0]): line.split("mean return ")[1].split()[0] for line in lines[:3]}
    assert lines[3].startswith("cartpole-ppo (seeds 1, 2, 3): mean over 3 seeds "), lines
    assert lines[3].endswith(f" ({means[1]}, {means[2]}, {means[3]})"), lines  # each seed's mean, in the same order


def test_kuberl_eval_of_seeds_names_the_best_configuration_by_its_seeds_mean_not_by_one_lucky_seed(tmp_path, capsys):
    """Three seeds at one learning rate and two at another (docs/local-runs.md's loop): `kuberl eval runs` named the
    best single run, which in RL is mostly the luckiest seed (stop 47's five CartPole runs: 419.6 at one seed, 134.0
    at another of the same rate). A configuration's seeds get one line, their mean, and the best is a configuration."""
    runs = tmp_path / "runs"
    fast = [a_run_with_a_model(runs, f"cartpole-ppo.{name}", seed, learning_rate=0.001)
            for name, seed in (("aaaa0001", 1), ("aaaa0002", 2), ("aaaa0003", 3))]
    slow = [a_run_with_a_model(runs, f"cartpole-ppo.{name}", seed) for name, seed in (("bbbb0004", 4), ("bbbb0005", 5))]
    assert main(["eval", str(runs), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 + 2 + 1, lines  # five runs, two configurations, the best
    means = [float(line.split("mean return ")[1].split()[0]) for line in lines[:5]]
    assert [line.split("  ")[0] for line in lines[:5]] == [  # sorted by directory: the 0.001 seeds first
        f"{run} (ppo.learningRate {rate}, seed {seed})" for run, rate, seed in zip(fast + slow, ["0.001"] * 3 + ["0.0003"] * 2, (1, 2, 3, 4, 5), strict=True)]
    fast_mean, slow_mean = sum(means[:3]) / 3, sum(means[3:]) / 2
    assert lines[5] == (f"cartpole-ppo (ppo.learningRate 0.001; seeds 1, 2, 3): mean over 3 seeds {fast_mean:.1f}"
                        f" ({', '.join(f'{m:.1f}' for m in means[:3])})"), lines
    assert lines[6] == (f"cartpole-ppo (ppo.learningRate 0.0003; seeds 4, 5): mean over 2 seeds {slow_mean:.1f}"
                        f" ({', '.join(f'{m:.1f}' for m in means[3:])})"), lines
    best, mean = max((("cartpole-ppo (ppo.learningRate 0.001; seeds 1, 2, 3)", fast_mean),
                      ("cartpole-ppo (ppo.learningRate 0.0003; seeds 4, 5)", slow_mean)), key=lambda c: c[1])
    played = "3 seeds × 2 episode(s)" if best.endswith("3)") else "2 seeds × 2 episode(s)"
    assert lines[7] == f"best: {best} (mean return {mean:.1f} over {played}, --seed 0)", lines
    shutil.rmtree(slow[0])  # one seed of a configuration: its run, named as such
    assert main(["eval", str(runs), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 + 1 + 1 and lines[4].startswith("cartpole-ppo (ppo.learningRate 0.001; seeds 1, 2, 3): mean over 3 seeds"), lines
    assert lines[5].startswith("best: ") and lines[5].split(" (mean return")[0] in (
        "best: cartpole-ppo (ppo.learningRate 0.001; seeds 1, 2, 3)", f"best: {slow[1]} (ppo.learningRate 0.0003, seed 5)"), lines


def test_kuberl_eval_says_a_custom_trainers_run_has_no_model_and_leaves_it_out_of_several(tmp_path, capsys):
    """`kuberl eval runs` after the examples: bring-your-own-trainer's run was "stopped before its first checkpoint"
    and made the whole command exit 1, though kuberl never keeps a model of a trainer: custom run."""
    runs = tmp_path / "runs"
    custom = runs / "custom-trainer"
    (custom / "checkpoints").mkdir(parents=True)
    (custom / "job.yaml").write_text((EXAMPLE_JOB.parent / "bring-your-own-trainer.yaml").read_text())
    (custom / "status.json").write_text(json.dumps({"phase": "Suspended"}))
    assert main(["eval", str(custom)]) == 1
    assert capsys.readouterr().err == (f"kuberl eval: {custom}: a trainer: custom run: its own script saves what it"
                                       " learns, kuberl keeps no model of it to play\n")
    first = a_run_with_a_model(runs, "cartpole-ppo", 1)
    assert main(["eval", str(runs), "--episodes", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.split()[:3] == [first, "CartPole-v1:", "mean"] and err.endswith("to play (left out)\n"), (out, err)


def test_kuberl_eval_of_a_run_that_saved_nothing_says_how_it_ended(tmp_path, capsys):
    """A run that failed at once (a misspelt env id) was answered "give a run directory of kuberl run": it was one."""
    run = tmp_path / "runs" / "j"
    (run / "checkpoints" / "j-uid").mkdir(parents=True)
    (run / "job.yaml").write_text("{}\n")
    (run / "status.json").write_text(json.dumps({"phase": "Failed", "conditions": [
        {"type": "Failed", "status": "True", "reason": "ConfigError", "message": "spec.env.id: 'Cartpole-v1' is not registered"}]}))
    assert main(["eval", str(run)]) == 1
    assert capsys.readouterr().err == (f"kuberl eval: {run}: this run saved no final-model.pt and no checkpoint (it failed:"
                                       f" ConfigError: spec.env.id: 'Cartpole-v1' is not registered); logs in {run}/logs\n")
    (run / "status.json").write_text(json.dumps({"phase": "Suspended"}))
    assert main(["eval", str(run)]) == 1
    assert "(it was stopped before its first checkpoint)" in capsys.readouterr().err


CARTPOLE_CLASS = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"


def test_a_model_naming_a_module_env_imports_nothing_unless_told_which_module(tmp_path, capsys):
    """env_id "module:Class" imports the module and calls the class with env_kwargs: a final-model.pt saying
    subprocess:Popen with args ran that command under `kuberl eval` (weights_only kept the pickle out, not this)."""
    ran = tmp_path / "ran"
    torch.save({"format": 1, "algorithm": "ppo", "env_id": "subprocess:Popen", "env_kwargs": {"args": ["touch", str(ran)]},
                "agent": {}, "hidden_sizes": [64]}, str(tmp_path / "final-model.pt"))
    assert main(["eval", str(tmp_path / "final-model.pt"), "--episodes", "1"]) == 1
    assert not ran.exists()
    assert "--allow-env-module subprocess" in capsys.readouterr().err
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", CARTPOLE_CLASS, tmp_path / "class.pt")
    assert main(["eval", path, "--episodes", "1"]) == 1
    assert "--allow-env-module gymnasium.envs.classic_control.cartpole" in capsys.readouterr().err
    assert main(["eval", path, "--episodes", "1", "--allow-env-module", "gymnasium"]) == 0  # a package covers its modules
    assert f"{CARTPOLE_CLASS}: mean return" in capsys.readouterr().out


@pytest.mark.parametrize(("field", "value", "words"), [
    ("env_id", 5, "env_id 5 is no spec.env.id"),
    ("env_id", "CartPole-v1\x1b[2J", "is no spec.env.id"),
    ("env_kwargs", [1], "env_kwargs"),
    ("hidden_sizes", "64", "hidden_sizes"),
    ("hidden_sizes", [64.5], "hidden_sizes"),
    ("algorithm", "a2c", "algorithm 'a2c'"),
    ("agent", torch.zeros(2), "agent is no state_dict"),
    ("obs_norm", {"mean": 1}, "obs_norm"),
    ("format", "1", "format '1'"),
    ("format", list(range(200_000)), "format [0, 1, 2"),  # its whole repr, 1.3 MB, was the one line
])
def test_a_model_whose_values_are_not_what_the_trainer_writes_is_refused_in_one_line(tmp_path, capsys, field, value, words):
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    model = torch.load(path, weights_only=True)
    torch.save({**model, field: value}, path)
    assert main(["eval", path, "--episodes", "1"]) == 1
    err = capsys.readouterr().err
    assert words in err and len(err.splitlines()) == 1 and "\x1b" not in err and len(err) < 1000, err[:1000]


def test_hidden_sizes_that_need_more_weights_than_the_file_holds_are_refused_before_the_network_is_built(tmp_path, capsys):
    """hidden_sizes [65536] * 8 in a file of a few hundred bytes built a 120 GB network, and the machine swapped."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    model = torch.load(path, weights_only=True)
    torch.save({**model, "hidden_sizes": [65536] * 8}, path)
    assert main(["eval", path, "--episodes", "1"]) == 1
    assert "need more weights than the model holds" in capsys.readouterr().err


def test_an_lstm_that_needs_more_weights_than_the_file_holds_is_refused_before_the_network_is_built(tmp_path, capsys):
    """lstm_hidden_size 4096 in a plain PPO model of a few KB built a 67-million-weight LSTM (1.1 GB, 36 s of CPU for
    its orthogonal initialisation) before its names were found missing."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    model = torch.load(path, weights_only=True)
    torch.save({**model, "lstm_hidden_size": 4096}, path)
    assert main(["eval", path, "--episodes", "1"]) == 1
    assert "hidden_sizes [8] and lstm_hidden_size 4096 need more weights than the model holds" in capsys.readouterr().err


def normalised_model(tmp_path, **obs_norm) -> str:
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True),
                         "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    model = torch.load(path, weights_only=True)
    torch.save({**model, "obs_norm": {**model["obs_norm"], **obs_norm}}, path)
    return path


def test_a_model_tensor_claiming_terabytes_in_a_few_kilobytes_is_refused_before_any_copy(tmp_path, capsys):
    """obs_norm's mean as a one-element view of stride 0 and shape (2**40,): kuberl eval asked numpy for 8 TiB
    (a MemoryError traceback; 2**31 took 16 GB of the machine)."""
    huge = torch.zeros(1, dtype=torch.float64).as_strided((2**40,), (0,))
    path = normalised_model(tmp_path, mean=huge, var=huge)
    assert os.path.getsize(path) < 16 * 1024
    assert main(["eval", path, "--episodes", "1"]) == 1
    assert "claims [1099511627776] of torch.float64" in capsys.readouterr().err


@pytest.mark.parametrize(("obs_norm", "words"), [
    ({"mean": torch.zeros(5)}, "mean is not an array of the observation's shape [4]"),
    ({"count": torch.ones(3)}, "count is not a finite, non-negative number"),
    ({"count": float("nan")}, "count is not a finite"),
])
def test_a_normaliser_that_does_not_fit_the_envs_observations_is_refused_in_one_line(tmp_path, capsys, obs_norm, words):
    assert main(["eval", normalised_model(tmp_path, **obs_norm), "--episodes", "1"]) == 1
    assert f"obs_norm {words}" in capsys.readouterr().err


def test_kuberl_eval_video_without_pygame_names_the_extra_instead_of_a_traceback(tmp_path, capsys, monkeypatch):
    """`make train` then the README's `kuberl eval runs/cartpole-ppo --video cartpole.gif` ended in gymnasium's
    DependencyNotInstalled traceback: CartPole draws its frames with pygame, which only the video extra installs."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    monkeypatch.setitem(sys.modules, "pygame", None)  # `import pygame` fails, as where it is not installed
    assert main(["eval", path, "--episodes", "1", "--video", str(tmp_path / "c.gif")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kuberl eval: --video: CartPole-v1 cannot draw its frames here (pygame is not installed"), err
    assert err.endswith(f"{sys.executable} -m pip install 'kuberl-trainer[video]'\n") and "Traceback" not in err


def test_a_run_that_trained_on_after_its_final_model_is_evaluated_at_its_newest_checkpoint(tmp_path):
    """`kuberl run --resume` with a raised totalTimesteps, stopped: the earlier final-model.pt stays beside newer
    checkpoints, and `kuberl eval runs/<job>` scored those older weights."""
    from kuberl_trainer import checkpoint

    directory = tmp_path / "checkpoints" / "job-uid"
    directory.mkdir(parents=True)
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    old = checkpoint.save(str(directory), 1, trainer.shared_state(), keep=3)
    final = save_final_model(trainer, "ppo", "CartPole-v1", directory / "final-model.pt")
    os.utime(old, (1_000, 1_000))
    os.utime(final, (2_000, 2_000))
    assert policies.find_model(str(tmp_path)) == final  # a run's end: its final model is newest
    later = checkpoint.save(str(directory), 2, trainer.shared_state(), keep=3)
    os.utime(later, (3_000, 3_000))
    assert policies.find_model(str(tmp_path)) == later


def test_a_gif_of_few_colours_is_indexed_exactly_against_one_palette(tmp_path):
    """`kuberl eval runs/cartpole-ppo --video cartpole.gif` (the README's second command) took 22 s for 500 frames,
    17 of them in Pillow quantising each frame alone; CartPole draws 234 colours, so one exact palette does."""
    from kuberl_trainer.policy import gif_frames
    from PIL import Image

    rng = np.random.default_rng(0)
    colours = rng.integers(0, 256, (200, 3), dtype=np.uint8)
    frames = [colours[rng.integers(0, 200, (40, 60))] for _ in range(5)]
    images = gif_frames(frames, Image)
    assert {i.mode for i in images} == {"P"}
    assert all(np.array_equal(np.asarray(i.convert("RGB")), f) for i, f in zip(images, frames, strict=True))
    images[0].save(tmp_path / "v.gif", save_all=True, append_images=images[1:], duration=33, loop=0)
    with Image.open(tmp_path / "v.gif") as gif:
        gif.seek(3)
        assert np.array_equal(np.asarray(gif.convert("RGB")), frames[3])  # lossless through the file
    many = [rng.integers(0, 256, (40, 60, 3), dtype=np.uint8) for _ in range(2)]  # 2,400 colours: Pillow's own quantising
    Image.fromarray(many[0]).save(tmp_path / "pillow.gif", save_all=True, append_images=[Image.fromarray(many[1])], duration=33, loop=0)
    quantised = gif_frames(many, Image)
    quantised[0].save(tmp_path / "ours.gif", save_all=True, append_images=quantised[1:], duration=33, loop=0)
    assert (tmp_path / "ours.gif").read_bytes() == (tmp_path / "pillow.gif").read_bytes()


def test_kuberl_eval_video_holds_a_byte_a_pixel_while_it_plays(tmp_path):
    """`kuberl eval RUN --video x.gif` kept every frame as RGB until the episode ended, then a GIF's copy beside
    them: 5,000 600x400 CartPole frames (its 3.6 GB) and more, enough to end a laptop's session."""
    import tracemalloc

    policy = policies.load_policy(endless_pendulum(tmp_path))
    frames, tables = 80, 2 * (1 << 24)  # Pendulum draws 500x500 frames; the colour tables are fixed, 32 MiB
    tracemalloc.start()
    try:
        assert policies.record(policy, str(tmp_path / "p.gif"), max_frames=frames)[1] == frames
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - tables < 1.5 * frames * 500 * 500  # one byte a pixel and a frame's work; RGB kept was 3


def cartpole_ppo_run(tmp_path):
    """A kuberl run directory (runs/cartpole-ppo) holding the cartpole-ppo example as its job.yaml, and its
    checkpoint directory, empty: (run, checkpoint directory)."""
    run = tmp_path / "runs" / "cartpole-ppo"
    directory = run / "checkpoints" / "cartpole-ppo-uid"
    directory.mkdir(parents=True)
    example = os.path.join(os.path.dirname(__file__), "..", "..", "manifests", "examples", "cartpole-ppo.yaml")
    with open(example) as f:
        (run / "job.yaml").write_text(f.read())
    return run, directory


@pytest.mark.parametrize("trained_as, refused", [
    ({"algorithm": "ppo", "env": "CartPole-v1", "normalizeObservation": False}, None),
    (None, None),  # a checkpoint from before trained_as: unchecked, as a resume takes it
    ({"algorithm": "ppo", "env": "CartPole-v0", "normalizeObservation": False},
     "trained on CartPole-v0 with ppo, but its run's job.yaml is CartPole-v1 with ppo"),
    ({"algorithm": "ppo", "env": "CartPole-v1", "normalizeObservation": True},
     "trained on CartPole-v1 with ppo, observations normalised, but its run's job.yaml is CartPole-v1 with ppo ("),
    ({"algorithm": "ppo", "env": ["CartPole-v1"], "normalizeObservation": False}, "its trained_as.env is list, not text"),
], ids=["as-trained", "unrecorded", "other-env", "normaliser-dropped", "malformed"])
def test_kuberl_eval_refuses_a_checkpoint_trained_on_another_env_than_its_job_yaml_naming_both(
        trained_as, refused, tmp_path, capsys):
    """`kuberl eval runs/<job>/checkpoints/…/ckpt-*.pt` played the weights on whatever job.yaml said now: CartPole-v0's
    weights scored on CartPole-v1 after an edit, or a normalised policy played on raw observations, as a plain return."""
    from kuberl_trainer import checkpoint

    _, directory = cartpole_ppo_run(tmp_path)
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    state = trainer.shared_state() | ({} if trained_as is None else {"trained_as": trained_as})
    path = checkpoint.save(str(directory), 1, state, keep=3)
    code = main(["eval", path, "--episodes", "1"])
    err = capsys.readouterr().err
    if refused is None:
        assert code == 0, err
    else:
        assert code == 1 and refused in err, err


@pytest.mark.parametrize("algorithm, env_id, normalised, said", [
    ("ppo", "CartPole-v1", False, None),
    ("ppo", "Acrobot-v1", False, "trained on Acrobot-v1 with ppo, but its run's job.yaml is CartPole-v1 with ppo"),
    ("dqn", "CartPole-v1", False, "trained on CartPole-v1 with dqn, but its run's job.yaml is CartPole-v1 with ppo"),
    ("ppo", "CartPole-v1", True,
     "trained on CartPole-v1 with ppo, observations normalised, but its run's job.yaml is CartPole-v1 with ppo"),
], ids=["as-its-job", "other-env", "other-algorithm", "normaliser-not-in-job"])
def test_kuberl_eval_of_a_run_whose_final_model_is_not_its_jobs_says_what_it_found(
        algorithm, env_id, normalised, said, tmp_path, capsys):
    """`kuberl eval runs/<job>` played whatever final-model.pt lay there on that model's own env: weights left from
    another env or algorithm (an edited job.yaml, a copied file) were scored as the run's, with no word. The run is
    refused naming both; the file itself plays on its own env, with a note."""
    run, directory = cartpole_ppo_run(tmp_path)
    if algorithm == "ppo":
        trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=normalised),
                             env_id, 2, {}, 64, seed=1, restart=0)
    else:
        trainer = DQNTrainer(ONE_PROCESS, DQNConfig(hidden_sizes=[8], learning_starts=0, train_frequency=1),
                             env_id, 2, {}, 64, seed=1, restart=0)
    final = save_final_model(trainer, algorithm, env_id, directory / "final-model.pt")
    code = main(["eval", str(run), "--episodes", "1"])
    out, err = capsys.readouterr()
    if said is None:
        assert code == 0 and err == "" and out.startswith("CartPole-v1: mean return"), (out, err)
        return
    assert code == 1 and out == "" and said in err and f"kuberl eval {final}" in err and "Traceback" not in err, err
    with pytest.raises(policies.UnusableModel, match="its run's job.yaml is CartPole-v1 with ppo"):
        policies.load_policy(str(run))
    code = main(["eval", final, "--episodes", "1"])  # the file itself: its own env, said
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith(f"{env_id}: mean return") and said in err and "playing it on its own env" in err, (out, err)


def test_kuberl_eval_finds_an_allowed_env_module_where_the_run_found_it(tmp_path, monkeypatch, capsys):
    """`kuberl run job.yaml` with env.id "myenv:Corridor" and myenv.py beside it trains (each pod starts in the
    directory kuberl run ran from, and `python -m` puts it on the path); `kuberl eval runs/<job> --allow-env-module
    myenv` from that same directory said "No module named 'myenv'": the kuberl script's path has its bin/ instead."""
    (tmp_path / "nu42_corridor.py").write_text(
        "from gymnasium.envs.classic_control.cartpole import CartPoleEnv as Corridor\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "nu42_corridor:Corridor", tmp_path / "final-model.pt")
    assert main(["eval", path, "--episodes", "1", "--allow-env-module", "nu42_corridor"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("nu42_corridor:Corridor: mean return")
    assert sys.path[-1] == str(tmp_path)  # after every other entry: a file here shadows no installed module


def test_kuberl_eval_video_of_a_module_env_without_render_mode_says_so_without_a_traceback(tmp_path, monkeypatch, capsys):
    """A first custom env (`def __init__(self, length=5)`) trains and evaluates; `--video` called it with
    render_mode="rgb_array" and ended in a TypeError traceback."""
    (tmp_path / "nu42_plain.py").write_text(
        "from gymnasium.envs.classic_control.cartpole import CartPoleEnv\n"
        "class Plain(CartPoleEnv):\n    def __init__(self):\n        super().__init__()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "nu42_plain:Plain", tmp_path / "final-model.pt")
    code = main(["eval", path, "--episodes", "1", "--allow-env-module", "nu42_plain", "--video", str(tmp_path / "a.gif")])
    err = capsys.readouterr().err
    assert code == 1 and "--video: nu42_plain:Plain takes no render_mode" in err and "Traceback" not in err, err


def test_kuberl_eval_on_a_terminal_says_it_is_recording_before_the_video_takes_its_time(tmp_path, capsys, monkeypatch):
    """LunarLander-v3's 1,000-frame episode took 40 s to draw and encode after the mean return's line, in silence."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["eval", path, "--episodes", "1", "--video", str(tmp_path / "e.gif")]) == 0
    assert capsys.readouterr().err == (f"video: playing one episode of CartPole-v1 (at most 5,000 frames) into"
                                       f" {tmp_path / 'e.gif'} ...\n")


def test_kuberl_eval_writes_a_small_mean_return_with_the_digits_a_target_is_judged_by(tmp_path, capsys, monkeypatch):
    """FrozenLake-v1's returns are 0 or 1: 2 goals in 3 episodes printed "mean return 0.7 ± 0.5", its 0.667 rounded
    up to the 0.7 a success.targetReturn of 0.7 asks for."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[8]), "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    path = save_final_model(trainer, "ppo", "CartPole-v1", tmp_path / "final-model.pt")
    monkeypatch.setattr(policies, "play", lambda *args: (np.array([1.0, 1.0, 0.0]), np.zeros(3, bool)))
    assert main(["eval", path, "--episodes", "3"]) == 0
    assert capsys.readouterr().out.startswith("CartPole-v1: mean return 0.667 ± 0.471 over 3 episode(s)")


DTYPES_NOT_WEIGHTS = {"complex-nan": torch.complex64, "int": torch.int64, "bool": torch.bool}


def forged(model: dict, edit: str) -> dict:
    agent = dict(model["agent"])
    if edit == "nan":
        agent = {**agent, "net.0.weight": torch.full_like(agent["net.0.weight"], float("nan"))}
    elif edit == "another-box":
        agent = {**agent, "action_scale": agent["action_scale"] * 5}
    elif edit in DTYPES_NOT_WEIGHTS:
        weight = agent["net.0.weight"]
        agent = {**agent, "net.0.weight": weight.to(torch.complex64) + complex(float("nan"), 0) if edit == "complex-nan"
                 else weight.to(DTYPES_NOT_WEIGHTS[edit])}
    return {**model, "agent": agent, **({"algorithm": "td3"} if edit == "sac-as-td3" else {})}


@pytest.mark.parametrize(("edit", "words"), [
    ("sac-as-td3", ("the weights do not fit Pendulum-v1's td3 network: missing net.0.weight, net.0.bias, net.2.weight"
                    " and 1 more; not its own torso.0.weight, torso.0.bias, mean.weight and 3 more (a model of another algorithm")),
    ("nan", "the weights do not fit Pendulum-v1's td3 network: net.0.weight holds NaN or infinite values"),
    ("another-box", "the weights' action_scale is not Pendulum-v1's action box's (trained on another box, or edited)"),
    # a complex NaN passed the finite check (floating tensors only), load_state_dict kept its real part with a warning,
    # and the first action raised torch's traceback; int and bool weights were cast in silence
    ("complex-nan", ("the weights do not fit Pendulum-v1's td3 network: net.0.weight holds torch.complex64 values, not"
                     " real floating point")),
    ("int", "the weights do not fit Pendulum-v1's td3 network: net.0.weight holds torch.int64 values, not real floating point"),
    ("bool", "the weights do not fit Pendulum-v1's td3 network: net.0.weight holds torch.bool values, not real floating point"),
])
def test_a_final_model_whose_weights_are_not_its_algorithms_for_its_env_is_refused_naming_why(tmp_path, capsys, edit, words):
    """A final-model.pt edited to claim td3 around SAC's actor said only torch's first line, `Error(s) in loading
    state_dict for Actor:`; one with a NaN weight, or an action box of its own among its weights (the actor's
    half-width and centre), played NaN actions or actions outside the env's box and scored them."""
    algorithm = "sac" if edit == "sac-as-td3" else "td3"
    hp = make_job().minimal().algorithm(algorithm, learningStarts=16, batchSize=8, bufferSize=256, hiddenSizes=[8]).spec().hyperparameters
    trainer = entry.ALGORITHMS[algorithm].make(ONE_PROCESS, hp, "Pendulum-v1", 2, {}, 400, 3, 0)
    path = save_final_model(trainer, algorithm, "Pendulum-v1", tmp_path / "final-model.pt")
    torch.save(forged(torch.load(path, weights_only=True), edit), path)
    assert main(["eval", path, "--episodes", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kuberl eval: {words}") and len(err.splitlines()) == 1, err


def test_kuberl_eval_of_runs_names_each_run_escaped_on_one_line(tmp_path, capsys):
    """A run directory's name is anyone's to choose (a runs/ on a shared volume): `kuberl eval runs` printed
    `runs/cartpole-ppo.<ESC>[2J` and a name holding a line break as they were, to the terminal."""
    runs = tmp_path / "runs"
    a_run_with_a_model(runs, "cartpole-ppo.\x1b[2J", 1)
    a_run_with_a_model(runs, "cartpole-ppo.a\nkuberl eval: forged", 2, learning_rate=0.001)
    (runs / "cartpole-ppo.\x1b]8;;x\x07").mkdir()
    (runs / "cartpole-ppo.\x1b]8;;x\x07" / "job.yaml").write_text("{}\n")  # saved nothing: said on stderr
    assert main(["eval", str(runs), "--episodes", "1"]) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err, (out, err)
    assert "cartpole-ppo.\\x1b[2J" in out and "cartpole-ppo.a\\nkuberl eval: forged" in out, out
    assert len(err.splitlines()) == 1 and "cartpole-ppo.\\x1b]8;;x\\x07" in err, err


def test_kuberl_eval_of_runs_says_a_run_scored_from_a_checkpoint_is_not_finished(tmp_path, capsys):
    """`kuberl eval runs` beside a run still training scored its newest checkpoint, on a line like a finished run's."""
    from kuberl_trainer import checkpoint

    runs = tmp_path / "runs"
    a_run_with_a_model(runs, "cartpole-ppo", 1)
    training = runs / "cartpole-ppo.0badc0de"
    a_run_with_a_model(runs, training.name, 2)
    directory = training / "checkpoints" / "uid"
    (directory / "final-model.pt").unlink()
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16), "CartPole-v1", 2, {}, 64, seed=2, restart=0)  # as job.yaml
    checkpoint.save(str(directory), 3, trainer.shared_state(), keep=3)
    (training / "status.json").write_text(json.dumps({"phase": "Running", "conditions": []}))
    assert main(["eval", str(runs), "--episodes", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [mid] = [line for line in lines if line.startswith(str(training))]
    assert mid.endswith("timesteps, its newest checkpoint; its phase: Running)"), mid
    [done] = [line for line in lines if line.startswith(f"{runs}/cartpole-ppo ")]
    assert "checkpoint" not in done, done
