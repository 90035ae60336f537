"""A JobSet (jobset.x-k8s.io/v1alpha2) of torch pods turned into the RLTrainingJob that runs them, as
convert.py does for a PyTorchJob: pure, the input never mutated, every field that cannot carry a `Note`
naming it, every refusal at the JobSet's own field path.

JobSet's PyTorch examples (site/static/examples/pytorch) run one replicated Job of N Indexed pods, each
starting torchrun with MASTER_ADDR, MASTER_PORT and its rank from the pod's completion index written in
its own env: one kuberl gang of N workers, whose env gives the same values. The fields follow
kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go and its controller's defaults.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ..core import contract, names, torchrun
from . import podlabels
from .convert import (
    KUEUE_SUSPEND,
    PROCS_OPTION,
    NotConvertible,
    Note,
    accelerator,
    as_list,
    as_mapping,
    carried_metadata,
    check_document,
    check_program,
    checked,
    command_procs,
    container_text_fields,
    host_path_notes,
    kueue_priority_on_pods,
    kueue_queue,
    managed_by,
    named_pod_notes,
    not_convertible,
    note_own_launcher_count,
    note_top_level_fields,
    relabelled,
    short_repr,
    starts_processes,
    tpu_problem,
    trainer_template,
)

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
PYTORCH_CONTAINER = "pytorch"  # the name JobSet's PyTorch examples give the container that runs torchrun
# batch/v1 JobSpec fields with no home in a kuberl gang, and why.
JOB_FIELDS = {
    "podFailurePolicy": "kuberl restarts the whole gang at any pod failure (DDP cannot lose a rank), whatever its exit"
                        " code or condition",
    "backoffLimitPerIndex": "kuberl restarts the whole gang at any pod failure, counted toward spec.runPolicy.backoffLimit",
    "maxFailedIndexes": "kuberl restarts the whole gang at any pod failure, counted toward spec.runPolicy.backoffLimit",
    "successPolicy": "kuberl's job succeeds when every worker exits 0, or (spec.runPolicy.successPolicy: Worker0) when"
                     " worker 0 does",
    "podReplacementPolicy": "kuberl never starts a gang before the old one's pods are gone",
    "ttlSecondsAfterFinished": "the JobSet's own ttlSecondsAfterFinished becomes spec.runPolicy.ttlSecondsAfterFinished;"
                               " kuberl makes no Job to delete",
    "suspend": "the JobSet's own suspend becomes spec.runPolicy.suspend; kuberl makes no Job",
    "selector": "kuberl selects its pods by its own labels",
    "manualSelector": "kuberl selects its pods by its own labels",
    "managedBy": "kuberl's operator makes the pods; there is no Job",
}
FAILURE_ACTIONS = {
    "FailJobSet": "changed: kuberl does not read why a pod failed (a Job's failure reason, a message pattern): every"
                  " failure restarts the gang up to spec.runPolicy.backoffLimit",
    "RestartJobSet": "kuberl always does this: any failure restarts the gang, counted toward spec.runPolicy.backoffLimit",
    "RestartJobSetAndIgnoreMaxRestarts": "changed: kuberl counts every crash toward spec.runPolicy.backoffLimit; only"
                                         " preemption, eviction and node loss (a DisruptionTarget condition) go uncounted",
    "RestartJob": "changed: kuberl restarts the whole gang, not one Job",
    "RestartJobAndIgnoreMaxRestarts": "changed: kuberl restarts the whole gang, not one Job, and counts it",
}


# JobSet's placement annotations (jobset_types.go ExclusiveKey, NodeSelectorStrategyKey): each Job alone in one
# topology domain. kuberl makes no Jobs, so on the RLTrainingJob they would say what nothing does.
PLACEMENT_ANNOTATIONS = ("alpha.jobset.sigs.k8s.io/exclusive-topology", "alpha.jobset.sigs.k8s.io/node-selector")


def _placement_annotations(metadata: dict, notes: list[Note]) -> None:
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return
    for key in PLACEMENT_ANNOTATIONS:
        if key in annotations:
            notes.append(Note(f"metadata.annotations.{key}", "not carried over: JobSet placed each of its Jobs alone in"
                              " one topology domain (a node pool, a rack); kuberl makes no Jobs: keep the gang in one"
                              " domain with a podAffinity on kuberl.dev/job in spec.affinity, or pin it with"
                              " spec.nodeSelector"))
    kept = {k: v for k, v in annotations.items() if k not in PLACEMENT_ANNOTATIONS}
    if kept:
        metadata["annotations"] = kept
    else:
        del metadata["annotations"]


def _check_document(doc: Any) -> None:
    check_document(doc, KIND, API_VERSION)


def _count(value: Any, path: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise not_convertible(path, f"expected a whole number of at least 1 (got {short_repr(value)})")
    return value


def _replicated_job(spec: dict) -> dict:
    """The one replicated Job: kuberl runs one gang of pods that run one program."""
    jobs = as_list(spec.get("replicatedJobs"), "spec.replicatedJobs")
    if not jobs:
        said = "empty" if isinstance(spec.get("replicatedJobs"), list) else "required field is missing"
        raise not_convertible("spec.replicatedJobs", f"{said}: the pods are a replicated Job's (one, whose pods run torch)")
    if len(jobs) > 1:
        shown = ", ".join(repr(j.get("name")) if isinstance(j, dict) else "?" for j in jobs)
        raise not_convertible("spec.replicatedJobs", f"{len(jobs)} replicated Jobs ({shown}): kuberl runs one gang of"
                              " identical pods running one program, worker 0 its rendezvous; keep the one replicated Job"
                              " that runs torch (a leader that runs the same program becomes one more of its pods, and"
                              " worker 0 plays it), and run a driver or a step beside it on its own")
    return as_mapping(jobs[0], "spec.replicatedJobs[0]", required=True)


def _index_0_succeeds(policy: Any) -> bool:
    """A batch/v1 Job successPolicy that says the Job succeeds once index 0 has (the leader's pod): kuberl's Worker0."""
    rules = policy.get("rules") if isinstance(policy, dict) else None
    return (isinstance(rules, list) and len(rules) == 1 and isinstance(rules[0], dict)
            and str(rules[0].get("succeededIndexes")).strip() == "0" and rules[0].get("succeededCount") in (None, 1))


def _pods_per_job(job_spec: dict, path: str, notes: list[Note]) -> int:
    """The pods each Job runs at once, which must be all its completions: a kuberl gang runs at once."""
    parallelism = _count(job_spec.get("parallelism"), f"{path}.parallelism", 1)
    completions = job_spec.get("completions")
    if completions is not None and _count(completions, f"{path}.completions", 1) != parallelism:
        raise not_convertible(f"{path}.completions", f"{completions} with parallelism {parallelism}: the Job ran"
                              f" {parallelism} pod(s) at a time until {completions} completed, and a kuberl gang runs"
                              " all its workers at once: make them equal")
    mode = job_spec.get("completionMode")
    if mode not in (None, "Indexed"):
        notes.append(Note(f"{path}.completionMode", f"{mode}: its pods had no completion index; kuberl's pods have their"
                          " rank (RANK, NODE_RANK, the kuberl.dev/rank label)"))
    return parallelism


def _trainer_index(pod_spec: dict, path: str) -> int:
    """The container that runs torch: the pod's only one, else the one named `pytorch`."""
    containers = as_list(pod_spec.get("containers"), f"{path}.containers")
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            raise not_convertible(f"{path}.containers[{i}]", f"expected a container object (got {short_repr(container)})")
    found = [0] if len(containers) == 1 else [i for i, c in enumerate(containers) if c.get("name") == PYTORCH_CONTAINER]
    if not found:
        shown = ", ".join(repr(c.get("name")) for c in containers) or "none"
        raise not_convertible(f"{path}.containers", f"expected one container, or one named {PYTORCH_CONTAINER!r} (got"
                              f" {shown}): its command becomes kuberl's {names.TRAINER_CONTAINER!r} container, the"
                              " others stay as sidecars; name the one that runs torch")
    clash = [i for i, c in enumerate(containers) if c.get("name") == names.TRAINER_CONTAINER and i != found[0]]
    if clash:
        raise not_convertible(f"{path}.containers[{clash[0]}].name", f"{names.TRAINER_CONTAINER!r} is the name the"
                              f" {containers[found[0]].get('name')!r} container takes in kuberl; rename this one")
    return found[0]


def _literal_env(container: dict, name: str, path: str) -> tuple[str, str] | None:
    """The container's own literal value of env `name` and its field (the last of duplicates wins, as the
    kubelet takes them); under a JobSet nothing overrode it, so it is what the process read."""
    found = None
    env = container.get("env")
    for i, var in enumerate(env if isinstance(env, list) else []):
        if isinstance(var, dict) and var.get("name") == name:
            value = var.get("value")
            found = (value.strip(), f"{path}.env[{i}]") if isinstance(value, str) and "valueFrom" not in var else None
    return found


def _procs(container: dict, path: str, gpus: int, given: int | None, notes: list[Note]) -> tuple[int | None, str]:
    """procsPerWorker and its origin: torchrun's --nproc-per-node, else the container's own PET_NPROC_PER_NODE,
    else torchrun's default, 1; a command with no launcher is the one process it is."""
    command, args = container.get("command"), container.get("args")
    launches = torchrun.launches(command, args)
    own = _literal_env(container, contract.ENV_PET_NPROC_PER_NODE, path) if launches else None
    decided: tuple[int | None, str] = (None, "")
    if own is not None:
        notes[:] = [n for n in notes if n.path != own[1]]  # its "not carried over" note: it is, as procsPerWorker
        if torchrun.whole_number(own[0]):
            notes.append(Note(own[1], f"{contract.ENV_PET_NPROC_PER_NODE}={own[0]} is now spec.procsPerWorker, from which"
                              " kuberl sets it (and NPROC_PER_NODE, WORLD_SIZE) for every pod"))
            decided = (int(own[0]), own[1])
        else:
            notes.append(Note(own[1], f"{contract.ENV_PET_NPROC_PER_NODE}={own[0]!r}: torchrun counts the GPUs, or the"
                              " node's CPUs, which no manifest tells; kuberl runs one process per GPU"
                              f" (spec.gpusPerWorker), else 1: pass {PROCS_OPTION} N to choose"))
            decided = (None, own[1])
    flag = torchrun.container_find(container) if launches else None
    procs, origin = command_procs(flag, path, gpus, decided, given, notes, accelerator(container.get("resources")))
    if given is None:
        note_own_launcher_count(command, args, procs, gpus, path, notes)
    counted_by_torchrun = own is not None and not torchrun.whole_number(own[0]) or flag is not None and flag.count is None
    if procs is None and given is None and not counted_by_torchrun and gpus > 1 and not (
            not launches and starts_processes(command, args)):  # accelerate launch, deepspeed: one per GPU
        how = ("torchrun's --nproc-per-node is 1 unless set" if launches else "the command starts no torch launcher")
        limit = f"{path}.resources.limits.nvidia.com/gpu"
        notes.append(Note(limit, f"{gpus} GPUs for one process ({how}): spec.procsPerWorker 1, as under JobSet (a custom"
                          f" trainer may drive several GPUs per process); for a process per GPU start it with torchrun"
                          f" --nproc-per-node {gpus}, or pass {PROCS_OPTION} {gpus} if the script or its own launcher"
                          " (accelerate launch, deepspeed) starts them"))
        return 1, limit
    return procs, origin


def _nnodes_note(container: dict, path: str, workers: int, notes: list[Note]) -> None:
    """torchrun with no --nnodes and no PET_NNODES of the container's own (JobSet sets none) took its default, 1:
    each pod a world of its own. kuberl's PET_NNODES and PET_NODE_RANK, which torchrun reads, join the pods."""
    command, args = container.get("command"), container.get("args")
    env = container.get("env") if isinstance(container.get("env"), list) else []
    if workers < 2 or not torchrun.launches(command, args) or torchrun.container_find(container, torchrun.NNODES_FLAGS) \
            or any(isinstance(v, dict) and v.get("name") == contract.ENV_PET_NNODES for v in env):
        return
    notes.append(Note(f"{path}.{'command' if command else 'args'}", f"torchrun's --nnodes unset: changed, under the JobSet it"
                      f" took its default, 1, so each of the {workers} pods ran a world of its own; kuberl sets"
                      f" {contract.ENV_PET_NNODES}={workers} and {contract.ENV_PET_NODE_RANK} (the pod's rank), which"
                      f" torchrun reads, so the pods form one world of {workers} nodes meeting at worker 0"))


def _joined_note(container: dict, path: str, workers: int, procs: int | None, notes: list[Note]) -> None:
    """A command with no launcher and no WORLD_SIZE or RANK of the container's own: JobSet set none (nor did the Job
    controller, beside JOB_COMPLETION_INDEX), so a script that reads them ran alone in each pod; kuberl's join them."""
    command, args = container.get("command"), container.get("args")
    env = container.get("env") if isinstance(container.get("env"), list) else []
    own = {v.get("name") for v in env if isinstance(v, dict) and isinstance(v.get("name"), str)}
    if workers < 2 or not (command or args) or starts_processes(command, args) or own & {contract.ENV_WORLD_SIZE, contract.ENV_RANK}:
        return
    notes.append(Note(f"{path}.{'command' if command else 'args'}", "starts no torch launcher: changed, the JobSet's pods had"
                      " no WORLD_SIZE, RANK or MASTER_ADDR but what their template wrote (here neither WORLD_SIZE nor RANK),"
                      " so a script that reads them (init_process_group's env://) ran alone in each pod or failed; kuberl"
                      f" sets them in every pod (WORLD_SIZE {workers * (procs or 1)}), so it now joins the {workers} pods in one group"))


def _rendezvous_port(container: dict, path: str, notes: list[Note]) -> tuple[int | None, str]:
    """The container's own literal PET_MASTER_PORT (torchrun's flag, which wins), else MASTER_PORT (JobSet sets
    neither): where its torchrun met, now spec.rendezvous.port."""
    for name in (contract.ENV_PET_MASTER_PORT, contract.ENV_MASTER_PORT):
        own = _literal_env(container, name, path)
        if own is not None and torchrun.whole_number(own[0]):
            notes[:] = [n for n in notes if n.path != own[1]]
            others = ", ".join(n for n in (contract.ENV_MASTER_PORT, contract.ENV_PET_MASTER_PORT) if n != name)
            notes.append(Note(own[1], f"{name}={own[0]} is now spec.rendezvous.port, from which kuberl sets it (and"
                              f" {others}, PET_RDZV_ENDPOINT) for every pod"))
            return int(own[0]), own[1]
    return None, ""


def _run_policy(spec: dict, job_spec: dict, job_path: str, jobs: int, origins: dict, notes: list[Note]) -> dict:
    """spec.runPolicy from the JobSet's failure policy, suspend and TTL and the Job's deadline; a note for
    what a gang restart changes."""
    out: dict[str, Any] = {}
    failure = as_mapping(spec.get("failurePolicy"), "spec.failurePolicy")
    restarts = failure.get("maxRestarts", 0)
    out["backoffLimit"] = restarts
    origins["spec.runPolicy.backoffLimit"] = "spec.failurePolicy.maxRestarts" if "maxRestarts" in failure else "spec.failurePolicy"
    if not failure:
        notes.append(Note("spec.failurePolicy", "unset: the JobSet failed at its first failed Job, and so does the job:"
                          " spec.runPolicy.backoffLimit 0 (set it to restart the gang, from its checkpoint, on a crash)"))
    for key, value in failure.items():
        if key == "rules":
            for i, rule in enumerate(as_list(value, "spec.failurePolicy.rules")):
                action = rule.get("action") if isinstance(rule, dict) else None
                known = FAILURE_ACTIONS.get(action) if isinstance(action, str) else None
                notes.append(Note(f"spec.failurePolicy.rules[{i}]", known or "not carried over: unknown action"))
        elif key == "restartStrategy":
            if value not in ("Recreate", "BlockingRecreate"):  # what a gang restart does
                notes.append(Note("spec.failurePolicy.restartStrategy", f"{value}: changed, kuberl's gang restart deletes every"
                                  " pod of a generation and starts the next once they are gone (BlockingRecreate)"))
        elif key != "maxRestarts":
            notes.append(Note(f"spec.failurePolicy.{key}", "not carried over: unknown field"))
    limit = job_spec.get("backoffLimit", 6)  # batch/v1's default
    if limit != 0:
        notes.append(Note(f"{job_path}.backoffLimit", f"{'unset (6)' if 'backoffLimit' not in job_spec else limit}: changed,"
                          " the Job re-created a failed pod alone, its peers still running, before the JobSet saw a"
                          " failed Job; kuberl restarts the whole gang at any pod failure (DDP cannot lose a rank),"
                          " counted toward spec.runPolicy.backoffLimit (failurePolicy.maxRestarts)"))
    for key in ("suspend", "ttlSecondsAfterFinished"):
        if spec.get(key) is not None:
            out[key] = spec[key]
            origins[f"spec.runPolicy.{key}"] = f"spec.{key}"
    if job_spec.get("activeDeadlineSeconds") is not None:
        out["activeDeadlineSeconds"] = job_spec["activeDeadlineSeconds"]
        origins["spec.runPolicy.activeDeadlineSeconds"] = f"{job_path}.activeDeadlineSeconds"
        notes.append(Note(f"{job_path}.activeDeadlineSeconds", "now spec.runPolicy.activeDeadlineSeconds: counted from the"
                          " job's start across gang restarts, where each JobSet restart made new Jobs with a new deadline"))
    success = as_mapping(spec.get("successPolicy"), "spec.successPolicy")
    if success.get("operator") == "Any" and jobs > 1:
        notes.append(Note("spec.successPolicy.operator", f"Any: changed, the JobSet succeeded when one of its {jobs} Jobs"
                          " did; kuberl's job succeeds when every worker exits 0"))
    return out


def _network_notes(spec: dict, name: str, notes: list[Note]) -> None:
    network = as_mapping(spec.get("network"), "spec.network")
    for key, value in network.items():
        if key == "enableDNSHostnames" and value is False:
            notes.append(Note("spec.network.enableDNSHostnames", f"false: changed, kuberl's pods always have DNS names,"
                              f" {name}-<rank>.{name}, through the job's headless Service"))
        elif key == "subdomain" and value != name:
            notes.append(Note("spec.network.subdomain", f"{value!r}: not carried over: kuberl's headless Service is the"
                              f" job's name, so pods are {name}-<rank>.{name}"))
        elif key == "publishNotReadyAddresses" and value is False:
            notes.append(Note("spec.network.publishNotReadyAddresses", "false: changed, kuberl's Service publishes pods"
                              " before they are ready (rank 0's name must resolve for the rendezvous)"))
        elif key not in ("enableDNSHostnames", "subdomain", "publishNotReadyAddresses"):
            notes.append(Note(f"spec.network.{key}", "not carried over: unknown field"))


def _spec_notes(spec: dict, pods: int, notes: list[Note]) -> None:
    """A note for each JobSet field beside the replicated Job and the run policy."""
    for key, value in spec.items():
        if key in ("replicatedJobs", "failurePolicy", "successPolicy", "suspend", "ttlSecondsAfterFinished", "network"):
            continue
        if key == "startupPolicy":
            order = value.get("startupPolicyOrder") if isinstance(value, dict) else None
            if order != "AnyOrder":  # JobSet's default, written into every exported JobSet: kuberl's way too
                notes.append(Note("spec.startupPolicy", "not carried over: with one replicated Job there is nothing to"
                                  " order; kuberl starts every worker at once"))
        elif key == "coordinator":
            coordinator = as_mapping(value, "spec.coordinator")
            rank = coordinator.get("jobIndex", 0) * pods + coordinator.get("podIndex", 0) if all(
                isinstance(coordinator.get(k, 0), int) for k in ("jobIndex", "podIndex")) else None
            notes.append(Note("spec.coordinator", "not carried over: kuberl's coordinator is worker 0, whose address every"
                              " pod has in MASTER_ADDR" + ("" if rank in (0, None) else
                                                           f" (the JobSet's pointed at its pod of rank {rank})")))
        elif key == "volumeClaimPolicies":
            notes.append(Note("spec.volumeClaimPolicies", "not carried over: kuberl makes no claim from a template; create"
                              " the PersistentVolumeClaim and mount it in spec.template (persistentVolumeClaim)"))
        elif key == "managedBy":
            notes.append(Note("spec.managedBy", managed_by(value, KIND)))
        else:
            notes.append(Note(f"spec.{key}", "not carried over: unknown JobSet field"))


def _pod_name_notes(container: dict, path: str, job: str, host: str, pods: int, notes: list[Note]) -> None:
    """JobSet names its pods' hosts <jobset>-<replicated job>-<job index>-<pod index>; a command, args or env
    value that names one (kept: an env name kuberl sets is dropped with its own note) is noted."""
    named = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(host)}-([0-9]+)-([0-9]+)(?![0-9])")
    env = container.get("env") if isinstance(container.get("env"), list) else []
    dropped = {f"{path}.env[{i}].value" for i, e in enumerate(env)
               if isinstance(e, dict) and isinstance(e.get("name"), str) and contract.is_reserved_env(e["name"])}
    fields = [f for f in container_text_fields(container, path) if f[0] not in dropped]
    named_pod_notes(fields, named, lambda m: int(m.group(1)) * pods + int(m.group(2)), job, KIND, notes)


# kuberl's env names that hold the pod's index (contract.py), as a JobSet container derived them from its own.
RANK_NAMES = frozenset({contract.ENV_RANK, contract.ENV_NODE_RANK, contract.ENV_PET_NODE_RANK})
RANK_FIELD = f"metadata.labels['{names.LABEL_RANK}']"
MASTER_NAMES = frozenset({contract.ENV_MASTER_ADDR, contract.ENV_PET_MASTER_ADDR})
NODES_NAMES = frozenset({contract.ENV_NNODES, contract.ENV_PET_NNODES})


def _same_value_notes(relabelled_container: dict, path: str, host: str, workers: int, notes: list[Note]) -> None:
    """Where the container set a name kuberl sets to the value kuberl gives it (the pod's rank from its
    completion index, worker 0's host as MASTER_ADDR), the note for dropping it says so, not 'changed'."""
    env = relabelled_container.get("env") if isinstance(relabelled_container.get("env"), list) else []
    zero = re.compile(rf"^{re.escape(host)}-0-0(\.|$)")
    for i, var in enumerate(env):
        if not isinstance(var, dict) or not isinstance(var.get("name"), str):
            continue
        source = var.get("valueFrom") if isinstance(var.get("valueFrom"), dict) else {}
        field = source.get("fieldRef").get("fieldPath") if isinstance(source.get("fieldRef"), dict) else None
        same = (var.get("name") in RANK_NAMES and field == RANK_FIELD
                or var.get("name") in MASTER_NAMES and isinstance(var.get("value"), str) and zero.match(var["value"])
                or var.get("name") in NODES_NAMES and str(var.get("value")).strip() == str(workers))
        if same:
            where = f"{path}.env[{i}]"
            notes[:] = [n for n in notes if not (n.path == where or n.path.startswith(where + "."))]
            notes.append(Note(where, f"{var['name']} not carried over: kuberl sets it for every pod, to the same value"
                              + (" (the pod's rank)" if var["name"] in RANK_NAMES else f" ({workers} pods)" if var["name"] in NODES_NAMES
                                 else " (worker 0's address, the pod it named)")))


# The Job controller gives every container of an Indexed Job's pod its completion index in this variable.
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _completion_index(pod_spec: dict, path: str, jobs: int, trainer: int, indexed: bool, notes: list[Note]) -> None:
    """JOB_COMPLETION_INDEX, which the Job controller set in every container of an Indexed Job's pods and kuberl's
    pods lack: with one Job the same value is kuberl.dev/rank, given to the trainer container (a script file may
    read it, `--node_rank=$JOB_COMPLETION_INDEX`) and to any other that reads it; with several Jobs it counted
    each Job's pods apart, which no kuberl label holds, and a container that reads it is refused."""
    reads = re.compile(rf"(?<![A-Za-z0-9_]){COMPLETION_INDEX_ENV}(?![A-Za-z0-9_])")
    for kind in ("initContainers", "containers"):
        containers = pod_spec.get(kind) if isinstance(pod_spec.get(kind), list) else []
        for i, container in enumerate(containers):
            env = container.get("env", []) if isinstance(container, dict) else None
            if not isinstance(env, list) or any(isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env):
                continue
            where = next((w for w, v in container_text_fields(container, f"{path}.{kind}[{i}]")
                          if isinstance(v, str) and reads.search(v)), None)
            if where is None and (jobs > 1 or not indexed or (kind, i) != ("containers", trainer)):
                continue
            if where is None:  # the trainer, whose script files may read it: it had it
                containers[i] = {**container, "env": [*env, {"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
                    "fieldPath": f"metadata.labels['{names.LABEL_RANK}']"}}}]}
                notes.append(Note(f"{path}.{kind}[{i}].env", f"{COMPLETION_INDEX_ENV} added from the pod's {names.LABEL_RANK}"
                                  " label, the same value: the Job controller set it in the JobSet's Indexed Job, and a"
                                  " script the command starts may read it"))
                continue
            if jobs > 1:
                raise not_convertible(where, f"reads {COMPLETION_INDEX_ENV}, which the Job controller set to the pod's"
                                      f" index within its Job (the same in each of the {jobs} Jobs), where kuberl's rank"
                                      " counts every pod of the gang: read RANK or NODE_RANK, which kuberl sets")
            containers[i] = {**container, "env": [*env, {"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.labels['{names.LABEL_RANK}']"}}}]}
            notes.append(Note(where, f"reads {COMPLETION_INDEX_ENV}, which the Job controller set in the JobSet's Indexed"
                              f" Job (the pod's index) and kuberl's pods lack: now set from the pod's {names.LABEL_RANK}"
                              " label, the same value"))


def convert_jobset(jobset: Any, procs_per_worker: int | None = None) -> tuple[dict, list[Note]]:
    """The RLTrainingJob for a JobSet of one replicated Job and a note for each field not carried over or
    changed in meaning; `procs_per_worker` (convert's --procs-per-worker) where the manifest cannot tell.
    Raises NotConvertible with every problem at the JobSet's own field path."""
    _check_document(jobset)
    doc = copy.deepcopy(jobset)  # the input is never touched, and the output shares nothing with it
    notes: list[Note] = []
    origins: dict[str, str] = {"metadata": "metadata", "spec": "spec"}
    metadata = carried_metadata(doc, notes)
    _placement_annotations(metadata, notes)
    note_top_level_fields(doc, notes)
    name = str(metadata.get("name", ""))
    spec = as_mapping(doc.get("spec"), "spec", required=True)
    replicated = _replicated_job(spec)
    base = "spec.replicatedJobs[0]"
    for key in replicated:
        if key not in ("name", "replicas", "template", "groupName", "dependsOn"):
            notes.append(Note(f"{base}.{key}", "not carried over: unknown field"))
    jobs = _count(replicated.get("replicas"), f"{base}.replicas", 1)
    job_template = as_mapping(replicated.get("template"), f"{base}.template", required=True)
    if job_template.get("metadata"):
        notes.append(Note(f"{base}.template.metadata", "not carried over: kuberl makes no Job; labels for the pods go in"
                          " spec.template.metadata"))
    job_path = f"{base}.template.spec"
    job_spec = as_mapping(job_template.get("spec"), job_path, required=True)
    pods = _pods_per_job(job_spec, job_path, notes)
    leader_succeeds = jobs == 1 and _index_0_succeeds(job_spec.get("successPolicy"))
    for key in job_spec:
        if key in JOB_FIELDS and not (key == "successPolicy" and leader_succeeds):
            notes.append(Note(f"{job_path}.{key}", f"not carried over: {JOB_FIELDS[key]}"))
    template_path = f"{job_path}.template"
    pod_template = as_mapping(job_spec.get("template"), template_path, required=True)
    pod_spec = as_mapping(pod_template.get("spec"), f"{template_path}.spec", required=True)
    index = _trainer_index(pod_spec, f"{template_path}.spec")
    container_path = f"{template_path}.spec.containers[{index}]"
    host = f"{name}-{replicated.get('name')}"
    pod_template = relabelled(pod_template, template_path, podlabels.jobset_source(name, host, jobs, pods), notes)
    original = pod_template["spec"]["containers"][index]
    template, lifted = trainer_template(pod_template, template_path, origins, notes, frozenset(), KIND, index)
    _same_value_notes(original, container_path, host, jobs * pods, notes)
    _completion_index(template["spec"], f"{template_path}.spec", jobs, index,
                      job_spec.get("completionMode") in (None, "Indexed"), notes)
    host_path_notes(pod_template, template_path, notes)
    if name:
        _pod_name_notes(original, container_path, name, host, pods, notes)
    check_program(original, lifted.get("image"), container_path, "the JobSet")
    tpus = tpu_problem(original.get("resources"), f"{container_path}.resources", jobs * pods)
    if tpus:
        raise NotConvertible([tpus])
    out: dict[str, Any] = {"trainer": "custom", "workers": jobs * pods}
    origins["spec.workers"] = f"{job_path}.parallelism" if jobs == 1 else f"{base}.replicas"
    procs, procs_path = _procs(original, container_path, lifted.get("gpusPerWorker", 0), procs_per_worker, notes)
    _nnodes_note(original, container_path, jobs * pods, notes)
    _joined_note(original, container_path, jobs * pods, procs, notes)
    if procs is not None:
        out["procsPerWorker"] = procs
    origins["spec.procsPerWorker"] = procs_path
    for key in ("gpusPerWorker", "image", "imagePullPolicy", "resources", "schedulerName", "priorityClassName"):
        if key in lifted:
            out[key] = lifted[key]
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    queue, queue_path = kueue_queue(metadata, notes)
    if queue is not None:
        out["queueName"] = queue
        origins["spec.queueName"] = queue_path
    port, port_path = _rendezvous_port(original, container_path, notes)
    if port is not None:
        out["rendezvous"] = {"port": port}
        origins["spec.rendezvous.port"] = port_path
    run_policy = _run_policy(spec, job_spec, job_path, jobs, origins, notes)
    if queue is not None and run_policy.get("suspend") is True:
        notes.append(Note("spec.suspend", KUEUE_SUSPEND.format(kind=KIND)))
    _network_notes(spec, name, notes)
    _spec_notes(spec, pods, notes)
    kueue_priority_on_pods(labels, template, notes)
    if leader_succeeds:
        run_policy["successPolicy"] = "Worker0"
        origins["spec.runPolicy.successPolicy"] = f"{job_path}.successPolicy"
        notes.append(Note(f"{job_path}.successPolicy", "succeededIndexes 0 is now spec.runPolicy.successPolicy Worker0:"
                          " the job succeeds when worker 0, the pod of index 0, exits 0, whatever the others' exits"))
    out["runPolicy"] = run_policy
    out["template"] = template
    job = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": metadata, "spec": out}
    checked(job, origins, notes)
    return job, notes
