"""A manifest's documents sorted for kuberl: RLTrainingJobs and ConfigMaps kept, Kubeflow
PyTorchJobs and TrainJobs and JobSets converted (`kuberl convert`, `validate`, `render` and `run` take them as
they stand), everything else named and left out."""

from __future__ import annotations

import copy
import difflib
import re
import sys
from typing import Any

from ..core import names
from ..core.podsource import configmap_problems, is_configmap
from ..core.validation import Problem
from .convert import KIND, NotConvertible, Note, convert

# --- a file of several objects ----------------------------------------------------------------

TRAINJOB_KIND = "TrainJob"  # Kubeflow Trainer v2 (trainer.kubeflow.org); see trainjob.py
JOBSET_KIND = "JobSet"  # kubernetes-sigs/jobset (jobset.x-k8s.io); see jobset.py
FOREIGN_KINDS = (KIND, TRAINJOB_KIND, JOBSET_KIND)  # converted into an RLTrainingJob
JOB_KINDS = (names.KIND, *FOREIGN_KINDS)
# Groups whose documents are kept even under an unknown kind: a typo there is refused by name, not skipped.
JOB_GROUPS = (names.GROUP, "kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
MAX_LIST_DEPTH = 8  # kubectl flattens nested Lists; deeper than this is no manifest anyone wrote
SKIPPED = ("left out: kuberl takes the job, and the ConfigMaps it reads, from this file; kubectl apply the rest"
           " yourself if the job needs it")
ETCD_SKIPPED = ("left out: an etcd server for torchrun's etcd rendezvous, which kuberl does not need: every pod meets"
                " at worker 0 by static rendezvous (MASTER_ADDR:MASTER_PORT, PET_RDZV_ENDPOINT), which replaces it")
KUSTOMIZATION_SKIPPED = ("left out: a kustomization, which lists the manifests and patches kustomize builds;"
                         " kuberl reads what it builds: kubectl kustomize DIR | kuberl convert -")
# kustomize's kustomization.yaml fields (kustomize.config.k8s.io/v1beta1 Kustomization); apiVersion and kind are optional there
KUSTOMIZATION_FIELDS = ("resources", "bases", "patches", "patchesStrategicMerge", "patchesJson6902", "components",
                        "namePrefix", "nameSuffix", "images", "configMapGenerator", "secretGenerator")
WRAPPED_SKIPPED = ("left out: it wraps a {kind} at {path} (as an AppWrapper or a Katib Experiment does), which kuberl"
                   " does not unwrap: put that {kind} in a file of its own, filled in as the wrapper would, and convert it")
# Workload kinds of other projects that run a job themselves: left out like any other document, but said to be
# the workload, not a companion object to kubectl apply beside one.
OTHER_WORKLOADS = {
    ("ray.io", "RayJob"): "KubeRay starts a Ray cluster (a head and workers) and submits the entrypoint to it with"
                          " ray job submit; kuberl runs torch.distributed pods, not Ray",
    ("ray.io", "RayCluster"): "a Ray cluster (a head and workers) that jobs are submitted to; kuberl runs torch.distributed"
                              " pods, not Ray",
    ("batch.volcano.sh", "Job"): "Volcano's Job runs tasks whose env its plugins (pytorch, env, svc) write; convert the"
                                 " torch task as a PyTorchJob or a JobSet of its pods",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "a set of leader and worker pods that serve (it restarts a group and"
                                                     " never finishes); kuberl runs training gangs that finish",
    ("batch", "Job"): "a batch/v1 Job: as a JobSet of one replicated Job (its spec under"
                      " spec.replicatedJobs[0].template.spec) kuberl converts it, with its Service left out",
}
WORKLOAD_SKIPPED = "left out: not a job kuberl converts (a PyTorchJob, a TrainJob or a JobSet): {why}"
RUNTIME_SKIPPED = ("left out: a Kubeflow Trainer runtime; a TrainJob of this file that names it takes its node"
                   " container's image, resources, command and args and its mlPolicy's numNodes and torch.numProcPerNode,"
                   " nothing else")


def flatten(docs: list[Any], depth: int = 0) -> list[Any]:
    """The documents with every `kind: List` (or `<Kind>List`, as kubectl get -o yaml writes) replaced by its
    items, as kubectl apply -f reads a file."""
    out: list[Any] = []
    for doc in docs:
        items = doc.get("items") if isinstance(doc, dict) else None
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list) and depth < MAX_LIST_DEPTH:
            out += flatten(items, depth + 1)
        else:
            out.append(doc)
    return out


def document_label(doc: Any, index: int) -> str:
    """`Kind 'name'` of a document, bounded and escaped (repr), or its place in the file."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    metadata = doc.get("metadata") if isinstance(doc, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    kind_text = kind if isinstance(kind, str) and re.fullmatch(r"[A-Za-z0-9]{1,63}", kind) else f"document {index + 1}"
    if not isinstance(name, str):
        return kind_text
    shown = repr(name[:80] + "…" if len(name) > 80 else name)
    return f"{kind_text} {shown}"


def is_kustomization(doc: Any) -> bool:
    """A kustomization.yaml: kind Kustomization, or no apiVersion and kind but kustomize's fields."""
    if not isinstance(doc, dict):
        return False
    if doc.get("kind") in ("Kustomization", "Component"):
        return isinstance(doc.get("apiVersion"), str) and doc["apiVersion"].startswith("kustomize.config.k8s.io/")
    return "kind" not in doc and "apiVersion" not in doc and any(key in doc for key in KUSTOMIZATION_FIELDS)


def wrapped_job(doc: Any) -> tuple[str, str] | None:
    """The kind and path of a PyTorchJob, TrainJob or JobSet nested inside another document (an AppWrapper's
    spec.components[].template, a Katib Experiment's spec.trialTemplate.trialSpec), the first found; one with
    no spec is a reference to a job (an ownerReference, a Workload's controllerRef), not a job."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    seen = 0
    while stack and seen < 10_000:
        item, path = stack.pop(0)
        seen += 1
        if path and isinstance(item, dict) and item.get("kind") in FOREIGN_KINDS and isinstance(item.get("spec"), dict):
            return item["kind"], path
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in children:
            if isinstance(child, dict | list):
                stack.append((child, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)))
    return None


def is_job(doc: Any) -> bool:
    """A document kuberl takes as the job (or refuses by name): a job kind, a kind close to one, a kind of
    a job group, or no mapping at all. Anything else is skipped, named."""
    if not isinstance(doc, dict):
        return True
    kind, api = doc.get("kind"), doc.get("apiVersion")
    if kind == "ConfigMap":
        return False
    if kind in RUNTIME_KINDS or is_kustomization(doc):
        return False
    if isinstance(kind, str) and kind not in JOB_KINDS and wrapped_job(doc):
        return False  # a wrapper (AppWrapper, Katib's Experiment), named with the job inside it
    group = api.rpartition("/")[0] if isinstance(api, str) else ""
    return (kind in JOB_KINDS or group in JOB_GROUPS or not isinstance(kind, str)
            or bool(difflib.get_close_matches(kind, JOB_KINDS, n=1, cutoff=0.8)))


def _words(value: Any) -> list[str]:
    """The strings of a document's names, labels, selectors and container images (lower case)."""
    found: list[str] = []
    stack, seen = [value], 0
    while stack and seen < 10_000:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            for key, child in item.items():
                if (key in ("name", "image", "app") or key.endswith("/name")) and isinstance(child, str):
                    found.append(child.lower())
                if isinstance(child, dict | list):
                    stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def is_etcd(doc: Any, rdzv_hosts: frozenset[str]) -> bool:
    """An object of the etcd server a PyTorchJob's etcd rendezvous used: the job's rdzvHost by name, or
    an object whose names, labels or images say etcd (AWS's samples ship a Service and a Deployment)."""
    if not isinstance(doc, dict):
        return False
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    if metadata.get("name") in rdzv_hosts:
        return True
    return any(re.search(r"(^|[/_.-])etcd([:_.-]|$)", word) for word in _words(doc))


def _etcd_hosts(jobs: list[Any]) -> frozenset[str]:
    hosts = set()
    for job in jobs:
        spec = job.get("spec") if isinstance(job, dict) else None
        policy = spec.get("elasticPolicy") if isinstance(spec, dict) else None
        if isinstance(policy, dict) and str(policy.get("rdzvBackend", "")).startswith("etcd"):
            host = policy.get("rdzvHost")
            if isinstance(host, str):
                hosts.add(host.split(".")[0])
    return frozenset(hosts)


def _group_kind(doc: Any) -> tuple[str, str] | None:
    """A document's API group (without its version) and kind."""
    if not isinstance(doc, dict) or not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
        return None
    return doc["apiVersion"].rpartition("/")[0], doc["kind"]


def select_documents(docs: list[Any]) -> tuple[list[Any], list[str], list[str]]:
    """A file's documents (Lists flattened) split three ways: the job documents and ConfigMaps, in the
    file's order; a line for each other document, naming it and why it is left out; the job
    documents' labels (kuberl takes one job per file from a file of several objects)."""
    flat = flatten(docs)
    jobs = [d for d in flat if is_job(d)]
    hosts = _etcd_hosts(jobs)
    kept, skipped = [], []
    for i, doc in enumerate(flat):
        if is_job(doc) or is_configmap(doc):
            kept.append(doc)
            continue
        wrapped = wrapped_job(doc)
        workload = OTHER_WORKLOADS.get(_group_kind(doc))
        why = (RUNTIME_SKIPPED if isinstance(doc, dict) and doc.get("kind") in RUNTIME_KINDS
               else WORKLOAD_SKIPPED.format(why=workload) if workload
               else KUSTOMIZATION_SKIPPED if is_kustomization(doc)
               else WRAPPED_SKIPPED.format(kind=wrapped[0], path=wrapped[1]) if wrapped
               else ETCD_SKIPPED if is_etcd(doc, hosts) else SKIPPED)
        skipped.append(f"{document_label(doc, i)}: {why}")
    labels = [document_label(d, i) for i, d in enumerate(flat) if is_job(d)]
    return kept, skipped, labels


def runtimes_of(docs: list[Any]) -> list[dict]:
    """The Trainer runtimes (TrainingRuntime, ClusterTrainingRuntime) among a file's documents."""
    return [d for d in flatten(docs) if isinstance(d, dict) and d.get("kind") in RUNTIME_KINDS]


def one_job_problem(labels: list[str]) -> str | None:
    """The refusal of a file with several job documents, naming each; None for one or none."""
    if len(labels) <= 1:
        return None
    return (f"{len(labels)} job documents ({', '.join(labels)}): kuberl takes one job from a file; keep one, or put"
            " each in its own file")


# A template's blank never filled in: envsubst's ${VAR} (or a whole-value $VAR), Helm's and Jinja's {{ ... }}
# (found by _braces: a lazy `\{\{.*?\}\}` searched on from every '{' of a long value, in time quadratic in it).
BLANK = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|^\$[A-Za-z_][A-Za-z0-9_]*$")
# A README's <PLACEHOLDER> in an image (JobSet's gpu-training example: <REGISTRY>/<USERNAME>/...): no image reference
# holds '<' (distribution/reference's grammar), so the kubelet would fail it as InvalidImageName
ANGLE_BLANK = re.compile(r"<[A-Za-z_][A-Za-z0-9_ -]*>")


def _braces(text: str) -> bool:
    """A line of `text` with a '{{' and a '}}' after it."""
    for line in text.split("\n"):
        opened = line.find("{{")
        if opened >= 0 and line.find("}}", opened + 2) >= 0:
            return True
    return False
# Where a shell or the kubelet expands such text itself: a script's ${VAR} is its own business.
SHELL_FIELDS = frozenset({"command", "args", "env"})


def template_blank(doc: Any) -> Problem | None:
    """The first field of a job document (outside command, args and env) whose value is a template's
    blank, said as such: such a file is a template to render, not a manifest."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    seen = 0
    while stack and seen < 10_000:
        item, path = stack.pop(0)
        seen += 1
        if isinstance(item, str) and (BLANK.search(item) or _braces(item) or path.endswith(".image") and ANGLE_BLANK.search(item)):
            return Problem(path, f"{item[:60]!r} is a template's blank (envsubst's ${{VAR}}, Helm's or Jinja's {{{{ }}}}, a"
                           " README's <NAME>)"
                           " never filled in: render the file first (envsubst < FILE | kuberl convert -), or write the value")
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in children:
            if key not in SHELL_FIELDS:
                stack.append((child, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)))
    return None


def convert_documents(docs: list[Any], procs_per_worker: int | None = None, image: str | None = None,
                      runtimes: list | tuple = ()) -> tuple[list[dict], list[tuple[str, list[Note]]], list[tuple[str, NotConvertible]]]:
    """Every document of a file: PyTorchJobs and TrainJobs converted (`procs_per_worker`, `image`: what
    the manifest cannot tell), ConfigMaps beside them kept as they are (the template may read them;
    kubectl applies them and kuberl run mounts them); `runtimes`, the file's Trainer runtimes, give a
    TrainJob what its runtime holds. Returns the output documents, the notes per job, and the failures
    per document."""
    from .jobset import convert_jobset
    from .trainjob import convert_trainjob

    out, notes, failures = [], [], []
    for i, doc in enumerate(docs):
        metadata = doc.get("metadata") if isinstance(doc, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        is_trainjob = isinstance(doc, dict) and doc.get("kind") == TRAINJOB_KIND
        label = document_label(doc, i) if isinstance(name, str) else f"document {i + 1}"  # its own kind: MPIJob 'x'
        label = label if isinstance(doc, dict) and isinstance(doc.get("kind"), str) else f"{KIND} {name!r}"
        if is_configmap(doc):
            problems = configmap_problems(doc)
            if problems:
                failures.append((f"ConfigMap {name!r}" if isinstance(name, str) else label, NotConvertible(problems)))
            out.append(copy.deepcopy(doc))
            continue
        try:
            job, job_notes = (convert_trainjob(doc, procs_per_worker, image, runtimes) if is_trainjob
                              else convert_jobset(doc, procs_per_worker) if isinstance(doc, dict) and doc.get("kind") == JOBSET_KIND
                              else convert(doc, procs_per_worker))
        except NotConvertible as e:
            blank = template_blank(doc)
            failures.append((label, NotConvertible([*e.problems, blank]) if blank else e))
            continue
        blank = template_blank(doc)
        out.append(job)
        notes.append((label, [*job_notes, Note(blank.path, blank.message)] if blank else job_notes))
    return out, notes, failures


def runnable_documents(docs: list, path: str, say: bool = True, one_job: bool = False) -> list:
    """A file's job and ConfigMap documents (Lists flattened), each Kubeflow PyTorchJob replaced by the
    RLTrainingJob `kuberl convert` prints (validate, render and run take a PyTorchJob as it stands).
    Every other document is left out, and when `say` named on stderr with why, one line each, as is
    what could not be carried over. Several job documents exit 1 naming each when `one_job` (run) or
    when one is not an RLTrainingJob (a migrated file); a PyTorchJob with no equivalent exits 1,
    naming its fields."""
    kept, skipped, labels = select_documents(docs)
    for line in skipped if say else []:
        print(f"{path}: {line}", file=sys.stderr)
    foreign = [d for d in kept if isinstance(d, dict) and d.get("kind") in FOREIGN_KINDS]
    several = one_job_problem(labels) if one_job or foreign else None
    if several:
        raise SystemExit(f"{path}: {several}")
    out = []
    for doc in kept:
        if not any(doc is d for d in foreign):
            out.append(doc)
            continue
        converted, notes, failures = convert_documents([doc], runtimes=runtimes_of(docs))
        for label, e in failures:
            asks = any(option in p.message for p in e.problems for option in ("--image", "--procs-per-worker"))
            hint = (f"\n  (the options are kuberl convert's: kuberl convert --image IMAGE --procs-per-worker N {path} >"
                    " job.yaml, then run job.yaml)") if asks else ""
            raise SystemExit(f"{path}: {label} has no RLTrainingJob equivalent:\n" + "\n".join(f"  {p}" for p in e.problems) + hint)
        for label, job_notes in notes if say else []:
            for note in job_notes:
                print(f"{path}: {label}, run as an RLTrainingJob (`kuberl convert` prints it): {note}", file=sys.stderr)
        out += converted
    return out
