"""Hostile and careless job specs a shared cluster's tenants can write: each row is refused by
`validate_job` with the field's path, before the operator renders or creates anything."""

import json

import pytest
from kuberl.core.rules import validate_job
from kuberl.core.validation import MAX_GANG_TEMPLATE_BYTES, InvalidJob
from kuberl.core.yamlreader import load_documents

from tests.support.jobs import make_job


def sidecar_template(json_bytes: int) -> dict:
    """A template whose JSON is about `json_bytes` long: one sidecar with one big env value."""
    template = {"spec": {"containers": [{"name": "side", "image": "busybox", "env": [{"name": "PAD", "value": ""}]}]}}
    pad = json_bytes - len(json.dumps(template, separators=(",", ":")))
    template["spec"]["containers"][0]["env"][0]["value"] = "x" * max(pad, 0)
    return template


def problems(job: dict) -> list[str]:
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    return [str(p) for p in refused.value.problems]


# The operator renders every pod of a gang in one go (handlers._create_pods): a 1.3 MB template
# x 1,024 workers took 3.6 GB and 31 s of one process, against the chart's 256 MiB operator limit;
# the API server would then store 1,024 pods of 1.3 MB each. One job could take down the operator.
GANG_SIZES = {
    "1.3 MB template x 1024 workers": (1_300_000, 1024),
    "just over the budget": (MAX_GANG_TEMPLATE_BYTES // 64 + 1024, 64),
}


@pytest.mark.parametrize(("template_bytes", "workers"), GANG_SIZES.values(), ids=GANG_SIZES.keys())
def test_a_gang_of_huge_templates_is_refused(template_bytes, workers):
    job = make_job("hog").workers(workers).template(sidecar_template(template_bytes)).obj()
    [problem] = problems(job)
    assert problem.startswith("spec.template: ")
    assert f"x spec.workers {workers}" in problem and str(MAX_GANG_TEMPLATE_BYTES) in problem


@pytest.mark.parametrize(("template_bytes", "workers"), [(900_000, 8), (16 * 1024, 1024), (4096, 1024)])
def test_large_templates_or_large_gangs_alone_pass(template_bytes, workers):
    assert validate_job(make_job("fine").workers(workers).template(sidecar_template(template_bytes)).obj()).workers == workers


def trainer_env(name: str) -> dict:
    return {"spec": {"containers": [{"name": "trainer", "env": [{"name": name, "value": "0"}]}]}}


# Python's `$` also matches before a final newline; Go's (k8s.io/apimachinery/pkg/util/validation:
# IsDNS1035Label, IsDNS1123Label, IsQualifiedName, IsEnvVarName) does not, so the API server refuses
# these names at pod create, long after the job was accepted; "RANK\n" also slipped past the
# reserved-name check. A path shows the newline escaped (kuberl.core.safetext): a problem is one line.
TRAILING_NEWLINES = {
    "metadata.name": (make_job("abc\n").obj(), "metadata.name"),
    "metadata.namespace": (make_job("abc", namespace="team-a\n").obj(), "metadata.namespace"),
    "spec.labels key": (make_job().with_spec(labels={"team\n": "rl"}).obj(), "spec.labels.team\\n"),
    "spec.nodeSelector key": (make_job().with_spec(nodeSelector={"pool\n": "gpu"}).obj(), "spec.nodeSelector.pool\\n"),
    "template label key": (make_job().template({"metadata": {"labels": {"app\n": "x"}}}).obj(), "spec.template.metadata.labels.app\\n"),
    "reserved env name": (make_job().template(trainer_env("RANK\n")).obj(), "spec.template.spec.containers[0].env[0].name"),
    "env name": (make_job().template(trainer_env("WANDB_MODE\n")).obj(), "spec.template.spec.containers[0].env[0].name"),
}


@pytest.mark.parametrize(("job", "path"), TRAILING_NEWLINES.values(), ids=TRAILING_NEWLINES.keys())
def test_a_name_with_a_trailing_newline_is_refused(job, path):
    assert [p.split(": ")[0] for p in problems(job)] == [path]


# kubectl reads YAML with go-yaml v2, which keeps a timestamp-looking scalar a string when decoding
# into interface{} (decode.go: "for backward compatibility reasons we set it as a string"); PyYAML
# made it a datetime, so `kuberl render` printed `args: [2024-01-01 00:00:00+00:00]`, and `kuberl run`
# started the container with that text instead of what the file says.
@pytest.mark.parametrize("scalar", ["2024-01-01", "2024-01-01T00:00:00Z", "2001-12-14 21:59:43.10 -5"])
def test_timestamps_stay_the_strings_kubectl_sends(scalar):
    [doc] = load_documents(f"args: [{scalar}]\nimage: {scalar}\n")
    assert doc == {"args": [scalar], "image": scalar}


# spec.runPolicy.terminationGracePeriodSeconds is capped at an hour, but the template's pod field
# replaced it unchecked: with 10**9 a pod that ignores SIGTERM keeps its node (and GPUs) for decades
# after a suspend, a gang restart or the job's deletion (the operator force-deletes only 60 s past
# the pod's deletionTimestamp, which the grace period pushes out).
GRACE_PERIODS = {
    "decades": (10**9, "at most 3600"),
    "negative": (-1, "at least 0"),
    "a string": ("30", "an integer"),
}


@pytest.mark.parametrize(("seconds", "expected"), GRACE_PERIODS.values(), ids=GRACE_PERIODS.keys())
def test_the_template_grace_period_keeps_the_run_policy_bound(seconds, expected):
    job = make_job().template({"spec": {"terminationGracePeriodSeconds": seconds}}).obj()
    [problem] = problems(job)
    assert problem.startswith("spec.template.spec.terminationGracePeriodSeconds: expected " + expected)
    assert "spec.runPolicy.terminationGracePeriodSeconds" in problem


def test_a_template_grace_period_within_the_bound_passes():
    job = make_job().template({"spec": {"terminationGracePeriodSeconds": 120}}).obj()
    assert validate_job(job).template["spec"]["terminationGracePeriodSeconds"] == 120


# Resources the API server refuses at pod create (pkg/apis/core/validation: ValidateResourceRequirements,
# ValidateNonnegativeQuantity, validateContainerResourceName), after the job was accepted and its
# ConfigMap, PVC, Service and NetworkPolicy were created: refused with the job instead.
RESOURCES = {
    "negative cpu request": ({"requests": {"cpu": "-2"}}, "spec.resources.requests.cpu"),
    "negative integer limit": ({"limits": {"memory": -1}}, "spec.resources.limits.memory"),
    "request above limit": ({"requests": {"cpu": "8"}, "limits": {"cpu": "2"}}, "spec.resources.requests.cpu"),
    "request above limit, other units": ({"requests": {"memory": "2Gi"}, "limits": {"memory": "2G"}}, "spec.resources.requests.memory"),
    "huge exponent over its limit": ({"requests": {"cpu": "1e99999999999"}, "limits": {"cpu": "1Ei"}}, "spec.resources.requests.cpu"),
    "negative huge exponent": ({"requests": {"cpu": "-1e99999999999"}}, "spec.resources.requests.cpu"),
    "fractional exponent": ({"requests": {"cpu": "1e1.5"}}, "spec.resources.requests.cpu"),  # ValueError, before
    "exponent of more digits than int() reads, one problem": ({"requests": {"cpu": "1e" + "9" * 5000}}, "spec.resources.requests.cpu"),
    "not a resource name": ({"requests": {"foo bar": "1"}}, "spec.resources.requests.foo bar"),
    "unqualified extended resource": ({"limits": {"widgets": "1"}}, "spec.resources.limits.widgets"),
    "quota's requests. prefix": ({"limits": {"requests.example.com/fpga": "1"}}, "spec.resources.limits.requests.example.com/fpga"),
    # IsOvercommitAllowed: extended resources and hugepages are requested exactly as limited
    "extended request without a limit": ({"requests": {"example.com/fpga": "1"}}, "spec.resources.limits.example.com/fpga"),
    "extended request under its limit": ({"requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "2"}},
                                         "spec.resources.requests.example.com/fpga"),
    "hugepages request without a limit": ({"requests": {"hugepages-2Mi": "1Gi"}}, "spec.resources.limits.hugepages-2Mi"),
    "a fraction of an extended resource": ({"limits": {"example.com/fpga": "500m"}}, "spec.resources.limits.example.com/fpga"),
}


@pytest.mark.parametrize(("resources", "path"), RESOURCES.values(), ids=RESOURCES.keys())
def test_resources_the_api_server_refuses_are_refused_with_the_job(resources, path):
    [problem] = problems(make_job().with_spec(resources=resources).obj())
    assert problem.startswith(path + ": expected ")


@pytest.mark.parametrize("resources", [
    {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "0.5", "memory": "1024Mi"}},
    {"requests": {"cpu": 2, "ephemeral-storage": "10Gi", "hugepages-2Mi": "1Gi"}, "limits": {"cpu": "2000m", "hugepages-2Mi": "1Gi"}},
    {"limits": {"example.com/fpga": 1, "memory": "1e9"}},
    {"requests": {"example.com/fpga": "2"}, "limits": {"example.com/fpga": "2000m"}},
    {"limits": {"kubernetes.io/batch-cpu": "500"}},  # Kubernetes' own prefixed names pass validateContainerResourceName
])
def test_resources_the_api_server_accepts_pass(resources):
    validate_job(make_job().with_spec(resources=resources).obj())


# The trainer's configuration holds the defaulted spec, template and env.kwargs included, in one ConfigMap, which
# the API server takes up to 1 MiB (ValidateConfigMap, core.MaxSecretSize; tests/support/resources.py refuses it
# as the server does). A 1.3 MB template passed kuberl validate and the job failed at its ConfigMap (InvalidChild).
def nested_kwargs(elements: int) -> dict:
    """env.kwargs of `elements` zeros 40 lists deep: 2 bytes each as compact JSON, about 48 in the indented config."""
    value: list = [0] * elements
    for _ in range(40):
        value = [value]
    return {"grid": value}


@pytest.mark.parametrize(("field", "job"), [
    ("spec.template", make_job("big").workers(8).template(sidecar_template(1_300_000)).obj()),
    ("spec.env.kwargs", make_job("big").env("CartPole-v1", kwargs=nested_kwargs(30_000)).obj()),
], ids=["template", "indented-kwargs"])
def test_a_spec_the_trainers_configmap_cannot_hold_is_refused_at_its_field(field, job):
    assert len(json.dumps(job)) < 1_572_864  # etcd's request limit: the API server stores the job itself
    [problem] = problems(job)
    assert problem.startswith(f"{field}: the trainer's configuration") and "1048576" in problem


@pytest.mark.parametrize("job", [
    make_job("big").workers(8).template(sidecar_template(1_040_000)).obj(),
    make_job("big").env("CartPole-v1", kwargs=nested_kwargs(21_000)).obj(),
], ids=["template", "indented-kwargs"])
def test_the_largest_spec_that_passes_renders_a_configmap_the_api_server_takes(job):
    from kuberl.core.podsource import MAX_CONFIGMAP_BYTES, configmap_problems
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_configmap

    configmap = render_configmap(Job(job["metadata"]["name"], validate_job(job)), "n" * 63, PLACEHOLDER_UID)
    assert configmap_problems(configmap) == []
    assert len(configmap["data"]["config.json"]) > MAX_CONFIGMAP_BYTES * 0.9  # near the bound, not far below it


# validateContainerCommon and validateVolumes (pkg/apis/core/validation/validation.go) refuse any container or
# volume name that is no DNS-1123 label: kuberl validate passed them, and every pod create failed (InvalidChild).
# A look-alike of "trainer" (Cyrillic U+0435) did not merge with kuberl's trainer: it was a sidecar of its own.
@pytest.mark.parametrize(("template", "path", "words"), [
    ({"spec": {"containers": [{"name": "train\u0435r", "resources": {"limits": {"cpu": "2"}}}]}},
     "spec.template.spec.containers[0].name", "(got 'train\\u0435r'); did you mean 'trainer'?"),
    ({"spec": {"initContainers": [{"name": "Fetch", "image": "busybox"}]}}, "spec.template.spec.initContainers[0].name", "(got 'Fetch')"),
    ({"spec": {"volumes": [{"name": "data_set", "emptyDir": {}}]}}, "spec.template.spec.volumes[0].name", "(got 'data_set')"),
    ({"spec": {"volumes": [{"name": "v" * 64, "emptyDir": {}}]}}, "spec.template.spec.volumes[0].name", "at most 63"),
], ids=["homoglyph-trainer", "uppercase-init", "underscore-volume", "64-characters"])
def test_a_container_or_volume_name_the_api_server_refuses_is_refused_at_its_field(template, path, words):
    [problem] = problems(make_job("names").template(template).obj())
    assert problem.startswith(f"{path}: expected a DNS-1123 label") and words in problem


def test_names_that_are_dns_labels_pass():
    template = {"spec": {"containers": [{"name": "trainer"}, {"name": "log-shipper-2", "image": "busybox"}],
                         "volumes": [{"name": "v" * 63, "emptyDir": {}}]}}
    assert validate_job(make_job("names").template(template).obj()).workers >= 1


def sidecar(*ports: int, init: bool = False) -> dict:
    container = {"name": "exporter", "image": "prom/node-exporter", "ports": [{"containerPort": p} for p in ports]}
    if init:
        container["restartPolicy"] = "Always"
    return {"spec": {("initContainers" if init else "containers"): [container]}}


@pytest.mark.parametrize(("template", "fields", "words"), [
    (sidecar(9090), ("containers[0].ports[0]",), "9090 is the trainer's (spec.metrics.port + local rank 0, in every pod)"),
    (sidecar(8000, 29500, init=True), ("initContainers[0].ports[1]",), "29500 is the trainer's (spec.rendezvous.port, in worker 0's pod)"),
], ids=["exporter-on-the-metrics-port", "native-sidecar-on-the-rendezvous-port"])
def test_a_sidecar_port_the_trainer_binds_is_refused(template, fields, words):
    """The containers of a pod share one network: one of the two could not bind. The API server only warns of a
    duplicate port, and a sidecar that won the bind answered the operator's scrapes with its own page."""
    found = problems(make_job("ports").template(template).obj())
    assert [p.split(": ")[0] for p in found] == [f"spec.template.spec.{f}.containerPort" for f in fields]
    assert words in found[0]


@pytest.mark.parametrize("job", [
    make_job("ports").template(sidecar(9100)).obj(),
    make_job("ports").with_spec(metrics={"port": 9200}).template(sidecar(9090)).obj(),
    make_job("ports").template({"spec": {"initContainers": [{"name": "fetch", "image": "busybox", "ports": [{"containerPort": 9090}]}]}}).obj(),
], ids=["another-port", "metrics-moved", "init-container-that-exits"])
def test_a_sidecar_port_the_trainer_does_not_bind_passes(job):
    assert validate_job(job).workers >= 1


@pytest.mark.parametrize("command", ["validate", "render"])
def test_reading_a_job_imports_no_module_its_env_id_names(tmp_path, command):
    """docs/security.md: the trainer imports a "module:Class" env id in the job's pods (the author's code,
    as the template's command is), and kuberl run here; reading the file imports nothing it names."""
    import subprocess
    import sys

    (tmp_path / "planted.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Env: pass\n")
    job = make_job("reader").env("planted:Env").obj()
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", command, str(tmp_path / "job.yaml")], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "imported").exists()


# validateContainersOnlyForPod (pkg/apis/core/validation/validation.go): "must not have leading or trailing
# whitespace", for pods only (a template keeps it). `image: |` ends the name with a line break.
@pytest.mark.parametrize(("job", "path"), [
    (make_job("img").with_spec(image="registry.example.com/rl/trainer:1.0\n").obj(), "spec.image"),
    (make_job("img").template({"spec": {"containers": [{"name": "side", "image": " busybox"}]}}).obj(),
     "spec.template.spec.containers[0].image"),
    (make_job("img").template({"spec": {"initContainers": [{"name": "fetch", "image": "busybox\t"}]}}).obj(),
     "spec.template.spec.initContainers[0].image"),
], ids=["spec-image-block-scalar", "sidecar-leading-space", "init-trailing-tab"])
def test_an_image_with_surrounding_whitespace_is_refused_as_the_api_server_refuses_the_pod(job, path):
    [problem] = problems(job)
    assert problem.startswith(f"{path}: must not have leading or trailing whitespace")


# ValidateResourceRequirements and resource.ParseQuantity refuse a template container's resources as they refuse
# spec.resources': kuberl validate checked only spec.resources, and a sidecar's "-1" or "1\n" failed every pod create.
@pytest.mark.parametrize(("resources", "field", "words"), [
    ({"limits": {"cpu": "1\n"}}, "limits.cpu", "expected a Kubernetes quantity"),
    ({"limits": {"memory": "lots"}}, "limits.memory", "expected a Kubernetes quantity"),
    ({"requests": {"cpu": "-1"}}, "requests.cpu", "at least 0"),
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "requests.cpu", "at most the limit"),
    ({"requests": {"example.com/fpga": "1"}}, "limits.example.com/fpga", "cannot be overcommitted"),
], ids=["line-break", "not-a-quantity", "negative", "request-over-limit", "extended-without-limit"])
def test_a_sidecars_resources_the_api_server_refuses_are_refused_at_their_field(resources, field, words):
    template = {"spec": {"containers": [{"name": "side", "image": "busybox", "resources": resources}]}}
    [problem] = problems(make_job("res").template(template).obj())
    assert problem.startswith(f"spec.template.spec.containers[0].resources.{field}: ") and words in problem


def test_a_sidecars_resources_the_api_server_takes_pass():
    resources = {"limits": {"cpu": 0.5, "memory": 1024, "nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1, "cpu": "100m"}}
    template = {"spec": {"initContainers": [{"name": "warm", "image": "busybox", "resources": resources}]}}
    assert validate_job(make_job("res").template(template).obj()).workers >= 1


@pytest.mark.parametrize(("container", "path"), [
    ({"name": "trainer", "command": ["python", "-c", "print(1)\x00"]}, "spec.template.spec.containers[0].command[2]"),
    ({"name": "trainer", "args": ["--x\x00"]}, "spec.template.spec.containers[0].args[0]"),
    ({"name": "trainer", "env": [{"name": "A", "value": "a\x00b"}]}, "spec.template.spec.containers[0].env[0].value"),
])
def test_a_nul_byte_no_process_can_be_started_with_is_refused_at_its_field(container, path):
    """execve takes C strings (Go's syscall.Exec: BytePtrFromString answers EINVAL), so the runtime cannot start a
    container whose command, args or env hold a NUL: the pods passed validation and every start failed (StartError,
    each gang restart spending backoffLimit: 71 s under kuberl run to fail)."""
    job = make_job().custom_trainer({"spec": {"containers": [container]}}).obj()
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    assert any(p.path == path and "NUL" in p.message for p in refused.value.problems), refused.value.problems


def test_pod_annotations_past_the_api_servers_total_are_refused_at_the_template():
    """ValidateAnnotations refuses an object whose annotations' keys and values pass 256 KiB together
    (TotalAnnotationSizeLimitB): a template's, which every pod carries beside kuberl's own, validated and every
    pod create failed (InvalidChild). The largest that passes leaves room for kuberl's, on every pod."""
    from kuberl.core import render
    from kuberl.core.validation import MAX_TEMPLATE_ANNOTATION_BYTES

    from tests.support.resources import validate_metadata

    def annotated(value_bytes: int) -> dict:
        job = make_job("a" * 50).workers(2).queue("q").with_spec(schedulerName="volcano")
        return job.template({"metadata": {"annotations": {"example.com/note": "x" * value_bytes}}}).obj()

    refused = problems(annotated(256 * 1024))
    assert any(p.startswith("spec.template.metadata.annotations: ") and "262144" in p for p in refused), refused
    largest = annotated(MAX_TEMPLATE_ANNOTATION_BYTES - len("example.com/note"))
    pods = render.render_pods(render.Job("a" * 50, validate_job(largest)), "n" * 63, "u" * 36, [0, 1], 0, default_image="img")
    assert [validate_metadata(pod["metadata"]) for pod in pods] == [[], []]


@pytest.mark.parametrize("path", ["spec.labels", "spec.nodeSelector", "spec.template.metadata.labels",
                                  "spec.template.metadata.annotations", "spec.template.spec.nodeSelector"])
def test_a_key_whose_prefix_is_longer_than_a_dns_subdomain_is_refused(path):
    """IsQualifiedName: a key's prefix is a DNS-1123 subdomain, at most 253 characters; the pattern alone let a
    254-character prefix through, and the API server refused every pod."""
    key = ".".join(["a" * 63] * 3 + ["b" * 62]) + "/team"
    assert len(key.partition("/")[0]) == 254
    job = make_job()
    field, _, rest = path.removeprefix("spec.").partition(".")
    if field == "template":
        where, _, leaf = rest.rpartition(".")
        template: dict = {}
        node = template
        for part in where.split("."):
            node = node.setdefault(part, {})
        node[leaf] = {key: "x"}
        job = job.template(template)
    else:
        job = job.with_spec(**{field: {key: "x"}})
    assert any(p.startswith(path) for p in problems(job.obj())), path
    short = key[key.index(".") + 1:]  # the same key with a 190-character prefix passes
    validate_job(json.loads(json.dumps(job.obj()).replace(key, short)))
