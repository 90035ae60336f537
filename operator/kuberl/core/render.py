"""Every object kuberl creates for a job, built as plain dicts by pure functions.

`render_job` returns all children of an RLTrainingJob; `render_pod` builds one
worker pod so the operator can create generation N rank by rank;
`pod_environment` is THE environment contract (the project design), called by the
operator and by the local runner alike. Nothing here does I/O or mutates its
inputs; owner references are the operator's business (`kopf.adopt`).

Targets: "cluster" renders what the operator creates. "local" renders what
`kuberl run` starts on this machine: the ConfigMap, the Service (its DNS rules
resolve MASTER_ADDR) and the pods, whose metrics bind to the pod's own address
(the runner gives each pod a 127.0.0.x); no PVC (checkpoints go to a local
directory mounted at the same path), no NetworkPolicy, no PodGroup.

`spec.template` is layered onto each rendered pod by `merge_template`:
  - metadata.labels and metadata.annotations are merged key by key (template wins);
  - spec.containers are merged by name: a container named `trainer` patches
    ours (env merged by name, volumeMounts by mountPath, every other field it
    sets replaces ours); containers with other names are appended as sidecars;
  - spec.volumes are merged by name (template wins);
  - every other pod spec field the template sets replaces ours.
Then kuberl's own labels and annotations, hostname, subdomain and restartPolicy
are put back: the Service selector, MASTER_ADDR, gang restarts and the gang
scheduler's pod group depend on them.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from . import contract, names
from .rules import validate_job
from .spec import JobSpec
from .trainerconfig import dump, trainer_config

DEFAULT_IMAGE = "ghcr.io/kuberl/trainer:0.1.0"
# `kuberl render` has no API server to assign a uid; this one says so.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
# Where the chart installs the operator, and Prometheus, unless told otherwise
# (the operator reads its own from the downward API: contract.ENV_OPERATOR_POD_NAMESPACE).
DEFAULT_OPERATOR_NAMESPACE = "kuberl-system"
DEFAULT_MONITORING_NAMESPACE = "monitoring"
# Which pods of that namespace may scrape trainers: the label prometheus-operator puts on every Prometheus pod it
# runs (kube-prometheus-stack's included) and the prometheus-community chart on its server's. Empty: every pod there.
DEFAULT_MONITORING_POD_LABELS: Mapping[str, str] = {"app.kubernetes.io/name": "prometheus"}
# The API server labels every namespace with its name (NamespaceDefaultLabelName, GA in 1.22).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

VOLCANO_SCHEDULERS = frozenset({"volcano"})
COSCHEDULING_SCHEDULERS = frozenset({"scheduler-plugins-scheduler", "scheduler-plugins", "coscheduling"})



@dataclass(frozen=True)
class PerProcess:
    """The trainer container's default requests per process, where the job sets none (chart value
    trainer.resourcesPerProcess, the operator's KUBERL_TRAINER_CPU/MEMORY_PER_PROCESS)."""

    cpu: str = "1"
    memory: str = "2Gi"


PER_PROCESS = PerProcess()
PLAIN_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|[KMGTPE]i?)?$")


def times(quantity: str, n: int) -> str:
    """`quantity` (a plain one: digits, an optional fraction and suffix) n times: 500m x 2 = 1000m, 2Gi x 2 = 4Gi."""
    found = PLAIN_QUANTITY.match(quantity)
    if found is None:
        raise ValueError(f"expected a quantity such as 1, 500m or 2Gi (got {quantity!r})")
    total = Decimal(found.group(1)) * n
    return f"{total.normalize():f}{found.group(2) or ''}"

RENDEZVOUS_PORT_NAME = "rendezvous"
CONFIG_PATH = f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"
RUNTIME_USER = 65532  # the uid the images run as (dockerfiles/)

Target = Literal["cluster", "local"]


@dataclass(frozen=True)
class Job:
    """A validated job: its name and its parsed, defaulted spec."""

    name: str
    spec: JobSpec


def as_job(job: Mapping | Job) -> Job:
    """Accept an RLTrainingJob object (validated here) or an already parsed Job."""
    if isinstance(job, Job):
        return job
    spec = validate_job(job)  # first: it names a missing metadata.name
    return Job(name=job["metadata"]["name"], spec=spec)


# --- the environment contract -------------------------------------------------


def _env(name: str, value: Any) -> dict:
    return {"name": name, "value": str(value)}


def pod_dns_name(job: str, namespace: str, rank: int) -> str:
    """Worker `rank`'s <hostname>.<subdomain>.<namespace>.svc (MASTER_ADDR is worker 0's)."""
    return f"{names.pod_name(job, rank)}.{names.service_name(job)}.{namespace}.svc"


def rendezvous_id(job: str, namespace: str, restart: int) -> str:
    """torchrun's --rdzv-id: one per job and gang generation, so a new gang
    never joins what is left of the previous one's rendezvous."""
    return f"{namespace}.{job}.{restart}"


# torchrun turns read_timeout into a timedelta (at most ~8.6e13 s): a day is longer than any start-up worth waiting for.
MAX_RENDEZVOUS_READ_TIMEOUT = 86_400


def rendezvous_conf(spec: JobSpec, rank: int) -> str:
    """torchrun's --rdzv-conf for c10d: worker 0 hosts the store; every agent waits for it as long as kuberl waits for pods."""
    read_timeout = min(spec.run_policy.startup_timeout_seconds, MAX_RENDEZVOUS_READ_TIMEOUT)
    return f"is_host={'true' if rank == 0 else 'false'},read_timeout={read_timeout}"


def pod_environment(job: str, namespace: str, spec: JobSpec, rank: int, restart: int, target: Target = "cluster") -> list[dict]:
    """The pod's environment: the contract table of docs/environment-contract.md, row by row.

    As Kubeflow's PyTorchJob: WORLD_SIZE is every process of the gang
    (workers x procsPerWorker) and RANK the pod's index, in every pod; with
    several processes per pod torch's launcher overrides both per child (and
    sets LOCAL_RANK, which is 0 here only when one process runs). The PET_*
    names are torch's launcher flags, so `torchrun script.py` with no flags
    runs the gang's static rendezvous, and `torchrun --rdzv-backend=c10d`
    meets at worker 0: the static backend prefers PET_RDZV_ENDPOINT over
    --master-addr/--master-port (torch/distributed/run.py, get_rdzv_endpoint),
    so it is exactly MASTER_ADDR:MASTER_PORT; c10d guesses which agent hosts
    its store by hostname (a guess every 127.x answers yes to on one machine),
    so PET_RDZV_CONF says it: is_host=true on worker 0 only, and how long the
    others wait for that store (read_timeout: c10d's 60 s default is shorter than
    a slow image pull; the job's startup timeout is how long kuberl waits for pods
    to start). PET_LOCAL_ADDR is
    the pod's own DNS name, the name `socket.getfqdn()` gives inside a pod with
    hostname and subdomain: c10d's workers meet group rank 0 there, locally as in
    a cluster. PET_RDZV_BACKEND is never set: the script's command line (static
    by default) chooses.
    OMP_NUM_THREADS is the container's CPU limit rounded up; with several
    processes per pod the trainer divides it by its local world size, and a
    custom command's launcher (torchrun: 1 each) chooses it.
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT gives torch's launcher the pod's grace period
    to wait for its children after a SIGTERM (its own default, 30 s, killed a
    4-GPU pod's ranks before their stop checkpoint).
    """
    master_addr = names.master_addr(job, namespace)
    port = spec.rendezvous.port
    env = [
        _env(contract.ENV_MASTER_ADDR, master_addr),
        _env(contract.ENV_MASTER_PORT, port),
        _env(contract.ENV_NNODES, spec.workers),
        _env(contract.ENV_NODE_RANK, rank),
        _env(contract.ENV_NPROC_PER_NODE, spec.procs),
        _env(contract.ENV_WORLD_SIZE, spec.workers * spec.procs),
        _env(contract.ENV_RANK, rank),
    ]
    if spec.procs == 1:
        env.append(_env(contract.ENV_LOCAL_RANK, 0))
    env += [
        _env(contract.ENV_PET_NNODES, spec.workers),
        _env(contract.ENV_PET_NODE_RANK, rank),
        _env(contract.ENV_PET_NPROC_PER_NODE, spec.procs),
        _env(contract.ENV_PET_MASTER_ADDR, master_addr),
        _env(contract.ENV_PET_MASTER_PORT, port),
        _env(contract.ENV_PET_RDZV_ENDPOINT, f"{master_addr}:{port}"),
        _env(contract.ENV_PET_RDZV_ID, rendezvous_id(job, namespace, restart)),
        _env(contract.ENV_PET_RDZV_CONF, rendezvous_conf(spec, rank)),
        _env(contract.ENV_PET_LOCAL_ADDR, pod_dns_name(job, namespace, rank)),
        _env(contract.ENV_JOB, job),
        _env(contract.ENV_RESTART, restart),
        _env(contract.ENV_CONFIG, CONFIG_PATH),
    ]
    if target == "cluster":
        env.append(_env(contract.ENV_METRICS_ADDR, "0.0.0.0"))
    else:  # the local runner gives each pod its own 127.0.0.x as status.podIP
        env.append({"name": contract.ENV_METRICS_ADDR, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if spec.trainer != "custom" or spec.procs == 1:
        # Not for a custom command that starts several processes itself: torchrun gives each child
        # OMP_NUM_THREADS=1 only where the pod sets none (torch/distributed/run.py), as under
        # PyTorchJob, which sets none; the pod's whole CPU limit in every child oversubscribed its
        # CPUs procs-fold. kuberl's own trainer divides it by its local world size.
        env.append({
            "name": "OMP_NUM_THREADS",
            "valueFrom": {
                "resourceFieldRef": {"containerName": names.TRAINER_CONTAINER, "resource": "limits.cpu", "divisor": "1"}
            },
        })
    env.append(_env(contract.ENV_TORCH_SHUTDOWN_TIMEOUT, spec.run_policy.termination_grace_period_seconds))
    env.append(_env("PYTHONUNBUFFERED", 1))
    return env


# --- labels, names, config ----------------------------------------------------


def job_labels(job: str, component: str) -> dict[str, str]:
    """Labels on every child object; `kuberl.dev/job` alone selects a job's pods."""
    return {names.LABEL_JOB: job, names.LABEL_COMPONENT: component, names.LABEL_MANAGED_BY: names.MANAGED_BY}


def _metadata(name: str, namespace: str, labels: dict, annotations: dict | None = None) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return meta


def config_text(job: str, namespace: str, uid: str, spec: JobSpec) -> str:
    return dump(trainer_config(job, namespace, uid, spec))


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- children -----------------------------------------------------------------


def render_configmap(job: Mapping | Job, namespace: str, uid: str) -> dict:
    """The frozen trainer configuration: immutable, so a restart after an
    operator upgrade runs exactly what the job started with."""
    j = as_job(job)
    text = config_text(j.name, namespace, uid, j.spec)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(
            names.configmap_name(j.name), namespace, job_labels(j.name, "config"),
            {names.ANNOTATION_SPEC_HASH: config_hash(text)},
        ),
        "immutable": True,
        "data": {names.CONFIG_FILE: text},
    }


def render_pvc(job: Mapping | Job, namespace: str) -> dict | None:
    """The checkpoint PVC, or None when the user brings `checkpoint.claimName`."""
    j = as_job(job)
    checkpoint = j.spec.checkpoint
    if checkpoint.claim_name:
        return None
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],  # only rank 0 mounts it
        "resources": {"requests": {"storage": checkpoint.size}},
    }
    if checkpoint.storage_class_name:
        spec["storageClassName"] = checkpoint.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(names.pvc_name(j.name), namespace, job_labels(j.name, "checkpoints")),
        "spec": spec,
    }


def render_service(job: Mapping | Job, namespace: str) -> dict:
    """Headless Service: gives each pod `<hostname>.<service>.<namespace>.svc`,
    published before readiness because rendezvous happens before anything is ready."""
    j = as_job(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names.service_name(j.name), namespace, job_labels(j.name, "rendezvous")),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_JOB: j.name},
            "ports": [
                {"name": RENDEZVOUS_PORT_NAME, "port": j.spec.rendezvous.port, "targetPort": j.spec.rendezvous.port, "protocol": "TCP"}
            ],
        },
    }


def metrics_ports(spec: JobSpec) -> list[int]:
    return [spec.metrics.port + local_rank for local_rank in range(spec.procs)]


def namespace_selector(namespace: str) -> dict:
    return {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}


def render_networkpolicy(
    job: Mapping | Job,
    namespace: str,
    *,
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE,
    monitoring_namespace: str | None = DEFAULT_MONITORING_NAMESPACE,
    monitoring_pod_labels: Mapping[str, str] = DEFAULT_MONITORING_POD_LABELS,
    operator_pod_labels: Mapping[str, str] | None = None,
) -> dict:
    """The gang reaches itself on every port (gloo and NCCL connect every pair
    on ephemeral ports); in the operator's namespace the pods carrying
    `operator_pod_labels` (its own; every pod there when empty) and, in the
    monitoring namespace (none when None or empty), those carrying
    `monitoring_pod_labels` (every pod there when empty) reach the metrics
    ports; nothing else gets in."""
    j = as_job(job)
    ports = metrics_ports(j.spec)
    metrics_port: dict[str, Any] = {"protocol": "TCP", "port": ports[0]}
    if len(ports) > 1:
        metrics_port["endPort"] = ports[-1]
    gang = {"matchLabels": {names.LABEL_JOB: j.name}}
    def peer(namespace: str, pod_labels: Mapping[str, str] | None) -> dict:
        return {"namespaceSelector": namespace_selector(namespace), **({"podSelector": {"matchLabels": dict(pod_labels)}} if pod_labels else {})}

    scrapers = [peer(operator_namespace, operator_pod_labels)] if operator_namespace else []
    if monitoring_namespace and peer(monitoring_namespace, monitoring_pod_labels) not in scrapers:
        scrapers.append(peer(monitoring_namespace, monitoring_pod_labels))
    if operator_namespace == monitoring_namespace and not operator_pod_labels:  # the whole namespace is in already
        scrapers = scrapers[:1]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(names.networkpolicy_name(j.name), namespace, job_labels(j.name, "network")),
        "spec": {
            "podSelector": copy.deepcopy(gang),
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": copy.deepcopy(gang)}]},
                {"from": scrapers, "ports": [metrics_port]},
            ],
        },
    }


def _pruned(value: Any) -> Any:
    """Nulls dropped: a merge patch deletes a key set to null, so both read alike."""
    if isinstance(value, Mapping):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def merge_patch(existing: Any, desired: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `existing` into `desired`; None when they
    agree. A null reads as an absent key (a patch's null deletes it), None `existing` as an empty
    object; lists and scalars are replaced whole; a key only `existing` has is removed (null).
    The operator's one: for status as for the children it keeps in shape."""
    existing, desired = _pruned({} if existing is None else existing), _pruned(desired)
    if existing == desired:
        return None
    if not isinstance(existing, Mapping) or not isinstance(desired, Mapping):
        return copy.deepcopy(desired)
    patch: dict[str, Any] = {}
    for key in existing.keys() - desired.keys():
        patch[key] = None
    for key, value in desired.items():
        if key not in existing:
            patch[key] = copy.deepcopy(value)
        elif (change := merge_patch(existing[key], value)) is not None:
            patch[key] = change
    return patch


def networkpolicy_patch(existing: Mapping, desired: Mapping) -> dict | None:
    """What brings a job's existing NetworkPolicy to the desired form (an older
    operator's namespaces, a hand edit), as a merge patch of its spec and
    kuberl's labels; None when it is already right. Pure: the operator sends it
    with `PATCH application/merge-patch+json`."""
    patch: dict[str, Any] = {}
    spec = merge_patch(existing.get("spec") or {}, desired["spec"])
    if spec is not None:
        patch["spec"] = spec
    labels = (existing.get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in desired["metadata"]["labels"].items() if labels.get(k) != v}
    if missing:
        patch["metadata"] = {"labels": missing}
    return patch or None


def pod_field_path(spec: JobSpec, field: str) -> str:
    """Where the job sets a pod field that spec.template.spec may set too: the template, where it names the field
    (merged over the rendered pod, it wins), else the spec's own field of that name."""
    template_spec = (spec.template or {}).get("spec")
    return f"spec.template.spec.{field}" if isinstance(template_spec, dict) and field in template_spec else f"spec.{field}"


def _pod_field(spec: JobSpec, field: str, own: str | None) -> str | None:
    """Such a field's value (pod_field_path says whose): the template's (empty or null names none), else `own`."""
    value = spec.template["spec"][field] if pod_field_path(spec, field).startswith("spec.template.") else own
    return value if isinstance(value, str) and value else None


def priority_class_name(spec: JobSpec, default: str | None = None) -> str | None:
    """The PriorityClass the job's pods get, which its Volcano PodGroup states too: spec.template.spec's where
    the template names the field, else spec.priorityClassName; where neither names one, `default`, the
    platform's (trainer.podDefaults, which poddefaults.apply lays under a pod that has none). None: no class
    (the cluster's global default, or 0)."""
    return _pod_field(spec, "priorityClassName", spec.priority_class_name) or default


def scheduler_name(spec: JobSpec) -> str | None:
    """The scheduler the job's pods go to, which decides their gang: a PodGroup and its name on each pod for
    Volcano or coscheduling. spec.template.spec's where the template names the field, else spec.schedulerName;
    None: the cluster's default scheduler."""
    return _pod_field(spec, "schedulerName", spec.scheduler_name)


def render_podgroup(job: Mapping | Job, namespace: str, default_priority_class: str | None = None) -> dict | None:
    """The PodGroup Volcano or scheduler-plugins' coscheduling needs to start
    the gang all at once; None for any other scheduler (Kueue uses pod labels).
    `default_priority_class`: the platform's (trainer.podDefaults.priorityClassName), for a job whose pods
    name none: Volcano orders its queue by the group's priority, so the group states its pods' own."""
    j = as_job(job)
    scheduler = scheduler_name(j.spec)
    metadata = _metadata(names.podgroup_name(j.name), namespace, job_labels(j.name, "gang"))
    if scheduler in VOLCANO_SCHEDULERS:
        spec: dict[str, Any] = {"minMember": j.spec.workers}
        if priority := priority_class_name(j.spec, default_priority_class):
            spec["priorityClassName"] = priority
        template_metadata = (j.spec.template or {}).get("metadata")
        annotations = template_metadata.get("annotations") if isinstance(template_metadata, dict) else None
        queue = annotations.get(names.VOLCANO_QUEUE_NAME) if isinstance(annotations, dict) else None
        if isinstance(queue, str) and queue:
            spec["queue"] = queue
        return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata, "spec": spec}
    if scheduler in COSCHEDULING_SCHEDULERS:
        return {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": metadata,
            "spec": {"minMember": j.spec.workers, "scheduleTimeoutSeconds": j.spec.run_policy.startup_timeout_seconds},
        }
    return None


def _gang_scheduling_metadata(job: str, spec: JobSpec) -> tuple[dict, dict]:
    """Labels and annotations that make the pods one group for their scheduler."""
    labels, annotations = {}, {}
    if spec.queue_name:
        labels[names.KUEUE_QUEUE_NAME] = spec.queue_name
        labels[names.KUEUE_POD_GROUP_NAME] = names.podgroup_name(job)
        annotations[names.KUEUE_POD_GROUP_TOTAL_COUNT] = str(spec.workers)
    scheduler = scheduler_name(spec)
    if scheduler in VOLCANO_SCHEDULERS:
        annotations[names.VOLCANO_GROUP_NAME] = names.podgroup_name(job)
    if scheduler in COSCHEDULING_SCHEDULERS:
        labels[names.COSCHEDULING_POD_GROUP] = names.podgroup_name(job)
    return labels, annotations


def pod_labels(job: str, rank: int, restart: int) -> dict[str, str]:
    """kuberl's own pod labels; they always win over user labels."""
    return {
        **job_labels(job, "worker"),
        names.LABEL_RANK: str(rank),
        names.LABEL_RESTART: str(restart),
    }


def _quantity(value: str | int) -> str:
    return str(value)


def container_resources(spec: JobSpec, per_process: PerProcess = PER_PROCESS) -> dict:
    """Defaults (`per_process` times the processes, 1 CPU and 2Gi each unless the operator is told
    otherwise; CPU limited so OMP_NUM_THREADS is right) under the user's resources; GPUs only from gpusPerWorker."""
    procs = spec.procs
    user_requests = {k: _quantity(v) for k, v in spec.resources.requests.items()}
    user_limits = {k: _quantity(v) for k, v in spec.resources.limits.items()}
    requests = {}
    cpu = times(per_process.cpu, procs)
    for resource, default in (("cpu", cpu), ("memory", times(per_process.memory, procs))):
        if resource not in user_requests and resource not in user_limits:  # a lone limit is the request
            requests[resource] = default
    requests.update(user_requests)
    limits = {"cpu": user_requests.get("cpu", cpu), **user_limits}
    if spec.gpus_per_worker > 0:
        limits["nvidia.com/gpu"] = str(spec.gpus_per_worker)
    return {"requests": requests, "limits": limits}


def trainer_command(spec: JobSpec) -> list[str]:
    """One process runs the trainer directly; several go through torch's
    launcher with static rendezvous and no restarts of its own (the operator
    restarts the whole gang), by way of kuberl_trainer.launch, which keeps
    its store on loopback under `kuberl run` and is torchrun elsewhere. The trainer finds its configuration through
    KUBERL_CONFIG (a pod path, as every path it opens: `kuberl run` maps them
    through KUBERL_FS_ROOT, where it maps command-line paths itself)."""
    trainer = ["-m", "kuberl_trainer"]
    if spec.procs == 1:
        return ["python", *trainer]
    return [
        "python", "-m", "kuberl_trainer.launch",
        f"--nnodes=$({contract.ENV_NNODES})",
        f"--node-rank=$({contract.ENV_NODE_RANK})",
        f"--nproc-per-node=$({contract.ENV_NPROC_PER_NODE})",
        f"--master-addr=$({contract.ENV_MASTER_ADDR})",
        f"--master-port=$({contract.ENV_MASTER_PORT})",
        "--rdzv-backend=static",
        "--max-restarts=0",
        *trainer,
    ]


def _trainer_container(job: str, namespace: str, spec: JobSpec, rank: int, restart: int, target: Target, default_image: str,
                       per_process: PerProcess = PER_PROCESS) -> dict:
    mounts = [
        {"name": names.CONFIG_VOLUME, "mountPath": names.CONFIG_MOUNT_DIR, "readOnly": True},
        {"name": names.SHM_VOLUME, "mountPath": names.SHM_MOUNT_DIR},
        {"name": names.TMP_VOLUME, "mountPath": names.TMP_MOUNT_DIR},
    ]
    if rank == 0:
        mounts.append({"name": names.CHECKPOINT_VOLUME, "mountPath": names.CHECKPOINT_MOUNT_DIR})
    container: dict[str, Any] = {
        "name": names.TRAINER_CONTAINER,
        "image": spec.image or default_image,
        # a custom trainer's template brings the command: its args alone run the image's ENTRYPOINT, as in any pod
        **({} if spec.trainer == "custom" else {"command": trainer_command(spec)}),
        "env": pod_environment(job, namespace, spec, rank, restart, target),
        "ports": [
            {"name": names.metrics_port_name(i), "containerPort": port, "protocol": "TCP"}
            for i, port in enumerate(metrics_ports(spec))
        ],
        "resources": container_resources(spec, per_process),
        "volumeMounts": mounts,
        "terminationMessagePath": names.TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_USER,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    return container


def _volumes(job: str, spec: JobSpec, rank: int) -> list[dict]:
    volumes = [
        {"name": names.CONFIG_VOLUME, "configMap": {"name": names.configmap_name(job)}},
        {"name": names.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}},
        {"name": names.TMP_VOLUME, "emptyDir": {}},
    ]
    if rank == 0:  # ReadWriteOnce suffices: only rank 0 writes checkpoints
        claim = spec.checkpoint.claim_name or names.pvc_name(job)
        volumes.append({"name": names.CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    return volumes


def render_pod(
    job: Mapping | Job,
    namespace: str,
    uid: str,
    rank: int,
    restart: int = 0,
    *,
    default_image: str = DEFAULT_IMAGE,
    target: Target = "cluster",
    per_process: PerProcess = PER_PROCESS,
) -> dict:
    """Worker `rank` of gang generation `restart`, with spec.template layered on."""
    return render_pods(job, namespace, uid, [rank], restart, default_image=default_image, target=target, per_process=per_process)[0]


def render_pods(
    job: Mapping | Job,
    namespace: str,
    uid: str,
    ranks: Iterable[int],
    restart: int = 0,
    *,
    default_image: str = DEFAULT_IMAGE,
    target: Target = "cluster",
    per_process: PerProcess = PER_PROCESS,
) -> list[dict]:
    """Workers `ranks` of gang generation `restart`; the config digest is computed once for all."""
    j = as_job(job)
    digest = config_hash(config_text(j.name, namespace, uid, j.spec))
    return [_render_pod(j, namespace, rank, restart, default_image, target, digest, per_process) for rank in ranks]


def representative_ranks(workers: int) -> list[int]:
    """Ranks whose pods show every field any pod of the gang has: rank 0 (the checkpoint volume)
    and rank 1; every other pod is rank 1's with other values of kuberl's env, hostname and labels."""
    return list(range(min(workers, 2)))


def _render_pod(j: Job, namespace: str, rank: int, restart: int, default_image: str, target: Target, digest: str,
                per_process: PerProcess = PER_PROCESS) -> dict:
    spec = j.spec
    if not 0 <= rank < spec.workers:
        raise ValueError(f"rank {rank} outside 0..{spec.workers - 1}")
    own_labels = pod_labels(j.name, rank, restart)
    group_labels, group_annotations = _gang_scheduling_metadata(j.name, spec)
    reserved_labels = {**own_labels, **group_labels}
    annotations = {names.ANNOTATION_SPEC_HASH: digest, **group_annotations}
    pod_spec: dict[str, Any] = {
        "hostname": names.pod_name(j.name, rank),
        "subdomain": names.service_name(j.name),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": spec.run_policy.termination_grace_period_seconds,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_USER,
            "runAsGroup": RUNTIME_USER,
            "fsGroup": RUNTIME_USER,  # the checkpoint volume is writable by the trainer
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_trainer_container(j.name, namespace, spec, rank, restart, target, default_image, per_process)],
        "volumes": _volumes(j.name, spec, rank),
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = json_copy(spec.tolerations)
    if spec.affinity:
        pod_spec["affinity"] = json_copy(spec.affinity)
    priority = priority_class_name(spec)
    if priority:
        pod_spec["priorityClassName"] = priority
    scheduler = scheduler_name(spec)
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(names.pod_name(j.name, rank), namespace, {**spec.labels, **reserved_labels}, annotations),
        "spec": pod_spec,
    }
    if spec.template:
        pod = merge_template(pod, spec.template)
    pod["metadata"]["labels"].update(reserved_labels)
    pod["metadata"]["annotations"].update(annotations)  # a gang's size and PodGroup are the scheduler's count
    for key in ("hostname", "subdomain", "restartPolicy"):
        pod["spec"][key] = pod_spec[key]
    for field, value in (("priorityClassName", priority), ("schedulerName", scheduler)):
        if value is None:  # a template's empty or null value names none, as _pod_field says
            pod["spec"].pop(field, None)
    return pod


# --- spec.template ------------------------------------------------------------


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped tree (dicts, lists, scalars), several times faster than
    copy.deepcopy: a 1,024-pod gang copies its template once per pod."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return copy.deepcopy(value)


def _merge_by(key: str, ours: list[dict], theirs: list[dict]) -> list[dict]:
    """Items with the same `key` are replaced in place; new ones are appended."""
    merged = [json_copy(item) for item in ours]
    index = {item.get(key): i for i, item in enumerate(merged)}
    for item in theirs:
        if item.get(key) in index:
            merged[index[item.get(key)]] = json_copy(item)
        else:
            index[item.get(key)] = len(merged)
            merged.append(json_copy(item))
    return merged


def _patch_container(ours: dict, theirs: Mapping) -> dict:
    patched = json_copy(ours)
    for field, value in theirs.items():
        if field == "env":
            patched["env"] = _merge_by("name", patched.get("env", []), value or [])
        elif field == "volumeMounts":
            patched["volumeMounts"] = _merge_by("mountPath", patched.get("volumeMounts", []), value or [])
        else:
            patched[field] = json_copy(value)
    return patched


def merge_template(pod: Mapping, template: Mapping | None) -> dict:
    """Layer a PodTemplateSpec onto a rendered pod (rules in the module docstring)."""
    merged = json_copy(dict(pod))
    if not template:
        return merged
    metadata = template.get("metadata") or {}
    for key in ("labels", "annotations"):
        if metadata.get(key):
            merged["metadata"][key] = {**merged["metadata"].get(key, {}), **json_copy(metadata[key])}
    pod_spec = merged["spec"]
    for field, value in (template.get("spec") or {}).items():
        if field == "containers":
            containers = pod_spec.get("containers", [])
            by_name = {c["name"]: i for i, c in enumerate(containers)}
            for theirs in value or []:
                name = theirs.get("name")
                if name in by_name:
                    containers[by_name[name]] = _patch_container(containers[by_name[name]], theirs)
                else:
                    containers.append(json_copy(theirs))
            pod_spec["containers"] = containers
        elif field == "volumes":
            pod_spec["volumes"] = _merge_by("name", pod_spec.get("volumes", []), value or [])
        else:
            pod_spec[field] = json_copy(value)
    return merged


# --- everything ---------------------------------------------------------------


def render_job(
    job: Mapping | Job,
    namespace: str,
    uid: str,
    *,
    default_image: str = DEFAULT_IMAGE,
    target: Target = "cluster",
    restart: int = 0,
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE,
    monitoring_namespace: str | None = DEFAULT_MONITORING_NAMESPACE,
    monitoring_pod_labels: Mapping[str, str] = DEFAULT_MONITORING_POD_LABELS,
    operator_pod_labels: Mapping[str, str] | None = None,
) -> list[dict]:
    """Every child of the job, in creation order: ConfigMap, PVC, NetworkPolicy,
    Service, PodGroup, then the pods of generation `restart`."""
    j = as_job(job)
    objects: list[dict | None] = [render_configmap(j, namespace, uid)]
    if target == "cluster":
        objects += [
            render_pvc(j, namespace),
            render_networkpolicy(
                j, namespace,
                operator_namespace=operator_namespace,
                monitoring_namespace=monitoring_namespace,
                monitoring_pod_labels=monitoring_pod_labels,
                operator_pod_labels=operator_pod_labels,
            ),
        ]
    objects.append(render_service(j, namespace))
    if target == "cluster":
        objects.append(render_podgroup(j, namespace))
    objects += render_pods(j, namespace, uid, range(j.spec.workers), restart, default_image=default_image, target=target)
    return [o for o in objects if o is not None]
