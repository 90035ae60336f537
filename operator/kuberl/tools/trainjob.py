"""A Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) turned into the RLTrainingJob that
runs the same pods, as convert.py does for a PyTorchJob: pure, the input never mutated, every field
that cannot carry a `Note` naming it, every refusal at the TrainJob's own field path.

A TrainJob names a runtime (runtimeRef) that holds its image, its default process count and the rest
of its pod template, and kuberl cannot see that object: what only the runtime knows is asked for
(`--image`, `--procs-per-worker`, or the TrainJob's fields), never guessed. The fields follow
kubeflow/trainer's pkg/apis/trainer/v1alpha1/trainjob_types.go; the process count follows its torch
plugin (pkg/runtime/framework/plugins/torch/torch.go, EnforceMLPolicy).
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from ..core import names, torchrun
from ..core.validation import MAX_QUANTITY, QUANTITY, Problem, quantity_value
from . import podlabels
from .convert import (
    CPU_LIMIT,
    KUEUE_SUSPEND,
    PROCS_OPTION,
    SECURITY_CONTEXT,
    NotConvertible,
    Note,
    accelerator,
    accelerator_procs,
    as_list,
    as_mapping,
    carried_metadata,
    check_document,
    checked,
    command_procs,
    container_text_fields,
    kueue_priority_on_pods,
    kueue_queue,
    lift_run_as,
    managed_by,
    named_pod_notes,
    not_convertible,
    note_top_level_fields,
    rename_config_volume,
    service_link_notes,
    short_repr,
    split_resources,
    starts_processes,
    token_note,
    tpu_problem,
    trainer_env,
)

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
TRAINER_CONTAINER = "node"  # constants.Node: the trainer's container in every Trainer runtime
TRAINER_JOB = "node"  # the runtime's replicated Job the trainer runs in
IMAGE_OPTION = "--image"
# constants.TorchRunReservedEnvNames: Trainer refuses them in spec.trainer.env and sets its own.
TRAINER_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"})
TRAINER_FIELDS = ("image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode")
# PodSpecPatch fields with a home in an RLTrainingJob's pod template (kept there as written).
POD_FIELDS = ("serviceAccountName", "volumes", "imagePullSecrets", "securityContext", "nodeSelector", "affinity",
              "tolerations")
OLDER_API = ("labels", "annotations")  # Trainer v2.0-v2.1: they labelled the JobSet and its Jobs, not the pods
# Trainer v2.0's podSpecOverrides (a flat pod patch) and v2.1's podTemplateOverrides (metadata and spec), both
# replaced by runtimePatches (kubeflow/trainer#2785, #3309): the same pod fields, applied to the targetJobs named.
OVERRIDES = ("podSpecOverrides", "podTemplateOverrides")
# The manager of the patch Kueue writes when it admits a TrainJob (kubernetes-sigs/kueue pkg/controller/jobs/trainjob
# runtimePatchManagerName; Trainer's podTemplateOverrides API names it kueue.k8s.io/manager): its ResourceFlavor's
# nodeSelector and tolerations, its scheduling gates, the pod set's labels. Kueue writes them on kuberl's pods itself.
KUEUE_MANAGERS = ("kueue.x-k8s.io/manager", "kueue.k8s.io/manager")
KUEUE_PATCH = ("not carried over: Kueue wrote it when it admitted the TrainJob (the flavor's nodeSelector and tolerations,"
               " scheduling gates); it writes its own on kuberl's pods when it admits their pod group, and this one would"
               " pin the gang to the flavor admitted then")
GANG_SCHEDULERS = {"volcano": "Volcano", "coscheduling": "scheduler-plugins coscheduling"}
# What Trainer's plugins (pkg/runtime/framework/plugins/<name>) give pods of an mlPolicy other than torch; kuberl's
# pods get torch.distributed's environment only, so the TrainJob's command would start without its framework.
NOT_TORCH = {
    "mpi": "Trainer starts it with mpirun from a launcher pod over SSH (a hostfile, OMPI_MCA_* settings), which kuberl"
           " does not do",
    "jax": "Trainer gives each pod JAX's coordinator (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID), which"
           " kuberl does not set",
    "xgboost": "Trainer gives each pod XGBoost's tracker (DMLC_TRACKER_URI, DMLC_TRACKER_PORT, DMLC_TASK_ID,"
               " DMLC_NUM_WORKER), which kuberl does not set",
    "flux": "Trainer installs Flux from an init container and runs the command under flux across the nodes, which"
            " kuberl does not do",
}
# kubeflow/trainer manifests/base/runtimes (and examples/flux/flux-runtime.yaml, first named flux-runtime):
# ClusterTrainingRuntimes whose names say their mlPolicy when the runtime is not in the file.
KNOWN_RUNTIMES = {"deepspeed-distributed": "mpi", "mlx-distributed": "mpi", "jax-distributed": "jax",
                  "xgboost-distributed": "xgboost", "flux-distributed": "flux", "flux-runtime": "flux"}
# torchrun's words a Trainer v2.0 runtime's mlPolicy.torch.numProcPerNode took beside a count and 'auto'
# (kubeflow/trainer pkg/apis/trainer/v1alpha1 trainingruntime_types.go TorchMLPolicySource, v2.0).
RUNTIME_NPROC_WORDS = ("cpu", "gpu")
INITIALIZER = ("not carried over: kuberl runs no initializer Job; fetch the {what} in the trainer's command, or in an"
               " initContainer of spec.template (a cluster runs it; kuberl run does not), onto a volume the trainer mounts")


def _check_document(doc: Any) -> None:
    check_document(doc, KIND, API_VERSION, ", Kubeflow Trainer v2", version_hint=lambda got: (
        "; kubeflow.org/v2alpha1 was its name before Kubeflow Trainer 2.0" if got == "kubeflow.org/v2alpha1" else ""))


def _runtime(spec: dict) -> str:
    ref = as_mapping(spec.get("runtimeRef"), "spec.runtimeRef")
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    return f"{kind} {ref.get('name')!r}" if ref.get("name") else "its runtime"


def _cpus(resources: dict) -> int:
    """getNumCPUPerNode (torch.go): the CPU request, else the limit, as a whole count rounded up (Quantity.Value)."""
    for kind in ("requests", "limits"):
        amounts = resources.get(kind)
        amount = amounts.get("cpu") if isinstance(amounts, dict) else None
        readable = isinstance(amount, int) and not isinstance(amount, bool) or isinstance(amount, str) and re.fullmatch(QUANTITY, amount)
        try:
            value = quantity_value(amount) if readable else None  # not a quantity: validation names it
        except ValueError:
            value = None
        if value:  # capped before ceil: 1e9999999 is a finite quantity, not one int() should spell out
            return math.ceil(min(value, MAX_QUANTITY))
    return 0


def _procs(trainer: dict, container: dict, gpus: int, runtime: str, given: int | None, has_resources: bool,
           notes: list[Note], runtime_seen: bool = False, runtime_nproc: bool = False) -> tuple[int | None, str]:
    """procsPerWorker and its origin, as Trainer's torch plugin decides it: numProcPerNode, else 'auto':
    one per GPU of resourcesPerNode, else one per CPU of it; with no resourcesPerNode, the runtime's."""
    path = "spec.trainer.numProcPerNode"
    nproc = trainer.get("numProcPerNode")
    accel = accelerator(trainer.get("resourcesPerNode"))
    decided: tuple[int | None, str]
    if nproc in RUNTIME_NPROC_WORDS and runtime_nproc:
        # Trainer v2.0's runtimes (mlPolicy.torch.numProcPerNode, IntOrString) took torchrun's words too
        where = f"{runtime} in this file has mlPolicy.torch.numProcPerNode {nproc!r}"
        if nproc == "gpu" and (gpus or accel):
            notes.append(Note("spec.runtimeRef", f"{where}: one process per GPU of resourcesPerNode, as 'auto' with a GPU"))
            nproc = "auto"
        elif given is None:
            raise not_convertible("spec.runtimeRef", f"{where}: " + (
                "one process per CPU, counted by Trainer from resourcesPerNode or by torchrun on the node, as its version did"
                if nproc == "cpu" else "one process per GPU, and resourcesPerNode names none (torchrun fails without CUDA)")
                + f": pass {PROCS_OPTION} N, or set spec.trainer.numProcPerNode")
        else:
            notes.append(Note("spec.runtimeRef", f"{where}: {PROCS_OPTION} {given} replaces it"))
            return command_procs(torchrun.container_find(container), "spec.trainer", gpus, (given, PROCS_OPTION), given,
                                 notes, accel)
    if isinstance(nproc, int) and not isinstance(nproc, bool) or isinstance(nproc, str) and torchrun.whole_number(nproc):
        decided = (int(nproc), path)
    elif nproc not in (None, "auto"):
        raise not_convertible(path, f"expected a number of processes (got {short_repr(nproc)})")
    elif gpus:
        decided = (None, path)  # gpusPerWorker, one process each, as torchrun's auto counts CUDA devices
    elif not torchrun.launches(container.get("command"), container.get("args")):
        notes.append(Note(path, "unset: Trainer sets PET_NPROC_PER_NODE from its runtime or resourcesPerNode, but the"
                          " command starts no torch launcher, so each pod runs the one process it is"))
        return command_procs(None, "spec.trainer", gpus, (None, path), given, notes)
    elif accel:  # Trainer's GetNumGPUPerNode counts it, so PET_NPROC_PER_NODE stays auto
        counted, why = accelerator_procs(accel, "unset (Trainer's auto, with a GPU in resourcesPerNode)")
        flag = torchrun.container_find(container)
        if counted is None and given is None and (flag is None or flag.count is None):
            raise not_convertible(path, f"{why}: pass {PROCS_OPTION} N, or set numProcPerNode")
        if counted is not None:
            notes.append(Note(path, why))
        decided = (counted, "spec.trainer.resourcesPerNode" if counted else path)
    elif has_resources:
        cpus = max(1, _cpus(trainer["resourcesPerNode"]))
        notes.append(Note(path, f"unset: Trainer starts one process per CPU of resourcesPerNode ({cpus}), now"
                          " spec.procsPerWorker"))
        decided = (cpus, "spec.trainer.resourcesPerNode")
    elif runtime_seen:  # torch.go: no GPU, so PET_NPROC_PER_NODE = max(1, CPUs of resourcesPerNode), here none
        notes.append(Note(path, f"unset: neither the TrainJob nor {runtime} of this file gives the node resources, and"
                          " Trainer (v2.1 and later) then sets PET_NPROC_PER_NODE to 1, not torchrun's auto: 1 process"
                          " per pod, now spec.procsPerWorker"))
        decided = (1, path)
    else:
        decided = (None, path)
    flag = torchrun.container_find(container)
    unread = flag is None or flag.problem is not None or not torchrun.readable(flag.value or "")
    if decided == (None, path) and not gpus and given is None and unread:
        raise not_convertible(path, f"unset, and so are resourcesPerNode and torchrun's --nproc-per-node: the process count"
                    f" comes from {runtime}, which kuberl cannot see: pass {PROCS_OPTION} N, or set numProcPerNode")
    return command_procs(flag, "spec.trainer", gpus, decided, given, notes, accel)


def _resources(trainer: dict, origins: dict, notes: list[Note]) -> tuple[dict, int]:
    """spec.resources and gpusPerWorker from resourcesPerNode."""
    path = "spec.trainer.resourcesPerNode"
    resources = as_mapping(trainer.get("resourcesPerNode"), path)
    kept, gpus = split_resources(resources, path, origins, notes)
    limits = resources.get("limits")
    if not (isinstance(limits, dict) and "cpu" in limits):
        notes.append(Note(f"{path}.limits.cpu", CPU_LIMIT.format(kind=KIND)))
    return kept, gpus


def _patches(spec: dict, template: dict, out: dict, origins: dict, notes: list[Note], source: podlabels.Source) -> None:
    """runtimePatches, in order, onto spec.template where they map; every other patch noted."""
    pod = template["spec"]
    trainer = pod["containers"][0]
    for i, patch in enumerate(as_list(spec.get("runtimePatches"), "spec.runtimePatches")):
        base = f"spec.runtimePatches[{i}]"
        patch = as_mapping(patch, base)
        if patch.get("manager") in KUEUE_MANAGERS:
            notes.append(Note(base, KUEUE_PATCH))
            continue
        for key in patch:
            if key not in ("manager", "time", "trainingRuntimeSpec"):
                notes.append(Note(f"{base}.{key}", "not carried over: unknown field"))
        runtime_spec = as_mapping(patch.get("trainingRuntimeSpec"), f"{base}.trainingRuntimeSpec")
        jobset = as_mapping(runtime_spec.get("template"), f"{base}.trainingRuntimeSpec.template")
        base = f"{base}.trainingRuntimeSpec.template"
        if jobset.get("metadata"):
            notes.append(Note(f"{base}.metadata", "not carried over: kuberl makes no JobSet; labels and annotations for"
                              " the job go on the RLTrainingJob's metadata"))
        jobs = as_list(as_mapping(jobset.get("spec"), f"{base}.spec").get("replicatedJobs"), f"{base}.spec.replicatedJobs")
        for j, job in enumerate(jobs):
            job_path = f"{base}.spec.replicatedJobs[{j}]"
            job = as_mapping(job, job_path)
            if job.get("name") != TRAINER_JOB:
                notes.append(Note(job_path, f"not carried over: the runtime's {job.get('name')!r} Job (an initializer, or"
                                  f" a step beside the trainer); kuberl runs only the trainer's pods"))
                continue
            job_template = as_mapping(job.get("template"), f"{job_path}.template")
            if job_template.get("metadata"):
                notes.append(Note(f"{job_path}.template.metadata", "not carried over: kuberl makes no Job per node"))
            pod_template = as_mapping(as_mapping(job_template.get("spec"), f"{job_path}.template.spec").get("template"),
                                    f"{job_path}.template.spec.template")
            pod_path = f"{job_path}.template.spec.template"
            metadata = as_mapping(pod_template.get("metadata"), f"{pod_path}.metadata")
            for field in ("labels", "annotations"):
                if isinstance(metadata.get(field), dict):
                    template.setdefault("metadata", {}).setdefault(field, {}).update(metadata[field])
                    origins[f"spec.template.metadata.{field}"] = f"{pod_path}.metadata.{field}"
            _pod_patch(as_mapping(pod_template.get("spec"), f"{pod_path}.spec"), f"{pod_path}.spec", pod, trainer, out,
                       origins, notes, podlabels.carrying(source, template.get("metadata")))


def _overrides(spec: dict, template: dict, out: dict, origins: dict, notes: list[Note], source: podlabels.Source) -> None:
    """Trainer v2.0's podSpecOverrides and v2.1's podTemplateOverrides, in order, onto spec.template as
    runtimePatches are: those that target the trainer's Job; any other is noted."""
    pod = template["spec"]
    for field in OVERRIDES:
        for i, override in enumerate(as_list(spec.get(field), f"spec.{field}")):
            base = f"spec.{field}[{i}]"
            override = as_mapping(override, base)
            if override.get("manager") in KUEUE_MANAGERS:
                notes.append(Note(base, KUEUE_PATCH))
                continue
            targets = [t.get("name") if isinstance(t, dict) else t
                       for t in as_list(override.get("targetJobs"), f"{base}.targetJobs")]
            if TRAINER_JOB not in targets:
                notes.append(Note(base, f"not carried over: it overrides the runtime's {short_repr(targets)} Job(s); kuberl"
                                  " runs only the trainer's pods"))
                continue
            if field == "podSpecOverrides":
                patch, path = {k: v for k, v in override.items() if k != "targetJobs"}, base
            else:
                for key in override:
                    if key not in ("targetJobs", "manager", "metadata", "spec"):
                        notes.append(Note(f"{base}.{key}", "not carried over: unknown field"))
                metadata = as_mapping(override.get("metadata"), f"{base}.metadata")
                for key, value in metadata.items():
                    if key in ("labels", "annotations") and isinstance(value, dict):
                        template.setdefault("metadata", {}).setdefault(key, {}).update(value)
                        origins[f"spec.template.metadata.{key}"] = f"{base}.metadata.{key}"
                    else:
                        notes.append(Note(f"{base}.metadata.{key}", "not carried over: kuberl names its pods; only labels"
                                          " and annotations of a template apply"))
                patch, path = as_mapping(override.get("spec"), f"{base}.spec"), f"{base}.spec"
            _pod_patch(patch, path, pod, pod["containers"][0], out, origins, notes,
                       podlabels.carrying(source, template.get("metadata")))


def _refuse_taken(present: list, added: list, key: str, path: str, why: str, server_says: str) -> None:
    """A patch's items whose `key` an item already carried has (or one before it in the patch): the API server
    refuses such a pod (ValidatePodSpec: a volume name twice is "Duplicate value", a mountPath twice in a
    container "must be unique"), so the converted job would pass validate and fail at every pod create."""
    def value_of(item: Any) -> str | None:
        value = item.get(key) if isinstance(item, dict) else None
        return value if isinstance(value, str) else None

    seen = {value_of(item) for item in present} - {None}
    problems = []
    for i, item in enumerate(added):
        value = value_of(item)
        if value is not None and value in seen:
            problems.append(Problem(f"{path}[{i}].{key}", f"{value!r}: {why}, and the API server refuses the pod"
                                    f" ({server_says}); give it another {key} or drop one of the two"))
        seen.add(value)
    if problems:
        raise NotConvertible(problems)


def _pod_patch(patch: dict, path: str, pod: dict, trainer: dict, out: dict, origins: dict, notes: list[Note],
               source: podlabels.Source) -> None:
    patch, changed, problems = podlabels.relabel_pod_spec(patch, path, source)
    if problems:
        raise NotConvertible(problems)
    notes += [Note(p.path, p.message) for p in changed]
    for field, value in patch.items():
        where = f"{path}.{field}"
        if field in POD_FIELDS:
            if field == "volumes" and isinstance(value, list):
                _refuse_taken(pod.get(field) if isinstance(pod.get(field), list) else [], value, "name", where,
                              "a volume of that name is already in the pod", "Duplicate value")
            if isinstance(value, list) and isinstance(pod.get(field), list):
                pod[field] = pod[field] + value  # several patches add up, as Trainer's list-map merge keys by name
            elif isinstance(value, dict) and isinstance(pod.get(field), dict) and field == "nodeSelector":
                pod[field] = {**pod[field], **value}
            else:
                pod[field] = value
            origins[f"spec.template.spec.{field}"] = where
        elif field == "terminationGracePeriodSeconds":
            out.setdefault("runPolicy", {})["terminationGracePeriodSeconds"] = value
            origins["spec.runPolicy.terminationGracePeriodSeconds"] = where
        elif field == "containers":
            for c, container in enumerate(as_list(value, where)):
                container = as_mapping(container, f"{where}[{c}]")
                if container.get("name") != TRAINER_CONTAINER:
                    notes.append(Note(f"{where}[{c}]", f"not carried over: the runtime's {container.get('name')!r}"
                                      " container, which kuberl's pods do not have"))
                    continue
                for key, setting in container.items():
                    if key in ("volumeMounts",):
                        mounts = list(as_list(setting, f"{where}[{c}].{key}"))
                        _refuse_taken(list(trainer.get(key) or []), mounts, "mountPath", f"{where}[{c}].{key}",
                                      "the trainer container already mounts a volume there", "must be unique")
                        trainer[key] = list(trainer.get(key) or []) + mounts
                        origins[f"spec.template.spec.containers[0].{key}"] = f"{where}[{c}].{key}"
                    elif key == "securityContext":
                        trainer[key] = setting
                        origins[f"spec.template.spec.containers[0].{key}"] = f"{where}[{c}].{key}"
                    elif key != "name":
                        notes.append(Note(f"{where}[{c}].{key}", "not carried over: Trainer refuses it for the node"
                                          " container (spec.trainer.env is its env)" if key == "env" else
                                          "not carried over: unknown field"))
        elif field == "initContainers":
            notes.append(Note(where, "not carried over: it patches the runtime's init containers, which kuberl does"
                              " not have; put init containers in spec.template (kuberl run does not run them)"))
        else:
            notes.append(Note(where, "not carried over: " + ("kuberl admits pods through Kueue's pod integration"
                                                             if field == "schedulingGates" else "unknown field")))


def _not_torch(spec: dict, runtimes: list) -> Problem | None:
    """The refusal of a TrainJob whose runtime runs another framework than torch.distributed: its mlPolicy when
    the runtime is in the same file, else the mlPolicy of Kubeflow Trainer's ClusterTrainingRuntime of that name."""
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), dict) else {}
    kind, name = ref.get("kind") or "ClusterTrainingRuntime", ref.get("name")
    found = [r for r in runtimes if isinstance(r, dict) and r.get("kind") == kind
             and isinstance(r.get("metadata"), dict) and r["metadata"].get("name") == name]
    if len(found) == 1:
        policy = (found[0].get("spec") or {}).get("mlPolicy") if isinstance(found[0].get("spec"), dict) else None
        used = [k for k in NOT_TORCH if isinstance(policy, dict) and policy.get(k) is not None]
        where, hint = f"{kind} {name!r} in this file has mlPolicy.{used[0]}" if used else "", ""
    else:
        known = kind == "ClusterTrainingRuntime" and isinstance(name, str) and name in KNOWN_RUNTIMES
        used = [KNOWN_RUNTIMES[name]] if known else []
        where = f"{kind} {name!r} is Kubeflow Trainer's {used[0]} runtime (mlPolicy.{used[0]})" if used else ""
        hint = " (if your cluster's runtime of that name runs torch, put it in this file)"
    if not used:
        return None
    return Problem("spec.runtimeRef.name", f"{where}: {NOT_TORCH[used[0]]}. kuberl runs torch.distributed jobs only"
                   f" (MASTER_ADDR, RANK, WORLD_SIZE and torchrun's PET_* names), each pod running the command{hint}")


# The Job controller gives every container of an Indexed Job (Trainer's node Job is one) its index in this variable.
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _completion_index(trainer: dict, container: dict, notes: list[Note]) -> None:
    """JOB_COMPLETION_INDEX, which the Job controller set in Trainer's Indexed node Job and kuberl's pods lack: the
    container gets it from kuberl.dev/rank, the same value (the node rank), whether the trainer's command, args or
    env read it or a script file does."""
    env = container.get("env", [])
    if not isinstance(env, list) or any(isinstance(e, dict) and e.get("name") == COMPLETION_INDEX_ENV for e in env):
        return
    reads = re.compile(rf"(?<![A-Za-z0-9_]){COMPLETION_INDEX_ENV}(?![A-Za-z0-9_])")
    where = next((w for w, v in container_text_fields(trainer, "spec.trainer") if isinstance(v, str) and reads.search(v)), None)
    container["env"] = [*env, {"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.labels['{names.LABEL_RANK}']"}}}]
    if where is None:  # a script file the command starts may read it: every node pod had it
        notes.append(Note("spec.trainer.env", f"{COMPLETION_INDEX_ENV} added from the pod's {names.LABEL_RANK} label, the"
                          " same value (the node's rank): the Job controller set it in Trainer's Indexed Job, and a script"
                          " the command starts may read it"))
        return
    notes.append(Note(where, f"reads {COMPLETION_INDEX_ENV}, which the Job controller set in Trainer's Indexed Job (the"
                      f" node's rank) and kuberl's pods lack: now set from the pod's {names.LABEL_RANK} label, the same"
                      " value"))


# Kubeflow Trainer's torch runtimes whose node container names no command (manifests/base/runtimes): under them a
# TrainJob's args alone run the image's ENTRYPOINT, as kuberl's pod does.
NO_COMMAND_RUNTIMES = frozenset({"torch-distributed", "torch-distributed-with-cache"})


def _runtime_has_no_command(spec: dict, runtimes: list) -> bool:
    """Whether the TrainJob's runtime is known to give its node container no command: a runtime of the same file
    (whose command, had it one, was taken) or Kubeflow Trainer's torch runtimes by name."""
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), dict) else {}
    kind, name = ref.get("kind") or "ClusterTrainingRuntime", ref.get("name")
    in_file = [r for r in runtimes if isinstance(r, dict) and r.get("kind") == kind
               and isinstance(r.get("metadata"), dict) and r["metadata"].get("name") == name]
    return len(in_file) == 1 or (kind == "ClusterTrainingRuntime" and isinstance(name, str) and name in NO_COMMAND_RUNTIMES)


def _runtime_in_file(spec: dict, runtimes: list) -> dict | None:
    """The spec of the one runtime of the same file the TrainJob's runtimeRef names, else None."""
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), dict) else {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    found = [r for r in runtimes if isinstance(r, dict) and r.get("kind") == kind
             and isinstance(r.get("metadata"), dict) and r["metadata"].get("name") == ref.get("name")]
    return found[0]["spec"] if len(found) == 1 and isinstance(found[0].get("spec"), dict) else None


def _from_runtime(spec: dict, runtimes: list, notes: list[Note]) -> dict:
    """The trainer fields a runtime in the same file gives (its node container's image, resources, command and
    args, its mlPolicy.numNodes and torch.numProcPerNode): what Trainer would take from it, read rather than asked for."""
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), dict) else {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    runtime_spec = _runtime_in_file(spec, runtimes)
    if runtime_spec is None:
        return {}
    out: dict[str, Any] = {}
    gang = runtime_spec.get("podGroupPolicy")
    for plugin in [k for k in ("volcano", "coscheduling") if isinstance(gang, dict) and gang.get(k) is not None]:
        notes.append(Note("spec.runtimeRef", f"not carried over: {kind} {ref.get('name')!r} in this file gang-schedules the"
                          f" nodes (podGroupPolicy.{plugin}: Trainer made a {GANG_SCHEDULERS[plugin]} PodGroup of them);"
                          " kuberl makes one when spec.schedulerName names that scheduler (the one your pods run"
                          " under: volcano, or scheduler-plugins'), or admits the gang as one with spec.queueName (Kueue):"
                          " set one, or the pods start one by one"))
    policy = runtime_spec.get("mlPolicy")
    if isinstance(policy, dict) and isinstance(policy.get("numNodes"), int):
        out["numNodes"] = policy["numNodes"]
    torch_policy = policy.get("torch") if isinstance(policy, dict) else None
    if isinstance(torch_policy, dict) and torch_policy.get("numProcPerNode") is not None:
        out["numProcPerNode"] = torch_policy["numProcPerNode"]  # Trainer's torch plugin: the TrainJob's own wins
    template = runtime_spec.get("template") if isinstance(runtime_spec.get("template"), dict) else {}
    jobs = (template.get("spec") or {}).get("replicatedJobs") if isinstance(template.get("spec"), dict) else None
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and job.get("name") != TRAINER_JOB:
            notes.append(Note("spec.runtimeRef", f"not carried over: the {job.get('name')!r} Job of {kind} {ref.get('name')!r}"
                              " in this file, which ran beside or before the nodes (an initializer filling the volume"
                              " the trainer reads); kuberl runs only the trainer's pods: fetch the data in the command,"
                              " or in an initContainer of spec.template, onto a volume it mounts"))
        try:
            containers = job["template"]["spec"]["template"]["spec"]["containers"] if job.get("name") == TRAINER_JOB else []
        except (KeyError, TypeError, AttributeError):
            containers = []
        for container in containers if isinstance(containers, list) else []:
            if isinstance(container, dict) and container.get("name") == TRAINER_CONTAINER:
                mounts = container.get("volumeMounts")
                if isinstance(mounts, list) and mounts:
                    shown = ", ".join(f"{m.get('name')} at {m.get('mountPath')}" for m in mounts[:5] if isinstance(m, dict))
                    notes.append(Note("spec.runtimeRef", f"not carried over: the volumeMounts of the node container of {kind}"
                                      f" {ref.get('name')!r} in this file ({shown}) and their volumes: add them with"
                                      " runtimePatches (or spec.template), or the trainer finds nothing there"))
                env = container.get("env")
                if isinstance(env, list) and env:  # Trainer upserted the TrainJob's env into it (torch.go)
                    shown = ", ".join(str(e.get("name")) for e in env[:5] if isinstance(e, dict))
                    notes.append(Note("spec.runtimeRef", f"not carried over: the env of {kind} {ref.get('name')!r}'s"
                                      f" node container in this file ({shown}{', ...' if len(env) > 5 else ''}), which"
                                      " Trainer's pods had beside spec.trainer.env: add it to spec.trainer.env"))
                # jobset/builder.go: the TrainJob's image, command and args replace the node container's, each alone
                out |= {k: v for k, v in (("image", container.get("image")), ("resourcesPerNode", container.get("resources")),
                                          ("command", container.get("command")), ("args", container.get("args")))
                        if v is not None}
    trainer = spec.get("trainer") if isinstance(spec.get("trainer"), dict) else {}
    taken = {k: v for k, v in out.items() if trainer.get(k) is None}
    for key in taken:
        notes.append(Note(f"spec.trainer.{key}", f"unset: taken from {kind} {ref.get('name')!r} in the same file"))
    return taken


def convert_trainjob(trainjob: Any, procs_per_worker: int | None = None, image: str | None = None,
                     runtimes: list | tuple = ()) -> tuple[dict, list[Note]]:
    """The RLTrainingJob for a TrainJob and a note for each field not carried over or changed in meaning;
    `image` and `procs_per_worker` (convert's --image, --procs-per-worker) stand for what its runtime held,
    and a runtime among `runtimes` (the same file's) gives what it holds for the trainer.
    Raises NotConvertible with every problem at the TrainJob's own field path."""
    _check_document(trainjob)
    doc = copy.deepcopy(trainjob)
    notes: list[Note] = []
    origins: dict[str, str] = {"metadata": "metadata", "spec": "spec", "spec.workers": "spec.trainer.numNodes",
                               "spec.image": "spec.trainer.image", "spec.template.spec.containers[0]": "spec.trainer"}
    metadata = carried_metadata(doc, notes)
    note_top_level_fields(doc, notes)
    spec = as_mapping(doc.get("spec"), "spec", required=True)
    runtime = _runtime(spec)
    framework = _not_torch(spec, list(runtimes))
    if framework:
        raise NotConvertible([framework])
    trainer = {**as_mapping(spec.get("trainer"), "spec.trainer"), **_from_runtime(spec, list(runtimes), notes)}
    out: dict[str, Any] = {"trainer": "custom"}
    run_policy: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ("trainer", "runtimePatches"):
            continue
        if key == "runtimeRef":
            notes.append(Note("spec.runtimeRef", f"not carried over: of {runtime} kuberl reads only the trainer's image,"
                              " resources, node count and process count, and only from the same file; its pod template, its JobSet's"
                              " failure and success policies and the rest of its mlPolicy do not carry, and what the"
                              " job needs from it is asked for"))
        elif key == "initializer":
            for part in as_mapping(value, "spec.initializer"):
                notes.append(Note(f"spec.initializer.{part}", INITIALIZER.format(what=part)))
        elif key in ("suspend", "activeDeadlineSeconds") and value is not None:
            run_policy[key] = value
            origins[f"spec.runPolicy.{key}"] = f"spec.{key}"
        elif key == "managedBy":
            notes.append(Note("spec.managedBy", managed_by(value, KIND)))
        elif key in OLDER_API:
            notes.append(Note(f"spec.{key}", "not carried over: Trainer v2.1 and older put them on the JobSet and its"
                              " Jobs, not the pods; set labels on the RLTrainingJob"))
        elif key in OVERRIDES:
            continue  # _overrides carries them
        else:
            notes.append(Note(f"spec.{key}", "not carried over: unknown TrainJob field"))
    for key in trainer:
        if key not in TRAINER_FIELDS:
            notes.append(Note(f"spec.trainer.{key}", "not carried over: unknown field"))

    chosen = trainer.get("image") or image
    if not chosen:
        raise not_convertible("spec.trainer.image", f"unset: the image comes from {runtime}, which kuberl cannot see: pass"
                    f" {IMAGE_OPTION} IMAGE (the runtime's is in `kubectl get {runtime.split(' ')[0].lower()}"
                    f" {runtime.split(' ', 1)[-1].strip(chr(39))} -o yaml`, its {TRAINER_JOB!r} container), or set the field")
    if trainer.get("image") and image and image != trainer["image"]:
        notes.append(Note("spec.trainer.image", f"not carried over: {IMAGE_OPTION} {image} replaces it"))
    if not image or trainer.get("image") == image:
        origins["spec.image"] = "spec.trainer.image" if trainer.get("image") else IMAGE_OPTION
    out["image"] = chosen
    if not (trainer.get("command") or trainer.get("args")):
        raise not_convertible("spec.trainer.command", f"unset, and args too: the command came from {runtime} or the image's"
                    " ENTRYPOINT, which kuberl cannot see; set command to what it runs")
    if trainer.get("args") and not trainer.get("command") and not _runtime_has_no_command(spec, list(runtimes)):
        raise not_convertible("spec.trainer.command", f"unset while args are set: Trainer ran the node command of {runtime} with"
                    " these args (the image's ENTRYPOINT only where the runtime has none), and kuberl cannot see it; set"
                    " command to it (or to the image's ENTRYPOINT)")
    workers = trainer.get("numNodes")
    if workers is None:
        notes.append(Note("spec.trainer.numNodes", f"unset: {runtime}'s mlPolicy.numNodes applied (1 in Trainer's"
                          " torch-distributed); kuberl runs 1 worker: set spec.workers for more"))
        workers = 1
    out["workers"] = workers
    if isinstance(workers, int) and not isinstance(workers, bool):
        tpus = tpu_problem(trainer.get("resourcesPerNode"), "spec.trainer.resourcesPerNode", workers)
        if tpus:
            raise NotConvertible([tpus])
    container: dict[str, Any] = {"name": names.TRAINER_CONTAINER}
    for key in ("command", "args"):
        if key in trainer:
            container[key] = trainer[key]
    source = podlabels.trainjob_source(str(metadata.get("name", "")))
    if "env" in trainer:
        env, changed, problems = podlabels.relabel_env(trainer["env"], "spec.trainer.env", source)
        if problems:
            raise NotConvertible(problems)
        notes += [Note(p.path, p.message) for p in changed]
        container["env"] = trainer_env(env, "spec.trainer.env", "spec.template.spec.containers[0].env",
                                        origins, notes, TRAINER_ENV)
    _completion_index(trainer, container, notes)
    if isinstance(workers, int) and workers > 1 and (container.get("command") or container.get("args")) \
            and not starts_processes(container.get("command"), container.get("args")):  # torchrun, tune run, accelerate
        notes.append(Note("spec.trainer.command", f"starts no torch launcher: changed, Trainer gave its pods only the PET_*"
                          " names (torch.go sets no WORLD_SIZE, RANK or MASTER_ADDR, which torchrun sets per child), so a"
                          " script that reads those (init_process_group's env://) ran alone in each pod; kuberl sets them"
                          f" in every pod (WORLD_SIZE {workers}), so such a script now joins the {workers} pods in one group"))
    # JobSet names the trainer's pods <trainjob>-node-0-<i> (one Indexed Job, replicated once), i its node rank
    named = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(str(metadata.get('name', '')))}-node-0-([0-9]+)(?![0-9])")
    if metadata.get("name"):
        named_pod_notes(container_text_fields(trainer, "spec.trainer"), named, lambda m: int(m.group(1)),
                        str(metadata["name"]), KIND, notes)
    resources, gpus = _resources(trainer, origins, notes)
    if gpus:
        out["gpusPerWorker"] = gpus
    if resources:
        out["resources"] = resources
    procs, procs_path = _procs(trainer, container, gpus, runtime, procs_per_worker,
                               trainer.get("resourcesPerNode") is not None, notes,
                               _runtime_in_file(spec, list(runtimes)) is not None,
                               as_mapping(spec.get("trainer"), "spec.trainer").get("numProcPerNode") is None)
    if procs is not None:
        out["procsPerWorker"] = procs
    origins["spec.procsPerWorker"] = procs_path
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    _overrides(spec, template, out, origins, notes, source)
    _patches(spec, template, out, origins, notes, source)
    rename_config_volume(template["spec"], "spec.template.spec.volumes", notes, KIND)
    account = origins.get("spec.template.spec.serviceAccountName", "spec.runtimePatches").rpartition(".")[0]
    token_note(template["spec"], account, notes, KIND)
    if template["spec"].get("enableServiceLinks") is not True:
        service_link_notes(container_text_fields(trainer, "spec.trainer"), notes, KIND)
    pod_context = origins.get("spec.template.spec.securityContext", "spec.runtimePatches")
    if lift_run_as(template["spec"], container, pod_context, notes, KIND):
        origins["spec.template.spec.containers[0].securityContext"] = pod_context
    if "securityContext" not in container:
        # a TrainJob's trainer has no securityContext field: "unset" would read as spec.trainer itself missing
        notes.append(Note("spec.trainer", SECURITY_CONTEXT.format(unset="no securityContext (a TrainJob's trainer has no such field)",
                                                                  kind=KIND, where="in a runtimePatches node container")))
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    kueue_priority_on_pods(labels, template, notes)
    queue, queue_path = kueue_queue(metadata, notes)
    if queue is not None:
        out["queueName"] = queue
        origins["spec.queueName"] = queue_path
        if run_policy.get("suspend") is True:
            notes.append(Note("spec.suspend", KUEUE_SUSPEND.format(kind=KIND)))
    if run_policy or "runPolicy" in out:
        out["runPolicy"] = {**out.get("runPolicy", {}), **run_policy}
    out["template"] = template
    job = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": metadata, "spec": out}
    checked(job, origins, notes)
    return job, notes
