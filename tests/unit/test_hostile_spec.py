"""Hostile and careless job specs a shared cluster's tenants can write: each row is refused by
`validate_job` with the field's path, before the operator renders or creates anything."""

import json

import pytest
from kuberl.spec import MAX_GANG_TEMPLATE_BYTES, InvalidJob, validate_job

from tests.support.jobs import make_job


def sidecar_template(json_bytes: int) -> dict:
    """A template whose JSON is about `json_bytes` long: one sidecar with one big env value."""
    template = {"spec": {"containers": [{"name": "side", "image": "busybox", "env": [{"name": "PAD", "value": ""}]}]}}
    pad = json_bytes - len(json.dumps(template, separators=(",", ":")))
    template["spec"]["containers"][0]["env"][0]["value"] = "x" * max(pad, 0)
    return template


def problems(job: dict) -> list[str]:
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    return [str(p) for p in refused.value.problems]


# The operator renders every pod of a gang in one go (handlers._create_pods): a 1.3 MB template
# x 1,024 workers took 3.6 GB and 31 s of one process, against the chart's 256 MiB operator limit;
# the API server would then store 1,024 pods of 1.3 MB each. One job could take down the operator.
GANG_SIZES = {
    "1.3 MB template x 1024 workers": (1_300_000, 1024),
    "just over the budget": (MAX_GANG_TEMPLATE_BYTES // 64 + 1024, 64),
}


@pytest.mark.parametrize(("template_bytes", "workers"), GANG_SIZES.values(), ids=GANG_SIZES.keys())
def test_a_gang_of_huge_templates_is_refused(template_bytes, workers):
    job = make_job("hog").workers(workers).template(sidecar_template(template_bytes)).obj()
    [problem] = problems(job)
    assert problem.startswith("spec.template: ")
    assert f"x spec.workers {workers}" in problem and str(MAX_GANG_TEMPLATE_BYTES) in problem


@pytest.mark.parametrize(("template_bytes", "workers"), [(1_300_000, 8), (16 * 1024, 1024), (4096, 1024)])
def test_large_templates_or_large_gangs_alone_pass(template_bytes, workers):
    assert validate_job(make_job("fine").workers(workers).template(sidecar_template(template_bytes)).obj()).workers == workers
