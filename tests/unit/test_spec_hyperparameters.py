"""Hyperparameters in the spec: the block of the job's algorithm from one table,
none without an algorithm, and another algorithm's fields named as such."""

import pytest
from kuberl.core.rules import parse_spec
from kuberl.core.spec import (
    ALGORITHM_BLOCKS,
    DQNConfig,
    PPOConfig,
    SACConfig,
    TD3Config,
)
from kuberl.core.validation import InvalidJob

from tests.support.jobs import make_job


def test_the_algorithms_block_is_a_table_lookup_defaulted_when_omitted():
    assert make_job().minimal().spec().hyperparameters == PPOConfig()
    assert make_job().minimal().algorithm("dqn", batchSize=32).spec().hyperparameters == DQNConfig(batch_size=32)
    assert make_job().minimal().algorithm("sac", tau=0.01).spec().hyperparameters == SACConfig(tau=0.01)
    assert make_job().minimal().algorithm("td3", policyDelay=3).spec().hyperparameters == TD3Config(policy_delay=3)
    assert set(ALGORITHM_BLOCKS) == {"ppo", "dqn", "sac", "td3"}


def test_a_job_without_an_algorithm_has_no_hyperparameters():
    """A custom trainer leaves algorithm unset: it gets no algorithm's config (it got DQNConfig())."""
    custom = make_job("byo").custom_trainer(
        {"spec": {"containers": [{"name": "trainer", "command": ["torchrun", "/app/train.py"]}]}}).spec()
    assert custom.algorithm is None and custom.hyperparameters is None


def test_a_block_holding_the_other_algorithms_fields_is_named_as_such():
    with pytest.raises(InvalidJob) as refused:
        parse_spec({"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "totalTimesteps": 1000,
                    "dqn": {"numSteps": 128, "clipCoef": 0.1}})
    assert [str(p) for p in refused.value.problems] == [
        "spec.dqn.numSteps: unknown field: a hyperparameter of algorithm ppo, not dqn (spec.ppo.numSteps)",
        "spec.dqn.clipCoef: unknown field: a hyperparameter of algorithm ppo, not dqn (spec.ppo.clipCoef)",
    ]
    with pytest.raises(InvalidJob) as refused:  # a plain typo keeps its spelling hint
        parse_spec({"algorithm": "dqn", "env": {"id": "CartPole-v1"}, "totalTimesteps": 1000, "dqn": {"nSteps": 3}})
    assert [str(p) for p in refused.value.problems] == ["spec.dqn.nSteps: unknown field; did you mean 'nStep'?"]


def test_kuberl_validate_refuses_a_batch_larger_than_the_buffer_before_any_pod(tmp_path, capsys):
    """Issue 28's case: it used to pass validation, schedule pods, and fail in the trainer."""
    import yaml
    from kuberl.cli import main

    job = make_job().minimal().algorithm("dqn", bufferSize=10, batchSize=128, learningStarts=5).obj()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 1
    assert "spec.dqn.batchSize: expected at most bufferSize 10 (got 128)" in capsys.readouterr().err


@pytest.mark.parametrize("ppo, env, expected", [
    ({"lstm": {}, "learnWhileCollecting": True}, {}, ("spec.ppo.learnWhileCollecting: a recurrent policy collects with the LSTM"
     " state it carries for each env, which a copy collecting ahead would not; spec.ppo.lstm needs learnWhileCollecting: false")),
    ({"lstm": {"hiddenSize": 16}, "numMinibatches": 4}, {"numEnvs": 2}, ("spec.ppo.numMinibatches: expected at most"
     " env.numEnvs = 2 with lstm: a recurrent minibatch is whole envs (got 4)")),
], ids=["learning-while-collecting", "more-minibatches-than-envs"])
def test_kuberl_validate_refuses_what_a_recurrent_policy_cannot_do_naming_the_field(tmp_path, capsys, ppo, env, expected):
    import yaml
    from kuberl.cli import main

    job = make_job().minimal().algorithm("ppo", **ppo).obj()
    job["spec"]["env"].update(env)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 1
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("block, field, meant", [
    ("ppo", "learning_rate", "learningRate"), ("ppo", "num_steps", "numSteps"), ("dqn", "batch_size", "batchSize")])
def test_a_python_field_name_is_refused_naming_the_yaml_one(block, field, meant):
    """SB3's habit, `learning_rate: 0.001`, passed `kuberl validate` and trained locally with that rate (the model
    also takes its Python names), while the CRD's schema has only `learningRate`: the API server refuses the field
    (kubectl's default --validate=strict, the server's fieldValidation=Strict since Kubernetes 1.27) or prunes it
    (apiextensions-apiserver's structural pruning), so the cluster trained with the default rate, or nothing."""
    from kuberl.core.crd import crd

    properties = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][block]["properties"]
    assert meant in properties and field not in properties
    with pytest.raises(InvalidJob) as refused:
        parse_spec({"algorithm": block, "env": {"id": "CartPole-v1"}, "totalTimesteps": 1000, block: {field: 1}})
    assert [str(p) for p in refused.value.problems] == [f"spec.{block}.{field}: unknown field; did you mean {meant!r}?"]
    with pytest.raises(InvalidJob, match=r"spec\.total_timesteps: unknown field; did you mean 'totalTimesteps'\?"):
        parse_spec({"algorithm": block, "env": {"id": "CartPole-v1"}, "total_timesteps": 1000})



def test_a_field_like_no_other_points_at_the_spec_reference():
    """`lr: 0.001` under ppo was "unknown field (check the spelling; `kubectl explain rltj.spec` lists the fields)":
    on a laptop with no cluster, `kubectl explain` has no CRD to explain."""
    with pytest.raises(InvalidJob) as refused:
        parse_spec({"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "totalTimesteps": 1000, "ppo": {"lr": 0.001}})
    [problem] = refused.value.problems
    assert problem.path == "spec.ppo.lr" and "docs/spec-reference.md lists the fields" in problem.message, problem


@pytest.mark.parametrize("block", ["dqn", "sac", "td3"])
def test_a_train_frequency_no_iteration_could_reach_is_refused_naming_it(block):
    """An off-policy iteration steps trainFrequency env steps per rank before it learns, reports progress or reads a
    stop: trainFrequency had no upper bound, and one of 10**15 stepped the envs for ever in the first iteration, past
    its budget, deaf to SIGTERM, until the operator took the silent gang for a stalled one. At most 100,000 (as
    PPO's numSteps), in the CRD too."""
    from kuberl.core.crd import crd

    def job(frequency: int) -> dict:
        return {"algorithm": block, "env": {"id": "CartPole-v1" if block == "dqn" else "Pendulum-v1"},
                "totalTimesteps": 1000, block: {"trainFrequency": frequency}}

    with pytest.raises(InvalidJob) as refused:
        parse_spec(job(10**15))
    assert [str(p) for p in refused.value.problems] == [
        f"spec.{block}.trainFrequency: expected at most 100000 (got 1000000000000000)"]
    assert parse_spec(job(100_000)).hyperparameters.train_frequency == 100_000
    properties = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][block]["properties"]
    assert properties["trainFrequency"]["maximum"] == 100_000
