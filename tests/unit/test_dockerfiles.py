"""The images, without a Docker engine: hadolint over every Dockerfile, the
rules we hold them to (multi-stage, non-root, pinned, torch index a build
argument), and each build stage's own instructions replayed into a fresh
virtual environment (operator: no torch; CPU trainer: torch and the trainer,
no operator dependencies).

The CPU trainer replay installs torch from this machine's local wheel into a
fresh venv: the slow part of the unit tier (about 40 s on 2 shared cores)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ROOT / "dockerfiles"
HADOLINT = Path(sys.executable).parent / "hadolint"
IMAGES = ["operator.Dockerfile", "trainer.Dockerfile", "trainer-cuda.Dockerfile"]
VENV_IN_IMAGE = "/opt/kuberl"
OPERATOR_ONLY_MODULES = ("kopf", "aiohttp", "kubernetes", "kubernetes_asyncio")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuations joined and comment
    lines dropped, as Docker's parser does."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if current.strip():
                logical.append(current.strip())
            current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in logical]


def stages(path: Path) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(path):
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_hadolint_finds_nothing(dockerfile):
    result = subprocess.run([str(HADOLINT), "--format", "json", "--failure-threshold", "style", str(DOCKERFILES / dockerfile)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_multi_stage_non_root_pinned(dockerfile):
    build, final = stages(DOCKERFILES / dockerfile)
    assert build[0][1].endswith(" AS build") and "--from=build" in dict(final).get("COPY", "")
    user = [args for kind, args in final if kind == "USER"]
    chart = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())["operator"]["podSecurityContext"]
    assert user == [f"{chart['runAsUser']}:{chart['runAsGroup']}"], "non-root, and the uid the chart runs as"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (DOCKERFILES / dockerfile).read_text(), re.MULTILINE).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), "the base image carries an exact Python version"
    for kind, args in build:
        if kind == "RUN" and "pip install" in args:
            assert "--no-cache-dir" in args
            pinned = "-r dockerfiles/" in args or "-c dockerfiles/" in args or "--no-deps" in args
            assert pinned or re.search(r'"torch==\$\{TORCH_VERSION\}"', args), args


@pytest.mark.parametrize("requirements", ["operator-requirements.txt", "trainer-requirements.txt"])
def test_requirements_are_exact_pins_without_torch(requirements):
    lines = [line for line in (DOCKERFILES / requirements).read_text().splitlines() if line and not line.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][\w.+-]*", line) for line in lines), lines
    assert not any(line.lower().startswith(("torch==", "nvidia-")) for line in lines)


def test_operator_image_runs_kuberl_operator_and_never_torch():
    (entrypoint,) = [args for kind, args in stages(DOCKERFILES / "operator.Dockerfile")[-1] if kind == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["kuberl", "operator"]
    pins = [line.split("==")[0].lower() for line in (DOCKERFILES / "operator-requirements.txt").read_text().splitlines() if "==" in line]
    assert not [p for p in pins if p == "torch" or p.startswith("nvidia-")]


@pytest.mark.parametrize(("dockerfile", "torch_version"), [("trainer.Dockerfile", "2.13.0+cpu"), ("trainer-cuda.Dockerfile", "2.13.0+cu128")])
def test_torch_index_is_a_required_build_argument(dockerfile, torch_version):
    build = stages(DOCKERFILES / dockerfile)[0]
    args = [a for kind, a in build if kind == "ARG"]
    assert "TORCH_INDEX" in args, "no default index: an unpinned one pulls the CUDA build"
    assert f"TORCH_VERSION={torch_version}" in args
    runs = " ".join(a for kind, a in build if kind == "RUN")
    assert 'test -n "${TORCH_INDEX}"' in runs and '--index-url "${TORCH_INDEX}"' in runs
    assert "NCCL" not in dockerfile or "is_nccl_available()" in runs


def test_make_images_says_when_there_is_no_docker_engine():
    makefile = (ROOT / "Makefile").read_text()
    assert "no Docker engine reachable here" in makefile


# --- replaying the build stage --------------------------------------------------

def replay_build_stage(dockerfile: str, workdir: Path, build_args: dict[str, str]) -> Path:
    """Run the build stage's WORKDIR/ARG/ENV/COPY/RUN here, with the image's
    venv path mapped to a fresh directory; returns that venv."""
    venv = workdir / "venv"
    root = workdir / "root"
    bin_dir = workdir / "bin"
    bin_dir.mkdir(parents=True)
    # The image's `python` is a plain interpreter, not this test run's venv.
    (bin_dir / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    # PIP_COMPILE=false (pip's --no-compile): byte-compiling every installed module was most of the replay's
    # CPU (torch alone: 14 s of 23); what is installed is the same, and imports compile what they load.
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_COMPILE": "false"}
    env.pop("VIRTUAL_ENV", None)
    cwd = root
    for kind, args in stages(DOCKERFILES / dockerfile)[0][1:]:
        if kind == "WORKDIR":
            cwd = root / args.lstrip("/")
            cwd.mkdir(parents=True, exist_ok=True)
        elif kind == "ARG":
            name, _, default = args.partition("=")
            env[name] = build_args.get(name, default)
        elif kind == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
        elif kind == "COPY":
            *sources, target = shlex.split(args)
            for source in sources:
                if (ROOT / source).is_dir():  # a directory's contents land in the target
                    shutil.copytree(ROOT / source, cwd / target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
                else:
                    destination = cwd / target / Path(source).name if target.endswith("/") else cwd / target
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / source, destination)
        elif kind == "RUN":
            command = args.replace(VENV_IN_IMAGE, str(venv))
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
            assert result.returncode == 0, f"{dockerfile}: RUN {args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        else:
            raise AssertionError(f"{dockerfile}: no replay for {kind} in the build stage")
    return venv


def run_in(venv: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], capture_output=True, text=True, timeout=300,
                          check=False, env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}, cwd="/")


def test_operator_image_install_steps_give_kuberl_without_torch(tmp_path):
    venv = replay_build_stage("operator.Dockerfile", tmp_path, {})
    assert run_in(venv, "kuberl", "--help").returncode == 0
    operator_help = run_in(venv, "kuberl", "operator", "--help")
    assert operator_help.returncode == 0 and "--peering" in operator_help.stdout
    no_torch = run_in(venv, "python", "-c", "import torch")
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    assert run_in(venv, "python", "-c", "import kopf, kubernetes_asyncio, kuberl.operator.handlers").returncode == 0
    frozen = run_in(venv, "pip", "freeze", "--exclude", "kuberl").stdout.split()
    pinned = [line for line in (DOCKERFILES / "operator-requirements.txt").read_text().splitlines() if "==" in line]
    assert sorted(frozen, key=str.lower) == sorted(pinned, key=str.lower), "the pins are the whole closure"


def test_cpu_trainer_image_install_steps_give_a_working_trainer(tmp_path, capsys):
    # This machine reaches no torch index: an empty one, so torch==2.13.0+cpu comes from the local wheel pip is configured with.
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    started = time.monotonic()
    venv = replay_build_stage("trainer.Dockerfile", tmp_path, {"TORCH_INDEX": empty_index.as_uri()})
    with capsys.disabled():
        print(f"\n  CPU trainer image install replayed into a fresh venv in {time.monotonic() - started:.0f} s")
    check = run_in(venv, "python", "-c", "import torch, kuberl_trainer, gymnasium; print(torch.__version__, torch.distributed.is_gloo_available())")
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == ["2.13.0+cpu", "True"]
    trainer_help = run_in(venv, "python", "-m", "kuberl_trainer", "--help")
    assert trainer_help.returncode == 0 and "--config" in trainer_help.stdout
    # The trainer carries kuberl's core only: the operator's dependencies are kuberl[operator]'s.
    for module in OPERATOR_ONLY_MODULES:
        missing = run_in(venv, "python", "-c", f"import {module}")
        assert missing.returncode != 0 and f"No module named '{module}'" in missing.stderr, f"{module} is in the trainer image"
    assert run_in(venv, "pip", "check").returncode == 0
    no_operator = run_in(venv, "kuberl", "operator")
    assert no_operator.returncode == 1 and "Traceback" not in no_operator.stderr, no_operator.stderr
    assert no_operator.stderr.strip().count("\n") == 0 and "pip install 'kuberl[operator]'" in no_operator.stderr
