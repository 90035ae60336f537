"""Smoke tests of the spec model; the full mutation table lives in test_spec.py."""

import pytest
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job

VALID = make_job("cartpole").minimal().obj()


def test_valid_job_is_defaulted():
    spec = validate_job(VALID)
    assert spec.procs == 1 and spec.world_size == 1
    assert spec.hyperparameters.num_steps == 32


def test_unknown_hyperparameter_is_named():
    job = {**VALID, "spec": {**VALID["spec"], "ppo": {"learningRat": 0.1}}}
    with pytest.raises(InvalidJob) as e:
        validate_job(job)
    assert [p.path for p in e.value.problems] == ["spec.ppo.learningRat"]
