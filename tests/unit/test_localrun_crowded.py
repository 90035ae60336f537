"""`kuberl run` of a job sized for a cluster on a machine with fewer cores than ranks (the Pong examples on a laptop:
4 ranks of 64 envs on 2 cores built envs for 87 s, then a Ctrl-C waited out the grace period with no checkpoint) says
so at start, with the --set that runs it at the machine's size; the suggestion itself must validate."""

from pathlib import Path

import pytest
from kuberl.core.yamlreader import load_documents
from kuberl.local.runner import apply_overrides, crowded_note, validate_job

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def example(name: str) -> dict:
    return load_documents((EXAMPLES / name).read_text())[0]


@pytest.mark.parametrize(("name", "sets"), [
    ("pong-ppo-gpu.yaml", "--set gpusPerWorker=0 --set env.numEnvs=8"),
    ("pong-dqn-gpu.yaml", "--set gpusPerWorker=0 --set env.numEnvs=8"),
    ("gpu-ppo.yaml", "--set workers=1 --set gpusPerWorker=0 --set env.numEnvs=8"),  # 2 workers of 4 GPUs
])
def test_a_job_with_more_ranks_than_cores_is_told_how_to_run_at_this_machines_size(name, sets):
    document = example(name)
    note = crowded_note(validate_job(document), cores=2)
    assert note is not None and note.endswith(f"at this machine's size: {sets} (a run of its own: what it learns changes)")
    smaller = validate_job(apply_overrides(document, None, sets.replace("--set ", "").split()))
    assert smaller.workers * smaller.procs <= 2  # the advice runs, and fits


@pytest.mark.parametrize("name", ["cartpole-ppo.yaml", "cartpole-dqn.yaml"])
def test_a_job_whose_ranks_each_have_a_core_gets_no_note(name):
    assert crowded_note(validate_job(example(name)), cores=2) is None
