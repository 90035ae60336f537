"""trainer: custom: a job that brings its own command needs only what its pods need."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from kuberl.core import names
from kuberl.core.render import Job, render_configmap, render_pods
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob
from kuberl.local.runner import summary

from tests.support.jobs import make_job

CUSTOM = make_job("byo").custom_trainer(
    {"spec": {"containers": [{"name": "trainer", "command": ["torchrun", "/app/train.py"]}]}}).workers(2).obj()


def test_validate_with_an_env_registry_accepts_a_job_without_env():
    spec = validate_job(CUSTOM, env_ids=frozenset())
    assert spec.trainer == "custom" and spec.env is None and spec.algorithm is None


def test_no_final_model_is_claimed_and_the_summary_says_what_kuberl_knows(tmp_path):
    job = Job("byo", validate_job(CUSTOM))
    config = json.loads(render_configmap(job, "default", "u")["data"][names.CONFIG_FILE])
    assert config["paths"]["finalModel"] is None
    line = summary(job, {"checkpoints": str(tmp_path), "model": None}, {"restarts": 0}, 0, 12.0)
    assert line == "byo succeeded: every worker exited 0 after 12s; restarts 0"


def test_kuberl_validate_names_the_custom_trainer(tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(CUSTOM))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "validate", str(tmp_path / "job.yaml")], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "byo: valid: custom trainer, 2 worker(s) x 1 process(es) = world size 2;" in done.stdout


def test_a_pytorchjob_container_name_is_pointed_at_the_trainer_container():
    """A PyTorchJob's container is named `pytorch`; here that name would run as a sidecar
    without RANK and MASTER_ADDR, so the refusal says which container to rename."""
    pytorchjob_style = {"spec": {"containers": [{"name": "pytorch", "command": ["python", "train.py"]}]}}
    with pytest.raises(InvalidJob) as refused:
        validate_job(make_job("byo").custom_trainer(pytorchjob_style).workers(2).obj())
    assert [p.path for p in refused.value.problems] == ["spec.template.spec.containers"]
    assert "rename 'pytorch' to 'trainer'" in str(refused.value)
    beside = make_job("byo").custom_trainer({"spec": {"containers": [
        {"name": "trainer", "command": ["python", "train.py"]}, {"name": "pytorch", "image": "busybox", "command": ["sleep", "1"]}]}}).workers(2).obj()
    pod = render_pods(Job("byo", validate_job(beside)), "default", "u", [0], 0)[0]
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "pytorch")
    assert "RANK" not in {e["name"] for e in sidecar.get("env") or []}


def test_args_alone_run_the_images_entrypoint_not_kuberls_trainer():
    """A container given only args, as Kubeflow's mnist examples give `pytorch` (the image's ENTRYPOINT is the
    script): the pod must run that ENTRYPOINT with them, as Kubernetes does, not kuberl's trainer command."""
    args_only = make_job("byo").custom_trainer(
        {"spec": {"containers": [{"name": "trainer", "args": ["--rollout-steps", "128"]}]}}).workers(2).obj()
    for pod in render_pods(Job("byo", validate_job(args_only)), "default", "u", [0, 1], 0):
        trainer = next(c for c in pod["spec"]["containers"] if c["name"] == names.TRAINER_CONTAINER)
        assert "command" not in trainer and trainer["args"] == ["--rollout-steps", "128"]
    pod = render_pods(Job("byo", validate_job(CUSTOM)), "default", "u", [0], 0)[0]
    assert pod["spec"]["containers"][0]["command"] == ["torchrun", "/app/train.py"]


@pytest.mark.parametrize(("trainer", "procs", "valid"), [
    ("custom", 1, True),    # DataParallel, or a script that spawns its own: a PyTorchJob's nprocPerNode 1 with 4 GPUs
    ("custom", 2, True),    # two processes of two GPUs each (a pipeline per process)
    ("custom", 3, False),   # GPUs that do not split evenly
    ("kuberl", 1, False),   # kuberl's trainer is one process per GPU
])
def test_a_custom_trainer_may_drive_several_gpus_per_process(trainer, procs, valid):
    job = (CUSTOM if trainer == "custom" else make_job("ppo").obj())
    job = {**job, "spec": {**job["spec"], "gpusPerWorker": 4, "procsPerWorker": procs}}
    if valid:
        spec = validate_job(job, env_ids=frozenset())
        pod = render_pods(Job("byo", spec), "default", "u", [0], 0)[0]
        container = next(c for c in pod["spec"]["containers"] if c["name"] == names.TRAINER_CONTAINER)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert spec.procs == procs and container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert env["NPROC_PER_NODE"] == str(procs) and env["WORLD_SIZE"] == str(2 * procs)
    else:
        with pytest.raises(InvalidJob, match=r"spec.procsPerWorker: must equal spec.gpusPerWorker, one process per GPU,"
                                             r" or with trainer: custom divide it evenly \(got procsPerWorker 3, gpusPerWorker 4\)"
                                             r"|got procsPerWorker 1, gpusPerWorker 4"):
            validate_job(job, env_ids=frozenset())
