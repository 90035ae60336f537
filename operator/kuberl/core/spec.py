"""The RLTrainingJob spec: one model, the source of the CRD schema and of the
operator's validation.

Every field carries its description and default here; `kuberl.core.crd` turns these
models into the CRD's openAPIV3Schema, and `kuberl.core.rules.validate_job` checks a
job with the very same models and the cross-field rules beside them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from . import names
from .validation import (
    DNS_1123_SUBDOMAIN,
    ENV_ID,
    LABEL_VALUE,
    MAX_GANG_TEMPLATE_BYTES,
    MAX_GRACE_SECONDS,
    MAX_QUANTITY_LENGTH,
    NON_NEGATIVE_QUANTITY,
    POSITIVE_QUANTITY,
    QUANTITY,
    WANDB_NAME,
)

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


class LSTMConfig(Model):
    """A recurrent policy for PPO: an LSTM between the encoder and the heads (CleanRL's ppo_atari_lstm.py,
    SB3-contrib's RecurrentPPO with one LSTM shared by actor and critic)."""

    hidden_size: int = Field(128, ge=1, le=4096, description="Width of the LSTM's state; the actor and critic MLPs (hiddenSizes) read it.")


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
    target_kl: float | None = Field(None, gt=0, description="Stop the epochs early when the approximate KL of an epoch's last minibatch (taken before its step) exceeds this, checked after each epoch as CleanRL's target_kl (the ranks' mean decides on all ranks together). SB3's stops mid-epoch at 1.5x its target_kl.")
    hidden_sizes: list[HiddenWidth] = Field([64, 64], min_length=1, max_length=8, description="Hidden layer widths of the actor and critic MLPs.")
    policy: Literal["auto", "mlp", "cnn"] = Field("auto", description="Network torso: auto picks the Nature DQN CNN for uint8 image observations (Atari) and an MLP otherwise; mlp or cnn force one.")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: autocast the network's forward pass (GPUs with bf16, or CPU); losses, log-probs and targets stay fp32.")
    normalize_observation: bool = Field(False, description="Running observation normalisation, clipped to +-10: each step's observations update the statistics before they are normalised (as SB3's VecNormalize), all-reduced across ranks at each update and checkpointed; the model applies it when played.")
    normalize_reward: bool = Field(False, description="Scale rewards by a running return std, clipped to +-10 (as CleanRL and SB3), all-reduced and checkpointed.")
    lstm: LSTMConfig | None = Field(None, description="A recurrent policy, for partially observed tasks: each env carries an LSTM state between steps, reset where an episode starts; minibatches are whole envs (numMinibatches at most env.numEnvs), each env's rollout replayed in order from the state it started with. Acts and learns in torch (no CPU fast path, no CUDA graphs); under precision bf16 the LSTM itself runs in fp32, as the state it carries; not with learnWhileCollecting.")
    learn_while_collecting: bool = Field(False, description="Collect the next rollout while the update learns from this one, acting with the weights from before the update: one update of policy lag (as CleanRL's Cleanba PPO), for ranks whose envs and update each leave the other idle (a GPU node). Holds two rollouts in memory; not with spec.deterministic.")


class DQNConfig(Model):
    """DQN hyperparameters (per rank: every rank keeps its own replay buffer)."""

    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam learning rate.")
    buffer_size: int = Field(50000, ge=1, le=100_000_000, description="Replay capacity per rank, in transitions.")
    batch_size: int = Field(128, ge=1, le=65536, description="Transitions per gradient step, per rank.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    n_step: int = Field(3, ge=1, le=100, description="n-step returns (episode ends and the autoreset step are masked).")
    double_dqn: bool = Field(True, description="Select the next action with the online network, value it with the target.")
    target_update_interval: int = Field(500, ge=1, description="Transitions per rank (the ranks' mean; gymnasium's autoreset steps are none) between target network updates.")
    tau: float = Field(1.0, gt=0, le=1, description="Target update rate (1 = hard copy).")
    learning_starts: int = Field(1000, ge=0, description="Transitions per rank (the ranks' mean; gymnasium's autoreset steps are none) before learning starts.")
    train_frequency: int = Field(4, ge=1, le=100_000, description="Env steps per rank between gradient steps.")
    gradient_steps: int = Field(1, ge=1, le=1000, description="Gradient steps each time training runs.")
    exploration_initial_eps: float = Field(1.0, ge=0, le=1, description="Initial epsilon.")
    exploration_final_eps: float = Field(0.05, ge=0, le=1, description="Final epsilon.")
    exploration_fraction: float = Field(0.2, gt=0, le=1, description="Fraction of totalTimesteps over which epsilon decays.")
    max_grad_norm: float = Field(10.0, gt=0, le=1000, description="Global gradient norm clip.")
    loss: Literal["huber", "mse"] = Field("huber", description="TD loss: huber (smooth L1, SB3's DQN) or mse (squared error, CleanRL's dqn.py).")
    hidden_sizes: list[HiddenWidth] = Field([128, 128], min_length=1, max_length=8, description="Hidden layer widths of the Q network.")
    policy: Literal["auto", "mlp", "cnn"] = Field("auto", description="Network torso: auto picks the Nature DQN CNN for uint8 image observations (Atari) and an MLP otherwise; mlp or cnn force one.")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: autocast the network's forward pass (GPUs with bf16, or CPU); losses, log-probs and targets stay fp32.")


class SACConfig(Model):
    """SAC hyperparameters, continuous actions (CleanRL's sac_continuous_action.py: its defaults, its
    two learning rates, its delayed policy updates; per rank: every rank keeps its own replay buffer)."""

    policy_learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam learning rate of the actor.")
    q_learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam learning rate of the two critics, and of the entropy coefficient when autotuned.")
    buffer_size: int = Field(1_000_000, ge=1, le=100_000_000, description="Replay capacity per rank, in transitions.")
    batch_size: int = Field(256, ge=1, le=65536, description="Transitions per gradient step, per rank.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(0.005, gt=0, le=1, description="Target critics' soft update rate (1 = hard copy).")
    learning_starts: int = Field(5000, ge=0, description="Transitions per rank (the ranks' mean; gymnasium's autoreset steps are none) taken with uniformly random actions before learning starts.")
    train_frequency: int = Field(1, ge=1, le=100_000, description="Env steps per rank between gradient steps.")
    gradient_steps: int = Field(1, ge=1, le=1000, description="Gradient steps of the critics each time training runs.")
    policy_frequency: int = Field(2, ge=1, le=1000, description="Critic steps between policy updates; each update then takes this many actor steps (delayed, as TD3 and CleanRL's SAC; 1 updates the actor at every critic step, as SB3).")
    target_network_frequency: int = Field(1, ge=1, le=100000, description="Critic steps between soft updates of the target critics.")
    alpha: float = Field(0.2, gt=0, le=100, description="Entropy coefficient when autotune is false.")
    autotune: bool = Field(True, description="Learn the entropy coefficient (from 1) towards a policy entropy of minus the number of action dimensions.")
    hidden_sizes: list[HiddenWidth] = Field([256, 256], min_length=1, max_length=8, description="Hidden layer widths of the actor and of each critic.")


class TD3Config(Model):
    """TD3 hyperparameters, continuous actions (Fujimoto et al. 2018; CleanRL's td3_continuous_action.py: its
    defaults, its one learning rate; per rank: every rank keeps its own replay buffer)."""

    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam learning rate of the actor and of the two critics.")
    buffer_size: int = Field(1_000_000, ge=1, le=100_000_000, description="Replay capacity per rank, in transitions.")
    batch_size: int = Field(256, ge=1, le=65536, description="Transitions per gradient step, per rank.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(0.005, gt=0, le=1, description="Soft update rate of the target actor and target critics (1 = hard copy).")
    learning_starts: int = Field(25000, ge=0, description="Transitions per rank (the ranks' mean; gymnasium's autoreset steps are none) taken with uniformly random actions before learning starts.")
    train_frequency: int = Field(1, ge=1, le=100_000, description="Env steps per rank between gradient steps.")
    gradient_steps: int = Field(1, ge=1, le=1000, description="Gradient steps of the critics each time training runs.")
    policy_delay: int = Field(2, ge=1, le=1000, description="Critic steps per actor step: every policyDelay-th critic step is followed by one actor step and the soft update of both targets (TD3's delayed policy update).")
    exploration_noise: float = Field(0.1, ge=0, le=10, description="Standard deviation of the Gaussian noise added to the actor's actions while collecting, as a fraction of the action box's half-width; the sum is clipped to the box.")
    target_policy_noise: float = Field(0.2, ge=0, le=10, description="Standard deviation of the Gaussian noise added to the target actor's next actions in the critics' target (target policy smoothing), as a fraction of the action box's half-width.")
    target_noise_clip: float = Field(0.5, ge=0, le=10, description="That noise is clipped to plus or minus this (a fraction of the box's half-width) before it is added; the noisy action is then clipped to the box.")
    hidden_sizes: list[HiddenWidth] = Field([256, 256], min_length=1, max_length=8, description="Hidden layer widths of the actor and of each critic.")


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
    eval_every: int = Field(10, ge=1, le=1_000_000, description="Policy updates between rank 0's evaluations, which run with or without targetReturn: each return is logged, exported as kuberl_trainer_eval_return and written to progress.jsonl, and the best one's weights to best-model.pt.")
    eval_while_training: bool = Field(False, description="Rank 0 evaluates a copy of the weights on a thread of its own while every rank trains on, instead of all ranks waiting for it (as RLlib's evaluation_parallel_to_training). An evaluation due while one runs is skipped; when a copy meets targetReturn, that copy is the final model. Not with spec.deterministic.")


class ResourceRequirements(Model):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # Kubernetes' own names
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Resource requests per pod (e.g. cpu, memory); GPUs come from gpusPerWorker.")
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16, description="Resource limits per pod; the CPU limit sets OMP_NUM_THREADS.")


class CheckpointSpec(Model):
    every_updates: int = Field(20, ge=1, le=1_000_000, description="Policy updates between checkpoints.")
    keep: int = Field(3, ge=1, le=100, description="Checkpoints kept; older ones are deleted.")
    size: str = Field("1Gi", pattern=POSITIVE_QUANTITY, max_length=64, description="Size of the PVC the operator creates when claimName is unset; above 0.")
    storage_class_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="StorageClass of the created PVC; unset uses the cluster default.")
    claim_name: str | None = Field(None, max_length=253, pattern=DNS_1123_SUBDOMAIN, description="Use this existing PVC (never adopted or deleted).")
    retain: bool = Field(True, description="Keep the created PVC when the job is deleted.")
    when_none_usable: Literal["Fail", "StartOver"] = Field(
        "Fail", description="When checkpoints exist and none can be loaded. Fail: the job fails with reason NoUsableCheckpoint,"
        " naming each file (they are kept). StartOver: train from zero; the files are moved aside into unreadable/.")


# The trainer's timeouts become datetime.timedelta (torch's process group), which overflows
# past about 10**14 s; 30 days outlasts any evaluation or checkpoint load. It also keeps startupTimeoutSeconds
# within the int32 of the coscheduling PodGroup's scheduleTimeoutSeconds, which the API server does not check.
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600


class RunPolicy(Model):
    backoff_limit: int = Field(3, ge=0, le=1000, description="Gang restarts after crashes or stalls before the job fails.")
    restart_backoff_seconds: float = Field(10.0, ge=0, le=3600, description="Base of the exponential delay between gang restarts.")
    active_deadline_seconds: int | None = Field(None, ge=1, description="Fail the job when it has run this long.")
    ttl_seconds_after_finished: int | None = Field(None, ge=0, description="Delete the job this long after it finishes.")
    suspend: bool = Field(False, description="Delete the pods and keep the job; resuming continues from the checkpoint.")
    stall_timeout_seconds: int = Field(600, ge=1, description="Restart the gang when rank 0's step counter has not moved this long.")
    startup_timeout_seconds: int = Field(600, ge=1, le=MAX_TIMEOUT_SECONDS, description="Report why pods are not running after this long, then retry them.")
    max_startup_retries: int = Field(3, ge=0, le=1000, description="Generations that never fully start before the job fails.")
    collective_timeout_seconds: int = Field(1800, ge=10, le=MAX_TIMEOUT_SECONDS, description="Timeout of each collective once every rank has joined; must outlast rank-0-only work (evaluation, checkpoints).")
    rendezvous_timeout_seconds: int = Field(600, ge=1, le=MAX_TIMEOUT_SECONDS, description="How long each rank of kuberl's trainer waits for every rank to join (rank 0's name to resolve, its store, each peer's arrival) before it exits with PeerLost, naming the ranks that never joined, and the gang restarts.")
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


# MLflow's SQL store keeps an experiment's name in a VARCHAR(256) column (SqlExperiment.name,
# mlflow/store/tracking/dbmodels/models.py, no migration widens it), which PostgreSQL and MySQL refuse a longer name
# for; its client's own check (mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH) takes 500
MLFLOW_EXPERIMENT_MAX = 256


class MlflowTracking(Model):
    """An MLflow run for the job; the server and credentials come from the client's own variables."""

    experiment: str | None = Field(
        None, min_length=1, max_length=MLFLOW_EXPERIMENT_MAX,
        description="MLflow experiment the run is logged under (created when missing), at most 256 characters (the"
                    " name column of MLflow's SQL store); unset: the job's name. The"
                    " server and its credentials are the MLflow client's standard variables, MLFLOW_TRACKING_URI and"
                    " MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD), set through"
                    " spec.template's env or envFrom a Secret: nothing secret in the spec.")


# W&B's own rules: a project name at most 128 characters (Settings.validate_project) and no character it refuses or
# mangles (validation.WANDB_NAME); a tag is 1 to 64 characters (Settings.validate_run_tags)
WandbTag = Annotated[str, Field(min_length=1, max_length=64, description="A W&B tag, 1 to 64 characters.")]


class WandbTracking(Model):
    """A Weights & Biases run for the job; the mode, server and key come from the client's own variables."""

    project: str = Field(
        min_length=1, max_length=128, pattern=WANDB_NAME,
        description="W&B project the run is logged to (created when missing): at most 128 characters, none of"
                    " / \\ # ? % : (W&B's rule), no control or bidirectional character, not . or .. (which the URL"
                    " of its runs resolves away). The key, mode and server are the W&B client's standard variables,"
                    " WANDB_API_KEY (from a Secret: valueFrom.secretKeyRef or envFrom), WANDB_MODE (online, offline:"
                    " kept in the checkpoint volume's wandb/ for `wandb sync`, disabled) and WANDB_BASE_URL, set"
                    " through spec.template's env: nothing secret in the spec.")
    entity: str | None = Field(
        None, min_length=1, max_length=128, pattern=WANDB_NAME,
        description="W&B user or team the project belongs to, named as the project is; unset: the key's default entity.")
    group: str | None = Field(
        None, min_length=1, max_length=128,
        description="W&B run group, e.g. the seeds of one configuration, so its UI draws them as one curve with a band.")
    tags: list[WandbTag] = Field(default_factory=list, max_length=32, description="W&B tags of the run.")


class TrackingSpec(Model):
    mlflow: MlflowTracking | None = Field(
        None, description="Rank 0 logs the run to MLflow: the TensorBoard scalars (CleanRL's names) as metrics, the"
                          " learned fields as params, the job's name, namespace, uid and generation as tags, and the"
                          " final model as an artifact; one MLflow run per run, continued across restarts and resumes."
                          " A server that is down or refuses is said once and training goes on.")
    wandb: WandbTracking | None = Field(
        None, description="Rank 0 logs the run to Weights & Biases, as CleanRL's --track does: the TensorBoard scalars"
                          " (CleanRL's names) against global_step, the learned fields as config, the job's name as the"
                          " run's name, its namespace and uid in its notes and the gang generation in its summary"
                          " (kuberl/generation); one W&B run per run, continued across"
                          " restarts and resumes. The final model is not uploaded (it stays in the checkpoint volume)."
                          " A server that is down or refuses is said once and training goes on.")


class JobSpec(Model):
    """Spec of an RLTrainingJob."""

    trainer: Literal["kuberl", "custom"] = immutable(
        default="kuberl",
        description="kuberl: kuberl's trainer runs algorithm on env. custom: the template's `trainer` container brings its"
        " own command; algorithm, env and totalTimesteps are then optional, and the job succeeds when every worker exits 0.",
    )
    algorithm: Literal["ppo", "dqn", "sac", "td3"] | None = immutable(default=None, description="Training algorithm: ppo (discrete and continuous actions), dqn (discrete), sac or td3 (continuous); required unless trainer: custom.")
    ppo: PPOConfig | None = immutable(default=None, description="PPO hyperparameters; only with algorithm: ppo.")
    dqn: DQNConfig | None = immutable(default=None, description="DQN hyperparameters; only with algorithm: dqn.")
    sac: SACConfig | None = immutable(default=None, description="SAC hyperparameters; only with algorithm: sac.")
    td3: TD3Config | None = immutable(default=None, description="TD3 hyperparameters; only with algorithm: td3.")
    env: EnvSpec | None = immutable(default=None, description="Environment each rank vectorises; required unless trainer: custom.")
    total_timesteps: int | None = immutable(default=None, ge=1, le=10**12, description="Transitions across all ranks (gymnasium's autoreset steps are none); training stops at the first update at or past it; required unless trainer: custom.")
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
    shm_size: str = Field("1Gi", pattern=NON_NEGATIVE_QUANTITY, max_length=64, description="Size of the in-memory /dev/shm; at least 0.")
    template: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "A PodTemplateSpec (metadata, spec) layered onto every rendered pod. metadata.labels and"
            " metadata.annotations merge key by key; spec.containers merge by name: one named `trainer`"
            " patches kuberl's (env merged by name, volumeMounts by mountPath, any other field it sets"
            " replaces kuberl's, e.g. command to bring your own trainer), others are added as sidecars;"
            " spec.volumes merge by name; any other pod field set here replaces kuberl's. kuberl's labels,"
            " annotations, hostname, subdomain and restartPolicy always stay, and its configuration volume"
            f" (`{names.CONFIG_VOLUME}`, at {names.CONFIG_MOUNT_DIR} in the trainer) cannot be replaced. Its JSON times workers is at"
            f" most {MAX_GANG_TEMPLATE_BYTES // 2**20} MiB (every pod carries a copy), and"
            f" spec.terminationGracePeriodSeconds at most {MAX_GRACE_SECONDS}, as runPolicy's."
        ),
        json_schema_extra=free_form(2),
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoint policy and storage.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restarts, deadlines, suspend, timeouts.")
    queue_name: str | None = immutable(default=None, max_length=63, pattern=DNS_1123_SUBDOMAIN, description="Kueue LocalQueue; the pods become one pod group.")
    seed: int = immutable(default=1, ge=0, le=2**31 - 1, description="Job seed; each rank's envs derive theirs from it, the rank and the restart (not the restart with deterministic: true, so a gang restarted before its first checkpoint repeats the run).")
    deterministic: bool = immutable(default=False, description="Deterministic torch kernels: a stopped and resumed run ends bitwise equal to an uninterrupted one.")
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Trainer metrics endpoint.")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, description="Experiment tracking servers the run is also logged to, beside TensorBoard's scalars.")
    rendezvous: RendezvousSpec = Field(default_factory=RendezvousSpec, description="Process group settings.")

    @property
    def procs(self) -> int:
        """Processes per pod after defaulting."""
        return self.procs_per_worker or self.gpus_per_worker or 1

    @property
    def world_size(self) -> int:
        return self.workers * self.procs

    @property
    def hyperparameters(self) -> PPOConfig | DQNConfig | SACConfig | TD3Config | None:
        """The algorithm's block, defaulted when omitted (ALGORITHM_BLOCKS); None without an algorithm."""
        if self.algorithm is None:
            return None
        field, model = ALGORITHM_BLOCKS[self.algorithm]
        return getattr(self, field) or model()


# spec.algorithm -> (the JobSpec field holding its hyperparameters, their model); a new algorithm is a row
ALGORITHM_BLOCKS: dict[str, tuple[str, type[Model]]] = {"ppo": ("ppo", PPOConfig), "dqn": ("dqn", DQNConfig), "sac": ("sac", SACConfig),
                                                        "td3": ("td3", TD3Config)}
