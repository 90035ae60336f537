"""A Kubeflow PyTorchJob (kubeflow.org/v1) turned into the RLTrainingJob that runs the same pods.

Pure: documents in, (job, notes) out; no I/O, and the input is never mutated
(it is copied first, so the output shares nothing with it). The mapping is
docs/migrating-from-pytorchjob.md's "Field by field" table; every field that
cannot be carried over, or whose meaning changes, becomes a `Note` naming the
PyTorchJob's field, so nothing is lost silently. What cannot be converted at
all (not a PyTorchJob, no replicas, a Master of several replicas, Master and
Worker running different programs, a result `validate_job` refuses) raises
`NotConvertible`, every problem at the PyTorchJob's own field path.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ..core import contract, names, torchrun, yamlwriter
from ..core.podsecurity import DEFAULT_LEVEL, check_pod
from ..core.podsource import pod_source_problems
from ..core.render import (
    PLACEHOLDER_UID,
    RUNTIME_USER,
    VOLCANO_SCHEDULERS,
    Job,
    render_pod,
)
from ..core.rules import validate_job
from ..core.validation import (
    GPU_RESOURCE,
    MAX_QUANTITY,
    QUANTITY,
    InvalidJob,
    Problem,
    metadata_problems,
    quantity_value,
)
from . import podlabels

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
MASTER, WORKER = "Master", "Worker"
CONTAINER = "pytorch"  # kubeflowv1.PytorchJobDefaultContainerName: the one PyTorchJob sets the env of
PORT_NAME = "pytorchjob-port"  # kubeflowv1.PytorchJobDefaultPortName: the Master's is MASTER_PORT
# The port training-operator's defaulting gives a `pytorch` container that names no pytorchjob-port
# (kubeflow/training-operator pkg/apis/kubeflow.org/v1/pytorch_defaults.go setPytorchDefaultPort, with
# PytorchJobDefaultPort in pytorch_types.go): such a job's pods had MASTER_PORT 23456, not kuberl's 29500.
DEFAULT_PORT = 23456
KUEUE_QUEUE_LABEL = names.KUEUE_QUEUE_NAME  # Kueue's PyTorchJob integration reads the job's label
# torchrun's own words for "count them at start": nothing in a manifest says how many CPUs a node has.
NPROC_WORDS = ("auto", "cpu", "gpu")
# Names PyTorchJob's operator appends after the user's env (so its value won over the user's).
KUBEFLOW_ENV = frozenset({"PYTHONUNBUFFERED", "PET_NNODES"})
KUBEFLOW_MASTER_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT", "WORLD_SIZE", "RANK",
                                 "PET_NPROC_PER_NODE", "PET_NODE_RANK"})
KUBEFLOW_ELASTIC_ENV = frozenset({"PET_RDZV_ENDPOINT", "PET_RDZV_ID", "PET_RDZV_CONF", "PET_RDZV_BACKEND", "PET_MAX_RESTARTS"})
# Pod fields kuberl sets itself on every pod, whatever a template says.
KUBERL_POD_FIELDS = ("hostname", "subdomain", "restartPolicy")
# Pod fields with a spec-level home: the PodGroup of Volcano or scheduler-plugins reads them there.
LIFTED_POD_FIELDS = {"schedulerName": "schedulerName", "priorityClassName": "priorityClassName"}
# The trainer container's fields every pod must share: they are the program that runs.
PROGRAM_FIELDS = ("image", "command", "args")

RESTART_POLICY = {
    "OnFailure": "changed: a failed pod restarts the whole gang (DDP cannot lose a rank), not itself alone, up to"
                 " runPolicy.backoffLimit with exponential backoff; preemption, eviction and node loss are not counted",
    "ExitCode": "kuberl does not read exit codes: any failed pod restarts the whole gang up to runPolicy.backoffLimit"
                " (PyTorchJob took exit codes 1-127 as permanent)",
    "Always": "kuberl's pods run to completion; a failed pod restarts the whole gang up to runPolicy.backoffLimit,"
              " and the job succeeds when every worker exits 0",
    "Never": "a failed pod failed the PyTorchJob: spec.runPolicy.backoffLimit is 0, so a failure fails the job",
}
CLEAN_POD_POLICY = {
    "Running": "kuberl always does this: pods still running when the job ends are deleted, finished ones stay for"
               " kubectl logs until the job is deleted",
    "None": "changed: kuberl deletes pods still running when the job ends (finished ones stay until the job is deleted)",
    "All": "changed: kuberl keeps finished pods for kubectl logs until the job is deleted (running ones are deleted)",
}
SCHEDULING_POLICY = {
    "minAvailable": "kuberl gang-schedules all spec.workers pods (a PodGroup's minMember, or Kueue's pod group)",
    "minResources": "not carried over: kuberl's PodGroup states only minMember",
    "priorityClass": "not carried over: set spec.priorityClassName to give the pods (and Volcano's PodGroup) a priority",
    "scheduleTimeoutSeconds": "not carried over: kuberl reports pods that do not start after"
                              " spec.runPolicy.startupTimeoutSeconds (scheduler-plugins' PodGroup gets that timeout)",
}
ELASTIC_POLICY = {
    "minReplicas": "a kuberl gang has a fixed size, spec.workers",
    "maxReplicas": "a kuberl gang has a fixed size, spec.workers",
    "rdzvBackend": "not set as PET_RDZV_BACKEND: torchrun's own default (static) runs unless the command line says"
                   " --rdzv-backend=c10d; either meets at worker 0 (PET_RDZV_ENDPOINT)",
    "rdzvHost": "rendezvous is always at worker 0 (PET_RDZV_ENDPOINT)",
    "rdzvPort": "rendezvous is at spec.rendezvous.port (MASTER_PORT)",
    "rdzvId": "kuberl sets PET_RDZV_ID per job and gang restart",
    "rdzvConf": "kuberl sets PET_RDZV_CONF (is_host on worker 0); a --rdzv-conf on the command line replaces it",
    "maxRestarts": "not set as PET_MAX_RESTARTS: kuberl restarts the whole gang instead, up to runPolicy.backoffLimit",
    "nProcPerNode": "superseded by spec.nprocPerNode",
    "standalone": "kuberl never runs a standalone rendezvous: worker 0 hosts it",
    "metrics": "no autoscaling: a kuberl gang has a fixed size",
}
ETCD_BACKEND = ("etcd: not carried over, kuberl runs no etcd server: torchrun's static rendezvous at worker 0"
                " (PET_RDZV_ENDPOINT) replaces it, unless the command line says --rdzv-backend=etcd (then it fails:"
                " drop the flag)")
# {unset}: what the source lacked; {kind}: its kind (PyTorchJob, TrainJob); {where}: where its securityContext would go.
CPU_LIMIT = ("unset: changed, kuberl limits the trainer container's CPU to its request (1 per process when none), so"
             " OMP_NUM_THREADS is right; the {kind}'s pod could use the node's idle CPUs: set spec.resources.limits.cpu")
SECURITY_CONTEXT = ("{unset}: changed, kuberl's trainer container runs as user " + str(RUNTIME_USER) + " (non-root) with a"
                    " read-only root filesystem (writable: /tmp, /dev/shm and volumes), where the {kind}'s ran as the"
                    " image's user on a writable one; a securityContext {where} (kept in spec.template) replaces kuberl's:"
                    " {{runAsUser: 0, runAsNonRoot: false}} runs as root on a writable one, as the baseline Pod Security"
                    " Standard allows")
KUEUE_SUSPEND = ("changed: Kueue unsuspended the admitted {kind}; kuberl's pods are admitted through Kueue's pod"
                 " integration and nothing unsuspends the RLTrainingJob: it waits until you set"
                 " spec.runPolicy.suspend to false")
# kubeflow/pytorch-operator's kubeflow.org/v1 (pkg/apis/pytorch/v1/types.go PyTorchJobSpec) held these at spec;
# training-operator moved them to spec.runPolicy, and its CRD's schema prunes them where they were.
LEGACY_RUN_POLICY = ("activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy", "ttlSecondsAfterFinished")
LEGACY_MOVED = ("pytorch-operator's place for it, read as spec.runPolicy.{key} (training-operator reads only that one:"
                " its API server drops this field)")
BACKOFF_LIMIT_UNSET = ("unset: changed, kuberl fails the job after spec.runPolicy.backoffLimit (default 3) gang restarts for"
                       " crashes and stalls, where an unset limit let PyTorchJob restart failed pods without end")
METADATA_CARRIED = ("name", "namespace", "labels", "annotations")
SERVER_METADATA = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                             "deletionTimestamp", "deletionGracePeriodSeconds"})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class Note(Problem):
    """A PyTorchJob field not carried over, or carried over with a changed meaning (a warning, not a refusal)."""


class NotConvertible(InvalidJob):
    """A document that has no RLTrainingJob equivalent; every problem at the PyTorchJob's field path."""


# --- reading a source document's fields (trainjob.py reads a TrainJob with the same helpers) -----------


def not_convertible(path: str, message: str) -> NotConvertible:
    """One refusal at the source document's field `path`."""
    return NotConvertible([Problem(path, message)])


def as_mapping(value: Any, path: str, required: bool = False) -> dict:
    """The field as a mapping ({} when unset and not required), or a refusal at `path`."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise not_convertible(path, "required field is missing" if value is None else f"expected an object (got {short_repr(value)})")
    return value


def _one_of(value: Any, choices: dict, path: str) -> Any:
    """An enum field as the PyTorchJob CRD allows it (None: unset)."""
    if value is not None and (not isinstance(value, str) or value not in choices):
        raise not_convertible(path, f"expected one of {', '.join(choices)} (got {short_repr(value)})")
    return value


def as_list(value: Any, path: str) -> list:
    """The field as a list ([] when unset), or a refusal at `path`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise not_convertible(path, f"expected a list (got {short_repr(value)})")
    return value


def short_repr(value: Any) -> str:
    """The value for a message: its repr, or its type and size where that would be long."""
    text = repr(value)
    return text if len(text) < 60 else f"{type(value).__name__} of {len(value) if hasattr(value, '__len__') else '?'} entries"


# --- the document ---------------------------------------------------------------


# training-operator's other kubeflow.org/v1 kinds (pkg/controller.v1/<framework>): another framework's env or launcher.
OTHER_KUBEFLOW_JOBS = {
    "TFJob": "TensorFlow's cluster (TF_CONFIG)",
    "MPIJob": "mpirun from a launcher pod over SSH",
    "XGBoostJob": "XGBoost's Rabit tracker (WORKER_ADDRS, WORKER_PORT beside MASTER_ADDR)",
    "PaddleJob": "PaddlePaddle's launcher (PADDLE_MASTER and its PADDLE_* settings)",
    "JAXJob": "JAX's coordinator (COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID)",
}


def check_document(doc: Any, kind: str, api_version: str, version_name: str = "",
                   kind_hint: Callable[[Any], str] = lambda _got: "", version_hint: Callable[[Any], str] = lambda _got: "") -> None:
    """`doc` is a mapping of `kind` at `api_version`, else NotConvertible naming both fields; the hints (of the
    value found) end their lines."""
    if not isinstance(doc, dict):
        raise not_convertible("(document)", f"expected a {kind}, a YAML mapping (got {short_repr(doc)})")
    problems = []
    if doc.get("kind") != kind:
        problems.append(Problem("kind", f"expected {kind!r} (got {doc.get('kind')!r}){kind_hint(doc.get('kind'))}"))
    if doc.get("apiVersion") != api_version:
        problems.append(Problem("apiVersion", f"expected {api_version!r}{version_name} (got {doc.get('apiVersion')!r})"
                                f"{version_hint(doc.get('apiVersion'))}"))
    if problems:
        raise NotConvertible(problems)


def _other_kind_hint(kind: Any) -> str:
    close = difflib.get_close_matches(str(kind), [KIND], n=1, cutoff=0.6)
    return (f"; did you mean {KIND!r}?" if close and kind != names.KIND
            else "; it is already an RLTrainingJob" if kind == names.KIND
            else f"; Kubeflow's {kind} starts {OTHER_KUBEFLOW_JOBS[kind]}, which kuberl does not: it converts"
                 " PyTorchJobs, TrainJobs and JobSets of torch pods" if isinstance(kind, str) and kind in OTHER_KUBEFLOW_JOBS else "")


# kubeflow/pytorch-operator's versions before kubeflow.org/v1 (pkg/apis/pytorch/v1beta1, v1beta2): the same
# pytorchReplicaSpecs, and activeDeadlineSeconds, backoffLimit, cleanPodPolicy, ttlSecondsAfterFinished at spec.
PYTORCH_OPERATOR_VERSIONS = ("kubeflow.org/v1beta1", "kubeflow.org/v1beta2")


def _check_document(doc: Any) -> None:
    check_document(doc, KIND, API_VERSION, ", Kubeflow training-operator v1", kind_hint=_other_kind_hint,
                   version_hint=lambda got: (
                       f"; {got} was kubeflow/pytorch-operator's, whose pytorchReplicaSpecs and spec-level run policy"
                       f" {API_VERSION} reads the same: write apiVersion: {API_VERSION} and convert it again"
                       if got in PYTORCH_OPERATOR_VERSIONS else ""))


def note_top_level_fields(doc: dict, notes: list[Note]) -> None:
    """A note for each top-level field beside apiVersion, kind, metadata and spec (status, mostly)."""
    for key in doc:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            notes.append(Note(str(key), "not carried over: a new job starts without status" if key == "status"
                              else "not carried over: unknown field"))


def carried_metadata(doc: dict, notes: list[Note]) -> dict:
    """The new job's metadata (name, namespace, labels, annotations), a note for every other field."""
    metadata = as_mapping(doc.get("metadata"), "metadata", required=True)
    out = {key: metadata[key] for key in METADATA_CARRIED if metadata.get(key) is not None}
    if not out.get("name") and isinstance(metadata.get("generateName"), str) and metadata["generateName"]:
        # kubectl create (an Argo or KFP step) lets the API server finish the name; kuberl names pods after it
        raise not_convertible("metadata.generateName", f"{metadata['generateName']!r} with no metadata.name: kuberl"
                              " validates, renders and runs a job by its name (every pod, Service and PVC is named"
                              " after it): write metadata.name")
    problems = metadata_problems(out)
    if problems:
        raise NotConvertible(problems)
    for key in metadata:
        if key not in METADATA_CARRIED:
            notes.append(Note(f"metadata.{key}", "not carried over: " + (
                "the API server sets it for the new object" if key in SERVER_METADATA
                else "an RLTrainingJob needs metadata.name" if key == "generateName"
                else "it belonged to the PyTorchJob object; set it on the RLTrainingJob if it still applies")))
    annotations = out.get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        out["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        if not out["annotations"]:
            del out["annotations"]
        notes.append(Note(f"metadata.annotations.{LAST_APPLIED}", "not carried over: kubectl apply writes the new job's own"))
    return out


# --- replicas ----------------------------------------------------------------------


def _camel_case_replicas(spec: dict, notes: list[Note]) -> None:
    """Replica types written in another case (`master`, `WORKER`) renamed Master and Worker in place, as
    training-operator's defaulting does before anything reads them (pkg/apis/kubeflow.org/v1/pytorch_defaults.go
    setPytorchTypeNamesToCamelCase; pytorch-operator's v1beta2 did the same), with a note; both spellings of one
    type are refused: the defaulting kept one of them, whichever Go's map order gave it first."""
    path = "spec.pytorchReplicaSpecs"
    specs = spec.get("pytorchReplicaSpecs")
    if not isinstance(specs, dict):
        return  # _replicas names it
    renamed = {}
    for rtype in (MASTER, WORKER):
        variants = [k for k in specs if isinstance(k, str) and k.lower() == rtype.lower() and k != rtype]
        if variants and (rtype in specs or len(variants) > 1):
            spelled = sorted(variants + ([rtype] if rtype in specs else []))
            raise not_convertible(f"{path}.{variants[0]}", f"{rtype} is written {len(spelled)} ways ({', '.join(spelled)}):"
                                  f" training-operator renames each to {rtype} and keeps one, which is not said; keep one")
        if variants:
            renamed[variants[0]] = rtype
            notes.append(Note(f"{path}.{variants[0]}", f"read as {rtype}, as training-operator's defaulting renames it;"
                              f" the notes below name it {rtype}"))
    if renamed:
        spec["pytorchReplicaSpecs"] = {renamed.get(k, k): v for k, v in specs.items()}


def _replicas(spec: dict) -> tuple[dict[str, dict], dict[str, int]]:
    """The Master and Worker replica specs, and how many pods each runs (Kubeflow's default is 1)."""
    path = "spec.pytorchReplicaSpecs"
    specs = as_mapping(spec.get("pytorchReplicaSpecs"), path, required=True)
    for rtype in specs:
        if rtype not in (MASTER, WORKER):
            close = difflib.get_close_matches(str(rtype), [MASTER, WORKER], n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise not_convertible(f"{path}.{rtype}", f"unknown replica type: a PyTorchJob has {MASTER} and {WORKER}{hint}")
    if not specs:
        raise not_convertible(path, f"expected a {MASTER} or a {WORKER} replica spec (got none)")
    replica_specs, counts = {}, {}
    for rtype in (MASTER, WORKER):
        if rtype not in specs:
            continue
        replica = as_mapping(specs[rtype], f"{path}.{rtype}", required=True)
        count = replica.get("replicas", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise not_convertible(f"{path}.{rtype}.replicas", f"expected a whole number of pods (got {short_repr(count)})")
        if rtype == MASTER and count != 1:
            raise not_convertible(f"{path}.{MASTER}.replicas", f"expected 1 (got {count}): a PyTorchJob has exactly one Master,"
                        " and kuberl's worker 0 plays it; put the other pods under Worker")
        _one_of(replica.get("restartPolicy"), RESTART_POLICY, f"{path}.{rtype}.restartPolicy")
        replica_specs[rtype], counts[rtype] = replica, count
    return replica_specs, counts


def _trainer_index(template: dict, path: str) -> int:
    pod_spec = as_mapping(template.get("spec"), f"{path}.spec", required=True)
    containers = as_list(pod_spec.get("containers"), f"{path}.spec.containers")
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            raise not_convertible(f"{path}.spec.containers[{i}]", f"expected a container object (got {short_repr(container)})")
    found = [i for i, c in enumerate(containers) if c.get("name") == CONTAINER]
    if not found:
        raise not_convertible(f"{path}.spec.containers", f"expected a container named {CONTAINER!r}: PyTorchJob gives its environment"
                    " to that one, and kuberl's trainer container takes its place")
    clash = [i for i, c in enumerate(containers) if c.get("name") == names.TRAINER_CONTAINER]
    if clash:
        raise not_convertible(f"{path}.spec.containers[{clash[0]}].name", f"{names.TRAINER_CONTAINER!r} is the name the {CONTAINER!r}"
                    " container takes in kuberl; rename this one")
    return found[0]


def _compare_templates(master: dict, worker: dict, used: str, notes: list[Note]) -> None:
    """Master and Worker must run one program; any other difference is a note (one template serves every pod)."""
    other = MASTER if used == WORKER else WORKER
    paths = {MASTER: f"spec.pytorchReplicaSpecs.{MASTER}.template", WORKER: f"spec.pytorchReplicaSpecs.{WORKER}.template"}
    templates = {MASTER: master, WORKER: worker}
    indexes = {rtype: _trainer_index(t, paths[rtype]) for rtype, t in templates.items()}
    ours = {rtype: t["spec"]["containers"][indexes[rtype]] for rtype, t in templates.items()}
    problems = [
        Problem(f"{paths[MASTER]}.spec.containers[{indexes[MASTER]}].{field}",
                f"differs from the {WORKER}'s ({short_repr(ours[MASTER].get(field))} and {short_repr(ours[WORKER].get(field))}):"
                " every kuberl worker runs one program; make them equal (rank 0 can tell itself apart by RANK)")
        for field in PROGRAM_FIELDS if ours[MASTER].get(field) != ours[WORKER].get(field)
    ]
    if problems:
        raise NotConvertible(problems)
    ignored = f"differs from the {used}'s: every pod gets the {used}'s"

    def differ(a: dict, b: dict, path: str, skip: tuple = ()) -> None:
        for field in [*a, *(k for k in b if k not in a)]:
            if field not in skip and a.get(field) != b.get(field):
                notes.append(Note(f"{path}.{field}", ignored))

    differ(as_mapping(templates[other].get("metadata"), f"{paths[other]}.metadata"),
           as_mapping(templates[used].get("metadata"), f"{paths[used]}.metadata"), f"{paths[other]}.metadata")
    differ(templates[other]["spec"], templates[used]["spec"], f"{paths[other]}.spec", skip=("containers",))
    differ(ours[other], ours[used], f"{paths[other]}.spec.containers[{indexes[other]}]", skip=(*PROGRAM_FIELDS, "ports"))
    theirs_by_name = {c.get("name"): c for c in templates[used]["spec"]["containers"]}
    for i, container in enumerate(templates[other]["spec"]["containers"]):
        if i != indexes[other] and container != theirs_by_name.get(container.get("name")):
            notes.append(Note(f"{paths[other]}.spec.containers[{i}]", ignored))


# --- processes and GPUs ----------------------------------------------------------------


def gpu_count(resources: dict, path: str) -> int:
    """nvidia.com/gpu of the container: its limit (a request alone, or one equal to the limit, is the same count)."""
    limit = (resources.get("limits") or {}).get(GPU_RESOURCE) if isinstance(resources.get("limits"), dict) else None
    request = (resources.get("requests") or {}).get(GPU_RESOURCE) if isinstance(resources.get("requests"), dict) else None
    counts = {}
    for kind, amount in (("limits", limit), ("requests", request)):
        if amount is None:
            continue
        where = f"{path}.{kind}.{GPU_RESOURCE}"
        if isinstance(amount, bool) or not isinstance(amount, int | str) or (isinstance(amount, str) and not re.fullmatch(QUANTITY, amount)):
            raise not_convertible(where, f"expected a whole number of GPUs (got {short_repr(amount)})")
        try:
            value = quantity_value(amount)
        except ValueError:
            raise not_convertible(where, f"expected a whole number of GPUs (got {short_repr(amount)})") from None
        if value < 0 or value != value.to_integral_value() or value > Decimal(names.MAX_PROCS_PER_WORKER):
            raise not_convertible(where, f"expected a whole number of GPUs from 0 to {names.MAX_PROCS_PER_WORKER} (got {short_repr(amount)})")
        counts[kind] = int(value)
    if len(counts) == 2 and counts["limits"] != counts["requests"]:
        raise not_convertible(f"{path}.requests.{GPU_RESOURCE}", f"expected the limit {limit!r} (got {request!r}): GPUs cannot be overcommitted")
    return counts.get("limits", counts.get("requests", 0))


TPU_RESOURCE = "google.com/tpu"  # GKE's TPU chips


def tpu_problem(resources: Any, path: str, workers: int) -> Problem | None:
    """A refusal where several pods ask for TPUs: a multi-host slice's hosts meet through the env GKE's TPU
    webhook gives an Indexed Job's or JobSet's pods, which kuberl's are not (one host needs none of it)."""
    if workers <= 1 or not isinstance(resources, dict):
        return None
    kind = next((k for k in ("limits", "requests") if isinstance(resources.get(k), dict) and TPU_RESOURCE in resources[k]), None)
    if kind is None:
        return None
    return Problem(f"{path}.{kind}.{TPU_RESOURCE}", f"{workers} pods on TPUs: the hosts of a multi-host TPU slice find"
                   " each other through the env GKE's TPU webhook gives the pods of an Indexed Job or a JobSet"
                   " (TPU_WORKER_HOSTNAMES, TPU_WORKER_ID; MEGASCALE_* across slices), which kuberl's pods do not get;"
                   " kuberl runs torch.distributed on CPUs (gloo) and NVIDIA GPUs (NCCL). One pod, one TPU host,"
                   " converts")


AMD_GPU = "amd.com/gpu"  # ROCm's torch drives AMD GPUs through torch.cuda: torchrun counts them as CUDA devices


def accelerator(resources: Any) -> tuple[str, int] | None:
    """The container's GPUs other than nvidia.com/gpu (kuberl's spec.gpusPerWorker), as Kubeflow Trainer counts
    GPUs (GetNumGPUPerNode: any resource whose name says gpu; requests, else limits): name and count, or None."""
    if not isinstance(resources, dict):
        return None
    for kind in ("requests", "limits"):
        amounts = resources.get(kind)
        for name, amount in (amounts.items() if isinstance(amounts, dict) else ()):
            if not isinstance(name, str) or "gpu" not in name.lower() or name == GPU_RESOURCE:
                continue
            readable = isinstance(amount, int) and not isinstance(amount, bool) or isinstance(amount, str) and re.fullmatch(QUANTITY, amount)
            try:
                value = quantity_value(amount) if readable else None
            except ValueError:
                value = None
            if value and value > 0 and value == value.to_integral_value():
                return name, int(min(value, MAX_QUANTITY))
    return None


def accelerator_procs(accel: tuple[str, int] | None, what: str) -> tuple[int | None, str]:
    """The processes torchrun starts for `what` ('auto', or 'gpu' on the command line) with `accel` and no
    nvidia.com/gpu, and why: amd.com/gpu is counted as CUDA devices; another GPU only by torch.accelerator
    (auto), so with a build for it, which no manifest tells."""
    if accel is None:
        return None, ""
    name, count = accel
    if name == AMD_GPU:
        return count, (f"{what}: torchrun starts one process per GPU torch sees, and a ROCm build sees the pod's {count}"
                       f" {name} as CUDA devices: now spec.procsPerWorker {count} ({name} stays in spec.resources;"
                       " spec.gpusPerWorker counts nvidia.com/gpu)")
    return None, (f"{what}: torchrun starts one process per device of the accelerator torch sees, the pod's {count}"
                  f" {name} only with a torch built for it (else one per CPU of the node, or none for gpu), which no"
                  " manifest tells")


def _user_nproc(template: dict, path: str, spec: dict, kubeflow_env: frozenset) -> tuple[str, str] | None:
    """The pytorch container's own literal PET_NPROC_PER_NODE and its field, when it is what torchrun read: neither
    spec.nprocPerNode nor elasticPolicy.nProcPerNode is set and PyTorchJob appends no value of its own after it
    (it does only with a Master). The last of duplicate env names wins, as the kubelet takes them."""
    elastic = spec.get("elasticPolicy")
    if (spec.get("nprocPerNode") is not None or contract.ENV_PET_NPROC_PER_NODE in kubeflow_env
            or (isinstance(elastic, dict) and elastic.get("nProcPerNode") is not None)):
        return None
    index = _trainer_index(template, path)
    env = template["spec"]["containers"][index].get("env")
    found = None
    for i, var in enumerate(env if isinstance(env, list) else []):
        if isinstance(var, dict) and var.get("name") == contract.ENV_PET_NPROC_PER_NODE:
            value = var.get("value")
            found = (value, f"{path}.spec.containers[{index}].env[{i}]") if isinstance(value, str) and "valueFrom" not in var else None
    return found


# Launchers of other projects that start a process per GPU by default, as torchrun's auto does: Hugging Face's
# accelerate launch, DeepSpeed's deepspeed, torchtune's tune run (torchrun's own parser, reading PET_*).
OWN_LAUNCHER = re.compile(r"(?:^|[\s/;&|(])(?:accelerate\s+launch|deepspeed|tune\s+run)(?=\s|$)")


def starts_processes(command: Any, args: Any) -> bool:
    """Whether the command starts processes of its own per GPU: torch's launcher, or another project's."""
    if torchrun.launches(command, args):
        return True
    words = [w for w in [*(command if isinstance(command, list) else []), *(args if isinstance(args, list) else [])]
             if isinstance(w, str)]
    return bool(OWN_LAUNCHER.search(" ".join(words)))


# Those launchers' own process-count options: accelerate launch's --num_processes (over all machines), deepspeed's
# --num_gpus (per node), tune run's torchrun options.
OWN_LAUNCHER_COUNT = re.compile(r"(?:^|\s)(--(?:num[_-]processes|num[_-]gpus|nproc[_-]per[_-]node))(?:=|\s+)(\S+)")


def note_own_launcher_count(command: Any, args: Any, procs: int | None, gpus: int, container_path: str,
                            notes: list[Note]) -> None:
    """A note where accelerate launch, deepspeed or tune run is told its own process count: kuberl cannot read what
    it means per pod (accelerate's counts every machine's), so a count other than kuberl's is named, not guessed."""
    words = [w for w in [*(command if isinstance(command, list) else []), *(args if isinstance(args, list) else [])]
             if isinstance(w, str)]
    text = " ".join(words)
    launcher = OWN_LAUNCHER.search(text)
    found = OWN_LAUNCHER_COUNT.search(text, launcher.end()) if launcher else None
    counted = procs if procs is not None else max(gpus, 1)
    if found is None or (torchrun.whole_number(found.group(2)) and int(found.group(2)) == counted):
        return
    field = "command" if isinstance(command, list) and any(found.group(1) in str(w) for w in command) else "args"
    count = found.group(2) if len(found.group(2)) <= 20 else f"{found.group(2)[:12]}… ({len(found.group(2))} characters)"
    notes.append(Note(f"{container_path}.{field}", f"{launcher.group(0).strip()} is given {found.group(1)}"
                      f" {count}, which kuberl does not read; spec.procsPerWorker is {counted}"
                      f"{'' if procs is not None else ' (one per GPU)'}, from which each pod's WORLD_SIZE, CPU share"
                      f" and OMP_NUM_THREADS are sized: pass {PROCS_OPTION} N with the processes it starts per pod"))


def _procs(spec: dict, gpus: int, notes: list[Note], user_nproc: tuple[str, str] | None = None,
           accel: tuple[str, int] | None = None, launches: bool = True, gpu_path: str = "",
           given: int | None = None) -> tuple[int | None, str]:
    """procsPerWorker (None: kuberl's default, gpusPerWorker or 1) and the field it came from; `launches`:
    whether the command starts torch's launcher, the only reader of a word (auto, cpu, gpu); `gpu_path`,
    the GPU limit's field; `given`, --procs-per-worker."""
    path = "spec.nprocPerNode"
    nproc = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    if nproc is None and isinstance(elastic, dict) and elastic.get("nProcPerNode") is not None:
        nproc, path = elastic["nProcPerNode"], "spec.elasticPolicy.nProcPerNode"
    if nproc is None and user_nproc is not None:  # the pod's own PET_NPROC_PER_NODE is what torchrun read
        nproc, path = user_nproc
        notes[:] = [n for n in notes if n.path != path]  # its "not carried over" note: it is, as procsPerWorker
        if re.fullmatch(r"[0-9]+", nproc.strip()):
            notes.append(Note(path, f"{contract.ENV_PET_NPROC_PER_NODE}={nproc.strip()} is now spec.procsPerWorker, from"
                              " which kuberl sets it (and NPROC_PER_NODE, WORLD_SIZE) for every pod"))
            return int(nproc), path
        nproc = nproc.strip()
    if isinstance(nproc, bool) or not isinstance(nproc, int | str | None):
        raise not_convertible(path, f"expected a number of processes, or auto, cpu or gpu (got {short_repr(nproc)})")
    if isinstance(nproc, int) or (isinstance(nproc, str) and re.fullmatch(r"[0-9]+", nproc)):
        return int(nproc), path
    word = "auto" if nproc is None else nproc
    if word not in NPROC_WORDS:
        raise not_convertible(path, f"expected a number of processes, or auto, cpu or gpu, as torchrun reads it (got {nproc!r})")
    shown = "unset (PyTorchJob's default 'auto')" if nproc is None else repr(word)
    if not launches and (gpus <= 1 or given is not None):  # a word is read by torch's launcher alone
        if nproc is not None:
            notes.append(Note(path, f"{shown}: read by torch's launcher only, and the command starts none (torchrun,"
                              " torch.distributed.run), so each pod runs the one process it is, as PyTorchJob counted"
                              " it (WORLD_SIZE = replicas)"))
        return None, path
    if not launches:  # one process with every GPU of its pod (DataParallel, or a script that spawns its own)
        notes.append(Note(path, f"{shown}: read by torch's launcher only, and the command starts none (torchrun,"
                          f" torch.distributed.run), so each pod runs the one process it is with its {gpus} GPUs, as"
                          " PyTorchJob counted it (WORLD_SIZE = replicas): spec.procsPerWorker 1 (a custom trainer may"
                          f" drive several GPUs per process); if the script starts a process per GPU itself, pass"
                          f" {PROCS_OPTION} {gpus}"))
        return 1, path
    world = "" if gpus <= 1 else (  # one process per pod: WORLD_SIZE is as PyTorchJob set it
        "; every pod's WORLD_SIZE is now workers x processes (PyTorchJob set replicas x 1 for a word), so a script"
        " that runs one process per pod waits in init_process_group for ranks that never start: start it with"
        " torchrun, or spawn NPROC_PER_NODE processes")
    counted, why = accelerator_procs(accel, shown) if not gpus and word != "cpu" else (None, "")
    if counted:
        notes.append(Note(path, why))
        return counted, path
    if why:
        notes.append(Note(path, f"{why}; kuberl runs 1 process per pod: set spec.procsPerWorker"))
    elif gpus and word != "cpu":
        notes.append(Note(path, f"{shown}: one process per GPU, gpusPerWorker {gpus}, as torchrun counts CUDA devices{world}"))
    elif gpus:
        notes.append(Note(path, f"{shown}: torchrun would start one process per CPU of the node; kuberl runs one process per"
                          f" GPU, gpusPerWorker {gpus}{world}"))
    elif word == "gpu":
        notes.append(Note(path, f"{shown} cannot be known: the {CONTAINER!r} container has no {GPU_RESOURCE} limit (torchrun's"
                          " gpu fails without CUDA); kuberl runs 1 process per pod: set spec.procsPerWorker, or"
                          " spec.gpusPerWorker for GPUs"))
    else:
        notes.append(Note(path, f"{shown} cannot be known from a manifest: torchrun would start one process per CPU of the"
                          " node it lands on (os.cpu_count(), not the container's limit); kuberl runs 1 process per pod"
                          " (PET_NPROC_PER_NODE=1): set spec.procsPerWorker to choose"))
    return None, path


PROCS_OPTION = "--procs-per-worker"  # kuberl convert's option, for a count no manifest tells


def command_procs(nproc: torchrun.Nproc | None, container_path: str, gpus: int, decided: tuple[int | None, str],
                  given: int | None, notes: list[Note], accel: tuple[str, int] | None = None) -> tuple[int | None, str]:
    """procsPerWorker and its origin, once the container's own torchrun --nproc-per-node is read: the
    command line wins over PET_NPROC_PER_NODE (which nprocPerNode set) in torchrun, so it wins here.
    `given` is --procs-per-worker, which a word that counts CPUs needs."""
    if given is not None:
        notes[:] = [n for n in notes if n.path != decided[1]]
        if decided[0] is not None and decided[0] != given:
            notes.append(Note(decided[1], f"not carried over: {PROCS_OPTION} {given} replaces it"))
        decided = (given, PROCS_OPTION)
    if nproc is None:
        return decided
    path = f"{container_path}.{nproc.where.split(' ')[0]}"
    if nproc.problem or not torchrun.readable(nproc.value or ""):
        why = nproc.problem or f"--nproc-per-node {nproc.value!r} is a shell or $(VAR) expansion, or no count"
        notes.append(Note(path, f"{why}: kuberl cannot tell how many processes torchrun starts; it runs"
                          f" {decided[0] or gpus or 1} per pod (spec.procsPerWorker): make the flag agree"))
        return decided
    source = decided[1]  # the field PET_NPROC_PER_NODE came from, which the flag overrides in torchrun
    before = [n for n in notes if n.path == source]
    notes[:] = [n for n in notes if n.path != source]
    if source != PROCS_OPTION and (decided[0] is not None or before) and not any(n.message.startswith("unset") for n in before):
        notes.append(Note(source, f"not carried over: torchrun took the command line's --nproc-per-node"
                          f" {nproc.value!r} over it ({path})"))
    if nproc.count is not None:
        if given is not None and given != nproc.count:
            raise not_convertible(path, f"--nproc-per-node {nproc.count} starts {nproc.count} process(es) per pod, and"
                        f" {PROCS_OPTION} says {given}: make them equal")
        notes.append(Note(path, f"--nproc-per-node {nproc.count} is now spec.procsPerWorker: every pod's WORLD_SIZE,"
                          " CPU request and OMP_NUM_THREADS count its processes"))
        return nproc.count, path
    counted, why = accelerator_procs(accel, f"--nproc-per-node {nproc.value}") if not gpus and nproc.value in ("gpu", "auto") else (None, "")
    if counted and nproc.value == "gpu":  # kuberl checks the word against spec.gpusPerWorker, nvidia.com/gpu
        raise not_convertible(path, f"--nproc-per-node gpu counts the pod's {counted} {accel[0]} (a ROCm build's CUDA"
                              " devices), but kuberl checks the word against spec.gpusPerWorker, which counts"
                              f" nvidia.com/gpu only: write --nproc-per-node {counted}")
    if counted:
        if given is not None and given != counted:
            raise not_convertible(path, f"{why}; and {PROCS_OPTION} says {given}: make them equal")
        notes.append(Note(path, why))
        return counted, path
    if why and given is None:
        raise not_convertible(path, f"{why}: pass {PROCS_OPTION} N to choose, or write a number")
    if nproc.value == "gpu" or (nproc.value == "auto" and gpus):
        if not gpus:
            raise not_convertible(path, f"--nproc-per-node gpu counts CUDA devices, and the {CONTAINER!r} container has no"
                        f" {GPU_RESOURCE} limit (torchrun fails without CUDA): set the limit, or a number")
        notes.append(Note(path, f"--nproc-per-node {nproc.value}: one process per GPU, spec.gpusPerWorker {gpus}"))
        return decided if given is not None else (None, path)
    if given is None:
        raise not_convertible(path, f"--nproc-per-node {nproc.value} starts one process per CPU in torch's affinity mask, which"
                    " no manifest tells (the node's cores, not the pod's CPU limit: a 4-CPU pod on a 64-core node"
                    f" starts 64): pass {PROCS_OPTION} N to choose, or write a number")
    notes.append(Note(path, f"--nproc-per-node {nproc.value}: torchrun counts the CPUs in its affinity mask, which equal"
                      f" spec.procsPerWorker ({given}) only where the kubelet pins whole CPUs (static CPU manager,"
                      " Guaranteed QoS): write the number instead"))
    return decided


# --- the trainer container and its pod -------------------------------------------------------


def _rendezvous_port(container: dict, path: str) -> tuple[int | None, str]:
    for i, port in enumerate(as_list(container.get("ports"), f"{path}.ports")):
        if isinstance(port, dict) and port.get("name") == PORT_NAME:
            return port.get("containerPort"), f"{path}.ports[{i}].containerPort"
    return None, ""


def _trainer_container(container: dict, path: str, index: int, origins: dict, notes: list[Note],
                       kubeflow_env: frozenset, kind: str = KIND) -> tuple[dict, dict]:
    """kuberl's `trainer` container patch, and the spec fields lifted out of it (image, resources, GPUs)."""
    lifted: dict[str, Any] = {}
    out: dict[str, Any] = {"name": names.TRAINER_CONTAINER}
    new = f"spec.template.spec.containers[{index}]"
    origins[new] = path
    for field, value in container.items():
        if field == "name":
            continue
        if field == "image":
            lifted["image"], origins["spec.image"] = value, f"{path}.image"
        elif field == "imagePullPolicy":
            lifted["imagePullPolicy"], origins["spec.imagePullPolicy"] = value, f"{path}.imagePullPolicy"
        elif field == "resources":
            kept, gpus = split_resources(as_mapping(value, f"{path}.resources"), f"{path}.resources", origins, notes)
            if gpus:
                lifted["gpusPerWorker"] = gpus
            if kept:
                lifted["resources"] = kept
        elif field == "ports":
            ports = [p for p in as_list(value, f"{path}.ports") if not (isinstance(p, dict) and p.get("name") == PORT_NAME)]
            if ports:  # a script's own ports; they replace the trainer container's declared metrics ports
                out["ports"] = ports
        elif field == "env":
            out["env"] = trainer_env(value, f"{path}.env", f"{new}.env", origins, notes, kubeflow_env, kind)
        else:
            out[field] = value
    limits = container.get("resources", {}).get("limits") if isinstance(container.get("resources"), dict) else None
    if not (isinstance(limits, dict) and "cpu" in limits):
        notes.append(Note(f"{path}.resources.limits.cpu", CPU_LIMIT.format(kind=kind)))
    if container.get("securityContext") is None:
        notes.append(Note(f"{path}.securityContext", SECURITY_CONTEXT.format(unset="unset", kind=kind, where="here")))
    return out, lifted


def split_resources(resources: dict, path: str, origins: dict, notes: list[Note]) -> tuple[dict, int]:
    """A container's resources (at `path`) as spec.resources and spec.gpusPerWorker: the GPU count lifted out
    of requests and limits, anything but those two noted."""
    gpus = gpu_count(resources, path)
    if gpus:
        limits = resources.get("limits")
        given = "limits" if isinstance(limits, dict) and GPU_RESOURCE in limits else "requests"
        origins["spec.gpusPerWorker"] = f"{path}.{given}.{GPU_RESOURCE}"  # a problem is named where the user wrote it
    kept: dict[str, Any] = {}
    for kind, amounts in resources.items():
        if kind in ("requests", "limits") and isinstance(amounts, dict):
            amounts = {k: v for k, v in amounts.items() if k != GPU_RESOURCE}
            if amounts:
                kept[kind] = amounts
        elif kind in ("requests", "limits"):
            kept[kind] = amounts  # not a mapping: validation names it, at the source document's path
        else:
            notes.append(Note(f"{path}.{kind}", "not carried over: spec.resources has requests and limits"))
    if kept:
        origins["spec.resources"] = path
    return kept, gpus


def trainer_env(env: Any, path: str, new: str, origins: dict, notes: list[Note], kubeflow_env: frozenset,
                kind: str = KIND) -> Any:
    """The container's env without the names kuberl gives each pod (it refuses a spec that sets them); a note for
    each dropped one, saying whether the `kind`'s own value (`kubeflow_env`) had overridden it there too."""
    if not isinstance(env, list):
        origins[new] = path
        return env  # validation names it
    kept = []
    for i, var in enumerate(env):
        name = var.get("name") if isinstance(var, dict) else None
        if isinstance(name, str) and contract.is_reserved_env(name):
            why = (f"{kind}'s own value overrode it too" if name in kubeflow_env
                   else f"changed: under the {kind} the pod saw this value")
            notes.append(Note(f"{path}[{i}]", f"{name} not carried over: kuberl sets it for every pod ({why})"))
            continue
        origins[f"{new}[{len(kept)}]"] = f"{path}[{i}]"
        kept.append(var)
    return kept


def trainer_template(template: dict, path: str, origins: dict, notes: list[Note], kubeflow_env: frozenset, kind: str = KIND,
              index: int | None = None) -> tuple[dict, dict]:
    """spec.template (the trainer container, the `pytorch` one unless `index` says, renamed `trainer`) and the
    spec fields lifted out of it."""
    index = _trainer_index(template, path) if index is None else index
    origins["spec.template"] = path
    out: dict[str, Any] = {}
    lifted: dict[str, Any] = {}
    for key, value in template.items():
        if key == "metadata":
            metadata = as_mapping(value, f"{path}.metadata")
            kept = {k: v for k, v in metadata.items() if k in ("labels", "annotations")}
            for k in metadata:
                if k not in kept and metadata[k] is not None:  # kubectl writes creationTimestamp: null in every template
                    notes.append(Note(f"{path}.metadata.{k}", "not carried over: kuberl names its pods; only labels and"
                                      " annotations of a template apply"))
            if kept:
                out["metadata"] = kept
        elif key != "spec":
            out[key] = value  # validation names it
    pod_spec: dict[str, Any] = {}
    for key, value in template["spec"].items():
        if key == "containers":
            containers = list(value)
            containers[index], from_container = _trainer_container(value[index], f"{path}.spec.containers[{index}]",
                                                                   index, origins, notes, kubeflow_env, kind)
            lifted.update(from_container)
            pod_spec["containers"] = containers
        elif key in LIFTED_POD_FIELDS:
            lifted[LIFTED_POD_FIELDS[key]] = value
            origins[f"spec.{LIFTED_POD_FIELDS[key]}"] = f"{path}.spec.{key}"
        elif key in KUBERL_POD_FIELDS:
            notes.append(Note(f"{path}.spec.{key}", "not carried over: kuberl sets it on every pod"
                              + (" (Never: a failure restarts the gang)" if key == "restartPolicy"
                                 else " (hostname <job>-<rank>, subdomain <job>, its headless Service)")))
        else:
            pod_spec[key] = value
    out["spec"] = pod_spec
    rename_config_volume(pod_spec, f"{path}.spec.volumes", notes, kind)
    token_note(pod_spec, f"{path}.spec", notes, kind)
    if pod_spec.get("enableServiceLinks") is not True:
        service_link_notes([f for field in ("initContainers", "containers")
                            for i, c in enumerate(template["spec"].get(field) if isinstance(template["spec"].get(field), list) else [])
                            for f in container_text_fields(c, f"{path}.spec.{field}[{i}]")], notes, kind)
    containers = pod_spec.get("containers")
    if isinstance(containers, list) and isinstance(containers[index], dict):
        container_path = f"{path}.spec.containers[{index}]"
        if lift_run_as(pod_spec, containers[index], f"{path}.spec.securityContext", notes, kind):
            notes[:] = [n for n in notes if n.path != f"{container_path}.securityContext"]  # it has one now
            origins[f"spec.template.spec.containers[{index}].securityContext"] = f"{path}.spec.securityContext"
    return out, lifted


def rename_config_volume(pod_spec: dict, volumes_path: str, notes: list[Note], kind: str = KIND) -> None:
    """A volume named as kuberl's configuration volume (names.CONFIG_VOLUME, a common name for one's own
    ConfigMap) would replace it in the template's merge by name, and KUBERL_CONFIG with it: renamed, with
    every container's mounts of it, so the source runs as it did."""
    volumes = pod_spec.get("volumes")
    if not isinstance(volumes, list):
        return
    clashing = [i for i, v in enumerate(volumes) if isinstance(v, dict) and v.get("name") == names.CONFIG_VOLUME]
    if not clashing:
        return
    taken = {v.get("name") for v in volumes if isinstance(v, dict)}
    base = f"{kind.lower()}-{names.CONFIG_VOLUME}"
    new = next(n for n in (base, *(f"{base}-{k}" for k in range(2, len(taken) + 3))) if n not in taken)

    def renamed(item: Any) -> Any:
        return {**item, "name": new} if isinstance(item, dict) and item.get("name") == names.CONFIG_VOLUME else item

    pod_spec["volumes"] = [renamed(v) for v in volumes]
    for field in ("initContainers", "containers"):
        containers = pod_spec.get(field)
        if isinstance(containers, list):
            pod_spec[field] = [{**c, **{key: [renamed(m) for m in c[key]] for key in ("volumeMounts", "volumeDevices")
                                        if isinstance(c.get(key), list)}} if isinstance(c, dict) else c
                               for c in containers]
    for i in clashing:
        notes.append(Note(f"{volumes_path}[{i}].name", f"renamed {new!r}, with its mounts: kuberl's pods have a volume"
                          f" {names.CONFIG_VOLUME!r} of their own, the trainer configuration at {names.CONFIG_MOUNT_DIR}"
                          " (KUBERL_CONFIG), which yours would have replaced"))


# The variables the kubelet sets for every Service of the namespace (<NAME>_SERVICE_HOST, _PORT) when the pod
# has enableServiceLinks; the API server's own (KUBERNETES_SERVICE_*) it sets either way.
SERVICE_LINK = re.compile(r"(?<![A-Za-z0-9_])(?!KUBERNETES_)[A-Z][A-Z0-9_]*_SERVICE_(?:HOST|PORT)(?:_[A-Z0-9_]+)?(?![A-Za-z0-9_])")


def service_link_notes(fields: list[tuple[str, Any]], notes: list[Note], kind: str = KIND) -> None:
    """A note where a container reads a Service link variable: kuberl's pods have enableServiceLinks: false
    unless the template says true, so it would read nothing."""
    for where, value in fields:
        found = SERVICE_LINK.search(value) if isinstance(value, str) else None
        if found:
            notes.append(Note(where, f"reads {found.group(0)}, which the kubelet sets from the namespace's Services only"
                              " with enableServiceLinks; kuberl's pods have it false unless the template says"
                              f" enableServiceLinks: true (the {kind}'s pods had it): set that, or reach the Service by"
                              " its DNS name"))


SERVICE_ACCOUNT_TOKEN = ("changed: kuberl's pods mount no ServiceAccount token unless the template sets"
                         " automountServiceAccountToken: true, where the {kind}'s pods had {account!r}'s (unless that"
                         " account says automountServiceAccountToken: false): set it if the job calls the Kubernetes API"
                         " (a cloud identity webhook, such as EKS's IRSA, projects its own token and needs nothing)")


def token_note(pod_spec: dict, path: str, notes: list[Note], kind: str = KIND) -> None:
    """A note where the pod names a ServiceAccount and says nothing of its token: kuberl renders
    automountServiceAccountToken: false unless the template asks for it (docs/security.md)."""
    account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
    if isinstance(account, str) and account and pod_spec.get("automountServiceAccountToken") is None:
        field = "serviceAccountName" if pod_spec.get("serviceAccountName") else "serviceAccount"
        notes.append(Note(f"{path}.{field}", SERVICE_ACCOUNT_TOKEN.format(kind=kind, account=account)))


# PodSecurityContext fields a container's SecurityContext also has, where the container's wins
# (k8s.io/api/core/v1 SecurityContext: "If set in both SecurityContext and PodSecurityContext, the value
# specified in SecurityContext takes precedence").
RUN_AS_FIELDS = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "seLinuxOptions", "appArmorProfile",
                 "windowsOptions")
RUN_AS_LIFTED = ("kuberl's trainer container would override it with its own (user {user}, a read-only root"
                 " filesystem); copied onto the trainer container, so the process runs as the {kind}'s did: {fields}"
                 " (kuberl's read-only root filesystem and dropped capabilities then do not apply; add them there to"
                 " have them)")


def lift_run_as(pod_spec: dict, trainer: dict, path: str, notes: list[Note], kind: str = KIND) -> bool:
    """Where the pod's securityContext says who the process runs as and the trainer container says nothing,
    the trainer container gets those fields: kuberl's own container securityContext (user 65532) would win
    over the pod's. Returns whether it did, with a note at `path`, the pod securityContext."""
    pod_context = pod_spec.get("securityContext")
    if trainer.get("securityContext") is not None or not isinstance(pod_context, dict):
        return False
    lifted = {k: copy.deepcopy(pod_context[k]) for k in RUN_AS_FIELDS if pod_context.get(k) is not None}
    if not lifted:
        return False
    trainer["securityContext"] = lifted
    notes.append(Note(path, RUN_AS_LIFTED.format(user=RUNTIME_USER, kind=kind, fields=", ".join(lifted))))
    return True


def relabelled(template: dict, path: str, source: podlabels.Source, notes: list[Note]) -> dict:
    """The pod template with the source's own pod labels, where its affinity, spread constraints or
    downward API read them, rewritten to kuberl's (each noted); NotConvertible where kuberl has none."""
    source = podlabels.carrying(source, template.get("metadata"))
    pod_spec, changed, problems = podlabels.relabel_pod_spec(as_mapping(template.get("spec"), f"{path}.spec", required=True),
                                                             f"{path}.spec", source)
    if problems:
        raise NotConvertible(problems)
    notes += [Note(p.path, p.message) for p in changed]
    return {**template, "spec": pod_spec}


def container_text_fields(container: Any, where: str) -> list[tuple[str, Any]]:
    """A container's command, args and env values, each with its field path."""
    if not isinstance(container, dict):
        return []
    fields = [(f"{where}.{key}[{j}]", v) for key in ("command", "args")
              for j, v in enumerate(container.get(key) if isinstance(container.get(key), list) else [])]
    return fields + [(f"{where}.env[{j}].value", e.get("value")) for j, e in
                     enumerate(container.get("env") if isinstance(container.get("env"), list) else []) if isinstance(e, dict)]


def named_pod_notes(fields: list[tuple[str, Any]], named: re.Pattern, rank_of: Any, job: str, owner: str,
                    notes: list[Note]) -> None:
    """A note for each field whose text names a pod of the source job (`named`; `rank_of` its kuberl rank),
    which kuberl's gang does not have."""
    for where, value in fields:
        found = named.search(value) if isinstance(value, str) else None
        if found:
            rank = rank_of(found)
            notes.append(Note(where, f"names {found.group(0)!r}, a pod of the {owner}, which kuberl's gang does not"
                              f" have: its pod is {job}-{rank}, reached as {job}-{rank}.{job} ($(MASTER_ADDR) for"
                              " worker 0); write that"))


def _pod_name_notes(template: dict, path: str, job: str, has_master: bool, notes: list[Note]) -> None:
    """training-operator names its pods and their Services <job>-master-0 and <job>-worker-<i>; a container that
    names one (a hard-coded MASTER_ADDR, an init container waiting for it) is noted."""
    if not job:
        return
    named = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(job)}-(master|worker)-([0-9]+)(?![0-9])")
    pod = template["spec"]
    fields = [f for kind in ("initContainers", "containers")
              for i, c in enumerate(pod.get(kind) if isinstance(pod.get(kind), list) else [])
              for f in container_text_fields(c, f"{path}.spec.{kind}[{i}]")]
    named_pod_notes(fields, named, lambda m: int(m.group(2)) + (1 if has_master and m.group(1) == "worker" else 0),
                    job, "PyTorchJob (and its Service)", notes)


PRIVILEGED_WAY = ("or install the operator with --pod-security privileged (chart value podSecurity; the level is"
                  " operator-wide) and label the namespace's Pod Security Admission to allow it")


def host_path_notes(template: dict, path: str, notes: list[Note]) -> None:
    """A note per hostPath volume: the baseline level, the operator's default, refuses them, and the ways out."""
    volumes = template["spec"].get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        host = volume.get("hostPath") if isinstance(volume, dict) else None
        if not isinstance(host, dict):
            continue
        where = host.get("path")
        head = (f"hostPath {where!r}: the operator's default Pod Security level, baseline, refuses hostPath volumes"
                " (kuberl validate shows it);")
        if isinstance(where, str) and where.rstrip("/") == names.SHM_MOUNT_DIR:
            way = (f" kuberl's pods have an in-memory {names.SHM_MOUNT_DIR} already: drop this volume and its mount, and"
                   " size it with spec.shmSize (default 1Gi), ")
        else:
            way = (" keep the data in a PersistentVolumeClaim (a local PersistentVolume for a node's disk), or use an"
                   " emptyDir for scratch space, ")
        notes.append(Note(f"{path}.spec.volumes[{i}].hostPath", head + way + PRIVILEGED_WAY))


# --- run policy and scheduling --------------------------------------------------------------


def _run_policy(spec: dict, restart_policies: dict[str, Any], origins: dict, notes: list[Note]) -> tuple[dict, Any, str]:
    """spec.runPolicy, and schedulingPolicy's (Volcano) queue with the field it came from."""
    path = "spec.runPolicy"
    policy = as_mapping(spec.get("runPolicy"), path)
    out: dict[str, Any] = {}
    queue, queue_path = None, ""
    origins["spec.runPolicy"] = path
    entries = [(key, spec[key], f"spec.{key}") for key in LEGACY_RUN_POLICY if key in spec]
    entries += [(key, value, f"{path}.{key}") for key, value in policy.items()]
    for key, value, where in entries:
        if where == f"spec.{key}":  # pytorch-operator's place for it
            if policy.get(key) is not None:
                notes.append(Note(where, f"not carried over: spec.runPolicy.{key} is set too, and wins"))
                continue
            notes.append(Note(where, LEGACY_MOVED.format(key=key)))
            origins[f"{path}.{key}"] = where
        if key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend"):
            if value is not None:
                out[key] = value
        elif key == "cleanPodPolicy" and value is not None:
            notes.append(Note(where, CLEAN_POD_POLICY[_one_of(value, CLEAN_POD_POLICY, where)]))
        elif key == "schedulingPolicy":
            for field, setting in as_mapping(value, f"{path}.schedulingPolicy").items():
                if field == "queue":
                    queue, queue_path = setting, f"{path}.schedulingPolicy.queue"
                else:
                    notes.append(Note(f"{path}.schedulingPolicy.{field}", SCHEDULING_POLICY.get(field, "not carried over: unknown field")))
        else:
            notes.append(Note(f"{path}.{key}", managed_by(value, KIND) if key == "managedBy" else "not carried over: unknown field"))
    for rtype, restart in restart_policies.items():
        field = f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy"
        notes.append(Note(field, RESTART_POLICY[restart]))
    if "Never" in restart_policies.values():
        never = next(r for r, p in restart_policies.items() if p == "Never")
        if out.get("backoffLimit") not in (None, 0):
            notes.append(Note(f"{path}.backoffLimit", f"now 0: a {never} with restartPolicy Never was never restarted"))
        out["backoffLimit"] = 0
        origins[f"{path}.backoffLimit"] = f"spec.pytorchReplicaSpecs.{never}.restartPolicy"
    elif out.get("backoffLimit") is None:
        notes.append(Note(f"{path}.backoffLimit", BACKOFF_LIMIT_UNSET))
    return out, queue, queue_path


def _elastic_notes(spec: dict, notes: list[Note]) -> None:
    path = "spec.elasticPolicy"
    for key in as_mapping(spec.get("elasticPolicy"), path):
        if key == "nProcPerNode" and spec.get("nprocPerNode") is None:
            continue  # it is the process count then (see _procs)
        why = ELASTIC_POLICY.get(key, "not carried over: unknown field")
        if key == "rdzvBackend" and str(spec["elasticPolicy"][key]).startswith("etcd"):
            why = ETCD_BACKEND
        notes.append(Note(f"{path}.{key}", why))


# --- everything -----------------------------------------------------------------------------


def check_program(container: dict, image: Any, path: str, under: str) -> None:
    """Refuse, at the container's field (`path`), a trainer container that does not name the user's program: no image,
    or neither command nor args (kuberl's container runs its own trainer, where `under` the image's entrypoint ran)."""
    if not image:
        raise not_convertible(f"{path}.image", "required field is missing: the pods would run kuberl's own trainer image,"
                              " not your program")
    if not (container.get("command") or container.get("args")):
        raise not_convertible(f"{path}.command", f"unset, and args too: under {under} the image's ENTRYPOINT and CMD ran;"
                              " kuberl's container would run its own trainer instead, so set command to what the image"
                              " runs (docker inspect --format '{{.Config.Entrypoint}} {{.Config.Cmd}}' IMAGE)")


def convert(pytorchjob: Any, procs_per_worker: int | None = None) -> tuple[dict, list[Note]]:
    """The RLTrainingJob for a PyTorchJob, and a note for each field not carried over or changed in meaning;
    `procs_per_worker` (convert's --procs-per-worker) where the manifest cannot tell the process count.
    Raises NotConvertible with every problem at the PyTorchJob's own field path."""
    _check_document(pytorchjob)
    doc = copy.deepcopy(pytorchjob)  # the input is never touched, and the output shares nothing with it
    notes: list[Note] = []
    origins: dict[str, str] = {"metadata": "metadata", "spec": "spec"}
    metadata = carried_metadata(doc, notes)
    note_top_level_fields(doc, notes)
    spec = as_mapping(doc.get("spec"), "spec", required=True)
    for key in spec:
        if key not in ("pytorchReplicaSpecs", "nprocPerNode", "runPolicy", "elasticPolicy", *LEGACY_RUN_POLICY):
            notes.append(Note(f"spec.{key}", "not carried over: unknown PyTorchJob field"))
    _camel_case_replicas(spec, notes)
    replicas, counts = _replicas(spec)
    used = WORKER if counts.get(WORKER) or MASTER not in counts else MASTER  # the pods that run; a Worker of 0 runs none
    templates = {rtype: as_mapping(r.get("template"), f"spec.pytorchReplicaSpecs.{rtype}.template", required=True)
                 for rtype, r in replicas.items()}
    if len(templates) == 2:
        _compare_templates(templates[MASTER], templates[WORKER], used, notes)
    for rtype, replica in replicas.items():
        for key in replica:
            if key not in ("replicas", "template", "restartPolicy"):
                notes.append(Note(f"spec.pytorchReplicaSpecs.{rtype}.{key}", "not carried over: unknown field"))
    kubeflow_env = KUBEFLOW_ENV | (KUBEFLOW_MASTER_ENV if MASTER in replicas else frozenset()) | (
        KUBEFLOW_ELASTIC_ENV if spec.get("elasticPolicy") else frozenset())
    template_path = f"spec.pytorchReplicaSpecs.{used}.template"
    source = podlabels.pytorchjob_source(str(metadata.get("name", "")), MASTER in replicas)
    templates[used] = relabelled(templates[used], template_path, source, notes)
    template, lifted = trainer_template(templates[used], template_path, origins, notes, kubeflow_env)
    host_path_notes(templates[used], template_path, notes)
    _pod_name_notes(templates[used], template_path, str(metadata.get("name", "")), MASTER in replicas, notes)

    index = _trainer_index(templates[used], template_path)
    container = templates[used]["spec"]["containers"][index]
    check_program(container, lifted.get("image"), f"{template_path}.spec.containers[{index}]", "PyTorchJob")
    workers = sum(counts.values())
    tpus = tpu_problem(container.get("resources"), f"{template_path}.spec.containers[{index}].resources", workers)
    if tpus:
        raise NotConvertible([tpus])
    origins["spec.workers"] = f"spec.pytorchReplicaSpecs.{WORKER if WORKER in counts else MASTER}.replicas"
    accel = accelerator(container.get("resources"))
    procs, procs_path = _procs(spec, lifted.get("gpusPerWorker", 0), notes,
                               _user_nproc(templates[used], template_path, spec, kubeflow_env), accel,
                               starts_processes(container.get("command"), container.get("args")),
                               origins.get("spec.gpusPerWorker", ""), procs_per_worker)
    procs, procs_path = command_procs(torchrun.container_find(container),
                                      f"{template_path}.spec.containers[{index}]", lifted.get("gpusPerWorker", 0),
                                      (procs, procs_path), procs_per_worker, notes, accel)
    origins["spec.procsPerWorker"] = procs_path
    if MASTER not in replicas and workers > 1 and (container.get("command") or container.get("args")) \
            and not starts_processes(container.get("command"), container.get("args")):
        notes.append(Note(f"{template_path}.spec.containers[{index}].{'command' if container.get('command') else 'args'}",
                          "starts no torch launcher: changed, a PyTorchJob without a Master gave its pods no WORLD_SIZE,"
                          " RANK, MASTER_ADDR or MASTER_PORT (envvar.go sets them beside a Master only), so a script that"
                          " reads them (init_process_group's env://) ran alone in each pod or failed; kuberl sets them in"
                          f" every pod (WORLD_SIZE {workers * (procs or 1)}), so it now joins the {workers} pods in one group"))
    if procs_per_worker is None:
        note_own_launcher_count(container.get("command"), container.get("args"), procs, lifted.get("gpusPerWorker", 0),
                                f"{template_path}.spec.containers[{index}]", notes)
    # MASTER_PORT is the Master's pytorchjob-port under PyTorchJob (getPortFromPyTorchJob)
    port_from = MASTER if MASTER in replicas else WORKER
    port_index = _trainer_index(templates[port_from], f"spec.pytorchReplicaSpecs.{port_from}.template")
    port, port_path = _rendezvous_port(templates[port_from]["spec"]["containers"][port_index],
                                       f"spec.pytorchReplicaSpecs.{port_from}.template.spec.containers[{port_index}]")
    if port is None:  # the port PyTorchJob's pods had, so what the user's policies and scripts name still holds
        port = DEFAULT_PORT
    restart_policies = {rtype: r["restartPolicy"] for rtype, r in replicas.items() if r.get("restartPolicy") is not None}
    run_policy, queue, queue_path = _run_policy(spec, restart_policies, origins, notes)
    if MASTER in counts:  # training-operator ends the job when its Master succeeds; Workers alone: all of them
        run_policy["successPolicy"] = "Worker0"
        origins["spec.runPolicy.successPolicy"] = f"spec.pytorchReplicaSpecs.{MASTER}"
        notes.append(Note("spec.runPolicy.successPolicy", "Worker0: the job succeeds when worker 0, the Master's pod,"
                          " exits 0, whatever the Workers' exits, as the PyTorchJob did"))
    _elastic_notes(spec, notes)
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    if queue is not None:
        volcano_queue(queue, queue_path, lifted.get("schedulerName"), template, origins, notes)
    queue, queue_path = kueue_queue(metadata, notes)
    kueue_priority_on_pods(labels, template, notes)
    if queue is not None and run_policy.get("suspend") is True:
        notes.append(Note("spec.runPolicy.suspend", KUEUE_SUSPEND.format(kind=KIND)))
    out: dict[str, Any] = {"trainer": "custom", "workers": workers}
    if procs is not None:
        out["procsPerWorker"] = procs
    for key in ("gpusPerWorker", "image", "imagePullPolicy", "resources", "schedulerName", "priorityClassName"):
        if key in lifted:
            out[key] = lifted[key]
    if queue is not None:
        out["queueName"] = queue
        origins["spec.queueName"] = queue_path
    out["rendezvous"] = {"port": port}
    if port_path:
        origins["spec.rendezvous.port"] = port_path
    if run_policy:
        out["runPolicy"] = run_policy
    out["template"] = template
    job = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": metadata, "spec": out}
    checked(job, origins, notes)
    return job, notes


def kueue_queue(metadata: dict, notes: list[Note]) -> tuple[Any, str]:
    """The job's Kueue LocalQueue and its field: the queue-name label, else the annotation of that key, which
    Kueue read first (kueue pkg/controller/constants QueueAnnotation, deprecated for the label)."""
    for field in ("labels", "annotations"):
        values = metadata.get(field) if isinstance(metadata.get(field), dict) else {}
        if KUEUE_QUEUE_LABEL in values:
            path = f"metadata.{field}.{KUEUE_QUEUE_LABEL}"
            if field == "annotations":
                notes.append(Note(path, "Kueue's older, annotation form of its queue-name label: now spec.queueName, which"
                                  " kuberl puts on the pods as the label Kueue's pod integration reads"))
            return values[KUEUE_QUEUE_LABEL], path
    return None, ""


def volcano_queue(queue: Any, path: str, scheduler: Any, template: dict, origins: dict, notes: list[Note]) -> None:
    """schedulingPolicy.queue onto the pods' Volcano queue annotation, whence kuberl's Volcano PodGroup takes its
    spec.queue: training-operator gave it to the Volcano PodGroup it made (common/job.go), never to Kueue, whose
    integration reads the job's kueue.x-k8s.io/queue-name label alone."""
    if not isinstance(queue, str) or not queue:
        raise not_convertible(path, f"expected the name of a Volcano queue (got {short_repr(queue)})")
    if "metadata" not in template:  # first, as a pod template is written
        rest = list(template.items())
        template.clear()
        template.update([("metadata", {}), *rest])
    metadata = template["metadata"]
    annotations = metadata.setdefault("annotations", {}) if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict):
        return  # validation names the template's metadata
    if annotations.get(names.VOLCANO_QUEUE_NAME, queue) != queue:
        notes.append(Note(path, f"not carried over: the pods' own {names.VOLCANO_QUEUE_NAME} annotation"
                          f" {annotations[names.VOLCANO_QUEUE_NAME]!r} wins (kuberl's Volcano PodGroup takes its queue from it)"))
        return
    annotations[names.VOLCANO_QUEUE_NAME] = queue
    origins[f"spec.template.metadata.annotations.{names.VOLCANO_QUEUE_NAME}"] = path
    volcano = scheduler in VOLCANO_SCHEDULERS
    notes.append(Note(path, f"now the pods' {names.VOLCANO_QUEUE_NAME} annotation (spec.template.metadata), from which"
                      " kuberl's Volcano PodGroup takes its queue, as training-operator gave this one to the Volcano"
                      " PodGroup it made" + ("" if volcano else
                      "; with gang scheduling on, training-operator set the pods' schedulerName itself: set"
                      " spec.schedulerName: volcano for that PodGroup. Kueue never read this field (only the"
                      f" job's {KUEUE_QUEUE_LABEL} label, which becomes spec.queueName)")))


MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # the managedBy value of a job MultiKueue dispatches to a worker cluster


def managed_by(value: Any, kind: str) -> str:
    """The note for a source job's managedBy: MultiKueue's ran the job in another cluster."""
    if value == MULTIKUEUE:
        return (f"not carried over: {value} ran the {kind} on a worker cluster MultiKueue chose; Kueue has no MultiKueue"
                " integration for an RLTrainingJob, which runs in the cluster it is created in (its pods, in a worker"
                " cluster's Kueue, by spec.queueName): create it there")
    return "not carried over: kuberl's operator manages the RLTrainingJob"


KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # Kueue's WorkloadPriorityClassLabel


def kueue_priority_on_pods(labels: dict, template: dict, notes: list[Note]) -> None:
    """The job's Kueue WorkloadPriorityClass label, also on its pods: Kueue's integration for the source kind read
    it from the job, its pod integration (kuberl's pods) reads it from the pods (jobframework
    WorkloadPriorityClassName), so on the RLTrainingJob alone it would give the gang no priority."""
    value = labels.get(KUEUE_PRIORITY_LABEL)
    if not isinstance(value, str) or not isinstance(template.get("metadata", {}), dict) or not isinstance(
            template.get("metadata", {}).get("labels", {}), dict):
        return  # none, or a template metadata validation names
    pod_labels = template.setdefault("metadata", {}).setdefault("labels", {})
    if pod_labels.get(KUEUE_PRIORITY_LABEL) == value:
        return
    if KUEUE_PRIORITY_LABEL in pod_labels:
        notes.append(Note(f"metadata.labels.{KUEUE_PRIORITY_LABEL}", f"the pods' own {pod_labels[KUEUE_PRIORITY_LABEL]!r}"
                          " wins: Kueue reads a pod group's WorkloadPriorityClass from its pods"))
        return
    pod_labels[KUEUE_PRIORITY_LABEL] = value
    notes.append(Note(f"metadata.labels.{KUEUE_PRIORITY_LABEL}", "also put on the pods (spec.template.metadata.labels):"
                      " Kueue reads a pod group's WorkloadPriorityClass from its pods, not from the RLTrainingJob"))


def checked(job: dict, origins: dict[str, str], notes: list[Note]) -> None:
    """Raises NotConvertible, every problem at the source document's field (`origins`), where kuberl would
    refuse the RLTrainingJob or the API server its pods (kuberl validate and run check the same); adds to
    `notes` one for each field of its pods the operator's default Pod Security level refuses (one a note
    already names, a hostPath's with its ways out, is not said twice)."""
    try:
        parsed = validate_job(job)
    except InvalidJob as e:
        raise NotConvertible([_traced(p, origins) for p in e.problems]) from None
    template = job["spec"]["template"]
    pod = render_pod(Job(job["metadata"]["name"], parsed), "default", PLACEHOLDER_UID, 0)
    index = next(i for i, c in enumerate(template["spec"]["containers"]) if c.get("name") == names.TRAINER_CONTAINER)
    problems = [Problem("spec.template." + path.replace(f"containers[{names.TRAINER_CONTAINER}]", f"containers[{index}]"), message)
                for path, _, message in (p.partition(": ") for p in pod_source_problems(pod))]
    if problems:
        raise NotConvertible([_traced(p, origins) for p in problems])
    said = {n.path for n in notes}
    notes += [n for n in _pod_security_notes(pod, template, origins) if n.path not in said]


_NAMED_ITEM = re.compile(r"^spec\.(containers|initContainers|volumes)\[([^\]]*)\]")


def _pod_security_notes(pod: dict, template: dict, origins: dict[str, str]) -> list[Note]:
    """A note at the source document's field for each violation of the baseline Pod Security Standard, the
    operator's default level (core/podsecurity.py, as kuberl validate checks it): a PyTorchJob's hostNetwork or
    privileged container ran wherever the namespace allowed it, and the converted job would be refused."""
    notes = []
    for v in check_pod(pod, DEFAULT_LEVEL):
        def indexed(m: re.Match) -> str:  # the pod names containers and volumes; the template lists them
            items = template["spec"].get(m.group(1))
            found = [i for i, item in enumerate(items if isinstance(items, list) else [])
                     if isinstance(item, dict) and str(item.get("name")) == m.group(2)]
            return f"spec.{m.group(1)}[{found[0] if found else m.group(2)}]"
        path = _NAMED_ITEM.sub(indexed, v.path)
        path = re.sub(r"^metadata\.annotations\[(.*)\]$", r"metadata.annotations.\1", path)
        message = (f"{v.control} ({v.allowed}; got {short_repr(v.got)}): the operator's default Pod Security level,"
                   f" {DEFAULT_LEVEL}, refuses the pods (kuberl validate shows it): drop it if the job runs without it, "
                   + PRIVILEGED_WAY)
        notes.append(Note(_origin("spec.template." + path, origins), message))
    return notes


_PATH_TOKEN = re.compile(r"\bspec\.[A-Za-z0-9_.\[\]/-]*[A-Za-z0-9_\]]")


def _origin(path: str, origins: dict[str, str]) -> str:
    """The PyTorchJob field an RLTrainingJob field came from (the longest mapped prefix)."""
    for new in sorted(origins, key=len, reverse=True):
        if path == new or path.startswith((new + ".", new + "[")):
            return origins[new] + path[len(new):]
    return path


def _traced(problem: Problem, origins: dict[str, str]) -> Problem:
    """validate_job's problem, at the PyTorchJob's field path, with the RLTrainingJob's name for it after."""
    origin = _origin(problem.path, origins)
    message = _PATH_TOKEN.sub(lambda m: _origin(m.group(0), origins), problem.message)
    if origin != problem.path:
        message += f" [as {problem.path}]"
    return Problem(origin, message)


class _Dumper(yamlwriter.ReadableDumper):
    """Quotes every string that kubectl or kuberl would read back as something else (`1e-3`, `on`, `y`, a date);
    letters as written."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def to_yaml(docs: list[dict], encoding: str | None = None) -> str:
    """The documents as one YAML stream, keys in the order built (the order the guide shows); for a stream of
    `encoding` that cannot take a character written, every non-ASCII character escaped (the same values)."""
    return yamlwriter.dump_all(docs, _Dumper, encoding, sort_keys=False, width=120, explicit_start=len(docs) > 1)
