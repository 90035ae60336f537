"""A "module:Class" spec.env.id checked without running the user's code: the module's source is found
where the trainer's `importlib.import_module` would find it here and read with `ast`, so `kuberl validate`
and `kuberl run` say what the trainer would say at start ("cannot import 'myenvs:Corridr': module 'myenvs'
has no attribute 'Corridr'; did you mean 'myenvs:Corridor'?") before any pod starts, and say plainly when
they cannot tell (a module not found here, a compiled one, names made at import time).

`missing_attribute` words the refusal for both: the trainer, which has the module, passes `dir()` of it.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

from .validation import Problem

# A module source larger than this is not read to check a file (a generated table, not an env's code): Python's
# parser holds about 500 bytes a byte of dense source (2 MiB of nested list literals: 3.4 s and 1 GB to parse).
MAX_SOURCE_BYTES = 256 * 1024


def split_env_id(env_id: str) -> tuple[str, list[str]]:
    """("pkg.mod", ["Outer", "Inner"]) of "pkg.mod:Outer.Inner", as the trainer's resolve_env reads it."""
    module, _, attributes = env_id.partition(":")
    return module, attributes.split(".")


def missing_attribute(env_id: str, owner: str, position: int, candidates: Iterable[str]) -> str:
    """The trainer's words for a "module:Class" whose module (or class, for a dotted Class) has no attribute
    at `position` of the Class part, with the nearest of `candidates` (the names it has) written as the whole
    env id to put in its place."""
    module, attributes = split_env_id(env_id)
    name = attributes[position]
    public = sorted({c for c in candidates if not c.startswith("_")})
    same_case = [c for c in public if c.lower() == name.lower()]
    close = same_case or difflib.get_close_matches(name, public, n=3, cutoff=0.6)
    head = module + ":" + "".join(f"{a}." for a in attributes[:position])  # "myenvs:", "myenvs:Outer."
    hint = f"; did you mean {' or '.join(repr(head + c) for c in close)}?" if close else ""
    return f"cannot import {env_id!r}: {owner} has no attribute {name!r}{hint}"


def top_level_names(source: str) -> frozenset[str] | None:
    """The names a module's source binds when imported (classes, functions, assignments, imports), at its
    top level and inside top-level if/try/with/for blocks; None when its names cannot be told by reading it
    (`from x import *`, a module `__getattr__`, `globals()` or `sys.modules` written to)."""
    tree = ast.parse(source)
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    pending: list[Sequence[ast.stmt]] = [tree.body]  # blocks still to read: a stack, not recursion, as an elif
    while pending:  # chain nests each branch in the one before (450 elifs, which Python imports, were a RecursionError)
        for node in pending.pop():
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name == "__getattr__" and not isinstance(node, ast.ClassDef):
                    return None
                names.add(node.name)
            elif isinstance(node, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    return None
                names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                bind(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
            scope = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))  # its body binds its own names
            # the walrus targets of this statement's own parts: its blocks' statements are read (and walked) in
            # turn, and walking them here as well read a block nested n deep n times (99 ifs deep: 28 s for 400 KB)
            for walrus in (n for part in ([node] if scope else _own_parts(node)) for n in ast.walk(part)
                           if isinstance(n, ast.NamedExpr)):
                bind(walrus.target)
            if not scope:
                pending += [getattr(node, field, []) for field in ("body", "orelse", "finalbody")]
                pending += [handler.body for handler in getattr(node, "handlers", [])]

    dynamic = any(isinstance(n, ast.Name) and n.id == "globals" for n in ast.walk(tree)) or "sys.modules[" in source
    return None if dynamic else frozenset(names)


_BLOCKS = frozenset({"body", "orelse", "finalbody", "handlers"})


def _own_parts(statement: ast.stmt) -> list[ast.AST]:
    """The parts of `statement` that are not its blocks of statements (an if's test, a for's target and iterable,
    an except clause's type; a match's cases stay parts: `top_level_names` does not visit them)."""
    parts: list[ast.AST] = []
    for name, value in ast.iter_fields(statement):
        if name not in _BLOCKS:
            parts += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST)]
    parts += [h.type for h in getattr(statement, "handlers", []) if h.type is not None]
    return parts


@dataclass(frozen=True)
class Found:
    """A module's source as the trainer would import it here: its file and text (None: not readable as
    Python source), and for a package the names of its submodules (attributes once anything imports them)."""
    origin: str
    source: str | None
    submodules: frozenset[str] = frozenset()
    unread: str = "is not Python source that can be read here"  # why `source` is None


def find_module(module: str, search_path: Sequence[str], builtin: Collection[str] = (),
                finders: Sequence[Any] = ()) -> Found | None:
    """Where `import module` finds it on `search_path` (the pods' sys.path: the directory they run from, then
    this interpreter's), without importing anything, a package's __init__ included; None when not found.
    `builtin`: the modules built into this Python (sys.builtin_module_names), which have no file. `finders`:
    this interpreter's sys.meta_path, asked for a top-level package that is on no path entry (an editable
    install's finder: `pip install -e`, as `make setup` installs kuberl_trainer); a finder only locates."""
    spec, locations = None, list(search_path)
    parts = module.split(".")
    if parts[0] in builtin:
        return Found(parts[0], None, unread="is built into Python: it has no source to read")
    for i in range(len(parts)):
        spec = _path_spec(".".join(parts[: i + 1]), locations)
        if spec is None and i == 0:
            spec = _installed_elsewhere(parts[0], finders)
        if spec is None:
            return None
        locations = list(spec.submodule_search_locations or [])
        if i + 1 < len(parts) and not locations:  # os.path: a module, not a package, that sets sys.modules itself
            return Found(spec.origin or parts[0], None, unread=f"is a module, not a package: reading it cannot tell {module!r}")
    assert spec is not None
    submodules = frozenset(
        name.removesuffix(".py") for where in locations if os.path.isdir(where) for name in os.listdir(where)
        if (name.endswith(".py") and name != "__init__.py") or os.path.isfile(os.path.join(where, name, "__init__.py")))
    origin = spec.origin or module
    if not origin.endswith(".py") or not os.path.isfile(origin):
        return Found(origin, None, submodules)
    with open(origin, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        return Found(origin, None, submodules, unread=f"is larger than {MAX_SOURCE_BYTES // 1024} KiB, more than an env's code: not read to check it")
    return Found(origin, data.decode("utf-8", "replace"), submodules)


def _path_spec(name: str, locations: Sequence[str]) -> ModuleSpec | None:
    """PathFinder's spec of `name` on `locations`, or None. A namespace package (a directory without __init__.py,
    as tests/unit under tests/) below a package nothing imported makes PathFinder read its parent in sys.modules,
    a KeyError here: its spec then says what the import system would find, the locations' own such directories."""
    try:
        return PathFinder.find_spec(name, locations)
    except KeyError:
        last = name.rpartition(".")[2]
        spec = ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [os.path.join(where, last) for where in locations
                                           if os.path.isdir(os.path.join(where, last))]
        return spec


def _installed_elsewhere(name: str, finders: Sequence[Any]) -> Any:
    """The spec of top-level `name` from a finder of sys.meta_path other than the path's own (searched already)."""
    for finder in finders:
        if finder is PathFinder or not hasattr(finder, "find_spec"):
            continue
        with contextlib.suppress(ImportError, ValueError, AttributeError):
            spec = finder.find_spec(name, None)
            if spec is not None and spec.origin not in (None, "built-in", "frozen"):
                return spec
    return None


def class_check(env_id: str, found: Found | None, where: str) -> tuple[Problem | None, str | None]:
    """(the refusal the trainer would meet, or a note saying why it cannot be told here) of a "module:Class"
    env id whose module `find_module` found (`found`), or did not (None; `where` says where it looked)."""
    module, attributes = split_env_id(env_id)
    if found is None:
        return None, (f"spec.env.id: {env_id!r} not checked: no module {module!r} here ({where}); kuberl run here would"
                      " fail to import it (an image that installs it runs it)")
    if found.source is None:
        return None, f"spec.env.id: {env_id!r} not checked: {found.origin} {found.unread}"
    try:
        names = top_level_names(found.source)
    except (RecursionError, MemoryError) as e:  # Python's own import fails there too: its parser's stack is bounded
        return Problem("spec.env.id", f"cannot import {env_id!r}: {type(e).__name__}: {found.origin} nests an expression"
                                      " or statement deeper than Python's parser and compiler can hold"), None
    except (SyntaxError, ValueError) as e:
        line = f", line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else ""
        return Problem("spec.env.id", f"cannot import {env_id!r}: {type(e).__name__}: {e.args[0] if e.args else e}"
                                      f" ({found.origin}{line})"), None
    if names is None:
        return None, (f"spec.env.id: {env_id!r} not checked: {found.origin} makes its names at import time, which"
                      " reading it cannot tell")
    if attributes[0] in names or attributes[0] in found.submodules:
        return None, None  # a nested Class past the first name is the user's code to run, not to read
    message = missing_attribute(env_id, f"module {module!r}", 0, names | found.submodules)
    return Problem("spec.env.id", f"{message} (read in {found.origin})"), None


def pods_search_path(cwd: str, interpreter_path: Sequence[str]) -> list[str]:
    """The sys.path a pod's `python -m kuberl_trainer...` gets here: the directory it runs from first, then this
    interpreter's (`sys.path` without its first entry, the CLI script's own directory)."""
    return [cwd, *[p for p in interpreter_path[1:] if p]]


def job_class_check(spec: object, cwd: str, interpreter_path: Sequence[str],
                    builtin: Collection[str] = (), finders: Sequence[Any] = ()) -> tuple[list[Problem], list[str]]:
    """`class_check` of a parsed job whose kuberl trainer makes a "module:Class" env, its module looked for as
    a pod here looks (`pods_search_path`); nothing for a gymnasium id or for trainer: custom. `builtin`:
    sys.builtin_module_names; `finders`: sys.meta_path (find_module). Returns (problems, notes)."""
    if spec.trainer != "kuberl" or spec.env is None or ":" not in spec.env.id:  # type: ignore[attr-defined]
        return [], []  # trainer: custom has no env block at all
    env_id = spec.env.id  # type: ignore[attr-defined]
    module, _ = split_env_id(env_id)
    found = None
    if module and all(part.isidentifier() for part in module.split(".")):
        with contextlib.suppress(OSError, ImportError, ValueError):
            found = find_module(module, pods_search_path(cwd, interpreter_path), builtin, finders)
    problem, note = class_check(env_id, found, f"not installed in this Python, no {module.split('.')[0]}.py or package in {cwd}")
    return [problem] if problem else [], [note] if note else []
