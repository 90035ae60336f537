"""What a pod may draw on besides its image: ConfigMap documents and the env and
volume sources that name them (keys, modes, projected paths, resource divisors),
checked as the API server checks them. `kuberl run`, `kuberl validate` and
`kuberl convert` share these checks."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .validation import (
    DNS_1123_SUBDOMAIN,
    MAX_QUANTITY,
    QUANTITY,
    Problem,
    metadata_problems,
    quantity_value,
)

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


def _quantity(value: object) -> Fraction | None:
    """A resource quantity as an exact number, held to +-(2^63-1) as the kubelet's int64 holds it (the API server
    caps only binary-suffixed amounts); None when it is not one."""
    text = str(value).strip()
    try:
        return Fraction(max(-MAX_QUANTITY, min(MAX_QUANTITY, quantity_value(text)))) if re.fullmatch(QUANTITY, text) else None
    except ValueError:
        return None


def _divisor_problems(path: str, ref: Mapping) -> list[str]:
    divisor = ref.get("divisor")
    if divisor is None:
        return []
    value = _quantity(divisor)
    if value is None:
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
        elif kinds[0] == "fieldRef":
            problems += _field_path_problems(f"{at}.fieldRef.fieldPath", ref["fieldPath"])
        elif kinds[0] == "configMapKeyRef" and not is_configmap_key(ref["key"]):
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


# validateEnvVarValueFrom's validEnvDownwardAPIFieldPathExpressions (pkg/apis/core/validation/validation.go, v1.33),
# besides metadata.labels['<key>'] and metadata.annotations['<key>'].
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
                   "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")


def _field_path_problems(path: str, field_path: str) -> list[str]:
    """A fieldRef the API server refuses whatever its version (validateObjectFieldSelector): a known path in other
    letter case (field paths are camelCase, so no server adds spec.nodename), or a whole map of labels or
    annotations, which only a downward API volume can hold. Any other unknown path is left to the server: a newer
    one may know it."""
    close = [known for known in ENV_FIELD_PATHS if known.lower() == field_path.lower() and known != field_path]
    if close:
        return [f"{path}: expected {close[0]} (field paths are case-sensitive) (got {_shown(field_path)})"]
    if field_path in ("metadata.labels", "metadata.annotations"):
        return [(f"{path}: expected one {field_path[9:-1]}, {field_path}['<key>']: an env var holds one value (a"
                 f" downwardAPI volume can hold them all) (got {_shown(field_path)})")]
    return []


def pod_source_problems(pod: Mapping) -> list[str]:
    """`source_problems` for every container of the pod (its volumes once): what `kuberl validate` reports
    before the operator's pods would be refused."""
    containers = [c for c in pod["spec"].get("containers") or [] if isinstance(c, dict)]
    found = [p for c in containers for p in source_problems(pod, c)]
    return list(dict.fromkeys(found))


def is_configmap(doc: Any) -> bool:
    """A ConfigMap document, whatever its apiVersion (one other than v1 is a problem of that ConfigMap's)."""
    return isinstance(doc, dict) and doc.get("kind") == "ConfigMap"


# ValidateConfigMap (pkg/apis/core/validation/validation.go): data and binaryData total at most
# core.MaxSecretSize bytes; every key passes IsConfigMapKey (k8s.io/apimachinery/pkg/util/validation).
MAX_CONFIGMAP_BYTES = 1024 * 1024


CONFIGMAP_KEY_RULE = "a ConfigMap key: at most 253 letters, digits, '-', '_' or '.', not '.' nor starting with '..'"


def is_configmap_key(key: object) -> bool:
    return isinstance(key, str) and bool(CONFIGMAP_KEY.fullmatch(key)) and key != "." and not key.startswith("..")


def json_key(key: object) -> object:
    """A YAML mapping key as kubectl sends it (sigs.k8s.io/yaml's YAMLToJSON): an integer or a boolean
    key is written as its text ('1', 'true'); any other non-string key stays as it is (and is refused)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key) if isinstance(key, int) else key


def configmap_data(doc: dict) -> dict[str, str]:
    """A checked ConfigMap's data, keyed as the API server stores it (`json_key`)."""
    return {json_key(k): v for k, v in (doc.get("data") or {}).items()}


def configmap_problems(doc: dict) -> list[Problem]:
    """A ConfigMap document beside the job, checked as the API server checks it (ValidateConfigMap and
    the name's DNS-1123 subdomain), each problem at its field: what kubectl apply would refuse is
    named before kuberl convert prints it or kuberl run mounts it."""
    problems = [] if doc.get("apiVersion") == "v1" else [Problem("apiVersion", f"expected v1 (got {doc.get('apiVersion')!r})")]
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or len(name) > 253 or not re.fullmatch(DNS_1123_SUBDOMAIN, name):
        problems.append(Problem("metadata.name", "expected a DNS-1123 subdomain: at most 253 lowercase letters, digits,"
                                f" '-' and '.', starting and ending with a letter or digit (got {name!r})"))
    problems += metadata_problems(metadata) if isinstance(metadata, dict) else []
    size = 0
    for field in ("data", "binaryData"):
        values = doc.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            problems.append(Problem(field, f"expected a mapping of keys to strings (got {type(values).__name__})"))
            continue
        for key, value in ((json_key(k), v) for k, v in values.items()):
            if not is_configmap_key(key):
                problems.append(Problem(f"{field}.{key}", f"expected {CONFIGMAP_KEY_RULE} (got {key!r})"))
            elif not isinstance(value, str):
                problems.append(Problem(f"{field}.{key}", f"expected a string; quote it (got {value!r:.40})"))
            elif field == "data":
                size += len(value.encode("utf-8", "surrogatepass"))
            else:
                try:
                    # Go's base64.StdEncoding, which decodes a []byte from JSON, skips '\r' and '\n': a
                    # YAML block of wrapped lines is base64 to the API server
                    size += len(base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True))
                except (binascii.Error, ValueError):
                    problems.append(Problem(f"binaryData.{key}", "expected base64 (the bytes of a file)"))
            if field == "binaryData" and isinstance(doc.get("data"), dict) and key in map(json_key, doc["data"]):
                problems.append(Problem(f"binaryData.{key}", "duplicate of a data key: a key lives in data or binaryData"))
    if size > MAX_CONFIGMAP_BYTES:
        problems.append(Problem("data", f"{size} bytes in all; the API server takes at most {MAX_CONFIGMAP_BYTES} (1 MiB)"
                                " per ConfigMap: split it, or put large files in a volume"))
    return problems
