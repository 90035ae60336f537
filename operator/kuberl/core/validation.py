"""Kubernetes' own rules, as the API server applies them: object names, labels and
annotations, quantities and resource names, env names, the parts of a pod template
a job carries. Each check returns `Problem`s naming the field (apimachinery's
`pkg/util/validation` and `pkg/apis/core/validation` are the sources cited)."""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_UP, Context, Decimal
from typing import Any

from . import contract, names, podschema, safetext

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes' resource.Quantity pattern as controller-gen writes it, but with a whole exponent:
# ParseQuantity refuses 1e1.5 (apimachinery's api/resource/suffix.go, interpret: strconv.ParseInt),
# which the generated pattern lets through to fail only at PVC or pod create.
QUANTITY = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
# The same, never negative: an emptyDir's sizeLimit (validateVolumeSource: "SizeLimit field must be a valid resource
# quantity" when below 0); and positive: a PVC's storage request (ValidatePersistentVolumeClaimSpec:
# ValidatePositiveQuantityValue, "must be greater than zero"). Both refused the child after the job was accepted.
NON_NEGATIVE_QUANTITY = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
POSITIVE_QUANTITY = r"^\+?(([0-9]*[1-9][0-9]*(\.[0-9]*)?)|([0-9]*\.[0-9]*[1-9][0-9]*))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
MAX_QUANTITY_LENGTH = 64  # so an exponent is always one int() reads (Python refuses over 4300 digits)
# A gymnasium id ("CartPole-v1", "ALE/Pong-v5") or a user's "module:Class".
ENV_ID = r"^([A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+(:[A-Za-z_][A-Za-z0-9_.]*)?$"
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
GPU_RESOURCE = "nvidia.com/gpu"

# A W&B project's or entity's name: what W&B's client refuses (Settings.validate_project: / \ # ? % :, which cut its
# URL path <entity>/<project>/runs/<id>; its artifacts' validate_project_name: CR and LF too), and what W&B would take
# and mangle: other controls, and the bidirectional ones that reorder how the name shows (U+202E, as safetext escapes
# them), written as the characters themselves (Go's RE2, the API server's, reads no \u escape); "." and "..", which
# the URL path resolves away (no lookahead in RE2: a name with one character that is no ".", or dots only, 3 or more).
_NOT_IN_WANDB_NAME = "/\\\\#?%:\\x00-\\x1f\\x7f-\\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
WANDB_NAME = f"^(?:[^{_NOT_IN_WANDB_NAME}]*[^.{_NOT_IN_WANDB_NAME}][^{_NOT_IN_WANDB_NAME}]*|\\.{{3,}})$"

# What a pattern means, for messages a person can act on.
PATTERN_MEANINGS = {
    WANDB_NAME: "a W&B name: none of / \\ # ? % :, no control or bidirectional character, not '.' or '..'",
    QUANTITY: "a Kubernetes quantity such as 500m, 2 or 4Gi",
    NON_NEGATIVE_QUANTITY: "a Kubernetes quantity of at least 0, such as 512Mi or 4Gi",
    POSITIVE_QUANTITY: "a Kubernetes quantity above 0, such as 512Mi or 4Gi",
    # gymnasium.make's own "module:Env-v0" (import module, make the id it registers) is a CleanRL habit
    ENV_ID: 'a gymnasium id such as "CartPole-v1" or "ALE/Pong-v5", or "module:Class" (a class or function that'
            ' makes the env, not gymnasium\'s "module:Env-v0")',
    DNS_1123_SUBDOMAIN: "a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
}


# How deep the API server lets a request's JSON nest: it decodes with Go's encoding/json scanner
# (sigs.k8s.io/json's copy), which refuses past maxNestingDepth, and stores anything up to it, an
# x-kubernetes-preserve-unknown-fields subtree (spec.env.kwargs, spec.template) included.
API_JSON_NESTING = 10_000

# How long a deleted pod may keep its node: bounds suspend, gang restarts and deletion.
MAX_GRACE_SECONDS = 3600


# Every pod of a gang carries its own copy of the template, which the API server stores and the operator
# renders and reads back: a 1.3 MB template x 1,024 workers took 3.6 GB and 31 s of an operator the chart gives
# 256 MiB. 16 KiB per pod at the largest gang is plenty; even so, the operator renders, creates and lists a
# gang a few pods at a time (handlers._create_pods, kubeapi.list_job_pods): a 16 KiB template of small fields
# costs about 14 bytes of memory per byte of template JSON once rendered.
MAX_GANG_TEMPLATE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        # one line, escaped (safetext): a path quotes a tenant's map keys, and this line reaches status and terminals
        return safetext.one_line(f"{self.path}: {self.message}")


class InvalidJob(ValueError):
    """A job that cannot run; carries every problem found, each with its path."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


shown = podschema.shown  # a value in a message: short ones as written, long ones summed up


def name_problems(name: Any) -> list[Problem]:
    if not name:
        return [Problem("metadata.name", "required field is missing")]
    if not isinstance(name, str):
        return [Problem("metadata.name", f"expected a string (got {name!r})")]
    problems = []
    if len(name) > names.MAX_JOB_NAME:
        problems.append(
            Problem(
                "metadata.name",
                f"expected at most {names.MAX_JOB_NAME} characters so every derived name"
                f" (e.g. {names.pvc_name(name)!r}) stays a 63-character DNS label (got {len(name)})",
            )
        )
    if not DNS_1035.fullmatch(name):
        problems.append(
            Problem("metadata.name", f"expected a DNS-1035 label: lowercase letters, digits and '-', starting with a letter (got {name!r})")
        )
    return problems


DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def namespace_problems(path: str, namespace: Any) -> list[Problem]:
    """A namespace, when given, is what the API server accepts (ValidateNamespaceName: a
    DNS-1123 label): it becomes part of every derived DNS name (MASTER_ADDR, PET_RDZV_ID)."""
    if namespace is None:
        return []
    if not isinstance(namespace, str) or len(namespace) > 63 or not DNS_1123_LABEL.fullmatch(namespace):
        return [Problem(path, "expected a namespace: a DNS-1123 label of at most 63 lowercase letters, digits and '-',"
                              f" starting and ending with a letter or digit (got {shown(namespace)})")]
    return []


def label_key_problems(path: str, mapping: Any) -> list[Problem]:
    """Label keys are qualified names; a schema cannot check map keys."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(f"{path}.{key}", "expected a label key: an optional DNS prefix of at most 253 characters and '/', then at most 63 letters,"
                f" digits, '-', '_' or '.' (got {key!r})")
        for key in mapping
        if not isinstance(key, str) or not _qualified_name(key)
    ]
    return podschema.first_of(path, wrong, "keys that are not label keys", Problem)


def label_value_problems(path: str, mapping: Any) -> list[Problem]:
    """Label values as the API server takes them (IsValidLabelValue: at most 63 characters of
    LABEL_VALUE), checked where the model cannot (the template's metadata is kept as written)."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(f"{path}.{key}", f"expected {PATTERN_MEANINGS[LABEL_VALUE]} (got {shown(value)})")
        for key, value in mapping.items()
        if isinstance(value, str) and (len(value) > 63 or not re.fullmatch(LABEL_VALUE, value))
    ]
    return podschema.first_of(path, wrong, "values that are not label values", Problem)


def _annotation_key_problems(path: str, mapping: Any) -> list[Problem]:
    """Annotation keys are qualified names, case aside (ValidateAnnotations:
    IsQualifiedName(strings.ToLower(k))); refused by the API server at pod creation otherwise."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(path, "expected annotation keys that are qualified names: an optional DNS prefix of at most 253 characters"
                " and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
                f" (got key {shown(key)})")
        for key in mapping
        if not isinstance(key, str) or not _qualified_name(key.lower())
    ]
    wrong = podschema.first_of(path, wrong, "keys that are not qualified names", Problem)
    if isinstance(mapping, dict) and not wrong and all(isinstance(v, str) for v in mapping.values()):
        size = sum(len(k.encode()) + len(v.encode()) for k, v in mapping.items())
        if size > MAX_TEMPLATE_ANNOTATION_BYTES:
            wrong.append(Problem(path, f"expected at most {MAX_TEMPLATE_ANNOTATION_BYTES} bytes of keys and values in all"
                                 f" (got {size}): the API server takes {MAX_ANNOTATION_BYTES} (256 KiB) per pod, and"
                                 f" {KUBERL_ANNOTATION_BYTES} are kept for kuberl's own; keep large data in a ConfigMap"))
    return wrong


def annotation_key_problems(path: str, mapping: Any) -> list[Problem]:
    return _annotation_key_problems(path, mapping)


def env_problems(path: str, env: Any) -> list[Problem]:
    """A trainer container's env as the API server and kuberl's contract take it (no identity name, no KUBERL_ one)."""
    return _env_problems(path, env, trainer=True)


def _volcano_queue_problems(annotations: Any) -> list[Problem]:
    """The Volcano queue kuberl's PodGroup takes from the pods' annotation names a Queue object, whose name the API
    server holds to a DNS-1123 subdomain (apiextensions-apiserver customresource validator: ValidateObjectMetaAccessor
    with NameIsDNSSubdomain): any other value names a queue that cannot exist, and the gang never runs."""
    queue = annotations.get(names.VOLCANO_QUEUE_NAME) if isinstance(annotations, dict) else None
    if not isinstance(queue, str) or (len(queue) <= 253 and re.fullmatch(DNS_1123_SUBDOMAIN, queue)):
        return []
    return [Problem(f"spec.template.metadata.annotations.{names.VOLCANO_QUEUE_NAME}",
                    f"expected {PATTERN_MEANINGS[DNS_1123_SUBDOMAIN]}, at most 253 characters: a Volcano Queue's name (got {shown(queue)})")]


def _objects(path: str, items: Any, plural: str, item: str) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """The objects of an optional list field, by index, and a problem for the field or each item that is not one."""
    if items is None:
        return [], []
    if not isinstance(items, list):
        return [], [Problem(path, f"expected a list of {plural} (got {shown(items)})")]
    objects = [(i, x) for i, x in enumerate(items) if isinstance(x, dict)]
    return objects, [Problem(f"{path}[{i}]", f"expected {item} (got {shown(x)})") for i, x in enumerate(items) if not isinstance(x, dict)]


def _named_items_problems(path: str, items: Any, what: str) -> list[Problem]:
    objects, problems = _objects(path, items, what, f"a {what[:-1]} object")
    for i, item in objects:
        name = item.get("name")
        if not isinstance(name, str) or not name:
            problems.append(Problem(f"{path}[{i}].name", f"required: every {what[:-1]} needs a name (merged by name)"))
        elif len(name) > 63 or not DNS_1123_LABEL.fullmatch(name):
            # validateContainerCommon and validateVolumes (pkg/apis/core/validation/validation.go):
            # ValidateDNS1123Label of every container's and volume's name. A name one look-alike letter
            # from kuberl's (Cyrillic 'е' in "trainеr") merged with nothing and was a sidecar of its own.
            near = names.TRAINER_CONTAINER if what == "containers" and _one_letter_apart(name, names.TRAINER_CONTAINER) else None
            problems.append(Problem(f"{path}[{i}].name", f"expected a DNS-1123 label: at most 63 lowercase letters, digits"
                                    f" and '-', starting and ending with a letter or digit (got {name!a})"
                                    + (f"; did you mean {near!r}?" if near else "")))
    return problems


def _meant_as_trainer(name: Any) -> bool:
    """A container name one letter from kuberl's trainer: its name's problem says it all (it lacks no image of its own)."""
    return isinstance(name, str) and name != names.TRAINER_CONTAINER and _one_letter_apart(name, names.TRAINER_CONTAINER)


def _one_letter_apart(name: str, other: str) -> bool:
    return len(name) == len(other) and sum(a != b for a, b in zip(name, other, strict=True)) == 1


# fields with checks of their own (their type included, with a more specific message: here, or the
# container checks validate, run and convert share, localnode.source_problems): not checked twice
_POD_FIELDS_CHECKED_ABOVE = frozenset({"containers", "initContainers", "volumes", "ephemeralContainers",
                                       "terminationGracePeriodSeconds"})
_CONTAINER_FIELDS_CHECKED_ELSEWHERE = frozenset({"env", "envFrom", "volumeMounts", "command", "args"})


def pod_template_problems(template: Any, renamed: str | None = None) -> list[Problem]:
    """The shape the merge relies on, and the pod rules a template can break (each citing the API server's).
    `renamed`: a container the job is told to rename to 'trainer' (a custom trainer's), so no sidecar of its own."""
    if not isinstance(template, dict):
        return []  # the model already reported it
    problems = [
        Problem(f"spec.template.{key}", "unknown field (a PodTemplateSpec has metadata and spec)")
        for key in template if key not in ("metadata", "spec")
    ]
    metadata = template.get("metadata") or {}
    if isinstance(metadata, dict):
        for key in metadata:
            if key not in ("labels", "annotations"):
                problems.append(Problem(f"spec.template.metadata.{key}", "unknown field (only labels and annotations apply to kuberl's pods)"))
        for key in ("labels", "annotations"):
            values = metadata.get(key) or {}
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                problems.append(Problem(f"spec.template.metadata.{key}", "expected a mapping of strings to strings"))
        problems += label_key_problems("spec.template.metadata.labels", metadata.get("labels"))
        problems += label_value_problems("spec.template.metadata.labels", metadata.get("labels"))
        problems += _annotation_key_problems("spec.template.metadata.annotations", metadata.get("annotations"))
        problems += _volcano_queue_problems(metadata.get("annotations"))
    else:
        problems.append(Problem("spec.template.metadata", f"expected an object (got {shown(metadata)})"))
    pod_spec = template.get("spec") or {}
    if not isinstance(pod_spec, dict):
        return problems + [Problem("spec.template.spec", f"expected an object (got {shown(pod_spec)})")]
    problems += _named_items_problems("spec.template.spec.containers", pod_spec.get("containers"), "containers")
    problems += _named_items_problems("spec.template.spec.initContainers", pod_spec.get("initContainers"), "containers")
    problems += _named_items_problems("spec.template.spec.volumes", pod_spec.get("volumes"), "volumes")
    problems += _config_volume_problems(pod_spec)
    problems += _volume_source_problems(pod_spec)
    problems += _duplicate_problems(pod_spec)
    if pod_spec.get("ephemeralContainers") is not None:
        # ValidatePodCreate (pkg/apis/core/validation): "spec.ephemeralContainers: Forbidden: cannot be set on create".
        problems.append(Problem("spec.template.spec.ephemeralContainers", "not allowed: a pod cannot be created with"
                                " ephemeral containers (the API server adds them to running pods only)"))
    problems += _grace_problems(pod_spec.get("terminationGracePeriodSeconds"))
    # ValidatePodSpec (pkg/apis/core/validation): unversionedvalidation.ValidateLabels(spec.NodeSelector, ...)
    problems += label_key_problems("spec.template.spec.nodeSelector", pod_spec.get("nodeSelector"))
    problems += label_value_problems("spec.template.spec.nodeSelector", pod_spec.get("nodeSelector"))
    problems += [Problem(path, message) for path, message in podschema.type_problems(
        "spec.template.spec", {k: v for k, v in pod_spec.items() if k not in _POD_FIELDS_CHECKED_ABOVE},
        podschema.POD_SPEC_FIELDS)]
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(pod_spec.get(kind) if isinstance(pod_spec.get(kind), list) else []):
            if isinstance(container, dict):
                problems += [Problem(path, message) for path, message in podschema.type_problems(
                    f"spec.template.spec.{kind}[{i}]", {k: v for k, v in container.items() if k not in _CONTAINER_FIELDS_CHECKED_ELSEWHERE},
                    podschema.CONTAINER_FIELDS)]
                trainer = kind == "containers" and container.get("name") == names.TRAINER_CONTAINER
                problems += image_problems(f"spec.template.spec.{kind}[{i}].image", container.get("image"))
                problems += resources_problems(container.get("resources"), f"spec.template.spec.{kind}[{i}].resources", template=True)
                problems += _env_problems(f"spec.template.spec.{kind}[{i}].env", container.get("env"), trainer)
                problems += _volume_mount_problems(f"spec.template.spec.{kind}[{i}].volumeMounts", container.get("volumeMounts"))
                problems += _container_problems(f"spec.template.spec.{kind}[{i}]", container,
                                                trainer or (kind == "containers" and container.get("name") == renamed))
                problems += _handler_problems(f"spec.template.spec.{kind}[{i}]", container, kind == "initContainers")
                problems += _nul_problems(f"spec.template.spec.{kind}[{i}]", container)
                problems += _sub_path_problems(f"spec.template.spec.{kind}[{i}].volumeMounts", container.get("volumeMounts"))
                problems += _security_context_problems(f"spec.template.spec.{kind}[{i}].securityContext",
                                                       container.get("securityContext"), pod=False)
    problems += _container_name_problems(pod_spec)
    problems += toleration_problems("spec.template.spec.tolerations", pod_spec.get("tolerations"))
    problems += _pod_field_problems(pod_spec)
    problems += node_affinity_problems("spec.template.spec.affinity", pod_spec.get("affinity"))
    problems += pod_affinity_problems("spec.template.spec.affinity", pod_spec.get("affinity"))
    problems += _security_context_problems("spec.template.spec.securityContext", pod_spec.get("securityContext"), pod=True)
    problems += _spread_problems("spec.template.spec.topologySpreadConstraints", pod_spec.get("topologySpreadConstraints"))
    # An integer its Go type cannot hold: the API server refuses the pod as it decodes it (400), so every pod create
    # failed as InvalidChild; a field another rule above already refused keeps that rule's (narrower) message.
    refused = {problem.path for problem in problems}
    problems += [Problem(path, message) for path, message in podschema.integer_range_problems("spec.template.spec", pod_spec)
                 if path not in refused]
    return problems


# --- what validateContainerCommon (pkg/apis/core/validation/validation.go) refuses in any container -----------
# Each was left to the API server: `kuberl validate` passed the job, and every pod create failed (InvalidChild).

# validatePullPolicy and validateContainerCommon's terminationMessagePolicy; an empty value is defaulted first
# (SetDefaults_Container, pkg/apis/core/v1/defaults.go), so only a value that is none of these is refused.
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
# validateContainerPorts: supportedPortProtocols; an empty protocol is defaulted to TCP (SetDefaults_ContainerPort).
PORT_PROTOCOLS = ("TCP", "UDP", "SCTP")
# IsValidPortName (k8s.io/apimachinery/pkg/util/validation): an IANA_SVC_NAME.
MAX_PORT_NAME = 15
PORT_NAME = re.compile(r"^[-a-z0-9]+$")


def _nul_problems(path: str, container: dict) -> list[Problem]:
    """A NUL byte in the command, args or an env value: execve takes C strings (Go's syscall.Exec answers EINVAL at
    BytePtrFromString), so the runtime can start no such container and every start of the pod fails (StartError)."""
    words = [(f"{path}.{key}[{j}]", word) for key in ("command", "args")
             for j, word in enumerate(container.get(key) if isinstance(container.get(key), list) else [])]
    env = container.get("env") if isinstance(container.get("env"), list) else []
    words += [(f"{path}.env[{j}].value", var.get("value")) for j, var in enumerate(env) if isinstance(var, dict)]
    return [Problem(where, "holds a NUL byte: no process can be started with it (execve takes C strings)")
            for where, word in words if isinstance(word, str) and "\x00" in word]


def _one_of(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}"


def _container_problems(path: str, container: dict, trainer: bool) -> list[Problem]:
    """A container's image, pull and termination message policies and ports, as validateContainerCommon checks
    them. The trainer's image, when the template leaves it out, is kuberl's; any other container brings its own."""
    problems = []
    image = container.get("image")
    if trainer and "image" in container and image in (None, ""):
        problems.append(Problem(f"{path}.image", f"required: a non-empty image name; this one would replace the trainer's"
                                f" (spec.image): leave it out to keep that (got {shown(image)})"))
    elif not trainer and image in (None, "") and not _meant_as_trainer(container.get("name")):  # another type is type_problems'
        got = "none" if image is None else shown(image)
        problems.append(Problem(f"{path}.image", "required: a non-empty image name; a sidecar or init container runs an"
                                f" image of its own (spec.image is the trainer's) (got {got})"))
    for field, allowed in (("imagePullPolicy", PULL_POLICIES), ("terminationMessagePolicy", TERMINATION_MESSAGE_POLICIES)):
        value = container.get(field)
        if isinstance(value, str) and value and value not in allowed:
            problems.append(Problem(f"{path}.{field}", f"expected {_one_of(allowed)} (got {value!r})"))
    ports = container.get("ports")
    seen: set[str] = set()
    for j, port in enumerate(ports if isinstance(ports, list) else []):
        if isinstance(port, dict):
            problems += _port_problems(f"{path}.ports[{j}]", port, seen)
    return podschema.first_of(path, problems, "problems in this container", Problem)


def _port_problems(path: str, port: dict, seen: set[str]) -> list[Problem]:
    """validateContainerPorts: a valid, unique name when named; a port number; a known protocol."""
    problems = []
    name = port.get("name")
    if isinstance(name, str) and name:
        if (len(name) > MAX_PORT_NAME or not PORT_NAME.fullmatch(name) or not re.search("[a-z]", name) or "--" in name
                or name.startswith("-") or name.endswith("-")):
            problems.append(Problem(f"{path}.name", f"expected a port name (IANA_SVC_NAME): at most {MAX_PORT_NAME} lowercase"
                                    " letters, digits and '-', at least one letter, no '--', not starting or ending with"
                                    f" '-' (got {shown(name)}" + (f", {len(name)} characters)" if len(name) > MAX_PORT_NAME else ")")))
        elif name in seen:
            problems.append(Problem(f"{path}.name", f"{name!r} is a duplicate: port names are unique in a container"))
        seen.add(name)
    for field, required in (("containerPort", True), ("hostPort", False)):
        number = port.get(field)
        if number is None or (number == 0 and not required and type(number) is int):
            if required:
                problems.append(Problem(f"{path}.{field}", "required: the port number, from 1 to 65535"))
            continue
        if not podschema.is_type(number, "integer") or not 1 <= number <= 65535:
            problems.append(Problem(f"{path}.{field}", f"expected a port number from 1 to 65535 (got {shown(number)})"))
    protocol = port.get("protocol")
    if protocol not in (None, "") and protocol not in PORT_PROTOCOLS:
        problems.append(Problem(f"{path}.protocol", f"expected {_one_of(PORT_PROTOCOLS)} (got {shown(protocol)})"))
    return problems


PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")  # handlerFromProbe
LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")  # handlerFromLifecycle


def _handler_problems(path: str, container: dict, init: bool) -> list[Problem]:
    """validateHandler: a probe or lifecycle hook names exactly one handler ("must specify a handler type", "may
    not specify more than 1 handler type"); validateLivenessProbe and validateStartupProbe: successThreshold 1
    (0 is defaulted to it, SetDefaults_Probe); validateInitContainers: an init container without restartPolicy
    Always (one that exits before the trainer starts) has no probes or lifecycle ("may not be set for init
    containers without restartPolicy=Always")."""
    problems = []
    hooks = container.get("lifecycle") if isinstance(container.get("lifecycle"), dict) else {}
    fields = [(probe, PROBE_HANDLERS, container.get(probe)) for probe in ("livenessProbe", "readinessProbe", "startupProbe")]
    fields += [(f"lifecycle.{hook}", LIFECYCLE_HANDLERS, hooks.get(hook)) for hook in ("postStart", "preStop")]
    for field, handlers, handler in fields:
        if not isinstance(handler, dict):
            continue  # unset, or type_problems'
        if init and container.get("restartPolicy") != "Always":
            problems.append(Problem(f"{path}.{field.split('.')[0]}", "not allowed in an init container without"
                                    " restartPolicy: Always (it runs to its end before the trainer starts)"))
            break
        named = [h for h in handlers if handler.get(h) is not None]
        if len(named) != 1:
            problems.append(Problem(f"{path}.{field}", f"expected exactly one of {_one_of(handlers)} (got"
                                    f" {' and '.join(named) if named else 'none'})"))
        threshold = handler.get("successThreshold")
        if field in ("livenessProbe", "startupProbe") and podschema.is_type(threshold, "integer") and threshold not in (0, 1):
            problems.append(Problem(f"{path}.{field}.successThreshold", f"expected 1: a {field[:-5]} probe succeeds"
                                    f" at its first success (got {threshold})"))
    return problems


def _sub_path_problems(path: str, mounts: Any) -> list[Problem]:
    """ValidateVolumeMounts: subPath and subPathExpr are relative paths with no '..' element
    (validateLocalDescendingPath), and not both."""
    problems = []
    for j, mount in enumerate(mounts if isinstance(mounts, list) else []):
        if not isinstance(mount, dict):
            continue
        for field in ("subPath", "subPathExpr"):
            sub = mount.get(field)
            if not isinstance(sub, str) or not sub:
                continue
            if sub.startswith("/") or ".." in sub.split("/"):  # filepath.ToSlash: a Linux server splits at / only
                problems.append(Problem(f"{path}[{j}].{field}", "expected a relative path within the volume: not starting"
                                        f" with '/', no '..' element (got {shown(sub)})"))
        if all(isinstance(mount.get(f), str) and mount[f] for f in ("subPath", "subPathExpr")):
            problems.append(Problem(f"{path}[{j}].subPathExpr", "expected subPath or subPathExpr, not both"))
    return podschema.first_of(path, problems, 'subPath problems', Problem)


# ValidatePodSpec: names of other objects a pod refers to are DNS-1123 subdomains (ValidateServiceAccountName,
# ValidatePriorityClassName, ValidateRuntimeClassName, ValidateNodeName).
_REFERENCED_NAMES = ("serviceAccountName", "priorityClassName", "runtimeClassName", "nodeName")
# validateDNSPolicy and ValidatePreemptionPolicy; an empty dnsPolicy is defaulted first (SetDefaults_PodSpec).
_POD_ENUMS = {"dnsPolicy": ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
              "preemptionPolicy": ("PreemptLowerPriority", "Never")}
MAX_INT32 = 2**31 - 1


def _pod_field_problems(pod_spec: dict) -> list[Problem]:
    """What ValidatePodSpec (pkg/apis/core/validation/validation.go) refuses in these pod fields: a name that is no
    DNS-1123 subdomain, a policy it does not know, activeDeadlineSeconds outside 1..2^31-1."""
    problems = []
    for field in _REFERENCED_NAMES:
        name = pod_spec.get(field)
        if isinstance(name, str) and name and (len(name) > 253 or not re.fullmatch(DNS_1123_SUBDOMAIN, name)):
            problems.append(Problem(f"spec.template.spec.{field}", f"expected {PATTERN_MEANINGS[DNS_1123_SUBDOMAIN]},"
                                    f" at most 253 characters (got {shown(name)})"))
    for field, allowed in _POD_ENUMS.items():
        value = pod_spec.get(field)
        if isinstance(value, str) and value and value not in allowed:
            problems.append(Problem(f"spec.template.spec.{field}", f"expected {_one_of(allowed)} (got {value!r})"))
    problems += _dns_config_problems(pod_spec.get("dnsPolicy"), pod_spec.get("dnsConfig"))
    deadline = pod_spec.get("activeDeadlineSeconds")
    if podschema.is_type(deadline, "integer") and not 1 <= deadline <= MAX_INT32:
        problems.append(Problem("spec.template.spec.activeDeadlineSeconds", f"expected from 1 to {MAX_INT32} seconds"
                                f" (got {shown(deadline)}); spec.runPolicy.activeDeadlineSeconds is the job's own"))
    return problems


def node_affinity_problems(path: str, affinity: Any) -> list[Problem]:
    """validateNodeAffinity (pkg/apis/core/validation/validation.go): a required node selector has at least one term
    (ValidateNodeSelector), a preferred term a weight of 1 to 100 (ValidatePreferredSchedulingTerms), and each
    requirement (ValidateNodeSelectorRequirement) a label key and the values its operator takes: some for In and
    NotIn, none for Exists and DoesNotExist, one for Gt and Lt; a field requirement
    (ValidateNodeFieldSelectorRequirement) metadata.name, In or NotIn, one value. GPU jobs pick their nodes so."""
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node, dict):
        return []
    at = f"{path}.nodeAffinity"
    problems: list[Problem] = []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        terms = required.get("nodeSelectorTerms")
        where = f"{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        if not terms:
            problems.append(Problem(where, "required: at least one node selector term (the pod fits no node otherwise)"))
        for i, term in enumerate(terms if isinstance(terms, list) else []):
            problems += _node_selector_term_problems(f"{where}[{i}]", term)
    problems += _preferred_problems(f"{at}.preferredDuringSchedulingIgnoredDuringExecution",
                                    node.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                    "preference", _node_selector_term_problems)
    return podschema.first_of(f"{path}.nodeAffinity", problems, 'node affinity problems', Problem)


def pod_affinity_problems(path: str, affinity: Any) -> list[Problem]:
    """validatePodAffinity and validatePodAntiAffinity (pkg/apis/core/validation/validation.go): each term has a
    topologyKey that is a label key ("can not be empty"), a label selector whose expressions take the values their
    operator takes (ValidateLabelSelectorRequirement), and a preferred term a weight of 1 to 100. "One worker per node"
    is an anti-affinity term, so a typo there failed every pod of the gang."""
    problems: list[Problem] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(kind) if isinstance(affinity, dict) else None
        if not isinstance(block, dict):
            continue
        required = block.get("requiredDuringSchedulingIgnoredDuringExecution")
        for i, term in enumerate(required if isinstance(required, list) else []):
            problems += _pod_affinity_term_problems(f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term)
        problems += _preferred_problems(f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution",
                                        block.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                        "podAffinityTerm", _pod_affinity_term_problems)
    return podschema.first_of(path, problems, 'pod affinity problems', Problem)


def _preferred_problems(path: str, preferred: Any, inner: str,
                        term_problems: Callable[[str, Any], list[Problem]]) -> list[Problem]:
    """A preferred (node or pod) affinity list: each entry's weight, and its term under `inner` (preference,
    podAffinityTerm) checked by `term_problems`; entries that are not objects are the schema's to refuse."""
    problems: list[Problem] = []
    for i, weighted in enumerate(preferred if isinstance(preferred, list) else []):
        if isinstance(weighted, dict):
            problems += _weight_problems(f"{path}[{i}]", weighted.get("weight"))
            problems += term_problems(f"{path}[{i}].{inner}", weighted.get(inner))
    return problems


def _weight_problems(term_path: str, weight: Any) -> list[Problem]:
    """A preferred (node or pod) affinity term's weight: an integer from 1 to 100."""
    if podschema.is_type(weight, "integer") and 1 <= weight <= 100:
        return []
    return [Problem(f"{term_path}.weight", f"expected a weight from 1 to 100 (got {shown(weight)})")]


def _pod_affinity_term_problems(path: str, term: Any) -> list[Problem]:
    if not isinstance(term, dict):
        return []
    problems = []
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key or not _qualified_name(key):
        problems.append(Problem(f"{path}.topologyKey", "required: the node label that names a domain, such as"
                                f" kubernetes.io/hostname (got {shown(key)})"))
    for field in ("labelSelector", "namespaceSelector"):
        selector = term.get(field)
        expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
        for j, requirement in enumerate(expressions if isinstance(expressions, list) else []):
            if not isinstance(requirement, dict):
                continue
            at, operator, values = f"{path}.{field}.matchExpressions[{j}]", requirement.get("operator"), requirement.get("values") or []
            count = len(values) if isinstance(values, list) else 1
            if not isinstance(requirement.get("key"), str) or not _qualified_name(requirement["key"]):
                problems.append(Problem(f"{at}.key", f"expected a label key (got {shown(requirement.get('key'))})"))
            if operator in ("In", "NotIn") and count == 0:
                problems.append(Problem(f"{at}.values", f"required: at least one value with {operator}"))
            elif operator in ("Exists", "DoesNotExist") and count:
                problems.append(Problem(f"{at}.values", f"expected no values with {operator} (got {count})"))
            elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                problems.append(Problem(f"{at}.operator", f"expected In, NotIn, Exists or DoesNotExist (got {shown(operator)})"))
    return problems


def _node_selector_term_problems(path: str, term: Any) -> list[Problem]:
    if not isinstance(term, dict):
        return []
    problems = []
    for kind in ("matchExpressions", "matchFields"):
        requirements = term.get(kind)
        for j, requirement in enumerate(requirements if isinstance(requirements, list) else []):
            if not isinstance(requirement, dict):
                continue
            at = f"{path}.{kind}[{j}]"
            key, operator, values = requirement.get("key"), requirement.get("operator"), requirement.get("values") or []
            count = len(values) if isinstance(values, list) else 1
            if kind == "matchFields":
                if key != "metadata.name":
                    problems.append(Problem(f"{at}.key", f"expected metadata.name, the only node field to select by (got {shown(key)})"))
                if operator not in ("In", "NotIn"):
                    problems.append(Problem(f"{at}.operator", f"expected In or NotIn (got {shown(operator)})"))
                elif count != 1:
                    problems.append(Problem(f"{at}.values", f"expected one node name with {operator} (got {count})"))
                continue
            if not isinstance(key, str) or not _qualified_name(key):
                problems.append(Problem(f"{at}.key", "expected a node label key: an optional DNS prefix and '/', then at most"
                                        f" 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (got {shown(key)})"))
            if operator in ("In", "NotIn") and count == 0:
                problems.append(Problem(f"{at}.values", f"required: at least one value with {operator}"))
            elif operator in ("Exists", "DoesNotExist") and count:
                problems.append(Problem(f"{at}.values", f"expected no values with {operator} (got {count})"))
            elif operator in ("Gt", "Lt") and count != 1:
                problems.append(Problem(f"{at}.values", f"expected one value with {operator} (got {count})"))
            elif operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                problems.append(Problem(f"{at}.operator", f"expected In, NotIn, Exists, DoesNotExist, Gt or Lt (got {shown(operator)})"))
    return problems


WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")  # ValidateWhenUnsatisfiable


def _spread_problems(path: str, constraints: Any) -> list[Problem]:
    """validateTopologySpreadConstraints (pkg/apis/core/validation/validation.go): maxSkew above 0 (ValidateMaxSkew),
    a topologyKey (ValidateTopologyKey), whenUnsatisfiable one of WHEN_UNSATISFIABLE, each {topologyKey,
    whenUnsatisfiable} once (ValidateSpreadConstraintNotRepeat), minDomains above 0 and only with DoNotSchedule
    (validateMinDomains)."""
    problems, seen = [], set()
    for i, constraint in enumerate(constraints if isinstance(constraints, list) else []):
        if not isinstance(constraint, dict):
            continue
        at, skew, key = f"{path}[{i}]", constraint.get("maxSkew"), constraint.get("topologyKey")
        when, domains = constraint.get("whenUnsatisfiable"), constraint.get("minDomains")
        if not podschema.is_type(skew, "integer") or skew < 1:
            problems.append(Problem(f"{at}.maxSkew", f"expected at least 1 (got {shown(skew)})"))
        if not isinstance(key, str) or not key:
            problems.append(Problem(f"{at}.topologyKey", "required: the node label that names a domain, such as"
                                    " kubernetes.io/hostname or topology.kubernetes.io/zone"))
        if when not in WHEN_UNSATISFIABLE:
            problems.append(Problem(f"{at}.whenUnsatisfiable", f"expected {_one_of(WHEN_UNSATISFIABLE)} (got {shown(when)})"))
        elif isinstance(key, str) and (key, when) in seen:
            problems.append(Problem(at, f"topologyKey {key!r} with whenUnsatisfiable {when} is a duplicate: one constraint each"))
        seen.add((key if isinstance(key, str) else None, when))
        if domains is not None and (not podschema.is_type(domains, "integer") or domains < 1):
            problems.append(Problem(f"{at}.minDomains", f"expected at least 1 (got {shown(domains)})"))
        elif domains is not None and when != "DoNotSchedule":
            problems.append(Problem(f"{at}.minDomains", f"expected only with whenUnsatisfiable DoNotSchedule (got {shown(when)})"))
    return podschema.first_of(path, problems, 'spread constraint problems', Problem)


SECCOMP_TYPES = ("Localhost", "RuntimeDefault", "Unconfined")  # validateSeccompProfileType
FS_GROUP_CHANGE_POLICIES = ("OnRootMismatch", "Always")  # validFSGroupChangePolicies


def _security_context_problems(path: str, context: Any, pod: bool) -> list[Problem]:
    """validateSeccompProfileField (pkg/apis/core/validation/validation.go): a seccomp profile's type is one of
    SECCOMP_TYPES ("type is required when seccompProfile is set"), a localhostProfile with Localhost only and then a
    relative path; a pod's fsGroupChangePolicy one of FS_GROUP_CHANGE_POLICIES (validateFSGroupChangePolicy)."""
    if not isinstance(context, dict):
        return []
    problems = []
    profile = context.get("seccompProfile")
    if isinstance(profile, dict):
        kind, local = profile.get("type"), profile.get("localhostProfile")
        if kind not in SECCOMP_TYPES:
            problems.append(Problem(f"{path}.seccompProfile.type", f"expected {_one_of(SECCOMP_TYPES)} (got {shown(kind)})"))
        elif kind == "Localhost" and not isinstance(local, str):
            problems.append(Problem(f"{path}.seccompProfile.localhostProfile", "required with type Localhost: the profile's"
                                    " path, relative to the kubelet's seccomp directory"))
        elif kind == "Localhost" and (local.startswith("/") or ".." in local.split("/")):
            problems.append(Problem(f"{path}.seccompProfile.localhostProfile", "expected a relative path, no '..' element"
                                    f" (got {shown(local)})"))
        elif kind != "Localhost" and local is not None:
            problems.append(Problem(f"{path}.seccompProfile.localhostProfile", f"expected none with type {kind} (only with Localhost)"))
    policy = context.get("fsGroupChangePolicy")
    if pod and policy is not None and policy not in FS_GROUP_CHANGE_POLICIES:
        problems.append(Problem(f"{path}.fsGroupChangePolicy", f"expected {_one_of(FS_GROUP_CHANGE_POLICIES)} (got {shown(policy)})"))
    return problems


def _ip_address(text: Any) -> bool:
    """IsValidIP (k8s.io/apimachinery/pkg/util/validation): netutils.ParseIPSloppy, which takes an IPv4 octet's
    leading zeros (Python's ipaddress does not)."""
    if not isinstance(text, str):
        return False
    if re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", text):
        text = ".".join(str(int(octet)) for octet in text.split("."))
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


MAX_DNS_NAMESERVERS, MAX_DNS_SEARCHES = 3, 32  # validatePodDNSConfig: MaxDNSNameservers, MaxDNSSearchPaths


def _dns_config_problems(policy: Any, config: Any) -> list[Problem]:
    """validatePodDNSConfig (pkg/apis/core/validation/validation.go): dnsPolicy None needs dnsConfig with a
    nameserver ("must provide `dnsConfig` when `dnsPolicy` is None"); at most 3 nameservers, each an IP address
    (IsValidIP), and at most 32 search domains."""
    path = "spec.template.spec.dnsConfig"
    servers = config.get("nameservers") if isinstance(config, dict) else None
    if policy == "None" and not servers:
        return [Problem(path if not isinstance(config, dict) else f"{path}.nameservers", "required with dnsPolicy None: at"
                        " least one nameserver (the pod gets no other DNS configuration)")]
    problems = []
    if isinstance(servers, list):
        if len(servers) > MAX_DNS_NAMESERVERS:
            problems.append(Problem(f"{path}.nameservers", f"expected at most {MAX_DNS_NAMESERVERS} (got {len(servers)})"))
        for i, server in enumerate(servers[:MAX_DNS_NAMESERVERS + 1]):
            if not _ip_address(server):
                problems.append(Problem(f"{path}.nameservers[{i}]", f"expected an IP address (got {shown(server)})"))
    searches = config.get("searches") if isinstance(config, dict) else None
    if isinstance(searches, list) and len(searches) > MAX_DNS_SEARCHES:
        problems.append(Problem(f"{path}.searches", f"expected at most {MAX_DNS_SEARCHES} search domains (got {len(searches)})"))
    return problems


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")  # validateTaintEffect


def toleration_problems(path: str, tolerations: Any) -> list[Problem]:
    """ValidateTolerations (pkg/apis/core/validation/validation.go), its rules every server version shares: a key is
    a qualified name; no key only with operator Exists; tolerationSeconds only with effect NoExecute; Exists with no
    value, Equal (or no operator) with a label value; an effect, when set, one of TAINT_EFFECTS. Another operator is
    left to the server: v1.35 added Lt and Gt behind a feature gate."""
    problems = []
    for i, toleration in enumerate(tolerations if isinstance(tolerations, list) else []):
        if not isinstance(toleration, dict):
            continue  # the model's or type_problems'
        at = f"{path}[{i}]"
        wrong = [f for f in ("key", "operator", "value", "effect") if toleration.get(f) is not None and not isinstance(toleration[f], str)]
        problems += [Problem(f"{at}.{f}", f"expected a string (got {shown(toleration[f])})") for f in wrong]
        if wrong:
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or ""
        value, effect = toleration.get("value") or "", toleration.get("effect") or ""
        if key and not _qualified_name(key):
            problems.append(Problem(f"{at}.key", "expected a taint key: an optional DNS prefix and '/', then at most 63"
                                    f" letters, digits, '-', '_' or '.', starting and ending with a letter or digit (got {shown(key)})"))
        if not key and operator != "Exists":
            problems.append(Problem(f"{at}.operator", "expected Exists when key is empty (it tolerates every taint);"
                                    f" give the taint's key otherwise (got {shown(operator or None)})"))
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            problems.append(Problem(f"{at}.effect", "expected NoExecute when tolerationSeconds is set (how long the pod"
                                    f" stays on a node tainted NoExecute) (got {shown(effect or None)})"))
        if operator == "Exists" and value:
            problems.append(Problem(f"{at}.value", f"expected no value with operator Exists (got {shown(value)})"))
        elif operator in ("", "Equal") and (len(value) > 63 or not re.fullmatch(LABEL_VALUE, value)):
            problems.append(Problem(f"{at}.value", f"expected {PATTERN_MEANINGS[LABEL_VALUE]} (got {shown(value)})"))
        if effect and effect not in TAINT_EFFECTS:
            problems.append(Problem(f"{at}.effect", f"expected {_one_of(TAINT_EFFECTS)}, or none for every effect (got {shown(effect)})"))
    return podschema.first_of(path, problems, 'toleration problems', Problem)


def _container_name_problems(pod_spec: dict) -> list[Problem]:
    """validateContainers and validateInitContainers: container names are unique in the pod, init containers
    included ("Duplicate value"). The template's containers merge with kuberl's by name, so only its sidecars can
    repeat one another; an init container may repeat any of them, kuberl's 'trainer' too."""
    problems = []
    containers = pod_spec.get("containers")
    taken = {names.TRAINER_CONTAINER}
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        name = container.get("name") if isinstance(container, dict) else None
        if not isinstance(name, str) or name == names.TRAINER_CONTAINER:
            continue
        if name in taken:
            problems.append(Problem(f"spec.template.spec.containers[{i}].name", f"{name!r} is a duplicate: container names"
                                    " are unique in a pod (a container named as an earlier one is another sidecar, not merged)"))
        taken.add(name)
    inits = pod_spec.get("initContainers")
    for i, container in enumerate(inits if isinstance(inits, list) else []):
        name = container.get("name") if isinstance(container, dict) else None
        if not isinstance(name, str):
            continue
        if name in taken:
            own = " (kuberl's trainer container)" if name == names.TRAINER_CONTAINER else ""
            problems.append(Problem(f"spec.template.spec.initContainers[{i}].name", f"{name!r} is a duplicate{own}: container"
                                    " names are unique in a pod, init containers included"))
        taken.add(name)
    return podschema.first_of("spec.template.spec", problems, 'duplicate container names', Problem)


# kuberl's own volumes, in every pod (render._volumes); names.CHECKPOINT_VOLUME is worker 0's only.
KUBERL_VOLUMES = (names.CONFIG_VOLUME, names.SHM_VOLUME, names.TMP_VOLUME)


def volume_reference_problems(template: Any, workers: int | None) -> list[Problem]:
    """ValidateVolumeMounts (pkg/apis/core/validation/validation.go): each mount names a volume of the pod
    ("Not found"). A pod has the template's volumes and kuberl's own; the checkpoint volume is in worker 0's pod
    only, so with several workers a mount of it fails every other pod (`workers` None: not known, not judged)."""
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod_spec, dict):
        return []
    volumes = pod_spec.get("volumes")
    defined = {*KUBERL_VOLUMES, *(v["name"] for v in volumes if isinstance(v, dict) and isinstance(v.get("name"), str))
               } if isinstance(volumes, list) else set(KUBERL_VOLUMES)
    problems = []
    for kind in ("containers", "initContainers"):
        containers = pod_spec.get(kind)
        for i, container in enumerate(containers if isinstance(containers, list) else []):
            mounts = container.get("volumeMounts") if isinstance(container, dict) else None
            for j, mount in enumerate(mounts if isinstance(mounts, list) else []):
                name = mount.get("name") if isinstance(mount, dict) else None
                if not isinstance(name, str) or not name or name in defined:
                    continue  # a missing name is _volume_mount_problems'
                path = f"spec.template.spec.{kind}[{i}].volumeMounts[{j}].name"
                if name == names.CHECKPOINT_VOLUME:
                    if workers is not None and workers > 1:
                        problems.append(Problem(path, f"{name!r} is only in worker 0's pod (kuberl mounts it in the trainer"
                                                f" at {names.CHECKPOINT_MOUNT_DIR}); the other {workers - 1} pod(s) have no"
                                                " such volume: expected a volume of spec.template.spec.volumes"))
                    continue
                problems.append(Problem(path, f"{shown(name)} names no volume of the pod: expected a volume of"
                                        " spec.template.spec.volumes or one of kuberl's own"
                                        f" ({', '.join(repr(v) for v in KUBERL_VOLUMES)})"))
    return podschema.first_of("spec.template.spec", problems, 'mounts of volumes the pod lacks', Problem)


def image_problems(path: str, image: Any) -> list[Problem]:
    """validateContainersOnlyForPod (pkg/apis/core/validation/validation.go) refuses a pod whose container
    image has leading or trailing whitespace (a pod template keeps it, for compatibility): `image: |` in
    YAML ends the name with a line break, and every pod create failed after kuberl validate passed it."""
    if isinstance(image, str) and image != image.strip():
        return [Problem(path, f"must not have leading or trailing whitespace (got {image!r})")]
    return []


def _repeats(items: Any, key: str) -> list[tuple[int, str]]:
    """(index, value) of each object in `items` whose string `key` an earlier one has already
    (what is not an object or a string is named by the shape checks)."""
    seen: set[str] = set()
    repeats = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        value = item.get(key) if isinstance(item, dict) else None
        if isinstance(value, str):
            if value in seen:
                repeats.append((i, value))
            seen.add(value)
    return repeats


def _duplicate_problems(pod_spec: dict) -> list[Problem]:
    """What the API server refuses in any pod (pkg/apis/core/validation): a volume name twice (validateVolumes:
    "Duplicate value") or a mount path twice in one container (ValidateVolumeMounts: "must be unique"). Merged
    by name, the template's duplicates would silently keep one of the two; a sidecar's would fail every pod."""
    problems = [Problem(f"spec.template.spec.volumes[{i}].name", f"{name!r} is a duplicate: volume names are unique in a pod")
                for i, name in _repeats(pod_spec.get("volumes"), "name")]
    for kind in ("containers", "initContainers"):
        containers = pod_spec.get(kind)
        for i, container in enumerate(containers if isinstance(containers, list) else []):
            mounts = container.get("volumeMounts") if isinstance(container, dict) else None
            problems += [Problem(f"spec.template.spec.{kind}[{i}].volumeMounts[{j}].mountPath",
                                 f"{path!r} is mounted twice: mount paths are unique in a container")
                         for j, path in _repeats(mounts, "mountPath")]
    return problems


# The reference each source needs (validateSecretVolumeSource, validatePersistentClaimVolumeSource,
# validateHostPathVolumeSource: "Required value"); a configMap's name is podsource.source_problems'.
_VOLUME_REFERENCES = {"secret": ("secretName", "the name of the Secret it mounts"),
                      "persistentVolumeClaim": ("claimName", "the name of the PersistentVolumeClaim it mounts"),
                      "hostPath": ("path", "the node's directory or file it mounts")}


def _volume_source_problems(pod_spec: dict) -> list[Problem]:
    """validateVolumeSource (pkg/apis/core/validation/validation.go): a volume has one source ("may not specify
    more than 1 volume type"; none is defaulted to emptyDir, SetDefaults_Volume), and a secret, claim or host path
    names what it mounts."""
    problems = []
    volumes = pod_spec.get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict):
            continue
        sources = sorted(k for k in volume if k in podschema.VOLUME_SOURCES and volume[k] is not None)
        if len(sources) > 1:
            problems.append(Problem(f"spec.template.spec.volumes[{i}]", f"expected one volume source (got {' and '.join(sources)}):"
                                    " a volume of each, each with a name of its own"))
            continue
        field, what = _VOLUME_REFERENCES.get(sources[0], (None, "")) if sources else (None, "")
        source = volume.get(sources[0]) if sources else None
        if field and isinstance(source, dict) and not (isinstance(source.get(field), str) and source[field]):
            got = "none" if source.get(field) is None else shown(source[field])
            problems.append(Problem(f"spec.template.spec.volumes[{i}].{sources[0]}.{field}", f"required: {what} (got {got})"))
    return podschema.first_of("spec.template.spec.volumes", problems, 'volume problems', Problem)


def _config_volume_problems(pod_spec: dict) -> list[Problem]:
    """The template merges by volume name and by mountPath (render.merge_template): a volume named as kuberl's
    configuration volume, or a trainer mount at its path, would replace it, and every rank fail to read
    KUBERL_CONFIG (the environment contract) after its pod started."""
    problems = []
    volumes = pod_spec.get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if isinstance(volume, dict) and volume.get("name") == names.CONFIG_VOLUME:
            problems.append(Problem(f"spec.template.spec.volumes[{i}].name", f"{names.CONFIG_VOLUME!r} is kuberl's own"
                                    f" volume (the trainer configuration at {names.CONFIG_MOUNT_DIR}): name yours otherwise,"
                                    " and its volumeMounts with it"))
    containers = pod_spec.get("containers")
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        if not isinstance(container, dict) or container.get("name") != names.TRAINER_CONTAINER:
            continue
        mounts = container.get("volumeMounts")
        for j, mount in enumerate(mounts if isinstance(mounts, list) else []):
            path = mount.get("mountPath") if isinstance(mount, dict) else None
            if isinstance(path, str) and path.startswith("/") and "/" + posixpath.normpath(path).lstrip("/") == names.CONFIG_MOUNT_DIR:
                problems.append(Problem(f"spec.template.spec.containers[{i}].volumeMounts[{j}].mountPath",
                                        f"{path!r} is where kuberl mounts the trainer configuration (KUBERL_CONFIG):"
                                        " mount yours elsewhere"))
    return problems


def gang_template_problems(template: Any, workers: int) -> list[Problem]:
    """The template's JSON, once per worker, within MAX_GANG_TEMPLATE_BYTES."""
    if not isinstance(template, dict) or not template:
        return []
    size = len(json.dumps(template, separators=(",", ":"), ensure_ascii=False, default=str).encode())
    if size * workers <= MAX_GANG_TEMPLATE_BYTES:
        return []
    return [Problem("spec.template", f"expected at most {MAX_GANG_TEMPLATE_BYTES} bytes of pod template across the gang"
                    f" (got {size} bytes as JSON x spec.workers {workers} = {size * workers}): the operator renders every"
                    " pod at once; use fewer workers, or keep large data in a ConfigMap or Secret")]


# Quantity suffixes (k8s.io/apimachinery/pkg/api/resource): binary, decimal SI, or an exponent.
_QUANTITY_SUFFIXES = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9),
                                        ("T", 12), ("P", 15), ("E", 18))},
}
_QUANTITY_PARTS = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)")
_EXACT = Context(prec=400, Emax=999_999_999_999_999_999, Emin=-999_999_999_999_999_999, traps=[])  # a quantity of 64 characters fits
_NANO = Decimal("1e-9")
STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
QUANTITY_SUFFIX_ERROR = "unable to parse quantity's suffix"  # resource.ErrSuffix


def _int32(n: int) -> int:
    """Go's int32(n): the low 32 bits, signed."""
    return (n + 2**31) % 2**32 - 2**31


def quantity_value(quantity: str | int) -> Decimal:
    """The number a Kubernetes quantity (already matching QUANTITY) stands for, as resource.ParseQuantity reads it
    (k8s.io/apimachinery/pkg/api/resource/quantity.go, and suffix.go's interpret for an exponent): an exponent
    strconv.ParseInt(_, 10, 64) refuses is ValueError (QUANTITY_SUFFIX_ERROR, as the server says it); one past int32
    wraps as int32(parsed) does; a binary-suffixed amount is capped, silently, at 2^63-1 (999999999999Ei is
    9223372036854775807); a decimal one is not (1e999 keeps its value); a non-zero amount rounds away from zero to
    a nano (1e-999 is 1n). Exact: never a float, never infinite. Converting it to int is the caller's to bound."""
    if isinstance(quantity, int):
        return Decimal(quantity)
    sign, whole, fraction, suffix = _QUANTITY_PARTS.fullmatch(quantity).groups()
    unscaled = Decimal(f"{sign}{whole or 0}{fraction or ''}")
    if suffix in _QUANTITY_SUFFIXES:
        value = _EXACT.multiply(unscaled.scaleb(-len(fraction or ""), _EXACT), _QUANTITY_SUFFIXES[suffix])
    else:  # e3, E-2 ("Ei" is a suffix)
        exponent = int(suffix[1:])
        if not -(2**63) <= exponent < 2**63:
            raise ValueError(QUANTITY_SUFFIX_ERROR)
        # inf.Dec's scale: the fraction's digits plus -int32(exponent), all int32 arithmetic
        value = unscaled.scaleb(-_int32(len(fraction or "") + _int32(-_int32(exponent))), _EXACT)
    if value.is_zero():
        return Decimal(0)
    if value.as_tuple().exponent < -9:
        value = value.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)
    if suffix.endswith("i") and abs(value) > MAX_QUANTITY:
        value = Decimal(MAX_QUANTITY).copy_sign(value)
    return value


def exponent_problem(where: str, amount: str | int) -> Problem | None:
    """Why the API server refuses a quantity that matches QUANTITY: an exponent past int64 (ParseQuantity's
    "unable to parse quantity's suffix"), which no pattern can bound; None when it reads."""
    try:
        quantity_value(amount)
    except ValueError:
        return Problem(where, f"expected a quantity whose exponent is a 64-bit integer (got {amount!r}:"
                       f" the API server refuses it, {QUANTITY_SUFFIX_ERROR!r})")
    return None


def _resource_name_ok(name: str) -> bool:
    """validateContainerResourceName: a qualified name; without a domain one of Kubernetes' own
    (cpu, memory, ephemeral-storage, hugepages-<size>); with one, a native (kubernetes.io/) or an
    extended resource, whose name quota's `requests.` prefix must not already start."""
    if not LABEL_KEY.fullmatch(name) or len(name.rpartition("/")[2]) > 63:
        return False
    if "/" not in name:
        return name in STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-")
    return "kubernetes.io/" in name or not name.startswith("requests.")


def _extended(name: str) -> bool:
    """helper.IsExtendedResourceName: a domain-qualified resource that is not Kubernetes' own."""
    return "/" in name and "kubernetes.io/" not in name


def _overcommit_allowed(name: str) -> bool:
    """helper.IsOvercommitAllowed: extended resources and hugepages are requested exactly as limited."""
    return not _extended(name) and not name.startswith("hugepages-")


def resources_problems(resources: Any, path: str = "spec.resources", template: bool = False) -> list[Problem]:
    """What ValidateResourceRequirements refuses at pod create: unknown names, negative amounts, a
    fraction of an extended resource, a request over its limit (or, where no overcommit is allowed,
    a request without its limit or other than it). `template`: a template container's, whose amounts
    no model has checked (a quantity that is none is refused here too) and whose GPUs are its own."""
    if not isinstance(resources, dict):
        return []
    problems, values = [], {}
    for kind in ("requests", "limits"):
        amounts = resources.get(kind)
        for name, amount in (amounts.items() if isinstance(amounts, dict) else ()):
            if name == GPU_RESOURCE and not template:
                continue  # refused whole: GPUs come from spec.gpusPerWorker (a cross-field rule)
            where = f"{path}.{kind}.{name}"
            if not isinstance(name, str) or not _resource_name_ok(name):
                problems.append(Problem(where, "expected a resource name: cpu, memory, ephemeral-storage, hugepages-<size>,"
                                        " or an extended resource with a domain such as example.com/fpga"))
                continue
            if template and isinstance(amount, float) and not isinstance(amount, bool):
                continue  # a JSON number is a quantity too (resource.Quantity's UnmarshalJSON); left to the server
            if isinstance(amount, bool) or not isinstance(amount, int | str) or (
                    isinstance(amount, str) and (len(amount) > MAX_QUANTITY_LENGTH or not re.fullmatch(QUANTITY, amount))):
                if template:  # resource.ParseQuantity refuses it: "quantities must match the regular expression"
                    problems.append(Problem(where, f"expected a Kubernetes quantity such as 500m, 2 or 4Gi (got {shown(amount)})"))
                continue  # spec.resources: the model already names it
            refused = exponent_problem(where, amount)
            if refused:
                problems.append(refused)
                continue
            value = quantity_value(amount)
            if value < 0:
                problems.append(Problem(where, f"expected a quantity of at least 0 (got {amount!r})"))
            elif _extended(name) and value != value.to_integral_value():
                problems.append(Problem(where, f"expected a whole number of {name} (got {amount!r})"))
            else:
                values[kind, name] = (amount, value)
    for (kind, name), (amount, value) in values.items():
        limit = values.get(("limits", name))
        if kind != "requests":
            continue
        if _overcommit_allowed(name):
            if limit is not None and value > limit[1]:
                problems.append(Problem(f"{path}.requests.{name}",
                                        f"expected at most the limit {path}.limits.{name} {limit[0]!r} (got {amount!r})"))
        elif limit is None:
            problems.append(Problem(f"{path}.limits.{name}", f"expected a limit equal to the request {amount!r}:"
                                    f" {name} cannot be overcommitted (or set only the limit)"))
        elif value != limit[1]:
            problems.append(Problem(f"{path}.requests.{name}", f"expected the limit {path}.limits.{name}"
                                    f" {limit[0]!r} (got {amount!r}): {name} cannot be overcommitted"))
    return problems


def _grace_problems(seconds: Any) -> list[Problem]:
    """The template's grace period replaces runPolicy's, so it keeps runPolicy's bound."""
    if seconds is None:
        return []
    path = "spec.template.spec.terminationGracePeriodSeconds"
    hint = "; spec.runPolicy.terminationGracePeriodSeconds is the job's own setting"
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return [Problem(path, f"expected an integer (got {shown(seconds)}){hint}")]
    if not 0 <= seconds <= MAX_GRACE_SECONDS:
        bound = f"at most {MAX_GRACE_SECONDS}" if seconds > 0 else "at least 0"
        return [Problem(path, f"expected {bound} (got {seconds}): a deleted pod keeps its node that long{hint}")]
    return []


def _volume_mount_problems(path: str, mounts: Any) -> list[Problem]:
    """Each mount names a volume and a path, as ValidateVolumeMounts requires (both "Required value")."""
    objects, problems = _objects(path, mounts, "volume mounts", "a volume mount object with name and mountPath")
    for j, mount in objects:
        for field in ("name", "mountPath"):
            if not isinstance(mount.get(field), str) or not mount[field]:
                problems.append(Problem(f"{path}[{j}].{field}", f"required: a non-empty string (got {shown(mount.get(field))})"))
    return problems


# Kubernetes' IsEnvVarName (k8s.io/apimachinery/pkg/util/validation): the rule
# every API server accepts, with or without RelaxedEnvironmentVariableValidation.
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _env_problems(path: str, env: Any, trainer: bool) -> list[Problem]:
    """Env names are valid and values strings (the API server refuses anything
    else at pod create, long after the job was accepted); the trainer's env may
    not set the identity kuberl gives each pod."""
    objects, problems = _objects(path, env, "env vars", "an env var object with name and value")
    for j, var in objects:
        name = var.get("name")
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or name in (".", "..") or name.startswith(".."):
            problems.append(Problem(f"{path}[{j}].name", "expected an env var name: letters, digits, '_', '-' or '.',"
                                    f" not starting with a digit, nor '.' or '..' (got {shown(name)})"))
        elif trainer and contract.is_reserved_env(name):
            problems.append(Problem(f"{path}[{j}].name", f"{name} is reserved: kuberl sets each pod's identity (rank, world"
                                    " size, rendezvous) and every KUBERL_ name; a spec may not set it"))
        elif trainer and name == contract.ENV_TORCH_AGENT_STORE:
            problems.append(Problem(f"{path}[{j}].name", f"{name} is torch's launcher's: torch's launcher sets it for the"
                                    " processes it starts, whose store its agent hosts; set here, rank 0 of a one-process"
                                    " pod joins the rendezvous as a client and no one hosts the store (every start"
                                    " waits rendezvousTimeoutSeconds, then fails as PeerLost)"))
        if "value" in var and var["value"] is not None and not isinstance(var["value"], str):
            problems.append(Problem(f"{path}[{j}].value", f"expected a string; quote it (got {shown(var['value'])})"))
        problems += _value_from_problems(f"{path}[{j}]", var)
    return problems


ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")


def _value_from_problems(path: str, var: dict) -> list[Problem]:
    """validateEnvVarValueFrom (pkg/apis/core/validation/validation.go): valueFrom names exactly one source, and
    none beside a non-empty value ("may not be specified when `value` is not empty"). What each source holds is
    podsource.source_problems' (`kuberl validate` and `kuberl run`)."""
    source = var.get("valueFrom")
    if source is None:
        return []
    kinds = [k for k in ENV_SOURCES if isinstance(source, dict) and source.get(k) is not None]
    if len(kinds) != 1:
        return [Problem(f"{path}.valueFrom", f"expected an object with exactly one of {_one_of(ENV_SOURCES)} (got {shown(source)})")]
    if isinstance(var.get("value"), str) and var["value"]:
        return [Problem(f"{path}.valueFrom", f"expected value or valueFrom, not both: the variable takes its value from"
                        f" {kinds[0]} only when value is empty (got value {shown(var['value'])})")]
    return []


# --- quantities and the downward API -----------------------------------------

# The API server caps a quantity's magnitude at 2^63-1 (k8s.io/apimachinery/pkg/api/resource).
MAX_QUANTITY = 2**63 - 1


# ValidateAnnotations (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): TotalAnnotationSizeLimitB, keys and
# values in bytes. A pod carries the template's beside kuberl's own (render: the config hash, Kueue's and Volcano's
# group keys; about 200 bytes), which keep a share of it.
MAX_ANNOTATION_BYTES = 256 * 1024
KUBERL_ANNOTATION_BYTES = 1024
MAX_TEMPLATE_ANNOTATION_BYTES = MAX_ANNOTATION_BYTES - KUBERL_ANNOTATION_BYTES


def _qualified_name(key: str) -> bool:
    """IsQualifiedName (k8s.io/apimachinery/pkg/util/validation): [DNS-1123 subdomain '/'] name of at most 63."""
    prefix, _, name = key.rpartition("/")
    return bool(LABEL_KEY.fullmatch(key)) and len(name) <= 63 and len(prefix) <= 253


def metadata_problems(metadata: dict) -> list[Problem]:
    """An object's labels and annotations as ValidateObjectMeta checks them (for a custom resource too):
    qualified-name keys, label values of at most 63 characters, at most 256 KiB of annotations."""
    problems = []
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            problems.append(Problem(f"metadata.{field}", f"expected a mapping of strings to strings (got {shown(values)})"))
            continue
        for key, value in values.items():
            if not _qualified_name(key.lower() if field == "annotations" else key):
                problems.append(Problem(f"metadata.{field}.{key}", "expected a key of an optional DNS subdomain and '/', then"
                                        " at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter"
                                        " or digit"))
            elif field == "labels" and (len(value) > 63 or not re.fullmatch(LABEL_VALUE, value)):
                problems.append(Problem(f"metadata.labels.{key}", "expected a label value: at most 63 letters, digits,"
                                        f" '-', '_' or '.', starting and ending with a letter or digit (got {shown(value)})"))
        if field == "annotations":
            size = sum(len(k.encode()) + len(v.encode()) for k, v in values.items())
            if size > MAX_ANNOTATION_BYTES:
                problems.append(Problem("metadata.annotations", f"{size} bytes in all; at most {MAX_ANNOTATION_BYTES} (256 KiB)"))
    return problems
