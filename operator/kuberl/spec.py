"""The RLTrainingJob spec: one model, the source of the CRD schema and of the
operator's validation.

Every field carries its description and default here; `kuberl.crd` turns these
models into the CRD's openAPIV3Schema, and `validate_job` checks a job with the
very same models. Cross-field rules live in `CROSS_FIELD_RULES` twice, as CEL
for the API server and as Python for the operator, and a unit test proves both
agree on a shared table of cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from . import names

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
# A gymnasium id ("CartPole-v1", "ALE/Pong-v5") or a user's "module:Class".
ENV_ID = r"^([A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+(:[A-Za-z_][A-Za-z0-9_.]*)?$"


class Model(BaseModel):
    """camelCase in YAML, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def immutable(**kwargs: Any) -> Any:
    """A field that cannot change once the job exists (CEL `self == oldSelf`)."""
    extra = kwargs.pop("json_schema_extra", {}) or {}
    return Field(json_schema_extra={**extra, "x-kuberl-immutable": True}, **kwargs)


def free_form(description: str, max_properties: int | None = None) -> dict:
    """Schema extra for an object Kubernetes validates itself (a pod template,
    affinity) or that the trainer interprets (env kwargs)."""
    extra: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
    if max_properties:
        extra["maxProperties"] = max_properties
    return extra


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
    hidden_sizes: list[int] = Field([64, 64], min_length=1, max_length=8, description="Hidden layer widths of the actor and critic MLPs.")
    normalize_observation: bool = Field(False, description="Running observation normalisation, all-reduced across ranks and checkpointed.")
    normalize_reward: bool = Field(False, description="Scale rewards by a running return std, all-reduced and checkpointed.")

    @field_validator("hidden_sizes")
    @classmethod
    def _positive_widths(cls, v: list[int]) -> list[int]:
        if any(w < 1 or w > 65536 for w in v):
            raise ValueError("every width must be between 1 and 65536")
        return v


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
    hidden_sizes: list[int] = Field([128, 128], min_length=1, max_length=8, description="Hidden layer widths of the Q network.")


class EnvSpec(Model):
    id: str = immutable(min_length=1, max_length=253, pattern=ENV_ID, description='A gymnasium id ("CartPole-v1", "ALE/Pong-v5") or "module:Class".')
    num_envs: int = Field(8, ge=1, le=4096, description="Vectorised envs per process (rank).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for gymnasium.make.", json_schema_extra=free_form("", 64))
    backend: Literal["gymnasium", "envpool"] = Field("gymnasium", description="Vector env implementation.")


class SuccessSpec(Model):
    target_return: float | None = Field(None, description="Stop when the evaluation mean return reaches this; unset means train for totalTimesteps.")
    eval_episodes: int = Field(10, ge=1, le=10000, description="Episodes per evaluation (rank 0).")
    eval_every: int = Field(10, ge=1, le=1_000_000, description="Policy updates between evaluations.")


class ResourceRequirements(Model):
    model_config = ConfigDict(extra="forbid", frozen=True)  # Kubernetes' own names
    requests: dict[str, str | int] = Field(default_factory=dict, max_length=16, description="Resource requests per pod (e.g. cpu, memory).")
    limits: dict[str, str | int] = Field(default_factory=dict, max_length=16, description="Resource limits per pod.")


class CheckpointSpec(Model):
    every_updates: int = Field(20, ge=1, le=1_000_000, description="Policy updates between checkpoints.")
    keep: int = Field(3, ge=1, le=100, description="Checkpoints kept; older ones are deleted.")
    size: str = Field("1Gi", pattern=QUANTITY, max_length=32, description="Size of the PVC the operator creates when claimName is unset.")
    storage_class_name: str | None = Field(None, max_length=253, description="StorageClass of the created PVC; unset uses the cluster default.")
    claim_name: str | None = Field(None, max_length=253, description="Use this existing PVC (never adopted or deleted).")
    retain: bool = Field(True, description="Keep the created PVC when the job is deleted.")


class RunPolicy(Model):
    backoff_limit: int = Field(3, ge=0, le=1000, description="Gang restarts after crashes or stalls before the job fails.")
    restart_backoff_seconds: float = Field(10.0, ge=0, le=3600, description="Base of the exponential delay between gang restarts.")
    active_deadline_seconds: int | None = Field(None, ge=1, description="Fail the job when it has run this long.")
    ttl_seconds_after_finished: int | None = Field(None, ge=0, description="Delete the job this long after it finishes.")
    suspend: bool = Field(False, description="Delete the pods and keep the job; resuming continues from the checkpoint.")
    stall_timeout_seconds: int = Field(600, ge=1, description="Restart the gang when rank 0's step counter has not moved this long.")
    startup_timeout_seconds: int = Field(600, ge=1, description="Report why pods are not running after this long, then retry them.")
    max_startup_retries: int = Field(3, ge=0, le=1000, description="Generations that never fully start before the job fails.")
    collective_timeout_seconds: int = Field(1800, ge=10, description="Timeout of each collective; must outlast rank-0-only work (evaluation, checkpoints).")
    rendezvous_timeout_seconds: int = Field(600, ge=1, description="How long ranks retry rendezvous while rank 0's name does not resolve yet.")
    termination_grace_period_seconds: int = Field(30, ge=0, le=3600, description="Time a pod gets to save a checkpoint after SIGTERM.")


class MetricsSpec(Model):
    port: int = Field(9090, ge=1024, le=65000, description="Prometheus port of local rank 0; local rank i uses port + i.")


class RendezvousSpec(Model):
    port: int = Field(29500, ge=1024, le=65000, description="MASTER_PORT of the process group.")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="auto: NCCL when CUDA is available, else gloo.")


class JobSpec(Model):
    """Spec of an RLTrainingJob."""

    algorithm: Literal["ppo", "dqn"] = immutable(description="Training algorithm.")
    ppo: PPOConfig | None = immutable(default=None, description="PPO hyperparameters; only with algorithm: ppo.")
    dqn: DQNConfig | None = immutable(default=None, description="DQN hyperparameters; only with algorithm: dqn.")
    env: EnvSpec = immutable(description="Environment each rank vectorises.")
    total_timesteps: int = immutable(ge=1, le=10**12, description="Env steps across all ranks.")
    success: SuccessSpec = Field(default_factory=SuccessSpec, description="Early stop on evaluation return.")
    workers: int = immutable(default=1, ge=1, le=names.MAX_WORKERS, description="Pods in the gang.")
    gpus_per_worker: int = immutable(default=0, ge=0, le=names.MAX_PROCS_PER_WORKER, description="nvidia.com/gpu per pod; explicit, never inferred.")
    procs_per_worker: int | None = immutable(default=None, ge=1, le=names.MAX_PROCS_PER_WORKER, description="Processes per pod; defaults to gpusPerWorker, or 1.")
    image: str | None = immutable(default=None, max_length=512, description="Trainer image; defaults to the operator's configured image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(None, description="Pull policy of the trainer container.")
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements, description="Per-pod resources; defaults to 1 CPU and 2Gi per process.")
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=64, description="Node labels the pods require.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32, description="Pod tolerations.", json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}})
    affinity: dict[str, Any] = Field(default_factory=dict, description="Pod affinity.", json_schema_extra=free_form(""))
    priority_class_name: str | None = Field(None, max_length=253, description="PriorityClass of the pods.")
    scheduler_name: str | None = Field(None, max_length=253, description="Scheduler of the pods (volcano or scheduler-plugins get a PodGroup).")
    labels: dict[str, str] = Field(default_factory=dict, max_length=64, description="Extra labels on every pod.")
    shm_size: str = Field("1Gi", pattern=QUANTITY, max_length=32, description="Size of the in-memory /dev/shm.")
    template: dict[str, Any] = Field(default_factory=dict, description="A PodTemplateSpec layered onto the rendered pod: env, volumes, sidecars, command…", json_schema_extra=free_form(""))
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoint policy and storage.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restarts, deadlines, suspend, timeouts.")
    queue_name: str | None = immutable(default=None, max_length=63, description="Kueue LocalQueue; the pods become one pod group.")
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
    def hyperparameters(self) -> PPOConfig | DQNConfig:
        if self.algorithm == "ppo":
            return self.ppo or PPOConfig()
        return self.dqn or DQNConfig()


@dataclass(frozen=True)
class CrossFieldRule:
    """One rule, written for the API server (CEL) and for the operator."""

    field_path: str  # relative to spec, as CEL's fieldPath wants it
    cel: str
    message: str
    check: Any  # JobSpec-shaped dict -> bool (True = valid)


CROSS_FIELD_RULES = [
    CrossFieldRule(
        ".ppo",
        "!has(self.ppo) || self.algorithm == 'ppo'",
        "spec.ppo is only allowed with algorithm: ppo",
        lambda s: s.get("ppo") is None or s.get("algorithm") == "ppo",
    ),
    CrossFieldRule(
        ".dqn",
        "!has(self.dqn) || self.algorithm == 'dqn'",
        "spec.dqn is only allowed with algorithm: dqn",
        lambda s: s.get("dqn") is None or s.get("algorithm") == "dqn",
    ),
    CrossFieldRule(
        ".procsPerWorker",
        "!has(self.procsPerWorker) || !has(self.gpusPerWorker) || self.gpusPerWorker == 0"
        " || self.procsPerWorker == self.gpusPerWorker",
        "spec.procsPerWorker must equal spec.gpusPerWorker (one process per GPU)",
        lambda s: s.get("procsPerWorker") is None
        or not s.get("gpusPerWorker")
        or s.get("procsPerWorker") == s.get("gpusPerWorker"),
    ),
    CrossFieldRule(
        ".metrics.port",
        "!has(self.metrics) || !has(self.metrics.port) || !has(self.rendezvous)"
        " || !has(self.rendezvous.port) || self.rendezvous.port < self.metrics.port"
        " || self.rendezvous.port > self.metrics.port + 15",
        "spec.metrics.port range (port + local rank) must not contain spec.rendezvous.port",
        lambda s: not (
            isinstance(s.get("metrics"), dict)
            and isinstance(s.get("rendezvous"), dict)
            and "port" in s["metrics"]
            and "port" in s["rendezvous"]
            and s["metrics"]["port"] <= s["rendezvous"]["port"] <= s["metrics"]["port"] + 15
        ),
    ),
]


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidJob(ValueError):
    """A job that cannot run; carries every problem found, each with its path."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _path(loc: tuple) -> str:
    parts = ["spec"]
    for item in loc:
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
        elif item in ("function-after", "function-before", "function-wrap") or str(item).startswith(
            ("literal[", "int", "str", "float", "bool", "list[", "dict[", "nullable")
        ) and len(parts) > 1:
            continue  # pydantic's union/branch markers are not field names
        else:
            parts.append(str(item))
    return ".".join(parts)


def _message(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling; see `kubectl explain rltj.spec`)"
    if err["type"] == "missing":
        return "required field is missing"
    got = err.get("input")
    shown = repr(got) if not isinstance(got, (dict, list)) or len(repr(got)) < 60 else type(got).__name__
    text = err["msg"][0].lower() + err["msg"][1:]
    for prefix, replacement in (
        ("input should be", "a value that is"),
        ("list should have", "a list with"),
        ("dictionary should have", "a mapping with"),
        ("string should", "a string that should"),
        ("value error, ", ""),
    ):
        if text.startswith(prefix):
            text = replacement + text[len(prefix):]
    return f"expected {text} (got {shown})"


def _name_problems(name: str | None) -> list[Problem]:
    if not name:
        return [Problem("metadata.name", "required field is missing")]
    problems = []
    if len(name) > names.MAX_JOB_NAME:
        problems.append(
            Problem(
                "metadata.name",
                f"expected at most {names.MAX_JOB_NAME} characters so every derived name"
                f" (e.g. {names.pvc_name(name)!r}) stays a 63-character DNS label (got {len(name)})",
            )
        )
    if not DNS_1035.match(name):
        problems.append(
            Problem("metadata.name", f"expected a DNS-1035 label: lowercase letters, digits and '-', starting with a letter (got {name!r})")
        )
    return problems


def parse_spec(spec: Any) -> JobSpec:
    """Validate a spec dict (camelCase, as in YAML) and return it defaulted.
    Raises InvalidJob listing every problem."""
    problems: list[Problem] = []
    if not isinstance(spec, dict):
        raise InvalidJob([Problem("spec", f"expected an object (got {type(spec).__name__})")])
    try:
        parsed = JobSpec.model_validate(spec)
    except ValidationError as e:
        parsed = None
        for err in e.errors():
            problem = Problem(_path(err["loc"]), _message(err))
            if problems and problems[-1].path == problem.path:  # one union, two branches
                problem = Problem(problem.path, problems.pop().message.split(" (got")[0] + " or " + problem.message[len("expected "):])
            problems.append(problem)
    for rule in CROSS_FIELD_RULES:
        try:
            ok = rule.check(spec)
        except Exception:  # a wrong type elsewhere already produced a problem
            ok = True
        if not ok:
            problems.append(Problem("spec" + rule.field_path, rule.message))
    if problems or parsed is None:
        raise InvalidJob(problems)
    return parsed


def validate_job(job: Any, env_id_known: Any = None) -> JobSpec:
    """Validate a whole RLTrainingJob object (apiVersion, kind, metadata, spec).

    `env_id_known(id) -> bool | None` lets callers that can import gymnasium
    check that a gymnasium id is registered; None means "cannot tell here".
    """
    if not isinstance(job, dict):
        raise InvalidJob([Problem("(document)", "expected a YAML mapping")])
    problems: list[Problem] = []
    if job.get("apiVersion") != names.API_VERSION:
        problems.append(Problem("apiVersion", f"expected {names.API_VERSION!r} (got {job.get('apiVersion')!r})"))
    if job.get("kind") != names.KIND:
        problems.append(Problem("kind", f"expected {names.KIND!r} (got {job.get('kind')!r})"))
    metadata = job.get("metadata") or {}
    problems += _name_problems(metadata.get("name"))
    parsed = None
    try:
        parsed = parse_spec(job.get("spec"))
    except InvalidJob as e:
        problems += e.problems
    if parsed is not None and env_id_known is not None and ":" not in parsed.env.id:
        if env_id_known(parsed.env.id) is False:
            problems.append(Problem("spec.env.id", f"expected a registered gymnasium id (got {parsed.env.id!r})"))
    if problems:
        raise InvalidJob(problems)
    assert parsed is not None
    return parsed


def defaulted(spec: JobSpec) -> dict:
    """The fully defaulted spec as the trainer receives it (camelCase)."""
    data = spec.model_dump(by_alias=True, mode="json")
    data[spec.algorithm] = spec.hyperparameters.model_dump(by_alias=True, mode="json")
    data["procsPerWorker"] = spec.procs
    return data
