"""`kuberl run` against a careless or hostile job file: ConfigMap volumes, envFrom and env sources
shaped as no cluster would take them. Every refusal is the API server's or the kubelet's own rule,
named below with the Kubernetes source it comes from, and is a LocalRunError (or SystemExit for the
file) naming the field: never a traceback, never a write outside the pod's sandbox."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys

import pytest
from kuberl.core.podsource import source_problems
from kuberl.local.process import Launch, PodProcess, launch
from kuberl.local.runner import split_documents
from kuberl.local.sandbox import (
    LocalRunError,
    configmap_files,
    path_problems,
    prepare_sandbox,
    trainer_container,
    write_files,
)

JOB = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "j"}, "spec": {}}
SCRIPTS = {"train.py": "print('train')\n", "eval.py": "print('eval')\n"}


def pod_with(container: dict | None = None, volumes: list[dict] | None = None) -> dict:
    return {"metadata": {"name": "p-0"}, "spec": {"hostname": "p-0", "volumes": volumes or [],
                                                  "containers": [{"name": "trainer", "command": ["python"], **(container or {})}]}}


def code_volume(**source) -> dict:
    return {"name": "code", "configMap": {"name": "scripts", **source}}


def laid_out(tmp_path, volume: dict, configmaps: dict | None = None, mount: dict | None = None) -> str:
    pod = pod_with({"volumeMounts": [{"name": volume["name"], "mountPath": "/app", **(mount or {})}]}, [volume])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod),
                           {"scripts": SCRIPTS} if configmaps is None else configmaps, lambda c: str(tmp_path / "claims" / c))
    return os.path.join(root, "app")


def files_under(directory: str) -> dict[str, str]:
    found = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(parent, name)) as f:
                found[os.path.relpath(os.path.join(parent, name), directory)] = f.read()
    return found


# --- items: the kubelet projects only the listed keys, at their paths, with their modes ---------------
# pkg/volume/configmap/configmap.go makePayload: with items, payload[ktp.Path] = data[ktp.Key], mode ktp.Mode
# else defaultMode; ConfigMapVolumeSourceDefaultMode (k8s.io/api/core/v1) is 0644.


def test_items_put_only_the_listed_keys_at_their_paths_with_their_modes(tmp_path):
    """kuberl run ignored items: every key sat at the volume's top level, so `python /app/sub/main.py`
    failed with 'No such file' where a cluster ran it."""
    app = laid_out(tmp_path, code_volume(items=[{"key": "train.py", "path": "sub/main.py", "mode": 0o500}], defaultMode=0o440))
    assert files_under(app) == {"sub/main.py": "print('train')\n"}
    assert stat.S_IMODE(os.stat(os.path.join(app, "sub/main.py")).st_mode) == 0o500


def test_without_items_every_key_is_a_file_with_default_mode_0644_or_defaultmode(tmp_path):
    app = laid_out(tmp_path, code_volume())
    assert files_under(app) == SCRIPTS
    assert stat.S_IMODE(os.stat(os.path.join(app, "train.py")).st_mode) == 0o644
    app = laid_out(tmp_path, code_volume(defaultMode=0o400))
    assert stat.S_IMODE(os.stat(os.path.join(app, "eval.py")).st_mode) == 0o400


def test_each_pod_gets_the_configmap_as_it_is_now_not_keys_left_from_an_earlier_run(tmp_path):
    """The volume was one lasting directory per ConfigMap: a key removed from the file stayed in it."""
    laid_out(tmp_path, code_volume())
    app = laid_out(tmp_path, code_volume(), {"scripts": {"train.py": "v2"}})
    assert files_under(app) == {"train.py": "v2"}


def test_a_subpath_naming_one_key_mounts_that_file(tmp_path):
    """The common way to put one script at a path: it was 'cannot lay out ... File exists'."""
    pod = pod_with({"volumeMounts": [{"name": "code", "mountPath": "/app/train.py", "subPath": "train.py"}]}, [code_volume()])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {"scripts": SCRIPTS}, str)
    with open(os.path.join(root, "app/train.py")) as f:
        assert f.read() == SCRIPTS["train.py"]


def test_null_modes_and_subpath_are_unset_not_refused(tmp_path):
    """defaultMode: null, mode: null and subPath: null are unset in a pod (JSON null); here they stopped the run
    with 'cannot lay out ... TypeError'."""
    volume = code_volume(defaultMode=None, items=[{"key": "train.py", "path": "t.py", "mode": None}])
    app = laid_out(tmp_path, volume, mount={"subPath": None})
    assert files_under(app) == {"t.py": "print('train')\n"}
    assert stat.S_IMODE(os.stat(os.path.join(app, "t.py")).st_mode) == 0o644


def test_two_items_at_one_path_the_last_wins_as_in_the_kubelets_payload_map():
    files = configmap_files(code_volume(items=[{"key": "train.py", "path": "main.py"}, {"key": "eval.py", "path": "./main.py"}]),
                            {"scripts": SCRIPTS})
    assert files == {"main.py": ("print('eval')\n", 0o644)}


@pytest.mark.parametrize("path", [".", "./", "././"])
def test_an_item_path_naming_the_volume_itself_is_refused_as_the_kubelets_write_fails(path):
    with pytest.raises(LocalRunError, match=r"items\[0\].path: .* names the volume's own directory"):
        configmap_files(code_volume(items=[{"key": "train.py", "path": path}]), {"scripts": SCRIPTS})


def test_an_item_that_is_both_a_file_and_a_directory_is_refused_as_the_kubelets_write_fails():
    volume = code_volume(items=[{"key": "train.py", "path": "a"}, {"key": "eval.py", "path": "a/b.py"}])
    with pytest.raises(LocalRunError, match=r"spec.volumes\[code\].configMap.items: 'a' is a file and also the directory"):
        configmap_files(volume, {"scripts": SCRIPTS})


# configmap.go SetUpAt: a missing ConfigMap is an error unless optional (then an empty volume); makePayload:
# "configmap references non-existent config key" unless optional (then the item is skipped).
@pytest.mark.parametrize("volume,configmaps,expected", [
    (code_volume(optional=True), {}, {}),
    (code_volume(optional=True, items=[{"key": "gone", "path": "g"}, {"key": "train.py", "path": "t"}]), {"scripts": SCRIPTS},
     {"t": ("print('train')\n", 0o644)}),
])
def test_optional_leaves_out_what_does_not_exist(volume, configmaps, expected):
    assert configmap_files(volume, configmaps) == expected


@pytest.mark.parametrize("volume,configmaps,field", [
    (code_volume(), {}, r"spec.volumes\[code\].configMap.name: ConfigMap 'scripts' does not exist"),
    (code_volume(items=[{"key": "gone", "path": "g"}]), {"scripts": SCRIPTS}, r"spec.volumes\[code\].configMap.items\[0\].key"),
])
def test_what_does_not_exist_stops_the_pod_before_it_starts(tmp_path, volume, configmaps, field):
    """A missing ConfigMap was an empty directory here: the pod ran where a cluster's waits in ContainerCreating."""
    with pytest.raises(LocalRunError, match=field):
        laid_out(tmp_path, volume, configmaps)


# --- item paths and modes: validateConfigMapVolumeSource / validateKeyToPath / validateLocalNonReservedPath
# (pkg/apis/core/validation/validation.go: relative, no '..' element, not starting with '..'; mode and
# defaultMode 0..0777) and the kubelet AtomicWriter's validatePath (pkg/volume/util/atomic_writer.go:
# maxPathLength 4096, maxFileNameLength 255).
@pytest.mark.parametrize("source,field", [
    ({"items": [{"key": "train.py", "path": "/etc/cron.d/x"}]}, "items[0].path: '/etc/cron.d/x' must be a relative path"),
    ({"items": [{"key": "train.py", "path": "../../../../x"}]}, "items[0].path: '../../../../x' must not contain '..'"),
    ({"items": [{"key": "train.py", "path": "a/../../x"}]}, "items[0].path: 'a/../../x' must not contain '..'"),
    ({"items": [{"key": "train.py", "path": "..data"}]}, "items[0].path: '..data' must not start with '..'"),
    ({"items": [{"key": "train.py", "path": ""}]}, "items[0].path: required"),
    ({"items": [{"key": "train.py"}]}, "items[0].path: required"),
    ({"items": [{"key": "train.py", "path": "a\0b"}]}, "items[0].path: 'a\\x00b' contains a NUL"),
    ({"items": [{"key": "train.py", "path": "x" * 256}]}, "items[0].path: at most 4096 characters, 255 per name"),
    ({"items": [{"key": "train.py", "path": "/".join(["x" * 200] * 21)}]}, "items[0].path: at most 4096 characters"),
    ({"items": [{"path": "t.py"}]}, "items[0].key: required"),
    ({"items": ["train.py"]}, "items[0]: expected an object"),
    ({"items": "train.py"}, "items: expected a list"),
    ({"defaultMode": 0o1000}, "defaultMode: expected a file mode from 0 to 0777"),
    ({"defaultMode": -1}, "defaultMode: expected a file mode from 0 to 0777"),
    ({"defaultMode": "0644"}, "defaultMode: expected a file mode from 0 to 0777"),
    ({"items": [{"key": "train.py", "path": "t", "mode": 4095}]}, "items[0].mode: expected a file mode from 0 to 0777"),
    ({"name": ""}, "configMap.name: required"),
])
def test_a_volume_source_the_api_server_refuses_is_refused_naming_its_field_and_nothing_is_written(tmp_path, source, field):
    volume = code_volume(**source)
    problems = source_problems(pod_with(volumes=[volume]), trainer_container(pod_with()))
    assert len(problems) == 1 and problems[0].startswith("spec.volumes[code].configMap.") and field in problems[0], problems
    with pytest.raises(LocalRunError, match="configMap"):
        laid_out(tmp_path, volume)
    assert os.listdir(tmp_path) == []  # refused before anything is laid out


def test_a_configmap_volume_that_is_not_an_object_is_refused_not_a_traceback():
    pod = pod_with(volumes=[{"name": "code", "configMap": "scripts"}])
    assert path_problems(pod, trainer_container(pod)) == []
    assert source_problems(pod, trainer_container(pod)) == [
        "spec.volumes[code].configMap: expected an object naming the ConfigMap (got 'scripts')"]


# validateVolumes (pkg/apis/core/validation/validation.go): a volume's name is a DNS-1123 label.
@pytest.mark.parametrize("name", ["../../../../escape", "a/b", "Code", "x" * 64, "code\n"])
def test_a_volume_name_that_is_no_dns_label_is_refused_before_it_names_a_directory(tmp_path, name):
    """An emptyDir volume named '../../x' was created outside the pod's sandbox."""
    pod = pod_with(volumes=[{"name": name, "emptyDir": {}}])
    assert any("spec.volumes[0].name" in p for p in path_problems(pod, trainer_container(pod)))
    with pytest.raises(LocalRunError, match=r"spec.volumes\[0\].name"):
        prepare_sandbox(str(tmp_path / "a" / "b" / "sandbox"), pod, trainer_container(pod), {}, str)
    assert os.listdir(tmp_path) == []


def test_a_termination_message_path_inside_a_volume_is_refused_before_it_empties_the_volumes_file(tmp_path):
    """terminationMessagePath /checkpoints/progress.jsonl truncated the claim's own file at every pod start
    (a kubelet mounts a file of its own over that path, leaving the volume's untouched)."""
    claim = tmp_path / "claims" / "data"
    claim.mkdir(parents=True)
    (claim / "progress.jsonl").write_text("precious\n")
    pod = pod_with({"terminationMessagePath": "/checkpoints/progress.jsonl",
                    "volumeMounts": [{"name": "data", "mountPath": "/checkpoints"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    with pytest.raises(LocalRunError, match=r"terminationMessagePath: '/checkpoints/progress.jsonl' is inside a volume mount"):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(claim))
    assert (claim / "progress.jsonl").read_text() == "precious\n"


@pytest.mark.parametrize("container,volumes,field", [
    ({}, [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}], "spec.volumes[1].name: 'v' is a duplicate"),
    ({"volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a/"}]}, [{"name": "v", "emptyDir": {}}],
     "volumeMounts[1].mountPath: '/a' is mounted twice"),
])
def test_duplicates_the_api_server_refuses_are_named(container, volumes, field):
    pod = pod_with(container, volumes)
    assert [p for p in path_problems(pod, trainer_container(pod)) if field in p]


def test_a_working_directory_the_image_would_have_is_created_as_runc_creates_it(tmp_path):
    """runc creates a missing cwd (opencontainers/runc#1604 'libcontainer: create Cwd when it does not exist');
    here `workingDir: /workspace/proj` was a StartError (No such file or directory) and a crash loop."""
    pod = pod_with({"workingDir": "/workspace/proj"})
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, str)
    assert os.path.isdir(os.path.join(root, "workspace/proj"))


# --- symlinks: nothing is written through one ------------------------------------------------------------


def test_projected_files_never_follow_a_planted_symlink(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    (tmp_path / "vol").mkdir()
    os.symlink(outside, tmp_path / "vol" / "train.py")
    with pytest.raises(FileExistsError):  # the directory is always new here; a leftover is refused, not followed
        write_files(str(tmp_path / "vol"), {"train.py": ("evil", 0o644)})
    assert outside.read_text() == "mine"


def test_a_subpath_through_a_symlink_out_of_its_volume_is_refused(tmp_path):
    """The kubelet's PrepareSafeSubpath refuses a subPath that resolves outside its volume; here the claim's
    directory (which lasts across runs) held a link a process had made, and the mount went to /."""
    claim = tmp_path / "claims" / "data"
    claim.mkdir(parents=True)
    os.symlink("/", claim / "escape")
    pod = pod_with({"volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "escape/etc"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    with pytest.raises(LocalRunError, match=r"volumeMounts\[0\].subPath: 'escape/etc' leads out of volume 'data'"):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(tmp_path / "claims" / c))


@pytest.mark.parametrize("order", [1, -1])  # listed inner first, it was a bare "cannot lay out ... File exists"
def test_a_mount_inside_another_mount_is_refused_rather_than_made_inside_that_volume(tmp_path, order):
    """Mounting /data then /data/cfg made the second symlink inside the first volume (a lasting host directory)."""
    claim = tmp_path / "claims" / "data"
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "code", "mountPath": "/data/cfg"}][::order]
    pod = pod_with({"volumeMounts": mounts}, [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, code_volume()])
    inner = 1 if order == 1 else 0
    with pytest.raises(LocalRunError, match=rf"volumeMounts\[{inner}\].mountPath: '/data/cfg' is inside another mount, '/data' "):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {"scripts": SCRIPTS}, lambda c: str(claim))
    assert not claim.exists() or os.listdir(claim) == []


# --- envFrom and env sources: ValidateEnvFrom, validateEnvVarValueFrom (pkg/apis/core/validation) --------
# An envFrom prefix must pass IsRelaxedEnvVarName (k8s.io/apimachinery/pkg/util/validation): printable
# ASCII but '='. The kubelet (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables) no longer skips keys.
@pytest.mark.parametrize("container,field", [
    ({"envFrom": "settings"}, "envFrom: expected a list"),
    ({"envFrom": [None]}, "envFrom[0]: expected an object"),
    ({"envFrom": [{}]}, "envFrom[0]: expected exactly one of configMapRef or secretRef"),
    ({"envFrom": [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]}, "envFrom[0]: expected exactly one"),
    ({"envFrom": [{"configMapRef": {}}]}, "envFrom[0].configMapRef.name: required"),
    ({"envFrom": [{"configMapRef": "settings"}]}, "envFrom[0].configMapRef: expected an object naming the ConfigMap"),
    ({"envFrom": [{"prefix": "A=", "configMapRef": {"name": "a"}}]}, "envFrom[0].prefix: expected printable ASCII"),
    ({"envFrom": [{"prefix": "A\0", "configMapRef": {"name": "a"}}]}, "envFrom[0].prefix: expected printable ASCII"),
    ({"env": [{"name": "X", "valueFrom": 5}]}, "env[X].valueFrom: expected an object with exactly one"),
    ({"env": [{"name": "X", "valueFrom": {}}]}, "env[X].valueFrom: expected an object with exactly one"),
    ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"key": "k"}}}]}, "env[X].valueFrom.configMapKeyRef.name: required"),
    ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "a"}}}]}, "env[X].valueFrom.configMapKeyRef.key: required"),
    ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "../k"}}}]},
     "env[X].valueFrom.configMapKeyRef.key: expected a ConfigMap key"),
    ({"env": [{"name": "X", "valueFrom": {"fieldRef": {}}}]}, "env[X].valueFrom.fieldRef.fieldPath: required"),
    ({"env": [{"name": "X", "valueFrom": {"resourceFieldRef": "cpu"}}]}, "env[X].valueFrom.resourceFieldRef.resource: required"),
])
def test_an_env_source_the_api_server_refuses_is_named_not_a_traceback(container, field):
    """Each of these ended `kuberl run` in an AttributeError, KeyError or ValueError traceback."""
    pod = pod_with(container)
    problems = source_problems(pod, trainer_container(pod))
    assert len(problems) == 1 and problems[0].startswith(f"spec.containers[trainer].{field}"), problems


# k8s.io/api/core/v1 Container.Command and Args are []string: kubectl's JSON of a string or a number there
# does not decode ("cannot unmarshal number into Go struct field Container...args of type string").
@pytest.mark.parametrize("container,field", [
    ({"command": "python -c print(1)"}, "command: expected a list of strings"),
    ({"command": ["python", "-c"], "args": "print(1)"}, "args: expected a list of strings"),
    ({"command": ["python", "train.py", "--epochs", 10]}, "command[3]: expected a string; quote it (got 10)"),
    ({"command": ["python"], "args": [None]}, "args[0]: expected a string"),
])
def test_a_command_no_cluster_could_decode_is_refused_naming_the_item(container, field):
    """A string command ran its first character ('p': StartError); a number in args was a TypeError traceback."""
    pod = pod_with(container)
    problems = source_problems(pod, trainer_container(pod))
    assert problems == [problems[0]] and problems[0].startswith(f"spec.containers[trainer].{field}"), problems


def test_a_digit_led_envfrom_key_passes_as_the_kubelet_passes_it():
    pod = pod_with({"envFrom": [{"configMapRef": {"name": "a"}}], "env": [{"name": "X", "value": "$(Y)"}]})
    assert source_problems(pod, trainer_container(pod)) == []


@pytest.mark.parametrize("argv,env", [
    ([sys.executable, "-c", "pass\0"], {}),
    ([sys.executable, "-c", "pass"], {"X": "a\0b"}),
    ([sys.executable, "-c", "pass"], {"A=B": "1"}),
])
def test_what_no_process_can_be_started_with_is_a_start_error_as_a_runtime_reports_it(tmp_path, argv, env):
    """The container runtime fails such a container (StartError); here it was a ValueError traceback
    (the kubelet's makeEnvironmentVariables passes NUL bytes on: 'TODO: validate no NUL bytes')."""
    process = PodProcess(Launch(argv, env, str(tmp_path), str(tmp_path / "log")), "[t]")
    assert process.poll() == 128 and process.start_error.startswith("StartError")


# --- the file's ConfigMaps: ValidateConfigMap (pkg/apis/core/validation/validation.go) ---------------------


def configmap(name: str, data: dict, namespace: str | None = None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


@pytest.mark.parametrize("docs,why", [
    # IsConfigMapKey (k8s.io/apimachinery/pkg/util/validation): "must not start with '..'"
    ([JOB, configmap("a", {"..data": "x"})], r"data\.\.\.data: expected a ConfigMap key: .* nor starting with '\.\.'"),
    ([JOB, configmap("a", {"..2026_11_25": "x"})], "starting with '..'"),
    # totalSize > core.MaxSecretSize: 1 MiB of data per ConfigMap, counted in bytes
    ([JOB, configmap("a", {"big": "x" * (1024 * 1024 + 1)})], "data: 1048577 bytes in all"),
    ([JOB, configmap("a", {"a": "é" * (512 * 1024), "b": "x"})], "data: 1048577 bytes in all"),
    # a pod reads ConfigMaps of its own namespace only
    ([{**JOB, "metadata": {"name": "j", "namespace": "ml"}}, configmap("a", {}, "other")], "metadata.namespace 'other', the job 'ml'"),
])
def test_a_configmap_the_api_server_or_a_pod_could_not_use_is_refused(docs, why):
    with pytest.raises(SystemExit, match=why):
        split_documents(docs, "f")


def test_configmaps_at_the_limits_pass():
    job = {**JOB, "metadata": {"name": "j", "namespace": "ml"}}
    _, configmaps = split_documents([job, configmap("a", {"big": "x" * 1024 * 1024}, "ml"), configmap("b", {"k.v": ""})], "f")
    assert set(configmaps) == {"a", "b"}
    assert split_documents([JOB, configmap("a", {}, "ml")], "f")[1] == {"a": {}}  # the job's namespace left to kubectl -n


# --- --set values: read as the job file is (spec.load_documents), not by a second, unbounded reader ---------
@pytest.mark.parametrize("setting,why", [
    ("ppo.hiddenSizes=[8", "not plain YAML: line"),
    ("x=!!python/object/apply:os.system [echo]", "tag !!python/object/apply:os.system is not allowed"),
    ("x=[&a [1,1,1,1,1,1,1,1,1], " + ", ".join(f"&{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcd", "bcde", strict=True))
     + "]", "aliases expand past"),
    ("x=a\n---\nb", "expected one YAML value"),
])
def test_a_set_value_that_is_not_plain_bounded_yaml_is_a_problem_naming_it_not_a_traceback(setting, why):
    """`--set 'x=[1'` ended `kuberl run` in a yaml.scanner traceback."""
    from kuberl.local.runner import BadOverride, apply_overrides

    with pytest.raises(BadOverride) as e:  # the flag's fault, not the file's
        apply_overrides({"spec": {}}, None, [setting])
    assert e.value.problems[0].path == f"--set {setting}" and why in e.value.problems[0].message


def test_set_values_keep_their_meaning():
    from kuberl.local.runner import apply_overrides

    out = apply_overrides({"spec": {}}, None, ["a=null", "b=", "c=1e-3", "d=[1, x]", "e=off"])
    assert out["spec"] == {"a": None, "b": "", "c": 0.001, "d": [1, "x"], "e": False}


# --- the run directory: what a hand, a full disk or another tool left in it -------------------------------
@pytest.mark.parametrize("text", ["", "garbage", "[]", '{"generation": "x"}', '{"generation": -1}', '{"generation": 1e400}',
                                  '{"generation": true}', '{"generation": ' + "9" * 5000 + "}"])
def test_a_damaged_status_is_refused_saying_what_to_do_not_a_traceback(text):
    """A status.json that was not kuberl's JSON ended the resumed run in a JSONDecodeError/ValueError/AttributeError."""
    from kuberl.local.runner import last_status

    with pytest.raises(LocalRunError, match="runs/j/status.json is not a status kuberl run wrote: delete it"):
        last_status(text, "runs/j/status.json")


def test_a_status_kuberl_wrote_resumes():
    from kuberl.local.runner import last_status

    assert last_status('{"generation": 3, "phase": "Suspended"}', "s") == {"generation": 3, "phase": "Suspended"}
    assert last_status("{}", "s") == {}


def test_a_uid_file_that_is_no_uuid_is_refused_and_a_good_one_kept(tmp_path):
    from kuberl.local.runner import job_uid

    uid = job_uid(str(tmp_path))
    assert job_uid(str(tmp_path)) == uid
    (tmp_path / "uid").write_text("$(rm -rf ~)\n")
    with pytest.raises(LocalRunError, match="holds '\\$\\(rm -rf ~\\)', not the uid kuberl run wrote"):
        job_uid(str(tmp_path))


def test_a_uid_link_is_neither_written_through_nor_read(tmp_path):
    """A dangling link at runs/<job>/uid had the new uid written wherever it pointed, outside the run directory;
    one to a file had that file read as the uid."""
    from kuberl.local.runner import job_uid

    run_dir = tmp_path / "runs" / "j"
    run_dir.mkdir(parents=True)
    (run_dir / "uid").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LocalRunError, match="uid is a link or no regular file, not the uid kuberl run wrote: delete it"):
        job_uid(str(run_dir))
    assert not (tmp_path / "elsewhere").exists()


FOREIGN_PROGRESS = ('{"timesteps": 1000, "wall_seconds": 1.0, "episode_return_mean": 20.0}\n'
                    "epoch,loss\n1,0.5\n[1, 2]\n"  # a custom trainer's own CSV in the file, a JSON list
                    '{"timesteps": "many", "eval_return": "good", "wall_seconds": null, "restart": 1}\n'
                    '{"timesteps": 2000, "wall_seconds": 2.0, "episode_return_mean": 3')  # a kill mid-write


def test_a_progress_file_cut_short_or_not_kuberls_ends_the_run_with_its_summary_not_a_traceback(tmp_path):
    """The summary line parsed the file's last line: a line cut short by a kill or a full disk, or a custom
    trainer's own format there, ended a finished run in a JSONDecodeError (or ValueError on 'many')."""
    from kuberl.core.render import Job
    from kuberl.core.rules import validate_job
    from kuberl.local.curves import progress_record
    from kuberl.local.runner import summary

    from tests.support.jobs import make_job

    (tmp_path / "progress.jsonl").write_text(FOREIGN_PROGRESS)
    assert progress_record(FOREIGN_PROGRESS.splitlines())["timesteps"] == "many"
    job = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=10).obj()))
    line = summary(job, {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}, {}, 0, 1.0)
    assert line.startswith("j succeeded: 0 timesteps in 1s, no return yet;"), line


def test_plotting_skips_what_is_not_a_progress_record(tmp_path):
    from kuberl.local.curves import plot

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "progress.jsonl").write_text(FOREIGN_PROGRESS)
    assert plot(str(tmp_path)).endswith("learning-curve.png")


# validateContainerResourceDivisor (pkg/apis/core/validation/validation.go): 1m or 1 for cpu; 1, 1k..1E,
# 1Ki..1Ei for memory and ephemeral-storage; a zero divisor equals the unset one, which
# ExtractContainerResourceValue (pkg/api/v1/resource) reads as 1.
@pytest.mark.parametrize("ref,field", [
    ({"resource": "limits.cpu", "divisor": "-1"}, "divisor: expected 1m or 1 for cpu"),
    ({"resource": "limits.cpu", "divisor": "1n"}, "divisor: expected 1m or 1 for cpu"),
    ({"resource": "requests.memory", "divisor": "1e-9"}, "divisor: expected 1, 1k"),
    ({"resource": "limits.memory", "divisor": "lots"}, "divisor: expected a quantity"),
])
def test_a_divisor_the_api_server_refuses_is_named(ref, field):
    pod = pod_with({"env": [{"name": "N", "valueFrom": {"resourceFieldRef": ref}}]})
    problems = source_problems(pod, trainer_container(pod))
    assert len(problems) == 1 and problems[0].startswith("spec.containers[trainer].env[N].valueFrom.resourceFieldRef.")
    assert field in problems[0], problems


def test_a_zero_divisor_is_the_unset_one_not_a_zero_division():
    """divisor: '0' passes the API server (it equals the unset Quantity); here it was a ZeroDivisionError traceback."""
    from kuberl.local.containerenv import resource_field

    pod = pod_with({"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
    zero = pod_with({"env": [{"name": "N", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}}]})
    assert source_problems(zero, trainer_container(zero)) == []
    assert resource_field(pod, {"resource": "limits.cpu", "divisor": "0"}, 4) == "2"
    assert resource_field(pod, {"resource": "limits.memory", "divisor": "1Mi"}, 4) == "1024"
    assert resource_field(pod, {"resource": "limits.cpu", "divisor": "1m"}, 4) == "2000"


def test_an_env_value_of_null_is_the_empty_string_as_a_kubelet_sets_it():
    """`{name: X, value: null}` (JSON null: Go's zero value, "") was a TypeError traceback in the $(VAR) expansion."""
    from kuberl.local.containerenv import container_env

    pod = pod_with({"env": [{"name": "X", "value": None}, {"name": "Y", "value": "a$(X)b", "valueFrom": None}],
                    "envFrom": [{"prefix": None, "configMapRef": {"name": "cm"}}]})
    env = container_env(pod, trainer_container(pod), "127.0.0.2", {"cm": {"K": "v"}}, lambda name: name, node_cpus=1)
    assert (env["X"], env["Y"], env["K"]) == ("", "ab", "v")


def test_a_line_without_end_is_logged_in_pieces_not_held_whole(tmp_path):
    """One 8 MB line without a newline was read whole into memory (and kept in the log tail): a process printing
    gigabytes that way took the runner with it. containerd splits lines at max_container_log_line_size (16 KiB)."""
    from kuberl.local.process import LOG_LINE_BYTES

    out = tmp_path / "out"
    with open(out, "w") as sink:
        process = PodProcess(Launch([sys.executable, "-c", "import sys; sys.stdout.write('x' * 8_000_000)"], {}, str(tmp_path),
                                    str(tmp_path / "log")), "[t]", sink)
        assert process.wait(30) == 0
    assert max(len(line) for line in process.tail) == LOG_LINE_BYTES
    assert sum(len(line) for line in process.tail) <= 80 * LOG_LINE_BYTES


@pytest.mark.parametrize("replace", ["mkfifo", "symlink"])
def test_a_termination_log_the_process_replaced_is_not_read_through(tmp_path, replace):
    """The process owns its root here (a kubelet's termination file is a mount it cannot replace): a FIFO put in
    its place hung `kuberl run` reading it once the process had failed; a symlink to one hung it the same way."""
    import threading

    log = tmp_path / "termination-log"
    log.write_text("")
    fifo = tmp_path / "elsewhere"
    make = f"os.mkfifo({str(log)!r})" if replace == "mkfifo" else f"os.mkfifo({str(fifo)!r}); os.symlink({str(fifo)!r}, {str(log)!r})"
    process = PodProcess(Launch([sys.executable, "-c", f"import os; os.remove({str(log)!r}); {make}; raise SystemExit(3)"],
                                {}, str(tmp_path), str(log)), "[t]", io.StringIO())
    assert process.wait(30) == 3
    done = []
    reader = threading.Thread(target=lambda: done.append(process.termination_message()), daemon=True)
    reader.start()
    reader.join(5)
    assert done, "termination_message() blocked"


def test_plot_finds_progress_without_following_links_round_in_circles(tmp_path):
    """Two links to '.' in the checkpoint directory made `kuberl plot` (and `kuberl run --plot`) hang in a recursive glob."""
    import threading

    from kuberl.local.curves import plot

    checkpoints = tmp_path / "checkpoints" / "job-uid"
    checkpoints.mkdir(parents=True)
    (checkpoints / "progress.jsonl").write_text('{"timesteps": 1, "episode_return_mean": 2.0, "wall_seconds": 1}\n')
    os.symlink(".", checkpoints / "a")
    os.symlink(".", checkpoints / "b")
    done = []
    worker = threading.Thread(target=lambda: done.append(plot(str(tmp_path))), daemon=True)
    worker.start()
    worker.join(30)
    assert done == [str(tmp_path / "learning-curve.png")]


@pytest.mark.parametrize("link", ["loop", "dangling", "elsewhere"])
def test_a_link_named_progress_jsonl_is_no_progress_file(tmp_path, link):
    """The checkpoint directory is the pods' to write: a progress.jsonl that was a link round to itself ended kuberl
    plot (and kuberl run's summary, which finds the job's other runs the same way) in an OSError traceback, as its
    modification time was read through it; a dangling one in a FileNotFoundError. A link is never read (read_regular_tail)
    so it is no run's progress either; the run's own file beside it is drawn."""
    from kuberl.local.curves import newest_progress_file, plot, progress_files

    run = tmp_path / "runs" / "job"
    (run / "checkpoints" / "job-uid").mkdir(parents=True)
    (run / "checkpoints" / "job-uid" / "progress.jsonl").write_text('{"timesteps": 1, "episode_return_mean": 2.0, "wall_seconds": 1}\n')
    (run / "checkpoints" / "other").mkdir()
    planted = run / "checkpoints" / "other" / "progress.jsonl"
    planted.symlink_to({"loop": "progress.jsonl", "dangling": "gone", "elsewhere": "../job-uid/progress.jsonl"}[link])
    assert progress_files(str(run / "checkpoints")) == [str(run / "checkpoints" / "job-uid" / "progress.jsonl")]
    assert newest_progress_file(str(run)) == str(run / "checkpoints" / "job-uid" / "progress.jsonl")
    assert plot(str(run)) == str(run / "learning-curve.png")


def test_a_progress_file_that_is_a_fifo_does_not_hang_the_summary(tmp_path):
    """A container's FIFO at /checkpoints/progress.jsonl hung `kuberl run` at its summary line."""
    import threading

    from kuberl.local.curves import last_progress

    os.mkfifo(tmp_path / "progress.jsonl")
    done = []
    worker = threading.Thread(target=lambda: done.append(last_progress(str(tmp_path))), daemon=True)
    worker.start()
    worker.join(5)
    assert done == [{}]


@pytest.mark.parametrize("container,volumes,line", [
    ({"command": ["python", "train.py", "--epochs", 10]}, [], "spec.template.spec.containers[trainer].command[3]: expected a string"),
    ({"command": ["x"], "envFrom": [{"prefix": "A=", "configMapRef": {"name": "s"}}]}, [],
     "spec.template.spec.containers[trainer].envFrom[0].prefix: expected printable ASCII"),
    ({"command": ["x"]}, [{"name": "code", "configMap": {"name": "s", "items": [{"key": "k", "path": "../k"}]}}],
     "spec.template.spec.volumes[code].configMap.items[0].path: '../k' must not contain '..'"),
])
def test_validate_reports_what_the_api_server_would_refuse_in_the_operators_pods(tmp_path, capsys, container, volumes, line):
    """`kuberl validate` said "valid" and the operator's pods were then refused at creation."""
    import yaml
    from kuberl import cli

    job = {**JOB, "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", **container}],
                                                                       "volumes": volumes}}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert cli.main(["validate", str(path)]) == 1
    assert f"  {line}" in capsys.readouterr().err


LEAVE_READ_ONLY_TREE = """
import os, sys
from kuberl.local.process import prepare_sandbox, trainer_container
pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "trainer", "command": ["x"]}], "volumes": []}}
sandbox = sys.argv[1]
root = prepare_sandbox(sandbox, pod, trainer_container(pod), {}, str)
os.makedirs(root + "/tmp/cache/pkg")
open(root + "/tmp/cache/pkg/mod.go", "w").close()
os.makedirs(root + "/tmp/closed/x")
for path, mode in (("/tmp/cache/pkg", 0o555), ("/tmp/cache", 0o555), ("/tmp/closed", 0)):
    os.chmod(root + path, mode)
print(os.listdir(prepare_sandbox(sandbox, pod, trainer_container(pod), {}, str) + "/tmp"))
"""


def test_a_pods_read_only_leftovers_do_not_stop_the_next_pod(tmp_path):
    """A pod that left a read-only tree in its root (Go's module cache, a 0555 directory) stopped the gang's
    restart with 'cannot lay out ... File exists': rmtree left it. Run as an ordinary user (root ignores modes)."""
    import shutil
    import subprocess
    import tempfile

    workdir, command = str(tmp_path), []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root, and no setpriv to run as another user")
        workdir = tempfile.mkdtemp()  # pytest's own directory is root's alone
        os.chmod(workdir, 0o777)
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    operator = os.path.dirname(os.path.dirname(sys.modules["kuberl"].__file__))
    try:
        done = subprocess.run([*command, sys.executable, "-c", LEAVE_READ_ONLY_TREE, os.path.join(workdir, "sandbox")],
                              capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": operator})
    finally:
        if workdir != str(tmp_path):
            shutil.rmtree(workdir, ignore_errors=True)  # root removes whatever modes are left
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr[-800:]


def test_containers_the_local_node_does_not_start_are_named_not_skipped_silently():
    """An init container that fetched the script, or a sidecar, was skipped without a word: the trainer then
    failed with 'No such file' and nothing said why."""
    from kuberl.core.render import Job, render_pod
    from kuberl.core.rules import validate_job
    from kuberl.local.process import containers_not_run

    from tests.support.jobs import make_job

    pod = pod_with({}, [])
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "alpine"}]
    pod["spec"]["containers"].append({"name": "log-shipper", "image": "fluent-bit"})
    assert containers_not_run(pod) == ["spec.initContainers[fetch]", "spec.containers[log-shipper]"]
    ours = render_pod(Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=10).obj())), "default", "u", 0,
                      target="local")
    assert containers_not_run(ours) == []


@pytest.mark.parametrize("container,named", [
    ({"command": ["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "t.py"]}, ["command"]),
    ({"command": ["torchrun"], "args": ["--rdzv_endpoint", "127.0.0.1:29400", "t.py"]}, ["args"]),
    ({"command": ["sh", "-c", "python -m torch.distributed.launch --master_addr='localhost' t.py"]}, ["command"]),
    ({"command": ["python", "t.py"], "env": [{"name": "INIT_METHOD", "value": "tcp://localhost:23456"}]}, ["env[INIT_METHOD]"]),
    ({"command": ["torchrun", "--standalone", "--rdzv-endpoint=localhost:0", "t.py"]}, []),  # a gang per pod
    ({"command": ["torchrun", "--nnodes", "1", "--rdzv-endpoint=localhost:29400", "t.py"]}, []),
    ({"command": ["torchrun", "--rdzv-endpoint=localhost.example:29400", "--master-addr=localhostx", "t.py"]}, []),
    ({"command": ["python", "t.py", "--metrics-host=localhost"]}, []),  # not a rendezvous
])
def test_a_rendezvous_at_localhost_is_named_as_one_a_clusters_pods_never_meet_at(container, named):
    """Copied from a one-machine tutorial into a gang of pods: here every pod's localhost is this machine's,
    so kuberl run met there and succeeded; in a cluster each pod waits at its own until a timeout."""
    from kuberl.local.dns import loopback_rendezvous

    assert loopback_rendezvous(pod_with(container, [])) == [f"spec.containers[trainer].{n}" for n in named]


def test_validate_warns_of_a_gang_that_meets_at_localhost(tmp_path, capsys):
    import yaml
    from kuberl import cli

    command = ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "t.py"]
    for workers, warned in ((2, True), (1, False)):
        job = {**JOB, "metadata": {"name": "j"}, "spec": {"trainer": "custom", "workers": workers, "template": {
            "spec": {"containers": [{"name": "trainer", "command": command}]}}}}
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
        assert cli.main(["validate", str(tmp_path / "job.yaml")]) == 0
        err = capsys.readouterr().err
        assert ("warning: spec.containers[trainer].command meets at localhost" in err) == warned, err


def test_validate_refuses_metadata_the_api_server_would(tmp_path, capsys):
    """ValidateObjectMeta applies to custom resources: validate said valid and kubectl apply refused the job."""
    import yaml
    from kuberl import cli

    job = {**JOB, "metadata": {"name": "j", "labels": {"a/b/c": "x"}},
           "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert cli.main(["validate", str(path)]) == 1
    assert "  metadata.labels.a/b/c: expected a key of an optional DNS subdomain" in capsys.readouterr().err


def test_a_second_runner_of_the_same_job_is_refused_while_the_first_runs(tmp_path, monkeypatch):
    """A second `kuberl run` of the job (another terminal) took the first's ranks for a dead runner's leftovers,
    killed them after the grace period, and the two then raced for the same pod directories."""
    from kuberl.local.runner import run_lock

    monkeypatch.chdir(tmp_path)  # the run directory as the docs show it, runs/<job>, not its absolute path
    (tmp_path / "runs" / "j").mkdir(parents=True)
    second = pytest.raises(LocalRunError, match=rf"another kuberl run \(pid {os.getpid()}\) is running this job in runs/j: ")
    with run_lock(str(tmp_path / "runs" / "j")), second, run_lock(str(tmp_path / "runs" / "j")):
        pass
    with run_lock(str(tmp_path)):  # released when the first ends
        pass
    with run_lock(str(tmp_path)):  # released when the first ends
        pass


def test_a_lock_link_is_refused_not_truncated_through(tmp_path, monkeypatch):
    """runs/<job>/lock was opened following a link and truncated to the runner's pid: a link there pointing at a
    file of the user's emptied it."""
    from kuberl.local.runner import run_lock

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "j").mkdir(parents=True)
    (tmp_path / "precious").write_text("kept\n")
    (tmp_path / "runs" / "j" / "lock").symlink_to(tmp_path / "precious")
    with pytest.raises(LocalRunError, match="runs/j/lock is a link or no regular file, not the lock kuberl run keeps"
                                            " there: delete it"), run_lock(str(tmp_path / "runs" / "j")):
        pass
    assert (tmp_path / "precious").read_text() == "kept\n"


def test_run_takes_the_job_on_stdin_as_validate_does(tmp_path, monkeypatch):
    """`kuberl run -` read stdin for its checks, then opened a file named '-': a FileNotFoundError traceback."""
    import yaml
    from kuberl import cli

    job = {**JOB, "metadata": {"name": "stdin-job"}, "spec": {"trainer": "custom", "runPolicy": {"backoffLimit": 0}, "template": {
        "spec": {"containers": [{"name": "trainer", "command": ["python", "-c", "pass"]}]}}}}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(yaml.safe_dump(job).encode())))
    assert cli.main(["run", "-", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "stdin-job" / "status.json").exists()


def test_a_second_run_refused_leaves_the_first_runs_job_yaml(tmp_path, capsys):
    """The lock was taken after job.yaml was written: a second `kuberl run` of the job (another --set,
    say) replaced the running one's record, then was refused."""
    import yaml
    from kuberl import cli
    from kuberl.local.runner import run_lock

    job = {**JOB, "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "runs" / "j").mkdir(parents=True)
    (tmp_path / "runs" / "j" / "job.yaml").write_text("the first run's\n")
    with run_lock(str(tmp_path / "runs" / "j")):
        assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs")]) == 3  # could not run here
    assert "another kuberl run" in capsys.readouterr().out
    assert (tmp_path / "runs" / "j" / "job.yaml").read_text() == "the first run's\n"


def test_a_dir_that_cannot_hold_the_run_is_named_not_a_traceback(tmp_path, capsys):
    """`--dir` naming a file (or a place that cannot be written) was a NotADirectoryError traceback."""
    import yaml
    from kuberl import cli

    job = {**JOB, "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "afile").write_text("")
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "afile")]) == 3
    assert f"--dir {tmp_path / 'afile'}: cannot keep the run in" in capsys.readouterr().err


def test_a_script_in_a_configmap_with_defaultmode_0755_runs_as_the_command(tmp_path):
    """`command: [/scripts/entry.sh]` with `defaultMode: 0755`, the usual way to ship an entrypoint in a ConfigMap:
    the files were written 0644 whatever the mode said, so the exec failed (StartError: Permission denied)."""
    from kuberl.local.process import launch

    pod = pod_with({"command": ["/scripts/entry.sh"], "volumeMounts": [{"name": "s", "mountPath": "/scripts"}]},
                   [{"name": "s", "configMap": {"name": "scripts", "defaultMode": 0o755}}])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod),
                           {"scripts": {"entry.sh": "#!/bin/sh\necho entry ran\n"}}, str)
    out = io.StringIO()
    process = PodProcess(launch(pod, root, {}, base_env={"PATH": "/usr/bin:/bin"}), "[t]", out)
    assert process.wait(30) == 0 and "[t] entry ran" in out.getvalue()


# --- directories the node makes or enters: never through a link a pod left -----------------------------


def shared_claim_with_link(tmp_path) -> tuple[dict, object]:
    """A job left `link -> <outside>` in a shared claim; this pod mounts that claim at /data."""
    outside = tmp_path / "outside"
    outside.mkdir()
    claim = tmp_path / "claims" / "shared"
    claim.mkdir(parents=True)
    os.symlink(outside, claim / "link")
    pod = pod_with({"workingDir": "/data/link/made-by-runner", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
    return pod, outside


def test_a_working_dir_through_a_link_in_a_shared_claim_is_refused_and_nothing_is_made_outside(tmp_path):
    """The runner itself created <outside>/made-by-runner (even at --pod-security restricted)."""
    pod, outside = shared_claim_with_link(tmp_path)
    with pytest.raises(LocalRunError, match=r"^spec.containers\[trainer\].workingDir: '/data/link/made-by-runner' leads out of"
                                            r" volume 'data' through a symlink in it \('data/link'\)"):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(tmp_path / "claims" / c))
    assert list(outside.iterdir()) == []


def test_a_working_dir_inside_a_claim_is_made_there_and_entered(tmp_path):
    pod = pod_with({"command": ["python", "-c", "import os; print(os.getcwd())"], "workingDir": "/data/a/b",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(tmp_path / "claims" / c))
    assert (tmp_path / "claims" / "shared" / "a" / "b").is_dir()
    out = io.StringIO()
    assert PodProcess(launch(pod, root, {}), "[t]", out).wait(30) == 0
    assert out.getvalue() == f"[t] {tmp_path / 'claims' / 'shared' / 'a' / 'b'}\n"


def test_a_link_swapped_in_after_the_sandbox_was_made_is_not_entered(tmp_path):
    """Checked, then swapped: the process enters the directory the node opened, by its fd, or none."""
    pod = pod_with({"command": ["python", "-c", "open('made-here', 'w')"], "workingDir": "/data/a/b",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(tmp_path / "claims" / c))
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    os.rename(tmp_path / "claims" / "shared" / "a", tmp_path / "moved")
    os.symlink(outside, tmp_path / "claims" / "shared" / "a")
    process = PodProcess(launch(pod, root, {}), "[t]", io.StringIO())
    assert process.wait(30) == 128 and "workingDir" in process.start_error and "symlink" in process.start_error
    assert list((outside / "b").iterdir()) == []


def test_a_link_swapped_in_between_a_check_and_a_create_is_met_not_followed(tmp_path, monkeypatch):
    """A co-tenant replaces a directory the node has just made with a link: the next step opens it without following."""
    from kuberl.local import sandbox

    outside = tmp_path / "outside"
    outside.mkdir()
    made = os.mkdir

    def mkdir_then_swap(name, *args, dir_fd=None, **kwargs):
        made(name, *args, dir_fd=dir_fd, **kwargs)
        if name == "a":
            os.rmdir(name, dir_fd=dir_fd)
            os.symlink(outside, name, dir_fd=dir_fd)

    monkeypatch.setattr(sandbox.os, "mkdir", mkdir_then_swap)
    (tmp_path / "top").mkdir()
    with pytest.raises(LocalRunError, match=r"^f: 'a/b' leads out of v through a symlink in it \('a'\)"):
        sandbox.make_dirs(str(tmp_path / "top"), "a/b", "f", "v")
    assert list(outside.iterdir()) == []


def test_a_claim_directory_a_pod_replaced_with_a_link_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "claims").mkdir()
    os.symlink(outside, tmp_path / "claims" / "shared")
    pod = pod_with({"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                   [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
    with pytest.raises(LocalRunError, match=r"spec.volumes\[0\].persistentVolumeClaim.claimName: the claim's directory .* is a symlink"):
        prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod), {}, lambda c: str(tmp_path / "claims" / c))


def test_kuberl_run_makes_shared_claims_without_following_a_link_left_in_runs(tmp_path, capsys):
    """runs/_claims is every run's: a pod of an earlier run can leave `runs/_claims -> <outside>` there."""
    import yaml
    from kuberl import cli

    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "runs").mkdir()
    os.symlink(outside, tmp_path / "runs" / "_claims")
    job = {**JOB, "spec": {"trainer": "custom", "runPolicy": {"backoffLimit": 0}, "template": {"spec": {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
        "containers": [{"name": "trainer", "command": ["python", "-c", "pass"], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"), "--pod-security", "restricted"]) != 0
    assert "persistentVolumeClaim 'shared'" in capsys.readouterr().out
    assert list(outside.iterdir()) == []


# --- run files are read as a bounded tail -----------------------------------------------------------------


def sparse_progress(directory, size: int = 3 << 30) -> None:
    """A 3 GiB progress.jsonl (sparse: no disk) ending in two real records."""
    records = b'{"timesteps": 100, "wall_seconds": 1.0, "episode_return_mean": 20.0}\n' \
              b'{"timesteps": 200, "wall_seconds": 2.0, "episode_return_mean": 30.0, "eval_return": 42.0}\n'
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "progress.jsonl", "wb") as f:
        f.truncate(size - len(records))
        f.seek(size - len(records))
        f.write(records)


def in_two_gibibytes(*argv: str, cwd) -> subprocess.CompletedProcess:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, *argv], check=False, capture_output=True, text=True, timeout=120, cwd=cwd,
                          preexec_fn=limit)


def test_plot_of_a_3_gib_progress_file_draws_its_last_records_in_2_gib(tmp_path):
    """`kuberl plot` read the whole file: a MemoryError traceback under a 2 GiB address-space limit."""
    sparse_progress(tmp_path / "checkpoints" / "j-uid")
    done = in_two_gibibytes("-m", "kuberl.cli", "plot", str(tmp_path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.strip().endswith("learning-curve.png") and (tmp_path / "learning-curve.png").stat().st_size > 1000


def test_the_run_summary_reads_a_3_gib_progress_file_in_2_gib(tmp_path):
    """`kuberl run`'s end-of-run summary read it the same way."""
    sparse_progress(tmp_path)
    code = ("import sys; from kuberl.local.curves import last_progress; from kuberl.local.runner import newest_checkpoint;"
            f" print(last_progress({str(tmp_path)!r})['eval_return'], newest_checkpoint({str(tmp_path)!r}))")
    done = in_two_gibibytes("-c", code, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "42.0 None\n", ""), done


def test_a_tail_starts_at_a_whole_line_and_says_how_large_the_file_is(tmp_path):
    from kuberl.local.process import read_regular_tail

    path = tmp_path / "f"
    path.write_bytes(b"first line\nsecond\nthird\n")
    assert read_regular_tail(str(path), 100) == ("first line\nsecond\nthird\n", 24)
    assert read_regular_tail(str(path), 12) == ("third\n", 24)  # "econd\nthird\n": the cut line is dropped
    assert read_regular_tail(str(path), 13) == ("second\nthird\n", 24)  # it starts exactly at a line
    assert read_regular_tail(str(path), 3) == ("", 24)
    os.mkfifo(tmp_path / "fifo")
    assert read_regular_tail(str(tmp_path / "fifo"), 10) is None


def test_the_runner_writes_its_own_files_in_runs_without_following_a_link_left_there(tmp_path, capsys):
    """A pod of an earlier run can leave `logs/<pod>.log` or `status.json.tmp` pointing anywhere this user may
    write; the runner appended its log and wrote its status through them."""
    import yaml
    from kuberl import cli

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "runs" / "j"
    (run / "logs").mkdir(parents=True)
    for planted in ("logs/j-0-g0.log", "status.json.tmp"):
        (elsewhere / planted.replace("/", "_")).write_text("mine\n")
        os.symlink(elsewhere / planted.replace("/", "_"), run / planted)
    job = {**JOB, "spec": {"trainer": "custom", "runPolicy": {"backoffLimit": 0}, "template": {"spec": {
        "containers": [{"name": "trainer", "command": ["python", "-c", "print('hello')"]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    code = cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert [p.read_text() for p in sorted(elsewhere.iterdir())] == ["mine\n", "mine\n"], out
    assert code == 0 and "[rank 0] hello" in out, out  # the output still reaches the terminal


def test_a_ctrl_c_after_the_job_ended_keeps_its_exit_code_and_summary(tmp_path, monkeypatch, capsys):
    """A Ctrl-C while the learning curve was drawn, after the job had succeeded, ended `kuberl run` in a
    KeyboardInterrupt traceback (exit 130, "interrupted, resumable"): the summary was lost and the code lied."""
    import signal

    import yaml
    from kuberl import cli
    from kuberl.local import runner

    def plot_interrupted(run_dir):
        os.kill(os.getpid(), signal.SIGINT)  # a real SIGINT, delivered (to the main thread) while the curve is drawn
        return os.path.join(run_dir, "learning-curve.png")

    job = {**JOB, "metadata": {"name": "ends"}, "spec": {"trainer": "custom", "runPolicy": {"backoffLimit": 0}, "template": {
        "spec": {"containers": [{"name": "trainer", "command": ["python", "-c", "pass"]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    monkeypatch.setattr(runner, "plot", plot_interrupted)
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"), "--plot"]) == 0
    out = capsys.readouterr().out.replace("'", "")
    assert "ends succeeded" in out
    assert "drawing the learning curve (a few seconds; Ctrl-C skips it)" in out.split("ends succeeded")[0]  # said before


@pytest.mark.parametrize("status", ["fifo", '{"phase": "Failed", "conditions": 5}', '{"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "reason": {}}]}'])
def test_a_status_no_run_wrote_ends_kuberl_evals_line_as_none_recorded(tmp_path, status):
    """kuberl eval of a run without a model says how the run ended, from its status.json, which is anyone's to write
    in a shared runs/: a FIFO there hung `kuberl eval runs` at open, and conditions of 5 ended it in a TypeError."""
    import threading

    from kuberl_trainer.policy import run_ending

    if status == "fifo":
        os.mkfifo(tmp_path / "status.json")
    else:
        (tmp_path / "status.json").write_text(status)
    said = []
    reader = threading.Thread(target=lambda: said.append(run_ending(str(tmp_path))), daemon=True)
    reader.start()
    reader.join(10)
    assert said == ["no status recorded" if status == "fifo" or "5" in status else "it failed: {}: None"], said


def test_run_files_nested_deeper_than_json_decodes_are_read_as_damaged(tmp_path):
    """A run directory's records are the trainer's (or anyone's) to write: a progress.jsonl line, a status.json or a
    fingerprint.json of 100,000 '[' raised RecursionError out of json, which only ValueError was caught for:
    kuberl plot ended in a traceback, and so would kuberl run's summary, a rerun and kuberl eval's ending line."""
    from kuberl.core.runrecords import recorded_learned_values
    from kuberl.local.curves import progress_records
    from kuberl.local.runner import (
        LocalRunError,
        last_status,
        run_phase,
    )
    from kuberl_trainer.policy import run_ending

    deep = "[" * 100_000
    assert progress_records(['{"timesteps": 1}', deep]) == [{"timesteps": 1}]
    with pytest.raises(LocalRunError, match="is not a status kuberl run wrote"):
        last_status(deep, "runs/j/status.json")
    (tmp_path / "status.json").write_text(deep)
    (tmp_path / "fingerprint.json").write_text(deep)
    assert run_phase(str(tmp_path)) is None and recorded_learned_values(str(tmp_path)) is None
    assert run_ending(str(tmp_path)) == "no status recorded"
    checkpoints = tmp_path / "checkpoints" / "j-uid"
    checkpoints.mkdir(parents=True)
    (checkpoints / "progress.jsonl").write_text('{"timesteps": 1, "restart": 0, "episode_return_mean": 9.0}\n' + deep + "\n")
    said = subprocess.run([sys.executable, "-m", "kuberl.cli", "plot", str(tmp_path), "-o", str(tmp_path / "c.png")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0 and "Traceback" not in said.stderr, said.stderr
