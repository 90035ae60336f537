"""`--pod-security` on validate, render, run and the operator: exit codes,
every offending field named, `kuberl run` privileged by default, saying so where a cluster would refuse its pods."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kuberl import cli
from kuberl.core import names

from tests.support.jobs import make_job
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
T = f"spec.containers[{names.TRAINER_CONTAINER}]"
HOSTILE_JOB = make_job("hostile").minimal().template({"spec": {
    "hostNetwork": True, "hostPID": True, "hostIPC": True, "serviceAccountName": "admin",
    "containers": [{"name": "trainer", "securityContext": {"privileged": True, "runAsUser": 0,
                                                           "capabilities": {"add": ["SYS_ADMIN"]}}}],
    "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
}})
HOSTILE = HOSTILE_JOB.obj()
BASELINE_FIELDS = ["spec.hostNetwork", "spec.hostPID", "spec.hostIPC", f"{T}.securityContext.privileged",
                   f"{T}.securityContext.capabilities.add", "spec.volumes[host].hostPath"]


def kuberl(tmp_path, *args, job=HOSTILE):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args, str(path)], check=False, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


@pytest.mark.parametrize("command", ["validate", "render"])
def test_hostile_template_is_refused_by_default_naming_every_field(tmp_path, command):
    result = kuberl(tmp_path, command)
    assert result.returncode == 1, result
    assert "violates the baseline Pod Security Standard" in result.stderr
    for field in BASELINE_FIELDS:
        assert f"  {field}: " in result.stderr
    assert "kind: Pod" not in result.stdout and "valid:" not in result.stdout
    # a hostPath to the user's checkout is refused here and runs under kuberl run: said, not left a contradiction
    assert result.stderr.splitlines()[-1] == ("  (a cluster's operator at level baseline refuses it; kuberl run, at level"
                                              " privileged on your own machine, runs it: --pod-security privileged checks"
                                              " as kuberl run does)")


def test_restricted_names_more_and_privileged_allows_all(tmp_path):
    restricted = kuberl(tmp_path, "validate", "--pod-security", "restricted")
    assert restricted.returncode == 1
    assert f"  {T}.securityContext.runAsUser: " in restricted.stderr
    privileged = kuberl(tmp_path, "validate", "--pod-security", "privileged")
    assert (privileged.returncode, privileged.stderr) == (0, "")
    assert "pods pass the privileged Pod Security Standard" in privileged.stdout
    rendered = kuberl(tmp_path, "render", "--pod-security", "privileged")
    assert rendered.returncode == 0 and "hostPID: true" in rendered.stdout


def test_examples_pass_restricted_through_the_cli(tmp_path):
    # one process for every example (validate checks each file in turn, each job's line named): a process per
    # file started kuberl's imports 9 times
    paths = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
    result = subprocess.run([sys.executable, "-m", "kuberl.cli", "validate", "--pod-security", "restricted", *map(str, paths)],
                            check=False, capture_output=True, text=True, timeout=120)
    # the one warning allowed: an env this machine lacks the package for (gpu-ppo's MuJoCo) is said to be unchecked
    unchecked = [line for line in result.stderr.splitlines() if "not checked: it needs a package not installed here" in line]
    assert result.returncode == 0 and result.stderr.splitlines() == unchecked, result.stderr
    passed = [line for line in result.stdout.splitlines() if line.endswith("pods pass the restricted Pod Security Standard")]
    for path in paths:
        names_in_file = [doc["metadata"]["name"] for doc in yaml.safe_load_all(path.read_text()) if doc]
        assert names_in_file and all(any(line.startswith(f"{name}: valid: ") for line in passed) for name in names_in_file), path


def test_unknown_level_is_a_usage_error(tmp_path):
    result = kuberl(tmp_path, "validate", "--pod-security", "strict")
    assert result.returncode == 2 and "invalid choice: 'strict'" in result.stderr


def test_run_is_privileged_by_default_and_says_so_in_one_line_once_the_job_is_valid(tmp_path):
    invalid = {**HOSTILE, "spec": {**HOSTILE["spec"], "totalTimesteps": 0}}  # stops before any process starts
    result = kuberl(tmp_path, "run", job=invalid)
    assert result.returncode == 1 and "spec.totalTimesteps" in result.stderr
    assert "pod security level" not in result.stdout, "no banner for a job that will not run"
    quick = make_job("quick").custom_trainer({"spec": {"containers": [{"name": "trainer", "command": ["python", "-c", "pass"]}]}}).workers(1).obj()
    # a port of its own: with 29500 taken here (another run), the line saying so would come first
    quick["spec"]["rendezvous"] = {"port": free_port()}
    result = kuberl(tmp_path, "run", "--dir", str(tmp_path / "runs"), job=quick)
    assert result.returncode == 0, result.stdout + result.stderr
    # pods a cluster runs too: nothing about security levels (a line on every run read as an alarm)
    assert result.stdout.splitlines()[0].startswith("[kuberl] quick: 1 pod(s)"), result.stdout
    assert "security" not in result.stdout + result.stderr


def test_run_says_when_a_cluster_would_refuse_the_pods_it_runs():
    from kuberl.core.render import Job
    from kuberl.local.runner import cluster_refusal_note

    hostile = HOSTILE_JOB.spec()
    note = cluster_refusal_note(Job("hostile", hostile), hostile)
    assert note == ("note: a cluster's operator (at its default pod security level, baseline) would refuse these pods for"
                    f" {BASELINE_FIELDS[0]}, {BASELINE_FIELDS[1]} and {len(BASELINE_FIELDS) - 2} more; here they run as"
                    " your own processes. kuberl validate names every field"), note
    plain = make_job("plain").minimal().spec()
    assert cluster_refusal_note(Job("plain", plain), plain) is None


def test_run_at_baseline_refuses_before_starting_anything(tmp_path):
    result = kuberl(tmp_path, "run", "--pod-security", "baseline", "--dir", str(tmp_path / "runs"))
    assert result.returncode == 1
    assert all(f"  {field}: " in result.stderr for field in BASELINE_FIELDS)
    assert not (tmp_path / "runs").exists()


def test_operator_flags():
    args = cli.build_parser().parse_args(["operator"])
    assert (args.pod_security, args.allowed_service_accounts) == ("baseline", None)
    args = cli.build_parser().parse_args(["operator", "--pod-security", "restricted", "--allowed-service-accounts", "a,b"])
    assert (args.pod_security, args.allowed_service_accounts) == ("restricted", "a,b")
    assert cli.build_parser().parse_args(["run", "job.yaml"]).pod_security == "privileged"
    assert cli.build_parser().parse_args(["validate", "job.yaml"]).pod_security == "baseline"
    assert cli.build_parser().parse_args(["render", "job.yaml"]).pod_security == "baseline"


def test_validate_refuses_the_open_fields_it_is_told_to_naming_each(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("pinned").template({"spec": {"nodeName": "gpu-node-7"}}).obj()))
    assert cli.main(["validate", str(path)]) == 0  # open by default, as the Pod Security levels leave it
    assert cli.main(["validate", str(path), "--forbid-pod-fields", "nodeName"]) == 1
    assert "  spec.nodeName: Node Name: unset (the scheduler places the pod) (got 'gpu-node-7')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["validate", str(path), "--forbid-pod-fields", "hostNetwork"])
    assert "unknown pod field 'hostNetwork'" in capsys.readouterr().err


def test_run_refuses_the_open_fields_it_is_told_to_also_at_privileged(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("pinned").template({"spec": {"nodeName": "gpu-node-7"}}).obj()))
    assert cli.main(["run", str(path), "--dir", str(tmp_path / "runs"), "--forbid-pod-fields", "nodeName"]) == 1
    assert "  spec.nodeName: Node Name: unset" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
