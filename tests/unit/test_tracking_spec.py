"""spec.tracking as `kuberl validate` and `kuberl run` check it: the server is the MLflow client's own
MLFLOW_TRACKING_URI, W&B's key its WANDB_API_KEY, set through spec.template; a job that tracks with none set is warned
of, naming the field, and a W&B name W&B refuses is refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from kuberl import cli
from kuberl.core.rules import tracking_warnings
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job

TRACKED = {"mlflow": {"experiment": "cartpole"}}


def validate(tmp_path, capsys, job):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.obj()))
    return cli.main(["validate", str(path)]), capsys.readouterr().err


def trainer_env(*env, **container):
    return {"spec": {"containers": [{"name": "trainer", "env": list(env), **container}]}}


def test_validate_warns_of_tracking_with_no_server_named_and_still_says_valid(tmp_path, capsys):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(tracking=TRACKED))
    assert code == 0 and "j: warning: spec.tracking.mlflow: MLFLOW_TRACKING_URI is not in the trainer's environment" in err, err


@pytest.mark.parametrize("template", [
    trainer_env({"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow.mlflow.svc:5000"}),
    trainer_env({"name": "MLFLOW_TRACKING_URI", "valueFrom": {"secretKeyRef": {"name": "mlflow", "key": "uri"}}}),
    trainer_env(envFrom=[{"secretRef": {"name": "mlflow"}}]),  # its keys are not seen here
])
def test_a_server_set_through_the_template_is_no_warning(tmp_path, capsys, template):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(tracking=TRACKED, template=template))
    assert code == 0 and "warning" not in err, err


def test_a_server_set_in_a_sidecar_only_is_still_warned_of():
    spec = make_job("j").minimal().replace(tracking=TRACKED, template={"spec": {"containers": [
        {"name": "proxy", "image": "p", "env": [{"name": "MLFLOW_TRACKING_URI", "value": "http://x"}]}]}}).spec()
    assert [w.path for w in tracking_warnings(spec)] == ["spec.tracking.mlflow"]
    assert tracking_warnings(make_job("j").minimal().spec()) == []  # no tracking, no word of it


def test_an_unknown_tracking_key_or_an_empty_experiment_is_refused_naming_the_field():
    for tracking, path in (({"neptune": {}}, "spec.tracking.neptune"), ({"mlflow": {"experiment": ""}}, "spec.tracking.mlflow.experiment"),
                           ({"mlflow": {"experimentName": "x"}}, "spec.tracking.mlflow.experimentName")):
        with pytest.raises(InvalidJob) as e:
            make_job("j").minimal().replace(tracking=tracking).spec()
        assert [p.path for p in e.value.problems] == [path], e.value.problems


def test_an_experiment_name_longer_than_mlflows_sql_store_keeps_is_refused_naming_the_field():
    """MLflow's SQL store's name column is VARCHAR(256), which PostgreSQL and MySQL refuse a longer value for: 257 to
    500 characters, which its client and the CRD took, failed at the run's start, and rank 0 said only that it was
    not tracked."""
    with pytest.raises(InvalidJob) as e:
        make_job("j").minimal().replace(tracking={"mlflow": {"experiment": "x" * 257}}).spec()
    [problem] = e.value.problems
    assert problem.path == "spec.tracking.mlflow.experiment" and "256" in problem.message, problem
    assert make_job("j").minimal().replace(tracking={"mlflow": {"experiment": "x" * 256}}).spec()


def test_run_warns_the_same_before_anything_starts(tmp_path, capsys):
    """`runPolicy.suspend: true` stops the run (exit 3) before a run directory: the warning came before it."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().replace(tracking=TRACKED, runPolicy={"suspend": True}).obj()))
    code = cli.main(["run", str(path), "--dir", str(tmp_path / "runs")])
    out = capsys.readouterr()
    assert code == 3 and "spec.tracking.mlflow: MLFLOW_TRACKING_URI is not in the trainer's environment" in out.out + out.err, out


def test_tracking_with_a_custom_trainer_is_warned_of_as_logged_by_nobody():
    spec = make_job("j").custom_trainer(trainer_env({"name": "MLFLOW_TRACKING_URI", "value": "http://x"}, image="mine",
                                                    command=["python", "train.py"])).replace(tracking=TRACKED).spec()
    [warning] = tracking_warnings(spec)
    assert warning.path == "spec.tracking.mlflow" and "trainer: custom runs your command" in warning.message


WANDB = {"wandb": {"project": "cartpole"}}


@pytest.mark.parametrize("template", [
    trainer_env({"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}),
    trainer_env(envFrom=[{"secretRef": {"name": "wandb"}}]),  # its keys are not seen here
    trainer_env({"name": "WANDB_MODE", "value": "offline"}),  # kept on the volume for `wandb sync`: no key needed
    # a mode from a ConfigMap is not seen here, as envFrom's keys are not: it may be offline
    trainer_env({"name": "WANDB_MODE", "valueFrom": {"configMapKeyRef": {"name": "wandb", "key": "mode"}}}),
])
def test_wandb_with_a_key_or_offline_is_no_warning(tmp_path, capsys, template):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(tracking=WANDB, template=template))
    assert code == 0 and "warning" not in err, err


def test_wandb_online_with_no_key_is_warned_of_naming_the_field(tmp_path, capsys):
    template = trainer_env({"name": "WANDB_MODE", "value": "online"}, {"name": "MLFLOW_TRACKING_URI", "value": "http://x"})
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(tracking={**WANDB, **TRACKED}, template=template))
    assert code == 0 and "j: warning: spec.tracking.wandb: WANDB_API_KEY is not in the trainer's environment" in err, err
    assert "spec.tracking.mlflow" not in err and "WANDB_MODE: offline" in err, err  # MLflow's server is set
    custom = make_job("j").custom_trainer(trainer_env(image="mine", command=["python", "train.py"])).replace(tracking=WANDB).spec()
    assert [(w.path, "trainer: custom runs your command" in w.message) for w in tracking_warnings(custom)] == [("spec.tracking.wandb", True)]


@pytest.mark.parametrize(("env", "words"), [
    ({"name": "WANDB_MODE", "value": "onlin"}, "WANDB_MODE].value: 'onlin' is none of W&B's modes (online, offline,"),
    ({"name": "WANDB_BASE_URL", "value": "ftp://wandb.example"}, "WANDB_BASE_URL].value: 'ftp://wandb.example' is no http"),
    ({"name": "WANDB_BASE_URL", "value": "https://user:secret@[::1"}, "WANDB_BASE_URL].value: 'https://[::1' is no"),
])
def test_a_wandb_variable_w_and_b_refuses_is_warned_of_naming_its_field(tmp_path, capsys, env, words):
    """W&B refuses such a WANDB_MODE or WANDB_BASE_URL when rank 0 starts its run, which then logs nothing: said at
    validate, naming the template's variable (its password left out), and the job still valid (a warning)."""
    template = trainer_env(env, {"name": "WANDB_API_KEY", "value": "k" * 40})
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(tracking=WANDB, template=template))
    assert code == 0 and f"j: warning: spec.template.spec.containers[name=trainer].env[name={words}" in err, err
    assert "secret" not in err


def test_wandb_online_with_a_login_in_the_users_netrc_is_no_warning_under_kuberl_run(tmp_path, capsys, monkeypatch):
    """`wandb login` keeps its key in ~/.netrc, which kuberl run's ranks read (their HOME is the user's): warning that
    rank 0 would log nothing was false there. A pod's HOME is not the user's: kuberl validate still warns."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine wandb.example.com\n  login user\n  password kuberltestkey\n")
    (home / ".netrc").chmod(0o600)  # as wandb login writes it; Python's netrc refuses one others may read
    monkeypatch.setenv("HOME", str(home))
    own_server = trainer_env({"name": "WANDB_BASE_URL", "value": "https://wandb.example.com"})
    spec = make_job("j").minimal().replace(tracking=WANDB, template=own_server).spec()
    assert [w.path for w in tracking_warnings(spec)] == ["spec.tracking.wandb"]
    assert tracking_warnings(spec, ["wandb.example.com"]) == []
    assert [w.path for w in tracking_warnings(make_job("j").minimal().replace(tracking=WANDB).spec(), ["wandb.example.com"])] == [
        "spec.tracking.wandb"]  # a login to another server than the default api.wandb.ai
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().replace(tracking=WANDB, template=own_server,
                                                                   runPolicy={"suspend": True}).obj()))
    code = cli.main(["run", str(path), "--dir", str(tmp_path / "runs")])
    out = capsys.readouterr()
    assert "spec.tracking.wandb" not in out.out + out.err, out
    (home / ".netrc").write_text("machine other.example.com\n  login user\n  password kuberltestkey\n")  # not its server
    cli.main(["run", str(path), "--dir", str(tmp_path / "runs2")])
    out = capsys.readouterr()
    assert "spec.tracking.wandb: WANDB_API_KEY is not in the trainer's environment" in out.out + out.err, out
    assert code == 3


def test_a_fifo_at_the_users_netrc_is_no_login_and_holds_nothing(tmp_path):
    """kuberl run reads ~/.netrc for a W&B login: a FIFO there held it at the open, before any pod, until something
    wrote to it. Only a regular file is read; the run goes on to its warning that no key is set."""
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / ".netrc")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().replace(
        tracking=WANDB, template=trainer_env({"name": "WANDB_BASE_URL", "value": "https://wandb.example.com"}),
        runPolicy={"suspend": True}).obj()))
    try:
        done = subprocess.run([sys.executable, "-m", "kuberl.cli", "run", str(path), "--dir", str(tmp_path / "runs")],
                              env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("kuberl run hung on the FIFO at ~/.netrc")
    assert "spec.tracking.wandb: WANDB_API_KEY is not in the trainer's environment" in done.stdout + done.stderr, done


@pytest.mark.parametrize(("wandb", "path"), [
    ({}, "spec.tracking.wandb.project"),
    ({"project": "team/cartpole"}, "spec.tracking.wandb.project"),  # W&B refuses / \ # ? % : in a project's name
    ({"project": "a:b"}, "spec.tracking.wandb.project"),
    ({"project": "x" * 129}, "spec.tracking.wandb.project"),  # and more than 128 characters
    ({"project": "p", "entity": "a#b"}, "spec.tracking.wandb.entity"),
    # what W&B would take and mangle: a name its runs' URL resolves away, a newline, a right-to-left override
    ({"project": ".."}, "spec.tracking.wandb.project"),
    ({"project": "."}, "spec.tracking.wandb.project"),
    ({"project": "cart\npole"}, "spec.tracking.wandb.project"),  # W&B's own artifact names refuse CR and LF
    ({"project": "p", "entity": "team\u202egnp.exe"}, "spec.tracking.wandb.entity"),
    ({"project": "p", "entity": ".."}, "spec.tracking.wandb.entity"),
    ({"project": "p", "tags": ["x" * 65]}, "spec.tracking.wandb.tags[0]"),  # a tag is 1 to 64 characters
    ({"project": "p", "tags": [""]}, "spec.tracking.wandb.tags[0]"),
    ({"project": "p", "group": ""}, "spec.tracking.wandb.group"),
])
def test_a_wandb_name_wandb_refuses_is_refused_naming_the_field(wandb, path):
    with pytest.raises(InvalidJob) as e:
        make_job("j").minimal().replace(tracking={"wandb": wandb}).spec()
    assert [p.path for p in e.value.problems] == [path], e.value.problems


@pytest.mark.parametrize("name", ["cartpole", "a.b", "...", ".hidden", "my team", "équipe-ü", "x" * 128])
def test_a_wandb_name_wandb_takes_as_it_is_is_valid(name):
    spec = make_job("j").minimal().replace(tracking={"wandb": {"project": name, "entity": name}}).spec()
    assert (spec.tracking.wandb.project, spec.tracking.wandb.entity) == (name, name)


def test_a_refused_wandb_name_is_said_as_what_is_expected():
    with pytest.raises(InvalidJob) as e:
        make_job("j").minimal().replace(tracking={"wandb": {"project": "cart\u202epole"}}).spec()
    [problem] = e.value.problems
    assert "a W&B name: none of / \\ # ? % :, no control or bidirectional character, not '.' or '..'" in str(problem), problem
    assert "\u202e" not in str(problem)
    assert make_job("j").minimal().replace(tracking={"wandb": {"project": "x" * 128, "tags": ["y" * 64]}}).spec()
