"""The labels a PyTorchJob's or TrainJob's pods carried, where a pod template reads them.

training-operator labels every pod of a PyTorchJob (kubeflow.org/v1 common_types.go: job-name,
replica-type, replica-index, job-role, operator-name), and the pytorch-operator before it labelled them
unprefixed (pytorch-job-name, pytorch-replica-index, group-name, ...); a TrainJob's pods carry JobSet's and
the Job controller's (jobset-name, job-completion-index, the unprefixed job-name, ...). kuberl's pods carry none of them, so a template
that selects its own gang by them (podAffinity to keep it in one zone, podAntiAffinity or
topologySpreadConstraints to spread it) or reads them through the downward API (a fieldRef) would
select nothing, or read "", with nothing said: a required podAffinity no pod matches leaves the pods
Pending, a rendezvous host chosen by replica-index is never chosen. Where a kuberl label holds the same
value on every pod (kuberl.dev/job, kuberl.dev/rank) the key is rewritten, noted; any other use is
refused, naming the field. Pure: the value is copied, never changed.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from ..core import names
from ..core.validation import Problem

# kubeflow/training-operator pkg/apis/kubeflow.org/v1 common_types.go (JobNameLabel, ReplicaIndexLabel, ...)
TRAINING_OPERATOR = "training.kubeflow.org/"
JOB_NAME = TRAINING_OPERATOR + "job-name"
REPLICA_INDEX = TRAINING_OPERATOR + "replica-index"
# The same labels, unprefixed, from the operators before them; same values, so the same twins.
# kubeflow/pytorch-operator pkg/controller.v1/pytorch/controller.go and pod.go: pytorch-job-name, group-name
# (kubeflow.org), pytorch-replica-type, pytorch-replica-index, and job-role=master on the Master (v1alpha2 wrote
# pytorch_job_name and group_name). kubeflow/common job_controller/api/v1 constants.go, set by training-operator
# beside the prefixed ones until it dropped them: job-name, group-name, replica-type, replica-index, job-role.
LEGACY_JOB_NAMES = ("pytorch-job-name", "pytorch_job_name", "job-name")
LEGACY_REPLICA_INDEXES = ("pytorch-replica-index", "replica-index")
LEGACY_OTHERS = ("pytorch-replica-type", "replica-type", "group-name", "group_name", "job-role")
PYTORCHJOB_LEGACY_KEYS = frozenset(LEGACY_JOB_NAMES + LEGACY_REPLICA_INDEXES + LEGACY_OTHERS)
# A TrainJob's JobSet is named as the TrainJob; its trainer pods are one Indexed Job's, whose completion
# index is the node's rank (Trainer's torch plugin sets PET_NODE_RANK from it).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRAINJOB_PREFIXES = ("jobset.sigs.k8s.io/", "batch.kubernetes.io/", "trainer.kubeflow.org/")
# The Job controller still sets these unprefixed twins of batch.kubernetes.io/job-name and controller-uid
# (kubernetes pkg/apis/batch/types.go LegacyJobNameLabel, LegacyControllerUidLabel): the child Job's name and uid.
TRAINJOB_LEGACY_KEYS = frozenset({"job-name", "controller-uid"})

WAY_OUT = (f"kuberl's pods carry {names.LABEL_JOB} (the job's name) and {names.LABEL_RANK} (the pod's index, worker 0"
           " first); a script reads RANK or NODE_RANK from its environment")
_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


@dataclass(frozen=True)
class Source:
    """What the source job's pods carried: the label keys with a kuberl twin of the same value on every
    pod, the prefixes of the others, and the source's words for the message."""

    twins: dict[str, str]
    prefixes: tuple[str, ...]
    own_name: str
    kind: str
    why_not: dict[str, str]
    pod_name: str = ""  # a note for a fieldRef to metadata.name, where the pod's name no longer resolves
    carried: frozenset[str] = frozenset()  # keys the template's own labels set: kuberl's pods carry those too
    keys: frozenset[str] = frozenset()  # unprefixed keys the source's pods carried too


def pytorchjob_source(name: str, has_master: bool) -> Source:
    """A PyTorchJob's pods: job-name is the job's name; replica-index is the pod's index only with no
    Master (with one, Worker i has index i and is kuberl's worker i+1)."""
    twins = dict.fromkeys((JOB_NAME, *LEGACY_JOB_NAMES), names.LABEL_JOB)
    why_not = {}
    for index in (REPLICA_INDEX, *LEGACY_REPLICA_INDEXES):
        if has_master:
            why_not[index] = ("with a Master it is 0 on the Master and on Worker 0 alike (Worker i has i), where"
                              " kuberl's worker 0 is the Master and Worker i is worker i+1")
        else:
            twins[index] = names.LABEL_RANK
    pod_name = (f"changed: the pod's name is now {name}-<rank>, where PyTorchJob's was {name}-<worker|master>-<index> with a"
                " Service of that name, so peers resolved it: a peer reaches a kuberl pod as"
                f" {name}-<rank>.{name} (kuberl sets PET_LOCAL_ADDR to it), not by its bare name")
    return Source(twins, (TRAINING_OPERATOR,), name, "PyTorchJob", why_not, pod_name, keys=PYTORCHJOB_LEGACY_KEYS)


def trainjob_source(name: str) -> Source:
    """A TrainJob's trainer pods: its JobSet's name is the TrainJob's, the completion index the node's rank."""
    return Source({JOBSET_NAME: names.LABEL_JOB, COMPLETION_INDEX: names.LABEL_RANK}, TRAINJOB_PREFIXES, name, "TrainJob", {},
                  keys=TRAINJOB_LEGACY_KEYS)


# JobSet's own pod labels and annotations (jobset api/jobset/v1alpha2 jobset_types.go): JobIndexKey counts a
# replicated Job's Jobs, JobGlobalIndexKey every Job of the JobSet; the Job controller adds the completion index.
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_PREFIXES = ("jobset.sigs.k8s.io/", "alpha.jobset.sigs.k8s.io/", "batch.kubernetes.io/")


def jobset_source(name: str, host: str, jobs: int, pods: int) -> Source:
    """A JobSet's pods, `jobs` Jobs of `pods` pods each (pod j*pods+i is kuberl's worker of that rank): the
    JobSet's name is the job's; the completion index is the rank when there is one Job, the Job's index when
    each Job is one pod."""
    twins = {JOBSET_NAME: names.LABEL_JOB}
    why_not = {}
    if jobs == 1:
        twins[COMPLETION_INDEX] = names.LABEL_RANK
    else:
        why_not[COMPLETION_INDEX] = (f"it counts the pods within each of the {jobs} Jobs (0 to {pods - 1}), where kuberl's"
                                     " rank counts every pod of the gang")
    for key in (JOB_INDEX, JOB_GLOBAL_INDEX):
        if pods == 1:
            twins[key] = names.LABEL_RANK
        else:
            why_not[key] = (f"it counts the {jobs} Jobs, each of {pods} pods, where kuberl's rank counts every pod of the"
                            " gang")
    why_not[REPLICATED_JOB_NAME] = (f"kuberl's pods do not carry it, and a script that builds a peer's host from it"
                                    f" ({host}-<job>-<index>.<subdomain>) would name a host kuberl's gang does not have"
                                    f" (its pods are {name}-<rank>.{name}): read MASTER_ADDR, worker 0's, instead")
    pod_name = (f"changed: the pod's name is now {name}-<rank>, where the JobSet's was {host}-<job>-<index>-<suffix> with"
                f" hostname {host}-<job>-<index>: a peer reaches a kuberl pod as {name}-<rank>.{name} (kuberl sets"
                " PET_LOCAL_ADDR to it)")
    return Source(twins, JOBSET_PREFIXES, name, "JobSet", why_not, pod_name, keys=TRAINJOB_LEGACY_KEYS)


def _foreign(key: Any, source: Source) -> bool:
    return (isinstance(key, str) and (key.startswith(source.prefixes) or key in source.keys)
            and key not in source.carried)


def carrying(source: Source, template_metadata: Any) -> Source:
    """`source` knowing the labels a template sets itself (kuberl's pods carry them as written)."""
    labels = template_metadata.get("labels") if isinstance(template_metadata, dict) else None
    keys = frozenset(k for k in labels if isinstance(k, str)) if isinstance(labels, dict) else frozenset()
    return dataclasses.replace(source, carried=source.carried | keys)


def _refusal(path: str, key: str, source: Source, what: str) -> Problem:
    why = source.why_not.get(key, f"kuberl's pods do not carry it ({source.kind}'s controller set it)")
    return Problem(path, f"{key!r} {what}: {why}; {WAY_OUT}")


def _twin_note(path: str, key: str, twin: str, source: Source, what: str) -> Problem:
    return Problem(path, f"{key!r} is now {twin!r}, which kuberl's pods carry with the same value ({what})")


def _selector(selector: Any, path: str, source: Source, notes: list[Problem], problems: list[Problem]) -> Any:
    """A labelSelector with each foreign key rewritten to its twin where every value it compares is one
    the twin holds the same way; otherwise refused."""
    if not isinstance(selector, dict):
        return selector
    out = dict(selector)
    labels = selector.get("matchLabels")
    if isinstance(labels, dict) and any(_foreign(k, source) for k in labels):
        out["matchLabels"] = {}
        for key, value in labels.items():
            twin = source.twins.get(key) if _foreign(key, source) else None
            if not _foreign(key, source):
                out["matchLabels"][key] = value
            elif twin and twin in labels:  # one map key: the rewrite would drop one of the two requirements
                problems.append(Problem(f"{path}.matchLabels.{key}", f"{key!r} would become {twin!r}, which this selector"
                                        f" already matches ({short(labels[twin])}): one of the two would be lost; select by"
                                        f" {twin} alone"))
            elif twin and (twin != names.LABEL_JOB or value == source.own_name):
                out["matchLabels"][twin] = value
                notes.append(_twin_note(f"{path}.matchLabels.{key}", key, twin, source, "the selector keeps its meaning"))
            else:
                problems.append(_refusal(f"{path}.matchLabels.{key}", key, source, "selects pods by a label" + (
                    f" of another {source.kind} ({value!r})" if twin else "")))
    expressions = selector.get("matchExpressions")
    if isinstance(expressions, list) and any(isinstance(e, dict) and _foreign(e.get("key"), source) for e in expressions):
        out["matchExpressions"] = []
        for i, expression in enumerate(expressions):
            key = expression.get("key") if isinstance(expression, dict) else None
            if not _foreign(key, source):
                out["matchExpressions"].append(expression)
                continue
            where = f"{path}.matchExpressions[{i}].key"
            twin = source.twins.get(key)
            values = expression.get("values")
            ours = (expression.get("operator") in ("In", "NotIn") and isinstance(values, list) and bool(values)
                    and (twin != names.LABEL_JOB or all(v == source.own_name for v in values)))
            if twin and ours:
                out["matchExpressions"].append({**expression, "key": twin})
                notes.append(_twin_note(where, key, twin, source, "the selector keeps its meaning"))
            else:
                problems.append(_refusal(where, key, source, "selects pods by a label" + (
                    f" ({expression.get('operator')} {short(values)}), which would mean other {source.kind}s' pods"
                    if twin else "")))
    return out


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _label_keys(keys: Any, path: str, source: Source, notes: list[Problem], problems: list[Problem]) -> Any:
    """matchLabelKeys / mismatchLabelKeys: keys whose value the scheduler takes from the incoming pod."""
    if not isinstance(keys, list) or not any(_foreign(k, source) for k in keys):
        return keys
    out = []
    for i, key in enumerate(keys):
        twin = source.twins.get(key) if _foreign(key, source) else None
        if not _foreign(key, source):
            out.append(key)
        elif twin:
            out.append(twin)
            notes.append(_twin_note(f"{path}[{i}]", key, twin, source, "the pod's own value, as before"))
        else:
            problems.append(_refusal(f"{path}[{i}]", key, source, "matches pods by a label"))
    return out


def _term(term: Any, path: str, source: Source, notes: list[Problem], problems: list[Problem]) -> Any:
    """A PodAffinityTerm, or a topologySpreadConstraint: its labelSelector and label keys."""
    if not isinstance(term, dict):
        return term
    out = dict(term)
    if "labelSelector" in term:
        out["labelSelector"] = _selector(term["labelSelector"], f"{path}.labelSelector", source, notes, problems)
    for keys in ("matchLabelKeys", "mismatchLabelKeys"):
        if keys in term:
            out[keys] = _label_keys(term[keys], f"{path}.{keys}", source, notes, problems)
    # The API server refuses a key in both lists (pkg/apis/core/validation/validation.go,
    # validateMatchLabelKeysAndMismatchLabelKeys: "exists in both matchLabelKeys and mismatchLabelKeys"): a rewrite
    # must not make one, as matchLabelKeys [job-name] beside mismatchLabelKeys [kuberl.dev/job] would
    for keys, other in (("matchLabelKeys", "mismatchLabelKeys"), ("mismatchLabelKeys", "matchLabelKeys")):
        written, theirs = term.get(keys), out.get(other)
        if not isinstance(written, list) or not isinstance(theirs, list):
            continue
        for i, key in enumerate(written):
            twin = source.twins.get(key) if _foreign(key, source) else None
            if twin is not None and twin in theirs:
                problems.append(Problem(f"{path}.{keys}[{i}]", f"{key!r} would become {twin!r}, which {other} names too: the"
                                        f" API server refuses a key in both (exists in both matchLabelKeys and"
                                        f" mismatchLabelKeys)"))
    return out


def _affinity(affinity: Any, path: str, source: Source, notes: list[Problem], problems: list[Problem]) -> Any:
    if not isinstance(affinity, dict):
        return affinity
    out = dict(affinity)
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind)
        if not isinstance(rules, dict):
            continue
        out[kind] = dict(rules)
        required = rules.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(required, list):
            out[kind]["requiredDuringSchedulingIgnoredDuringExecution"] = [
                _term(t, f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", source, notes, problems)
                for i, t in enumerate(required)]
        preferred = rules.get("preferredDuringSchedulingIgnoredDuringExecution")
        if isinstance(preferred, list):
            weighted = []
            for i, item in enumerate(preferred):
                where = f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"
                weighted.append({**item, "podAffinityTerm": _term(item["podAffinityTerm"], where, source, notes, problems)}
                                if isinstance(item, dict) and "podAffinityTerm" in item else item)
            out[kind]["preferredDuringSchedulingIgnoredDuringExecution"] = weighted
    return out


def _field_refs(value: Any, path: str, source: Source, notes: list[Problem], problems: list[Problem]) -> Any:
    """Every downward-API fieldRef under `value` (env, downwardAPI and projected volumes) that reads a
    foreign label or annotation: rewritten to its twin label, or refused."""
    if isinstance(value, list):
        return [_field_refs(v, f"{path}[{i}]", source, notes, problems) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, child in value.items():
        where = f"{path}.{key}" if path else str(key)
        ref = child.get("fieldPath") if key == "fieldRef" and isinstance(child, dict) else None
        read = _FIELD_PATH.match(ref) if isinstance(ref, str) else None
        if ref == "metadata.name" and source.pod_name:
            out[key] = child
            notes.append(Problem(f"{where}.fieldPath", source.pod_name))
        elif read and _foreign(read.group(2), source):
            twin = source.twins.get(read.group(2))
            if twin:
                out[key] = {**child, "fieldPath": f"metadata.labels['{twin}']"}
                notes.append(_twin_note(f"{where}.fieldPath", read.group(2), twin, source, "the value the pod read"))
            else:
                out[key] = child
                problems.append(_refusal(f"{where}.fieldPath", read.group(2), source, "is read through the downward API"))
        else:
            out[key] = _field_refs(child, where, source, notes, problems)
    return out


def relabel_pod_spec(pod_spec: Any, path: str, source: Source) -> tuple[Any, list[Problem], list[Problem]]:
    """`pod_spec` (a pod template's spec, or a patch of one, at `path`) with the source's pod labels
    rewritten where kuberl's pods carry their twin; and the notes and the refusals (each a Problem)."""
    notes: list[Problem] = []
    problems: list[Problem] = []
    if not isinstance(pod_spec, dict):
        return pod_spec, notes, problems
    out = dict(pod_spec)
    if "affinity" in pod_spec:
        out["affinity"] = _affinity(pod_spec["affinity"], f"{path}.affinity", source, notes, problems)
    spread = pod_spec.get("topologySpreadConstraints")
    if isinstance(spread, list):
        out["topologySpreadConstraints"] = [_term(c, f"{path}.topologySpreadConstraints[{i}]", source, notes, problems)
                                            for i, c in enumerate(spread)]
    for key in ("containers", "initContainers", "volumes"):
        if key in pod_spec:
            out[key] = _field_refs(pod_spec[key], f"{path}.{key}", source, notes, problems)
    return copy.deepcopy(out), notes, problems


def relabel_env(env: Any, path: str, source: Source) -> tuple[Any, list[Problem], list[Problem]]:
    """A container's env list (TrainJob's spec.trainer.env) with its foreign fieldRefs rewritten or refused."""
    notes: list[Problem] = []
    problems: list[Problem] = []
    return copy.deepcopy(_field_refs(env, path, source, notes, problems)), notes, problems
