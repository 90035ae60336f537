"""Every limit the generated CRD declares (maxItems, maxProperties, maxLength,
minLength, minItems, pattern, minimum, maximum, enum) is enforced by the Python
validation too: the cases are derived from `kuberl.core.crd.crd()`, so a limit added
to the CRD alone fails here."""

import copy
import re

import pytest
from kuberl.core.crd import crd
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob

from tests.support.crdschema import schema_nodes
from tests.support.jobs import make_job

LIMITS = ("maxItems", "maxProperties", "maxLength", "minLength", "minItems", "pattern", "minimum", "maximum", "enum")
BASE = make_job("limits").minimal().obj()


def sample(node):
    """A value valid for `node` on its own."""
    if node.get("enum"):
        return node["enum"][0]
    kind = node.get("type")
    if kind == "integer" or node.get("x-kubernetes-int-or-string"):
        return max(node.get("minimum", 1), 1) if "maximum" not in node else node["maximum"]
    if kind == "number":
        return node.get("maximum", 1)
    if kind == "string":
        return "a"
    if kind == "array":
        return [sample(node["items"])] * max(node.get("minItems", 0), 1)
    return {}


def string_of(length, pattern):
    for candidate in ("a" * length, "1" * length):
        if not pattern or re.search(pattern, candidate):
            return candidate
    raise AssertionError(f"no candidate string of {length} matches {pattern}")


def breaking_values(node):
    """(limit, value that breaks it) for each limit `node` declares."""
    out = []
    if "maxItems" in node:
        out.append(("maxItems", [sample(node["items"])] * (node["maxItems"] + 1)))
    if "minItems" in node and node["minItems"] > 0:
        out.append(("minItems", []))
    if "maxProperties" in node:
        value_schema = node.get("additionalProperties") if isinstance(node.get("additionalProperties"), dict) else {}
        out.append(("maxProperties", {f"k{i}": sample(value_schema) if value_schema.get("type") else i for i in range(node["maxProperties"] + 1)}))
    if "maxLength" in node:
        out.append(("maxLength", string_of(node["maxLength"] + 1, node.get("pattern"))))
    if node.get("minLength", 0) > 0:
        out.append(("minLength", ""))
    if "pattern" in node:
        # a name with a space and a "!" breaks most; one free of W&B's URL characters (/ and :) breaks its names
        bad = next(b for b in ("Not Valid!", "not/valid:") if not re.search(node["pattern"], b))
        out.append(("pattern", bad))
    if "minimum" in node:
        out.append(("minimum", node["minimum"] if node.get("exclusiveMinimum") else node["minimum"] - 1))
    if "maximum" in node:
        out.append(("maximum", node["maximum"] if node.get("exclusiveMaximum") else node["maximum"] + 1))
    if node.get("enum"):
        out.append(("enum", "not-a-member"))
    return out


def place(job, path, value):
    """Set `value` at a schema path ('.spec.ppo.hiddenSizes[]', '.spec.labels{}');
    returns the field path a problem should name."""
    parts = re.findall(r"\.([A-Za-z][A-Za-z0-9]*)|(\[\])|(\{\})", path)
    node, shown, last = job, [], None
    for i, (name, item, entry) in enumerate(parts):
        key = name or (0 if item else "k")
        is_last = i == len(parts) - 1
        nxt = parts[i + 1] if not is_last else None
        if is_last:
            if item:
                node.append(value)
            else:
                node[key] = value
        else:
            default = [] if nxt[1] else {}
            if item:
                node.append(default)
                node = node[-1]
            else:
                node = node.setdefault(key, default)
        shown.append(f"[{key}]" if item else f".{key}")
        last = key
    del last
    return "".join(shown).lstrip(".")


def cases():
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = []
    for path, node in schema_nodes(root):
        if not path.startswith((".spec", ".metadata")):
            continue
        for limit, value in breaking_values(node):
            out.append(pytest.param(path, limit, value, id=f"{path} {limit}"))
    return out


CASES = cases()


def test_the_crd_declares_limits_here():
    limits = {c.values[1] for c in CASES}
    assert {"maxItems", "maxProperties", "maxLength", "pattern", "minimum", "maximum", "enum"} <= limits
    assert len(CASES) > 100


@pytest.mark.parametrize(("path", "limit", "value"), CASES)
def test_python_enforces_every_crd_limit(path, limit, value):
    job = copy.deepcopy(BASE)
    if path.startswith(".spec.dqn"):
        job["spec"]["algorithm"] = "dqn"
    expected = place(job, path, value)
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    paths = [p.path for p in refused.value.problems]
    assert any(p == expected or p.startswith((expected + ".", expected + "[")) for p in paths), (expected, paths)


def test_65_env_kwargs_are_refused_naming_the_field():
    job = copy.deepcopy(BASE)
    job["spec"]["env"]["kwargs"] = {f"k{i}": i for i in range(65)}
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    assert [str(p) for p in refused.value.problems] == ["spec.env.kwargs: expected at most 64 entries (got dict of 65 entries)"]
    job["spec"]["env"]["kwargs"].pop("k0")
    validate_job(job)
