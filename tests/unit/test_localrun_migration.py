"""What a migrated job needs to run here that its cluster gave it: a script baked into the image
(`torchrun /workspace/train.py`) is not on this machine unless a volume puts it there, and kuberl run
says so before the pod fails with "No such file"; init containers (a sample fetches its script with
one) are not run here, and that is said too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kuberl.core.render import Job, render_pod
from kuberl.core.rules import validate_job
from kuberl.local.sandbox import (
    absent_entry_script,
    image_files,
    image_scripts,
    kubelet_mount_paths,
    missing_script_failure,
)


def pod(command: list[str], mounts: tuple[str, ...] = ()) -> dict:
    return {"spec": {"containers": [{"name": "trainer", "command": command,
                                     "volumeMounts": [{"name": f"v{i}", "mountPath": m} for i, m in enumerate(mounts)]}]}}


@pytest.mark.parametrize(("command", "mounts", "found"), [
    (["torchrun", "--nproc_per_node=2", "/workspace/ddp.py", "--total_epochs=5"], (), ["command[2] '/workspace/ddp.py'"]),
    (["torchrun", "/workspace/ddp.py"], ("/workspace",), []),
    (["sh", "-c", "cd /w && python /workspace/train.py --cfg /app/c.yaml"], (), ["command[2] '/workspace/train.py'"]),
    (["python", "-c", "print(1)"], (), []),
    (["python", "train.py"], (), []),  # relative: the workingDir's, which kuberl run maps
    ([sys.executable, __file__], (), []),  # on this machine: it runs
])
def test_a_script_of_the_image_is_named(command, mounts, found):
    assert image_files(pod(command, mounts)) == found


@pytest.mark.parametrize(("command", "mounts", "found"), [
    (["torchrun", "--rdzv-backend=static", "/app/my_train.py", "--out", "/app/o.py"], (), ("command[2]", "/app/my_train.py")),
    (["python", "-u", "/workspace/train.py"], (), ("command[2]", "/workspace/train.py")),
    (["/app/run.sh"], (), ("command[0]", "/app/run.sh")),  # the program itself
    (["python", __file__, "--emit", "/app/gen.py"], (), None),  # the script is here; a later path is its own argument
    (["torchrun", "/workspace/ddp.py"], ("/workspace",), None),  # in a volume
    (["sh", "-c", "curl -o /app/t.py x && python /app/t.py"], (), None),  # a shell may make it first
    (["bash", "/app/run.sh"], (), None),
    (["python", "-c", "open('t.py', 'w')", "/app/t.py"], (), None),  # inline code may make it first
    # relative: to the directory kuberl run starts the pods in (here the test's own), unless a workingDir is named
    (["torchrun", "--nproc-per-node=2", "train.py"], (), ("command[2]", "train.py")),
    (["python", "./src/train.py"], (), ("command[1]", "./src/train.py")),
    (["python", Path(__file__).name], (), None),
    # only the script's position: a later .py is the script's own argument, or an option's value
    (["python", Path(__file__).name, "--config", "made_later.py"], (), None),
    (["python", "-m", "pkg.train", "--config", "made_later.py"], (), None),  # a module: no script file
    (["torchrun", "--log-dir", "logs.py", Path(__file__).name], (), None),  # torchrun's option takes the next word
    (["torchrun", "--log-dir", "logs.py", "train.py"], (), ("command[3]", "train.py")),
    (["python", "-W", "ignore", "-m", "torch.distributed.run", "--nnodes=1", "/app/t.py"], (), ("command[6]", "/app/t.py")),
    (["torchrun", "--no-python", "/app/run.sh"], (), ("command[2]", "/app/run.sh")),  # the program it starts
    (["torchrun", "-m", "pkg.train", "x.py"], (), None),  # a module
    (["python", "-uc", "print(1)", "/app/t.py"], (), None),  # -c run together with -u
    (["entrypoint.sh", "--config", "c.yaml"], (), None),  # a program named bare: found on PATH, not in the directory
    (["./entrypoint.sh"], (), ("command[0]", "./entrypoint.sh")),  # a path: the directory's
])
def test_the_script_the_command_runs_is_named_when_absent_here(command, mounts, found):
    assert absent_entry_script(pod(command, mounts), str(Path(__file__).parent)) == found


def test_a_relative_script_under_a_working_directory_is_left_to_the_pod():
    """kuberl run maps a workingDir into the pod's root or a volume: not this directory."""
    in_working_dir = pod(["python", "train.py"])
    in_working_dir["spec"]["containers"][0]["workingDir"] = "/app"
    assert absent_entry_script(in_working_dir, str(Path(__file__).parent)) is None


def baked_job(command: list[str], backoff_limit: int = 0, **run_policy) -> dict:
    return {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "baked"}, "spec": {
        "trainer": "custom", "workers": 1, "runPolicy": {"backoffLimit": backoff_limit, **run_policy},
        "template": {"spec": {"initContainers": [{"name": "fetch", "image": "alpine/git", "command": ["git", "clone", "x"]}],
                              "containers": [{"name": "trainer", "command": command}]}}}}


def kuberl_run(tmp_path: Path, job: dict, timeout: int = 120) -> tuple[int, str]:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "run", "job.yaml", "--dir", "runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return done.returncode, done.stdout + done.stderr


def test_kuberl_run_refuses_a_script_of_the_image_before_any_pod_in_one_line(tmp_path):
    """Each process of the gang printed torchrun's or python's traceback (145 lines for the bring-your-own example)
    before the run stopped with exit 3: the script the command runs is known absent before it starts."""
    code, out = kuberl_run(tmp_path, baked_job(["python", "/workspace/train.py"]))
    assert code == 3, out[-2000:]  # EXIT_CANNOT_RUN
    assert "not run here (only the trainer container's command runs): spec.initContainers[fetch]" in out, out[-2000:]
    # the field the user wrote, not a bare command[1]
    assert ("baked cannot run here: spec.template.spec.containers[0].command[1] '/workspace/train.py' is a file of the"
            " image, in no volume, and not on this machine: mount a volume at its directory") in out, out[-2000:]
    assert "creating" not in out and "No such file" not in out and "Traceback" not in out, out[-2000:]


def test_kuberl_run_refuses_a_relative_script_not_where_it_starts_the_pods(tmp_path):
    """`torchrun train.py` from another directory: each process said "can't open file" in torchrun's traceback."""
    job = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "mine"}, "spec": {
        "trainer": "custom", "workers": 1, "template": {"spec": {"containers": [
            {"name": "trainer", "command": ["torchrun", "--standalone", "train.py"]}]}}}}
    code, out = kuberl_run(tmp_path, job)
    assert code == 3, out[-2000:]
    assert (f"mine cannot run here: spec.template.spec.containers[0].command[2] 'train.py' is not in {tmp_path}, where"
            " kuberl run starts the pods (the container names no workingDir)") in out, out[-2000:]
    assert "creating" not in out and "Traceback" not in out, out[-2000:]


def test_kuberl_run_warns_of_a_script_a_shell_runs_before_the_pod_fails(tmp_path):
    code, out = kuberl_run(tmp_path, baked_job(["sh", "-c", "python /workspace/train.py"]))
    assert code == 1, out[-2000:]
    assert "not run here (only the trainer container's command runs): spec.initContainers[fetch]" in out, out[-2000:]
    assert ("warning: spec.template.spec.containers[0].command[2] '/workspace/train.py': a file of the image, in no volume"
            in out), out[-2000:]


@pytest.mark.parametrize(("message", "found"), [
    ("exit code 2: /usr/bin/python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory",
     "/workspace/train.py"),
    ("exit code 127: bash: /app/run.sh: No such file or directory", "/app/run.sh"),
    ("exit code 1: Traceback ... FileNotFoundError: [Errno 2] No such file or directory: '/data/set.csv'", None),
    ("exit code 1: /workspace/train.py: line 3: CUDA error", None),  # the script ran: a restart may help
    ("exit code 2: python3: can't open file '/home/me/workspace/train.py': [Errno 2] No such file or directory", None),
    ("exit code 127: sh: /app/run.sh.bak: No such file or directory", None),  # another file ending alike
])
def test_a_failure_names_the_absent_script_only_when_it_was_not_found(message, found):
    assert missing_script_failure(message, ["/workspace/train.py", "/app/run.sh"]) == found


SHELL_RUNS_IT = ["sh", "-c", "python /workspace/train.py"]  # a shell may make it first: the pod is started


def test_kuberl_run_stops_at_the_first_failure_of_an_absent_script_instead_of_spending_its_restarts(tmp_path):
    # 3 restarts: 30 + 60 + 120 s
    code, out = kuberl_run(tmp_path, baked_job(SHELL_RUNS_IT, 3, restartBackoffSeconds=30), timeout=60)
    assert code == 3, out[-2000:]  # EXIT_CANNOT_RUN: this machine cannot run it
    assert ("baked cannot run here: '/workspace/train.py' is not on this machine (warned above), so every restart"
            " would fail alike") in out, out[-2000:]
    assert "generation 1: creating" not in out  # no second gang


def test_the_rerun_of_a_run_that_could_not_run_here_says_so_not_that_it_ended_while_restarting(tmp_path):
    """The run above stops with exit 3 after its first failure, which lifecycle.decide had already recorded as a
    restart: status.json said Restarting, and the same command again said "last run: ended while restarting", as
    after a runner killed mid-run. Its record says it failed, why, and the rerun says that."""
    outs = []
    for _ in range(2):
        code, out = kuberl_run(tmp_path, baked_job(SHELL_RUNS_IT, 3, restartBackoffSeconds=30), timeout=60)
        outs.append(out)
        assert code == 3, outs[-1][-2000:]
        status = json.loads((tmp_path / "runs" / "baked" / "status.json").read_text())
        failed = [c for c in status["conditions"] if c["type"] == "Failed"]
        assert status["phase"] == "Failed" and failed and failed[0]["reason"] == "CannotRunHere", status
        assert "'/workspace/train.py' is not on this machine" in failed[0]["message"], status
    assert "running baked again (last run: stopped, as this machine could not run it)" in outs[1], outs[1][-2000:]
    assert "ended while" not in outs[1], outs[1][-2000:]


def test_a_relative_mount_path_is_under_the_root_as_a_kubelet_mounts_it(tmp_path):
    """`mountPath: app` is /app in a cluster: the API server takes it and the kubelet's makeMounts mounts
    it at filepath.Clean("/" + path) (pkg/kubelet/kubelet_pods.go). kuberl run refused the job with exit 3,
    "spec.containers[trainer].volumeMounts[4].mountPath: 'app' is not an absolute path", a field the job
    does not have, after kuberl validate had passed it."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text("print('ran from the volume')\n")
    job = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "rel"}, "spec": {
        "trainer": "custom", "workers": 1, "runPolicy": {"backoffLimit": 0},
        "template": {"spec": {"volumes": [{"name": "code", "hostPath": {"path": str(code)}}],
                              "containers": [{"name": "trainer", "command": ["python", "/app/t.py"],
                                              "volumeMounts": [{"name": "code", "mountPath": "app"}]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "run", "job.yaml", "--dir", "runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-2000:]
    assert "a file of the image" not in out
    assert "ran from the volume" in out


BRING_YOUR_OWN = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "bring-your-own-trainer.yaml"


def test_the_bring_your_own_example_says_how_kuberl_run_runs_it_here_and_that_way_runs_its_script():
    """A new user's `kuberl run` of the example stopped with exit 3 ('/app/my_train.py' is not on this machine) and
    the example said nothing of running it here: its header now gives the volume, which this checks is enough."""
    text = BRING_YOUR_OWN.read_text()
    recipe = {line.split(":", 1)[0].strip("# "): yaml.safe_load(line.split(":", 1)[1].split("  (")[0])
              for line in text.splitlines() if line.startswith(("#   volumes:", "#   volumeMounts:"))}
    assert set(recipe) == {"volumes", "volumeMounts"}, text[:800]

    def local_pod(document: dict) -> dict:  # as kuberl run reads the pod it renders (runner._run_held)
        job = Job(document["metadata"]["name"], validate_job(document))
        return kubelet_mount_paths(render_pod(job, "default", "0", 0, target="local"))

    def scripts(document: dict) -> list[tuple[str, str]]:
        return image_scripts(local_pod(document))

    def entry_script(document: dict) -> tuple[str, str] | None:
        return absent_entry_script(local_pod(document), str(Path.cwd()))

    document = yaml.safe_load(text)
    assert scripts(document) == [("command[3]", "/app/my_train.py")]
    assert entry_script(document) == ("command[3]", "/app/my_train.py")  # refused before any pod, as its header says
    template = document["spec"]["template"]["spec"]
    template["volumes"] += recipe["volumes"]
    template["containers"][0]["volumeMounts"] += recipe["volumeMounts"]
    assert scripts(document) == [] and entry_script(document) is None
