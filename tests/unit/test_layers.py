"""The packages' rooms hold: no import cycle anywhere in kuberl or kuberl_trainer, and no
import that crosses the layers (issue 28): `kuberl.core` imports nothing else of kuberl;
`kuberl.operator`, `kuberl.local` and `kuberl.tools` import the core and themselves;
the trainer imports only the core. Imports inside functions count too: a cycle
postponed to call time is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"kuberl": ROOT / "operator" / "kuberl", "kuberl_trainer": ROOT / "trainer" / "kuberl_trainer"}

# what each room may import of kuberl, besides itself
ALLOWED = {
    "kuberl.core": ("kuberl.core",),
    "kuberl.operator": ("kuberl.core",),
    "kuberl.local": ("kuberl.core",),
    "kuberl.tools": ("kuberl.core",),
    "kuberl_trainer": ("kuberl.core",),
}


def modules() -> dict[str, Path]:
    out = {}
    for name, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((name, *parts))] = path
    return out


def imports_of(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The kuberl modules `module` imports (at any depth in the file), each with a line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from pkg import submodule` imports the submodule; `from mod import name` the module
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.setdefault(target, node.lineno)
    return found


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {m: imports_of(m, p, known) for m, p in known.items()}


def room(module: str) -> str:
    """kuberl.core.spec -> kuberl.core; kuberl_trainer.ppo -> kuberl_trainer; kuberl.cli -> kuberl.cli."""
    parts = module.split(".")
    if parts[0] != "kuberl":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 2 else module


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def crossings(edges: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for module, targets in sorted(edges.items()):
        mine = room(module)
        if mine not in ALLOWED:
            continue  # kuberl itself and kuberl.cli: the entry point may import every room
        for target, line in sorted(targets.items()):
            theirs = room(target)
            if theirs != mine and not theirs.startswith(ALLOWED[mine]) and target not in ("kuberl",):
                bad.append(f"{module}:{line} imports {target} ({mine} may import only itself and {', '.join(ALLOWED[mine])})")
    return bad


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_import_crosses_the_layers():
    assert crossings(graph()) == []


def test_the_rooms_are_what_the_test_checks():
    # every module of kuberl lives in a room this test knows, or is the CLI entry point
    homeless = [m for m in modules() if m.startswith("kuberl.") and room(m) not in ALLOWED and m != "kuberl.cli"]
    assert homeless == []


@pytest.mark.parametrize("edges, found", [
    ({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}}, [["a", "b", "c"]]),
    ({"a": {"b": 1}, "b": {}}, []),
])
def test_cycles_are_found(edges, found):
    assert cycles(edges) == found


def test_a_crossing_is_found():
    edges = {"kuberl.core.render": {"kuberl.operator.handlers": 7}, "kuberl_trainer.ppo": {"kuberl.local.runner": 3},
             "kuberl.operator.handlers": {"kuberl.core.render": 1}, "kuberl.cli": {"kuberl.local.runner": 1}}
    assert crossings(edges) == [
        "kuberl.core.render:7 imports kuberl.operator.handlers (kuberl.core may import only itself and kuberl.core)",
        "kuberl_trainer.ppo:3 imports kuberl.local.runner (kuberl_trainer may import only itself and kuberl.core)",
    ]


def private_uses(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """Where `module` reaches into another kuberl module's private name (`kubeapi._path`, `from .envs import _resolve`):
    a name kept private is one its module may change alone, so a caller elsewhere needs a public name or a seam."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    other_modules: set[str] = set()  # local names bound to another kuberl module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            origin = (".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
                      if node.level else node.module or "")
            for alias in node.names:
                if f"{origin}.{alias.name}" in known:
                    other_modules.add(alias.asname or alias.name)
                elif origin in known and origin != module and _private(alias.name):
                    found.append(f"{module}:{node.lineno} imports {origin}.{alias.name}")
        elif isinstance(node, ast.Import):
            other_modules.update(a.asname for a in node.names if a.asname and a.name in known)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in other_modules
                and _private(node.attr)):
            found.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_uses_another_modules_private_names():
    known = modules()
    assert [use for m, p in known.items() for use in private_uses(m, p, known)] == []


def test_a_private_use_is_found(tmp_path):
    known = {"kuberl.operator.kubeapi": tmp_path / "kubeapi.py", "kuberl.operator.handlers": tmp_path / "handlers.py"}
    known["kuberl.operator.handlers"].write_text("from . import kubeapi\nfrom .kubeapi import _secret, public\n"
                                                 "kubeapi._path('', 'v1', 'pods')\nkubeapi.resource_path()\nself._own = 1\n")
    assert private_uses("kuberl.operator.handlers", known["kuberl.operator.handlers"], known) == [
        "kuberl.operator.handlers:2 imports kuberl.operator.kubeapi._secret",
        "kuberl.operator.handlers:3 uses kubeapi._path",
    ]
