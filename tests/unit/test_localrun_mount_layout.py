"""Paths and volume mounts a cluster takes and `kuberl run` cannot lay out (each mount is a symlink in the pod's root
here, and no path may leave that root): one rule, `kuberl.local.sandbox.job_path_problems`, that `kuberl validate`
warns with and `kuberl run` refuses with, before a run directory is made, each problem at the spec.template field
the user wrote."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kuberl.core.render import Job
from kuberl.local.sandbox import job_path_problems

from tests.support.jobs import make_job

TRAINER = "spec.template.spec.containers[0]"
OUTSIDE = "is not an absolute path inside the container: expected one starting with '/' that no '..' leads out of"


def with_mounts(mounts: list[dict], **container: object) -> dict:
    volumes = [{"name": n, "emptyDir": {}} for n in dict.fromkeys(m["name"] for m in mounts)]
    return {"spec": {"volumes": volumes, "containers": [{"name": "trainer", "volumeMounts": mounts, **container}]}}


def problems_of(template: dict) -> list[str]:
    job = make_job("mounts").workers(1).template(template)
    return job_path_problems(Job("mounts", job.spec()))


@pytest.mark.parametrize("template,said", [
    # the root: it was "spec.containers[trainer].volumeMounts[4].mountPath: '/' is not an absolute path inside the
    # container", plus a terminationMessagePath problem the user never wrote
    (with_mounts([{"name": "data", "mountPath": "/"}]),
     [(f"{TRAINER}.volumeMounts[0].mountPath: '/' is the container's root, which no volume can replace here (each mount"
      " is a symlink inside the pod's root directory): expected a directory of its own, e.g. /data")]),
    # one of the user's inside another: named at both of the user's fields, not at the rendered pod's indices (5 and 4)
    (with_mounts([{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/data/cfg"}]),
     [(f"{TRAINER}.volumeMounts[1].mountPath: '/data/cfg' is inside another mount, '/data'"
      f" ({TRAINER}.volumeMounts[0].mountPath), which this node cannot lay out (each mount is a symlink here):"
      " expected mounts side by side")]),
    # relative, as a kubelet mounts it (data is /data)
    (with_mounts([{"name": "cfg", "mountPath": "data/cfg"}, {"name": "data", "mountPath": "data"}]),
     [(f"{TRAINER}.volumeMounts[0].mountPath: '/data/cfg' is inside another mount, '/data'"
      f" ({TRAINER}.volumeMounts[1].mountPath), which this node cannot lay out (each mount is a symlink here):"
      " expected mounts side by side")]),
    # inside one of kuberl's own
    (with_mounts([{"name": "data", "mountPath": "/checkpoints/data"}]),
     [(f"{TRAINER}.volumeMounts[0].mountPath: '/checkpoints/data' is inside another mount, kuberl's own checkpoint mount"
      " ('/checkpoints'), which this node cannot lay out (each mount is a symlink here): expected mounts side by side")]),
    # above kuberl's own, and over the default termination-message file
    (with_mounts([{"name": "dev", "mountPath": "/dev"}]),
     [(f"{TRAINER}.volumeMounts[0].mountPath: '/dev' holds kuberl's own shared memory mount ('/dev/shm'), which this node"
      " cannot lay out (each mount is a symlink here): expected a mount beside it, not above it"),
      (f"{TRAINER}.volumeMounts[0].mountPath: '/dev' holds the termination-message file (/dev/termination-log,"
      " terminationMessagePath's default), which this node would empty in that volume at every start: expected a mount"
      " elsewhere, or a terminationMessagePath outside it")]),
    # a termination-message path the user set, inside the user's mount
    (with_mounts([{"name": "data", "mountPath": "/data"}], terminationMessagePath="/data/log"),
     [(f"{TRAINER}.terminationMessagePath: '/data/log' is inside a volume mount, '/data' ({TRAINER}.volumeMounts[0].mountPath);"
      " this node would empty that volume's file at every start: expected a path outside the mounts (default"
      " /dev/termination-log)")]),
    # paths that leave the pod's root here: said at the rendered pod's volumeMounts[4] and spec.containers[trainer]
    (with_mounts([{"name": "data", "mountPath": "/../../x"}]),
     [f"{TRAINER}.volumeMounts[0].mountPath: '/../../x' {OUTSIDE}"]),
    (with_mounts([{"name": "data", "mountPath": "/data"}], workingDir="work"),
     [f"{TRAINER}.workingDir: 'work' {OUTSIDE}"]),
    (with_mounts([{"name": "data", "mountPath": "/data"}], terminationMessagePath="/../log"),
     [f"{TRAINER}.terminationMessagePath: '/../log' {OUTSIDE}"]),
])
def test_a_layout_this_node_cannot_make_is_said_at_the_field_the_user_wrote(template, said):
    assert problems_of(template) == said


@pytest.mark.parametrize("mounts", [
    [{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/cfg"}],
    [{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/database"}],  # a prefix, not a parent
    [{"name": "tmp", "mountPath": "/tmp"}],  # replaces kuberl's own /tmp (merged by mountPath): nothing nests
])
def test_mounts_side_by_side_pass(mounts):
    assert problems_of(with_mounts(mounts)) == []


def kuberl(*args: str, cwd: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_validate_warns_in_the_words_run_then_refuses_with_and_run_makes_no_run_directory(tmp_path):
    """`kuberl validate` said "valid" with no word, then `kuberl run` refused the pod after making its run directory,
    naming the rendered pod's `spec.containers[trainer].volumeMounts[5]`, a field the user never wrote."""
    job = make_job("nested").workers(1).template(
        with_mounts([{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/data/cfg"}])).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    problem = (f"{TRAINER}.volumeMounts[1].mountPath: '/data/cfg' is inside another mount, '/data'"
               f" ({TRAINER}.volumeMounts[0].mountPath), which this node cannot lay out (each mount is a symlink here):"
               " expected mounts side by side")

    validated = kuberl("validate", "job.yaml", cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr  # a cluster lays it out: valid, with a warning
    assert validated.stdout.startswith("nested: valid: ")
    assert validated.stderr == f"job.yaml: nested: warning: kuberl run cannot run it here: {problem}\n"

    ran = kuberl("run", "job.yaml", "--dir", "runs", cwd=tmp_path)
    assert ran.returncode == 3, ran.stderr
    assert ran.stderr == f"kuberl run: nested cannot run here: {problem}\n"
    assert not (tmp_path / "runs").exists()


def test_a_refusal_only_the_pods_start_can_make_names_the_template_field(tmp_path):
    """What depends on the disk at start (a link another run left in a shared claim) is refused as the pod starts;
    it named the rendered pod's `spec.containers[trainer].volumeMounts[4].subPath`, kuberl's own four mounts first."""
    claim = tmp_path / "runs" / "_claims" / "data"
    claim.mkdir(parents=True)
    (claim / "escape").symlink_to("/")
    job = make_job("linked").workers(1).template({"spec": {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "containers": [{"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "escape/etc"}]}],
    }}).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    ran = kuberl("run", "job.yaml", "--dir", "runs", cwd=tmp_path)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert (f"linked cannot run here: {TRAINER}.volumeMounts[0].subPath: 'escape/etc' leads out of volume 'data' through"
            " a symlink in it ('escape'): this node never follows one") in ran.stdout, ran.stdout
