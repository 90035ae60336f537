"""A local pod starts as a container does: a clean environment, the trainer
environment's executables, command-line paths inside its volumes, and every
path the pod names kept inside its root."""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from kuberl.core import contract
from kuberl.local.process import (
    PodProcess,
    container_base_env,
    gpus_short,
    host_gpus,
    launch,
    pod_gpus,
)
from kuberl.local.sandbox import (
    LocalRunError,
    path_problems,
    prepare_sandbox,
    trainer_container,
)

from tests.support.cputime import cpu_seconds


def pod_with(container: dict, volumes: list[dict] | None = None) -> dict:
    return {"metadata": {"name": "p-0"}, "spec": {"hostname": "p-0", "containers": [{"name": "trainer", **container}],
                                                  "volumes": volumes or []}}


def test_the_callers_shell_does_not_reach_the_container():
    caller = {"WORLD_SIZE": "99", "RANK": "42", "PATH": "/opt/elsewhere/bin", "VIRTUAL_ENV": "/x", "PYTHONPATH": "/y",
              "HOME": "/home/me", "LANG": "en_GB.UTF-8", "CUDA_VISIBLE_DEVICES": "1", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
    base = container_base_env(caller)
    assert set(base) == {"PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"}
    assert base["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert "/opt/elsewhere/bin" not in base["PATH"]
    assert (base["HOME"], base["LANG"], base["CUDA_VISIBLE_DEVICES"]) == ("/home/me", "en_GB.UTF-8", "1")
    assert container_base_env({})["LANG"] == "C.UTF-8" and "CUDA_VISIBLE_DEVICES" not in container_base_env({})


def test_the_machines_gpus_are_its_cuda_visible_devices_else_the_nvidia_drivers_list(tmp_path):
    """What `kuberl run` deals out to its pods (no CUDA or torch here): the host's CUDA_VISIBLE_DEVICES entries as CUDA
    reads them (it stops at the first empty or negative one), else one index per GPU in /proc/driver/nvidia/gpus."""
    driver = tmp_path / "gpus"
    driver.mkdir()
    for bus in ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"):
        (driver / bus).mkdir()
    assert host_gpus({}, str(driver)) == ["0", "1", "2"]
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8d2e,MIG-1a4c, 3"}, str(driver)) == ["GPU-8d2e", "MIG-1a4c", "3"]
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "2,-1,3"}, str(driver)) == ["2"]
    assert host_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(driver)) == []
    assert host_gpus({}, str(tmp_path / "no-driver")) is None


@pytest.mark.parametrize(("offered", "gpus", "visible"), [
    (["0", "1", "2", "3", "4", "5", "6", "7"], 4, ["0,1,2,3", "4,5,6,7"]),  # two 4-GPU pods on an 8-GPU machine
    (["0", "1", "2", "3", "4", "5", "6", "7"], 1, ["0", "1"]),
    (["GPU-a", "GPU-b", "GPU-c", "GPU-d"], 2, ["GPU-a,GPU-b", "GPU-c,GPU-d"]),  # the caller's own choice, dealt out
    (["0", "1"], 0, ["", ""]),  # a pod that asks for no GPU sees none, as in a cluster
    ([], 4, ["", ""]),  # the caller hid every GPU (CUDA_VISIBLE_DEVICES=""): hidden from the pods too
    (None, 4, [None, None]),  # no telling (no NVIDIA driver): nothing set, the ranks see what CUDA sees
])
def test_each_local_pod_sees_gpus_of_its_own_as_a_device_plugin_gives_them(offered, gpus, visible):
    """Every pod saw every GPU: the ranks of pods 0 and 1 both took cuda:0 (LOCAL_RANK 0 each), which NCCL refuses."""
    assert [pod_gpus(offered, rank, gpus) for rank in (0, 1)] == visible


def test_pods_that_cannot_each_have_gpus_of_their_own_are_refused_naming_the_fields():
    assert gpus_short(["0", "1", "2"], 2, 2).startswith("this machine offers 3 GPU(s), and 2 pods of spec.gpusPerWorker 2 take 4")
    assert gpus_short(["0", "1", "2", "3"], 2, 2) is None
    assert gpus_short(["0"], 1, 4) is None  # one pod: its ranks say spec.gpusPerWorker (the trainer's ConfigError)
    assert gpus_short(["0"], 2, 0) is None and gpus_short([], 2, 1) is None and gpus_short(None, 2, 1) is None


def test_by_default_the_launch_starts_from_the_clean_environment_plus_the_pods(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "99")
    monkeypatch.setenv("RANK", "42")
    monkeypatch.setenv("SOMETHING_OF_MINE", "x")
    started = launch(pod_with({"command": ["python", "-c", "pass"]}), str(tmp_path), {"RANK": "1"})
    assert started.env["RANK"] == "1"
    assert "WORLD_SIZE" not in started.env and "SOMETHING_OF_MINE" not in started.env
    assert started.env["TMPDIR"] == str(tmp_path / "tmp") and started.env[contract.ENV_FS_ROOT] == str(tmp_path)


def test_console_scripts_of_the_trainer_environment_resolve_as_python_does(tmp_path):
    started = launch(pod_with({"command": ["torchrun", "--nnodes=1", "x.py"]}), str(tmp_path), {})
    assert started.argv[0] == os.path.join(os.path.dirname(sys.executable), "torchrun")
    assert launch(pod_with({"command": ["python3", "-V"]}), str(tmp_path), {}).argv[0] == sys.executable
    assert launch(pod_with({"command": ["sh", "-c", "true"]}), str(tmp_path), {}).argv[0] == "sh"  # the image's PATH


def test_an_images_absolute_path_to_a_console_script_this_machine_lacks_is_the_trainer_environments(tmp_path):
    """PyTorch's images put torchrun in /opt/conda/bin: `/opt/conda/bin/torchrun` was a StartError here
    (No such file or directory) while `/opt/conda/bin/python` ran this interpreter."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    assert launch(pod_with({"command": ["/opt/conda/bin/torchrun", "x.py"]}), str(tmp_path), {}).argv[0] == torchrun
    assert launch(pod_with({"command": ["/opt/conda/bin/python", "-V"]}), str(tmp_path), {}).argv[0] == sys.executable
    mine = tmp_path / "app" / "torchrun"  # a file of that name in a volume is the user's own program
    mine.parent.mkdir()
    mine.write_text("#!/bin/sh\n")
    container = {"command": ["/app/torchrun"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]}
    assert launch(pod_with(container), str(tmp_path), {}).argv[0] == str(mine)
    assert launch(pod_with({"command": ["/opt/conda/bin/not-a-script"]}), str(tmp_path), {}).argv[0] == "/opt/conda/bin/not-a-script"


def test_absolute_paths_under_a_mount_are_that_volumes_files(tmp_path):
    container = {"command": ["python", "/app/train.py"], "args": ["--data=/data/x", "/data/sets/a.csv", "/application/z", "/app",
                                                                  "--dist-url=file:///data/pg", "file:///app/pg", "file:///opt/pg",
                                                                  "data.root=/data/sets", "+exp=/app/e.yaml", "/app/a=b",
                                                                  "--files=/data/a.csv,/data/b.csv", "/app:/opt/lib"],
                 "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "sets", "mountPath": "/data/"}]}
    started = launch(pod_with(container), str(tmp_path), {})
    assert started.argv[1:] == [str(tmp_path / "app/train.py"), f"--data={tmp_path}/data/x", str(tmp_path / "data/sets/a.csv"),
                                "/application/z", str(tmp_path / "app"), f"--dist-url=file://{tmp_path}/data/pg",
                                f"file://{tmp_path}/app/pg", "file:///opt/pg", f"data.root={tmp_path}/data/sets",
                                f"+exp={tmp_path}/app/e.yaml", str(tmp_path / "app/a=b"),
                                f"--files={tmp_path}/data/a.csv,{tmp_path}/data/b.csv", f"{tmp_path}/app:/opt/lib"]


def test_a_long_chain_of_assignments_or_dashes_is_read_in_one_pass(tmp_path):
    """An argument `a=a=…` (3,000 of them) ended kuberl run in a RecursionError traceback, one level per `=`; one of
    60,000 dashes took 4.5 s of backtracking before the pod started (a 1 MiB one, hours)."""
    container = {"command": ["python", "a=" * 3000 + "/app/x", "-" * 200_000, "--k=v=/app/y"],
                 "volumeMounts": [{"name": "code", "mountPath": "/app"}]}
    # No count of the regex's steps exists: 20 ms of CPU with two CPU burners running, the overlapping classes 2.05 s
    # at 40,000 dashes (quadratic: about 50 s at 200,000); 1 s sits near the geometric middle (1.0 s).
    started, seconds = cpu_seconds(lambda: launch(pod_with(container), str(tmp_path), {}))
    assert seconds < 1, seconds
    argv = started.argv
    assert argv[1:] == ["a=" * 3000 + f"{tmp_path}/app/x", "-" * 200_000, f"--k=v={tmp_path}/app/y"]


def test_a_chain_of_assignments_as_long_as_a_job_file_holds_is_read_in_linear_time(tmp_path):
    """The loop that read `a=a=…` copied the rest of the argument at each `=`: 300,000 of them (600 KB, less than
    the 1.5 MiB a job file may hold) took 6 s before the pod started, 750,000 about 40 s."""
    container = {"command": ["python", "a=" * 300_000 + "/app/x"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]}
    # No count of the copies exists: 88 ms of CPU with two CPU burners running, the copying loop 3.3 s here (6 s in the
    # docstring); 0.7 s sits near the geometric middle (0.54-0.73 s).
    started, seconds = cpu_seconds(lambda: launch(pod_with(container), str(tmp_path), {}))
    assert seconds < 0.7, seconds
    argv = started.argv
    assert argv[1] == "a=" * 300_000 + f"{tmp_path}/app/x"


@pytest.mark.parametrize("command,expected", [
    (["sh", "-c", "python /app/train.py --data=/data/x"], "python {root}/app/train.py --data={root}/data/x"),
    (["/bin/bash", "-ec", "cd /app && torchrun '/app/t.py' /application"], "cd {root}/app && torchrun '{root}/app/t.py' /application"),
    (["sh", "-c", 'echo "$X/app" a/app /app:/data'], 'echo "$X/app" a/app {root}/app:{root}/data'),
    (["sh", "-c", "python t.py --dist-url file:///data/pg"], "python t.py --dist-url file://{root}/data/pg"),
    (["python", "-c", "open('/app/x')"], "open('/app/x')"),  # a program's text is not a shell line
])
def test_paths_under_a_mount_in_a_shell_line_are_that_volumes_files(tmp_path, command, expected):
    """PyTorchJob manifests often say `command: [sh, -c, "python /workspace/train.py ..."]`."""
    container = {"command": command, "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "sets", "mountPath": "/data"}]}
    assert launch(pod_with(container), str(tmp_path), {}).argv[2] == expected.format(root=tmp_path)


def test_env_values_naming_paths_under_a_mount_are_that_volumes_files(tmp_path):
    """PYTHONPATH=/app, OUTPUT_DIR=/shared/out, INIT_METHOD=file:///shared/pg: the manifest's env names its
    volumes as its command does; kuberl's own names and other paths stay as written."""
    container = {"command": ["python", "-m", "train"],
                 "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "shared", "mountPath": "/shared/"}]}
    pod_env = {"PYTHONPATH": "/app:/opt/lib", "OUTPUT_DIR": "/shared/out", "INIT_METHOD": "file:///shared/pg",
               "URL": "http://host/app", "OTHER": "/application", contract.ENV_CONFIG: "/app/config.json"}
    env = launch(pod_with(container), str(tmp_path), pod_env).env
    assert (env["PYTHONPATH"], env["OUTPUT_DIR"], env["INIT_METHOD"]) == (
        f"{tmp_path}/app:/opt/lib", f"{tmp_path}/shared/out", f"file://{tmp_path}/shared/pg")
    assert (env["URL"], env["OTHER"], env[contract.ENV_CONFIG]) == ("http://host/app", "/application", "/app/config.json")


def test_a_root_a_shell_would_split_is_refused_rather_than_rewritten(tmp_path):
    container = {"command": ["sh", "-c", "python /app/train.py"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]}
    with pytest.raises(LocalRunError, match="shell"):
        launch(pod_with(container), str(tmp_path / "my runs"), {})


def test_a_volume_script_runs_through_the_sandbox(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.py").write_text("print('hello')\n")
    pod = pod_with({"command": ["python", "/app/hello.py"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]},
                   [{"name": "code", "hostPath": {"path": str(code)}}])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, str)
    started = launch(pod, root, {})
    assert Path(started.argv[1]).read_text() == "print('hello')\n"


def test_an_ended_pods_mounts_are_taken_down_and_its_volumes_files_stay(tmp_path):
    """A kubelet unmounts a terminated pod's volumes. Left in runs/<job>/pods/<pod>/root, the checkpoint claim's
    mount was a second path to it under runs/, and `tensorboard --logdir runs` listed every run twice."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "write.py").write_text("import os\nopen(os.path.join(os.path.dirname(__file__), 'written'), 'w').write('x')\n")
    pod = pod_with({"command": ["python", "/app/write.py"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]},
                   [{"name": "code", "hostPath": {"path": str(code)}}])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, str)
    assert os.path.islink(os.path.join(root, "app"))
    process = PodProcess(launch(pod, root, {}), "[p-0]", io.StringIO())
    assert process.wait(120) == 0, "\n".join(process.tail)
    assert not os.path.lexists(os.path.join(root, "app"))
    assert (code / "written").read_text() == "x" and (code / "write.py").exists()


@pytest.mark.parametrize("container,volumes,field", [
    ({"volumeMounts": [{"name": "v", "mountPath": "/../../x"}]}, [], "volumeMounts[0].mountPath"),
    ({"volumeMounts": [{"name": "v", "mountPath": "relative"}]}, [], "volumeMounts[0].mountPath"),
    ({"volumeMounts": [{"name": "v", "mountPath": "/"}]}, [], "volumeMounts[0].mountPath"),
    ({"volumeMounts": [{"name": "v", "mountPath": "/a", "subPath": "../../x"}]}, [], "volumeMounts[0].subPath"),
    ({"volumeMounts": [{"name": "v", "mountPath": "/a", "subPath": "/etc"}]}, [], "volumeMounts[0].subPath"),
    ({"terminationMessagePath": "/../../../x"}, [], "terminationMessagePath"),
    ({"workingDir": "/w/../../.."}, [], "workingDir"),
    ({}, [{"name": "c", "persistentVolumeClaim": {"claimName": "../../x"}}], "spec.volumes[0].persistentVolumeClaim.claimName"),
    ({}, [{"name": "c", "configMap": {"name": "a/../../b"}}], "spec.volumes[0].configMap.name"),
    ({}, [{"name": "c", "configMap": {"name": "b\n"}}], "spec.volumes[0].configMap.name"),  # matched whole, as Go does
    ({"terminationMessagePath": "/"}, [], "terminationMessagePath"),
    ({"terminationMessagePath": "/data/", "volumeMounts": [{"name": "d", "mountPath": "/data"}]},
     [{"name": "d", "emptyDir": {}}], "terminationMessagePath"),
])
def test_a_path_that_leaves_the_pods_root_is_refused_naming_its_field(tmp_path, container, volumes, field):
    pod = pod_with({"command": ["python", "-c", "pass"], **container}, volumes)
    problems = path_problems(pod, trainer_container(pod))
    assert len(problems) == 1 and field in problems[0], problems
    outside = tmp_path / "outside"
    with pytest.raises(LocalRunError, match=field.replace("[", r"\[").replace("]", r"\]")):
        prepare_sandbox(str(tmp_path / "sandbox" / "pod"), pod, trainer_container(pod),
                        {}, lambda c: str(outside / "claims" / c))
    assert not outside.exists() and not (tmp_path / "x").exists()


def test_paths_inside_the_root_pass():
    pod = pod_with({"command": ["python"], "workingDir": "/work/../app", "terminationMessagePath": "/dev/termination-log",
                    "volumeMounts": [{"name": "c", "mountPath": "/checkpoints", "subPath": "job/a"}]},
                   [{"name": "c", "persistentVolumeClaim": {"claimName": "my-claim.v2"}}])
    assert path_problems(pod, trainer_container(pod)) == []


@pytest.mark.parametrize("container,volumes", [
    ({"volumeMounts": [{"mountPath": "/data"}]}, [{"name": "d", "emptyDir": {}}]),  # no name: the API server's "Required value"
    ({"volumeMounts": [{"name": "d", "mountPath": "/a/b"}, {"name": "e", "mountPath": "/a"}]},
     [{"name": "d", "emptyDir": {}}, {"name": "e", "emptyDir": {}}]),  # nested mounts: a symlink cannot sit under another here
])
def test_a_pod_this_node_cannot_lay_out_is_a_local_run_error_not_a_traceback(tmp_path, container, volumes):
    pod = pod_with({"command": ["python", "-c", "pass"], **container}, volumes)
    with pytest.raises(LocalRunError, match=r"spec.containers\[trainer\](: |\.volumeMounts\[0\]\.mountPath: .*)cannot lay out"):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, str)


def test_a_shell_line_is_rewritten_once_even_when_the_root_is_under_a_mount_path(tmp_path):
    container = {"command": ["sh", "-c", "python /app/t.py /tmp/x"],
                 "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "scratch", "mountPath": "/tmp"}]}
    root = "/tmp/runs/j/pods/j-0/root"
    assert launch(pod_with(container), root, {}).argv[2] == f"python {root}/app/t.py {root}/tmp/x"


def test_args_without_a_command_are_refused_here_naming_the_entrypoint(tmp_path):
    """A cluster runs the image's ENTRYPOINT with args alone; here there is no image, so the run
    stops before any pod starts instead of running the first arg and crash-looping."""
    with pytest.raises(LocalRunError, match=r"spec.containers\[trainer\].command: unset.*ENTRYPOINT"):
        launch(pod_with({"args": ["--backend", "gloo"]}), str(tmp_path), {})


def test_tensorboard_lists_a_live_runs_files_once(tmp_path, monkeypatch):
    """Rank 0's root mounts the checkpoint volume (a link to runs/<job>/checkpoints): with the pods' roots under
    runs/<job>/pods/, `tensorboard --logdir runs` listed a live run twice, once through that link. The roots are
    outside the run directory now (sandbox.pod_roots_dir); TensorBoard's own walker, run by the live pod, finds the
    event file it wrote once, where it lies."""
    import yaml
    from kuberl import cli

    monkeypatch.chdir(tmp_path)  # the pod starts here: RUNS relative (a /tmp/... value would be the pod's own /tmp volume)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    (tmp_path / "runtime").mkdir(mode=0o700)
    runs = tmp_path / "runs"
    script = ("import os; from tensorboard.backend.event_processing import io_wrapper\n"
              "tb = os.path.join(os.environ['KUBERL_FS_ROOT'], 'checkpoints', 'tb'); os.makedirs(tb)\n"
              "open(os.path.join(tb, 'events.out.tfevents.1.live'), 'wb').close()\n"
              "print('root', os.environ['KUBERL_FS_ROOT'])\n"
              "print('listed', sorted(io_wrapper.GetLogdirSubdirectories(os.environ['RUNS'])))\n")
    job = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "live"}, "spec": {
        "trainer": "custom", "workers": 1, "runPolicy": {"backoffLimit": 0}, "template": {"spec": {"containers": [{
            "name": "trainer", "command": ["python", "-c", script], "env": [{"name": "RUNS", "value": "runs"}]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(runs)]) == 0
    log = (runs / "live" / "logs" / "live-0-g0.log").read_text()
    assert f"listed {[os.path.join('runs', 'live', 'checkpoints', 'tb')]}" in log, log
    root = next(line.split(" ", 1)[1] for line in log.splitlines() if line.startswith("root "))
    assert not root.startswith(str(runs)) and root.startswith(str(tmp_path / "runtime")), root
    assert not os.path.lexists(os.path.dirname(os.path.dirname(root)))  # the run's roots go when it ends


def test_a_relative_runtime_directory_is_ignored_as_the_xdg_specification_says(tmp_path, monkeypatch):
    """XDG_RUNTIME_DIR=. made the roots' and the port reservations' directories under whatever directory kuberl run
    was started in (outside any run directory), another from each directory."""
    from kuberl.local.runner import port_reservations
    from kuberl.local.sandbox import make_pod_roots

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", ".")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read afresh
    made, reservations = make_pod_roots(str(tmp_path / "runs" / "job")), port_reservations()
    assert made.startswith(str(tmp_path / "tmp") + "/") and reservations.startswith(str(tmp_path / "tmp") + "/")
    assert sorted(os.listdir(tmp_path)) == ["tmp"]


def test_the_roots_are_kept_only_in_a_directory_private_to_this_user(tmp_path, monkeypatch):
    """The roots' directory is named, not random (a later run finds an earlier runner's leftover processes by it), so
    in a shared temp directory another user could make it first, or put a link there: the run dir's own pods/ then."""
    from kuberl.local.sandbox import make_pod_roots, pod_roots_dir

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    base = tmp_path / f"kuberl-{os.getuid()}-roots"
    made = make_pod_roots(str(tmp_path / "runs" / "job"))
    assert made == pod_roots_dir(str(tmp_path / "runs" / "job")) and os.path.dirname(made) == str(base)
    assert stat.S_IMODE(os.lstat(base).st_mode) == 0o700 and os.path.isdir(made)
    assert pod_roots_dir(str(tmp_path / "runs" / "other")) != made  # a run's own
    base.chmod(0o777)  # anyone may put a link in it
    assert make_pod_roots(str(tmp_path / "runs" / "job")) is None
    base.chmod(0o700)
    shutil.rmtree(base)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    base.symlink_to(tmp_path / "elsewhere")
    assert make_pod_roots(str(tmp_path / "runs" / "job")) is None and not list((tmp_path / "elsewhere").iterdir())
