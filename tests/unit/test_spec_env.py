"""Env from spec.template: kuberl's identity names refused in the trainer
container, names valid as Kubernetes' IsEnvVarName wants them
(k8s.io/apimachinery/pkg/util/validation: `[-._a-zA-Z][-._a-zA-Z0-9]*`, not
'.', '..' or '..'-prefixed), values strings; each with its field path."""

import pytest
from kuberl.core import contract, names
from kuberl.core.rules import parse_spec
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job

T = names.TRAINER_CONTAINER


def spec_with(containers=None, init_containers=None):
    pod = {}
    if containers is not None:
        pod["containers"] = containers
    if init_containers is not None:
        pod["initContainers"] = init_containers
    return make_job().minimal().template({"spec": pod}).obj()["spec"]


def problems(spec):
    try:
        parse_spec(spec)
    except InvalidJob as e:
        return [(p.path, p.message) for p in e.problems]
    return []


def trainer_env(*env):
    return spec_with([{"name": T, "env": [{"name": "WANDB_MODE", "value": "offline"}, *env]}])


@pytest.mark.parametrize("name", sorted(contract.RESERVED_ENV_NAMES) + ["KUBERL_ANYTHING"])
def test_identity_names_are_refused_in_the_trainer_with_the_field_path(name):
    [(path, message)] = problems(trainer_env({"name": name, "value": "0"}))
    assert path == "spec.template.spec.containers[0].env[1].name"
    assert f"{name} is reserved" in message


def test_torch_launchers_store_switch_is_refused_in_the_trainer():
    """TORCHELASTIC_USE_AGENT_STORE is torchrun's word to the processes it starts that its agent hosts the
    rendezvous store; set in a spec, a one-process pod's rank 0 (kuberl's trainer, or a script's env://
    init_process_group) joins as a client too, no one hosts the store, and every start waited
    rendezvousTimeoutSeconds, holding its GPUs, to fail as PeerLost blaming 'worker 0's torchrun agent'."""
    [(path, message)] = problems(trainer_env({"name": contract.ENV_TORCH_AGENT_STORE, "value": "True"}))
    assert path == "spec.template.spec.containers[0].env[1].name"
    assert "torch's launcher sets it" in message and "no one hosts" in message
    sidecar = spec_with([{"name": T}, {"name": "shipper", "image": "busybox", "env": [
        {"name": contract.ENV_TORCH_AGENT_STORE, "value": "True"}]}])
    assert problems(sidecar) == []


def test_the_issue_examples():
    found = problems(trainer_env({"name": "RANK", "value": "0"}, {"name": "MASTER_ADDR", "value": "x"},
                                 {"name": "WORLD_SIZE", "value": "1"}, {"name": "1=BAD NAME", "value": "x"},
                                 {"name": "", "value": "x"}, {"name": "DEBUG", "value": True}))
    assert [p for p, _ in found] == [f"spec.template.spec.containers[0].env[{i}].name" for i in range(1, 6)] + [
        "spec.template.spec.containers[0].env[6].value"]
    assert "expected a string; quote it (got True)" in found[-1][1]


@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "PYTHONUNBUFFERED", "NCCL_DEBUG", "my.env-name", "_X", "-x"])
def test_tuning_names_stay_the_users(name):
    assert problems(trainer_env({"name": name, "value": "1"})) == []


@pytest.mark.parametrize("name", ["", "1ABC", "A=B", "A B", ".", "..", "..x", "é", None, 3])
def test_invalid_names_are_refused_in_every_container(name):
    spec = spec_with([{"name": "sidecar", "image": "busybox", "env": [{"name": name, "value": "v"}]}],
                     init_containers=[{"name": "setup", "image": "busybox", "env": [{"name": name, "value": "v"}]}])
    assert [p for p, _ in problems(spec)] == [
        "spec.template.spec.containers[0].env[0].name", "spec.template.spec.initContainers[0].env[0].name"]


@pytest.mark.parametrize("value", [True, 1, 1.5, [], {}])
def test_values_must_be_strings(value):
    [(path, _)] = problems(spec_with([{"name": "sidecar", "image": "busybox", "env": [{"name": "X", "value": value}]}]))
    assert path == "spec.template.spec.containers[0].env[0].value"


def test_sidecars_may_use_identity_names_and_value_from_is_fine():
    spec = spec_with([{"name": "sidecar", "image": "busybox", "env": [{"name": "RANK", "value": "7"}]},
                      {"name": T, "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                          {"name": "EMPTY", "value": None}]}])
    assert problems(spec) == []


def test_env_must_be_a_list_of_objects():
    assert [p for p, _ in problems(spec_with([{"name": T, "env": {"A": "1"}}]))] == ["spec.template.spec.containers[0].env"]
    assert [p for p, _ in problems(spec_with([{"name": T, "env": ["A=1"]}]))] == ["spec.template.spec.containers[0].env[0]"]


@pytest.mark.parametrize("mount", [{"mountPath": "/data"}, {"name": "data"}, {"name": "", "mountPath": "/d"}, {"name": ["x"], "mountPath": "/d"}, "data"])
def test_volume_mounts_name_a_volume_and_a_path_in_every_container(mount):
    # ValidateVolumeMounts (pkg/apis/core/validation): name and mountPath are both "Required value";
    # without them `kuberl validate` said valid and `kuberl run` ended in a KeyError.
    spec = spec_with([{"name": T, "volumeMounts": [mount]}], init_containers=[{"name": "setup", "image": "busybox", "volumeMounts": [mount]}])
    paths = [p for p, _ in problems(spec)]
    assert paths and all(p.startswith(("spec.template.spec.containers[0].volumeMounts[0]",
                                       "spec.template.spec.initContainers[0].volumeMounts[0]")) for p in paths)
    assert len({p.split(".volumeMounts")[0] for p in paths}) == 2


def test_ephemeral_containers_are_refused_as_the_api_server_refuses_them_on_create():
    # ValidatePodCreate: "spec.ephemeralContainers: Forbidden: cannot be set on create"
    # (test/integration/pods/pods_test.go asserts that message).
    spec = spec_with()
    spec["template"]["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "busybox", "env": [{"name": "RANK", "value": "0"}]}]
    [(path, message)] = problems(spec)
    assert path == "spec.template.spec.ephemeralContainers" and "cannot be created with ephemeral containers" in message


def test_the_template_cannot_replace_kuberls_configuration_volume_or_its_mount():
    """The template merges by volume name and mountPath (render.merge_template): a volume named 'config' or a
    trainer mount at /etc/kuberl replaced the trainer configuration, and every rank failed after its pod
    started ('cannot read /etc/kuberl/config.json'). Other containers may mount anything; kuberl's other
    volumes (dshm, tmp, checkpoints) stay the template's to replace, as documented."""
    spec = spec_with([{"name": T, "volumeMounts": [{"name": "cfg", "mountPath": "/etc/kuberl/"},
                                                   {"name": "cfg", "mountPath": "//etc/./kuberl"}]},
                      {"name": "side", "image": "busybox", "volumeMounts": [{"name": "cfg", "mountPath": names.CONFIG_MOUNT_DIR}]}])
    spec["template"]["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                                           {"name": names.CONFIG_VOLUME, "configMap": {"name": "mine"}},
                                           {"name": "cfg", "configMap": {"name": "mine"}}]
    found = problems(spec)
    assert [path for path, _ in found] == ["spec.template.spec.volumes[1].name",
                                           "spec.template.spec.containers[0].volumeMounts[0].mountPath",
                                           "spec.template.spec.containers[0].volumeMounts[1].mountPath"], found
    assert "kuberl's own volume" in found[0][1] and "mount yours elsewhere" in found[1][1]
    spec["template"]["spec"]["volumes"][1]["name"] = "mine"
    spec["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/etc/kuberl-mine"}]
    assert problems(spec) == []


def test_a_volume_name_or_a_containers_mount_path_twice_is_refused_as_the_api_server_refuses_it():
    """validateVolumes ("Duplicate value") and ValidateVolumeMounts ("must be unique"), pkg/apis/core/validation:
    merged by name, the template kept one of the two in silence; a sidecar's two mounts failed every pod."""
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "other", "mountPath": "/data"}]
    spec = spec_with([{"name": T, "volumeMounts": mounts}, {"name": "side", "image": "busybox", "volumeMounts": mounts}],
                     [{"name": "init", "image": "busybox", "volumeMounts": mounts[:1]}])
    spec["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}, {"name": "other", "emptyDir": {}},
                                           {"name": "data", "emptyDir": {"medium": "Memory"}}]
    assert [path for path, _ in problems(spec)] == ["spec.template.spec.volumes[2].name",
                                                    "spec.template.spec.containers[0].volumeMounts[1].mountPath",
                                                    "spec.template.spec.containers[1].volumeMounts[1].mountPath"]
