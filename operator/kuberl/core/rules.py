"""The job's own rules: the cross-field rules (CEL for the API server, Python for
the operator and `kuberl validate`, one table proving both agree), immutable fields,
and `validate_job`/`parse_spec`, which turn a spec into a `JobSpec` or every problem
found, each at its path."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from . import atarikwargs, names, replaymemory, safetext, torchrun
from .podsource import MAX_CONFIGMAP_BYTES
from .spec import (
    ALGORITHM_BLOCKS,
    DQNConfig,
    EnvSpec,
    JobSpec,
    MetricsSpec,
    PPOConfig,
    RendezvousSpec,
    SACConfig,
    TD3Config,
)
from .validation import (
    GPU_RESOURCE,
    PATTERN_MEANINGS,
    InvalidJob,
    Problem,
    exponent_problem,
    gang_template_problems,
    image_problems,
    label_key_problems,
    name_problems,
    namespace_problems,
    node_affinity_problems,
    pod_affinity_problems,
    pod_template_problems,
    resources_problems,
    shown,
    toleration_problems,
    volume_reference_problems,
)
from .yamlreader import MAX_NESTING

# work on another thread beside the updates has no one order to replay
LAGGED_ROLLOUT_NOT_RECURRENT = ("a recurrent policy collects with the LSTM state it carries for each env, which a copy"
                                " collecting ahead would not; spec.ppo.lstm needs learnWhileCollecting: false")
LAGGED_ROLLOUT_NOT_DETERMINISTIC = "a rollout collected while the update learns is not reproducible; spec.deterministic needs learnWhileCollecting: false"
BACKGROUND_EVALUATION_NOT_DETERMINISTIC = ("an evaluation that finishes while training goes on ends the run at an update no rerun "
                                           "repeats; spec.deterministic needs evalWhileTraining: false")


@dataclass(frozen=True)
class CrossFieldRule:
    """One rule, written for the API server (CEL) and for the operator.

    `check` and `describe` read the raw spec dict (camelCase, as the API server
    sees it after defaulting); a unit test evaluates `cel` and
    `message_expression` with cel-python and proves both sides agree.
    """

    field_path: str  # relative to spec, as CEL's fieldPath wants it
    cel: str
    message_expression: str  # CEL, evaluated when `cel` is false
    message: str  # the API server's fallback when message_expression fails
    check: Callable[[dict], bool]  # True = valid
    describe: Callable[[dict], str]  # Python's rendering of message_expression
    reads: tuple[str, ...]  # spec fields the rule reads; a problem there already says it all


def _port(spec: dict, block: str, model: type[BaseModel]) -> int:
    return (spec.get(block) or {}).get("port", model.model_fields["port"].default)


def _procs(spec: dict) -> int:
    return spec.get("procsPerWorker") or spec.get("gpusPerWorker") or 1


def _cel_port(block: str, model: type[BaseModel]) -> str:
    return f"(has(self.{block}) && has(self.{block}.port) ? self.{block}.port : {model.model_fields['port'].default})"


_CEL_PROCS = (
    "(has(self.procsPerWorker) ? self.procsPerWorker"
    " : has(self.gpusPerWorker) && self.gpusPerWorker > 0 ? self.gpusPerWorker : 1)"
)


def _no_gpu_resource(spec: dict) -> bool:
    resources = spec.get("resources") or {}
    return not any(GPU_RESOURCE in (resources.get(kind) or {}) for kind in ("requests", "limits"))


def _required_unless_custom(field: str) -> CrossFieldRule:
    """kuberl's trainer needs the field; a custom trainer (CEL cannot see its command inside template) does not."""
    return CrossFieldRule(
        f".{field}",
        f"has(self.{field}) || (has(self.trainer) && self.trainer == 'custom')",
        "'required unless trainer: custom'",
        "required unless trainer: custom",
        lambda s: s.get(field) is not None or s.get("trainer") == "custom",
        lambda s: "required unless trainer: custom",
        (field, "trainer"),
    )


def _block_of_algorithm(block: str) -> CrossFieldRule:
    return CrossFieldRule(
        f".{block}",
        f"!has(self.{block}) || (has(self.algorithm) && self.algorithm == '{block}')",
        f"'only allowed with algorithm: {block} (got ' + (has(self.algorithm) ? 'algorithm: ' + self.algorithm : 'no algorithm') + ')'",
        f"only allowed with algorithm: {block}",
        lambda s: s.get(block) is None or s.get("algorithm") == block,
        lambda s: f"only allowed with algorithm: {block} (got "
        + (f"algorithm: {s['algorithm']}" if s.get("algorithm") is not None else "no algorithm") + ")",
        (block, "algorithm"),
    )


def _default_of(model: type[BaseModel], name: str) -> Any:
    """The model's default of the camelCase field `name`: what the trainer uses when it is omitted."""
    return next(f.default for n, f in model.model_fields.items() if (f.alias or n) == name)


def _hp(spec: dict, block: str, name: str, model: type[BaseModel]) -> Any:
    """A block's field as the trainer will read it: the spec's value, else the model's default."""
    value = (spec.get(block) or {}).get(name) if isinstance(spec.get(block) or {}, dict) else None
    return _default_of(model, name) if value is None else value


def _cel_hp(block: str, name: str, model: type[BaseModel]) -> str:
    """CEL for _hp: CEL sees only what the object holds, so an omitted field reads as the model's default."""
    default = _default_of(model, name)
    return f"(has(self.{block}) && has(self.{block}.{name}) ? self.{block}.{name} : {default!r})"


def _hyperparameter_rule(algorithm: str, field: str, cel: str, message_expression: str, fallback: str,
                         check: Callable[[dict], bool], describe: Callable[[dict], str], reads: tuple[str, ...] = ()) -> CrossFieldRule:
    """A rule between an algorithm's hyperparameters (and the fields in `reads`), checked when it is
    the job's algorithm; omitted fields read as their defaults on both sides."""
    return CrossFieldRule(
        f".{algorithm}.{field}",
        f"!has(self.algorithm) || self.algorithm != '{algorithm}' || ({cel})",
        message_expression, fallback,
        lambda s: s.get("algorithm") != algorithm or check(s),
        describe,
        ("algorithm", algorithm, *reads),
    )


def _at_most_buffer(block: str, model: type[BaseModel], field: str) -> CrossFieldRule:
    """An off-policy count (DQN's, SAC's, TD3's) that must fit the replay buffer (per rank, as each is)."""
    value, size = _cel_hp(block, field, model), _cel_hp(block, "bufferSize", model)
    return _hyperparameter_rule(
        block, field, f"{value} <= {size}",
        f"'expected at most bufferSize ' + string({size}) + ' (got ' + string({value}) + ')'",
        "expected at most bufferSize",
        lambda s: _hp(s, block, field, model) <= _hp(s, block, "bufferSize", model),
        lambda s: f"expected at most bufferSize {_hp(s, block, 'bufferSize', model)} (got {_hp(s, block, field, model)})",
    )


_CEL_PPO_BATCH = f"({_cel_hp('ppo', 'numSteps', PPOConfig)} * {_cel_hp('env', 'numEnvs', EnvSpec)})"
_CEL_MINIBATCHES = _cel_hp("ppo", "numMinibatches", PPOConfig)


def _ppo_batch(s: dict) -> int:
    """Transitions per rank per update: numSteps x env.numEnvs."""
    return _hp(s, "ppo", "numSteps", PPOConfig) * _hp(s, "env", "numEnvs", EnvSpec)


# Rules that need only the spec, between hyperparameters: refused at kubectl apply and by
# `kuberl validate`, not by a trainer after its pods were scheduled.
HYPERPARAMETER_RULES = [
    _at_most_buffer("dqn", DQNConfig, "batchSize"),
    _at_most_buffer("dqn", DQNConfig, "learningStarts"),
    _at_most_buffer("sac", SACConfig, "batchSize"),
    _at_most_buffer("sac", SACConfig, "learningStarts"),
    _at_most_buffer("td3", TD3Config, "batchSize"),
    _at_most_buffer("td3", TD3Config, "learningStarts"),
    _hyperparameter_rule(
        "dqn", "explorationFinalEps",
        f"{_cel_hp('dqn', 'explorationFinalEps', DQNConfig)} <= {_cel_hp('dqn', 'explorationInitialEps', DQNConfig)}",
        "'expected at most explorationInitialEps (epsilon decays from it to this)'",
        "expected at most explorationInitialEps (epsilon decays from it to this)",
        lambda s: _hp(s, "dqn", "explorationFinalEps", DQNConfig) <= _hp(s, "dqn", "explorationInitialEps", DQNConfig),
        lambda s: "expected at most explorationInitialEps (epsilon decays from it to this)",
    ),
    _hyperparameter_rule(
        "ppo", "numMinibatches", f"{_CEL_MINIBATCHES} <= {_CEL_PPO_BATCH}",
        f"'expected at most numSteps x env.numEnvs = ' + string({_CEL_PPO_BATCH}) + ' (got ' + string({_CEL_MINIBATCHES}) + ')'",
        "expected at most numSteps x env.numEnvs",
        lambda s: _hp(s, "ppo", "numMinibatches", PPOConfig) <= _ppo_batch(s),
        lambda s: f"expected at most numSteps x env.numEnvs = {_ppo_batch(s)} (got {_hp(s, 'ppo', 'numMinibatches', PPOConfig)})",
        ("env",),
    ),
    _hyperparameter_rule(  # a minibatch of fewer rows than numMinibatches asks for is the rule above's
        "ppo", "gradAccumulation",
        f"{_CEL_MINIBATCHES} > {_CEL_PPO_BATCH} || {_cel_hp('ppo', 'gradAccumulation', PPOConfig)} <= {_CEL_PPO_BATCH} / {_CEL_MINIBATCHES}",
        f"'expected at most the minibatch size ' + string({_CEL_PPO_BATCH} / {_CEL_MINIBATCHES})"
        f" + ' (got ' + string({_cel_hp('ppo', 'gradAccumulation', PPOConfig)}) + ')'",
        "expected at most the minibatch size (numSteps x env.numEnvs / numMinibatches)",
        lambda s: _hp(s, "ppo", "numMinibatches", PPOConfig) > _ppo_batch(s)
        or _hp(s, "ppo", "gradAccumulation", PPOConfig) <= _ppo_batch(s) // _hp(s, "ppo", "numMinibatches", PPOConfig),
        lambda s: f"expected at most the minibatch size {_ppo_batch(s) // _hp(s, 'ppo', 'numMinibatches', PPOConfig)}"
        f" (got {_hp(s, 'ppo', 'gradAccumulation', PPOConfig)})",
        ("env",),
    ),
    _hyperparameter_rule(  # a recurrent minibatch is whole envs, each env's rollout replayed in order
        "ppo", "numMinibatches",
        f"!has(self.ppo) || !has(self.ppo.lstm) || {_CEL_MINIBATCHES} <= {_cel_hp('env', 'numEnvs', EnvSpec)}",
        f"'expected at most env.numEnvs = ' + string({_cel_hp('env', 'numEnvs', EnvSpec)}) + ' with lstm: a recurrent"
        f" minibatch is whole envs (got ' + string({_CEL_MINIBATCHES}) + ')'",
        "expected at most env.numEnvs with lstm: a recurrent minibatch is whole envs",
        lambda s: (s.get("ppo") or {}).get("lstm") is None
        or _hp(s, "ppo", "numMinibatches", PPOConfig) <= _hp(s, "env", "numEnvs", EnvSpec),
        lambda s: f"expected at most env.numEnvs = {_hp(s, 'env', 'numEnvs', EnvSpec)} with lstm: a recurrent minibatch"
        f" is whole envs (got {_hp(s, 'ppo', 'numMinibatches', PPOConfig)})",
        ("env",),
    ),
    _hyperparameter_rule(
        "ppo", "learnWhileCollecting",
        "!has(self.ppo) || !has(self.ppo.lstm) || !has(self.ppo.learnWhileCollecting) || !self.ppo.learnWhileCollecting",
        f"'{LAGGED_ROLLOUT_NOT_RECURRENT}'",
        LAGGED_ROLLOUT_NOT_RECURRENT,
        lambda s: (s.get("ppo") or {}).get("lstm") is None or not (s.get("ppo") or {}).get("learnWhileCollecting"),
        lambda s: LAGGED_ROLLOUT_NOT_RECURRENT,
    ),
]


_QUEUE_LABEL_WHY = (" instead of this label: kuberl labels the pods with spec.queueName and a pod group, which Kueue admits"
                    " at once; the label alone queues each pod on its own")

CROSS_FIELD_RULES = [
    _required_unless_custom("algorithm"),
    _required_unless_custom("env"),
    _required_unless_custom("totalTimesteps"),
    *(_block_of_algorithm(field) for field, _ in ALGORITHM_BLOCKS.values()),
    # kuberl's trainer is one process per GPU; a custom one may drive several GPUs per process (DataParallel,
    # a pipeline, a script that spawns its own), as a PyTorchJob's nprocPerNode 1 with 4 GPUs did
    CrossFieldRule(
        ".procsPerWorker",
        "!has(self.procsPerWorker) || !has(self.gpusPerWorker) || self.gpusPerWorker == 0"
        " || self.procsPerWorker == self.gpusPerWorker"
        " || (has(self.trainer) && self.trainer == 'custom' && self.gpusPerWorker % self.procsPerWorker == 0)",
        "'must equal spec.gpusPerWorker, one process per GPU, or with trainer: custom divide it evenly (got procsPerWorker '"
        " + string(self.procsPerWorker) + ', gpusPerWorker ' + string(self.gpusPerWorker) + ')'",
        "must equal spec.gpusPerWorker (one process per GPU), or with trainer: custom divide it evenly",
        lambda s: s.get("procsPerWorker") is None
        or not s.get("gpusPerWorker")
        or s.get("procsPerWorker") == s.get("gpusPerWorker")
        or (s.get("trainer") == "custom" and s["gpusPerWorker"] % s["procsPerWorker"] == 0),
        lambda s: "must equal spec.gpusPerWorker, one process per GPU, or with trainer: custom divide it evenly"
        f" (got procsPerWorker {s['procsPerWorker']}, gpusPerWorker {s['gpusPerWorker']})",
        ("procsPerWorker", "gpusPerWorker", "trainer"),
    ),
    CrossFieldRule(
        ".metrics.port",
        f"{_cel_port('rendezvous', RendezvousSpec)} < {_cel_port('metrics', MetricsSpec)}"
        f" || {_cel_port('rendezvous', RendezvousSpec)} >= {_cel_port('metrics', MetricsSpec)} + {_CEL_PROCS}",
        f"'the metrics ports ' + string({_cel_port('metrics', MetricsSpec)}) + '..'"
        f" + string({_cel_port('metrics', MetricsSpec)} + {_CEL_PROCS} - 1)"
        f" + ' (one per local rank) must not include spec.rendezvous.port ' + string({_cel_port('rendezvous', RendezvousSpec)})",
        "the metrics ports (port + local rank) must not include spec.rendezvous.port",
        lambda s: not (
            _port(s, "metrics", MetricsSpec) <= _port(s, "rendezvous", RendezvousSpec)
            < _port(s, "metrics", MetricsSpec) + _procs(s)
        ),
        lambda s: f"the metrics ports {_port(s, 'metrics', MetricsSpec)}.."
        f"{_port(s, 'metrics', MetricsSpec) + _procs(s) - 1} (one per local rank) must not include"
        f" spec.rendezvous.port {_port(s, 'rendezvous', RendezvousSpec)}",
        ("metrics", "rendezvous", "procsPerWorker", "gpusPerWorker"),
    ),
    CrossFieldRule(
        ".resources",
        f"!has(self.resources) || ((!has(self.resources.requests) || !('{GPU_RESOURCE}' in self.resources.requests))"
        f" && (!has(self.resources.limits) || !('{GPU_RESOURCE}' in self.resources.limits)))",
        f"'must not name {GPU_RESOURCE}: set spec.gpusPerWorker (GPUs are explicit)'",
        f"must not name {GPU_RESOURCE}: set spec.gpusPerWorker (GPUs are explicit)",
        _no_gpu_resource,
        lambda s: f"must not name {GPU_RESOURCE}: set spec.gpusPerWorker (GPUs are explicit)",
        ("resources",),
    ),
    # Kueue's pod integration queues each pod labelled with a queue name; only spec.queueName also gives them the
    # pod-group labels that admit the gang at once (without, a part admitted holds its quota while the rest waits)
    CrossFieldRule(
        ".labels",
        f"!has(self.labels) || !('{names.KUEUE_QUEUE_NAME}' in self.labels)"
        f" || (has(self.queueName) && self.labels['{names.KUEUE_QUEUE_NAME}'] == self.queueName)",
        f"'{names.KUEUE_QUEUE_NAME}: set spec.queueName: ' + self.labels['{names.KUEUE_QUEUE_NAME}'] + '{_QUEUE_LABEL_WHY}'",
        f"{names.KUEUE_QUEUE_NAME}: set spec.queueName{_QUEUE_LABEL_WHY}",
        lambda s: not isinstance(s.get("labels"), dict) or names.KUEUE_QUEUE_NAME not in s["labels"]
        or s["labels"][names.KUEUE_QUEUE_NAME] == s.get("queueName"),
        lambda s: f"{names.KUEUE_QUEUE_NAME}: set spec.queueName: {s['labels'][names.KUEUE_QUEUE_NAME]}{_QUEUE_LABEL_WHY}",
        ("labels", "queueName"),
    ),
    CrossFieldRule(
        ".env.backend",
        "!has(self.deterministic) || !self.deterministic || !has(self.env) || !has(self.env.backend)"
        " || self.env.backend != 'envpool'",
        "'envpool\\'s C++ env state cannot be checkpointed; spec.deterministic needs backend: gymnasium'",
        "envpool's C++ env state cannot be checkpointed; spec.deterministic needs backend: gymnasium",
        lambda s: not s.get("deterministic") or (s.get("env") or {}).get("backend") != "envpool",
        lambda s: "envpool's C++ env state cannot be checkpointed; spec.deterministic needs backend: gymnasium",
        ("deterministic", "env"),
    ),
    CrossFieldRule(
        ".ppo.learnWhileCollecting",
        "!has(self.deterministic) || !self.deterministic || !has(self.ppo) || !has(self.ppo.learnWhileCollecting)"
        " || !self.ppo.learnWhileCollecting",
        f"'{LAGGED_ROLLOUT_NOT_DETERMINISTIC}'",
        LAGGED_ROLLOUT_NOT_DETERMINISTIC,
        lambda s: not s.get("deterministic") or not (s.get("ppo") or {}).get("learnWhileCollecting"),
        lambda s: LAGGED_ROLLOUT_NOT_DETERMINISTIC,
        ("deterministic", "ppo"),
    ),
    CrossFieldRule(
        ".success.evalWhileTraining",
        "!has(self.deterministic) || !self.deterministic || !has(self.success) || !has(self.success.evalWhileTraining)"
        " || !self.success.evalWhileTraining",
        f"'{BACKGROUND_EVALUATION_NOT_DETERMINISTIC}'",
        BACKGROUND_EVALUATION_NOT_DETERMINISTIC,
        lambda s: not s.get("deterministic") or not (s.get("success") or {}).get("evalWhileTraining"),
        lambda s: BACKGROUND_EVALUATION_NOT_DETERMINISTIC,
        ("deterministic", "success"),
    ),
    *HYPERPARAMETER_RULES,
]


def immutable_fields() -> list[str]:
    """Spec fields (camelCase) that cannot change while the job exists."""
    return [
        field.alias or name
        for name, field in JobSpec.model_fields.items()
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("x-kuberl-immutable")
    ]


def optional_immutable_fields() -> list[str]:
    """Immutable fields with neither a default nor `required`: the API server
    can only tell that one was added or removed with a spec-level rule."""
    return [
        field.alias or name
        for name, field in JobSpec.model_fields.items()
        if (field.alias or name) in immutable_fields() and not field.is_required() and field.default is None
    ]


# pydantic names union branches in error locations; they are not field names.
_BRANCH_TAG = re.compile(
    r"^(int|str|float|bool|none|constrained-(str|int|float)"
    r"|(list|dict|literal|nullable|union|tagged-union|json-or-python|lax-or-strict|function-\w+)\[.*\]|function-\w+)$"
)


def _path(loc: tuple) -> str:
    parts = ["spec"]
    for item in loc:
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
        elif not _BRANCH_TAG.match(str(item)):
            parts.append(str(item))
    return ".".join(parts)


_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
}


def _expected(err: dict) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
    }
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    if kind in bounds:
        words, key = bounds[kind]
        return f"{words} {ctx[key]}"
    if kind == "literal_error":
        return ctx["expected"]
    if kind == "string_pattern_mismatch":
        return PATTERN_MEANINGS.get(ctx["pattern"], f"a string matching {ctx['pattern']}")
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters"
    if kind == "string_too_short":
        return f"at least {ctx['min_length']} character(s)"
    if kind == "too_long":
        return f"at most {ctx['max_length']} entries"
    if kind == "too_short":
        return f"at least {ctx['min_length']} entries"
    return err["msg"][0].lower() + err["msg"][1:]


def _fields_at(loc: tuple) -> list[str]:
    """camelCase field names of the model at `loc` (for spelling hints)."""
    model: Any = JobSpec
    for item in loc:
        field = next((f for n, f in getattr(model, "model_fields", {}).items() if (f.alias or n) == item), None)
        if field is None:
            return []
        model = next((t for t in (field.annotation, *getattr(field.annotation, "__args__", ())) if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return [f.alias or n for n, f in getattr(model, "model_fields", {}).items()]


def _unknown_field(loc: tuple) -> str:
    if len(loc) == 2 and (other := _block_holding(str(loc[1]), str(loc[0]))):
        return f"unknown field: a hyperparameter of algorithm {other}, not {loc[0]} (spec.{other}.{loc[1]})"
    close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1]), n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    # `kubectl explain` needs a cluster with the CRD installed; the spec reference is in every checkout
    return "unknown field (check the spelling; docs/spec-reference.md lists the fields, as `kubectl explain rltj.spec` does in a cluster)"


def _block_holding(name: str, block: str) -> str | None:
    """The other algorithm's block that has a field `name`, when `block` is an algorithm's block."""
    blocks = {field: model for field, model in ALGORITHM_BLOCKS.values()}
    if block not in blocks or name in _fields_at((block,)):
        return None
    return next((field for field, model in blocks.items() if field != block and name in _fields_at((field,))), None)


def _message(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return _unknown_field(err["loc"])
    if err["type"] == "missing":
        return "required field is missing"
    return f"expected {_expected(err)} (got {shown(err.get('input'))})"


def _custom_trainer_containers(spec: dict) -> tuple[list[dict], list[str]]:
    """A custom trainer's template containers named 'trainer', and the names of the others."""
    pod_spec = (spec.get("template") or {}).get("spec") if isinstance(spec.get("template"), dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if spec.get("trainer") != "custom" or not isinstance(containers, list):
        return [], []
    ours = [c for c in containers if isinstance(c, dict) and c.get("name") == names.TRAINER_CONTAINER]
    return ours, [c["name"] for c in containers if isinstance(c, dict) and isinstance(c.get("name"), str)]


def _renamed_trainer(spec: dict) -> str | None:
    """The container a custom trainer's refusal asks to rename to 'trainer' (it lacks no image of its own)."""
    ours, others = _custom_trainer_containers(spec)
    return others[0] if others and not ours else None


def _custom_trainer_problems(spec: dict) -> list[Problem]:
    """trainer: custom runs the template's command; without one kuberl's trainer would start with no algorithm."""
    if spec.get("trainer") != "custom":
        return []
    ours, others = _custom_trainer_containers(spec)
    if ours and (ours[0].get("command") or ours[0].get("args")):
        return []
    hint = (f"; rename {others[0]!r} to {names.TRAINER_CONTAINER!r} (any other container runs beside it as a sidecar,"
            " without the rank environment; PyTorchJob's is named 'pytorch')") if others and not ours else ""
    return [Problem("spec.template.spec.containers", f"trainer: custom needs a container named {names.TRAINER_CONTAINER!r}"
                    f" with a command (or args) of its own{hint}")]


def _problem_at(problems: list[Problem], fields: tuple[str, ...]) -> bool:
    return any(p.path == f"spec.{f}" or p.path.startswith((f"spec.{f}.", f"spec.{f}[")) for p in problems for f in fields)


def _too_deep(spec: dict) -> str | None:
    """The field (its first three levels) under which `spec` nests deeper than
    MAX_NESTING: a job from the API server is JSON, not YAML, so the file
    reader's bound does not cover the operator."""
    stack: list[tuple[Any, str, int]] = [(spec, "spec", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_NESTING:
            return path
        if isinstance(value, dict):
            stack += [(v, f"{path}.{k}" if depth < 3 else path, depth + 1) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, f"{path}[{i}]" if depth < 3 else path, depth + 1) for i, v in enumerate(value)]
    return None


def parse_spec(spec: Any, ratchet: Ratchet | None = None) -> JobSpec:
    """Validate a spec dict (camelCase, as in YAML) and return it defaulted.
    Raises InvalidJob listing every problem. `ratchet`: which cross-field rules' refusals a job already admitted
    keeps running with (`cross_field_failures`); None: none, every rule applies."""
    problems: list[Problem] = []
    if not isinstance(spec, dict):
        raise InvalidJob([Problem("spec", f"expected an object (got {shown(spec)})")])
    deep = _too_deep(spec)
    if deep:  # before anything recurses into it (pydantic, deepcopy in render)
        raise InvalidJob([Problem(deep, f"nested deeper than {MAX_NESTING} levels")])
    try:
        # by the YAML's names alone, as the CRD's schema has them: `learning_rate` (the model's Python name, SB3's
        # habit) is an unknown field, which the API server refuses or prunes
        parsed = JobSpec.model_validate(spec, by_alias=True, by_name=False)
    except ValidationError as e:
        parsed = None
        for err in e.errors():
            problem = Problem(_path(err["loc"]), _message(err))
            if problems and problems[-1].path == problem.path:  # one union, two branches
                problem = Problem(problem.path, problems.pop().message.split(" (got")[0] + " or " + problem.message[len("expected "):])
            problems.append(problem)
    problems += label_key_problems("spec.labels", spec.get("labels"))
    problems += label_key_problems("spec.nodeSelector", spec.get("nodeSelector"))
    problems += toleration_problems("spec.tolerations", spec.get("tolerations"))
    problems += node_affinity_problems("spec.affinity", spec.get("affinity"))
    problems += pod_affinity_problems("spec.affinity", spec.get("affinity"))
    problems += resources_problems(spec.get("resources"))
    problems += pod_template_problems(spec.get("template"), _renamed_trainer(spec))
    problems += volume_reference_problems(spec.get("template"), parsed.workers if parsed is not None else None)
    problems += image_problems("spec.image", spec.get("image"))
    problems += _custom_trainer_problems(spec)
    if parsed is not None:
        problems += gang_template_problems(spec.get("template"), parsed.workers)
        # the PVC's storage request and the /dev/shm emptyDir's sizeLimit: refused at their create otherwise,
        # after the job was accepted
        problems += [p for p in (exponent_problem("spec.checkpoint.size", parsed.checkpoint.size),
                                 exponent_problem("spec.shmSize", parsed.shm_size)) if p]
    if parsed is not None and not problems:
        problems += config_size_problems(parsed, spec)
        problems += sidecar_port_problems(parsed, spec.get("template"))
    problems += [problem for name, fingerprint, problem in cross_field_failures(spec, problems)
                 if not (ratchet and ratchet(name, fingerprint))]
    if problems or parsed is None:
        raise InvalidJob(problems)
    return parsed


def cross_field_failures(spec: dict, found: list[Problem]) -> list[tuple[str, str, Problem]]:
    """Each cross-field rule `spec` fails: the rule's name (its field's path), the fingerprint of the fields it reads,
    and its problem. A rule that reads a field refused by itself (`found`) is left out: that problem says it all,
    and one rule's refusal silences no other rule. The API server ratchets these rules on an unchanged spec (they
    sit at spec, KEP-4008); the operator ratchets each one while what it reads is unchanged (`parse_spec`)."""
    failures = []
    for rule in CROSS_FIELD_RULES:
        if _problem_at(found, rule.reads) or rule.check(spec):
            continue
        read = json.dumps({field: spec.get(field) for field in rule.reads}, sort_keys=True, default=str)
        failures.append(("spec" + rule.field_path, hashlib.sha256(read.encode()).hexdigest()[:16],
                         Problem("spec" + rule.field_path, rule.describe(spec))))
    return failures


DOCUMENT_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")


def env_id_problem(env_id: str, registered: Collection[str]) -> Problem | None:
    """Why spec.env.id names no env of `registered` (the gymnasium ids registered here), with the ids it may
    have meant; None when it is registered, a "module:Class", or in a namespace whose package is not installed
    here (`ALE/Pong-v5`, or ale-py's `PongNoFrameskip-v4`, without ale_py: left to the trainer's image). A namespace that is a registered one
    misspelt (`ale/`, `AL/` beside ale_py's `ALE/`) is no other package's: refused with the ids it may have meant."""
    if ":" in env_id or env_id in registered:
        return None
    if atarikwargs.NO_FRAMESKIP_ID.fullmatch(env_id) and not any(known.startswith("ALE/") for known in registered):
        return None  # PongNoFrameskip-v4 without ale-py here, as ALE/Pong-v5: the trainer's image may have it
    if "/" in env_id:
        namespace = env_id.split("/", 1)[0]
        namespaces = sorted({known.split("/", 1)[0] for known in registered if "/" in known})
        misspelt = [known for known in namespaces if known.lower() == namespace.lower()] or difflib.get_close_matches(
            namespace, namespaces, n=1, cutoff=0.75)
        if namespace not in namespaces and not misspelt:
            return None
    # case first (Cartpole-v1), then spelling (CartPoel-v1) and version (CartPole-v2)
    same_case = [known for known in registered if known.lower() == env_id.lower()]
    by_lower = {known.lower(): known for known in sorted(registered)}
    close = same_case or [by_lower[k] for k in difflib.get_close_matches(env_id.lower(), by_lower, n=3, cutoff=0.75)]
    # an id the user's own package registers when imported is unknown here, and nothing here imports it
    hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close
            else "; if your own package registers it when imported, name a function there that returns"
            " gymnasium.make of it (or the env's class): \"package.module:name\"")
    return Problem("spec.env.id", f"expected a gymnasium id registered here, or \"module:Class\" (got {env_id!r}){hint}")


def validate_job(job: Any, env_ids: Collection[str] | None = None, ratchet: Ratchet | None = None) -> JobSpec:
    """Validate a whole RLTrainingJob object (apiVersion, kind, metadata, spec).

    `env_ids`, the gymnasium ids registered here, lets callers that can import
    gymnasium check spec.env.id (`env_id_problem`); None means "cannot tell
    here" (the operator's image has no gymnasium: the trainer checks it).
    `ratchet`: which refusals of the cross-field rules and the WEIGHING_RULES a job
    already admitted keeps running with (`cross_field_failures`, `weighings`); None:
    none, every rule applies.
    """
    if not isinstance(job, dict):
        raise InvalidJob([Problem("(document)", f"expected a YAML mapping (got {shown(job)})")])
    problems: list[Problem] = []
    for field, expected in (("apiVersion", names.API_VERSION), ("kind", names.KIND)):
        if field not in job:
            problems.append(Problem(field, f"required field is missing (write {field}: {expected})"))
        elif job[field] != expected:
            problems.append(Problem(field, f"expected {expected!r} (got {job[field]!r})"))
    spec_fields = {field.alias or name for name, field in JobSpec.model_fields.items()}
    problems += [Problem(str(key), "a field of spec, not of the document: indent it under spec:" if key in spec_fields
                         else "unknown field (an RLTrainingJob has apiVersion, kind, metadata, spec)")
                 for key in job if key not in DOCUMENT_FIELDS]
    metadata = job.get("metadata") or {}
    if isinstance(metadata, dict):
        problems += name_problems(metadata.get("name"))
        problems += namespace_problems("metadata.namespace", metadata.get("namespace"))
    else:
        problems.append(Problem("metadata", f"expected an object (got {shown(metadata)})"))
    parsed = None
    if "spec" not in job:
        problems.append(Problem("spec", "required field is missing"))
    else:
        try:
            parsed = parse_spec(job["spec"], ratchet)
        except InvalidJob as e:
            problems += e.problems
        nproc = torchrun.template_problem(job["spec"]) if parsed is not None else None
        problems += [Problem(*nproc)] if nproc else []
        problems += pod_queue_label_problems(parsed)
        problems += atari_kwargs_problems(parsed)
        problems += [p for rule, inputs, found in weighings(parsed) if not (ratchet and ratchet(rule, inputs)) for p in found]
    if env_ids is not None and (env_id := _env_id(parsed, job.get("spec"))) is not None:
        # also when other fields failed: every problem in one round, a misspelt id with a misspelt field
        problems += [p for p in [env_id_problem(env_id, env_ids)] if p is not None and p.path not in {q.path for q in problems}]
    if problems:
        raise InvalidJob(problems)
    assert parsed is not None
    return parsed


def _env_id(parsed: JobSpec | None, spec: Any) -> str | None:
    """spec.env.id as parsed, or as written where the spec did not parse (a string, else None)."""
    if parsed is not None:
        return parsed.env.id if parsed.env is not None else None
    env = spec.get("env") if isinstance(spec, dict) else None
    env_id = env.get("id") if isinstance(env, dict) else None
    return env_id if isinstance(env_id, str) else None


def atari_kwargs_problems(parsed: JobSpec | None) -> list[Problem]:
    """An ALE id's kwargs (atarikwargs.is_ale_id) as kuberl's trainer reads them (atarikwargs: its own keys, and those its ale and envpool
    backends cannot take) and the network options its frames refuse (atarikwargs.network_problem), here without
    gymnasium: the trainer refused them at start, after the pods (GPU pods, for Pong) were scheduled and started."""
    if parsed is None or parsed.trainer != "kuberl" or parsed.env is None or not atarikwargs.is_ale_id(parsed.env.id):
        return []
    kwargs, backend = dict(parsed.env.kwargs), parsed.env.backend
    options = getattr(parsed, parsed.algorithm, None)  # spec.ppo or spec.dqn; None where left out (its defaults)
    problem = atarikwargs.kwargs_problem(kwargs, backend) or atarikwargs.network_problem(
        kwargs, backend, parsed.algorithm, getattr(options, "policy", "auto"), getattr(options, "normalize_observation", False))
    return [problem] if problem else []


def replay_memory_problems(parsed: JobSpec | None) -> list[Problem]:
    """An Atari id's replay buffer (DQN's, SAC's, TD3's) over the memory each process of its pod may use, as the trainer
    weighs it at start (replaymemory): here without gymnasium, before any pod; a pod would be OOM-killed once its
    buffer filled, hours in, and every gang restart after it."""
    problem = replaymemory.spec_problem(parsed, replaymemory.job_replay(parsed)) if parsed is not None else None
    return [problem] if problem else []


# Rules that weigh a job against the resources its own spec gives it: they keep a job from failing itself (an OOM
# hours in), never the cluster from a job. An operator upgrade that adds or tightens one ratchets it, as the API
# server ratchets a CRD's validation (KEP-4008, CRDValidationRatcheting, on by default since Kubernetes 1.30: an
# unchanged value a new rule fails is let through on update): a job admitted before keeps running, through its
# gang restarts, until what the rule weighs changes. Rules that protect the cluster (the schema, names, pod
# security) are never ratcheted: a status can be forged by whoever may write it, a spec's resources only hurt
# their own job. Each row: the rule's name (status.admitted.weighed's key), its problems, and what it weighs.
WEIGHING_RULES: dict[str, tuple[Callable[[JobSpec | None], list[Problem]], Callable[[JobSpec], tuple]]] = {
    "replayMemory": (replay_memory_problems, replaymemory.weighed),
}

# (rule, fingerprint of what it reads) -> whether the job was admitted with that rule at those inputs
Ratchet = Callable[[str, str], bool]
ADMITTED_RECORD_LIMIT = 16  # fingerprints status.admitted.weighed holds (its maxProperties)


def weighings(parsed: JobSpec | None) -> list[tuple[str, str, list[Problem]]]:
    """Each weighing rule's name, the fingerprint of what it weighs of `parsed`, and its problems with it."""
    if parsed is None:
        return []
    found = []
    for rule, (problems, inputs) in WEIGHING_RULES.items():
        fingerprint = hashlib.sha256(json.dumps(inputs(parsed), default=str).encode()).hexdigest()[:16]
        found.append((rule, fingerprint, problems(parsed)))
    return found


OFF_POLICY = ("dqn", "sac", "td3")


def learning_budget_warning(spec: JobSpec) -> Problem | None:
    """An off-policy job (DQN's, SAC's, TD3's) whose budget ends before its first gradient step: each rank first takes
    learningStarts transitions, and a batch's worth (the trainer's OffPolicyAlgorithm.learning), so a TD3 job of
    totalTimesteps 10,000 with the default learningStarts 25,000 acted at random throughout, succeeded, and wrote its
    initial weights as its model. A warning: a budget cut short on purpose (a smoke test) is the user's to choose."""
    if spec.trainer != "kuberl" or spec.algorithm not in OFF_POLICY or spec.total_timesteps is None:
        return None
    hp = spec.hyperparameters
    first, per_rank = max(hp.learning_starts, hp.batch_size), spec.total_timesteps // max(1, spec.world_size)
    if per_rank <= first:
        field = "learningStarts" if hp.learning_starts >= hp.batch_size else "batchSize"
        return Problem(f"spec.{spec.algorithm}.{field}", f"{first:,} transitions per rank come before the first gradient"
                       f" step, and totalTimesteps {spec.total_timesteps:,} over world size {spec.world_size} gives each rank"
                       f" {per_rank:,}: the run would end without learning (its model its initial weights); lower {field} or"
                       " raise totalTimesteps")
    delay = getattr(hp, "policy_delay", 1)  # TD3's actor steps once every policyDelay critic steps
    _, env_steps, gradient_steps = replaymemory.iteration(hp.train_frequency, hp.gradient_steps, spec.env.num_envs)
    critic_steps = ((per_rank - first) // env_steps + 1) * gradient_steps  # at most, over the iterations that learn
    if critic_steps < delay:
        return Problem(f"spec.{spec.algorithm}.policyDelay", f"the actor steps once every {delay:,} critic steps, and"
                       f" the run takes at most {critic_steps:,} (per rank, after learningStarts): it would end with its"
                       " actor, the model, as initialised; lower policyDelay or raise totalTimesteps")
    return None


# The variables a tracking client needs in the trainer's env (spec.tracking): MLflow's server; W&B's key, unless its
# mode keeps the run on the volume or logs nothing
MLFLOW_TRACKING_URI = "MLFLOW_TRACKING_URI"
WANDB_API_KEY = "WANDB_API_KEY"
WANDB_MODE = "WANDB_MODE"
WANDB_MODES_WITHOUT_SERVER = ("offline", "disabled", "dryrun")
WANDB_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")  # what wandb.Settings.mode takes
WANDB_BASE_URL, WANDB_DEFAULT_BASE_URL = "WANDB_BASE_URL", "https://api.wandb.ai"


def url_host(url: object) -> str | None:
    """A URL's host name, None for what is no URL (a template's value is the tenant's: an unclosed IPv6 bracket)."""
    try:
        return urllib.parse.urlsplit(url).hostname if isinstance(url, str) else None
    except ValueError:
        return None


def wandb_variable_problems(env: dict, where: str) -> list[Problem]:
    """A WANDB_MODE or WANDB_BASE_URL value in the trainer's `env` (by name) that W&B's settings refuse when rank 0
    starts its run (which then logs nothing): a mode none of its modes, a server URL that is no http(s) URL."""
    found = []
    mode, url = env.get(WANDB_MODE, {}).get("value"), env.get(WANDB_BASE_URL, {}).get("value")
    if isinstance(mode, str) and mode not in WANDB_MODES:
        found.append(Problem(f"{where}[name={WANDB_MODE}].value", f"{safetext.one_line(repr(mode))[:80]} is none of"
                             f" W&B's modes ({', '.join(WANDB_MODES)}): rank 0 would log nothing to W&B"))
    if isinstance(url, str) and (not re.match(r"https?://", url, re.IGNORECASE) or url_host(url) is None):
        shown = safetext.one_line(repr(re.sub(r"(://)[^/?#\s]*@", r"\1", url)))[:80]  # no user or password
        found.append(Problem(f"{where}[name={WANDB_BASE_URL}].value", f"{shown} is no http(s) URL of a W&B server (W&B"
                             " refuses it): rank 0 would log nothing to W&B"))
    return found


def tracking_warnings(spec: JobSpec, netrc_hosts: Collection[str] = ()) -> list[Problem]:
    """Each tracker of spec.tracking that would log nothing, naming its field: MLflow with no MLFLOW_TRACKING_URI in
    the trainer container's env (spec.template) and no envFrom there that may hold it; W&B online with no
    WANDB_API_KEY; or trainer: custom, where kuberl's trainer, which logs, does not run. Rank 0 would say so once and
    train on. Warnings: a Secret's keys are not seen here. `netrc_hosts`: the machines with a login in the user's
    ~/.netrc, where `wandb login` keeps its key, which kuberl run's ranks read (their HOME is the user's); a pod's
    is not the user's, so the operator and `kuberl validate` pass none."""
    found = []
    for field, service in (("mlflow", "MLflow"), ("wandb", "W&B")):
        if getattr(spec.tracking, field) is not None and spec.trainer != "kuberl":
            found.append(Problem(f"spec.tracking.{field}", f"only kuberl's trainer logs to {service}, and trainer: custom"
                                 f" runs your command: nothing is logged for it. Log from your script (the {service}"
                                 " client's variables reach it through spec.template's env), and leave spec.tracking out"))
    if found:
        return found
    pod = spec.template.get("spec") if isinstance(spec.template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    trainer = next((c for c in containers or [] if isinstance(c, dict) and c.get("name") == names.TRAINER_CONTAINER), {})
    env = {e.get("name"): e for e in (trainer.get("env") if isinstance(trainer.get("env"), list) else []) if isinstance(e, dict)}
    where = f"spec.template.spec.containers[name={names.TRAINER_CONTAINER}].env"
    if spec.tracking.wandb is not None:  # a value env sets wins over envFrom's
        found.extend(wandb_variable_problems(env, where))
    if trainer.get("envFrom"):
        return found
    if spec.tracking.mlflow is not None and MLFLOW_TRACKING_URI not in env:
        found.append(Problem("spec.tracking.mlflow", f"{MLFLOW_TRACKING_URI} is not in the trainer's environment: rank 0"
                             f" would log nothing to MLflow. Set it in {where} (or envFrom a Secret holding it and"
                             " MLFLOW_TRACKING_TOKEN), e.g. http://mlflow.mlflow.svc:5000"))
    mode = env.get(WANDB_MODE, {})
    # a mode from a Secret or ConfigMap (valueFrom) is not seen here: it may keep the run offline
    serverless = "valueFrom" in mode or mode.get("value") in WANDB_MODES_WITHOUT_SERVER
    logged_in = url_host(env.get(WANDB_BASE_URL, {}).get("value") or WANDB_DEFAULT_BASE_URL) in netrc_hosts
    if spec.tracking.wandb is not None and WANDB_API_KEY not in env and not serverless and not logged_in:
        found.append(Problem("spec.tracking.wandb", f"{WANDB_API_KEY} is not in the trainer's environment: rank 0 would"
                             f" log nothing to W&B. Set it in {where} from a Secret (valueFrom.secretKeyRef, or envFrom"
                             f" a Secret holding it), or set {WANDB_MODE}: offline there to keep the run on the"
                             " checkpoint volume for `wandb sync`"))
    return found


def pod_queue_label_problems(parsed: JobSpec | None) -> list[Problem]:
    """Kueue's queue-name label in the pod template with no spec.queueName: the pods carry it without a pod group
    (kueue.x-k8s.io/pod-group-name), so Kueue's pod integration admits each one alone and a gang part admitted waits
    for the rest (as jobstatus.judge says of the job's own label)."""
    template = parsed.template if parsed is not None and parsed.queue_name is None else None
    metadata = template.get("metadata") if isinstance(template, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    queue = labels.get(names.KUEUE_QUEUE_NAME) if isinstance(labels, dict) else None
    if not isinstance(queue, str):
        return []
    return [Problem(f"spec.template.metadata.labels.{names.KUEUE_QUEUE_NAME}", f"queues each pod on its own in Kueue (no"
                    f" pod group): set spec.queueName: {queue} instead, and kuberl's pods form one Kueue pod group")]


# The trainer's configuration (trainerconfig.dump: the defaulted spec as indented JSON, plus the job's name,
# namespace, uid and paths, a few hundred bytes) is one ConfigMap, which the API server takes up to 1 MiB
# (ValidateConfigMap: the data's total within core.MaxSecretSize); the margin holds the rest.
MAX_CONFIG_SPEC_BYTES = MAX_CONFIGMAP_BYTES - 4096


def config_size_problems(parsed: JobSpec, spec: dict) -> list[Problem]:
    """A spec the trainer's ConfigMap cannot hold, at the field that makes it so (the template or
    env.kwargs, whichever is larger): the API server would refuse the ConfigMap after `kuberl validate`
    passed the job, and fail it as InvalidChild."""
    size = len(json.dumps({"spec": defaulted(parsed)}, sort_keys=True, indent=1))
    if size <= MAX_CONFIG_SPEC_BYTES:
        return []
    env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
    parts = {"spec.template": spec.get("template"), "spec.env.kwargs": env.get("kwargs")}
    field = max(parts, key=lambda k: len(json.dumps(parts[k], indent=1, default=str)))
    return [Problem(field, f"the trainer's configuration (ConfigMap <job>-config, the defaulted spec as indented JSON)"
                    f" would be {size} bytes; the API server takes at most {MAX_CONFIGMAP_BYTES} (1 MiB) per ConfigMap:"
                    " keep large data in a ConfigMap or Secret of your own, or in a volume")]


def sidecar_port_problems(parsed: JobSpec, template: Any) -> list[Problem]:
    """A port a sidecar (or a native sidecar: an init container with restartPolicy Always) declares that
    kuberl's trainer binds: the metrics ports (metrics.port + local rank) in every pod, the rendezvous port
    in worker 0's (the template is every pod's). The containers of a pod share one network namespace, so one of the two cannot bind; the API
    server only warns of a duplicate port (pkg/api/pod/warnings.go), and a sidecar that won the bind served
    its own page to the operator's scrapes, so the job looked stalled and was restarted until it failed."""
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod_spec, dict) or parsed.trainer == "custom":  # a custom trainer's ports are what it binds
        return []
    ours = {parsed.metrics.port + i: f"spec.metrics.port + local rank {i}, in every pod" for i in range(parsed.procs)}
    ours[parsed.rendezvous.port] = "spec.rendezvous.port, in worker 0's pod"
    problems = []
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(pod_spec.get(kind) if isinstance(pod_spec.get(kind), list) else []):
            if not isinstance(container, dict) or (kind == "containers" and container.get("name") == names.TRAINER_CONTAINER):
                continue
            if kind == "initContainers" and container.get("restartPolicy") != "Always":
                continue  # it exits before the trainer starts
            for j, port in enumerate(container.get("ports") if isinstance(container.get("ports"), list) else []):
                number = port.get("containerPort") if isinstance(port, dict) else None
                if type(number) is int and number in ours and port.get("protocol", "TCP") == "TCP":
                    problems.append(Problem(f"spec.template.spec.{kind}[{i}].ports[{j}].containerPort",
                                            f"{number} is the trainer's ({ours[number]}), and the containers of a pod"
                                            f" share its network: move the sidecar's port, or set {ours[number].split(' + ')[0].split(',')[0]}"))
    return problems


def immutable_changes(old: Any, new: Any) -> list[Problem]:
    """Immutable fields that differ between two specs, as the CRD's
    `self == oldSelf` rules see them (after defaulting)."""
    old_spec, new_spec = parse_spec(old), parse_spec(new)
    problems = []
    for field in immutable_fields():
        attr = next(n for n, f in JobSpec.model_fields.items() if (f.alias or n) == field)
        if getattr(old_spec, attr) != getattr(new_spec, attr):
            problems.append(Problem(f"spec.{field}", "immutable while the job exists"))
    return problems


def defaulted(spec: JobSpec) -> dict:
    """The fully defaulted spec as the trainer receives it (camelCase)."""
    data = spec.model_dump(by_alias=True, mode="json")
    if spec.algorithm is not None:
        data[spec.algorithm] = spec.hyperparameters.model_dump(by_alias=True, mode="json")
    data["procsPerWorker"] = spec.procs
    return data
