"""A container's env as the kubelet resolves it: `$(VAR)` expansion, the downward
API (`status.podIP`, resource limits) and ConfigMap keys."""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Callable, Mapping
from fractions import Fraction

from ..core import contract
from ..core.contract import expand
from ..core.validation import MAX_QUANTITY, QUANTITY, quantity_value
from .dns import SOCKET_IFNAME_ENV, local_interfaces, resolve_names
from .sandbox import LocalRunError


def quantity(value: str | float) -> Fraction:
    """A Kubernetes resource quantity ("500m", "2", "1.5Gi", "1e3") as an exact number, as ParseQuantity reads it
    (validation.quantity_value), then held to +-(2^63-1) as the kubelet holds every amount it passes on in an int64
    (Quantity.Value): the API server itself caps only binary-suffixed ones, and 1e99999999 is never computed out."""
    text = str(value).strip()
    try:
        if re.fullmatch(QUANTITY, text):
            return Fraction(max(-MAX_QUANTITY, min(MAX_QUANTITY, quantity_value(text))))
    except ValueError:
        pass
    raise LocalRunError(f"not a resource quantity: {value!r}")


def resource_field(pod: Mapping, ref: Mapping, node_cpus: int, node_memory: int | None = None,
                   node_storage: int | None = None) -> str:
    """resourceFieldRef: the container's limit (or request), in `divisor` units,
    rounded up as the kubelet does; an unset limit is the node's allocatable
    amount (CPUs, memory, ephemeral storage), an unset request its limit or 0."""
    container_name = ref.get("containerName") or pod["spec"]["containers"][0]["name"]
    container = next((c for c in pod["spec"]["containers"] if c["name"] == container_name), None)
    if container is None:
        raise LocalRunError(f"resourceFieldRef names container {container_name!r}, which the pod does not have")
    kind, _, resource = ref["resource"].partition(".")
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if kind == "limits":
        raw = limits.get(resource)
        if raw is None:
            raw = {"cpu": node_cpus, "memory": node_memory, "ephemeral-storage": node_storage}.get(resource)
    else:
        raw = requests.get(resource, limits.get(resource, 0))
    if raw is None:
        raise LocalRunError(f"resourceFieldRef {ref['resource']}: no limit set and no node allocatable to fall back on")
    divisor = quantity(ref.get("divisor") or "1")
    return str(math.ceil(quantity(raw) / (divisor or 1)))  # a zero divisor is the unset one, 1 (ExtractContainerResourceValue)


def node_allocatable() -> tuple[int, int | None, int | None]:
    """This machine as a node: CPUs, memory bytes, bytes of the disk runs live on."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = None
    try:
        storage = shutil.disk_usage(os.getcwd()).total
    except OSError:
        storage = None
    return os.cpu_count() or 1, memory, storage


_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Mapping, path: str, pod_ip: str) -> str:
    """fieldRef as the downward API serves it for this pod on this node."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    keyed = _FIELD_KEY.match(path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    values = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or "localhost",
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if path not in values:
        raise LocalRunError(f"fieldRef {path!r} is not a field the downward API offers")
    return str(values[path])


def container_env(
    pod: Mapping,
    container: Mapping,
    pod_ip: str,
    configmaps: Mapping[str, Mapping[str, str]],
    resolve: Callable[[str], str],
    node_cpus: int | None = None,
) -> dict[str, str]:
    """The container's environment in definition order: envFrom, then env
    (each value may use `$(VAR)` of those before it); every value that is a
    cluster DNS name is passed through `resolve`."""
    cpus, memory, storage = node_allocatable()
    cpus = node_cpus or cpus
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if ref is None:
            if (source.get("secretRef") or {}).get("optional"):
                continue  # no Secret exists here: an optional one adds nothing, as a missing one in a cluster
            raise LocalRunError("envFrom: only configMapRef can be served locally (no Secrets here)")
        data = configmaps.get(ref["name"])
        if data is None and not ref.get("optional"):
            raise LocalRunError(f"envFrom: ConfigMap {ref['name']!r} does not exist")
        env.update({(source.get("prefix") or "") + k: v for k, v in (data or {}).items()})
    for item in container.get("env") or []:
        name = item["name"]
        if item.get("valueFrom") is None:  # value: null is an unset value, "" (JSON null decodes to Go's zero value)
            env[name] = expand(item.get("value") or "", env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_field(pod, source["resourceFieldRef"], cpus, memory, storage)
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            value = (configmaps.get(ref["name"]) or {}).get(ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                raise LocalRunError(f"env {name}: ConfigMap {ref['name']!r} has no key {ref['key']!r}")
            env[name] = value
        elif (source.get("secretKeyRef") or {}).get("optional"):
            continue  # WANDB_API_KEY from an optional Secret: unset, as where the Secret is missing
        else:
            raise LocalRunError(f"env {name}: {next(iter(source), '?')} cannot be served locally (no Secrets here)")
    env = {k: resolve_names(v, resolve, strict=contract.is_reserved_env(k)) for k, v in env.items()}
    return {k: local_interfaces(v, prefixes=k.startswith("NCCL_")) if k in SOCKET_IFNAME_ENV else v for k, v in env.items()}
