"""Names a local pod resolves: the cluster DNS names of a job's pods as loopback
addresses, the interfaces gloo may use, and the one-node rendezvous."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping

from .sandbox import LocalRunError, trainer_container

# Where gloo, NCCL and TensorPipe look for the network interface to use: PyTorchJob manifests often say
# GLOO_SOCKET_IFNAME=eth0, a pod's own interface; a local pod's address is on this machine's loopback.
SOCKET_IFNAME_ENV = frozenset({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"})
LOOPBACK = "lo"


def host_interfaces() -> set[str]:
    return {name for _, name in socket.if_nameindex()}


def local_interfaces(value: str, prefixes: bool = False, present: set[str] | None = None) -> str:
    """A pod's interface list as this machine has it: one that names none of its interfaces (eth0 on a
    laptop whose card is wlp2s0 or en0) is the loopback, where every local pod's address lives, as a
    cluster name is that address; one that names an interface here, or NCCL's ^exclusions, stays.
    NCCL matches names by prefix (`eth`) unless `=` asks for the exact one."""
    present = host_interfaces() if present is None else present
    wanted = [n.strip() for n in value.split(",") if n.strip()]
    if not wanted or value.lstrip().startswith("^"):
        return value

    def here(name: str) -> bool:
        if prefixes and not name.startswith("="):
            return any(p.startswith(name) for p in present)
        return name.lstrip("=") in present

    return value if any(here(n) for n in wanted) else LOOPBACK


_CLUSTER_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc(\.cluster\.local)?)\.?(:[0-9]+)?$")
# A cluster name inside a longer value: `tcp://<name>:port`, `<name>:1,<name>:2`, a shell line.
_CLUSTER_NAME_INSIDE = re.compile(r"(?<![-a-zA-Z0-9.])([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\.svc(?:\.cluster\.local)?)(?![-a-zA-Z0-9]|\.[a-zA-Z0-9])")


def resolve_names(value: str, resolve: Callable[[str], str], strict: bool = True) -> str:
    """A value that is a cluster DNS name (optionally with a port) becomes the
    address it resolves to; so does each cluster name inside a longer value.
    A whole-value name that does not resolve is an error when `strict` (kuberl's
    own names: a render bug); any other stays as written, for this machine's
    resolver to answer as it would (a name of another Service: no answer here)."""
    match = _CLUSTER_NAME.match(value)
    if match and strict:
        return resolve(match.group(1)) + (match.group(4) or "")

    def one(found: re.Match) -> str:
        try:
            return resolve(found.group(1))
        except LocalRunError:
            return found.group(0)

    return _CLUSTER_NAME_INSIDE.sub(one, value)


# A rendezvous at the pod's own loopback: torchrun's (and the legacy launcher's) endpoint flags, a tcp:// URL.
_LOOPBACK_RENDEZVOUS = re.compile(r"(?:--(?:rdzv[-_]endpoint|master[-_]addr)[=\s]+['\"]?|tcp://)(?:localhost|127\.0\.0\.1)(?![\w.-])")
_ONE_NODE = re.compile(r"--standalone\b|--nnodes[=\s]+['\"]?1(?![\d:])")


def loopback_rendezvous(pod: Mapping) -> list[str]:
    """The trainer container's fields that name a rendezvous at localhost for a gang of several pods
    (`--rdzv-endpoint=localhost:29400`, `tcp://127.0.0.1:23456`, from a one-machine tutorial): in a
    cluster each pod's localhost is its own, so the pods never meet and wait until a timeout; here
    every pod's localhost is this machine's, and they do. A one-node launch (`--standalone`,
    `--nnodes=1`: each pod a gang of its own) is not one."""
    container = trainer_container(pod)
    field = f"spec.containers[{container['name']}]"
    command, args = (" ".join(map(str, container.get(key) or [])) for key in ("command", "args"))
    found = []
    if _LOOPBACK_RENDEZVOUS.search(f"{command} {args}") and not _ONE_NODE.search(f"{command} {args}"):
        found.append(f"{field}.args" if _LOOPBACK_RENDEZVOUS.search(args) else f"{field}.command")
    return found + [f"{field}.env[{item['name']}]" for item in container.get("env") or []
                    if isinstance(item, dict) and isinstance(item.get("value"), str) and _LOOPBACK_RENDEZVOUS.search(item["value"])]
