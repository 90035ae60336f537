"""The RLTrainingJob CustomResourceDefinition, generated from `kuberl.core.spec`.

`make manifests` writes it to manifests/ and the chart; a test fails when the
checked-in copies are stale, so the schema is never written twice.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from . import contract, names
from .rules import ADMITTED_RECORD_LIMIT, CROSS_FIELD_RULES, optional_immutable_fields
from .spec import ANY_JSON_VALUE, JobSpec
from .validation import DNS_1035, DNS_1123_SUBDOMAIN, PULL_POLICIES

PHASES = ["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]

# Keywords a Kubernetes structural schema accepts (pydantic emits more).
_KEEP = {
    "type", "description", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "enum", "minItems", "maxItems", "maxProperties",
    "items", "properties", "required", "additionalProperties", "nullable", "format",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations", "x-kubernetes-int-or-string", "anyOf",
}


def _inline(schema: Any, defs: dict) -> Any:
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = copy.deepcopy(defs[schema["$ref"].split("/")[-1]])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inline({**target, **rest}, defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _structural(schema: dict) -> dict:
    """Turn one pydantic JSON-schema node into a Kubernetes structural node."""
    schema = dict(schema)
    any_of = schema.pop("anyOf", None)
    if any_of:
        # No `nullable`: the API server then prunes an explicit null, which is
        # what None means in the model (and what the CEL rules' has() expect).
        non_null = [s for s in any_of if s.get("type") != "null"]
        types = {s.get("type") for s in non_null}
        if types == {"string", "integer"}:  # a Kubernetes quantity, written as controller-gen does
            string = next(s for s in non_null if s.get("type") == "string")
            schema.update({k: string[k] for k in ("pattern", "maxLength") if k in string})
            schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            schema["x-kubernetes-int-or-string"] = True
        elif len(non_null) == 1:
            schema = {**non_null[0], **schema}
        else:
            raise ValueError(f"cannot express union {any_of} structurally")
    if schema.pop("x-kuberl-immutable", False):
        schema.setdefault("x-kubernetes-validations", []).append(
            {"rule": "self == oldSelf", "message": "immutable while the job exists", "reason": "FieldValueForbidden"}
        )
    if schema.get("default") is None:
        schema.pop("default", None)
    if schema.get("default") == {} and "properties" in schema:
        schema.pop("default")  # nested defaults apply when the block is written
    if schema.get("additionalProperties") is False:
        schema.pop("additionalProperties")  # structural schemas prune instead
    if "minimum" not in schema and "exclusiveMinimum" in schema and schema.get("type") in ("number", "integer"):
        schema["minimum"], schema["exclusiveMinimum"] = schema["exclusiveMinimum"], True
    if "maximum" not in schema and "exclusiveMaximum" in schema and schema.get("type") in ("number", "integer"):
        schema["maximum"], schema["exclusiveMaximum"] = schema["exclusiveMaximum"], True
    if "maxLength" in schema and schema.get("type") == "object":
        schema["maxProperties"] = schema.pop("maxLength")
    if "minLength" in schema and schema.get("type") == "array":
        schema["minItems"] = schema.pop("minLength")
    if "maxLength" in schema and schema.get("type") == "array":
        schema["maxItems"] = schema.pop("maxLength")
    if schema.get("type") == "array" and "maxItems" not in schema:
        raise ValueError(f"list without maxItems: {schema.get('title')}")
    if "properties" in schema:
        schema["properties"] = {k: _structural(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        schema["items"] = _structural(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = _structural(schema["additionalProperties"])
    if schema.get("x-kubernetes-preserve-unknown-fields") and schema != ANY_JSON_VALUE:
        schema["type"] = "object"
        schema.pop("additionalProperties", None)
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string") and schema != ANY_JSON_VALUE:
        raise ValueError(f"no type for {schema}")
    return {k: v for k, v in schema.items() if k in _KEEP}


def spec_schema() -> dict:
    raw = JobSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _structural(_inline(raw, defs))
    schema["x-kubernetes-validations"] = [
        {
            "rule": r.cel,
            "messageExpression": r.message_expression,
            "message": r.message,
            "fieldPath": r.field_path,
            "reason": "FieldValueInvalid",
        }
        for r in CROSS_FIELD_RULES
    ] + [
        {  # a field-level `self == oldSelf` never runs when the field is added or removed
            "rule": f"has(self.{field}) == has(oldSelf.{field})",
            "message": "cannot be added or removed while the job exists",
            "fieldPath": f".{field}",
            "reason": "FieldValueForbidden",
        }
        for field in optional_immutable_fields()
    ]
    return schema


def _status_schema() -> dict:
    nullable_num = {"type": "number", "nullable": True}
    return {
        "type": "object",
        "description": "Observed state, written by the operator.",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {"type": "string", "enum": PHASES, "description": "Lifecycle phase: " + ", ".join(PHASES) + "."},
            "observedGeneration": {"type": "integer", "description": "The spec generation the operator last acted on."},
            "restarts": {"type": "integer", "description": "Gang restarts counted toward runPolicy.backoffLimit."},
            "generation": {"type": "integer", "description": "Current gang generation (kuberl.dev/restart label)."},
            "workers": {
                "type": "object", "description": "Pod counts of the current generation.",
                "properties": {k: {"type": "integer", "description": f"Pods {k}."} for k in ("active", "ready", "succeeded", "failed")},
            },
            "progress": {
                "type": "object", "description": "Training progress read from rank 0's metrics.",
                "properties": {
                    "timesteps": {"type": "integer", "description": "Env steps across all ranks."},
                    "stepsPerSecond": {**nullable_num, "description": "Global env steps per second."},
                    "episodeReturnMean": {**nullable_num, "description": "Mean training episode return."},
                    "evalReturn": {**nullable_num, "description": "Latest evaluation mean return."},
                },
            },
            "conditions": {
                "type": "array", "maxItems": 16, "description": "Kubernetes-style conditions (type, status, reason, message, lastTransitionTime).",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "One condition."},
            },
            "restartHistory": {
                "type": "array", "maxItems": 16, "description": "The latest gang restarts with reason, time and whether they counted toward backoffLimit (bounded).",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "One restart."},
            },
            "forceDeleted": {
                "type": "array", "maxItems": 16, "description": "Pods force-deleted after being stuck terminating (bounded).",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "One force deletion."},
            },
            "startupRetries": {"type": "integer", "description": "Generations that never fully started (not counted toward backoffLimit)."},
            "startTime": {"type": "string", "nullable": True, "description": "When the job (or its resume) started running."},
            "completionTime": {"type": "string", "nullable": True, "description": "When the job succeeded or failed."},
            "generationStartTime": {"type": "string", "nullable": True, "description": "When the current gang generation was created."},
            "gangRunningTime": {"type": "string", "nullable": True, "description": "When every pod of the current generation was first running."},
            "nextStartTime": {"type": "string", "nullable": True, "description": "When the next generation may start (restart backoff)."},
            "rank0Progress": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "description": "Rank 0's last step count and when it last changed: the stall clock, kept across operator restarts.",
            },
            "latestCheckpoint": {
                "type": "object", "nullable": True, "x-kubernetes-preserve-unknown-fields": True,
                "description": "Path, time and timesteps of the newest checkpoint.",
            },
            "finalModel": {"type": "string", "nullable": True, "description": "Where the trained policy was written."},
            "display": {
                "type": "object", "description": "What kubectl get rltj prints (a printer column cannot format): strings beside the exact values.",
                "properties": {
                    "workers": {"type": "string", "maxLength": 16, "description": "Ready/desired pods of the current generation."},
                    "return": {"type": "string", "maxLength": 32, "description": "Mean training return, rounded (the last known once pods are gone)."},
                    "eval": {"type": "string", "maxLength": 32, "description": "Latest evaluation return, rounded: what decided success."},
                    "reason": {"type": "string", "maxLength": 64, "description": "Why the job is Failed or Suspended (its condition's reason), or why a Pending or Restarting job's workers are not all running (its Ready condition's reason)."},
                },
            },
            "admitted": {
                "type": "object", "description": "The spec generation the operator last admitted, and what each rule that weighs a job against its own resources (a replay buffer against its memory limit) weighed then, and each cross-field rule it was let through read: an operator upgrade that adds or tightens such a rule lets this job run on until those fields change.",
                "properties": {
                    "generation": {"type": "integer", "description": "The spec generation (metadata.generation) admitted."},
                    "weighed": {"type": "object", "maxProperties": ADMITTED_RECORD_LIMIT, "additionalProperties": {"type": "string", "maxLength": 64, "description": "The rule's fingerprint."},
                                "description": "A fingerprint of what each such rule read, by the rule's name (a cross-field rule's: the path of its field)."},
                },
            },
            "trainerDefaults": {
                "type": "object", "description": "The operator's defaults for what the spec leaves unset, as the job first met them: every generation's pods take these, so an operator upgrade that changes them never changes a running job.",
                "properties": {
                    "image": {"type": "string", "maxLength": 512, "description": "Trainer image of a spec without image."},
                    "cpuPerProcess": {"type": "string", "maxLength": 64, "description": "CPU request per process of a spec without resources."},
                    "memoryPerProcess": {"type": "string", "maxLength": 64, "description": "Memory request per process of a spec without resources."},
                    "imagePullPolicy": {"type": "string", "enum": ["", *PULL_POLICIES], "description": "Pull policy of a trainer container whose spec sets none (the chart's trainer.image.pullPolicy); empty: none, the kubelet's default."},
                    "imagePullSecrets": {
                        "type": "array", "maxItems": contract.MAX_TRAINER_PULL_SECRETS,
                        "items": {"type": "string", "maxLength": 253, "pattern": DNS_1123_SUBDOMAIN, "description": "A Secret's name."},
                        "description": "Names of the Secrets that pull the trainer image of a pod whose template sets none (the chart's trainer.imagePullSecrets).",
                    },
                    "pod": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                        "description": "The platform's defaults for every trainer pod (the chart's trainer.podDefaults: labels, annotations, env, tolerations, nodeSelector, priorityClassName), under what the spec sets.",
                    },
                },
            },
        },
    }


PRINTER_COLUMNS = [  # the display strings the operator writes beside the exact values (status.display)
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Lifecycle phase."},
    {"name": "Workers", "type": "string", "jsonPath": ".status.display.workers", "description": "Ready/desired pods."},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "description": "Counted gang restarts."},
    {"name": "Timesteps", "type": "integer", "jsonPath": ".status.progress.timesteps", "description": "Env steps so far."},
    {"name": "Return", "type": "string", "jsonPath": ".status.display.return", "description": "Mean training return, rounded."},
    {"name": "Eval", "type": "string", "jsonPath": ".status.display.eval", "description": "Latest evaluation return, rounded."},
    {"name": "Reason", "type": "string", "jsonPath": ".status.display.reason", "description": "Why Failed or Suspended, or why a Pending or Restarting job's workers are not all running."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict:
    """The whole CRD object, its spec's hash annotated (spec_hash)."""
    spec = _crd_spec()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": names.CRD_NAME, "annotations": {names.ANNOTATION_CRD_HASH: spec_hash(spec)}},
        "spec": spec,
    }


def spec_hash(spec: dict) -> str:
    """sha256 of a CRD spec as canonical JSON: the chart refuses an upgrade over an installed CRD of another."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _crd_spec() -> dict:
    return {
        "group": names.GROUP,
        "scope": "Namespaced",
        "names": {
            "kind": names.KIND, "plural": names.PLURAL, "singular": names.SINGULAR,
            "shortNames": names.SHORT_NAMES, "listKind": f"{names.KIND}List",
        },
        "versions": [
            {
                "name": names.VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "Distributed reinforcement-learning training with PyTorch DDP.",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": {"type": "string", "description": "kuberl.dev/v1alpha1"},
                            "kind": {"type": "string", "description": "RLTrainingJob"},
                            "metadata": {
                                "type": "object",
                                "description": "Standard object metadata.",
                                "properties": {
                                    "name": {
                                        "type": "string",
                                        "description": f"At most {names.MAX_JOB_NAME} characters so every derived name stays a DNS-1035 label.",
                                        "maxLength": names.MAX_JOB_NAME,
                                        "pattern": DNS_1035.pattern,
                                    }
                                },
                            },
                            "spec": spec_schema(),
                            "status": _status_schema(),
                        },
                    }
                },
            }
        ],
    }
