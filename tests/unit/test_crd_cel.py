"""The CRD (openAPIV3Schema + CEL rules, evaluated with cel-python) and the
operator's validator give the same verdict, at the same paths, on one table.

The API server is emulated where it matters: schema defaults are applied
before validation, unknown fields are errors (kubectl's default
--validate=strict), CEL is skipped when a type error blocks it, and transition
rules (oldSelf) run on updates only, where both old and new values exist.
"""

import copy
import functools
from pathlib import Path

import celpy
import jsonschema
import pytest
import yaml
from kuberl.core.rules import CROSS_FIELD_RULES, immutable_changes, validate_job
from kuberl.core.validation import InvalidJob

from tests.support.crdschema import schema_nodes
from tests.support.jobs import DELETE, make_job, with_field

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
CEL = celpy.Environment()


# --- emulating the API server -------------------------------------------------


def to_jsonschema(node, preserve_metadata=True):
    """A structural schema as a draft-4 JSON schema with strict field validation."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes") and k not in ("nullable", "default", "anyOf")}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable"):
        out["type"] = [out["type"], "null"]
    if "properties" in node:
        out["properties"] = {k: to_jsonschema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        out["items"] = to_jsonschema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_jsonschema(node["additionalProperties"])
    return out


JSON_SCHEMA = to_jsonschema(SCHEMA)
JSON_SCHEMA["properties"]["metadata"].pop("additionalProperties")  # ObjectMeta is Kubernetes' business
JSON_SCHEMA["properties"].pop("status")


def apply_defaults(node, value):
    """Null pruning and schema defaults, as the API server applies them before validating."""
    if isinstance(value, dict):
        for key, child in (node.get("properties") or {}).items():
            if key in value and value[key] is None and not child.get("nullable"):
                del value[key]
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                apply_defaults(child, value[key])
        if isinstance(node.get("additionalProperties"), dict):
            for item in value.values():
                apply_defaults(node["additionalProperties"], item)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            apply_defaults(node["items"], item)
    return value


def path_of(parts):
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def schema_errors(obj):
    """(paths, blocking): the paths the schema refuses, and whether a type error blocks CEL."""
    paths, blocking = set(), False
    for error in jsonschema.Draft4Validator(JSON_SCHEMA).iter_errors(obj):
        where = list(error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            allowed = set(error.schema.get("properties", {}))
            paths |= {path_of([*where, key]) for key in error.instance if key not in allowed}
        elif error.validator == "required":
            paths |= {path_of([*where, key]) for key in error.validator_value if key not in error.instance}
        else:
            paths.add(path_of(where))
        blocking |= error.validator == "type"
    return paths, blocking


@functools.cache
def compile_rule(text):
    """One program per rule text: lark's parse of a rule costs about 2 ms, and every case evaluates all 75 of them."""
    return CEL.program(CEL.compile(text))


def cel_errors(node, new, old, path, transition, fired=None):
    """Evaluate every x-kubernetes-validations rule below `node`; failing paths
    and messages (and, into `fired`, the text of each rule that failed)."""
    failures = {}
    for rule in node.get("x-kubernetes-validations", []):
        uses_old = "oldSelf" in rule["rule"]
        if uses_old and (not transition or old is None):
            continue
        activation = {"self": celpy.json_to_cel(new)}
        if uses_old:
            activation["oldSelf"] = celpy.json_to_cel(old)
        if not compile_rule(rule["rule"]).evaluate(activation):
            where = path + rule.get("fieldPath", "")
            message = rule["message"]
            if "messageExpression" in rule:
                message = str(compile_rule(rule["messageExpression"]).evaluate(activation))
            failures[where] = message
            if fired is not None:
                fired.add((where, rule["rule"]))
    if isinstance(new, dict):
        for key, child in (node.get("properties") or {}).items():
            if key in new:
                old_child = old.get(key) if isinstance(old, dict) else None
                failures |= cel_errors(child, new[key], old_child, f"{path}.{key}", transition, fired)
    return failures


def crd_verdict(new, old=None):
    """{path: message} the API server would refuse `new` with (an update when `old`)."""
    new = apply_defaults(SCHEMA, copy.deepcopy(new))
    old = apply_defaults(SCHEMA, copy.deepcopy(old)) if old is not None else None
    paths, blocking = schema_errors(new)
    failures = {p: "schema" for p in paths}
    if not blocking:
        failures |= cel_errors(SCHEMA["properties"]["spec"], new["spec"], old and old["spec"], "spec", old is not None)
    return failures


def python_verdict(new, old=None):
    """{path: message} from the operator's validator."""
    try:
        validate_job(new)
        problems = immutable_changes(old["spec"], new["spec"]) if old is not None else []
    except InvalidJob as e:
        problems = e.problems
    return {p.path: p.message for p in problems}


# --- the shared table ---------------------------------------------------------

MINIMAL = make_job("cartpole").minimal().obj()
FULL = yaml.safe_load(
    """
apiVersion: kuberl.dev/v1alpha1
kind: RLTrainingJob
metadata: {name: atari-dqn}
spec:
  algorithm: dqn
  dqn: {learningRate: 0.0005, hiddenSizes: [256]}
  env: {id: "ALE/Pong-v5", numEnvs: 4, kwargs: {frameStack: 4}}
  totalTimesteps: 1000000
  workers: 4
  gpusPerWorker: 2
  procsPerWorker: 2
  resources: {requests: {memory: 16Gi}, limits: {cpu: 8}}
  labels: {team: rl}
  checkpoint: {claimName: shared, keep: 2}
  queueName: team-a
  image: reg/trainer:1
  metrics: {port: 9100}
"""
)

SAC = make_job("pendulum").minimal().algorithm("sac").replace(env={"id": "Pendulum-v1"}).obj()
TD3 = make_job("pendulum").minimal().algorithm("td3").replace(env={"id": "Pendulum-v1"}).obj()


def spec_with(base, **changes):
    """A copy of `base` with each spec field `changes` names (parents joined by __) set, or removed where None."""
    for key, value in changes.items():
        base = with_field(base, "spec." + key.replace("__", "."), DELETE if value is None else value)
    return base


def named(base, name):
    job = copy.deepcopy(base)
    job["metadata"]["name"] = name
    return job


CUSTOM = make_job("byo").custom_trainer(
    {"spec": {"containers": [{"name": "trainer", "command": ["torchrun", "/app/train.py"]}]}}).workers(2).obj()

# (id, new, old or None, the paths both must refuse; empty = valid)
CASES = [
    ("custom-trainer-needs-no-algorithm-env-or-budget", CUSTOM, None, set()),
    ("custom-trainer-may-still-name-them", spec_with(CUSTOM, algorithm="ppo", env={"id": "CartPole-v1"}, totalTimesteps=5), None, set()),
    ("missing-algorithm", spec_with(MINIMAL, algorithm=None), None, {"spec.algorithm"}),
    ("missing-timesteps", spec_with(MINIMAL, totalTimesteps=None), None, {"spec.totalTimesteps"}),
    ("kuberl-trainer-needs-all-three", spec_with(CUSTOM, trainer="kuberl"), None,
     {"spec.algorithm", "spec.env", "spec.totalTimesteps"}),
    ("ppo-block-without-algorithm", spec_with(CUSTOM, ppo={}), None, {"spec.ppo"}),
    ("unknown-trainer", spec_with(MINIMAL, trainer="mine"), None, {"spec.trainer"}),
    ("update-trainer", spec_with(CUSTOM, trainer="kuberl", algorithm="ppo", env={"id": "CartPole-v1"}, totalTimesteps=5),
     spec_with(CUSTOM, algorithm="ppo", env={"id": "CartPole-v1"}, totalTimesteps=5), {"spec.trainer"}),
    ("add-algorithm-to-custom", spec_with(CUSTOM, algorithm="ppo"), CUSTOM, {"spec.algorithm"}),
    ("add-env-to-custom", spec_with(CUSTOM, env={"id": "CartPole-v1"}), CUSTOM, {"spec.env"}),
    ("add-budget-to-custom", spec_with(CUSTOM, totalTimesteps=5), CUSTOM, {"spec.totalTimesteps"}),
    ("minimal", MINIMAL, None, set()),
    ("full", FULL, None, set()),
    ("procs-without-gpus", spec_with(MINIMAL, procsPerWorker=4), None, set()),
    ("metrics-just-below-rendezvous", spec_with(MINIMAL, metrics={"port": 29499}), None, set()),
    ("rendezvous-just-after-the-metrics-range", spec_with(FULL, rendezvous={"port": 9102}), None, set()),
    ("workers-0", spec_with(MINIMAL, workers=0), None, {"spec.workers"}),
    ("workers-string", spec_with(MINIMAL, workers="2"), None, {"spec.workers"}),
    ("negative-timesteps", spec_with(MINIMAL, totalTimesteps=-5), None, {"spec.totalTimesteps"}),
    ("unknown-spec-field", spec_with(MINIMAL, bogus=1), None, {"spec.bogus"}),
    ("unknown-hyperparameter", spec_with(MINIMAL, ppo={"learningRat": 0.1}), None, {"spec.ppo.learningRat"}),
    ("unknown-nested-field", spec_with(MINIMAL, runPolicy={"backofLimit": 1}), None, {"spec.runPolicy.backofLimit"}),
    ("wrong-typed-hyperparameter", spec_with(MINIMAL, ppo={"learningRate": "fast"}), None, {"spec.ppo.learningRate"}),
    ("hidden-width-0", spec_with(FULL, dqn={"hiddenSizes": [0]}), None, {"spec.dqn.hiddenSizes[0]"}),
    ("too-many-layers", spec_with(FULL, dqn={"hiddenSizes": [8] * 9}), None, {"spec.dqn.hiddenSizes"}),
    ("unknown-algorithm", spec_with(MINIMAL, algorithm="a2c"), None, {"spec.algorithm"}),
    ("missing-env", spec_with(MINIMAL, env=None), None, {"spec.env"}),
    ("missing-env-id", spec_with(MINIMAL, env={"numEnvs": 2}), None, {"spec.env.id"}),
    ("bad-env-id", spec_with(MINIMAL, env={"id": "Cart Pole"}), None, {"spec.env.id"}),
    ("metrics-port-out-of-range", spec_with(MINIMAL, metrics={"port": 70000}), None, {"spec.metrics.port"}),
    ("label-value-too-long", spec_with(MINIMAL, labels={"team": "x" * 64}), None, {"spec.labels.team"}),
    ("bad-quantity", spec_with(MINIMAL, resources={"limits": {"memory": "lots"}}), None, {"spec.resources.limits.memory"}),
    ("bad-queue-name", spec_with(MINIMAL, queueName="Team A"), None, {"spec.queueName"}),
    # the API server refuses the PVC of a storage request that is not positive (ValidatePersistentVolumeClaimSpec:
    # ValidatePositiveQuantityValue) and the pod of a negative emptyDir sizeLimit (validateVolumeSource)
    ("checkpoint-size-zero", spec_with(MINIMAL, checkpoint={"size": "0"}), None, {"spec.checkpoint.size"}),
    ("checkpoint-size-zero-written-long", spec_with(MINIMAL, checkpoint={"size": "0.000Gi"}), None, {"spec.checkpoint.size"}),
    ("checkpoint-size-negative", spec_with(MINIMAL, checkpoint={"size": "-1Gi"}), None, {"spec.checkpoint.size"}),
    ("checkpoint-size-a-fraction", spec_with(MINIMAL, checkpoint={"size": "0.5Gi"}), None, set()),
    ("checkpoint-size-in-exponent-form", spec_with(MINIMAL, checkpoint={"size": "1e9"}), None, set()),
    ("shm-size-negative", spec_with(MINIMAL, shmSize="-64Mi"), None, {"spec.shmSize"}),
    ("shm-size-zero", spec_with(MINIMAL, shmSize="0"), None, set()),
    ("bad-claim-name", spec_with(MINIMAL, checkpoint={"claimName": "My_PVC"}), None, {"spec.checkpoint.claimName"}),
    ("name-too-long", named(MINIMAL, "a" * 51), None, {"metadata.name"}),
    ("name-not-dns", named(MINIMAL, "Cart_Pole"), None, {"metadata.name"}),
    ("dqn-block-with-ppo", spec_with(MINIMAL, dqn={}), None, {"spec.dqn"}),
    ("ppo-block-with-dqn", spec_with(FULL, ppo={}), None, {"spec.ppo"}),
    ("gpus-procs-disagree", spec_with(FULL, procsPerWorker=3), None, {"spec.procsPerWorker"}),
    ("metrics-on-default-rendezvous", spec_with(MINIMAL, metrics={"port": 29500}), None, {"spec.metrics.port"}),
    ("rendezvous-on-default-metrics", spec_with(MINIMAL, rendezvous={"port": 9090}), None, {"spec.metrics.port"}),
    ("rendezvous-in-metrics-range", spec_with(FULL, rendezvous={"port": 9101}), None, {"spec.metrics.port"}),
    # Kueue's pod integration queues a pod labelled with a queue name: without spec.queueName (and so the
    # pod-group label) each pod of the gang alone, a part admitted holding its quota while the rest waits
    ("kueue-queue-label-without-queue-name", spec_with(MINIMAL, labels={"kueue.x-k8s.io/queue-name": "team-a"}), None,
     {"spec.labels"}),
    ("kueue-queue-label-naming-another-queue", spec_with(FULL, labels={"kueue.x-k8s.io/queue-name": "team-b"}), None,
     {"spec.labels"}),
    ("kueue-queue-label-as-the-queue-name", spec_with(FULL, labels={"kueue.x-k8s.io/queue-name": "team-a"}), None, set()),
    ("gpu-in-limits", spec_with(MINIMAL, resources={"limits": {"nvidia.com/gpu": 1}}), None, {"spec.resources"}),
    ("gpu-in-requests", spec_with(MINIMAL, resources={"requests": {"nvidia.com/gpu": "1"}}), None, {"spec.resources"}),
    # hyperparameter rules that need only the spec: omitted fields read as the model's defaults on both sides
    ("dqn-batch-above-buffer", spec_with(FULL, dqn={"bufferSize": 10, "batchSize": 128, "learningStarts": 10}), None,
     {"spec.dqn.batchSize"}),
    ("dqn-default-batch-above-buffer", spec_with(FULL, dqn={"bufferSize": 100}), None,
     {"spec.dqn.batchSize", "spec.dqn.learningStarts"}),
    ("dqn-batch-above-default-buffer", spec_with(FULL, dqn={"batchSize": 50001, "learningStarts": 0}), None, {"spec.dqn.batchSize"}),
    ("dqn-batch-equal-to-buffer", spec_with(FULL, dqn={"bufferSize": 128, "learningStarts": 128}), None, set()),
    ("dqn-learning-starts-above-buffer", spec_with(FULL, dqn={"bufferSize": 500, "batchSize": 32}), None,
     {"spec.dqn.learningStarts"}),
    ("dqn-final-eps-above-initial", spec_with(FULL, dqn={"explorationInitialEps": 0.1, "explorationFinalEps": 0.2}), None,
     {"spec.dqn.explorationFinalEps"}),
    ("dqn-final-eps-above-default-initial", spec_with(FULL, dqn={"explorationInitialEps": 0.01}), None,
     {"spec.dqn.explorationFinalEps"}),
    ("dqn-eps-written-as-integers", spec_with(FULL, dqn={"explorationInitialEps": 1, "explorationFinalEps": 0}), None, set()),
    ("dqn-rules-on-default-block", spec_with(FULL, dqn=None), None, set()),
    ("sac-block-with-ppo", spec_with(MINIMAL, sac={}), None, {"spec.sac"}),
    ("sac-batch-above-buffer", spec_with(SAC, sac={"bufferSize": 100, "batchSize": 128, "learningStarts": 100}), None,
     {"spec.sac.batchSize"}),
    ("sac-default-batch-above-buffer", spec_with(SAC, sac={"bufferSize": 200, "learningStarts": 0}), None,
     {"spec.sac.batchSize"}),
    ("sac-batch-one-above-buffer", spec_with(SAC, sac={"batchSize": 65536, "bufferSize": 65535}), None, {"spec.sac.batchSize"}),
    ("sac-batch-equal-to-buffer", spec_with(SAC, sac={"bufferSize": 256, "learningStarts": 256}), None, set()),
    ("sac-default-learning-starts-above-buffer", spec_with(SAC, sac={"bufferSize": 4999, "batchSize": 32}), None,
     {"spec.sac.learningStarts"}),
    ("sac-rules-on-default-block", spec_with(SAC, sac=None), None, set()),
    ("sac-rules-not-for-dqn", spec_with(FULL, dqn={"bufferSize": 1000, "batchSize": 32, "learningStarts": 10}), None, set()),
    ("td3-block-with-sac", spec_with(SAC, td3={}), None, {"spec.td3"}),
    ("td3-batch-above-buffer", spec_with(TD3, td3={"bufferSize": 100, "batchSize": 128, "learningStarts": 100}), None,
     {"spec.td3.batchSize"}),
    ("td3-default-batch-above-buffer", spec_with(TD3, td3={"bufferSize": 200, "learningStarts": 0}), None,
     {"spec.td3.batchSize"}),
    ("td3-batch-equal-to-buffer", spec_with(TD3, td3={"bufferSize": 256, "learningStarts": 256}), None, set()),
    ("td3-default-learning-starts-above-buffer", spec_with(TD3, td3={"bufferSize": 24999, "batchSize": 32}), None,
     {"spec.td3.learningStarts"}),
    ("td3-default-learning-starts-equal-to-buffer", spec_with(TD3, td3={"bufferSize": 25000}), None, set()),
    ("td3-rules-on-default-block", spec_with(TD3, td3=None), None, set()),
    ("td3-rules-not-for-sac", spec_with(SAC, sac={"bufferSize": 1000, "batchSize": 32, "learningStarts": 10}), None, set()),
    ("ppo-more-minibatches-than-rows", spec_with(MINIMAL, ppo={"numSteps": 2, "numMinibatches": 17}), None,
     {"spec.ppo.numMinibatches"}),
    ("ppo-minibatches-against-default-envs", spec_with(MINIMAL, env={"id": "CartPole-v1"}, ppo={"numMinibatches": 257}), None,
     {"spec.ppo.numMinibatches"}),
    ("ppo-minibatches-equal-to-rows", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numSteps": 4, "numMinibatches": 8}),
     None, set()),
    ("ppo-accumulation-above-minibatch", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numSteps": 8, "gradAccumulation": 9}),
     None, {"spec.ppo.gradAccumulation"}),
    ("ppo-accumulation-equal-to-minibatch", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numSteps": 8, "gradAccumulation": 8}),
     None, set()),
    ("lstm-more-minibatches-than-envs", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numMinibatches": 3, "lstm": {}}),
     None, {"spec.ppo.numMinibatches"}),
    ("lstm-default-minibatches-against-one-env", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 1}, ppo={"lstm": {"hiddenSize": 8}}),
     None, {"spec.ppo.numMinibatches"}),
    ("lstm-minibatches-equal-to-envs", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numMinibatches": 2, "lstm": {}}),
     None, set()),
    ("lstm-minibatches-against-default-envs", spec_with(MINIMAL, env={"id": "CartPole-v1"}, ppo={"numMinibatches": 8, "lstm": {}}),
     None, set()),
    ("minibatches-above-envs-without-lstm", spec_with(MINIMAL, env={"id": "CartPole-v1", "numEnvs": 2}, ppo={"numMinibatches": 3}),
     None, set()),
    ("lstm-learning-while-collecting", spec_with(MINIMAL, ppo={"learnWhileCollecting": True, "lstm": {}}), None,
     {"spec.ppo.learnWhileCollecting"}),
    ("lstm-without-learning-while-collecting", spec_with(MINIMAL, ppo={"learnWhileCollecting": False, "lstm": {}}), None, set()),
    ("envpool-in-deterministic-mode", spec_with(MINIMAL, deterministic=True, env={"id": "Pong-v5", "backend": "envpool"}), None,
     {"spec.env.backend"}),
    ("envpool-otherwise", spec_with(MINIMAL, env={"id": "Pong-v5", "backend": "envpool"}), None, set()),
    ("learning-while-collecting-in-deterministic-mode", spec_with(MINIMAL, deterministic=True, ppo={"learnWhileCollecting": True}),
     None, {"spec.ppo.learnWhileCollecting"}),
    ("learning-while-collecting-otherwise", spec_with(MINIMAL, ppo={"learnWhileCollecting": True}), None, set()),
    ("evaluation-while-training-in-deterministic-mode", spec_with(MINIMAL, deterministic=True, success={"evalWhileTraining": True}),
     None, {"spec.success.evalWhileTraining"}),
    ("evaluation-while-training-otherwise", spec_with(MINIMAL, success={"evalWhileTraining": True}), None, set()),
    ("deterministic-without-learning-while-collecting", spec_with(MINIMAL, deterministic=True, ppo={"learnWhileCollecting": False}),
     None, set()),
    ("explicit-nulls", {**FULL, "spec": {**FULL["spec"], "ppo": None, "image": None, "success": {"targetReturn": None}}}, None, set()),
    ("explicit-null-procs-with-gpus", {**FULL, "spec": {**FULL["spec"], "procsPerWorker": None}}, None, set()),
    # updates
    ("update-mutable", spec_with(FULL, runPolicy={"backoffLimit": 9}, success={"targetReturn": 20}), FULL, set()),
    ("update-default-made-explicit", spec_with(MINIMAL, workers=1, seed=1, env={"id": "CartPole-v1", "numEnvs": 8}), MINIMAL, set()),
    ("update-workers", spec_with(FULL, workers=8), FULL, {"spec.workers"}),
    ("update-hyperparameter", spec_with(FULL, dqn={"learningRate": 0.001, "hiddenSizes": [256]}), FULL, {"spec.dqn"}),
    ("update-env", spec_with(FULL, env={"id": "ALE/Pong-v5", "numEnvs": 8, "kwargs": {"frameStack": 4}}), FULL, {"spec.env"}),
    ("update-env-id", spec_with(FULL, env={"id": "ALE/Breakout-v5", "numEnvs": 4, "kwargs": {"frameStack": 4}}), FULL, {"spec.env"}),
    ("update-env-kwargs", spec_with(FULL, env={"id": "ALE/Pong-v5", "numEnvs": 4}), FULL, {"spec.env"}),
    ("update-seed", spec_with(FULL, seed=7), FULL, {"spec.seed"}),
    ("update-image", spec_with(FULL, image="reg/trainer:2"), FULL, {"spec.image"}),
    ("remove-queue-name", spec_with(FULL, queueName=None), FULL, {"spec.queueName"}),
    ("add-image", spec_with(MINIMAL, image="reg/trainer:2"), MINIMAL, {"spec.image"}),
    ("add-hyperparameter-block", spec_with(MINIMAL, ppo={}), MINIMAL, {"spec.ppo"}),
    ("remove-procs", spec_with(FULL, procsPerWorker=None), FULL, {"spec.procsPerWorker"}),
    ("remove-hyperparameter-block", spec_with(FULL, dqn=None), FULL, {"spec.dqn"}),
    ("update-gpus-and-procs", spec_with(FULL, gpusPerWorker=4, procsPerWorker=4), FULL, {"spec.gpusPerWorker", "spec.procsPerWorker"}),
    ("update-algorithm", spec_with(FULL, algorithm="ppo", dqn=None), FULL, {"spec.algorithm", "spec.dqn"}),
    ("add-sac-block", spec_with(SAC, sac={"tau": 0.01}), spec_with(SAC, sac=None), {"spec.sac"}),
    ("update-sac-hyperparameter", spec_with(SAC, sac={"tau": 0.01}), spec_with(SAC, sac={"tau": 0.02}), {"spec.sac"}),
    ("remove-td3-block", spec_with(TD3, td3=None), spec_with(TD3, td3={"policyDelay": 3}), {"spec.td3"}),
    ("update-td3-hyperparameter", spec_with(TD3, td3={"explorationNoise": 0.2}), spec_with(TD3, td3={"explorationNoise": 0.3}),
     {"spec.td3"}),
]


def test_every_rule_compiles_and_fails_in_some_case_of_the_table():
    rules = [(path, r) for path, node in schema_nodes(SCHEMA) for r in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 20
    fired = set()
    for _, new, old, _ in CASES:
        new_d = apply_defaults(SCHEMA, copy.deepcopy(new))
        old_d = apply_defaults(SCHEMA, copy.deepcopy(old)) if old else None
        cel_errors(SCHEMA["properties"]["spec"], new_d["spec"], old_d and old_d["spec"], "spec", old is not None, fired)
    fired_rules = {(path.removeprefix("spec"), rule) for path, rule in fired}
    never = []
    for path, rule in rules:
        compile_rule(rule["rule"])
        if "messageExpression" in rule:
            compile_rule(rule["messageExpression"])
        where = path.removeprefix(".properties").removeprefix(".spec") + rule.get("fieldPath", "")
        if (where, rule["rule"]) not in fired_rules:
            never.append((where, rule["rule"]))
    # immutability of fields no case changes is the same `self == oldSelf`, proven on others
    untested_immutables = {w for w, r in never if r == "self == oldSelf"}
    assert [n for n in never if n[1] != "self == oldSelf"] == []
    assert untested_immutables <= {".totalTimesteps", ".queueName", ".deterministic", ".ppo"}


@pytest.mark.parametrize(("case", "new", "old", "refused"), CASES, ids=[c[0] for c in CASES])
def test_crd_and_operator_agree(case, new, old, refused):
    crd, python = crd_verdict(new, old), python_verdict(new, old)
    assert set(crd) == refused, f"CRD: {crd}"
    assert set(python) == refused, f"operator: {python}"


@pytest.mark.parametrize(("case", "new"), [(c[0], c[1]) for c in CASES if c[2] is None and c[3]], ids=lambda x: x if isinstance(x, str) else "")
def test_cross_field_messages_are_the_same_words_on_both_sides(case, new):
    crd, python = crd_verdict(new), python_verdict(new)
    for path, message in crd.items():
        if message != "schema":
            assert python[path] == message


# Checks a schema cannot express (map keys, the template's shape, what is
# installed here): the operator refuses them, the CRD lets them through.
PYTHON_ONLY = [
    ("label-key", spec_with(MINIMAL, labels={"bad key!": "x"}), "spec.labels.bad key!"),
    ("template-container-without-name", spec_with(MINIMAL, template={"spec": {"containers": [{"image": "x"}]}}),
     "spec.template.spec.containers[0].name"),
    ("template-unknown-field", spec_with(MINIMAL, template={"metadta": {}}), "spec.template.metadta"),
    ("custom-trainer-without-a-command", spec_with(CUSTOM, template={"spec": {"containers": [{"name": "trainer", "image": "x"}]}}),
     "spec.template.spec.containers"),
]


@pytest.mark.parametrize(("case", "new", "path"), PYTHON_ONLY, ids=[c[0] for c in PYTHON_ONLY])
def test_checks_only_the_operator_can_make(case, new, path):
    assert crd_verdict(new) == {}
    assert set(python_verdict(new)) == {path}


def test_the_crd_emulation_can_say_no():
    """Guards the emulation itself: a rule that always fails is seen failing."""
    node = {"x-kubernetes-validations": [{"rule": "self.workers < 0", "message": "never", "fieldPath": ".workers"}]}
    assert cel_errors(node, {"workers": 1}, None, "spec", False) == {"spec.workers": "never"}
    assert CROSS_FIELD_RULES  # the table above covers each of them
