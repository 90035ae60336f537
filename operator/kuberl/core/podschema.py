"""The JSON type of every field of a pod template's spec and containers, as
the API server decodes them: Kubernetes v1.33's OpenAPI definitions
io.k8s.api.core.v1.PodSpec and io.k8s.api.core.v1.Container
(tests/unit/test_podschema.py checks this table against those definitions as
PyPI `kubernetes-validate` ships them). A value of the wrong type (a list for
`nodeSelector`, a string for `tolerations`) makes the API server refuse the
pod when the operator creates it, after the job's other children exist, and
`kuberl run` would have run it; `kuberl validate`, `run` and the operator
refuse it at its field instead. Only the type is checked here: what each
field may hold is the API server's to say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from . import safetext

T = TypeVar("T")

# field -> (JSON type, the type of its items for an array)
POD_SPEC_FIELDS: dict[str, tuple[str, str | None]] = {
    "activeDeadlineSeconds": ("integer", None), "affinity": ("object", None),
    "automountServiceAccountToken": ("boolean", None), "containers": ("array", "object"),
    "dnsConfig": ("object", None), "dnsPolicy": ("string", None), "enableServiceLinks": ("boolean", None),
    "ephemeralContainers": ("array", "object"), "hostAliases": ("array", "object"), "hostIPC": ("boolean", None),
    "hostNetwork": ("boolean", None), "hostPID": ("boolean", None), "hostUsers": ("boolean", None),
    "hostname": ("string", None), "imagePullSecrets": ("array", "object"), "initContainers": ("array", "object"),
    "nodeName": ("string", None), "nodeSelector": ("object", None), "os": ("object", None),
    "overhead": ("object", None), "preemptionPolicy": ("string", None), "priority": ("integer", None),
    "priorityClassName": ("string", None), "readinessGates": ("array", "object"),
    "resourceClaims": ("array", "object"), "resources": ("object", None), "restartPolicy": ("string", None),
    "runtimeClassName": ("string", None), "schedulerName": ("string", None),
    "schedulingGates": ("array", "object"), "securityContext": ("object", None), "serviceAccount": ("string", None),
    "serviceAccountName": ("string", None), "setHostnameAsFQDN": ("boolean", None),
    "shareProcessNamespace": ("boolean", None), "subdomain": ("string", None),
    "terminationGracePeriodSeconds": ("integer", None), "tolerations": ("array", "object"),
    "topologySpreadConstraints": ("array", "object"), "volumes": ("array", "object"),
}
CONTAINER_FIELDS: dict[str, tuple[str, str | None]] = {
    "args": ("array", "string"), "command": ("array", "string"), "env": ("array", "object"),
    "envFrom": ("array", "object"), "image": ("string", None), "imagePullPolicy": ("string", None),
    "lifecycle": ("object", None), "livenessProbe": ("object", None), "name": ("string", None),
    "ports": ("array", "object"), "readinessProbe": ("object", None), "resizePolicy": ("array", "object"),
    "resources": ("object", None), "restartPolicy": ("string", None), "securityContext": ("object", None),
    "startupProbe": ("object", None), "stdin": ("boolean", None), "stdinOnce": ("boolean", None),
    "terminationMessagePath": ("string", None), "terminationMessagePolicy": ("string", None), "tty": ("boolean", None),
    "volumeDevices": ("array", "object"), "volumeMounts": ("array", "object"), "workingDir": ("string", None),
}
# io.k8s.api.core.v1.Volume's sources: one per volume (an empty one is defaulted to emptyDir)
VOLUME_SOURCES = frozenset({
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI", "emptyDir",
    "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi",
    "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected", "quobyte", "rbd", "scaleIO",
    "secret", "storageos", "vsphereVolume",
})
STRING_MAPS = frozenset({"nodeSelector"})  # objects whose every value is a string or null (additionalProperties)

_EXPECTED = {"object": "an object", "array": "a list", "string": "a string", "boolean": "true or false",
             "integer": "an integer"}


def is_type(value: Any, json_type: str) -> bool:
    """Whether the API server's decoder takes `value` as `json_type` (an integral
    float is an integer to it, a bool is never a number)."""
    if json_type == "object":
        return isinstance(value, dict)
    if json_type == "array":
        return isinstance(value, list)
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    return True


def shown(value: Any) -> str:
    """A value as a message quotes it: as written up to 60 characters, else a
    list's or mapping's size, or a scalar cut short (a refusal stays readable)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{type(value).__name__} of {len(value)} entries" if isinstance(value, (dict, list)) else text[:57] + "..."


def type_problems(path: str, obj: dict, fields: dict[str, tuple[str, str | None]]) -> list[tuple[str, str]]:
    """(field path, what was expected) for each field of `obj` whose value the
    API server would refuse by its type; null is unset, unknown fields are not
    this check's (the API server drops them)."""
    problems = []
    for name, value in obj.items():
        if value is None or name not in fields:
            continue
        json_type, item_type = fields[name]
        if not is_type(value, json_type):
            problems.append((f"{path}.{name}", f"expected {_EXPECTED[json_type]} (got {shown(value)})"))
        elif item_type is not None:
            wrong = [(f"{path}.{name}[{i}]", f"expected {_EXPECTED[item_type]} (got {shown(item)})")
                     for i, item in enumerate(value) if item is not None and not is_type(item, item_type)]
            problems += first_of(f"{path}.{name}", wrong, "items of the wrong type", lambda *problem: problem)
        elif name in STRING_MAPS:
            wrong = [(f"{path}.{name}.{key}", f"expected a string (got {shown(item)})") for key, item in value.items()
                     if item is not None and not isinstance(item, str)]
            problems += first_of(f"{path}.{name}", wrong, "values of the wrong type", lambda *problem: problem)
    return problems


# The integer fields of a pod spec and of a container (paths below it, `[]` for each item of a list) with their
# OpenAPI format: the API server decodes each into a Go int32 or int64, and a number that does not fit is a 400
# ("json: cannot unmarshal number 3000000000 into Go struct field PodSpec.spec.priority of type int32": literalStore
# in sigs.k8s.io/json's decode.go, `strconv.ParseInt(s, 10, 64)` then `v.OverflowInt(n)`). tests/unit/
# test_podschema.py checks both tables against v1.33's definitions.
POD_SPEC_INTEGERS: dict[str, str] = {
    "activeDeadlineSeconds": "int64",
    "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[].weight": "int32",
    "affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[].weight": "int32",
    "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[].weight": "int32",
    "priority": "int32", "securityContext.fsGroup": "int64", "securityContext.runAsGroup": "int64",
    "securityContext.runAsUser": "int64", "securityContext.supplementalGroups[]": "int64",
    "terminationGracePeriodSeconds": "int64", "tolerations[].tolerationSeconds": "int64",
    "topologySpreadConstraints[].maxSkew": "int32", "topologySpreadConstraints[].minDomains": "int32",
    "volumes[].awsElasticBlockStore.partition": "int32", "volumes[].configMap.defaultMode": "int32",
    "volumes[].configMap.items[].mode": "int32", "volumes[].downwardAPI.defaultMode": "int32",
    "volumes[].downwardAPI.items[].mode": "int32",
    "volumes[].ephemeral.volumeClaimTemplate.metadata.deletionGracePeriodSeconds": "int64",
    "volumes[].ephemeral.volumeClaimTemplate.metadata.generation": "int64", "volumes[].fc.lun": "int32",
    "volumes[].gcePersistentDisk.partition": "int32", "volumes[].iscsi.lun": "int32",
    "volumes[].projected.defaultMode": "int32", "volumes[].projected.sources[].configMap.items[].mode": "int32",
    "volumes[].projected.sources[].downwardAPI.items[].mode": "int32",
    "volumes[].projected.sources[].secret.items[].mode": "int32",
    "volumes[].projected.sources[].serviceAccountToken.expirationSeconds": "int64",
    "volumes[].secret.defaultMode": "int32", "volumes[].secret.items[].mode": "int32",
}
CONTAINER_INTEGERS: dict[str, str] = {
    "lifecycle.postStart.sleep.seconds": "int64", "lifecycle.preStop.sleep.seconds": "int64",
    "livenessProbe.failureThreshold": "int32", "livenessProbe.grpc.port": "int32",
    "livenessProbe.initialDelaySeconds": "int32", "livenessProbe.periodSeconds": "int32",
    "livenessProbe.successThreshold": "int32", "livenessProbe.terminationGracePeriodSeconds": "int64",
    "livenessProbe.timeoutSeconds": "int32", "ports[].containerPort": "int32", "ports[].hostPort": "int32",
    "readinessProbe.failureThreshold": "int32", "readinessProbe.grpc.port": "int32",
    "readinessProbe.initialDelaySeconds": "int32", "readinessProbe.periodSeconds": "int32",
    "readinessProbe.successThreshold": "int32", "readinessProbe.terminationGracePeriodSeconds": "int64",
    "readinessProbe.timeoutSeconds": "int32", "securityContext.runAsGroup": "int64",
    "securityContext.runAsUser": "int64", "startupProbe.failureThreshold": "int32",
    "startupProbe.grpc.port": "int32", "startupProbe.initialDelaySeconds": "int32",
    "startupProbe.periodSeconds": "int32", "startupProbe.successThreshold": "int32",
    "startupProbe.terminationGracePeriodSeconds": "int64", "startupProbe.timeoutSeconds": "int32",
}
INTEGER_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _values_at(obj: Any, segments: list[str], path: str) -> list[tuple[str, Any]]:
    """(path, value) of each value set at `segments` below `obj`; anything of the wrong shape on the way is skipped
    (type_problems' to report)."""
    if not segments:  # null is unset, in a list too: the decoder leaves a Go int at 0 for it (literalStore's 'n')
        return [(path, obj)] if obj is not None else []
    if not isinstance(obj, dict):
        return []
    name, each = segments[0].removesuffix("[]"), segments[0].endswith("[]")
    value = obj.get(name)
    if not each:
        return _values_at(value, segments[1:], f"{path}.{name}") if value is not None else []
    items = value if isinstance(value, list) else []
    return [found for i, item in enumerate(items) for found in _values_at(item, segments[1:], f"{path}.{name}[{i}]")]


def integer_range_problems(path: str, pod_spec: Any) -> list[tuple[str, str]]:
    """(field path, what was expected) for each integer of a pod spec (`path`) or its containers that its Go type
    cannot hold, or value there that is no integer: every pod create would be refused as a 400. A field with a narrower rule of its own (a port, a
    deadline) is that rule's to report too."""
    if not isinstance(pod_spec, dict):
        return []
    places = [(path, pod_spec, POD_SPEC_INTEGERS)]
    for kind in ("containers", "initContainers"):
        items = pod_spec.get(kind)
        places += [(f"{path}.{kind}[{i}]", c, CONTAINER_INTEGERS) for i, c in enumerate(items if isinstance(items, list) else [])]
    problems = []
    for at, obj, table in places:
        for field, go_type in table.items():
            low, high = INTEGER_RANGES[go_type]
            expected = f"expected an integer from {low} to {high}: the API server reads it as an {go_type}"
            for where, value in _values_at(obj, field.split("."), at):
                if not is_type(value, "integer"):  # a string or fraction cannot be decoded into it either (400)
                    problems.append((where, f"expected an integer (got {shown(value)})"))
                elif not low <= value <= high:
                    problems.append((where, f"{expected} (got {shown(value)})"))
    return first_of(path, problems, "integers out of range", lambda *problem: problem)


MAX_ITEM_PROBLEMS = 3  # per field: a list of 400,000 wrong items is one mistake, not 400,000 lines


def first_of(path: str, wrong: list[T], more: str, make: Callable[[str, str], T]) -> list[T]:
    """A field's first MAX_ITEM_PROBLEMS problems, then one `make(path, "N more <more>")`."""
    if len(wrong) <= MAX_ITEM_PROBLEMS:
        return wrong
    return [*wrong[:MAX_ITEM_PROBLEMS], make(path, f"{len(wrong) - MAX_ITEM_PROBLEMS} more {more}")]


def template_of(job: Any) -> Any:
    """spec.template of a job document, whatever else it holds."""
    spec = job.get("spec") if isinstance(job, dict) else None
    return spec.get("template") if isinstance(spec, dict) else None


MAX_UNKNOWN_FIELD_WARNINGS = 10  # a template of 50,000 stray keys is one mistake, not 50,000 lines (nor 6 s of difflib)
MAX_KEY_SHOWN = 64  # characters of a stray key quoted; longer than any field, so no hint is lost by the cut


def unknown_fields(template: Any) -> list[str]:
    """A warning for each key of spec.template's pod spec and containers that is no field of a v1.33 PodSpec or
    Container, with the field it may have meant: the API server drops such a key when the operator creates the pod
    (a client's default field validation is Warn), so `volumeMount:` left a dataset unmounted without a word. A
    warning, not a refusal: a newer Kubernetes may have the field. The key is the tenant's text: quoted as one line
    (safetext), cut short, the first MAX_UNKNOWN_FIELD_WARNINGS of them, then how many more."""
    import difflib

    def unknown(path: str, obj: Any, fields: dict[str, tuple[str, str | None]]) -> list[tuple[str, str]]:
        if not isinstance(obj, dict):
            return []
        return [(path, key) for key in obj if isinstance(key, str) and key not in fields]

    def warning(path: str, key: str, fields: dict[str, tuple[str, str | None]], what: str) -> str:
        close = (difflib.get_close_matches(key, fields, n=1, cutoff=0.75) or [f for f in fields if f.lower() == key.lower()]
                 if len(key) <= MAX_KEY_SHOWN else [])
        hint = f"; did you mean {close[0]}?" if close else ""
        shown = safetext.one_line(key if len(key) <= MAX_KEY_SHOWN else f"{key[:MAX_KEY_SHOWN]}... ({len(key)} characters)")
        return f"{path}.{shown}: not a field of a {what} (Kubernetes v1.33): the API server drops it{hint}"

    pod_spec = template.get("spec") if isinstance(template, dict) else None
    found = [(*item, POD_SPEC_FIELDS, "pod spec") for item in unknown("spec.template.spec", pod_spec, POD_SPEC_FIELDS)]
    for kind in ("containers", "initContainers"):
        items = pod_spec.get(kind) if isinstance(pod_spec, dict) else None
        for i, container in enumerate(items if isinstance(items, list) else []):
            found += [(*item, CONTAINER_FIELDS, "container")
                      for item in unknown(f"spec.template.spec.{kind}[{i}]", container, CONTAINER_FIELDS)]
    warnings = [warning(*item) for item in found[:MAX_UNKNOWN_FIELD_WARNINGS]]
    if len(found) > MAX_UNKNOWN_FIELD_WARNINGS:
        warnings.append(f"spec.template.spec: {len(found) - MAX_UNKNOWN_FIELD_WARNINGS} more keys that are no field of a"
                        " pod spec or container (Kubernetes v1.33): the API server drops them")
    return warnings


def priority_warnings(template: Any) -> list[str]:
    """A warning for spec.template.spec.priority: the Priority admission plugin (on in every API server by default;
    plugin/pkg/admission/priority/admission.go) sets a pod's priority from its PriorityClass, or the global default
    class, or 0, and refuses (403) a pod whose own differs, so every pod create failed. A warning, not a refusal:
    the value may be the class's own, which only the cluster knows."""
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod_spec, dict) or not is_type(pod_spec.get("priority"), "integer"):
        return []
    warning = (f"spec.template.spec.priority: the API server sets it from the pod's PriorityClass (0 with none and no"
               f" global default) and refuses a pod whose priority differs (got {shown(pod_spec['priority'])}): leave it out"
               " and set spec.priorityClassName")
    return [warning]
