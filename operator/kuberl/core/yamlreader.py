"""A kubectl-compatible YAML reader: the documents kubectl would send, read with
bounds on size, nesting, aliases and numbers, and tags and keys checked as
sigs.k8s.io/yaml reads them; anything else is `UnreadableSpec`."""

from __future__ import annotations

import re
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


class KubernetesYamlLoader(yaml.SafeLoader):
    """YAML read as kubectl reads it: `1e-3` is a number (YAML 1.2), where
    PyYAML's YAML 1.1 rules would make it a string the strict model refuses.
    `load_documents` bounds nesting and tags (`_check_events`) before it composes."""


KubernetesYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def _kubectl_float(loader: yaml.SafeLoader, node: yaml.Node) -> float | int:
    """kubectl sends YAML as JSON, where an integral float (5e5, 2.0) is written
    as an integer: the API server sees 500000, so `totalTimesteps: 5e5` is fine."""
    value = loader.construct_yaml_float(node)
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


KubernetesYamlLoader.add_constructor("tag:yaml.org,2002:float", _kubectl_float)

MERGE_TAG = "tag:yaml.org,2002:merge"


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


KubernetesYamlLoader.flatten_mapping = _flatten_mapping_as_kubectl
# go-yaml v2 (kubectl) keeps a timestamp-looking scalar a string when decoding into interface{}:
# `args: [2024-01-01T00:00:00Z]` must reach the pod as written, not as a datetime.
KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in KubernetesYamlLoader.yaml_implicit_resolvers.items()
}


if yaml.__with_libyaml__:

    class _LibyamlLoader(yaml.CSafeLoader):
        """KubernetesYamlLoader's resolvers and constructors over libyaml's
        parser (four times faster on a 1.5 MiB file); used only after
        `_check_events` bounded nesting and tags: libyaml composes unchecked."""

        yaml_implicit_resolvers = KubernetesYamlLoader.yaml_implicit_resolvers
        yaml_constructors = KubernetesYamlLoader.yaml_constructors
        flatten_mapping = _flatten_mapping_as_kubectl


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
    """What a key becomes once built: `1`, `0x1` and `1.0` (or `true` and `1`) are one
    Python key, so the second would silently replace the first."""
    if isinstance(key, yaml.ScalarNode):
        try:
            return ("value", _KEY_BUILDER.construct_object(key))  # `null` and `~` are one key (None) too
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
            numeric = node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
            if numeric and len(node.value) > MAX_NUMBER_CHARS:
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: a number of {len(node.value)} characters"
                                     f" (at most {MAX_NUMBER_CHARS})")
            if node.tag == "tag:yaml.org,2002:float" and _NOT_FINITE.match(node.value):
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
        raise UnreadableSpec(f"{where}{' '.join(str(e.problem or e.context or 'invalid YAML').split())}") from None
    except yaml.YAMLError as e:  # the reader's errors (non-printable characters) carry no mark
        raise UnreadableSpec(" ".join(str(e).split())) from None
    except (RecursionError, ValueError) as e:  # defence in depth: the checks above should catch these first
        raise UnreadableSpec(f"cannot read: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents
