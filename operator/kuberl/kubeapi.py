"""The operator's own calls to the Kubernetes API: one small client, its errors, its RBAC.

Every request the operator makes itself goes through `KubeApi`; kopf keeps its
own client for watches, finalizers, events and peering. `API_CALLS` is the
single source of the operator's RBAC (the chart's Role is derived from it, and
the integration tests fail when the operator calls anything it does not list).

Callers see kuberl's own exception names (`NotFound`, `Conflict`, `Refused`, …),
never the transport library's, so the client underneath can change alone.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

# kopf's own authenticated client: one login and one session for the operator, with
# kopf's re-authentication on 401 and retries on 5xx/429 (kopf is pinned in the
# operator's dependencies because this module is private to kopf).
from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import errors as kopf_errors

from . import names
from .operator_metrics import OperatorMetrics

RLTJ = (names.GROUP, names.VERSION, names.PLURAL)
PODS = ("", "v1", "pods")
API_BACKOFFS = (0.5, 1.0, 2.0)  # retries of 5xx/429 inside one call; then kopf's daemon backoff

# What callers catch: the server's answer by meaning, whatever client made the call.
ApiError = kopf_errors.APIError  # any non-2xx answer; `.status` is the HTTP code
NotFound = kopf_errors.APINotFoundError  # 404
Conflict = kopf_errors.APIConflictError  # 409
Unprocessable = kopf_errors.APIUnprocessableEntityError  # 422

# Every (verb, group, resource, subresource) the operator calls: the chart's RBAC is derived
# from this list, and the integration tests fail when the operator calls anything else.
# RBAC also needs `update` on rltrainingjobs/finalizers, which no request uses: owner
# references with blockOwnerDeletion require it on clusters that enforce them.
API_CALLS = frozenset({
    ("get", names.GROUP, names.PLURAL, ""),
    ("list", names.GROUP, names.PLURAL, ""),
    ("watch", names.GROUP, names.PLURAL, ""),
    ("patch", names.GROUP, names.PLURAL, ""),  # kopf's finalizer
    ("patch", names.GROUP, names.PLURAL, "status"),
    ("delete", names.GROUP, names.PLURAL, ""),  # ttlSecondsAfterFinished
    ("get", "", "pods", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("create", "", "pods", ""),
    ("patch", "", "pods", ""),  # Kueue's retriable-in-group at the end
    ("delete", "", "pods", ""),
    ("create", "", "events", ""),
    *((verb, group, plural, "") for verb in ("create", "get") for group, plural in (
        ("", "configmaps"), ("", "persistentvolumeclaims"), ("", "services"), ("networking.k8s.io", "networkpolicies"),
        ("scheduling.volcano.sh", "podgroups"), ("scheduling.x-k8s.io", "podgroups"),
    )),
})
# With --peering, kopf's own peering objects (namespaced, or cluster-wide when all namespaces are watched).
PEERING_API_CALLS = frozenset(
    (verb, "kopf.dev", plural, "") for verb in ("get", "list", "watch", "patch") for plural in ("kopfpeerings", "clusterkopfpeerings")
)


def _path(group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(plural)
    if name:
        parts.append(name)
    if sub:
        parts.append(sub)
    return "/".join(parts)


def api_path(obj: dict) -> tuple[str, str, str]:
    """(group, version, plural) of a rendered child."""
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"ConfigMap": "configmaps", "PersistentVolumeClaim": "persistentvolumeclaims", "Service": "services",
              "NetworkPolicy": "networkpolicies", "PodGroup": "podgroups", "Pod": "pods"}[obj["kind"]]
    return group, version, plural


class KubeApi:
    """The calls the operator makes; every failure is counted, then raised for kopf to see."""

    def __init__(self, settings: kopf.OperatorSettings, log: Any, metrics: OperatorMetrics):
        self.settings, self.log, self.metrics = settings, log, metrics

    async def call(self, method: str, verb: str, plural: str, path: str, payload: Any = None, content_type: str | None = None) -> Any:
        headers = {"Content-Type": content_type} if content_type else None
        try:
            response = await kopf_api.request(
                method, path, payload=payload, headers=headers, backoffs=API_BACKOFFS, settings=self.settings, logger=self.log,
            )
        except kopf_errors.APIError as error:
            self.metrics.api_errors.labels(verb, plural, str(error.status)).inc()
            raise
        except (aiohttp.ClientError, TimeoutError):
            self.metrics.api_errors.labels(verb, plural, "connection").inc()
            raise
        async with response:
            return await response.json()

    async def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
        try:
            return await self.call("get", "get", plural, _path(group, version, plural, namespace, name))
        except NotFound:
            return None

    async def list_job_pods(self, namespace: str, job: str) -> list[dict]:
        path = _path(*PODS, namespace) + f"?labelSelector={names.LABEL_JOB}%3D{job}"
        return (await self.call("get", "list", "pods", path)).get("items") or []

    async def create(self, obj: dict) -> dict:
        group, version, plural = api_path(obj)
        return await self.call("post", "create", plural, _path(group, version, plural, obj["metadata"]["namespace"]), obj)

    async def patch_status(self, namespace: str, name: str, status_patch: dict, resource_version: str) -> dict:
        # The resourceVersion makes the write conditional: a stale read never overwrites a newer status.
        body = {"metadata": {"resourceVersion": resource_version}, "status": status_patch}
        return await self.call("patch", "patch", f"{names.PLURAL}/status", _path(*RLTJ, namespace, name, "status"), body, "application/merge-patch+json")

    async def patch_pod_annotations(self, namespace: str, name: str, annotations: dict) -> None:
        try:
            await self.call("patch", "patch", "pods", _path(*PODS, namespace, name), {"metadata": {"annotations": annotations}}, "application/merge-patch+json")
        except NotFound:
            pass  # already gone: nothing left to mark

    async def delete(self, group: str, version: str, plural: str, namespace: str, name: str, options: dict) -> None:
        try:
            await self.call("delete", "delete", plural, _path(group, version, plural, namespace, name), options)
        except (NotFound, Conflict):
            pass  # gone already, or the name now belongs to a newer object (uid precondition)
