"""A "module:Class" spec.env.id whose module is here but lacks the class (`myenvs:Corridr`) passed `kuberl validate`
and `kuberl run` started its pods, which failed "cannot import 'myenvs:Corridr': module 'myenvs' has no attribute
'Corridr'". Both now read the module's source where a pod here would import it (never importing it: the author's
code runs in the pods only) and say what the trainer says, with the nearest name; where reading cannot tell (no
such module here, names made at import time) validate says so in a warning."""

from __future__ import annotations

import ast
import os
import sys

import pytest
import yaml
from kuberl import cli
from kuberl.core.envclass import (
    MAX_SOURCE_BYTES,
    Found,
    class_check,
    find_module,
    job_class_check,
    missing_attribute,
    top_level_names,
)

from tests.support.jobs import make_job

MYENVS = """\
import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box as _Box


class Corridor(gym.Env):
    observation_space = _Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, True, False, {}


try:
    from speedyenvs import Speedy
except ImportError:
    Speedy = Corridor
"""


# --- the pure parts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "position", "names", "said"), [
    ("myenvs:Corridr", 0, {"Corridor", "gym", "np"}, "module 'myenvs' has no attribute 'Corridr'; did you mean 'myenvs:Corridor'?"),
    ("myenvs:corridor", 0, {"Corridor", "Corrido"}, "did you mean 'myenvs:Corridor'?"),  # case first
    ("myenvs:Walker", 0, {"Corridor", "_Walker"}, "module 'myenvs' has no attribute 'Walker'"),  # nothing near; private never offered
    ("pkg.envs:Outer.Innr", 1, {"Inner"}, "did you mean 'pkg.envs:Outer.Inner'?"),
])
def test_the_refusal_names_the_nearest_name_as_a_whole_env_id(env_id, position, names, said):
    message = missing_attribute(env_id, "module 'myenvs'", position, names)
    assert message.startswith(f"cannot import {env_id!r}: ") and message.endswith(said), message


def test_a_modules_names_are_read_from_its_source_and_unknown_where_made_at_import_time():
    assert {"gym", "np", "_Box", "Corridor", "Speedy"} <= top_level_names(MYENVS)
    assert "reset" not in top_level_names(MYENVS)  # a method is the class's, not the module's
    assert top_level_names("import a.b as c\nx, (y, z) = 1, (2, 3)\nwith open('f') as fh: pass\n") == {"c", "x", "y", "z", "fh"}
    for dynamic in ("from gymnasium.envs import *\n", "def __getattr__(name):\n    return 1\n",
                    "globals()['Env'] = object\n", "import sys\nsys.modules[__name__] = object()\n"):
        assert top_level_names(dynamic) is None, dynamic


def nested_module(depth: int, items: int) -> str:
    """A module whose one list of `items` lists lies `depth` if-blocks deep (Python's tokenizer allows 99)."""
    ifs = [" " * d + "if 1:" for d in range(depth)]
    return "\n".join(["class Corridor: pass", *ifs, " " * depth + "x = [" + "[1]," * items + "]"]) + "\n"


def test_a_module_nested_deep_is_read_in_the_time_of_a_flat_one(monkeypatch):
    """Each statement was walked with every block inside it, and then each block again: a list 98 ifs deep was read
    98 times (a 245 KB module took 12.4 s of CPU in kuberl validate, the same list at the top 0.5 s). The nodes walked
    are counted, not timed: a timed bound failed CI when a garbage collection landed in the nested read."""
    walk, visited = ast.walk, []

    def counted_walk(node):
        for child in walk(node):
            visited.append(child)
            yield child

    monkeypatch.setattr(ast, "walk", counted_walk)
    flat, nested = nested_module(0, 20_000), nested_module(98, 20_000)
    assert {"Corridor", "x"} <= top_level_names(flat)
    flat_visits = len(visited)
    visited.clear()
    assert {"Corridor", "x"} <= top_level_names(nested)
    assert flat_visits > 2 * 20_000 and len(visited) < flat_visits + 100 * 98, (flat_visits, len(visited))
    walrus = "if 1:\n    if (y := 2):\n        for z in (w := [1]):\n            pass\n"
    assert {"y", "z", "w"} <= top_level_names(walrus)  # a walrus deep in the blocks still binds a module name


def test_a_long_elif_chain_that_python_imports_is_read():
    """Each elif is an If in the orelse of the one before: a module with 450 branches, which Python imports, was
    refused by kuberl validate ('cannot import …: RecursionError'), and kuberl run with it, the blocks read by
    recursion."""
    source = "x = 0\nif x == 0:\n    y = 0\n" + "".join(f"elif x == {i}:\n    y = {i}\n" for i in range(1, 1500))
    compile(source, "myenvs.py", "exec")  # Python's own import takes it
    assert top_level_names(source + "class Corridor: pass\n") == {"x", "y", "Corridor"}
    problem, _ = class_check("myenvs:Corridr", Found("/work/myenvs.py", source + "class Corridor: pass\n"), "")
    assert problem.message.startswith("cannot import 'myenvs:Corridr': module 'myenvs' has no attribute 'Corridr'; did you mean")


def test_a_module_too_deep_or_too_large_to_read_says_so_in_a_line(tmp_path):
    """Python's parser has a bounded stack: 200,000 unary minuses raised MemoryError with no words ('cannot import
    …: MemoryError:  (myenvs.py)'), and 2 MiB of nested lists took 9.7 s and 1 GB to parse. The import the pods
    would make fails the same way; past MAX_SOURCE_BYTES validate notes it did not read the module."""
    problem, note = class_check("myenvs:Corridor", Found("/work/myenvs.py", "class Corridor: pass\nx = " + "-" * 200_000 + "1\n"), "")
    assert note is None and problem.path == "spec.env.id"
    assert problem.message == ("cannot import 'myenvs:Corridor': MemoryError: /work/myenvs.py nests an expression or"
                               " statement deeper than Python's parser and compiler can hold")
    (tmp_path / "myenvs.py").write_text("class Corridor: pass\nx = [" + "[1]," * (MAX_SOURCE_BYTES // 4) + "]\n")
    found = find_module("myenvs", [str(tmp_path)])
    assert found.source is None
    assert class_check("myenvs:Corridor", found, "") == (None, (
        f"spec.env.id: 'myenvs:Corridor' not checked: {tmp_path / 'myenvs.py'} is larger than 256 KiB, more than an env's"
        " code: not read to check it"))


def test_class_check_refuses_a_missing_class_and_notes_what_it_cannot_tell():
    found = Found("/work/myenvs.py", MYENVS)
    assert class_check("myenvs:Corridor", found, "") == (None, None)
    assert class_check("myenvs:Corridor.Inner", found, "") == (None, None)  # past the first name: the pods' to tell
    problem, note = class_check("myenvs:Corridr", found, "")
    assert note is None and problem.path == "spec.env.id"
    assert problem.message == ("cannot import 'myenvs:Corridr': module 'myenvs' has no attribute 'Corridr'; did you mean"
                               " 'myenvs:Corridor'? (read in /work/myenvs.py)")
    problem, _ = class_check("myenvs:Corridor", Found("/work/myenvs.py", "class Corridor(:\n"), "")
    assert problem.message.startswith("cannot import 'myenvs:Corridor': SyntaxError: ") and problem.message.endswith("line 1)")
    assert class_check("pkg:sub", Found("/work/pkg/__init__.py", "", frozenset({"sub"})), "") == (None, None)
    problem, note = class_check("myenvz:Corridor", None, "not installed in this Python, no myenvz.py or package in /work")
    assert problem is None and note == ("spec.env.id: 'myenvz:Corridor' not checked: no module 'myenvz' here (not installed"
                                        " in this Python, no myenvz.py or package in /work); kuberl run here would fail to"
                                        " import it (an image that installs it runs it)")
    _, note = class_check("numpy:Foo", Found("/site/numpy/__init__.py", "def __getattr__(n):\n    pass\n"), "")
    assert note.endswith("not checked: /site/numpy/__init__.py makes its names at import time, which reading it cannot tell")


def test_a_module_is_found_where_a_pod_would_import_it_without_importing_it(tmp_path):
    (tmp_path / "myenvs.py").write_text(MYENVS)
    (tmp_path / "pkg" / "envs").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (tmp_path / "pkg" / "envs" / "__init__.py").write_text("class Maze: pass\n")
    (tmp_path / "pkg" / "envs" / "grid.py").write_text("")
    assert find_module("myenvs", [str(tmp_path)]).origin == str(tmp_path / "myenvs.py")
    found = find_module("pkg.envs", [str(tmp_path)])
    assert found.source == "class Maze: pass\n" and found.submodules == {"grid"}
    assert not (tmp_path / "imported").exists()  # pkg/__init__.py was not run to find pkg.envs
    assert find_module("nosuch", [str(tmp_path)]) is None and find_module("pkg.nosuch", [str(tmp_path)]) is None
    assert find_module("myenvs.part", [str(tmp_path)]).source is None  # a module, not a package: cannot tell
    assert find_module("sys", [str(tmp_path)], builtin=("sys",)).unread.startswith("is built into Python")


def test_a_module_in_a_directory_without_init_inside_a_package_is_found(tmp_path):
    """tests/unit has no __init__.py under tests/, which has one: `kuberl validate` of an env id
    tests.unit.diverging_envs:DivergingDiscrete ended in KeyError: 'tests' (the namespace package asked for its
    parent in sys.modules, where nothing had imported it), though the pods import it."""
    (tmp_path / "suite" / "unit").mkdir(parents=True)
    (tmp_path / "suite" / "__init__.py").write_text("")
    (tmp_path / "suite" / "unit" / "envs.py").write_text(MYENVS)
    (tmp_path / "flat" / "deeper").mkdir(parents=True)  # namespace packages all the way down
    (tmp_path / "flat" / "deeper" / "envs.py").write_text(MYENVS)
    for module in ("suite.unit.envs", "flat.deeper.envs"):
        found = find_module(module, [str(tmp_path)])
        assert found.origin == str(tmp_path / module.replace(".", "/")) + ".py" and found.source == MYENVS
    assert find_module("suite.unit", [str(tmp_path)]).submodules == {"envs"}
    assert find_module("suite.unit.nosuch", [str(tmp_path)]) is None
    spec = make_job("cartpole").with_spec(env={"id": "suite.unit.envs:Nope"}).spec()
    problems, _ = job_class_check(spec, str(tmp_path), [], sys.builtin_module_names, ())
    assert [p.path for p in problems] == ["spec.env.id"]


def test_a_package_an_editable_install_provides_is_read_where_its_finder_points(tmp_path):
    """`pip install -e` (make setup's kuberl_trainer) puts a finder on sys.meta_path and no sys.path entry: the
    cartpole-lstm example's kuberl_trainer.masked env was 'not checked: no module here', though its pods import it."""
    import importlib.util

    origin = importlib.util.find_spec("kuberl_trainer").submodule_search_locations[0]
    found = find_module("kuberl_trainer.masked", [str(tmp_path)], finders=sys.meta_path)
    assert found.origin == os.path.join(origin, "masked.py") and "CartPoleNoVelocity" in top_level_names(found.source)
    editable = not any(os.path.isdir(os.path.join(p, "kuberl_trainer")) for p in sys.path if p)
    if editable:  # on no path entry: the finders alone find it
        assert find_module("kuberl_trainer.masked", sys.path[1:]) is None
    spec = make_job("cartpole").with_spec(env={"id": "kuberl_trainer.masked:CartPoleNoVelocity"}).spec()
    assert job_class_check(spec, str(tmp_path), sys.path, sys.builtin_module_names, sys.meta_path) == ([], [])


# --- validate and run, as a user meets them --------------------------------------------------------------------------


def job_file(tmp_path, env_id):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("corridor").env(env_id).obj()))
    return str(path)


def test_validate_and_run_refuse_a_misspelt_class_as_the_trainer_does(tmp_path, monkeypatch, capsys):
    pytest.importorskip("gymnasium")
    (tmp_path / "myenvs.py").write_text(MYENVS)
    monkeypatch.chdir(tmp_path)  # the pods' working directory: `myenvs.py` beside the job file
    path = job_file(tmp_path, "myenvs:Corridr")
    assert cli.main(["validate", path]) == 1
    said = capsys.readouterr().err
    line = ("  spec.env.id: cannot import 'myenvs:Corridr': module 'myenvs' has no attribute 'Corridr'; did you mean"
            f" 'myenvs:Corridor'? (read in {tmp_path / 'myenvs.py'})")
    assert line in said.splitlines(), said
    assert cli.main(["run", path, "--dir", str(tmp_path / "runs")]) == 1
    assert line in capsys.readouterr().err.splitlines()
    assert not (tmp_path / "runs").exists()  # refused before a run directory or a pod
    # the trainer, which imports it, says the same words
    from kuberl_trainer.envs import UnknownEnv, resolve_env

    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownEnv) as refused:
        resolve_env("myenvs:Corridr")
    assert str(refused.value) == line.strip().removesuffix(f" (read in {tmp_path / 'myenvs.py'})")
    assert cli.main(["validate", job_file(tmp_path, "myenvs:Corridor")]) == 0


def test_validate_says_plainly_when_the_module_is_not_here(tmp_path, monkeypatch, capsys):
    pytest.importorskip("gymnasium")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", job_file(tmp_path, "myenvs:Corridor")]) == 0  # an image may install it
    warning = capsys.readouterr().err
    assert f"warning: spec.env.id: 'myenvs:Corridor' not checked: no module 'myenvs' here (not installed in this Python, no" \
           f" myenvs.py or package in {os.getcwd()}); kuberl run here would fail to import it" in warning, warning


def test_the_trainer_not_finding_the_module_says_where_it_looked_naming_the_module_and_the_field(tmp_path, monkeypatch):
    """`kuberl run proj/job.yaml` from the directory above `proj/myenvs.py`: the pods start where kuberl run did,
    and the trainer said only "No module named 'myenvs'"; a module the user's module imports: the line, and the pip to use."""
    from kuberl_trainer.envs import UnknownEnv, resolve_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(UnknownEnv) as refused:
        resolve_env("nosuchenvs_here:Corridor")
    assert str(refused.value) == (
        "spec.env.id: cannot import 'nosuchenvs_here:Corridor': No module named 'nosuchenvs_here' (looked in the working"
        f" directory {tmp_path} and this Python's packages: install it in the image, or under kuberl run start from the"
        " directory that holds nosuchenvs_here.py)")
    (tmp_path / "needsdep.py").write_text("import nosuchdep_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownEnv) as refused:
        resolve_env("needsdep:Corridor")
    assert str(refused.value) == (  # the line that imports it, and the pip of the Python that lacks it
        f"spec.env.id: cannot import 'needsdep:Corridor': No module named 'nosuchdep_here' (imported at {tmp_path}/needsdep.py:1;"
        f" this Python, {sys.executable}, does not have it: {sys.executable} -m pip install the package that provides"
        " nosuchdep_here, or install it in the image)")
