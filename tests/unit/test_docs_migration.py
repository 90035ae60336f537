"""docs/migrating-from-pytorchjob.md: its RLTrainingJob is valid and renders
the pods its PyTorchJob describes (same image, command, env, volumes, world
size), it is exactly what `kuberl convert` prints for that PyTorchJob (with the
notes the guide shows), and the README links it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kuberl.core import names
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import validate_job
from kuberl.tools.convert import convert

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migrating-from-pytorchjob.md"


def manifests() -> tuple[dict, dict]:
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.DOTALL)]
    (pytorchjob,) = [b for b in blocks if b["kind"] == "PyTorchJob"]
    (rltj,) = [b for b in blocks if b["kind"] == "RLTrainingJob"]
    return pytorchjob, rltj


def test_the_guides_rltrainingjob_runs_the_pytorchjobs_pods():
    pytorchjob, rltj = manifests()
    validate_job(rltj)
    replicas = pytorchjob["spec"]["pytorchReplicaSpecs"]
    nproc = int(pytorchjob["spec"]["nprocPerNode"])
    (theirs,) = replicas["Worker"]["template"]["spec"]["containers"]
    pods = [o for o in render_job(rltj, rltj["metadata"]["namespace"], PLACEHOLDER_UID) if o["kind"] == "Pod"]
    assert len(pods) == sum(r["replicas"] for r in replicas.values())
    for rank, pod in enumerate(pods):
        ours = next(c for c in pod["spec"]["containers"] if c["name"] == names.TRAINER_CONTAINER)
        env = {e["name"]: e.get("value") for e in ours["env"]}
        assert (ours["image"], ours["command"]) == (theirs["image"], theirs["command"])
        assert env["NCCL_DEBUG"] == "WARN"
        assert (env["WORLD_SIZE"], env["RANK"], env["PET_NPROC_PER_NODE"]) == (str(len(pods) * nproc), str(rank), str(nproc))
        assert {"name": "data", "mountPath": "/data"} in ours["volumeMounts"]
        assert ours["resources"]["limits"]["cpu"] == theirs["resources"]["limits"]["cpu"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "pong-replays"}
    policy = pytorchjob["spec"]["runPolicy"]
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert rltj["spec"]["runPolicy"][field] == policy[field]
    (group,) = [o for o in render_job(rltj, rltj["metadata"]["namespace"], PLACEHOLDER_UID) if o["kind"] == "PodGroup"]
    assert group["spec"]["queue"] == policy["schedulingPolicy"]["queue"]


def test_kuberl_convert_prints_the_guides_rltrainingjob_and_the_guides_notes():
    """One source of truth: the right-hand manifest is the converter's output, and so are the notes."""
    pytorchjob, rltj = manifests()
    job, notes = convert(pytorchjob)
    assert job == rltj
    (shown,) = re.findall(r"```text\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    assert shown.splitlines() == [f"pytorchjob.yaml: PyTorchJob 'pong-ppo': {note}" for note in notes]


def test_the_readme_links_the_guide_and_the_guide_links_the_contract():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/migrating-from-pytorchjob.md)" in readme
    assert "(environment-contract.md)" in GUIDE.read_text()
    assert (ROOT / "docs" / "environment-contract.md").read_text().startswith("# The environment contract\n")


def console_blocks() -> list[tuple[str, list[str]]]:
    """The guide's ```console blocks: the `$ kuberl ...` line and the lines shown after it."""
    blocks = re.findall(r"```console\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    out = []
    for block in blocks:
        command, *shown = block.rstrip("\n").split("\n")
        out.append((command.removeprefix("$ "), shown))
    return out


@pytest.mark.parametrize(("command", "shown"), console_blocks(), ids=[c for c, _ in console_blocks()])
def test_every_command_in_the_guide_prints_the_lines_shown(command, shown):
    """Run from docs/, as the guide says; the lines shown are among stdout and stderr's, in order."""
    argv = shlex.split(command)
    assert argv[0] == "kuberl"
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", *argv[1:]], cwd=GUIDE.parent, capture_output=True,
                          text=True, timeout=120, check=False)
    printed = iter((done.stderr + done.stdout).splitlines())
    for line in shown:
        if line != "…":
            assert any(p == line for p in printed), f"{line!r} not printed by {command!r}:\n{done.stderr}"
