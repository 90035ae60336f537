"""The spec validator: every bad input is named by its exact path, with a
specific message; `kuberl validate` reports them all; random mutations never
escape as anything but InvalidJob."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kuberl.cli import registered_env_ids
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import (
    env_id_problem,
    immutable_changes,
    parse_spec,
    validate_job,
)
from kuberl.core.spec import ALGORITHM_BLOCKS, JobSpec
from kuberl.core.validation import InvalidJob
from kuberl.core.yamlreader import load_documents

from tests.support.jobs import DELETE, make_job, with_field

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "cartpole-ppo.yaml"

MINIMAL = make_job("cartpole").minimal().obj()
FULL = (
    make_job("pendulum-dqn")
    .algorithm("dqn", learningRate=0.0005, bufferSize=10000, hiddenSizes=[64, 64])
    .env("CartPole-v1", numEnvs=4, kwargs={"max_episode_steps": 200})
    .with_spec(
        totalTimesteps=200000,
        success={"targetReturn": 195, "evalEpisodes": 5},
        workers=4,
        gpusPerWorker=2,
        procsPerWorker=2,
        resources={"requests": {"memory": "8Gi"}, "limits": {"cpu": 4}},
        nodeSelector={"pool": "gpu"},
        labels={"team": "rl"},
    )
    .template({"spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}]}]}})
    .with_spec(checkpoint={"claimName": "shared", "keep": 2})
    .run_policy(backoffLimit=5, stallTimeoutSeconds=300)
    .queue("team-a")
    .metrics_port(9100)
    .obj()
)
VALID = {"minimal": MINIMAL, "full": FULL, "example": yaml.safe_load(EXAMPLE.read_text())}

# (valid base, path to set, value, the exact path reported, words the message must contain)
MUTATIONS = [
    ("minimal", "spec.env", DELETE, "spec.env", "required"),
    ("minimal", "spec.env.id", DELETE, "spec.env.id", "required"),
    ("minimal", "spec.algorithm", DELETE, "spec.algorithm", "required"),
    ("minimal", "spec.totalTimesteps", DELETE, "spec.totalTimesteps", "required"),
    ("minimal", "spec", DELETE, "spec", "required"),
    ("minimal", "metadata.name", DELETE, "metadata.name", "required"),
    ("minimal", "spec.workers", "2", "spec.workers", "integer"),
    ("minimal", "spec.workers", True, "spec.workers", "integer"),
    ("minimal", "spec.workers", 0, "spec.workers", "at least 1"),
    ("minimal", "spec.workers", 5000, "spec.workers", "at most 1024"),
    ("minimal", "spec.totalTimesteps", -5, "spec.totalTimesteps", "at least 1"),
    ("minimal", "spec.env.numEnvs", "eight", "spec.env.numEnvs", "integer"),
    ("minimal", "spec.env", "CartPole-v1", "spec.env", "object"),
    ("minimal", "spec.env.id", "Cart Pole", "spec.env.id", "gymnasium id"),
    ("minimal", "spec.algorithm", "a2c", "spec.algorithm", "'ppo', 'dqn', 'sac' or 'td3'"),
    ("minimal", "spec.ppo", {"learningRate": "fast"}, "spec.ppo.learningRate", "number"),
    ("minimal", "spec.ppo", {"learningRat": 0.1}, "spec.ppo.learningRat", "did you mean 'learningRate'"),
    ("minimal", "spec.ppo", {"hiddenSizes": [64, 0]}, "spec.ppo.hiddenSizes[1]", "at least 1"),
    ("minimal", "spec.ppo", {"hiddenSizes": [64] * 9}, "spec.ppo.hiddenSizes", "at most 8"),
    ("minimal", "spec.ppo", {"annealLr": "yes"}, "spec.ppo.annealLr", "true or false"),
    ("minimal", "spec.ppo", {"clipCoef": 0}, "spec.ppo.clipCoef", "more than 0"),
    ("full", "spec.dqn.nStep", 1.5, "spec.dqn.nStep", "integer"),
    ("full", "spec.dqn.gamma", 1.5, "spec.dqn.gamma", "at most 1"),
    ("full", "spec.dqn.epsilon", 0.1, "spec.dqn.epsilon", "unknown field"),
    ("minimal", "spec.dqn", {}, "spec.dqn", "algorithm: dqn"),
    ("full", "spec.algorithm", "ppo", "spec.dqn", "algorithm: dqn"),
    ("minimal", "spec.bogus", 1, "spec.bogus", "unknown field"),
    ("minimal", "spec.runPolicy", {"backofLimit": 1}, "spec.runPolicy.backofLimit", "did you mean 'backoffLimit'"),
    ("minimal", "spec.success", {"targetReturn": "high"}, "spec.success.targetReturn", "number"),
    ("minimal", "spec.checkpoint", {"size": "lots"}, "spec.checkpoint.size", "quantity"),
    # ParseQuantity reads an exponent with strconv.ParseInt (apimachinery api/resource/suffix.go).
    ("minimal", "spec.checkpoint", {"size": "1e1.5"}, "spec.checkpoint.size", "quantity"),
    ("minimal", "spec.checkpoint", {"claimName": "My_PVC"}, "spec.checkpoint.claimName", "object name"),
    ("minimal", "spec.resources", {"requests": {"cpu": "a lot"}}, "spec.resources.requests.cpu", "quantity"),
    ("minimal", "spec.resources", {"requestz": {}}, "spec.resources.requestz", "unknown field"),
    ("minimal", "spec.resources", {"limits": {"nvidia.com/gpu": 1}}, "spec.resources", "gpusPerWorker"),
    ("full", "spec.procsPerWorker", 3, "spec.procsPerWorker", "must equal spec.gpusPerWorker"),
    ("minimal", "spec.gpusPerWorker", -1, "spec.gpusPerWorker", "at least 0"),
    ("minimal", "spec.metrics", {"port": 70000}, "spec.metrics.port", "at most 65000"),
    ("minimal", "spec.metrics", {"port": 80}, "spec.metrics.port", "at least 1024"),
    ("minimal", "spec.metrics", {"port": 29500}, "spec.metrics.port", "rendezvous"),
    ("full", "spec.rendezvous", {"port": 9101}, "spec.metrics.port", "9100..9101"),
    # The trainer turns these into a timedelta, which 10**15 seconds overflows (a crash, retried).
    ("minimal", "spec.runPolicy", {"collectiveTimeoutSeconds": 10**15}, "spec.runPolicy.collectiveTimeoutSeconds", "at most 2592000"),
    ("minimal", "spec.runPolicy", {"rendezvousTimeoutSeconds": 10**15}, "spec.runPolicy.rendezvousTimeoutSeconds", "at most 2592000"),
    ("minimal", "spec.labels", {"team": "x" * 64}, "spec.labels.team", "63 characters"),
    ("minimal", "spec.labels", {"bad key!": "x"}, "spec.labels.bad key!", "label key"),
    ("minimal", "spec.nodeSelector", {"pool": 1}, "spec.nodeSelector.pool", "string"),
    ("minimal", "spec.tolerations", [1], "spec.tolerations[0]", "object"),
    ("minimal", "spec.template", {"spec": {"containers": [{"image": "x"}]}}, "spec.template.spec.containers[0].name", "name"),
    ("minimal", "spec.template", {"metadta": {}}, "spec.template.metadta", "unknown field"),
    ("minimal", "spec.queueName", "Team A", "spec.queueName", "object name"),
    ("minimal", "metadata.name", "a" * 51, "metadata.name", "at most 50 characters"),
    ("minimal", "metadata.name", "Cart_Pole", "metadata.name", "DNS-1035"),
    ("minimal", "apiVersion", "kuberl.dev/v1", "apiVersion", "kuberl.dev/v1alpha1"),
    ("minimal", "kind", "Job", "kind", "RLTrainingJob"),
    ("minimal", "specc", {}, "specc", "unknown field"),
]


def problems_of(job):
    with pytest.raises(InvalidJob) as e:
        validate_job(job, env_ids=registered_env_ids())
    return e.value.problems


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_jobs_are_valid(name):
    validate_job(VALID[name], env_ids=registered_env_ids())


ALL_FIELD_NAMES = {f.alias for f in JobSpec.model_fields.values()}


@pytest.mark.parametrize(("base", "path", "value", "reported", "words"), MUTATIONS,
                         ids=[f"{m[1]}={m[2] if m[2] is not DELETE else 'deleted'}"[:60] for m in MUTATIONS])
def test_a_mutation_is_reported_at_its_exact_path(base, path, value, reported, words):
    problems = problems_of(with_field(VALID[base], path, value))
    at_path = [p for p in problems if p.path == reported]
    assert at_path, f"{reported} not in {[str(p) for p in problems]}"
    message = at_path[0].message
    assert words in message
    assert len(message) < 200, message
    # spec.algorithm's values name their blocks too: the algorithms it lists are no list of fields
    fields = ALL_FIELD_NAMES - set(ALGORITHM_BLOCKS) if reported == "spec.algorithm" else ALL_FIELD_NAMES
    mentioned = {f for f in fields if f in message}
    assert len(mentioned) <= 3, f"a message naming every field is no message: {message}"
    assert all(p.path == reported for p in problems), [str(p) for p in problems]  # one mutation, one problem


def test_every_problem_is_reported_at_once():
    job = with_field(with_field(with_field(MINIMAL, "spec.workers", 0), "spec.ppo", {"gamma": 2}), "metadata.name", "A")
    assert {p.path for p in problems_of(job)} == {"spec.workers", "spec.ppo.gamma", "metadata.name"}


def test_a_wrong_type_is_not_also_blamed_on_a_cross_field_rule():
    problems = problems_of(with_field(with_field(MINIMAL, "spec.gpusPerWorker", "2"), "spec.procsPerWorker", 2))
    assert [p.path for p in problems] == ["spec.gpusPerWorker"]


# --- env ids ------------------------------------------------------------------


def test_an_unregistered_gymnasium_id_is_refused_naming_spec_env_id():
    problems = problems_of(with_field(MINIMAL, "spec.env.id", "CartPoel-v1"))
    assert [p.path for p in problems] == ["spec.env.id"] and "CartPoel-v1" in problems[0].message


@pytest.mark.parametrize(("env_id", "meant"), [
    ("Cartpole-v1", "'CartPole-v1'"),  # case: gymnasium ids are case-sensitive
    ("CartPoel-v1", "'CartPole-v1' or 'CartPole-v0'"),  # closest first
    ("cartpole", "'CartPole-v1' or 'CartPole-v0'"),
])
def test_a_misspelt_gymnasium_id_names_the_ids_it_may_have_meant(env_id, meant):
    registered = {"CartPole-v0", "CartPole-v1", "Pendulum-v1", "ALE/Pong-v5"}
    problem = env_id_problem(env_id, registered)
    assert problem is not None and problem.path == "spec.env.id"
    assert problem.message.endswith(f"(got {env_id!r}); did you mean {meant}?"), problem.message
    nothing_near = env_id_problem("Walker-v9", registered)
    # nothing near: an id the user's own package registers on import, which nothing here imports
    assert nothing_near is not None and "(got 'Walker-v9'); if your own package registers it" in nothing_near.message
    assert env_id_problem("CartPole-v1", registered) is None
    assert env_id_problem("ALE/Pongg-v5", registered).message.endswith("did you mean 'ALE/Pong-v5'?")
    assert env_id_problem("MyPkg/Env-v0", registered) is None  # a namespace not installed here: the trainer's to tell
    # a registered namespace misspelt was taken for another package's, passed validate and failed in the pods
    assert env_id_problem("ale/Pong-v5", registered).message.endswith("did you mean 'ALE/Pong-v5'?")
    assert env_id_problem("AL/Pong-v5", registered).message.endswith("did you mean 'ALE/Pong-v5'?")


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "mypkg.envs:MyEnv", "mypkg.envs:My.Env"])
def test_ids_from_packages_not_installed_here_are_left_to_the_trainer(env_id):
    if env_id.startswith("ALE/"):
        pytest.importorskip("gymnasium")
        assert env_id_problem(env_id, registered_env_ids()) is None  # ALE/ unregistered without ale_py, registered with it
    validate_job(with_field(MINIMAL, "spec.env.id", env_id), env_ids=registered_env_ids())


# --- immutability (Python side; the CEL side is in test_crd_cel.py) ------------


def test_immutable_fields_cannot_change_and_mutable_ones_can():
    old = FULL["spec"]
    assert immutable_changes(old, with_field(FULL, "spec.runPolicy.backoffLimit", 9)["spec"]) == []
    assert [p.path for p in immutable_changes(old, with_field(FULL, "spec.workers", 8)["spec"])] == ["spec.workers"]
    assert [p.path for p in immutable_changes(old, with_field(FULL, "spec.dqn.gamma", 0.9)["spec"])] == ["spec.dqn"]
    assert [p.path for p in immutable_changes(old, with_field(FULL, "spec.queueName", DELETE)["spec"])] == ["spec.queueName"]
    assert immutable_changes(MINIMAL["spec"], with_field(MINIMAL, "spec.workers", 1)["spec"]) == []  # the default


# --- the CLI ------------------------------------------------------------------


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], check=False, input=stdin, capture_output=True, text=True, timeout=60)


def test_kuberl_validate_prints_every_problem_and_exits_non_zero(tmp_path):
    bad = with_field(with_field(with_field(MINIMAL, "spec.workers", 0), "spec.env.numEnvs", "8"), "spec.ppo", {"learningRat": 1})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = run_cli("validate", str(path))
    assert result.returncode != 0
    for line in ("spec.workers: expected at least 1 (got 0)", "spec.env.numEnvs: expected an integer (got '8')",
                 "spec.ppo.learningRat: unknown field; did you mean 'learningRate'?"):
        assert line in result.stderr
    assert "3 problem(s)" in result.stderr


def test_kuberl_validate_summarises_a_valid_job():
    result = run_cli("validate", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "cartpole-ppo: valid: ppo on CartPole-v1, 2 worker(s)" in result.stdout
    assert "while" not in result.stdout and "deterministic" not in result.stdout


def test_kuberl_validate_names_the_opt_ins_that_change_how_a_job_learns(tmp_path):
    job = with_field(with_field(yaml.safe_load(EXAMPLE.read_text()), "spec.ppo.learnWhileCollecting", True),
                 "spec.success.evalWhileTraining", True)
    path = tmp_path / "overlapped.yaml"
    path.write_text(yaml.safe_dump(job))
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert ("stop at eval return 475, learning while collecting (one update of policy lag), evaluating while training;"
            in result.stdout)


def test_kuberl_render_refuses_a_bad_job_like_validate(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(with_field(MINIMAL, "spec.workers", 0)))
    rendered, validated = run_cli("render", str(path)), run_cli("validate", str(path))
    assert rendered.returncode != 0 and rendered.stdout == ""
    assert rendered.stderr == validated.stderr


def test_kuberl_render_prints_a_yaml_stream_of_every_object():
    result = run_cli("render", str(EXAMPLE), "--namespace", "ml")
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "Service", "Pod", "Pod"]
    assert {d["metadata"]["namespace"] for d in docs} == {"ml"}
    assert '"uid": "00000000-0000-0000-0000-000000000000"' in docs[0]["data"]["config.json"]
    assert docs == render_job(yaml.safe_load(EXAMPLE.read_text()), "ml", PLACEHOLDER_UID)  # printing loses nothing


# --- anything at all ----------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
SPEC_PATHS = sorted(
    {m[1] for m in MUTATIONS if m[1].startswith("spec")}
    | {"spec.ppo.gamma", "spec.env.kwargs", "spec.template.spec", "spec.template.metadata", "spec.resources.limits",
       "spec.procsPerWorker", "spec.rendezvous.port", "spec.labels", "spec.success", "metadata"}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(VALID)), path=st.sampled_from(SPEC_PATHS), value=JSONISH)
def test_random_mutations_only_ever_raise_invalid_job(base, path, value):
    job = with_field(VALID[base], path, value)
    try:
        validate_job(job, env_ids=registered_env_ids())
    except InvalidJob as e:
        assert e.problems and all(p.path and p.message for p in e.problems)


@settings(max_examples=100, deadline=None)
@given(spec=JSONISH)
def test_any_spec_value_only_ever_raises_invalid_job(spec):
    with pytest.raises(InvalidJob):
        parse_spec(spec)


def test_yaml_numbers_read_as_kubectl_reads_them(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(MINIMAL) + "---\n" + EXAMPLE.read_text().replace("learningRate: 0.0025", "learningRate: 2.5e-3"))
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stderr
    (_, job) = load_documents(path.read_text())
    assert job["spec"]["ppo"]["learningRate"] == 0.0025
    assert load_documents("a: 12\nb: '1e-3'\nc: 1e3\nd: 2.0\ne: 0.5\n") == [{"a": 12, "b": "1e-3", "c": 1000, "d": 2, "e": 0.5}]
    assert isinstance(load_documents("c: 1e3")[0]["c"], int)  # kubectl's JSON writes 1000, an integer


def test_template_label_values_and_annotation_keys_are_what_the_api_server_takes():
    """IsValidLabelValue and ValidateAnnotations (IsQualifiedName(strings.ToLower(k)),
    k8s.io/apimachinery .../validation): `kuberl validate` said "valid" for a template whose
    pods the API server refuses, and the operator learned it only at the pods' create."""
    def with_metadata(metadata):
        return make_job("meta").env("CartPole-v1").with_spec(totalTimesteps=1000, template={"metadata": metadata}).obj()

    validate_job(with_metadata({"labels": {"team": "rl-1.a_b", "empty": ""},
                                "annotations": {"Example.COM/Some_Key.1": "v", "plain": "x" * 1000, "kubernetes.io/x": ""}}),
                 env_ids=registered_env_ids())
    found = problems_of(with_metadata({"labels": {"team": "bad value!", "long": "a" * 64},
                                       "annotations": {"a" * 64: "x", "-dash": "x", "ok": "x"}}))
    by_path = {(p.path, "got key" in p.message or "label value" in p.message) for p in found}
    assert by_path == {("spec.template.metadata.labels.team", True), ("spec.template.metadata.labels.long", True),
                       ("spec.template.metadata.annotations", True)}, found
    assert sum(p.path == "spec.template.metadata.annotations" for p in found) == 2


def test_a_mapping_of_100000_bad_keys_or_values_is_three_problems_and_a_count_per_field():
    """As podschema's item checks: one careless or hostile mapping is one mistake, not 100,000 lines
    of `kuberl validate` (the operator's message is capped too, reconcile.problems_message)."""
    many = {f"-{i}": "bad value!" for i in range(100_000)}
    job = make_job("meta").env("CartPole-v1").with_spec(totalTimesteps=1000, labels={f"a b{i}": "x" for i in range(10)},
                                                        template={"metadata": {"labels": {f"k{i}": v for i, v in enumerate(many.values())},
                                                                               "annotations": many}}).obj()
    found = problems_of(job)
    assert len(found) == 12, found
    assert [str(p) for p in found if "more" in p.message] == [
        "spec.labels: 7 more keys that are not label keys",
        "spec.template.metadata.labels: 99997 more values that are not label values",
        "spec.template.metadata.annotations: 99997 more keys that are not qualified names",
    ]


@pytest.mark.parametrize("value", ["...", "worker0", "", 123, ["Worker0"], {"Worker0": True}, "W" * 100_000])
def test_a_success_policy_other_than_its_two_names_is_refused_naming_the_field(value):
    job = make_job("cartpole").minimal().run_policy(successPolicy=value).obj()
    (problem,) = problems_of(job)
    assert problem.path == "spec.runPolicy.successPolicy" and "expected 'AllWorkers' or 'Worker0'" in problem.message
    assert len(str(problem)) < 300  # a 100,000-character value is shown cut short
