"""A platform team's defaults for every trainer pod (chart value trainer.podDefaults), and the one merge that
lays them under a rendered pod: the job's own spec wins wherever both set the same key.

What a platform sets once for every tenant's jobs and a tenant should not have to copy into each spec: labels
and annotations (cost centre, a mesh's opt-out), env of the trainer container (a proxy, the fabric's NCCL_*),
tolerations, a nodeSelector and a priorityClassName (its GPU pool). The operator reads them from
`KUBERL_TRAINER_POD_DEFAULTS` (contract.ENV_OPERATOR_TRAINER_POD_DEFAULTS: JSON, the chart's), records them in each job's status.trainerDefaults.pod when it
first meets the job, and every later generation of that job takes the recorded ones: an upgrade that changes
them changes new jobs, never a running one's next restart. Pure: `parse` and `apply` do no I/O.

Keys, job against default:
  - metadata.labels, metadata.annotations: by key (kuberl's own labels always win, as they win over the job's);
  - the trainer container's env: by name (kuberl's identity env and the job's template env win);
  - nodeSelector: by key;
  - tolerations: a default toleration is added unless the pod has one for the same taint key;
  - priorityClassName: when the pod has none.

`enforced` names the fields whose defaults a job may not change: a job whose own pods set one of their keys to
another value (a nodeSelector's pool, a label a NetworkPolicy or a quota selects on, the priorityClassName) is
refused naming the pod field (`conflicts`), as Kubernetes' PodNodeSelector admission refuses a pod whose
nodeSelector conflicts with its namespace's (a mutating webhook's plain overwrite would change the job silently);
enforced tolerations are added even beside the job's own for the same key. A default is a convenience, which any
tenant can set aside by writing the key; an enforced one is a control.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import names, safetext, validation

MAX_BYTES = 32 * 1024  # kept in every job's status: a platform's defaults are a few lines, not a ConfigMap
ENFORCEABLE = ("labels", "annotations", "env", "tolerations", "nodeSelector", "priorityClassName")
FIELDS = (*ENFORCEABLE, "enforced")


@dataclass(frozen=True)
class PodDefaults:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()  # EnvVars of the trainer container
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    priority_class_name: str | None = None
    enforced: frozenset[str] = frozenset()  # of ENFORCEABLE: the job may not set these fields' keys otherwise

    def document(self) -> dict:
        """As JSON: what the chart writes and status.trainerDefaults.pod records (empty fields left out)."""
        out = {"labels": dict(self.labels), "annotations": dict(self.annotations), "env": [dict(e) for e in self.env],
               "tolerations": [dict(t) for t in self.tolerations], "nodeSelector": dict(self.node_selector),
               "priorityClassName": self.priority_class_name, "enforced": sorted(self.enforced)}
        return {k: v for k, v in out.items() if v}


NONE = PodDefaults()


def problems(document: Any, path: str = "trainer.podDefaults") -> list[str]:
    """What Kubernetes (or kuberl's contract) would refuse in a defaults document, each named by `path`."""
    if document is None:
        return []
    if not isinstance(document, dict):
        return [f"{path}: expected an object with {', '.join(FIELDS)}"]
    found = [f"{path}.{k}: unknown field (expected one of {', '.join(FIELDS)})" for k in document if k not in FIELDS]
    for key in ("labels", "annotations", "nodeSelector"):
        value = document.get(key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            found.append(f"{path}.{key}: expected a map of strings")
    for key in ("env", "tolerations", "enforced"):
        if not isinstance(document.get(key) or [], list):
            found.append(f"{path}.{key}: expected a list")
    if isinstance(document.get("enforced") or [], list):
        found += [f"{path}.enforced[{i}]: expected one of {', '.join(ENFORCEABLE)} (got {safetext.one_line(repr(f))[:80]})"
                  for i, f in enumerate(document.get("enforced") or []) if f not in ENFORCEABLE]
    if found:
        return found
    labels, annotations = document.get("labels") or {}, document.get("annotations") or {}
    checks = [
        *validation.label_key_problems(f"{path}.labels", labels), *validation.label_value_problems(f"{path}.labels", labels),
        *validation.annotation_key_problems(f"{path}.annotations", annotations),
        *validation.label_key_problems(f"{path}.nodeSelector", document.get("nodeSelector")),
        *validation.label_value_problems(f"{path}.nodeSelector", document.get("nodeSelector")),
        *validation.env_problems(f"{path}.env", document.get("env") or []),
        *validation.toleration_problems(f"{path}.tolerations", document.get("tolerations") or []),
    ]
    found += [f"{p.path}: {p.message}" for p in checks]
    found += [f"{path}.{key}.{k}: kuberl.dev/ is kuberl's own prefix (its labels select a job's pods); choose another"
              for key in ("labels", "annotations") for k in (document.get(key) or {}) if k.split("/")[0] == names.GROUP]
    priority = document.get("priorityClassName")
    if priority is not None and not (isinstance(priority, str) and len(priority) <= 253
                                     and re.fullmatch(validation.DNS_1123_SUBDOMAIN, priority or "a")):
        found.append(f"{path}.priorityClassName: expected a PriorityClass name, a DNS-1123 subdomain (got {priority!r})")
    if len(json.dumps(document)) > MAX_BYTES:
        found.append(f"{path}: expected at most {MAX_BYTES} bytes of JSON (each job's status keeps a copy)")
    return found


def parse(document: Any, path: str = "trainer.podDefaults") -> PodDefaults:
    """The defaults of a document `problems` found nothing in; ValueError naming each problem otherwise."""
    found = problems(document, path)
    if found:
        raise ValueError("; ".join(found))
    document = document or {}
    return PodDefaults(
        labels=dict(document.get("labels") or {}), annotations=dict(document.get("annotations") or {}),
        env=tuple(dict(e) for e in document.get("env") or []), tolerations=tuple(dict(t) for t in document.get("tolerations") or []),
        node_selector=dict(document.get("nodeSelector") or {}), priority_class_name=document.get("priorityClassName") or None,
        enforced=frozenset(document.get("enforced") or ()),
    )


def from_text(text: str | None) -> PodDefaults:
    """The chart's `KUBERL_TRAINER_POD_DEFAULTS`; unset or empty: none. ValueError for text that is not JSON or not defaults."""
    if not text or not text.strip():
        return NONE
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ValueError(f"trainer.podDefaults: not JSON ({error})") from None
    return parse(document)


def recorded(status: Mapping, configured: PodDefaults) -> PodDefaults:
    """The defaults a job first met (status.trainerDefaults.pod), else the operator's `configured` ones: a job created
    before they were recorded, or a record that no longer parses (a hand edit), takes the operator's."""
    kept = (status.get("trainerDefaults") or {}).get("pod") if isinstance(status.get("trainerDefaults"), dict) else None
    if not isinstance(kept, dict):
        return configured
    try:
        return parse(kept, "status.trainerDefaults.pod")
    except ValueError:
        return configured


def judged_by(status: Mapping, configured: PodDefaults) -> PodDefaults:
    """The defaults whose `enforced` fields a job's pods answer to (`conflicts`): those it recorded (`recorded`), but
    none enforced for a job that ran before anything was recorded (a status with a phase and no trainerDefaults.pod:
    an operator from before trainer.podDefaults), so an upgrade that enforces a default never fails a running job."""
    defaults = recorded(status, configured)
    kept = status.get("trainerDefaults") if isinstance(status.get("trainerDefaults"), dict) else {}
    if status.get("phase") and not isinstance(kept.get("pod"), dict):
        return replace(defaults, enforced=frozenset())
    return defaults


def apply(pod: Mapping, defaults: PodDefaults) -> dict:
    """`pod` with `defaults` laid under it (the rules in the module docstring); `pod` is not changed."""
    out = json.loads(json.dumps(pod))
    if defaults == NONE:
        return out
    metadata, spec = out["metadata"], out["spec"]
    for key, values in (("labels", defaults.labels), ("annotations", defaults.annotations)):
        if values:
            metadata[key] = {**values, **(metadata.get(key) or {})}
    if defaults.node_selector:
        spec["nodeSelector"] = {**defaults.node_selector, **(spec.get("nodeSelector") or {})}
    if defaults.tolerations:
        taken = {t.get("key") or "" for t in spec.get("tolerations") or []}
        if "tolerations" in defaults.enforced:  # each added, unless the very same is there already
            added = [dict(t) for t in defaults.tolerations if t not in (spec.get("tolerations") or [])]
        else:
            added = [dict(t) for t in defaults.tolerations if (t.get("key") or "") not in taken]
        if added:
            spec["tolerations"] = [*(spec.get("tolerations") or []), *added]
    if defaults.priority_class_name and not spec.get("priorityClassName"):  # render.priority_class_name's rule
        spec["priorityClassName"] = defaults.priority_class_name
    if defaults.env:
        for container in spec["containers"]:
            if container["name"] == names.TRAINER_CONTAINER:
                present = {e.get("name") for e in container.get("env") or []}
                container["env"] = [*(container.get("env") or []), *(dict(e) for e in defaults.env if e["name"] not in present)]
    return out


def conflicts(pod: Mapping, defaults: PodDefaults) -> list[str]:
    """Where the tenant's `pod` (rendered from the job alone, before `apply`) sets a key of a field `defaults`
    enforces to another value than the platform's, each named by its path in the pod: the job is refused for it."""
    enforced, found = defaults.enforced, []
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}

    def shown(value: object) -> str:
        return safetext.one_line(repr(value))[:120]

    def differ(path: str, own: Mapping, platform: Mapping) -> None:
        found.extend(f"{path}.{key}: trainer.podDefaults enforces {shown(value)} (got {shown(own[key])})"
                     for key, value in platform.items() if key in own and own[key] != value)

    if "labels" in enforced:
        differ("metadata.labels", metadata.get("labels") or {}, defaults.labels)
    if "annotations" in enforced:
        differ("metadata.annotations", metadata.get("annotations") or {}, defaults.annotations)
    if "nodeSelector" in enforced:
        differ("spec.nodeSelector", spec.get("nodeSelector") or {}, defaults.node_selector)
    own_class = spec.get("priorityClassName")
    if "priorityClassName" in enforced and defaults.priority_class_name and own_class and own_class != defaults.priority_class_name:
        found.append(f"spec.priorityClassName: trainer.podDefaults enforces {shown(defaults.priority_class_name)}"
                     f" (got {shown(own_class)})")
    if "env" in enforced:
        def set_fields(entry: Mapping) -> dict:  # `value: null` is no value, as the API server reads it
            return {k: v for k, v in entry.items() if v is not None}

        platform = {e["name"]: set_fields(e) for e in defaults.env}
        for i, container in enumerate(spec.get("containers") or []):
            if container.get("name") == names.TRAINER_CONTAINER:
                found.extend(f"spec.containers[{i}].env[{j}]: {shown(e.get('name'))}: trainer.podDefaults enforces"
                             f" {shown(platform[e.get('name')])} (got {shown(e)})"
                             for j, e in enumerate(container.get("env") or []) if e.get("name") in platform
                             and set_fields(e) != platform[e.get("name")])
    return found
