"""spec.tracking.mlflow as `kuberl validate` and `kuberl run` check it: the server is the MLflow client's own
MLFLOW_TRACKING_URI, set through spec.template; a job that tracks with none set is warned of, naming the field."""

from __future__ import annotations

import pytest
import yaml
from kuberl import cli
from kuberl.core.rules import tracking_server_warning
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
    assert tracking_server_warning(spec).path == "spec.tracking.mlflow"
    assert tracking_server_warning(make_job("j").minimal().spec()) is None  # no tracking, no word of it


def test_an_unknown_tracking_key_or_an_empty_experiment_is_refused_naming_the_field():
    for tracking, path in (({"wandb": {}}, "spec.tracking.wandb"), ({"mlflow": {"experiment": ""}}, "spec.tracking.mlflow.experiment"),
                           ({"mlflow": {"experimentName": "x"}}, "spec.tracking.mlflow.experimentName")):
        with pytest.raises(InvalidJob) as e:
            make_job("j").minimal().replace(tracking=tracking).spec()
        assert [p.path for p in e.value.problems] == [path], e.value.problems


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
    warning = tracking_server_warning(spec)
    assert warning.path == "spec.tracking.mlflow" and "trainer: custom runs your command" in warning.message
