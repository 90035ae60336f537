"""ale-py's Gym-era ids (`BreakoutNoFrameskip-v4`, CleanRL's Atari scripts' default) where ale-py is not installed,
as after `make train`: `kuberl validate` refused them as no registered id ("expected a gymnasium id registered here
… (got 'PongNoFrameskip-v4')"), with no word of ale-py, a job a cluster's trainer image runs. Now they are left to
the trainer's image as ALE/Pong-v5 is, with a warning naming the install; the trainer says ale-py is missing."""

import subprocess
import sys

import gymnasium as gym
import pytest
import yaml
from kuberl.core.atarikwargs import is_ale_id
from kuberl.core.rules import env_id_problem, validate_job
from kuberl.core.validation import InvalidJob
from kuberl_trainer import atari

from tests.support.jobs import make_job

# gymnasium's own ids, as a machine without ale-py registers them
WITHOUT_ALE = frozenset(k for k, s in gym.registry.items() if not str(s.entry_point).startswith("ale_py"))
WITH_ALE = WITHOUT_ALE | {"ALE/Pong-v5", "Pong-v4", "PongNoFrameskip-v4"}


@pytest.mark.parametrize(("env_id", "ale"), [
    ("ALE/Pong-v5", True), ("BreakoutNoFrameskip-v4", True), ("PongNoFrameskip-v0", True),
    ("Pong-v4", False),  # a bare <Name>-v4 could be any package's
    ("PongNoFrameskip-v5", False), ("pongNoFrameskip-v4", False), ("mypkg:PongNoFrameskip-v4", False),
])
def test_an_id_only_ale_py_registers_is_known_by_its_name(env_id, ale):
    assert is_ale_id(env_id) is ale


def test_without_ale_py_its_ids_are_left_to_the_trainers_image():
    assert env_id_problem("BreakoutNoFrameskip-v4", WITHOUT_ALE) is None
    assert env_id_problem("ALE/Breakout-v5", WITHOUT_ALE) is None
    # what is no ale-py name is still refused
    assert env_id_problem("PongNoFrameskip-v5", WITHOUT_ALE).message.startswith("expected a gymnasium id registered here")
    assert env_id_problem("Cartpole-v1", WITHOUT_ALE).message.endswith("did you mean 'CartPole-v1'?")


def test_with_ale_py_here_its_registry_decides():
    assert env_id_problem("PongNoFrameskip-v4", WITH_ALE) is None
    assert env_id_problem("PongNoFrameskp-v4", WITH_ALE).message.endswith("did you mean 'PongNoFrameskip-v4'?")
    assert env_id_problem("BreakoutNoFrameskip-v4", WITH_ALE) is not None  # not among the ids ale-py registered


def test_the_operator_reads_its_kwargs_as_an_ale_ids_without_gymnasium():
    """kuberl's Atari keys of spec.env.kwargs, refused for ALE/ ids only: `protocol: sb3` passed for PongNoFrameskip-v4."""
    job = make_job("j").minimal().replace(env={"id": "PongNoFrameskip-v4", "kwargs": {"protocol": "sb3"}}).obj()
    with pytest.raises(InvalidJob) as refused:
        validate_job(job, env_ids=None)
    assert [str(p) for p in refused.value.problems] == [
        "spec.env.kwargs.protocol: expected one of 'modern', 'nature' (got 'sb3')"]


def cli_without_ale_py(*args: str) -> subprocess.CompletedProcess:
    """`kuberl ARGS` in a process of its own, with ale_py unimportable (this one may have registered its ids already)."""
    program = f"import sys; sys.modules['ale_py'] = None; from kuberl import cli; sys.exit(cli.main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)


def breakout_job(tmp_path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().replace(env={"id": "BreakoutNoFrameskip-v4"}).obj()))
    return str(path)


def test_validate_without_ale_py_warns_naming_the_install_and_says_valid(tmp_path):
    done = cli_without_ale_py("validate", breakout_job(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (f"j: warning: spec.env.id: 'BreakoutNoFrameskip-v4' is an Atari id, and ale-py is not installed here: its"
            f" game is not checked and kuberl run here would fail (a trainer image with it runs it): {sys.executable} -m"
            " pip install 'kuberl-trainer[atari]'") in done.stderr
    assert "j: valid: ppo on BreakoutNoFrameskip-v4" in done.stdout


def test_the_trainer_without_ale_py_says_so_for_such_an_id(monkeypatch):
    """It took the id for a gymnasium one, and gymnasium said the env does not exist."""
    monkeypatch.setattr(atari, "_ale_registered", lambda: False)
    assert atari.is_atari("BreakoutNoFrameskip-v4")
    with pytest.raises(atari.AtariConfigError, match=r"^spec\.env\.id: 'BreakoutNoFrameskip-v4' is an Atari id but ale-py"
                                                     r" is not installed \("):
        atari.game_of("BreakoutNoFrameskip-v4")


def test_run_without_ale_py_warns_as_validate_does_before_any_pod(tmp_path):
    """`kuberl run manifests/examples/pong-ppo-gpu.yaml` after make train said nothing of ale-py and started 4 ranks,
    which each failed 45 s later (load 8) on what `kuberl validate` warns of at once. A suspended job stops before
    any pod (exit 3), after the warnings: what is said before the run starts, and nothing runs."""
    done = cli_without_ale_py("run", breakout_job(tmp_path), "--dir", str(tmp_path / "runs"), "--set", "runPolicy.suspend=true")
    assert done.returncode == 3, done.stderr
    assert (f"[kuberl] warning: spec.env.id: 'BreakoutNoFrameskip-v4' is an Atari id, and ale-py is not installed here:"
            f" its game is not checked and kuberl run here would fail (a trainer image with it runs it): {sys.executable}"
            " -m pip install 'kuberl-trainer[atari]'\n") in done.stdout
    assert "spec.runPolicy.suspend is true" in done.stderr
