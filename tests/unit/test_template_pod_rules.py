"""Pod rules of the API server that a spec.template can break, refused by `validate_job` (so by `kuberl validate`,
the operator and `kuberl run`) at the template's field, with what was expected. Each was left to the API server:
the job was accepted, then every pod create was refused and the job failed late as InvalidChild. The rules are
pkg/apis/core/validation/validation.go's (Kubernetes v1.33), each test naming its function; what the server
accepts passes (the last tests)."""

import pytest
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job


def sidecar(**fields) -> dict:
    return {"name": "shipper", "image": "fluent/fluent-bit:3.0", **fields}


def refused(template: dict, workers: int = 2) -> list[str]:
    with pytest.raises(InvalidJob) as invalid:
        validate_job(make_job("rules").workers(workers).template(template).obj())
    return [str(p) for p in invalid.value.problems]


def refused_at(where: str, field: str, value: object) -> list[str]:
    """The problems of a job whose `field` is `value`, set where `where` says: the spec's own field (spec.FIELD)
    or its pod template's (spec.template.spec.FIELD)."""
    job = make_job("rules").workers(2)
    job = job.with_spec(**{field: value}) if where == f"spec.{field}" else job.template({"spec": {field: value}})
    with pytest.raises(InvalidJob) as invalid:
        validate_job(job.obj())
    return [str(p) for p in invalid.value.problems]


# ValidateVolumeMounts: field.NotFound(idxPath.Child("name"), mnt.Name) when no volume of the pod has that name.
@pytest.mark.parametrize(("template", "path", "words"), [
    ({"spec": {"containers": [sidecar(volumeMounts=[{"name": "data", "mountPath": "/data"}])]}},
     "spec.template.spec.containers[0].volumeMounts[0].name", ("'data' names no volume of the pod: expected a volume of"
                                                               " spec.template.spec.volumes or one of kuberl's own ('config', 'dshm', 'tmp')")),
    ({"spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": "dataset", "mountPath": "/data"}]}],
               "volumes": [{"name": "data", "emptyDir": {}}]}},
     "spec.template.spec.containers[0].volumeMounts[0].name", "'dataset' names no volume of the pod"),
    ({"spec": {"initContainers": [{"name": "fetch", "image": "busybox", "volumeMounts": [{"name": "cache", "mountPath": "/c"}]}]}},
     "spec.template.spec.initContainers[0].volumeMounts[0].name", "'cache' names no volume of the pod"),
    ({"spec": {"containers": [sidecar(volumeMounts=[{"name": "checkpoints", "mountPath": "/ckpt"}])]}},
     "spec.template.spec.containers[0].volumeMounts[0].name", "'checkpoints' is only in worker 0's pod"),
], ids=["sidecar", "trainer", "init-container", "checkpoints-beside-worker-0"])
def test_a_mount_of_a_volume_the_pod_lacks_is_refused(template, path, words):
    [problem] = refused(template)
    assert problem.startswith(f"{path}: {words}"), problem


def test_the_checkpoint_volume_may_be_mounted_by_a_sidecar_of_a_single_worker():
    """One pod, worker 0's: it has the volume (render._volumes), as have pods with a template volume of that name."""
    mount = {"spec": {"containers": [sidecar(volumeMounts=[{"name": "checkpoints", "mountPath": "/ckpt", "readOnly": True}])]}}
    assert validate_job(make_job("one").workers(1).template(mount).obj()).workers == 1
    own = {"spec": {**mount["spec"], "volumes": [{"name": "checkpoints", "emptyDir": {}}]}}
    assert validate_job(make_job("own").workers(4).template(own).obj()).workers == 4


# IsValidPortName (k8s.io/apimachinery/pkg/util/validation), called by validateContainerPorts: an IANA_SVC_NAME.
@pytest.mark.parametrize("name", ["prometheus-metrics", "Metrics", "9090", "metrics--0", "-metrics"],
                         ids=["16-characters", "uppercase", "no-letter", "double-hyphen", "leading-hyphen"])
def test_a_port_name_that_is_no_iana_service_name_is_refused(name):
    [problem] = refused({"spec": {"containers": [sidecar(ports=[{"name": name, "containerPort": 2020}])]}})
    assert problem.startswith("spec.template.spec.containers[0].ports[0].name: expected a port name (IANA_SVC_NAME):"
                              " at most 15 lowercase letters, digits and '-'"), problem
    assert repr(name) in problem


# validateContainerPorts: a duplicate name ("Duplicate value"), containerPort required and 1..65535, hostPort
# 1..65535 when set, protocol one of supportedPortProtocols.
@pytest.mark.parametrize(("ports", "path", "words"), [
    ([{"name": "http", "containerPort": 2020}, {"name": "http", "containerPort": 2021}], "ports[1].name",
     "'http' is a duplicate: port names are unique in a container"),
    ([{"name": "http"}], "ports[0].containerPort", "required: the port number, from 1 to 65535"),
    ([{"containerPort": 70000}], "ports[0].containerPort", "expected a port number from 1 to 65535 (got 70000)"),
    ([{"containerPort": 2020, "protocol": "tcp"}], "ports[0].protocol", "expected TCP, UDP or SCTP (got 'tcp')"),
], ids=["duplicate-name", "no-number", "out-of-range", "lowercase-protocol"])
def test_a_port_the_api_server_refuses_is_refused(ports, path, words):
    [problem] = refused({"spec": {"containers": [sidecar(ports=ports)]}})
    assert problem == f"spec.template.spec.containers[0].{path}: {words}"


# validatePullPolicy: field.NotSupported unless Always, IfNotPresent or Never (an empty one is defaulted first,
# SetDefaults_Container); validateContainerCommon checks terminationMessagePolicy the same way.
@pytest.mark.parametrize(("container", "field", "value", "allowed"), [
    (sidecar(imagePullPolicy="always"), "imagePullPolicy", "always", "Always, IfNotPresent or Never"),
    ({"name": "trainer", "imagePullPolicy": "IfNotPresnt"}, "imagePullPolicy", "IfNotPresnt", "Always, IfNotPresent or Never"),
    (sidecar(terminationMessagePolicy="FallbackToLogs"), "terminationMessagePolicy", "FallbackToLogs", "File or FallbackToLogsOnError"),
], ids=["sidecar-lowercase", "trainer-typo", "termination-message-policy"])
def test_a_policy_the_api_server_does_not_support_is_refused(container, field, value, allowed):
    [problem] = refused({"spec": {"containers": [container]}})
    assert problem == f"spec.template.spec.containers[0].{field}: expected {allowed} (got {value!r})"


# validateEnvVarValueFrom: "may not be specified when `value` is not empty"; "must specify one of: `fieldRef`,
# `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"; "may not have more than one field specified at a time".
FIELD_REF = {"fieldRef": {"fieldPath": "metadata.name"}}
SECRET_REF = {"secretKeyRef": {"name": "s3", "key": "token"}}


@pytest.mark.parametrize(("var", "words"), [
    ({"name": "POD", "value": "x", "valueFrom": FIELD_REF}, "expected value or valueFrom, not both"),
    ({"name": "POD", "valueFrom": {}}, ("expected an object with exactly one of fieldRef, resourceFieldRef,"
                                        " configMapKeyRef or secretKeyRef (got {})")),
    ({"name": "POD", "valueFrom": {**FIELD_REF, **SECRET_REF}}, "expected an object with exactly one of"),
], ids=["value-and-valueFrom", "no-source", "two-sources"])
def test_an_env_var_with_other_than_one_source_is_refused(var, words):
    for container in (sidecar(env=[var]), {"name": "trainer", "env": [{"name": "A", "value": "1"}, var]}):
        index = len(container["env"]) - 1
        [problem] = refused({"spec": {"containers": [container]}})
        assert problem.startswith(f"spec.template.spec.containers[0].env[{index}].valueFrom: {words}"), problem


# validateContainerCommon: field.Required(path.Child("image"), "") for any container; the trainer's is kuberl's
# unless the template replaces it.
@pytest.mark.parametrize(("template", "path", "words"), [
    ({"spec": {"containers": [{"name": "shipper"}]}}, "containers[0].image", ("a sidecar or init container runs an image"
                                                                              " of its own (spec.image is the trainer's) (got none)")),
    ({"spec": {"initContainers": [{"name": "fetch", "image": ""}]}}, "initContainers[0].image", "(got '')"),
    ({"spec": {"containers": [{"name": "trainer", "image": None}]}}, "containers[0].image", ("this one would replace the"
                                                                                             " trainer's (spec.image): leave it out to keep that (got None)")),
], ids=["sidecar-without", "init-container-empty", "trainer-null"])
def test_a_container_without_an_image_is_refused(template, path, words):
    [problem] = refused(template)
    assert problem.startswith(f"spec.template.spec.{path}: required: a non-empty image name") and problem.endswith(words), problem


# validateContainers and validateInitContainers: field.Duplicate(path.Child("name"), ...) for a name already taken
# in the pod, init containers included. The template's sidecars are appended, not merged with each other.
@pytest.mark.parametrize(("template", "path", "words"), [
    ({"spec": {"containers": [sidecar(), sidecar()]}}, "containers[1].name", "'shipper' is a duplicate: container names are unique"),
    ({"spec": {"initContainers": [{"name": "trainer", "image": "busybox"}]}}, "initContainers[0].name",
     "'trainer' is a duplicate (kuberl's trainer container)"),
    ({"spec": {"containers": [sidecar()], "initContainers": [sidecar()]}}, "initContainers[0].name", "'shipper' is a duplicate"),
], ids=["two-sidecars", "init-container-named-trainer", "init-container-named-as-a-sidecar"])
def test_a_container_name_taken_in_the_pod_is_refused(template, path, words):
    [problem] = refused(template)
    assert problem.startswith(f"spec.template.spec.{path}: {words}"), problem


# validateHandler: "must specify a handler type" / "may not specify more than 1 handler type"; validateLivenessProbe
# and validateStartupProbe: successThreshold "must be 1"; validateInitContainers: probes and lifecycle "may not be
# set for init containers without restartPolicy=Always".
EXEC = {"exec": {"command": ["true"]}}


@pytest.mark.parametrize(("template", "path", "words"), [
    ({"spec": {"containers": [sidecar(livenessProbe={"periodSeconds": 5})]}}, "containers[0].livenessProbe",
     "expected exactly one of exec, httpGet, tcpSocket or grpc (got none)"),
    ({"spec": {"containers": [{"name": "trainer", "readinessProbe": {**EXEC, "tcpSocket": {"port": 9090}}}]}},
     "containers[0].readinessProbe", "expected exactly one of exec, httpGet, tcpSocket or grpc (got exec and tcpSocket)"),
    ({"spec": {"containers": [sidecar(lifecycle={"preStop": {}})]}}, "containers[0].lifecycle.preStop",
     "expected exactly one of exec, httpGet, tcpSocket or sleep (got none)"),
    ({"spec": {"containers": [sidecar(startupProbe={**EXEC, "successThreshold": 3})]}}, "containers[0].startupProbe.successThreshold",
     "expected 1: a startup probe succeeds at its first success (got 3)"),
    ({"spec": {"initContainers": [{"name": "fetch", "image": "busybox", "readinessProbe": EXEC}]}}, "initContainers[0].readinessProbe",
     "not allowed in an init container without restartPolicy: Always"),
], ids=["probe-without-handler", "probe-with-two", "hook-without-handler", "startup-success-threshold", "probe-of-an-init-container"])
def test_a_probe_or_hook_the_api_server_refuses_is_refused(template, path, words):
    [problem] = refused(template)
    assert problem.startswith(f"spec.template.spec.{path}: {words}"), problem


# ValidateVolumeMounts: validateLocalDescendingPath(subPath) "must be a relative path", "must not contain '..'";
# "subPathExpr and subPath are mutually exclusive".
@pytest.mark.parametrize(("mount", "field", "words"), [
    ({"subPath": "/models"}, "subPath", "expected a relative path within the volume: not starting with '/', no '..' element"),
    ({"subPathExpr": "$(POD_NAME)/../x"}, "subPathExpr", "expected a relative path within the volume"),
    ({"subPath": "a", "subPathExpr": "$(POD_NAME)"}, "subPathExpr", "expected subPath or subPathExpr, not both"),
], ids=["absolute", "backstep", "both"])
def test_a_sub_path_the_api_server_refuses_is_refused(mount, field, words):
    container = sidecar(volumeMounts=[{"name": "data", "mountPath": "/data", **mount}])
    [problem] = refused({"spec": {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}]}})
    assert problem.startswith(f"spec.template.spec.containers[0].volumeMounts[0].{field}: {words}"), problem


# ValidateTolerations: a key is a qualified name (ValidateLabelName); "operator must be Exists when `key` is empty";
# "effect must be 'NoExecute' when `tolerationSeconds` is set"; "value must be empty when `operator` is 'Exists'";
# Equal's value a label value (IsValidLabelValue); validateTaintEffect's NotSupported. GPU nodes are tainted, so
# spec.tolerations is in most GPU jobs: a typo there failed every pod create.
@pytest.mark.parametrize(("toleration", "field", "words"), [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedul"}, "effect",
     "expected NoSchedule, PreferNoSchedule or NoExecute, or none for every effect (got 'NoSchedul')"),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"}, "value", "expected no value with operator Exists"),
    ({"operator": "Equal", "value": "gpu"}, "operator", "expected Exists when key is empty"),
    ({"key": "nvidia.com/gpu type", "operator": "Exists"}, "key", "expected a taint key"),
    ({"key": "spot", "operator": "Exists", "tolerationSeconds": 60}, "effect", "expected NoExecute when tolerationSeconds is set"),
    ({"key": "pool", "value": "a100 80gb"}, "value", "expected a label value"),
], ids=["effect-typo", "exists-with-value", "no-key-equal", "key-with-space", "seconds-without-noexecute", "value-with-space"])
@pytest.mark.parametrize("where", ["spec.tolerations", "spec.template.spec.tolerations"])
def test_a_toleration_the_api_server_refuses_is_refused(where, toleration, field, words):
    [problem] = refused_at(where, "tolerations", [toleration])
    assert problem.startswith(f"{where}[0].{field}: {words}"), problem


def test_tolerations_the_api_server_accepts_pass():
    """Among them an operator kuberl does not know: v1.35 added Lt and Gt (feature gate TaintTolerationComparisonOperators)."""
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"},
                   {"key": "pool", "operator": "Equal", "value": "a100"}, {"key": "pool", "value": ""},
                   {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                   {"key": "example.com/failure-rate", "operator": "Lt", "value": "5", "effect": "NoSchedule"}]
    assert validate_job(make_job("tolerant").with_spec(tolerations=tolerations).obj()).tolerations == tolerations


# validateNodeAffinity: ValidateNodeSelector "must have at least one node selector term";
# ValidatePreferredSchedulingTerms "must be in the range 1-100"; ValidateNodeSelectorRequirement: values "must be
# specified when `operator` is 'In' or 'NotIn'", "may not be specified when `operator` is 'Exists' or
# 'DoesNotExist'", "not a valid selector operator", ValidateLabelName of the key; ValidateNodeFieldSelectorRequirement.
def required(*expressions, fields=()) -> dict:
    term = {"matchExpressions": list(expressions)} | ({"matchFields": list(fields)} if fields else {})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


TERM = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


@pytest.mark.parametrize(("affinity", "field", "words"), [
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}, TERM,
     "required: at least one node selector term"),
    (required({"key": "nvidia.com/gpu.product", "operator": "In"}), f"{TERM}[0].matchExpressions[0].values",
     "required: at least one value with In"),
    (required({"key": "nvidia.com/gpu.present", "operator": "Exists", "values": ["true"]}), f"{TERM}[0].matchExpressions[0].values",
     "expected no values with Exists (got 1)"),
    (required({"key": "gpu", "operator": "Equals", "values": ["a100"]}), f"{TERM}[0].matchExpressions[0].operator",
     "expected In, NotIn, Exists, DoesNotExist, Gt or Lt (got 'Equals')"),
    (required({"key": "gpu type", "operator": "Exists"}), f"{TERM}[0].matchExpressions[0].key", "expected a node label key"),
    (required(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]), f"{TERM}[0].matchFields[0].values",
     "expected one node name with In (got 2)"),
    ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}]}},
     "nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "expected a weight from 1 to 100 (got 0)"),
], ids=["no-term", "in-without-values", "exists-with-values", "unknown-operator", "key-with-space", "two-node-names", "weight-0"])
@pytest.mark.parametrize("where", ["spec.affinity", "spec.template.spec.affinity"])
def test_a_node_affinity_the_api_server_refuses_is_refused(where, affinity, field, words):
    [problem] = refused_at(where, "affinity", affinity)
    assert problem.startswith(f"{where}.{field}: {words}"), problem


# validatePodAffinityTerm: topologyKey "can not be empty" and ValidateLabelName; ValidateLabelSelectorRequirement's
# values by operator; validateWeightedPodAffinityTerms: weight "must be in the range 1-100".
ONE_PER_NODE = {"labelSelector": {"matchLabels": {"kuberl.dev/job": "placed"}}, "topologyKey": "kubernetes.io/hostname"}


@pytest.mark.parametrize(("affinity", "field", "words"), [
    ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{**ONE_PER_NODE, "topologyKey": ""}]}},
     "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "required: the node label that names a domain"),
    ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**ONE_PER_NODE, "labelSelector": {"matchExpressions": [{"key": "kuberl.dev/job", "operator": "In"}]}}]}},
     "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].values",
     "required: at least one value with In"),
    ({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "podAffinityTerm": ONE_PER_NODE}]}},
     "podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "expected a weight from 1 to 100 (got 101)"),
], ids=["no-topology-key", "in-without-values", "weight-101"])
@pytest.mark.parametrize("where", ["spec.affinity", "spec.template.spec.affinity"])
def test_a_pod_affinity_the_api_server_refuses_is_refused(where, affinity, field, words):
    [problem] = refused_at(where, "affinity", affinity)
    assert problem.startswith(f"{where}.{field}: {words}"), problem


def test_a_node_affinity_the_api_server_accepts_passes():
    affinity = required({"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
                        {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                        fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}])
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]
    affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [ONE_PER_NODE], "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {**ONE_PER_NODE, "labelSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}}]}
    assert validate_job(make_job("placed").with_spec(affinity=affinity).obj()).affinity == affinity


# validateVolumeSource: "may not specify more than 1 volume type"; validateSecretVolumeSource,
# validatePersistentClaimVolumeSource, validateHostPathVolumeSource: the name or path, "Required value".
@pytest.mark.parametrize(("volume", "field", "words"), [
    ({"name": "data", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "datasets"}}, "",
     ": expected one volume source (got emptyDir and persistentVolumeClaim)"),
    ({"name": "creds", "secret": {"name": "s3"}}, ".secret.secretName", ": required: the name of the Secret it mounts (got none)"),
    ({"name": "data", "persistentVolumeClaim": {"claimName": ""}}, ".persistentVolumeClaim.claimName",
     ": required: the name of the PersistentVolumeClaim it mounts (got '')"),
    ({"name": "host", "hostPath": {"type": "Directory"}}, ".hostPath.path", ": required: the node's directory or file it mounts"),
], ids=["two-sources", "secret-by-name", "empty-claim", "host-path-without-path"])
def test_a_volume_the_api_server_refuses_is_refused(volume, field, words):
    [problem] = refused({"spec": {"volumes": [volume]}})
    assert problem.startswith(f"spec.template.spec.volumes[0]{field}{words}"), problem


# validateSeccompProfileField and validateSeccompProfileType: NotSupported type, "must be set when seccomp type is
# Localhost", "can only be set when seccomp type is Localhost"; validateFSGroupChangePolicy. The restricted Pod
# Security level asks for a seccomp profile, so templates set one, and a typo in its type failed every pod.
@pytest.mark.parametrize(("pod_spec", "path", "words"), [
    ({"securityContext": {"seccompProfile": {"type": "runtime/default"}}}, "securityContext.seccompProfile.type",
     "expected Localhost, RuntimeDefault or Unconfined (got 'runtime/default')"),
    ({"containers": [sidecar(securityContext={"seccompProfile": {"type": "Localhost"}})]},
     "containers[0].securityContext.seccompProfile.localhostProfile", "required with type Localhost"),
    ({"containers": [{"name": "trainer", "securityContext": {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "x.json"}}}]},
     "containers[0].securityContext.seccompProfile.localhostProfile", "expected none with type RuntimeDefault"),
    ({"securityContext": {"fsGroupChangePolicy": "IfMismatch"}}, "securityContext.fsGroupChangePolicy",
     "expected OnRootMismatch or Always (got 'IfMismatch')"),
], ids=["seccomp-type", "localhost-without-profile", "profile-without-localhost", "fs-group-change-policy"])
def test_a_security_context_the_api_server_refuses_is_refused(pod_spec, path, words):
    [problem] = refused({"spec": pod_spec})
    assert problem.startswith(f"spec.template.spec.{path}: {words}"), problem


# validateTopologySpreadConstraints: ValidateMaxSkew, ValidateTopologyKey, ValidateWhenUnsatisfiable,
# ValidateSpreadConstraintNotRepeat ("Duplicate value"), validateMinDomains.
SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}


@pytest.mark.parametrize(("constraints", "field", "words"), [
    ([{**SPREAD, "maxSkew": 0}], "[0].maxSkew", "expected at least 1 (got 0)"),
    ([{**SPREAD, "topologyKey": ""}], "[0].topologyKey", "required: the node label that names a domain"),
    ([{**SPREAD, "whenUnsatisfiable": "DoNotScheduleAnyway"}], "[0].whenUnsatisfiable",
     "expected DoNotSchedule or ScheduleAnyway (got 'DoNotScheduleAnyway')"),
    ([SPREAD, {**SPREAD, "maxSkew": 2}], "[1]", "topologyKey 'kubernetes.io/hostname' with whenUnsatisfiable DoNotSchedule is a duplicate"),
    ([{**SPREAD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}], "[0].minDomains",
     "expected only with whenUnsatisfiable DoNotSchedule (got 'ScheduleAnyway')"),
], ids=["skew-0", "no-key", "unknown-action", "repeated", "min-domains-with-schedule-anyway"])
def test_a_spread_constraint_the_api_server_refuses_is_refused(constraints, field, words):
    [problem] = refused({"spec": {"topologySpreadConstraints": constraints}})
    assert problem.startswith(f"spec.template.spec.topologySpreadConstraints{field}: {words}"), problem


# ValidatePodSpec: ValidateServiceAccountName, ValidatePriorityClassName, ValidateRuntimeClassName (DNS-1123
# subdomains), validateDNSPolicy and ValidatePreemptionPolicy (NotSupported), activeDeadlineSeconds
# InclusiveRangeError(1, math.MaxInt32).
@pytest.mark.parametrize(("pod_spec", "field", "words"), [
    ({"serviceAccountName": "S3_Reader"}, "serviceAccountName", "expected a Kubernetes object name"),
    ({"priorityClassName": "High Priority"}, "priorityClassName", "expected a Kubernetes object name"),
    ({"runtimeClassName": "nvidia_runtime"}, "runtimeClassName", "expected a Kubernetes object name"),
    ({"dnsPolicy": "Cluster"}, "dnsPolicy", "expected ClusterFirstWithHostNet, ClusterFirst, Default or None (got 'Cluster')"),
    ({"preemptionPolicy": "Preempt"}, "preemptionPolicy", "expected PreemptLowerPriority or Never (got 'Preempt')"),
    ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds", "expected from 1 to 2147483647 seconds (got 0)"),
    # validatePodDNSConfig
    ({"dnsPolicy": "None"}, "dnsConfig", "required with dnsPolicy None: at least one nameserver"),
    ({"dnsConfig": {"nameservers": ["10.0.0.10", "dns.example.com"]}}, "dnsConfig.nameservers[1]", "expected an IP address"),
    ({"dnsConfig": {"nameservers": ["1.1.1.1", "8.8.8.8", "9.9.9.9", "10.0.0.10"]}}, "dnsConfig.nameservers", "expected at most 3 (got 4)"),
], ids=["service-account", "priority-class", "runtime-class", "dns-policy", "preemption-policy", "active-deadline",
        "dns-none-without-config", "nameserver-by-name", "four-nameservers"])
def test_a_pod_field_the_api_server_refuses_is_refused(pod_spec, field, words):
    [problem] = refused({"spec": pod_spec})
    assert problem.startswith(f"spec.template.spec.{field}: {words}"), problem


@pytest.mark.parametrize("template", [
    # names, policies and a deadline the server takes; an image pull secret of no name (validateImagePullSecrets
    # checks only that nothing else is set)
    {"spec": {"serviceAccountName": "s3-reader", "priorityClassName": "batch.high", "runtimeClassName": "nvidia",
              "dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10", "fd00::a"], "searches": ["svc.cluster.local"]},
              "preemptionPolicy": "Never", "activeDeadlineSeconds": 86400, "imagePullSecrets": [{}]}},
    # spread constraints the server takes: one per key and action, minDomains with DoNotSchedule
    {"spec": {"topologySpreadConstraints": [{**SPREAD, "minDomains": 2}, {**SPREAD, "whenUnsatisfiable": "ScheduleAnyway"},
                                            {**SPREAD, "topologyKey": "topology.kubernetes.io/zone"}]}},
    # seccomp profiles and an fsGroupChangePolicy the server takes
    {"spec": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroupChangePolicy": "OnRootMismatch"},
              "containers": [sidecar(securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/fluent.json"}})]}},
    # duplicate env names: only a warning (pkg/api/pod/warnings.go), the later value wins
    {"spec": {"containers": [sidecar(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])]}},
    # an empty value beside valueFrom: validateEnvVarValueFrom checks len(ev.Value) != 0
    {"spec": {"containers": [sidecar(env=[{"name": "A", "value": "", "valueFrom": FIELD_REF}])]}},
    # empty policies and protocol are defaulted (SetDefaults_Container, SetDefaults_ContainerPort)
    {"spec": {"containers": [sidecar(imagePullPolicy="", terminationMessagePolicy="", ports=[{"containerPort": 2020, "protocol": ""}])]}},
    {"spec": {"containers": [sidecar(terminationMessagePolicy="File", ports=[{"name": "metrics-2020", "containerPort": 2020,
                                                                              "hostPort": 0, "protocol": "UDP"}])]}},
    # a mount of kuberl's own volumes, and of the template's
    {"spec": {"containers": [sidecar(volumeMounts=[{"name": "config", "mountPath": "/etc/kuberl", "readOnly": True},
                                                   {"name": "logs", "mountPath": "/logs"}])],
              "volumes": [{"name": "logs", "emptyDir": {}}]}},
    # a volume without a source is an emptyDir (SetDefaults_Volume); '..' inside a name is no backstep
    {"spec": {"containers": [sidecar(volumeMounts=[{"name": "data", "mountPath": "/d", "subPath": "a..b/..c"}])],
              "volumes": [{"name": "data"}]}},
    # a native sidecar's probes and hooks; readiness may need several successes; a sleep hook
    {"spec": {"initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always", "readinessProbe": {**EXEC, "successThreshold": 3},
                                  "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}]}},
    # the template's trainer patches kuberl's: no image needed, one name twice merges twice
    {"spec": {"containers": [{"name": "trainer", "imagePullPolicy": "Always"}, {"name": "trainer", "env": [{"name": "A", "value": "1"}]}]}},
], ids=["pod-fields", "spread-constraints", "security-contexts", "duplicate-env-names", "empty-value-and-valueFrom", "defaulted-fields", "valid-port", "mounts-of-defined-volumes",
        "volume-defaulted-to-emptyDir", "native-sidecar-probes", "trainer-patched-twice"])
def test_what_the_api_server_accepts_passes(template):
    assert validate_job(make_job("fine").workers(2).template(template).obj()).workers == 2


# What podsource.source_problems checks in a rendered pod (ValidateEnvFrom, validateEnvVarValueFrom's sources,
# validateConfigMapVolumeSource) was `kuberl validate`'s only: the operator's admission (jobstatus.judge) passed
# the job, and every pod create was refused (InvalidChild).
@pytest.mark.parametrize(("container", "words"), [
    (sidecar(envFrom=[{}]), "spec.template.spec.containers[shipper].envFrom[0]: expected exactly one of configMapRef or secretRef"),
    (sidecar(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s3"}}}]),
     "spec.template.spec.containers[shipper].env[TOKEN].valueFrom.secretKeyRef.key: required"),
], ids=["envFrom-without-a-source", "secretKeyRef-without-a-key"])
def test_the_operator_refuses_what_kuberl_validate_refuses_in_the_rendered_pod(container, words):
    from kuberl.core import jobstatus, lifecycle

    spec, refusal = jobstatus.judge(make_job("sources").template({"spec": {"containers": [container]}}).obj())
    assert spec is not None and refusal is not None and refusal.reason == lifecycle.REASON_INVALID_SPEC
    assert refusal.message.startswith(words), refusal.message


def test_a_long_list_of_the_same_mistake_is_reported_in_a_few_lines():
    """podschema.first_of: the first 3 problems of a list, then how many more (a shared cluster's tenant can send
    20,000 of them; each line reaches status, an Event and a terminal)."""
    template = {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}] * 20_000,
                         "containers": [sidecar(volumeMounts=[{"name": f"v{i}", "mountPath": f"/m{i}"} for i in range(20_000)])]}}
    found = refused(template, workers=1)
    assert len(found) == 8
    assert "spec.template.spec: 19997 more mounts of volumes the pod lacks" in found
    assert "spec.template.spec.tolerations: 19997 more toleration problems" in found


# validateObjectFieldSelector (validateEnvVarValueFrom): a fieldPath outside validEnvDownwardAPIFieldPathExpressions
# is NotSupported, an unsubscripted metadata.labels too. Only what no server version accepts is refused here.
@pytest.mark.parametrize(("field_path", "words"), [
    ("spec.nodename", "expected spec.nodeName (field paths are case-sensitive) (got 'spec.nodename')"),
    ("metadata.labels", "expected one label, metadata.labels['<key>']: an env var holds one value"),
], ids=["letter-case", "whole-map"])
def test_a_field_path_no_api_server_takes_is_refused_by_the_operator_and_kuberl_validate(field_path, words):
    from kuberl.core import jobstatus

    env = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]
    _, refusal = jobstatus.judge(make_job("downward").template({"spec": {"containers": [sidecar(env=env)]}}).obj())
    assert refusal is not None
    assert refusal.message.startswith(f"spec.template.spec.containers[shipper].env[NODE].valueFrom.fieldRef.fieldPath: {words}")


@pytest.mark.parametrize("field_path", ["status.podIP", "metadata.labels['kuberl.dev/rank']", "spec.host", "status.nodeTopology"],
                         ids=["known", "subscripted", "legacy-alias", "unknown-left-to-the-server"])
def test_other_field_paths_pass(field_path):
    from kuberl.core import jobstatus

    env = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]
    assert jobstatus.judge(make_job("downward").template({"spec": {"containers": [sidecar(env=env)]}}).obj())[1] is None
