"""A kubectl-compatible YAML reader: the documents kubectl would send, read with
bounds on size, nesting, aliases and numbers, and tags and keys checked as
sigs.k8s.io/yaml reads them; anything else is `UnreadableSpec`."""

from __future__ import annotations

import decimal
import math
import re
import struct
from collections.abc import Hashable
from typing import IO, Any

import yaml

from . import safetext

# --- reading a job file -------------------------------------------------------

# etcd's default request limit (--max-request-bytes, 1.5 MiB): the API server
# could not store a larger object, so no job file needs to be larger.
MAX_DOCUMENT_BYTES = 3 * 512 * 1024
# Deeper than any pod template; bounded so no reader recurses without end.
MAX_NESTING = 64
# Nodes aliases may add beyond the document's own: a few shared blocks are
# fine, a "billion laughs" is refused before anything is built from it.
MAX_ALIAS_EXPANSION = 10_000
# Bytes aliases may add to a document, counted as a lower bound of their JSON
# (a scalar's characters plus one separator per node): nine thousand aliases of
# one large string pass the node budget yet expand to gigabytes. What kubectl
# sends must fit the API server's request limit, so this bound refuses no job a
# cluster could store, and nothing is built before it is checked.
MAX_ALIAS_BYTES = MAX_DOCUMENT_BYTES
# Characters of one number: int64 and float64 need at most 25.
MAX_NUMBER_CHARS = 64
# Tags a document may write explicitly: plain JSON-like data only.
PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")) | {"!"}


class UnreadableSpec(ValueError):
    """A job file that is not safe, plain YAML; the message is one line (escaped: it may quote a key)."""

    def __init__(self, message: str):
        super().__init__(safetext.one_line(message))


STR, INT, FLOAT, BOOL, NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null"))
MERGE_TAG = "tag:yaml.org,2002:merge"
# go-yaml v2's resolve (gopkg.in/yaml.v2 resolve.go, which kubectl's YAMLToJSON decodes with): words first
_GO_WORDS: dict[str, tuple[str, object]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (BOOL, True)),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), (BOOL, False)),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), (NULL, None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), (FLOAT, math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (FLOAT, math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), (FLOAT, -math.inf)),
    "<<": (MERGE_TAG, "<<"),
}
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")  # strconv.ParseInt, base 0
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")  # resolve.go's yamlStyleFloat
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")  # what strconv.ParseFloat takes of a scalar starting with '.'


def kubectl_scalar(text: str) -> tuple[str, object]:
    """(tag, value) of an unquoted scalar as go-yaml v2 resolves it: `y` and `n` are booleans, `0o17` is 15,
    `1:20` is a string (PyYAML read the first two as strings and the last as 80), and `=` a string; underscores
    are dropped before a number is read; an integer int64 and uint64 cannot hold, or a float that overflows,
    is a float or a string as Go's strconv leaves it. A timestamp stays a string (decode.go keeps it one)."""
    if text in _GO_WORDS:
        return _GO_WORDS[text]
    if text[0] == ".":
        return (FLOAT, float(text)) if _DOT_FLOAT.fullmatch(text) else (STR, text)
    if text[0] not in "+-0123456789":
        return STR, text
    plain = text.replace("_", "")
    if len(plain) <= 70 and (number := _GO_INT.fullmatch(plain)):  # 70: no int64 or uint64 is longer
        sign, digits = number.groups()
        value = int(digits, 8) if digits[0] == "0" and digits[1:2].isdigit() else int(digits, 0)
        value = -value if sign == "-" else value
        if -2**63 <= value < 2**63 or (not sign and value < 2**64):
            return INT, value
    if _GO_FLOAT.fullmatch(plain) and math.isfinite(value := float(plain)):
        return FLOAT, value
    return STR, text


class _KubectlResolution:
    """Plain scalars resolved and merge keys applied as go-yaml v2 does (kubectl's YAMLToJSON)."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return kubectl_scalar(value)[0]
        return super().resolve(kind, value, implicit)

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        _flatten_mapping_as_kubectl(self, node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        self.flatten_mapping(node)
        mapping = {}
        for key_node, value_node in node.value:
            key = json_key(self.construct_object(key_node, deep=deep), key_node)
            if not isinstance(key, str):  # sigs.k8s.io/yaml's convertToJSONableObject: "unsupported map key of type"
                what = ("null" if key is None else "a list or map" if not isinstance(key, Hashable)
                        else f"{key_node.value[:64]} (go-yaml's uint64)")
                raise yaml.constructor.ConstructorError(
                    None, None, f"{what} as a map key: kubectl refuses to send it (unsupported map key)", key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def json_key(key: object, node: yaml.Node | None = None) -> object:
    """A mapping key as kubectl sends it: sigs.k8s.io/yaml's convertToJSONableObject writes a boolean, an integer
    or a float key (a float `node`, which kuberl builds as an integer where integral) as its text (`on: x` is
    {"true": "x"}, `1.5: x` {"1.5": "x"}); other keys are left to the checks that refuse them."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(node, yaml.ScalarNode) and node.tag == FLOAT and isinstance(key, (int, float)):
        return go_float32_text(float(kubectl_scalar(node.value)[1]))
    return str(key) if isinstance(key, int) else key


def _single(value: float) -> float:
    """`value` rounded to a float32; OverflowError past its range."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _reads_back(text: str, single: float) -> bool:
    try:
        return _single(float(text)) == single
    except OverflowError:  # digits rounded past float32's largest
        return False


def go_float32_text(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), as convertToJSONableObject writes a float key: the shortest
    digits that read back as the same float32, in %e form below 1e-4 or from 1e+06 on."""
    try:
        single = _single(value)
    except OverflowError:  # past float32's range: Go's conversion gives an infinity
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, single) < 0 else ""
    if single == 0:
        return f"{sign}0"
    single = abs(single)
    text = next(t for places in range(9) if _reads_back(t := f"{single:.{places}e}", single))
    mantissa, exponent = text.split("e")
    digits, exp = mantissa.replace(".", ""), int(exponent)
    if exp < -4 or exp >= 6:
        return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    whole, fraction = digits[: exp + 1].ljust(exp + 1, "0"), digits[exp + 1:]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


class KubernetesYamlLoader(_KubectlResolution, yaml.SafeLoader):
    """YAML read as kubectl reads it, with go-yaml v2's rules (kubectl_scalar): `1e-3` is a number and `y` a
    boolean, where PyYAML's YAML 1.1 rules made the first a string the strict model refuses and the second a
    string kubectl never sends. `load_documents` bounds nesting and tags (`_check_events`) before it composes."""


def _kubectl_value(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
    """A scalar of an int, float, bool or null tag, implicit or written, as go-yaml v2 decodes it
    (resolve.go: an integer under !!float is that float; any other mismatch is refused)."""
    tag, value = kubectl_scalar(node.value)
    if tag == INT and node.tag == FLOAT:
        tag, value = FLOAT, float(value)
    if tag != node.tag:
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot decode !!{tag.rsplit(':', 1)[1]} `{node.value[:64]}` as a !!{node.tag.rsplit(':', 1)[1]}",
            node.start_mark)
    if tag == FLOAT:
        return _kubectl_float(value)
    return _api_server_number(value) if tag == INT else value


def _kubectl_float(value: float) -> float | int:
    """kubectl sends YAML as JSON, where an integral float (5e5, 2.0) is written as an integer, its shortest
    digits then zeros (Go's 'f' format: -9223372036854775809 is sent as -9223372036854776000): the API server
    sees 500000, so `totalTimesteps: 5e5` is fine."""
    return _api_server_number(int(decimal.Decimal(repr(value)))) if value.is_integer() and abs(value) < 1e21 else value


def _api_server_number(value: int) -> int | float:
    """An integer as the API server decodes it from kubectl's JSON: outside int64, a float64 (apimachinery's
    util/json convertNumber), which no integer field takes; `activeDeadlineSeconds: 9223372036854775808` (go-yaml
    reads a uint64) was valid to kuberl and refused by `kubectl apply` as not an integer."""
    return value if -(2**63) <= value < 2**63 else float(value)


for _tag in (INT, FLOAT, BOOL, NULL):
    KubernetesYamlLoader.add_constructor(_tag, _kubectl_value)
# `<<` merges only as a key (flattened away before this); as a value go-yaml v2 decodes the string
KubernetesYamlLoader.add_constructor(MERGE_TAG, lambda loader, node: node.value)


def _flatten_mapping_as_kubectl(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    """A mapping's pairs, merge keys expanded, in the order go-yaml v2 (which kubectl's YAMLToJSON decodes with)
    sets them, the last set winning as the constructor builds the dict: a merge key is applied where it stands
    among the mapping's keys (decoder.mapping), replacing a key before it; of a list of maps, the later are set
    first (decoder.merge "steps backwards as earlier nodes take precedence"). PyYAML let every explicit key win
    wherever it stood, so `workers: 2` then `<<: *defaults` validated as 2 workers and ran the defaults' count."""
    pairs: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in node.value:
        if key.tag != MERGE_TAG:
            pairs.append((key, value))
            continue
        merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
        for sub in reversed(merged):
            if not isinstance(sub, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "map merge requires map or sequence of maps as the value", sub.start_mark)
            _flatten_mapping_as_kubectl(loader, sub)
            pairs += sub.value
    node.value = pairs


if yaml.__with_libyaml__:

    class _LibyamlLoader(_KubectlResolution, yaml.CSafeLoader):
        """KubernetesYamlLoader's resolution and constructors over libyaml's
        parser (four times faster on a 1.5 MiB file); used only after
        `_check_events` bounded nesting and tags: libyaml composes unchecked."""

        yaml_constructors = KubernetesYamlLoader.yaml_constructors


def _syntax_hint(e: yaml.MarkedYAMLError, text: str) -> str:
    """Where a YAML syntax error began, beside libyaml's words (which kubectl prints alone): "did not find
    expected key" at line 12 says nothing of the mapping at line 7 whose keys that line is indented unlike."""
    problem, context = e.problem_mark, e.context_mark
    lines = text.splitlines()
    line = lines[problem.line] if problem is not None and problem.line < len(lines) else ""
    near = [lines[m.line] for m in (problem, context) if m is not None and m.line < len(lines)]
    if problem is not None and 0 < problem.line <= len(lines):
        near.append(lines[problem.line - 1])
    if any("{{" in n and "}}" in n for n in near):  # a chart's templates/ or files/ (Kubeflow Trainer's runtimes)
        return " (a Helm or Jinja template's {{ }}: render it first, e.g. helm template CHART | kuberl convert -)"
    if problem is not None and "\t" in line[:problem.column + 1] and "tab" not in (e.problem or ""):
        return " (a tab: YAML indents with spaces)"
    if (e.problem or "").startswith("mapping values are not allowed"):  # libyaml: "in this context"; PyYAML: "here"
        # `a: 1` then `   b: 2` reads as the value `1 b`, then a `: `
        return " (a line indented deeper than the key above it, or a value holding ': ' that needs quotes?)"
    if problem is None or context is None or context.line == problem.line or not (e.context or "").startswith("while parsing a "):
        return ""
    opened = f"the {e.context.removeprefix('while parsing a ')} from line {context.line + 1}, column {context.column + 1}"
    if "block" in e.context:  # a block collection ends where a line's indentation does not match its entries'
        return f" (in {opened}: is this line indented as its entries are?)"
    return f" (in {opened}, not closed)"


def _check_events(text: str) -> None:
    """Nesting and explicit tags, from the event stream (no recursion, so a
    1,000-deep document is refused before anything composes it); the one check
    of both, whichever parser reads the text."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in PLAIN_TAGS:
            shown = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
            raise yaml.MarkedYAMLError(
                problem=f"tag {shown} is not allowed: only plain YAML (strings, numbers, booleans, null, maps, lists)",
                problem_mark=event.start_mark,
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_NESTING} levels", problem_mark=event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


def _key_text(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{node.id} key>"


_NOT_FINITE = re.compile(r"^[-+]?\.(inf|Inf|INF|nan|NaN|NAN)$")


def _key_identity(key: yaml.Node) -> Any:
    """What a key becomes once built and sent: `1` and `0x1` (or `true` and `y`) are one key,
    so the second would silently replace the first."""
    if isinstance(key, yaml.ScalarNode):
        try:
            return ("value", json_key(_KEY_BUILDER.construct_object(key), key))  # `null` and `~` are one key (None) too
        except (yaml.YAMLError, ValueError):
            pass
        finally:
            _KEY_BUILDER.constructed_objects.clear()
    return (key.tag, _key_text(key))


_KEY_BUILDER = KubernetesYamlLoader("")


def _check_composed(root: yaml.Node) -> None:
    """Duplicate keys, alias expansion and number sizes, on the composed graph
    (before any object is built). Walks iteratively and stops at the budget."""
    distinct: set[int] = set()
    visits = 0
    added = 0
    stack: list[tuple[yaml.Node, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        visits += 1
        if id(node) in distinct:  # reached again, through an alias
            added += 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
            if added > MAX_ALIAS_BYTES:
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: aliases expand the document by more than"
                                     f" {MAX_ALIAS_BYTES} bytes (refused, like an alias bomb: the API server stores at most that)")
        distinct.add(id(node))
        if visits - len(distinct) > MAX_ALIAS_EXPANSION:
            raise UnreadableSpec(f"{_where(node)}: aliases expand past {MAX_ALIAS_EXPANSION} nodes (refused, like an alias bomb)")
        if depth > MAX_NESTING:  # only aliases that refer to an enclosing node get here
            raise UnreadableSpec(f"{_where(node)}: aliases nest deeper than {MAX_NESTING} levels (a structure that contains itself?)")
        if isinstance(node, yaml.ScalarNode):
            # a plain number too long for int64 or float64 is a string to go-yaml v2, but no job holds one
            numeric = node.tag in (INT, FLOAT) or (not node.style and _GO_FLOAT.fullmatch(node.value.replace("_", "")))
            if numeric and len(node.value) > MAX_NUMBER_CHARS:
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: a number of {len(node.value)} characters"
                                     f" (at most {MAX_NUMBER_CHARS})")
            if node.tag == FLOAT and _NOT_FINITE.match(node.value):
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: {node.value} is not a JSON number"
                                     " (kubectl cannot send NaN or infinity to the API server)")
        elif isinstance(node, yaml.SequenceNode):
            stack += reversed([(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)])  # in document order
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            children: list[tuple[yaml.Node, str, int]] = []
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    children.append((value, path, depth + 1))
                    continue
                child = f"{path}.{_key_text(key)}" if path else _key_text(key)
                ident = _key_identity(key)
                if ident in first:
                    raise UnreadableSpec(f"{_where(key)}: {child}: duplicate key (first at {_where(first[ident])})")
                first[ident] = key
                children += [(key, child, depth + 1), (value, child, depth + 1)]
            stack += reversed(children)


def _text(source: str | bytes | IO) -> str:
    raw = source.read(MAX_DOCUMENT_BYTES + 1) if hasattr(source, "read") else source
    if isinstance(raw, str):
        if len(raw) > MAX_DOCUMENT_BYTES and len(raw.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
            raise UnreadableSpec(f"larger than {MAX_DOCUMENT_BYTES} bytes (1.5 MiB, etcd's default request limit)")
        if "\0" in raw:
            raise UnreadableSpec("binary data (a NUL byte), not YAML text")
        return raw
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise UnreadableSpec(f"larger than {MAX_DOCUMENT_BYTES} bytes (1.5 MiB, etcd's default request limit)")
    if b"\0" in raw:
        raise UnreadableSpec(f"binary data (a NUL byte at offset {raw.index(0)}), not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnreadableSpec(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


def load_documents(source: str | bytes | IO) -> list[Any]:
    """Every non-empty YAML document in `source`, numbers as Kubernetes reads
    them. Anything but safe, plain, bounded YAML raises UnreadableSpec with
    one line naming the problem (and where)."""
    text = _text(source)
    documents = []
    loader = None
    try:
        _check_events(text)
        loader = _LibyamlLoader(text) if yaml.__with_libyaml__ else KubernetesYamlLoader(text)
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_composed(node)
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
    except UnreadableSpec:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        said = " ".join(str(e.problem or e.context or "invalid YAML").split())
        raise UnreadableSpec(f"{where}{said}{_syntax_hint(e, text)}") from None
    except yaml.YAMLError as e:  # the reader's errors (non-printable characters) carry no mark
        raise UnreadableSpec(" ".join(str(e).split())) from None
    except (RecursionError, ValueError) as e:  # defence in depth: the checks above should catch these first
        raise UnreadableSpec(f"cannot read: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents
