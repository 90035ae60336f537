"""A pod's trainer container as a local process: what a kubelet does, here.

`kuberl run` and the test suite's local node both run rendered pods with this
module, so a pod behaves the same under either:

- `container_env` resolves the container's env as the kubelet does: values
  with Kubernetes' `$(VAR)` expansion, the downward API (`status.podIP` is the
  pod's own 127.0.0.x, `limits.cpu` the container's CPU limit rounded up),
  ConfigMap keys; cluster DNS names are handed to a resolver the caller owns
  (cluster DNS is not the kubelet's business).
- `prepare_sandbox` lays out a directory that stands in for the container's
  filesystem root (each volumeMount a symlink to its volume's directory, a
  configMap volume projected afresh as the kubelet projects it, the
  termination-message file, /tmp), passed to the process as KUBERL_FS_ROOT so
  absolute paths in the rendered pod need no rewriting. Every path the pod
  names (mountPath, subPath, terminationMessagePath, workingDir, claimName)
  must stay inside that root: one that leaves it is refused, naming the field.
- `launch` starts the container as a container starts: from a clean
  environment (the image's essentials: PATH with this interpreter's directory,
  so `python`, `torchrun` and every console script of the trainer's
  environment resolve alike; HOME, LANG; what a GPU host needs) plus the pod's
  env, never the caller's shell; an absolute path in command/args under a
  volume's mountPath is that volume's file here.
- `PodProcess` starts the command in its own process group, prefixes its
  output, signals and reaps the whole group, and reports the exit code and the
  termination message (`FallbackToLogsOnError`: the log's tail when the file is
  empty and the exit code is not 0).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import functools
import math
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import IO

from . import contract, names, rootcause, safetext
from .spec import DNS_1123_LABEL, DNS_1123_SUBDOMAIN, QUANTITY, quantity_value

# What Kubernetes keeps of a log for FallbackToLogsOnError.
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
# containerd's max_container_log_line_size: a longer line is logged in pieces of this size, so one
# line without a newline (a progress bar, a binary dump) cannot take the runner's memory.
LOG_LINE_BYTES = 16 * 1024
TERMINATION_MESSAGE_LIMIT = 4096
PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")
# A container image's usual PATH, after the trainer environment's own bin directory.
IMAGE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What a container gets from this host besides PATH: where the user's caches
# live, the locale, and what CUDA needs to find the GPUs the host offers.
HOST_ESSENTIALS = ("HOME", "LANG", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
_output_lock = threading.Lock()


class LocalRunError(RuntimeError):
    """A pod that cannot run here as rendered (a render bug, or a feature no local node has); one
    line, escaped (safetext), since it quotes the spec's strings."""

    def __init__(self, message: str):
        super().__init__(safetext.one_line(message))


# --- $(VAR) expansion, as Kubernetes does it ---------------------------------


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of command, args and env values: `$(VAR)` becomes
    VAR's value when defined and stays as written otherwise; `$$` is a literal `$`."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


# --- quantities and the downward API -----------------------------------------

# The API server caps a quantity's magnitude at 2^63-1 (k8s.io/apimachinery/pkg/api/resource).
MAX_QUANTITY = 2**63 - 1


def quantity(value: str | float) -> Fraction:
    """A Kubernetes resource quantity ("500m", "2", "1.5Gi", "1e3") as an exact number, capped as
    the API server caps it (an exponent like 1e99999999 is never computed out)."""
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


# --- what the pod's env and volumes read, checked as the API server checks it ---

# ConfigMapVolumeSourceDefaultMode (k8s.io/api/core/v1): a projected file is 0644 unless a mode says otherwise.
CONFIGMAP_DEFAULT_MODE = 0o644
# validateConfigMapVolumeSource and validateKeyToPath (pkg/apis/core/validation): "must be a number between 0 and 0777".
MAX_FILE_MODE = 0o777
# The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go validatePath) writes no longer payload path or file name.
MAX_PROJECTED_PATH = 4096
MAX_PROJECTED_NAME = 255
# validateContainerResourceDivisor (pkg/apis/core/validation): the divisors the API server takes, by value
# (1m and 1 for CPU; 1, 1k..1E and 1Ki..1Ei for memory and ephemeral storage); zero is the unset divisor.
CPU_DIVISORS = frozenset({Fraction(1, 1000), Fraction(1)})
BYTE_DIVISORS = frozenset({Fraction(1), *(Fraction(1000) ** e for e in range(1, 7)), *(Fraction(1024) ** e for e in range(1, 7))})
# IsConfigMapKey (k8s.io/apimachinery/pkg/util/validation): what a configMapKeyRef's key may be.
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _relaxed_env_name(name: object) -> bool:
    """IsRelaxedEnvVarName (k8s.io/apimachinery/pkg/util/validation), the API server's rule for an
    envFrom prefix: printable ASCII but '='."""
    return isinstance(name, str) and bool(name) and all(" " <= c <= "~" and c != "=" for c in name)


def _mode_problems(path: str, mode: object) -> list[str]:
    if mode is None or (isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= MAX_FILE_MODE):
        return []
    return [f"{path}: expected a file mode from 0 to 0777 (octal; 511 in decimal) (got {_shown(mode)})"]


def item_path_problems(path: str, target: object) -> list[str]:
    """A ConfigMap volume item's path, by the API server's validateLocalNonReservedPath (relative, no '..'
    element, not starting with '..') and the kubelet AtomicWriter's validatePath (at most 4096
    characters, 255 per name; a NUL no file name can hold)."""
    if not isinstance(target, str) or not target:
        return [f"{path}: required: a relative file path (got {_shown(target)})"]
    parts = target.split("/")
    if target.startswith("/"):
        return [f"{path}: {target!r} must be a relative path"]
    if ".." in parts:
        return [f"{path}: {target!r} must not contain '..'"]
    if target.startswith(".."):
        return [f"{path}: {target!r} must not start with '..' (the kubelet keeps its own ..data there)"]
    if "\0" in target:
        return [f"{path}: {target!r} contains a NUL character, which no file name can hold"]
    if len(target) > MAX_PROJECTED_PATH or any(len(part) > MAX_PROJECTED_NAME for part in parts):
        return [f"{path}: at most {MAX_PROJECTED_PATH} characters, {MAX_PROJECTED_NAME} per name (got {len(target)})"]
    return []


def _object_list(path: str, value: object, what: str) -> tuple[list[tuple[int, dict]], list[str]]:
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [f"{path}: expected a list of {what} (got {_shown(value)})"]
    return ([(i, v) for i, v in enumerate(value) if isinstance(v, dict)],
            [f"{path}[{i}]: expected an object (got {_shown(v)})" for i, v in enumerate(value) if not isinstance(v, dict)])


def _named(path: str, ref: object, what: str) -> list[str]:
    if not isinstance(ref, dict):
        return [f"{path}: expected an object naming the {what} (got {_shown(ref)})"]
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return [f"{path}.name: required: the {what}'s name (got {_shown(name)})"]
    return []


def _divisor_problems(path: str, ref: Mapping) -> list[str]:
    divisor = ref.get("divisor")
    if divisor is None:
        return []
    try:
        value = quantity(divisor)
    except LocalRunError:
        return [f"{path}.divisor: expected a quantity such as 1, 1m or 1Mi (got {_shown(divisor)})"]
    allowed = CPU_DIVISORS if ref["resource"].endswith(".cpu") else BYTE_DIVISORS
    if value == 0 or value in allowed:
        return []
    shown = "1m or 1 for cpu" if allowed is CPU_DIVISORS else "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi or 1Ei"
    return [f"{path}.divisor: expected {shown} (got {_shown(divisor)})"]


def source_problems(pod: Mapping, container: Mapping) -> list[str]:
    """Every command and args item, envFrom, env valueFrom and configMap volume of the pod the API
    server would refuse, by field path (its decoding of []string; ValidateEnvFrom,
    validateEnvVarValueFrom, validateConfigMapVolumeSource): checked
    before the node reads them, so a shape no cluster accepts is named, never a traceback."""
    where = f"spec.containers[{container.get('name')}]"
    problems = []
    for field in ("command", "args"):  # []string: the API server cannot decode a string or a number into it
        value = container.get(field)
        if value is not None and not isinstance(value, list):
            problems.append(f"{where}.{field}: expected a list of strings (got {_shown(value)})")
        for j, part in enumerate(value if isinstance(value, list) else []):
            if not isinstance(part, str):
                problems.append(f"{where}.{field}[{j}]: expected a string; quote it (got {_shown(part)})")
    sources, more = _object_list(f"{where}.envFrom", container.get("envFrom"), "envFrom sources")
    problems += more
    for i, source in sources:
        at = f"{where}.envFrom[{i}]"
        refs = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
        if len(refs) != 1:
            problems.append(f"{at}: expected exactly one of configMapRef or secretRef (got {sorted(source) or 'neither'})")
        for ref in refs:
            problems += _named(f"{at}.{ref}", source[ref], "ConfigMap" if ref == "configMapRef" else "Secret")
        prefix = source.get("prefix")
        if prefix not in (None, "") and not _relaxed_env_name(prefix):
            problems.append(f"{at}.prefix: expected printable ASCII characters other than '=' (got {_shown(prefix)})")
    env, more = _object_list(f"{where}.env", container.get("env"), "env vars")
    problems += more
    for i, var in env:
        source = var.get("valueFrom")
        if source is None:
            continue
        at = f"{where}.env[{var.get('name', i)}].valueFrom"  # by name: kuberl's own env comes before the template's
        kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if isinstance(source, dict) and source.get(k) is not None]
        if not isinstance(source, dict) or len(kinds) != 1:
            problems.append(f"{at}: expected an object with exactly one of fieldRef, resourceFieldRef, configMapKeyRef"
                            f" or secretKeyRef (got {_shown(source)})")
            continue
        ref = source[kinds[0]]
        field = {"fieldRef": "fieldPath", "resourceFieldRef": "resource"}.get(kinds[0], "key")
        if kinds[0] in ("configMapKeyRef", "secretKeyRef"):
            problems += _named(f"{at}.{kinds[0]}", ref, "ConfigMap" if kinds[0] == "configMapKeyRef" else "Secret")
        if not isinstance(ref, dict) or not isinstance(ref.get(field), str) or not ref[field]:
            problems.append(f"{at}.{kinds[0]}.{field}: required (got {_shown(ref.get(field) if isinstance(ref, dict) else ref)})")
        elif kinds[0] == "resourceFieldRef":
            problems += _divisor_problems(f"{at}.resourceFieldRef", ref)
        elif kinds[0] == "configMapKeyRef" and (not CONFIGMAP_KEY.fullmatch(ref["key"]) or ref["key"] in (".", "..")
                                                or ref["key"].startswith("..")):
            problems.append(f"{at}.configMapKeyRef.key: expected a ConfigMap key: letters, digits, '-', '_' or '.',"
                            f" not starting with '..' (got {_shown(ref['key'])})")
    volumes, more = _object_list("spec.volumes", pod["spec"].get("volumes"), "volumes")
    problems += more
    for _, volume in volumes:
        if "configMap" not in volume:
            continue
        at, source = f"spec.volumes[{volume.get('name')}].configMap", volume["configMap"]
        problems += _named(at, source, "ConfigMap")
        if not isinstance(source, dict):
            continue
        problems += _mode_problems(f"{at}.defaultMode", source.get("defaultMode"))
        items, more = _object_list(f"{at}.items", source.get("items"), "items")
        problems += more
        for j, item in items:
            if not isinstance(item.get("key"), str) or not item["key"]:
                problems.append(f"{at}.items[{j}].key: required: the ConfigMap key to project (got {_shown(item.get('key'))})")
            problems += item_path_problems(f"{at}.items[{j}].path", item.get("path"))
            problems += _mode_problems(f"{at}.items[{j}].mode", item.get("mode"))
    return problems


def pod_source_problems(pod: Mapping) -> list[str]:
    """`source_problems` for every container of the pod (its volumes once): what `kuberl validate` reports
    before the operator's pods would be refused."""
    containers = [c for c in pod["spec"].get("containers") or [] if isinstance(c, dict)]
    found = [p for c in containers for p in source_problems(pod, c)]
    return list(dict.fromkeys(found))


def check_sources(pod: Mapping, container: Mapping) -> None:
    problems = source_problems(pod, container)
    if problems:
        raise LocalRunError("; ".join(problems))


def configmap_files(volume: Mapping, configmaps: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, int]]:
    """A configMap volume's files as the kubelet projects them (pkg/volume/configmap makePayload): every
    key, or only `items` at their paths; each with its item's mode, else defaultMode, else 0644. A
    ConfigMap or item key that does not exist leaves the volume empty of it when `optional`, and
    otherwise stops the pod before it starts (a cluster's FailedMount: the pod never leaves ContainerCreating)."""
    source, at = volume["configMap"], f"spec.volumes[{volume['name']}].configMap"
    optional = source.get("optional") is True
    data = configmaps.get(source["name"])
    if data is None:
        if optional:
            return {}
        raise LocalRunError(f"{at}.name: ConfigMap {source['name']!r} does not exist (a cluster leaves the pod in"
                            " ContainerCreating, FailedMount); put it in the job's file or set optional: true")
    mode = CONFIGMAP_DEFAULT_MODE if source.get("defaultMode") is None else source["defaultMode"]
    if not source.get("items"):
        return {key: (value, mode) for key, value in data.items()}
    files: dict[str, tuple[str, int]] = {}
    for j, item in enumerate(source["items"]):
        if item["key"] not in data:
            if optional:
                continue
            raise LocalRunError(f"{at}.items[{j}].key: ConfigMap {source['name']!r} has no key {item['key']!r}"
                                " (a cluster's FailedMount: configmap references non-existent config key)")
        path = os.path.normpath(item["path"])
        if path == ".":  # the API server lets it through; the kubelet cannot write a file over the volume's directory
            raise LocalRunError(f"{at}.items[{j}].path: {item['path']!r} names the volume's own directory, not a file"
                                " (a cluster's FailedMount)")
        files[path] = (data[item["key"]], mode if item.get("mode") is None else item["mode"])  # the same path twice: the last wins
    for path in files:
        parent = os.path.dirname(path)
        while parent:
            if parent in files:
                raise LocalRunError(f"{at}.items: {parent!r} is a file and also the directory of {path!r};"
                                    " the kubelet cannot write both (FailedMount)")
            parent = os.path.dirname(parent)
    return files


def write_files(directory: str, files: Mapping[str, tuple[str, int]]) -> None:
    """Write projected files into a new directory; a path that exists already (a symlink, say) is refused, never followed."""
    os.makedirs(directory)
    for path, (content, mode) in files.items():
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        os.chmod(target, mode)


# --- the container's filesystem ----------------------------------------------


def containers_not_run(pod: Mapping) -> list[str]:
    """The pod's containers a local node does not start, by field: it runs the trainer container's command
    alone, so an init container that fetches data, or a sidecar it talks to, is missing here (said, not silent)."""
    ours = trainer_container(pod)
    skipped = [f"spec.initContainers[{c.get('name')}]" for c in pod["spec"].get("initContainers") or [] if isinstance(c, dict)]
    return skipped + [f"spec.containers[{c.get('name')}]" for c in pod["spec"]["containers"] if isinstance(c, dict) and c is not ours]


_SCRIPT_PATH = re.compile(r"(?<![\w./-])(/[\w@%+.,-]+(?:/[\w@%+.,-]+)*\.(?:py|sh))(?![\w/])")


def image_files(pod: Mapping) -> list[str]:
    """The trainer container's command and args that name a script (`*.py`, `*.sh`) by an absolute path
    under no volume's mountPath and absent on this machine: a file baked into the image, which a local
    node (running this machine's files) does not have."""
    container = trainer_container(pod)
    mounts = [m.get("mountPath", "").rstrip("/") for m in container.get("volumeMounts") or [] if isinstance(m, dict)]
    found = []
    for field in ("command", "args"):
        for i, word in enumerate(container.get(field) or []):
            for path in _SCRIPT_PATH.findall(word) if isinstance(word, str) else []:
                if not any(path.startswith(m + "/") for m in mounts if m) and not os.path.exists(path):
                    found.append(f"{field}[{i}] {path!r}")
    return found


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


def trainer_container(pod: Mapping) -> dict:
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == names.TRAINER_CONTAINER), containers[0])


def _inside(root: str, path: str) -> bool:
    resolved = os.path.normpath(os.path.join(root, path.lstrip("/")))
    return resolved == root or resolved.startswith(root.rstrip("/") + "/")


def path_problems(pod: Mapping, container: Mapping) -> list[str]:
    """Every path of the pod that would leave its root here, by field path."""
    root = "/pod-root"
    where = f"spec.containers[{container.get('name')}]"
    problems = []
    for i, volume in enumerate(pod["spec"].get("volumes") or []):
        name = volume.get("name")
        # validateVolumes (pkg/apis/core/validation): a volume's name is a DNS-1123 label; here it names a directory
        if not isinstance(name, str) or len(name) > 63 or not re.fullmatch(DNS_1123_LABEL, name):
            problems.append(f"spec.volumes[{i}].name: {name!r} is not a DNS-1123 label (at most 63 lowercase letters,"
                            " digits and '-', starting and ending with a letter or digit)")
        for kind in ("persistentVolumeClaim", "configMap"):
            key = "claimName" if kind == "persistentVolumeClaim" else "name"
            name = volume[kind].get(key) if isinstance(volume.get(kind), dict) else None
            # the API server's rule for both names, so neither can name a path outside the run directory
            if name is not None and (len(name) > 253 or not re.fullmatch(DNS_1123_SUBDOMAIN, str(name))):
                problems.append(f"spec.volumes[{i}].{kind}.{key}: {name!r} is not a DNS-1123 subdomain name")
    for i, mount in enumerate(container.get("volumeMounts") or []):
        path = str(mount.get("mountPath", ""))
        if not path.startswith("/") or not _inside(root, path) or os.path.normpath(path) == "/":
            problems.append(f"{where}.volumeMounts[{i}].mountPath: {path!r} is not an absolute path inside the container")
        sub = str(mount.get("subPath") or "")  # null is unset, as everywhere in a pod
        if sub.startswith("/") or ".." in sub.split("/"):
            problems.append(f"{where}.volumeMounts[{i}].subPath: {sub!r} must be a relative path without '..'")
    for field in ("terminationMessagePath", "workingDir"):
        path = container.get(field)
        if path is not None and (not str(path).startswith("/") or not _inside(root, str(path))):
            problems.append(f"{where}.{field}: {path!r} is not an absolute path inside the container")
    log = container.get("terminationMessagePath")
    mounted = [os.path.normpath(str(m.get("mountPath", ""))) for m in container.get("volumeMounts") or []]
    if log is not None and str(log).startswith("/") and os.path.normpath(str(log)) in {*mounted, "/"}:
        problems.append(f"{where}.terminationMessagePath: {log!r} is a directory here (the root or a mount), not a file")
    elif log is not None and any(os.path.normpath(str(log)).startswith(m.rstrip("/") + "/") for m in mounted):
        # a kubelet mounts a file of its own over that path; here the volume's own file would be emptied
        problems.append(f"{where}.terminationMessagePath: {log!r} is inside a volume mount; this node would empty that"
                        " volume's file at every start: keep it outside the mounts (default /dev/termination-log)")
    # validateVolumes and validateVolumeMounts (pkg/apis/core/validation): "Duplicate value", "must be unique"
    volume_names = [v.get("name") for v in pod["spec"].get("volumes") or []]
    problems += [f"spec.volumes[{i}].name: {n!r} is a duplicate: volume names are unique in a pod"
                 for i, n in enumerate(volume_names) if n in volume_names[:i]]
    problems += [f"{where}.volumeMounts[{i}].mountPath: {m!r} is mounted twice: mount paths are unique in a container"
                 for i, m in enumerate(mounted) if m in mounted[:i]]
    # A cluster nests mounts (a claim at /data, a ConfigMap at /data/cfg); each is a symlink here, so the inner one
    # would be made inside the outer volume, or (listed first) leave no place for the outer's link
    problems += [f"{where}.volumeMounts[{i}].mountPath: {m!r} is inside another mount ({outer!r}), which this node"
                 " cannot lay out (each mount is a symlink here): mount them side by side"
                 for i, m in enumerate(mounted) for outer in dict.fromkeys(mounted)
                 if outer.startswith("/") and outer != "/" and m.startswith(outer + "/")]
    return problems


def check_paths(pod: Mapping, container: Mapping) -> None:
    problems = path_problems(pod, container)
    if problems:
        raise LocalRunError("; ".join(problems))


def prepare_sandbox(
    sandbox: str,
    pod: Mapping,
    container: Mapping,
    configmaps: Mapping[str, Mapping[str, str]],
    claim_dir: Callable[[str], str],
) -> str:
    """A fresh directory standing in for the container's root; returns it.
    emptyDir and configMap volumes live in the sandbox (gone with the pod: a
    configMap volume is projected afresh for each pod, as a kubelet does);
    claim volumes are the caller's directories, shared and lasting."""
    check_paths(pod, container)
    check_sources(pod, container)
    projected = {v["name"]: configmap_files(v, configmaps) for v in pod["spec"].get("volumes") or [] if "configMap" in v}
    remove_tree(sandbox)
    with _as_local_run_error(container):
        return _lay_out(sandbox, pod, container, projected, claim_dir)


def remove_tree(path: str) -> None:
    """Remove a pod's old sandbox, a fresh root for the next pod as a node gives it: a directory the old pod
    left without write permission (a module cache's read-only tree, say) is made writable first (its
    processes are gone by then), where rmtree alone left it and the next pod could not be laid out."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or os.path.islink(path):
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for parent, dirs, _ in os.walk(path):  # top-down: each directory is made listable before the walk enters it
        for name in dirs:
            if not os.path.islink(os.path.join(parent, name)):  # chmod would follow a link out of the sandbox
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(parent, name), 0o700)
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _as_local_run_error(container: Mapping) -> Iterator[None]:
    """A pod shape validation let through must not end `kuberl run` in a traceback."""
    try:
        yield
    except (OSError, KeyError, TypeError) as e:
        shown = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) else f"{type(e).__name__}: {e}"
        raise LocalRunError(f"spec.containers[{container.get('name')}]: cannot lay out the container's volumes and"
                            f" files here ({shown})") from None


def descend(top: str, path: str, field: str, what: str, mounts: Collection[str] = (), create: bool = True,
            written: str | None = None) -> int:
    """An open directory `path` under `top`, each component opened without following a link
    (O_NOFOLLOW at the parent's dir_fd) and, with `create`, made first where missing: the runner never
    creates or enters a directory a link leads to, and a link swapped in between a check and a create
    is met at the open, not followed. `mounts`: paths (as `path` is written) of the links this node
    made itself for volume mounts, the only ones followed. A link or a file on the way is refused,
    naming `field` as `written` there (default `path`; `what`: where the path must stay)."""
    shown = path if written is None else written
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    walked = ""
    try:
        for name in (part for part in path.split("/") if part not in ("", ".")):
            walked += "/" + name
            ours = walked in mounts
            if name == "..":
                raise LocalRunError(f"{field}: {shown!r} leads out of {what} ('..')")
            if create and not ours:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | (0 if ours else os.O_NOFOLLOW), dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if not stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                    raise LocalRunError(f"{field}: {shown!r}: {walked.lstrip('/')!r} is not a directory") from None
                raise LocalRunError(f"{field}: {shown!r} leads out of {what} through a symlink in it ({walked.lstrip('/')!r}):"
                                    " this node never follows one") from None
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def make_dirs(top: str, path: str, field: str, what: str, mounts: Collection[str] = ()) -> None:
    """`descend`, for the directories it creates."""
    os.close(descend(top, path, field, what, mounts))


def _mount_of(container: Mapping, path: str) -> Mapping | None:
    """The volume mount a container path lies in, if any (mounts never nest: path_problems)."""
    normal = os.path.normpath(path)
    return next((m for m in container.get("volumeMounts") or []
                 if normal == os.path.normpath(m["mountPath"]) or normal.startswith(os.path.normpath(m["mountPath"]).rstrip("/") + "/")),
                None)


def working_dir(root: str, container: Mapping, create: bool = True) -> int:
    """The container's workingDir, opened (and made, as runc makes a missing one) without following a
    link the pod's volumes hold: a co-tenant's `link -> /elsewhere` in a shared claim made the runner
    create `/elsewhere/made-by-runner` and start the pod there."""
    path = container["workingDir"]
    mount = _mount_of(container, path)
    what = f"volume {mount['name']!r}" if mount else "the container's root"
    mounts = {os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []}
    return descend(root, os.path.normpath(path), f"spec.containers[{container.get('name')}].workingDir", what, mounts, create)


def _lay_out(sandbox: str, pod: Mapping, container: Mapping, projected: Mapping[str, Mapping[str, tuple[str, int]]],
             claim_dir: Callable[[str], str]) -> str:
    root = os.path.join(sandbox, "root")
    top = os.path.dirname(os.path.dirname(sandbox))  # the run's directory: its pods/ is any pod's to replace
    os.makedirs(top, exist_ok=True)
    make_dirs(top, os.path.relpath(root, top), "the pod's root", f"the run's directory {top}")
    sources = {}
    index = {v["name"]: i for i, v in enumerate(pod["spec"].get("volumes") or [])}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "emptyDir" in volume:
            sources[name] = os.path.join(sandbox, "volumes", name)
            os.makedirs(sources[name])
        elif "configMap" in volume:
            sources[name] = os.path.join(sandbox, "volumes", name)
            write_files(sources[name], projected[name])
        elif "persistentVolumeClaim" in volume:
            sources[name] = claim_dir(volume["persistentVolumeClaim"]["claimName"])
            if os.path.islink(sources[name]):  # runs/_claims/<claim> is any run's pods' to replace
                raise LocalRunError(f"spec.volumes[{index[name]}].persistentVolumeClaim.claimName: the claim's directory"
                                    f" {sources[name]} is a symlink: this node never follows one")
        elif "hostPath" in volume:
            sources[name] = volume["hostPath"]["path"]
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise LocalRunError(f"volume {name!r}: {kind} volumes cannot be served locally")
    where = f"spec.containers[{container.get('name')}]"
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount["name"] not in sources:
            raise LocalRunError(f"volumeMount {mount['mountPath']}: the pod has no volume {mount['name']!r}")
        sub = mount.get("subPath") or ""
        source = os.path.join(sources[mount["name"]], sub)
        if sub:  # made as the kubelet's PrepareSafeSubpath makes it: never through a link in the volume
            subpath = f"{where}.volumeMounts[{i}].subPath"
            parent = descend(sources[mount["name"]], os.path.dirname(os.path.normpath(sub)), subpath, f"volume {mount['name']!r}",
                             written=sub)
            try:
                last = os.path.basename(os.path.normpath(sub))
                with contextlib.suppress(FileExistsError):
                    os.mkdir(last, dir_fd=parent)
                if stat.S_ISLNK(os.lstat(last, dir_fd=parent).st_mode):  # a regular file (one ConfigMap key) mounts that file
                    raise LocalRunError(f"{subpath}: {sub!r} leads out of volume {mount['name']!r} through a symlink in it"
                                        f" ({os.path.normpath(sub)!r}): this node never follows one")
            finally:
                os.close(parent)
        elif not os.path.isfile(source):  # the volume's own directory (a hostPath as DirectoryOrCreate)
            os.makedirs(source, exist_ok=True)
        target = os.path.normpath(host_path(root, mount["mountPath"]))
        parent = descend(root, os.path.dirname(os.path.normpath(mount["mountPath"])), f"{where}.volumeMounts[{i}].mountPath",
                         "the container's root (each mount is a symlink here: one inside another cannot be laid out)")
        try:
            os.symlink(os.path.abspath(source), os.path.basename(target), dir_fd=parent)
        finally:
            os.close(parent)
    mounts = {os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []}
    log = os.path.normpath(container.get("terminationMessagePath") or names.TERMINATION_LOG)
    parent = descend(root, os.path.dirname(log), f"{where}.terminationMessagePath", "the container's root", mounts)
    try:
        os.close(os.open(os.path.basename(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666, dir_fd=parent))
    finally:
        os.close(parent)
    make_dirs(root, names.TMP_MOUNT_DIR, "TMPDIR", "the container's root", mounts)
    if container.get("workingDir"):  # runc creates a missing working directory (opencontainers/runc#1604)
        os.close(working_dir(root, container))
    return root


def host_path(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


@dataclass(frozen=True)
class Launch:
    """What starting the container means here: argv, full env, cwd (with `open_cwd`, the
    working directory opened without following a link, which the process enters by its fd)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    termination_log: str
    open_cwd: Callable[[], int] | None = None


def interpreter_bin() -> str:
    """Where this interpreter and its environment's console scripts (torchrun, ...) live."""
    return os.path.dirname(sys.executable)


def container_base_env(host: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a container has before the pod's env: its image's PATH, led by
    the trainer environment's bin directory, and HOST_ESSENTIALS that are set."""
    host = os.environ if host is None else host
    env = {"PATH": os.pathsep.join((interpreter_bin(), *IMAGE_PATH)), "LANG": "C.UTF-8"}
    env.update({name: host[name] for name in HOST_ESSENTIALS if host.get(name)})
    return env


def executable(name: str) -> str:
    """`python` (by any path) is this interpreter; a bare name found beside it (torchrun and
    every other console script of the trainer's environment) is that file, and so is an
    image's absolute path to one that this machine lacks (`/opt/conda/bin/torchrun`, as
    `/opt/conda/bin/python` is this interpreter); anything else is looked up on the container's PATH."""
    base = os.path.basename(name)
    if base in PYTHONS:
        return sys.executable
    beside = os.path.join(interpreter_bin(), base)
    if base and os.path.isfile(beside) and ("/" not in name or (os.path.isabs(name) and not os.path.lexists(name))):
        return beside
    return name


FILE_URL = "file://"  # init_method=file:///shared/pg: a path under a mount after it is the volume's too


# `--name=`, and Hydra's `key.sub=`, `+key=`, `~key=` (a path-free key): its value is a word of its own.
_ASSIGNMENT = re.compile(r"^[-+~]*[\w.@\[\]-]*=")


def in_volumes(argument: str, root: str, mount_paths: list[str]) -> str:
    """Absolute paths under a volume's mountPath, as this host sees them: an argument
    that is a path, a `file://` URL (torch's file rendezvous) or a list of them
    (`/data/a.csv,/data/b.csv`, `/app:/lib`), alone or as an option's `--name=` or a
    Hydra override's `data.dir=` value. Other text (a `python -c` program) stays."""
    assignment = _ASSIGNMENT.match(argument)
    if assignment:
        return assignment.group(0) + in_volumes(argument[assignment.end():], root, mount_paths)
    return in_volumes_of_words(argument, root, mount_paths) if argument.startswith(("/", FILE_URL)) else argument


SHELLS = ("sh", "bash", "dash", "ash", "zsh", "ksh")
_SHELL_BEFORE = "\\s'\"=:,;&|()<>`"  # what may precede a path in a shell line (a word's start)
_SAFE_IN_SHELL = re.compile(r"^[\w@%+=:,./-]+$")


def is_shell_line(argv: list[str], i: int) -> bool:
    """argv[i] is the line of `sh -c LINE` (or `bash -ec LINE`, ...)."""
    flag = argv[i - 1] if i >= 2 else ""
    return (os.path.basename(argv[0]) in SHELLS and flag.startswith("-") and not flag.startswith("--")
            and flag.endswith("c") and i == argv.index(flag) + 1)


def _mount_words(mount_paths: list[str]) -> re.Pattern | None:
    """A mountPath starting a word (after a shell's separators, or a `file://`), longest first."""
    mounts = sorted({m.rstrip("/") for m in mount_paths if m.rstrip("/")}, key=len, reverse=True)
    if not mounts:
        return None
    words = "|".join(re.escape(m) for m in mounts)
    return re.compile(rf"(?:(?<=[{_SHELL_BEFORE}])|^|(?<={FILE_URL}))({words})(?=[/{_SHELL_BEFORE}]|$)")


def in_volumes_of_words(value: str, root: str, mount_paths: list[str]) -> str:
    """Each path under a mountPath that starts a word of `value`, as this host sees it (one pass). So
    is an env value's: the manifest's own words, as its command's are (`PYTHONPATH=/app`,
    `OUTPUT_DIR=/shared/out`, `file:///shared/init`); left as written they named this machine's /app,
    or made /shared on it."""
    pattern = _mount_words(mount_paths)
    return value if pattern is None else pattern.sub(lambda found: host_path(root, found.group(1)), value)


def in_volumes_of_line(line: str, root: str, mount_paths: list[str]) -> str:
    """Each word of a shell line that is a path under a mountPath, as this host sees it (one pass:
    a host path put in is never rewritten again)."""
    pattern = _mount_words(mount_paths)
    if pattern is None:
        return line

    def one(found: re.Match) -> str:
        host = host_path(root, found.group(1))
        if not _SAFE_IN_SHELL.match(host):
            raise LocalRunError(f"the shell line {line!r} names {found.group(1)}, whose directory here ({host}) a"
                                " shell would split: run from a path of letters, digits and ._-/ only")
        return host

    return pattern.sub(one, line)


def launch(pod: Mapping, root: str, container_environment: Mapping[str, str], base_env: Mapping[str, str] | None = None,
           resolve: Callable[[str], str] | None = None) -> Launch:
    """The container's command and args, `$(VAR)`-expanded with its env, with
    the trainer environment's executables, the volumes' paths and (given
    `resolve`) the cluster names written in them resolved here; the process
    sees `base_env` (default: `container_base_env()`) under the pod's env."""
    container = trainer_container(pod)
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not command:
        raise LocalRunError(f"container {container['name']!r} has no command: a local node has no image entrypoint")
    if not container.get("command"):  # Kubernetes runs the image's ENTRYPOINT with these args
        raise LocalRunError(f"spec.containers[{container['name']}].command: unset, so a cluster runs the image's ENTRYPOINT with"
                            f" args {container['args']!r}; a local node has no image: set command to that ENTRYPOINT to run it here")
    mount_paths = [os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []]
    argv = [expand(part, container_environment) for part in command]
    argv = [in_volumes_of_line(part, root, mount_paths) if is_shell_line(argv, i) else in_volumes(part, root, mount_paths)
            for i, part in enumerate(argv)]
    if resolve is not None:
        argv = [resolve_names(part, resolve, strict=False) for part in argv]
    argv[0] = executable(argv[0])
    env = {
        **(container_base_env() if base_env is None else base_env),
        "TMPDIR": host_path(root, names.TMP_MOUNT_DIR),
        **{k: v if contract.is_reserved_env(k) else in_volumes_of_words(v, root, mount_paths) for k, v in container_environment.items()},
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        contract.ENV_FS_ROOT: root,
    }
    cwd = host_path(root, container["workingDir"]) if container.get("workingDir") else os.getcwd()
    log = host_path(root, container.get("terminationMessagePath") or names.TERMINATION_LOG)
    opened = functools.partial(working_dir, root, container, create=False) if container.get("workingDir") else None
    return Launch(argv, env, cwd, log, opened)


# --- the process --------------------------------------------------------------


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGTERM it when the process that started it dies, so no
    trainer outlives `kuberl run` (looked up before the fork: the child only calls it)."""
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class PodProcess:
    """One container's command in its own process group.

    Start it from a thread that lives as long as the process should: on Linux
    the child is signalled when that thread ends."""

    def __init__(self, spec: Launch, prefix: str, out: IO[str] | None = None, log_path: str | None = None):
        self.spec = spec
        self.prefix = prefix
        self.out = out if out is not None else sys.stdout
        self.log_path = log_path
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.rank_lines: dict[int, str] = {}  # each torch rank's last `[rankN]:` line (rootcause.completed)
        self.started_at = time.time()
        self.finished_at: float | None = None
        self.output_ended_at: float | None = None  # its stdout closed: when it exited, unless something it started kept it
        self._seen_running_at = self.started_at  # the last poll that found it running
        self.kill_at: float | None = None
        self.start_error: str | None = None
        self._exit_code: int | None = None
        self._reader: threading.Thread | None = None
        opened = None
        try:
            opened = spec.open_cwd() if spec.open_cwd else None
            # the child changes into the very directory checked, by its fd: a link swapped in since is not followed
            cwd = f"/proc/self/fd/{opened}" if opened is not None and os.path.isdir("/proc/self/fd") else spec.cwd
            self.popen: subprocess.Popen | None = subprocess.Popen(
                spec.argv, env=spec.env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,
                # the child calls one libc function looked up before the fork: no lock to inherit
                preexec_fn=_die_with_parent if _PRCTL else None,  # noqa: PLW1509
            )
        except (OSError, ValueError, LocalRunError) as e:  # the runtime could not start the container (a NUL in argv or env: ValueError)
            self.popen = None
            self.start_error = f"StartError: {e}"
            self._exit_code = 128
            self.finished_at = self.started_at
            return
        finally:
            if opened is not None:
                os.close(opened)
        self._reader = threading.Thread(target=self._pump, name=f"output {prefix}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def _pump(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        try:
            opened = open_to_write(self.log_path, append=True) if self.log_path else contextlib.nullcontext()
        except OSError:  # a link where the log goes: the output still reaches the terminal
            opened = contextlib.nullcontext()
        with opened as log:
            for raw in iter(lambda: self.popen.stdout.readline(LOG_LINE_BYTES), b""):
                line = raw.decode(errors="replace").rstrip("\n")
                self.tail.append(line)
                rootcause.remember(line, self.rank_lines)
                if log:
                    log.write(line + "\n")
                with _output_lock, contextlib.suppress(OSError, ValueError):  # our stdout may be gone
                    self.out.write(f"{self.prefix} {safetext.escape(line)}\n")  # the log file keeps it raw
                    self.out.flush()
        self.output_ended_at = time.time()

    def poll(self, now: float | None = None) -> int | None:
        """The exit code once the process has ended (128 + signal when killed),
        else None; kills the group when its grace period is over."""
        if self._exit_code is not None or self.popen is None:
            return self._exit_code
        code = self.popen.poll()
        if code is None:
            self._seen_running_at = time.time()
            if self.kill_at is not None and (now or time.time()) >= self.kill_at:
                self.signal(signal.SIGKILL)
            return None
        self.signal(signal.SIGKILL)  # the container is gone: so is everything it started
        self._kill_escaped()
        if self._reader is not None:
            self._reader.join(timeout=2)
        # which of two ranks failed first (the cause, not its echo) even when one poll sees both ended; never
        # before a poll that saw it running (a process may close its stdout long before it exits)
        self.finished_at = max(self._seen_running_at, min(time.time(), self.output_ended_at or math.inf))
        self._exit_code = 128 - code if code < 0 else code
        return self._exit_code

    @property
    def running(self) -> bool:
        return self.poll() is None

    def signal(self, signum: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)

    def terminate(self, grace_seconds: float, now: float | None = None) -> float:
        """SIGTERM the group now and SIGKILL it when the grace period ends (at
        the next poll after it); returns when that is."""
        now = now or time.time()
        if self.kill_at is None:
            self.kill_at = now + grace_seconds
            self.signal(signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)
        else:
            self.kill_at = min(self.kill_at, now + grace_seconds)
        return self.kill_at

    def kill(self) -> None:
        self.kill_at = time.time()
        self.signal(signal.SIGKILL)
        self._kill_escaped()

    def _kill_escaped(self) -> None:
        """What left the group (setsid, a daemonised helper) is still in the
        container: a kubelet kills it too. It carries the pod's root in its env;
        once this process is reaped (and escapees with it), a pod of the same name may own that root."""
        root = self.spec.env.get(contract.ENV_FS_ROOT)
        if self.popen is None or not root or self._exit_code is not None:
            return
        for pid in processes_under(os.path.dirname(os.path.normpath(root))):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        deadline = time.time() + timeout
        while self.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        return self.poll()

    def termination_message(self) -> str | None:
        """The file's content, else (the process failed) the tail of its log."""
        if self.start_error:
            return self.start_error
        text = read_termination_log(self.spec.termination_log)
        if text or not self._exit_code:
            return text or None
        tail = "\n".join(self.tail)[-LOG_TAIL_BYTES:].strip()
        return rootcause.completed(tail, self.rank_lines) or None


def read_regular_file(path: str, limit: int = -1) -> str | None:
    """A file a container wrote, read only if it is a regular file (else None): the process owns its root and
    volumes here, and a FIFO or a link put in a file's place must not hang the runner (nor a link be followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(limit).decode(errors="replace")


_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def private_network() -> str | None:
    """Move this process (and every pod it starts after) into a network namespace of its own, with
    only a loopback interface, brought up: no listener of the run, a custom torchrun's store on
    every address included, can be reached from outside it, and the pods reach no other host.
    A user namespace mapping this user to itself makes it possible without privileges. Returns
    why it could not (another platform, a kernel or container that forbids it), None when done."""
    import fcntl
    import struct

    if _PRCTL is None:
        return "network namespaces are Linux's"
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNET if uid == 0 else _CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"unshare: {os.strerror(ctypes.get_errno())}"
    if uid != 0:  # this user, mapped to itself: files the pods write keep their owner
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name, flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
    return None


def open_to_write(path: str, append: bool = False) -> IO[str]:
    """A file of the run's own (a log, status.json's temporary), opened without following a link:
    any run's pods can leave one in runs/ pointing anywhere this user may write."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o644), "a" if append else "w", buffering=1 if append else -1)


def read_regular_tail(path: str, limit: int) -> tuple[str, int] | None:
    """The last `limit` bytes of a regular file a container wrote, from the first whole line on, and
    the file's size; None as for `read_regular_file`. A run's progress.jsonl grows for as long as the
    run lasts (or is a 3 GiB sparse file a process put there): it is never read whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.fstat(fd).st_size
        if size <= limit:
            return f.read(limit).decode(errors="replace"), size
        f.seek(size - limit - 1)  # one byte more: whether the tail starts a line
        tail = f.read(limit + 1)
        start = tail.find(b"\n") + 1  # 0: no whole line in it
        return (tail[start:].decode(errors="replace") if start else ""), size


def read_termination_log(path: str) -> str:
    """The termination-message file, as the regular file a kubelet mounts there."""
    return (read_regular_file(path, TERMINATION_MESSAGE_LIMIT) or "").strip()


def start_pod(
    pod: Mapping,
    pod_ip: str,
    sandbox: str,
    configmaps: Mapping[str, Mapping[str, str]],
    configmap_dir: Callable[[str], str] | None,
    claim_dir: Callable[[str], str],
    resolve: Callable[[str], str],
    prefix: str,
    out: IO[str] | None = None,
    log_path: str | None = None,
    base_env: Mapping[str, str] | None = None,
    node_cpus: int | None = None,
) -> PodProcess:
    """Everything a kubelet does to start a pod's trainer container here. `configmap_dir` is no
    longer read: configMap volumes are projected from `configmaps` into the pod's own sandbox."""
    container = trainer_container(pod)
    check_sources(pod, container)
    env = container_env(pod, container, pod_ip, configmaps, resolve, node_cpus)
    root = prepare_sandbox(sandbox, pod, container, configmaps, claim_dir)
    return PodProcess(launch(pod, root, env, base_env, resolve), prefix, out, log_path)



def processes_under(sandboxes: str) -> list[int]:
    """PIDs of live processes whose pod root is under `sandboxes` (KUBERL_FS_ROOT
    is inherited by everything a container starts): a previous runner's leftovers."""
    prefix = os.path.abspath(sandboxes).encode() + b"/"
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            marker = contract.ENV_FS_ROOT.encode() + b"="
            if any(v.startswith(marker) and v[len(marker):].startswith(prefix) for v in environ):
                found.append(int(entry))
    return sorted(found)
