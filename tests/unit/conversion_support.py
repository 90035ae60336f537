"""What test_convert.py and test_trainjob.py both ask of a converter: any value at any field of a
document it takes is converted or refused with a field path, never a traceback, and the document is
left as it was."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from kuberl.tools.convert import NotConvertible

# A value of every JSON type, and the odd shapes (empty, null inside, mixed) that trip a careless reader.
JUNK = [None, "x", 0, -1, True, [], {}, [None], {"a": None}, 1.5, [1, "x"]]


def leaf_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path into `value` (itself first, then each mapping key and list index, depth first)."""
    yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from leaf_paths(child, (*path, key))


def assert_any_junk_anywhere_is_converted_or_refused(doc: dict, convert: Callable[[Any], Any]) -> None:
    """`convert` on `doc` with each JUNK value put at each of its paths: a result, or NotConvertible whose
    every problem has a path; the document untouched either way."""
    for path in list(leaf_paths(doc))[1:]:
        for junk in JUNK:
            hostile = copy.deepcopy(doc)
            node = hostile
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = junk
            before = copy.deepcopy(hostile)
            try:
                convert(hostile)
            except NotConvertible as e:
                assert e.problems and all(p.path for p in e.problems)
            assert hostile == before, f"{convert.__name__} changed its input at {path}"
