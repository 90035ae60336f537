"""podschema: the JSON type of each pod template field, as the API server
decodes a pod. The table is Kubernetes' own (v1.33's OpenAPI definitions as
PyPI kubernetes-validate ships them: the same schemas the API stand-in decodes
with, tests/support/coreschema.py); a value of the wrong type is refused by
`validate_job` at its field, where the operator used to create the job's other
children and then have the pod refused (and `kuberl run` ran it)."""

import importlib.resources
import json

import pytest
from kuberl.core import podschema
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job

SCHEMA_VERSION = "v1.33.0-local"  # the kubectl and Helm the tests install are v1.33


def kubernetes_fields(definition: str) -> dict[str, tuple[str, str | None]]:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_VERSION / "_definitions.json"
    definitions = json.loads(root.read_text())["$defs"]

    def resolve(schema: dict) -> dict:
        while "$ref" in schema:
            schema = definitions[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def json_type(schema: dict) -> str | None:
        kind = resolve(schema).get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        return kind

    fields = {}
    for name, schema in definitions[definition]["properties"].items():
        kind = json_type(schema)
        fields[name] = (kind, json_type(resolve(schema)["items"]) if kind == "array" else None)
    return fields


def test_the_table_is_kubernetes_own():
    assert podschema.POD_SPEC_FIELDS == kubernetes_fields("io.k8s.api.core.v1.PodSpec")
    assert podschema.CONTAINER_FIELDS == kubernetes_fields("io.k8s.api.core.v1.Container")
    assert podschema.VOLUME_SOURCES == set(kubernetes_fields("io.k8s.api.core.v1.Volume")) - {"name"}


def test_string_maps_are_kubernetes_own():
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_VERSION / "_definitions.json"
    pod_spec = json.loads(root.read_text())["$defs"]["io.k8s.api.core.v1.PodSpec"]["properties"]
    for name in podschema.STRING_MAPS:
        assert pod_spec[name]["additionalProperties"]["type"] in ("string", ["string", "null"]), name


HOSTILE = {
    "nodeSelector as a list": ({"nodeSelector": ["a"]}, "spec.template.spec.nodeSelector", "expected an object"),
    "a nodeSelector value that is a number": ({"nodeSelector": {"disk": 1}}, "spec.template.spec.nodeSelector.disk",
                                              "expected a string (got 1)"),
    "tolerations as a string": ({"tolerations": "x"}, "spec.template.spec.tolerations", "expected a list"),
    "a toleration that is a string": ({"tolerations": ["x"]}, "spec.template.spec.tolerations[0]", "expected an object"),
    "a pod securityContext string": ({"securityContext": "x"}, "spec.template.spec.securityContext", "expected an object"),
    "activeDeadlineSeconds quoted": ({"activeDeadlineSeconds": "100"}, "spec.template.spec.activeDeadlineSeconds",
                                     "expected an integer (got '100')"),
    "hostNetwork quoted": ({"hostNetwork": "false"}, "spec.template.spec.hostNetwork", "expected true or false"),
    "priority true": ({"priority": True}, "spec.template.spec.priority", "expected an integer (got True)"),
}


@pytest.mark.parametrize(("pod_spec", "path", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_pod_field_of_the_wrong_type_is_refused_at_its_field(pod_spec, path, message):
    job = make_job("typed").template({"spec": {**pod_spec, "containers": [{"name": "trainer"}]}}).obj()
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    assert [p.path for p in refused.value.problems] == [path]
    assert message in refused.value.problems[0].message


@pytest.mark.parametrize(("container", "field", "message"), [
    ({"securityContext": "y"}, "securityContext", "expected an object"),
    ({"tty": 1}, "tty", "expected true or false (got 1)"),
    ({"ports": [8080]}, "ports[0]", "expected an object (got 8080)"),
    ({"image": ["busybox"]}, "image", "expected a string"),
])
@pytest.mark.parametrize("kind", ["containers", "initContainers"])
def test_a_container_field_of_the_wrong_type_is_refused_at_its_field(kind, container, field, message):
    if kind == "containers":
        pod_spec = {"containers": [{"name": "trainer", **container}]}
    else:
        pod_spec = {"containers": [{"name": "trainer"}], "initContainers": [{"name": "init", "image": "busybox", **container}]}
    with pytest.raises(InvalidJob) as refused:
        validate_job(make_job("typed").template({"spec": pod_spec}).obj())
    assert [p.path for p in refused.value.problems] == [f"spec.template.spec.{kind}[0].{field}"]
    assert message in refused.value.problems[0].message


def test_what_the_api_server_decodes_passes():
    """null is unset; an integral float is an integer to the decoder; unknown fields are dropped, not refused."""
    pod_spec = {"nodeSelector": {"disk": "ssd"}, "activeDeadlineSeconds": 100.0, "hostNetwork": None,
                "tolerations": [{"key": "gpu", "operator": "Exists"}], "somethingNew": "x",
                "containers": [{"name": "trainer", "tty": False, "ports": [{"containerPort": 9000}], "resizePolicy": None}]}
    assert validate_job(make_job("typed").template({"spec": pod_spec}).obj()).workers >= 1


def test_a_misspelt_pod_or_container_field_is_warned_of_with_the_field_it_may_have_meant():
    """`volumeMount:` (the dataset left unmounted) and `imagePullSecret:` were "valid": the API server drops an
    unknown field of a pod the operator creates, and `kuberl run` ran without it."""
    template = {"spec": {"imagePullSecret": [{"name": "r"}], "nodeSelector": {},
                         "containers": [{"name": "trainer", "comand": ["x"], "volumeMount": [], "image": "i", "zzz": 1}],
                         "initContainers": [{"name": "i", "workingdir": "/w"}]}}
    container = "not a field of a container (Kubernetes v1.33): the API server drops it"
    assert podschema.unknown_fields(template) == [
        ("spec.template.spec.imagePullSecret: not a field of a pod spec (Kubernetes v1.33): the API server drops it;"
         " did you mean imagePullSecrets?"),
        f"spec.template.spec.containers[0].comand: {container}; did you mean command?",
        f"spec.template.spec.containers[0].volumeMount: {container}; did you mean volumeMounts?",
        f"spec.template.spec.containers[0].zzz: {container}",
        f"spec.template.spec.initContainers[0].workingdir: {container}; did you mean workingDir?",
    ]
    for odd in (None, {}, {"spec": None}, {"spec": {"containers": "x"}}, {"spec": {"containers": [None, 3]}}, []):
        assert podschema.unknown_fields(odd) == []


def test_a_stray_template_key_is_quoted_as_one_short_line_however_it_was_written():
    """The key is the tenant's: `kuberl run` printed it with its line break, so `comand\\n[kuberl] evil: Succeeded`
    forged a line of kuberl's own; a megabyte key was printed whole."""
    forged = "comand\n[kuberl] evil: Succeeded\x1b[2J\u202e"
    huge = "x" * 1_000_000
    warnings = podschema.unknown_fields({"spec": {forged: 1, huge: 2, "containers": [{"name": "t", "comand\r": []}]}})
    assert len(warnings) == 3 and all("\n" not in w and "\x1b" not in w and "\r" not in w for w in warnings), warnings
    assert warnings[0].startswith("spec.template.spec.comand\\n[kuberl] evil: Succeeded\\x1b[2J\\u202e: not a field")
    assert warnings[1].startswith(f"spec.template.spec.{'x' * podschema.MAX_KEY_SHOWN}... (1000000 characters): not a field")
    assert warnings[2].startswith("spec.template.spec.containers[0].comand\\r: not a field")
    assert max(map(len, warnings)) < 300


def test_a_template_of_many_stray_keys_is_warned_of_in_a_few_lines_at_once(monkeypatch):
    """50,000 stray keys (800 KB, inside the 1.5 MiB a job file may be) were 50,000 warnings and 6 s of difflib.
    Counted in difflib's calls, not timed (a wall-clock bound failed CI at 1.85 s on a loaded machine)."""
    import difflib

    keys = {f"volumeMount{i}x": 1 for i in range(50_000)}
    matched, close_matches = [], difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: (matched.append(a[0]), close_matches(*a, **k))[1])
    warnings = podschema.unknown_fields({"spec": {**keys, "containers": [{"name": "t", "comand": []}]}})
    assert 0 < len(matched) <= podschema.MAX_UNKNOWN_FIELD_WARNINGS + 1  # the keys warned of by name, and no more
    assert len(warnings) == podschema.MAX_UNKNOWN_FIELD_WARNINGS + 1
    assert warnings[-1].startswith(f"spec.template.spec: {50_001 - podschema.MAX_UNKNOWN_FIELD_WARNINGS} more keys that are"
                                   " no field of a pod spec or container")


def kubernetes_integers(definition: str) -> dict[str, str]:
    """Each integer field below a definition (`[]` for a list's items) with its OpenAPI format."""
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_VERSION / "_definitions.json"
    definitions = json.loads(root.read_text())["$defs"]
    found = {}

    def walk(schema: dict, path: str) -> None:
        while "$ref" in schema:
            schema = definitions[schema["$ref"].rsplit("/", 1)[-1]]
        kind = schema.get("type")
        kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
        if kind == "integer":
            found[path] = schema["format"]
        elif kind == "array":
            walk(schema["items"], f"{path}[]")
        for name, child in (schema.get("properties") or {}).items():
            walk(child, f"{path}.{name}" if path else name)

    walk(definitions[definition], "")
    return found


def test_the_integer_formats_are_kubernetes_own():
    containers = ("containers[]", "initContainers[]", "ephemeralContainers[]")
    pod = {path: f for path, f in kubernetes_integers("io.k8s.api.core.v1.PodSpec").items() if not path.startswith(containers)}
    assert podschema.POD_SPEC_INTEGERS == pod
    assert podschema.CONTAINER_INTEGERS == kubernetes_integers("io.k8s.api.core.v1.Container")


OUT_OF_RANGE = {
    "priority past int32": ({"priority": 2**31}, "spec.template.spec.priority", "int32"),
    "a grace period past int64 in a probe": ({"containers": [{"name": "trainer", "livenessProbe": {
        "exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 2**63}}]},
        "spec.template.spec.containers[0].livenessProbe.terminationGracePeriodSeconds", "int64"),
    "a probe period past int32": ({"containers": [{"name": "trainer", "readinessProbe": {
        "exec": {"command": ["true"]}, "periodSeconds": 3e9}}]},
        "spec.template.spec.containers[0].readinessProbe.periodSeconds", "int32"),
    "runAsUser past int64": ({"securityContext": {"runAsUser": 2**64}}, "spec.template.spec.securityContext.runAsUser", "int64"),
    "a supplemental group past int64": ({"securityContext": {"supplementalGroups": [1, -(2**63) - 1]}},
                                        "spec.template.spec.securityContext.supplementalGroups[1]", "int64"),
    "a toleration's seconds past int64": ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                                                            "tolerationSeconds": 10**19}]},
                                          "spec.template.spec.tolerations[0].tolerationSeconds", "int64"),
    "a secret volume's mode past int32": ({"volumes": [{"name": "s", "secret": {"secretName": "s", "defaultMode": 2**32}}]},
                                          "spec.template.spec.volumes[0].secret.defaultMode", "int32"),
    "an init container's sleep past int64": ({"initContainers": [{"name": "i", "image": "busybox", "restartPolicy": "Always",
                                                                  "lifecycle": {"preStop": {"sleep": {"seconds": 2**63}}}}]},
                                             "spec.template.spec.initContainers[0].lifecycle.preStop.sleep.seconds", "int64"),
}


@pytest.mark.parametrize(("pod_spec", "path", "go_type"), OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_an_integer_its_go_type_cannot_hold_is_refused_at_its_field_with_the_range(pod_spec, path, go_type):
    """It validated, then the API server refused every pod as it decoded it ("cannot unmarshal number ... of type
    int32", a 400) and the job failed as InvalidChild."""
    pod_spec = {"containers": [{"name": "trainer"}], **pod_spec}
    with pytest.raises(InvalidJob) as refused:
        validate_job(make_job("big").template({"spec": pod_spec}).obj())
    assert [p.path for p in refused.value.problems] == [path]
    low, high = podschema.INTEGER_RANGES[go_type]
    assert f"from {low} to {high}" in refused.value.problems[0].message and go_type in refused.value.problems[0].message


def test_the_largest_integers_their_go_types_hold_pass():
    pod_spec = {"priority": 2**31 - 1, "securityContext": {"runAsUser": 2**63 - 1, "supplementalGroups": [-(2**63), None]},
                "containers": [{"name": "trainer", "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2**31 - 1}}]}
    assert validate_job(make_job("big").template({"spec": pod_spec}).obj()).workers >= 1


NOT_INTEGERS = {
    "a pod's runAsUser written as a name": ({"securityContext": {"runAsUser": "nobody"}}, "spec.template.spec.securityContext.runAsUser"),
    "a container's runAsGroup as a fraction": ({"containers": [{"name": "trainer", "securityContext": {"runAsGroup": 1000.5}}]},
                                             "spec.template.spec.containers[0].securityContext.runAsGroup"),
    "a preStop sleep as a duration": ({"containers": [{"name": "trainer", "lifecycle": {"preStop": {"sleep": {"seconds": "5s"}}}}]},
                                      "spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds"),
}


@pytest.mark.parametrize(("pod_spec", "path"), NOT_INTEGERS.values(), ids=NOT_INTEGERS.keys())
def test_a_value_that_is_no_integer_where_the_go_type_is_one_is_refused_at_its_field(pod_spec, path):
    """The API server refuses the pod as it decodes it ("cannot unmarshal string into Go struct field
    PodSecurityContext.spec.securityContext.runAsUser of type int64", a 400); validate said valid and every pod
    create failed as InvalidChild. An integral float is an integer to the decoder (podschema.is_type)."""
    pod_spec = {"containers": [{"name": "trainer"}], **pod_spec}
    with pytest.raises(InvalidJob) as refused:
        validate_job(make_job("j").template({"spec": pod_spec}).obj())
    assert [(p.path, p.message.split(" (got")[0]) for p in refused.value.problems] == [(path, "expected an integer")]
    whole = {"containers": [{"name": "trainer", "securityContext": {"runAsGroup": 1000.0}}], "securityContext": {"runAsUser": 1000}}
    validate_job(make_job("j").template({"spec": whole}).obj())
