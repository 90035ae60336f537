"""The RLTrainingJob spec: one model, the source of the CRD schema and of the
operator's validation.

Every field carries its description and default here; `kuberl.crd` turns these
models into the CRD's openAPIV3Schema, and `validate_job` checks a job with the
very same models. Cross-field rules live in `CROSS_FIELD_RULES` twice, as CEL
for the API server and as Python for the operator, and a unit test proves both
agree on a shared table of cases.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import IO, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from . import contract, names, podschema, safetext, torchrun

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes' resource.Quantity pattern as controller-gen writes it, but with a whole exponent:
# ParseQuantity refuses 1e1.5 (apimachinery's api/resource/suffix.go, interpret: strconv.ParseInt),
# which the generated pattern lets through to fail only at PVC or pod create.
QUANTITY = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
MAX_QUANTITY_LENGTH = 64  # so an exponent is always one int() reads (Python refuses over 4300 digits)
# A gymnasium id ("CartPole-v1", "ALE/Pong-v5") or a user's "module:Class".
ENV_ID = r"^([A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+(:[A-Za-z_][A-Za-z0-9_.]*)?$"
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
GPU_RESOURCE = "nvidia.com/gpu"

# What a pattern means, for messages a person can act on.
PATTERN_MEANINGS = {
    QUANTITY: "a Kubernetes quantity such as 500m, 2 or 4Gi",
    ENV_ID: 'a gymnasium id such as "CartPole-v1" or "ALE/Pong-v5", or "module:Class"',
    DNS_1123_SUBDOMAIN: "a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
}

Quantity = Annotated[Annotated[str, Field(max_length=MAX_QUANTITY_LENGTH, pattern=QUANTITY)] | int, Field(description="A Kubernetes quantity (e.g. 500m, 2, 4Gi).")]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE, description="A label value.")]


class Model(BaseModel):
    """camelCase in YAML, snake_case in Python, unknown keys refused, and no
    type coercion: "2" is not an integer here, as it is not for the API server."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


def immutable(**kwargs: Any) -> Any:
    """A field that cannot change once the job exists (CEL `self == oldSelf`)."""
    extra = kwargs.pop("json_schema_extra", {}) or {}
    return Field(json_schema_extra={**extra, "x-kuberl-immutable": True}, **kwargs)


ANY_JSON_VALUE = {"x-kubernetes-preserve-unknown-fields": True, "description": "Any JSON value."}


def free_form(max_properties: int | None = None) -> dict:
    """Schema extra for an object Kubernetes validates itself (a pod template,
    affinity): the API server keeps its fields, the pod's own schema checks them."""
    extra: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if max_properties:
        extra["maxProperties"] = max_properties
    return extra


HiddenWidth = Annotated[int, Field(ge=1, le=65536, description="Width of one hidden layer.")]


class PPOConfig(Model):
    """PPO hyperparameters. Defaults solve CartPole-v1 quickly on CPU."""

    learning_rate: float = Field(2.5e-3, gt=0, le=1, description="Adam learning rate.")
    anneal_lr: bool = Field(True, description="Decay the learning rate linearly to 0 over totalTimesteps.")
    num_steps: int = Field(32, ge=1, le=100000, description="Rollout length per env per update.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    num_minibatches: int = Field(2, ge=1, le=4096, description="Minibatches per epoch, per rank; each is one all-reduce.")
    update_epochs: int = Field(4, ge=1, le=1000, description="Passes over each rollout.")
    grad_accumulation: int = Field(1, ge=1, le=1024, description="Micro-batches per minibatch; all but the last skip the all-reduce (no_sync).")
    norm_advantage: bool = Field(True, description="Normalise advantages per minibatch.")
    clip_coef: float = Field(0.2, gt=0, le=10, description="Policy ratio clip.")
    clip_value_loss: bool = Field(True, description="Clip the value loss like the policy loss.")
    ent_coef: float = Field(0.0, ge=0, le=10, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, le=100, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, gt=0, le=1000, description="Global gradient norm clip.")
    target_kl: float | None = Field(None, gt=0, description="Stop the epoch loop early when the approximate KL exceeds this (decided on all ranks together).")
    hidden_sizes: list[HiddenWidth] = Field([64, 64], min_length=1, max_length=8, description="Hidden layer widths of the actor and critic MLPs.")
    policy: Literal["auto", "mlp", "cnn"] = Field("auto", description="Network torso: auto picks the Nature DQN CNN for uint8 image observations (Atari) and an MLP otherwise; mlp or cnn force one.")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: autocast the network's forward pass (GPUs with bf16, or CPU); losses, log-probs and targets stay fp32.")
    normalize_observation: bool = Field(False, description="Running observation normalisation, all-reduced across ranks and checkpointed.")
    normalize_reward: bool = Field(False, description="Scale rewards by a running return std, all-reduced and checkpointed.")


class DQNConfig(Model):
    """DQN hyperparameters (per rank: every rank keeps its own replay buffer)."""

    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam learning rate.")
    buffer_size: int = Field(50000, ge=1, le=100_000_000, description="Replay capacity per rank, in transitions.")
    batch_size: int = Field(128, ge=1, le=65536, description="Transitions per gradient step, per rank.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    n_step: int = Field(3, ge=1, le=100, description="n-step returns (episode ends and the autoreset step are masked).")
    double_dqn: bool = Field(True, description="Select the next action with the online network, value it with the target.")
    target_update_interval: int = Field(500, ge=1, description="Env steps per rank between target network updates.")
    tau: float = Field(1.0, gt=0, le=1, description="Target update rate (1 = hard copy).")
    learning_starts: int = Field(1000, ge=0, description="Env steps per rank before learning starts.")
    train_frequency: int = Field(4, ge=1, description="Env steps per rank between gradient steps.")
    gradient_steps: int = Field(1, ge=1, le=1000, description="Gradient steps each time training runs.")
    exploration_initial_eps: float = Field(1.0, ge=0, le=1, description="Initial epsilon.")
    exploration_final_eps: float = Field(0.05, ge=0, le=1, description="Final epsilon.")
    exploration_fraction: float = Field(0.2, gt=0, le=1, description="Fraction of totalTimesteps over which epsilon decays.")
    max_grad_norm: float = Field(10.0, gt=0, le=1000, description="Global gradient norm clip.")
    hidden_sizes: list[HiddenWidth] = Field([128, 128], min_length=1, max_length=8, description="Hidden layer widths of the Q network.")
    policy: Literal["auto", "mlp", "cnn"] = Field("auto", description="Network torso: auto picks the Nature DQN CNN for uint8 image observations (Atari) and an MLP otherwise; mlp or cnn force one.")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: autocast the network's forward pass (GPUs with bf16, or CPU); losses, log-probs and targets stay fp32.")


class EnvSpec(Model):
    id: str = Field(min_length=1, max_length=253, pattern=ENV_ID, description='A gymnasium id ("CartPole-v1", "ALE/Pong-v5") or "module:Class".')
    num_envs: int = Field(8, ge=1, le=4096, description="Vectorised envs per process (rank).")
    kwargs: dict[str, Any] = Field(
        {},
        description="Keyword arguments for gymnasium.make. For Atari (ALE) ids kuberl also reads protocol (modern: sticky actions, the default; nature: NoFrameskip-v4 behaviour), frameStack, noopMax, episodicLife and clipRewards.",
        # a map of any JSON values, not an object with unknown fields: CEL sees
        # map entries (so env's `self == oldSelf` covers kwargs), not unknown fields
        max_length=64,  # enforced here too, not only by the CRD
        json_schema_extra={"additionalProperties": ANY_JSON_VALUE},
    )
    backend: Literal["auto", "ale", "gymnasium", "envpool"] = Field("auto", description="Vector env implementation. auto: ale-py's threaded C++ vector env for Atari ids (ale), gymnasium's otherwise; gymnasium: gymnasium's own (Atari: one core per rank); envpool: EnvPool's C++ thread pool (Atari ids; needs the trainer's envpool extra).")


class SuccessSpec(Model):
    target_return: float | None = Field(None, description="Stop when the evaluation mean return reaches this; unset means train for totalTimesteps.")
    eval_episodes: int = Field(10, ge=1, le=10000, description="Episodes per evaluation (rank 0).")
    eval_every: int = Field(10, ge=1, le=1_000_000, description="Policy updates between evaluations.")


class ResourceRequirements(Model):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # Kubernetes' own names
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Resource requests per pod (e.g. cpu, memory); GPUs come from gpusPerWorker.")
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Resource limits per pod; the CPU limit sets OMP_NUM_THREADS.")


class CheckpointSpec(Model):
    every_updates: int = Field(20, ge=1, le=1_000_000, description="Policy updates between checkpoints.")
    keep: int = Field(3, ge=1, le=100, description="Checkpoints kept; older ones are deleted.")
    size: str = Field("1Gi", pattern=QUANTITY, max_length=64, description="Size of the PVC the operator creates when claimName is unset.")
    storage_class_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="StorageClass of the created PVC; unset uses the cluster default.")
    claim_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="Use this existing PVC (never adopted or deleted).")
    retain: bool = Field(True, description="Keep the created PVC when the job is deleted.")
    when_none_usable: Literal["Fail", "StartOver"] = Field(
        "Fail", description="When checkpoints exist and none can be loaded. Fail: the job fails with reason NoUsableCheckpoint,"
        " naming each file (they are kept). StartOver: train from zero; the files are moved aside into unreadable/.")


# How long a deleted pod may keep its node: bounds suspend, gang restarts and deletion.
MAX_GRACE_SECONDS = 3600


# The operator renders every pod of a gang at once, each with its own copy of the template (about
# 2.7 bytes of memory per byte of template JSON): a 1.3 MB template x 1,024 workers took 3.6 GB and
# 31 s, where the chart gives the operator 256 MiB. 16 KiB per pod at the largest gang is plenty.
MAX_GANG_TEMPLATE_BYTES = 16 * 1024 * 1024


# The trainer's timeouts become datetime.timedelta (torch's process group), which overflows
# past about 10**14 s; 30 days outlasts any evaluation or checkpoint load.
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600


class RunPolicy(Model):
    backoff_limit: int = Field(3, ge=0, le=1000, description="Gang restarts after crashes or stalls before the job fails.")
    restart_backoff_seconds: float = Field(10.0, ge=0, le=3600, description="Base of the exponential delay between gang restarts.")
    active_deadline_seconds: int | None = Field(None, ge=1, description="Fail the job when it has run this long.")
    ttl_seconds_after_finished: int | None = Field(None, ge=0, description="Delete the job this long after it finishes.")
    suspend: bool = Field(False, description="Delete the pods and keep the job; resuming continues from the checkpoint.")
    stall_timeout_seconds: int = Field(600, ge=1, description="Restart the gang when rank 0's step counter has not moved this long.")
    startup_timeout_seconds: int = Field(600, ge=1, description="Report why pods are not running after this long, then retry them.")
    max_startup_retries: int = Field(3, ge=0, le=1000, description="Generations that never fully start before the job fails.")
    collective_timeout_seconds: int = Field(1800, ge=10, le=MAX_TIMEOUT_SECONDS, description="Timeout of each collective; must outlast rank-0-only work (evaluation, checkpoints).")
    rendezvous_timeout_seconds: int = Field(600, ge=1, le=MAX_TIMEOUT_SECONDS, description="How long ranks retry rendezvous while rank 0's name does not resolve yet.")
    termination_grace_period_seconds: int = Field(30, ge=0, le=MAX_GRACE_SECONDS, description="Time a pod gets to save a checkpoint after SIGTERM.")
    success_policy: Literal["AllWorkers", "Worker0"] = Field(
        "AllWorkers",
        description="When a job whose trainer reports nothing succeeds. AllWorkers: when every worker has exited 0 (as a"
        " PyTorchJob of Workers only). Worker0: when worker 0 has exited 0, however the others end (as a PyTorchJob"
        " with a Master succeeds with its Master; kuberl convert sets it for one).",
    )


class MetricsSpec(Model):
    port: int = Field(9090, ge=1024, le=65000, description="Prometheus port of local rank 0; local rank i uses port + i.")


class RendezvousSpec(Model):
    port: int = Field(29500, ge=1024, le=65000, description="MASTER_PORT of the process group.")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="auto: NCCL when CUDA is available, else gloo.")


class JobSpec(Model):
    """Spec of an RLTrainingJob."""

    trainer: Literal["kuberl", "custom"] = immutable(
        default="kuberl",
        description="kuberl: kuberl's trainer runs algorithm on env. custom: the template's `trainer` container brings its"
        " own command; algorithm, env and totalTimesteps are then optional, and the job succeeds when every worker exits 0.",
    )
    algorithm: Literal["ppo", "dqn"] | None = immutable(default=None, description="Training algorithm; required unless trainer: custom.")
    ppo: PPOConfig | None = immutable(default=None, description="PPO hyperparameters; only with algorithm: ppo.")
    dqn: DQNConfig | None = immutable(default=None, description="DQN hyperparameters; only with algorithm: dqn.")
    env: EnvSpec | None = immutable(default=None, description="Environment each rank vectorises; required unless trainer: custom.")
    total_timesteps: int | None = immutable(default=None, ge=1, le=10**12, description="Env steps across all ranks; required unless trainer: custom.")
    success: SuccessSpec = Field(default_factory=SuccessSpec, description="Early stop on evaluation return.")
    workers: int = immutable(default=1, ge=1, le=names.MAX_WORKERS, description="Pods in the gang.")
    gpus_per_worker: int = immutable(default=0, ge=0, le=names.MAX_PROCS_PER_WORKER, description="nvidia.com/gpu per pod; explicit, never inferred.")
    procs_per_worker: int | None = immutable(default=None, ge=1, le=names.MAX_PROCS_PER_WORKER, description="Processes per pod; defaults to gpusPerWorker, or 1.")
    image: str | None = immutable(default=None, min_length=1, max_length=512, description="Trainer image; defaults to the operator's configured image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(None, description="Pull policy of the trainer container.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements, description="Per-pod resources; defaults to 1 CPU and 2Gi per process (the operator's trainer.resourcesPerProcess).")
    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=64, description="Node labels the pods require.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32, description="Pod tolerations.", json_schema_extra={"items": {"type": "object", "description": "A Kubernetes Toleration.", "x-kubernetes-preserve-unknown-fields": True}})
    affinity: dict[str, Any] = Field(default_factory=dict, description="Pod affinity.", json_schema_extra=free_form())
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="PriorityClass of the pods.")
    scheduler_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="Scheduler of the pods (volcano or scheduler-plugins get a PodGroup).")
    labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=64, description="Extra labels on every pod; kuberl's own (kuberl.dev/*) win.")
    shm_size: str = Field("1Gi", pattern=QUANTITY, max_length=64, description="Size of the in-memory /dev/shm.")
    template: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "A PodTemplateSpec (metadata, spec) layered onto every rendered pod. metadata.labels and"
            " metadata.annotations merge key by key; spec.containers merge by name: one named `trainer`"
            " patches kuberl's (env merged by name, volumeMounts by mountPath, any other field it sets"
            " replaces kuberl's, e.g. command to bring your own trainer), others are added as sidecars;"
            " spec.volumes merge by name; any other pod field set here replaces kuberl's. kuberl's labels,"
            " annotations, hostname, subdomain and restartPolicy always stay. Its JSON times workers is at"
            f" most {MAX_GANG_TEMPLATE_BYTES // 2**20} MiB (every pod is rendered at once), and"
            f" spec.terminationGracePeriodSeconds at most {MAX_GRACE_SECONDS}, as runPolicy's."
        ),
        json_schema_extra=free_form(2),
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoint policy and storage.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restarts, deadlines, suspend, timeouts.")
    queue_name: str | None = immutable(default=None, max_length=63, pattern=DNS_1123_SUBDOMAIN, description="Kueue LocalQueue; the pods become one pod group.")
    seed: int = immutable(default=1, ge=0, le=2**31 - 1, description="Job seed; each rank's envs derive theirs from it, the rank and the restart.")
    deterministic: bool = immutable(default=False, description="Deterministic torch kernels: a stopped and resumed run ends bitwise equal to an uninterrupted one.")
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Trainer metrics endpoint.")
    rendezvous: RendezvousSpec = Field(default_factory=RendezvousSpec, description="Process group settings.")

    @property
    def procs(self) -> int:
        """Processes per pod after defaulting."""
        return self.procs_per_worker or self.gpus_per_worker or 1

    @property
    def world_size(self) -> int:
        return self.workers * self.procs

    @property
    def hyperparameters(self) -> PPOConfig | DQNConfig | None:
        """The algorithm's block, defaulted when omitted (ALGORITHM_BLOCKS); None without an algorithm."""
        if self.algorithm is None:
            return None
        field, model = ALGORITHM_BLOCKS[self.algorithm]
        return getattr(self, field) or model()


# spec.algorithm -> (the JobSpec field holding its hyperparameters, their model); a new algorithm is a row
ALGORITHM_BLOCKS: dict[str, tuple[str, type[Model]]] = {"ppo": ("ppo", PPOConfig), "dqn": ("dqn", DQNConfig)}


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


def _at_most_buffer(field: str) -> CrossFieldRule:
    """A DQN count that must fit the replay buffer (per rank, as both are)."""
    value, size = _cel_hp("dqn", field, DQNConfig), _cel_hp("dqn", "bufferSize", DQNConfig)
    return _hyperparameter_rule(
        "dqn", field, f"{value} <= {size}",
        f"'expected at most bufferSize ' + string({size}) + ' (got ' + string({value}) + ')'",
        "expected at most bufferSize",
        lambda s: _hp(s, "dqn", field, DQNConfig) <= _hp(s, "dqn", "bufferSize", DQNConfig),
        lambda s: f"expected at most bufferSize {_hp(s, 'dqn', 'bufferSize', DQNConfig)} (got {_hp(s, 'dqn', field, DQNConfig)})",
    )


_CEL_PPO_BATCH = f"({_cel_hp('ppo', 'numSteps', PPOConfig)} * {_cel_hp('env', 'numEnvs', EnvSpec)})"
_CEL_MINIBATCHES = _cel_hp("ppo", "numMinibatches", PPOConfig)


def _ppo_batch(s: dict) -> int:
    """Transitions per rank per update: numSteps x env.numEnvs."""
    return _hp(s, "ppo", "numSteps", PPOConfig) * _hp(s, "env", "numEnvs", EnvSpec)


# Rules that need only the spec, between hyperparameters: refused at kubectl apply and by
# `kuberl validate`, not by a trainer after its pods were scheduled.
HYPERPARAMETER_RULES = [
    _at_most_buffer("batchSize"),
    _at_most_buffer("learningStarts"),
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
]


CROSS_FIELD_RULES = [
    _required_unless_custom("algorithm"),
    _required_unless_custom("env"),
    _required_unless_custom("totalTimesteps"),
    *(_block_of_algorithm(field) for field, _ in ALGORITHM_BLOCKS.values()),
    CrossFieldRule(
        ".procsPerWorker",
        "!has(self.procsPerWorker) || !has(self.gpusPerWorker) || self.gpusPerWorker == 0"
        " || self.procsPerWorker == self.gpusPerWorker",
        "'must equal spec.gpusPerWorker, one process per GPU (got '"
        " + string(self.procsPerWorker) + ' and ' + string(self.gpusPerWorker) + ')'",
        "must equal spec.gpusPerWorker (one process per GPU)",
        lambda s: s.get("procsPerWorker") is None
        or not s.get("gpusPerWorker")
        or s.get("procsPerWorker") == s.get("gpusPerWorker"),
        lambda s: "must equal spec.gpusPerWorker, one process per GPU"
        f" (got {s['procsPerWorker']} and {s['gpusPerWorker']})",
        ("procsPerWorker", "gpusPerWorker"),
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


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        # one line, escaped (safetext): a path quotes a tenant's map keys, and this line reaches status and terminals
        return safetext.one_line(f"{self.path}: {self.message}")


class InvalidJob(ValueError):
    """A job that cannot run; carries every problem found, each with its path."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


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


_shown = podschema.shown  # a value in a message: short ones as written, long ones summed up


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
    return "unknown field (check the spelling; `kubectl explain rltj.spec` lists the fields)"


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
    return f"expected {_expected(err)} (got {_shown(err.get('input'))})"


def _name_problems(name: Any) -> list[Problem]:
    if not name:
        return [Problem("metadata.name", "required field is missing")]
    if not isinstance(name, str):
        return [Problem("metadata.name", f"expected a string (got {name!r})")]
    problems = []
    if len(name) > names.MAX_JOB_NAME:
        problems.append(
            Problem(
                "metadata.name",
                f"expected at most {names.MAX_JOB_NAME} characters so every derived name"
                f" (e.g. {names.pvc_name(name)!r}) stays a 63-character DNS label (got {len(name)})",
            )
        )
    if not DNS_1035.fullmatch(name):
        problems.append(
            Problem("metadata.name", f"expected a DNS-1035 label: lowercase letters, digits and '-', starting with a letter (got {name!r})")
        )
    return problems


DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def namespace_problems(path: str, namespace: Any) -> list[Problem]:
    """A namespace, when given, is what the API server accepts (ValidateNamespaceName: a
    DNS-1123 label): it becomes part of every derived DNS name (MASTER_ADDR, PET_RDZV_ID)."""
    if namespace is None:
        return []
    if not isinstance(namespace, str) or len(namespace) > 63 or not DNS_1123_LABEL.fullmatch(namespace):
        return [Problem(path, "expected a namespace: a DNS-1123 label of at most 63 lowercase letters, digits and '-',"
                              f" starting and ending with a letter or digit (got {_shown(namespace)})")]
    return []


def _label_key_problems(path: str, mapping: Any) -> list[Problem]:
    """Label keys are qualified names; a schema cannot check map keys."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(f"{path}.{key}", "expected a label key: an optional DNS prefix and '/', then at most 63 letters,"
                f" digits, '-', '_' or '.' (got {key!r})")
        for key in mapping
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key) or len(key.rpartition("/")[2]) > 63
    ]
    return podschema.first_of(path, wrong, "keys that are not label keys", Problem)


def _label_value_problems(path: str, mapping: Any) -> list[Problem]:
    """Label values as the API server takes them (IsValidLabelValue: at most 63 characters of
    LABEL_VALUE), checked where the model cannot (the template's metadata is kept as written)."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(f"{path}.{key}", f"expected {PATTERN_MEANINGS[LABEL_VALUE]} (got {_shown(value)})")
        for key, value in mapping.items()
        if isinstance(value, str) and (len(value) > 63 or not re.fullmatch(LABEL_VALUE, value))
    ]
    return podschema.first_of(path, wrong, "values that are not label values", Problem)


def _annotation_key_problems(path: str, mapping: Any) -> list[Problem]:
    """Annotation keys are qualified names, case aside (ValidateAnnotations:
    IsQualifiedName(strings.ToLower(k))); refused by the API server at pod creation otherwise."""
    if not isinstance(mapping, dict):
        return []
    wrong = [
        Problem(path, "expected annotation keys that are qualified names: an optional DNS prefix and '/', then at most 63"
                f" letters, digits, '-', '_' or '.', starting and ending with a letter or digit (got key {_shown(key)})")
        for key in mapping
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key.lower()) or len(key.rpartition("/")[2]) > 63
    ]
    return podschema.first_of(path, wrong, "keys that are not qualified names", Problem)


def _objects(path: str, items: Any, plural: str, item: str) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """The objects of an optional list field, by index, and a problem for the field or each item that is not one."""
    if items is None:
        return [], []
    if not isinstance(items, list):
        return [], [Problem(path, f"expected a list of {plural} (got {_shown(items)})")]
    objects = [(i, x) for i, x in enumerate(items) if isinstance(x, dict)]
    return objects, [Problem(f"{path}[{i}]", f"expected {item} (got {_shown(x)})") for i, x in enumerate(items) if not isinstance(x, dict)]


def _named_items_problems(path: str, items: Any, what: str) -> list[Problem]:
    objects, problems = _objects(path, items, what, f"a {what[:-1]} object")
    return problems + [Problem(f"{path}[{i}].name", f"required: every {what[:-1]} needs a name (merged by name)")
                       for i, item in objects if not isinstance(item.get("name"), str) or not item["name"]]


# fields with checks of their own (their type included, with a more specific message: here, or the
# container checks validate, run and convert share, localnode.source_problems): not checked twice
_POD_FIELDS_CHECKED_ABOVE = frozenset({"containers", "initContainers", "volumes", "ephemeralContainers",
                                       "terminationGracePeriodSeconds"})
_CONTAINER_FIELDS_CHECKED_ELSEWHERE = frozenset({"env", "envFrom", "volumeMounts", "command", "args"})


def _template_problems(template: Any) -> list[Problem]:
    """The shape the merge relies on; Kubernetes validates the rest of the pod."""
    if not isinstance(template, dict):
        return []  # the model already reported it
    problems = [
        Problem(f"spec.template.{key}", "unknown field (a PodTemplateSpec has metadata and spec)")
        for key in template if key not in ("metadata", "spec")
    ]
    metadata = template.get("metadata") or {}
    if isinstance(metadata, dict):
        for key in metadata:
            if key not in ("labels", "annotations"):
                problems.append(Problem(f"spec.template.metadata.{key}", "unknown field (only labels and annotations apply to kuberl's pods)"))
        for key in ("labels", "annotations"):
            values = metadata.get(key) or {}
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                problems.append(Problem(f"spec.template.metadata.{key}", "expected a mapping of strings to strings"))
        problems += _label_key_problems("spec.template.metadata.labels", metadata.get("labels"))
        problems += _label_value_problems("spec.template.metadata.labels", metadata.get("labels"))
        problems += _annotation_key_problems("spec.template.metadata.annotations", metadata.get("annotations"))
    else:
        problems.append(Problem("spec.template.metadata", f"expected an object (got {_shown(metadata)})"))
    pod_spec = template.get("spec") or {}
    if not isinstance(pod_spec, dict):
        return problems + [Problem("spec.template.spec", f"expected an object (got {_shown(pod_spec)})")]
    problems += _named_items_problems("spec.template.spec.containers", pod_spec.get("containers"), "containers")
    problems += _named_items_problems("spec.template.spec.initContainers", pod_spec.get("initContainers"), "containers")
    problems += _named_items_problems("spec.template.spec.volumes", pod_spec.get("volumes"), "volumes")
    if pod_spec.get("ephemeralContainers") is not None:
        # ValidatePodCreate (pkg/apis/core/validation): "spec.ephemeralContainers: Forbidden: cannot be set on create".
        problems.append(Problem("spec.template.spec.ephemeralContainers", "not allowed: a pod cannot be created with"
                                " ephemeral containers (the API server adds them to running pods only)"))
    problems += _grace_problems(pod_spec.get("terminationGracePeriodSeconds"))
    problems += [Problem(path, message) for path, message in podschema.type_problems(
        "spec.template.spec", {k: v for k, v in pod_spec.items() if k not in _POD_FIELDS_CHECKED_ABOVE},
        podschema.POD_SPEC_FIELDS)]
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(pod_spec.get(kind) if isinstance(pod_spec.get(kind), list) else []):
            if isinstance(container, dict):
                problems += [Problem(path, message) for path, message in podschema.type_problems(
                    f"spec.template.spec.{kind}[{i}]", {k: v for k, v in container.items() if k not in _CONTAINER_FIELDS_CHECKED_ELSEWHERE},
                    podschema.CONTAINER_FIELDS)]
                trainer = kind == "containers" and container.get("name") == names.TRAINER_CONTAINER
                problems += _env_problems(f"spec.template.spec.{kind}[{i}].env", container.get("env"), trainer)
                problems += _volume_mount_problems(f"spec.template.spec.{kind}[{i}].volumeMounts", container.get("volumeMounts"))
    return problems


def _gang_template_problems(template: Any, workers: int) -> list[Problem]:
    """The template's JSON, once per worker, within MAX_GANG_TEMPLATE_BYTES."""
    if not isinstance(template, dict) or not template:
        return []
    size = len(json.dumps(template, separators=(",", ":"), ensure_ascii=False, default=str).encode())
    if size * workers <= MAX_GANG_TEMPLATE_BYTES:
        return []
    return [Problem("spec.template", f"expected at most {MAX_GANG_TEMPLATE_BYTES} bytes of pod template across the gang"
                    f" (got {size} bytes as JSON x spec.workers {workers} = {size * workers}): the operator renders every"
                    " pod at once; use fewer workers, or keep large data in a ConfigMap or Secret")]


# Quantity suffixes (k8s.io/apimachinery/pkg/api/resource): binary, decimal SI, or an exponent.
_QUANTITY_SUFFIXES = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9),
                                        ("T", 12), ("P", 15), ("E", 18))},
}
_QUANTITY_PARTS = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)")
_UNBOUNDED = Context(prec=60, Emax=10**9, Emin=-(10**9), traps=[])  # exact, and never raises
STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def quantity_value(quantity: str | int) -> Decimal:
    """The number a Kubernetes quantity (already matching QUANTITY) stands for, to compare two.
    A string longer than MAX_QUANTITY_LENGTH may have an exponent int() refuses (ValueError)."""
    if isinstance(quantity, int):
        return Decimal(quantity)
    number, suffix = _QUANTITY_PARTS.fullmatch(quantity).groups()
    if suffix not in _QUANTITY_SUFFIXES:  # an exponent: e3, E-2 ("Ei" is a suffix)
        value, exponent = Decimal(number), int(suffix[1:])
        if value == 0 or exponent < -(10**6):
            return Decimal(0)
        if exponent > 10**6:  # scaleb would give NaN, which no comparison survives
            return Decimal("Infinity").copy_sign(value)
        return value.scaleb(exponent, _UNBOUNDED)
    return _UNBOUNDED.multiply(Decimal(number), _QUANTITY_SUFFIXES[suffix])


def _resource_name_ok(name: str) -> bool:
    """validateContainerResourceName: a qualified name; without a domain one of Kubernetes' own
    (cpu, memory, ephemeral-storage, hugepages-<size>); with one, a native (kubernetes.io/) or an
    extended resource, whose name quota's `requests.` prefix must not already start."""
    if not LABEL_KEY.fullmatch(name) or len(name.rpartition("/")[2]) > 63:
        return False
    if "/" not in name:
        return name in STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-")
    return "kubernetes.io/" in name or not name.startswith("requests.")


def _extended(name: str) -> bool:
    """helper.IsExtendedResourceName: a domain-qualified resource that is not Kubernetes' own."""
    return "/" in name and "kubernetes.io/" not in name


def _overcommit_allowed(name: str) -> bool:
    """helper.IsOvercommitAllowed: extended resources and hugepages are requested exactly as limited."""
    return not _extended(name) and not name.startswith("hugepages-")


def _resources_problems(resources: Any) -> list[Problem]:
    """What ValidateResourceRequirements refuses at pod create: unknown names, negative amounts, a
    fraction of an extended resource, a request over its limit (or, where no overcommit is allowed,
    a request without its limit or other than it)."""
    if not isinstance(resources, dict):
        return []
    problems, values = [], {}
    for kind in ("requests", "limits"):
        amounts = resources.get(kind)
        for name, amount in (amounts.items() if isinstance(amounts, dict) else ()):
            if name == GPU_RESOURCE:
                continue  # refused whole: GPUs come from spec.gpusPerWorker (a cross-field rule)
            path = f"spec.resources.{kind}.{name}"
            if not isinstance(name, str) or not _resource_name_ok(name):
                problems.append(Problem(path, "expected a resource name: cpu, memory, ephemeral-storage, hugepages-<size>,"
                                        " or an extended resource with a domain such as example.com/fpga"))
                continue
            if isinstance(amount, bool) or not isinstance(amount, int | str) or (
                    isinstance(amount, str) and (len(amount) > MAX_QUANTITY_LENGTH or not re.fullmatch(QUANTITY, amount))):
                continue  # the model already names it
            value = quantity_value(amount)
            if value < 0:
                problems.append(Problem(path, f"expected a quantity of at least 0 (got {amount!r})"))
            elif _extended(name) and value != value.to_integral_value():
                problems.append(Problem(path, f"expected a whole number of {name} (got {amount!r})"))
            else:
                values[kind, name] = (amount, value)
    for (kind, name), (amount, value) in values.items():
        limit = values.get(("limits", name))
        if kind != "requests":
            continue
        if _overcommit_allowed(name):
            if limit is not None and value > limit[1]:
                problems.append(Problem(f"spec.resources.requests.{name}",
                                        f"expected at most the limit spec.resources.limits.{name} {limit[0]!r} (got {amount!r})"))
        elif limit is None:
            problems.append(Problem(f"spec.resources.limits.{name}", f"expected a limit equal to the request {amount!r}:"
                                    f" {name} cannot be overcommitted (or set only the limit)"))
        elif value != limit[1]:
            problems.append(Problem(f"spec.resources.requests.{name}", f"expected the limit spec.resources.limits.{name}"
                                    f" {limit[0]!r} (got {amount!r}): {name} cannot be overcommitted"))
    return problems


def _grace_problems(seconds: Any) -> list[Problem]:
    """The template's grace period replaces runPolicy's, so it keeps runPolicy's bound."""
    if seconds is None:
        return []
    path = "spec.template.spec.terminationGracePeriodSeconds"
    hint = "; spec.runPolicy.terminationGracePeriodSeconds is the job's own setting"
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return [Problem(path, f"expected an integer (got {_shown(seconds)}){hint}")]
    if not 0 <= seconds <= MAX_GRACE_SECONDS:
        bound = f"at most {MAX_GRACE_SECONDS}" if seconds > 0 else "at least 0"
        return [Problem(path, f"expected {bound} (got {seconds}): a deleted pod keeps its node that long{hint}")]
    return []


def _volume_mount_problems(path: str, mounts: Any) -> list[Problem]:
    """Each mount names a volume and a path, as ValidateVolumeMounts requires (both "Required value")."""
    objects, problems = _objects(path, mounts, "volume mounts", "a volume mount object with name and mountPath")
    for j, mount in objects:
        for field in ("name", "mountPath"):
            if not isinstance(mount.get(field), str) or not mount[field]:
                problems.append(Problem(f"{path}[{j}].{field}", f"required: a non-empty string (got {_shown(mount.get(field))})"))
    return problems


# Kubernetes' IsEnvVarName (k8s.io/apimachinery/pkg/util/validation): the rule
# every API server accepts, with or without RelaxedEnvironmentVariableValidation.
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _env_problems(path: str, env: Any, trainer: bool) -> list[Problem]:
    """Env names are valid and values strings (the API server refuses anything
    else at pod create, long after the job was accepted); the trainer's env may
    not set the identity kuberl gives each pod."""
    objects, problems = _objects(path, env, "env vars", "an env var object with name and value")
    for j, var in objects:
        name = var.get("name")
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or name in (".", "..") or name.startswith(".."):
            problems.append(Problem(f"{path}[{j}].name", "expected an env var name: letters, digits, '_', '-' or '.',"
                                    f" not starting with a digit, nor '.' or '..' (got {_shown(name)})"))
        elif trainer and contract.is_reserved_env(name):
            problems.append(Problem(f"{path}[{j}].name", f"{name} is reserved: kuberl sets each pod's identity (rank, world"
                                    " size, rendezvous) and every KUBERL_ name; a spec may not set it"))
        if "value" in var and var["value"] is not None and not isinstance(var["value"], str):
            problems.append(Problem(f"{path}[{j}].value", f"expected a string; quote it (got {_shown(var['value'])})"))
    return problems


def _custom_trainer_problems(spec: dict) -> list[Problem]:
    """trainer: custom runs the template's command; without one kuberl's trainer would start with no algorithm."""
    if spec.get("trainer") != "custom":
        return []
    pod_spec = (spec.get("template") or {}).get("spec") if isinstance(spec.get("template"), dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    ours = [c for c in containers if isinstance(c, dict) and c.get("name") == names.TRAINER_CONTAINER] if isinstance(containers, list) else []
    if ours and (ours[0].get("command") or ours[0].get("args")):
        return []
    others = [c["name"] for c in containers if isinstance(c, dict) and isinstance(c.get("name"), str)] if isinstance(containers, list) else []
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


def parse_spec(spec: Any) -> JobSpec:
    """Validate a spec dict (camelCase, as in YAML) and return it defaulted.
    Raises InvalidJob listing every problem."""
    problems: list[Problem] = []
    if not isinstance(spec, dict):
        raise InvalidJob([Problem("spec", f"expected an object (got {_shown(spec)})")])
    deep = _too_deep(spec)
    if deep:  # before anything recurses into it (pydantic, deepcopy in render)
        raise InvalidJob([Problem(deep, f"nested deeper than {MAX_NESTING} levels")])
    try:
        parsed = JobSpec.model_validate(spec)
    except ValidationError as e:
        parsed = None
        for err in e.errors():
            problem = Problem(_path(err["loc"]), _message(err))
            if problems and problems[-1].path == problem.path:  # one union, two branches
                problem = Problem(problem.path, problems.pop().message.split(" (got")[0] + " or " + problem.message[len("expected "):])
            problems.append(problem)
    problems += _label_key_problems("spec.labels", spec.get("labels"))
    problems += _label_key_problems("spec.nodeSelector", spec.get("nodeSelector"))
    problems += _resources_problems(spec.get("resources"))
    problems += _template_problems(spec.get("template"))
    problems += _custom_trainer_problems(spec)
    if parsed is not None:
        problems += _gang_template_problems(spec.get("template"), parsed.workers)
    found = list(problems)  # a field refused by itself already says it all; one rule's refusal silences no other rule
    for rule in CROSS_FIELD_RULES:
        if _problem_at(found, rule.reads):
            continue
        if not rule.check(spec):
            problems.append(Problem("spec" + rule.field_path, rule.describe(spec)))
    if problems or parsed is None:
        raise InvalidJob(problems)
    return parsed


DOCUMENT_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")


def validate_job(job: Any, env_id_known: Callable[[str], bool | None] | None = None) -> JobSpec:
    """Validate a whole RLTrainingJob object (apiVersion, kind, metadata, spec).

    `env_id_known(id) -> bool | None` lets callers that can import gymnasium
    check that a gymnasium id is registered; None means "cannot tell here"
    (ids from packages not installed here, and "module:Class", are left to
    the trainer).
    """
    if not isinstance(job, dict):
        raise InvalidJob([Problem("(document)", f"expected a YAML mapping (got {_shown(job)})")])
    problems: list[Problem] = []
    if job.get("apiVersion") != names.API_VERSION:
        problems.append(Problem("apiVersion", f"expected {names.API_VERSION!r} (got {job.get('apiVersion')!r})"))
    if job.get("kind") != names.KIND:
        problems.append(Problem("kind", f"expected {names.KIND!r} (got {job.get('kind')!r})"))
    problems += [Problem(str(key), "unknown field (an RLTrainingJob has apiVersion, kind, metadata, spec)")
                 for key in job if key not in DOCUMENT_FIELDS]
    metadata = job.get("metadata") or {}
    if isinstance(metadata, dict):
        problems += _name_problems(metadata.get("name"))
        problems += namespace_problems("metadata.namespace", metadata.get("namespace"))
    else:
        problems.append(Problem("metadata", f"expected an object (got {_shown(metadata)})"))
    parsed = None
    if "spec" not in job:
        problems.append(Problem("spec", "required field is missing"))
    else:
        try:
            parsed = parse_spec(job["spec"])
        except InvalidJob as e:
            problems += e.problems
        nproc = torchrun.template_problem(job["spec"]) if parsed is not None else None
        problems += [Problem(*nproc)] if nproc else []
    unknown_env = parsed is not None and parsed.env is not None and env_id_known is not None and ":" not in parsed.env.id
    if unknown_env and env_id_known(parsed.env.id) is False:
        problems.append(Problem(
            "spec.env.id",
            f"expected a gymnasium id registered here, or \"module:Class\" (got {parsed.env.id!r})",
        ))
    if problems:
        raise InvalidJob(problems)
    assert parsed is not None
    return parsed


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


# --- reading a job file -------------------------------------------------------

# etcd's default request limit (--max-request-bytes, 1.5 MiB): the API server
# could not store a larger object, so no job file needs to be larger.
MAX_DOCUMENT_BYTES = 3 * 512 * 1024
# Deeper than any pod template; bounded so no reader recurses without end.
MAX_NESTING = 64
# Nodes aliases may add beyond the document's own: a few shared blocks are
# fine, a "billion laughs" is refused before anything is built from it.
MAX_ALIAS_EXPANSION = 10_000
# Bytes aliases may add to a document, counted as a lower bound of their JSON
# (a scalar's characters plus one separator per node): nine thousand aliases of
# one large string pass the node budget yet expand to gigabytes. What kubectl
# sends must fit the API server's request limit, so this bound refuses no job a
# cluster could store, and nothing is built before it is checked.
MAX_ALIAS_BYTES = MAX_DOCUMENT_BYTES
# Characters of one number: int64 and float64 need at most 25.
MAX_NUMBER_CHARS = 64
# Tags a document may write explicitly: plain JSON-like data only.
PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")) | {"!"}


class UnreadableSpec(ValueError):
    """A job file that is not safe, plain YAML; the message is one line (escaped: it may quote a key)."""

    def __init__(self, message: str):
        super().__init__(safetext.one_line(message))


class KubernetesYamlLoader(yaml.SafeLoader):
    """YAML read as kubectl reads it: `1e-3` is a number (YAML 1.2), where
    PyYAML's YAML 1.1 rules would make it a string the strict model refuses.
    Nesting is bounded and only plain tags are accepted while composing, so a
    hostile document fails before it is built."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in PLAIN_TAGS:
            shown = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
            raise yaml.MarkedYAMLError(
                problem=f"tag {shown} is not allowed: only plain YAML (strings, numbers, booleans, null, maps, lists)",
                problem_mark=event.start_mark,
            )
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_NESTING} levels", problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


KubernetesYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def _kubectl_float(loader: yaml.SafeLoader, node: yaml.Node) -> float | int:
    """kubectl sends YAML as JSON, where an integral float (5e5, 2.0) is written
    as an integer: the API server sees 500000, so `totalTimesteps: 5e5` is fine."""
    value = loader.construct_yaml_float(node)
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


KubernetesYamlLoader.add_constructor("tag:yaml.org,2002:float", _kubectl_float)
# go-yaml v2 (kubectl) keeps a timestamp-looking scalar a string when decoding into interface{}:
# `args: [2024-01-01T00:00:00Z]` must reach the pod as written, not as a datetime.
KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in KubernetesYamlLoader.yaml_implicit_resolvers.items()
}


if yaml.__with_libyaml__:

    class _LibyamlLoader(yaml.CSafeLoader):
        """KubernetesYamlLoader's resolvers and constructors over libyaml's
        parser (four times faster on a 1.5 MiB file); used only after
        `_check_events` bounded nesting and tags: libyaml composes unchecked."""

        yaml_implicit_resolvers = KubernetesYamlLoader.yaml_implicit_resolvers
        yaml_constructors = KubernetesYamlLoader.yaml_constructors


def _check_events(text: str) -> None:
    """Nesting and explicit tags, from the event stream (no recursion, so a
    1,000-deep document is refused before anything composes it)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in PLAIN_TAGS:
            shown = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
            raise yaml.MarkedYAMLError(
                problem=f"tag {shown} is not allowed: only plain YAML (strings, numbers, booleans, null, maps, lists)",
                problem_mark=event.start_mark,
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_NESTING} levels", problem_mark=event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


def _key_text(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{node.id} key>"


_NOT_FINITE = re.compile(r"^[-+]?\.(inf|Inf|INF|nan|NaN|NAN)$")


def _key_identity(key: yaml.Node) -> Any:
    """What a key becomes once built: `1`, `0x1` and `1.0` (or `true` and `1`) are one
    Python key, so the second would silently replace the first."""
    if isinstance(key, yaml.ScalarNode):
        try:
            return ("value", _KEY_BUILDER.construct_object(key))  # `null` and `~` are one key (None) too
        except (yaml.YAMLError, ValueError):
            pass
        finally:
            _KEY_BUILDER.constructed_objects.clear()
    return (key.tag, _key_text(key))


_KEY_BUILDER = KubernetesYamlLoader("")


def _check_composed(root: yaml.Node) -> None:
    """Duplicate keys, alias expansion and number sizes, on the composed graph
    (before any object is built). Walks iteratively and stops at the budget."""
    distinct: set[int] = set()
    visits = 0
    added = 0
    stack: list[tuple[yaml.Node, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        visits += 1
        if id(node) in distinct:  # reached again, through an alias
            added += 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
            if added > MAX_ALIAS_BYTES:
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: aliases expand the document by more than"
                                     f" {MAX_ALIAS_BYTES} bytes (refused, like an alias bomb: the API server stores at most that)")
        distinct.add(id(node))
        if visits - len(distinct) > MAX_ALIAS_EXPANSION:
            raise UnreadableSpec(f"{_where(node)}: aliases expand past {MAX_ALIAS_EXPANSION} nodes (refused, like an alias bomb)")
        if depth > MAX_NESTING:  # only aliases that refer to an enclosing node get here
            raise UnreadableSpec(f"{_where(node)}: aliases nest deeper than {MAX_NESTING} levels (a structure that contains itself?)")
        if isinstance(node, yaml.ScalarNode):
            numeric = node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
            if numeric and len(node.value) > MAX_NUMBER_CHARS:
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: a number of {len(node.value)} characters"
                                     f" (at most {MAX_NUMBER_CHARS})")
            if node.tag == "tag:yaml.org,2002:float" and _NOT_FINITE.match(node.value):
                raise UnreadableSpec(f"{_where(node)}: {path or '(document)'}: {node.value} is not a JSON number"
                                     " (kubectl cannot send NaN or infinity to the API server)")
        elif isinstance(node, yaml.SequenceNode):
            stack += reversed([(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)])  # in document order
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            children: list[tuple[yaml.Node, str, int]] = []
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    children.append((value, path, depth + 1))
                    continue
                child = f"{path}.{_key_text(key)}" if path else _key_text(key)
                ident = _key_identity(key)
                if ident in first:
                    raise UnreadableSpec(f"{_where(key)}: {child}: duplicate key (first at {_where(first[ident])})")
                first[ident] = key
                children += [(key, child, depth + 1), (value, child, depth + 1)]
            stack += reversed(children)


def _text(source: str | bytes | IO) -> str:
    raw = source.read(MAX_DOCUMENT_BYTES + 1) if hasattr(source, "read") else source
    if isinstance(raw, str):
        if len(raw) > MAX_DOCUMENT_BYTES and len(raw.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
            raise UnreadableSpec(f"larger than {MAX_DOCUMENT_BYTES} bytes (1.5 MiB, etcd's default request limit)")
        if "\0" in raw:
            raise UnreadableSpec("binary data (a NUL byte), not YAML text")
        return raw
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise UnreadableSpec(f"larger than {MAX_DOCUMENT_BYTES} bytes (1.5 MiB, etcd's default request limit)")
    if b"\0" in raw:
        raise UnreadableSpec(f"binary data (a NUL byte at offset {raw.index(0)}), not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnreadableSpec(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


def load_documents(source: str | bytes | IO) -> list[Any]:
    """Every non-empty YAML document in `source`, numbers as Kubernetes reads
    them. Anything but safe, plain, bounded YAML raises UnreadableSpec with
    one line naming the problem (and where)."""
    text = _text(source)
    documents = []
    loader = None
    try:
        if yaml.__with_libyaml__:
            _check_events(text)
            loader = _LibyamlLoader(text)
        else:
            loader = KubernetesYamlLoader(text)  # checks nesting and tags as it composes
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_composed(node)
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
    except UnreadableSpec:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise UnreadableSpec(f"{where}{' '.join(str(e.problem or e.context or 'invalid YAML').split())}") from None
    except yaml.YAMLError as e:  # the reader's errors (non-printable characters) carry no mark
        raise UnreadableSpec(" ".join(str(e).split())) from None
    except (RecursionError, ValueError) as e:  # defence in depth: the checks above should catch these first
        raise UnreadableSpec(f"cannot read: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def defaulted(spec: JobSpec) -> dict:
    """The fully defaulted spec as the trainer receives it (camelCase)."""
    data = spec.model_dump(by_alias=True, mode="json")
    if spec.algorithm is not None:
        data[spec.algorithm] = spec.hyperparameters.model_dump(by_alias=True, mode="json")
    data["procsPerWorker"] = spec.procs
    return data
