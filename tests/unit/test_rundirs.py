"""`kuberl eval runs/cartpole` and `kuberl plot runs/cartpole`, the job's file name where the run is named by its
job (cartpole-ppo): "no such file or directory", with the runs beside it unnamed."""

import pytest
from kuberl.cli import main
from kuberl.core.rundirs import missing_run_hint


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("cartpole-dqn", "cartpole-ppo", "acrobot-ppo", "pong", "lunar"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "job.yaml").write_text("kind: RLTrainingJob\n")
    (tmp_path / "runs" / "notarun").mkdir()  # no job.yaml: not kuberl run's
    return tmp_path / "runs"


def test_the_nearest_runs_are_named_else_the_first_few(runs):
    assert missing_run_hint("runs/cartpole") == "; did you mean runs/cartpole-ppo or runs/cartpole-dqn?"
    assert missing_run_hint("runs/zzz") == ("; the runs in runs: runs/acrobot-ppo, runs/cartpole-dqn, runs/cartpole-ppo,"
                                            " runs/lunar, …")
    assert missing_run_hint("elsewhere/cartpole") == ""  # no such parent
    assert missing_run_hint("runs/notarun/x") == ""  # a parent that holds no run


def test_eval_and_plot_name_the_runs_a_missing_one_may_have_meant(runs, capsys):
    assert main(["eval", "runs/cartpole"]) == 1
    assert capsys.readouterr().err == ("kuberl eval: runs/cartpole: no such file or directory; did you mean"
                                       " runs/cartpole-ppo or runs/cartpole-dqn?\n")
    assert main(["plot", "runs/cartpole"]) == 1
    assert capsys.readouterr().err.endswith("no such directory (give a run directory of kuberl run, e.g. runs/<job>); did"
                                            " you mean runs/cartpole-ppo or runs/cartpole-dqn?\n")


def test_a_run_named_in_a_hint_is_escaped_on_one_line(runs, capsys):
    """A runs/ directory is anyone's to write: a run named `job.<ESC>[2J` (or with a line break) reached the terminal
    as it was in the hint of kuberl eval's and kuberl plot's refusal of a missing run."""
    (runs / "cartpole-\x1b[2J\nkuberl eval: forged").mkdir()
    (runs / "cartpole-\x1b[2J\nkuberl eval: forged" / "job.yaml").write_text("kind: RLTrainingJob\n")
    assert "\x1b" not in missing_run_hint("runs/cartpole-\x1b") and "\n" not in missing_run_hint("runs/cartpole-\x1b")
    for command in ("eval", "plot"):
        assert main([command, "runs/cartpole-kuberl eval: forged"]) == 1
        err = capsys.readouterr().err
        assert "\x1b" not in err and len(err.splitlines()) == 1 and "runs/cartpole-\\x1b[2J\\nkuberl eval: forged" in err, err
