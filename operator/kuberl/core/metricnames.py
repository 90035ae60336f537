"""Trainer metric names and label names, defined once.

The trainer's exporter, the operator's scraper (stall detection, status
progress) and the Grafana dashboard all read names from here. Prometheus
conventions: counters end in `_total`, durations in `_seconds`. Plain
constants: no prometheus or torch import, so the operator stays small.
"""

PREFIX = "kuberl_trainer"

# Labels on every trainer metric. `rltj` is the job's name (Prometheus owns
# `job` for the scrape target).
LABEL_RLTJ = "rltj"
LABEL_RANK = "rank"
LABELS = (LABEL_RLTJ, LABEL_RANK)

# Counters. Rank 0's steps counter is global (all-reduced): the operator reads
# it for progress and stall detection.
ENV_STEPS_TOTAL = f"{PREFIX}_env_steps_total"
EPISODES_TOTAL = f"{PREFIX}_episodes_total"
POLICY_UPDATES_TOTAL = f"{PREFIX}_policy_updates_total"
CHECKPOINTS_TOTAL = f"{PREFIX}_checkpoints_total"

# Gauges.
EPISODE_RETURN = f"{PREFIX}_episode_return"  # mean of recent episodes, all ranks
EVAL_RETURN = f"{PREFIX}_eval_return"  # mean evaluation return (rank 0)
STEPS_PER_SECOND = f"{PREFIX}_steps_per_second"  # global env steps/s
LEARNING_RATE = f"{PREFIX}_learning_rate"
WORLD_SIZE = f"{PREFIX}_world_size"
SUCCESS = f"{PREFIX}_success"  # 1 once the success target is met
LAST_CHECKPOINT_TIMESTAMP = f"{PREFIX}_last_checkpoint_timestamp_seconds"
# Rank 0, from its start: checkpoints newer than the one it resumed from that it could not use
# (truncated, corrupt, refused), whose training is done again; the operator posts an Event.
CHECKPOINTS_SKIPPED = f"{PREFIX}_checkpoints_skipped"
# Rank 0: how long its last checkpoint took to write (0 before the first); against the pod's grace period the
# operator warns that a stop's checkpoint would be killed mid-write.
CHECKPOINT_SAVE_SECONDS = f"{PREFIX}_checkpoint_save_seconds"
# Rank 0, once it has looked: the timesteps of the checkpoint it resumed from, 0 when it found none and
# started from zero (NaN before it looked); against the status's latestCheckpoint the operator tells a
# volume emptied or replaced under the job.
RESUMED_TIMESTEPS = f"{PREFIX}_resumed_timesteps"
# A rank on a GPU only (absent on CPU): what its device holds and what torch's caching allocator has
# reserved on it, read at scrape time. A job's GPUs are its ranks that export them.
GPU_MEMORY_TOTAL = f"{PREFIX}_gpu_memory_total_bytes"
GPU_MEMORY_RESERVED = f"{PREFIX}_gpu_memory_reserved_bytes"
POLICY_LOSS = f"{PREFIX}_policy_loss"
VALUE_LOSS = f"{PREFIX}_value_loss"
ENTROPY = f"{PREFIX}_entropy"
APPROX_KL = f"{PREFIX}_approx_kl"
CLIP_FRACTION = f"{PREFIX}_clip_fraction"
Q_VALUE = f"{PREFIX}_q_value"
ENTROPY_COEFFICIENT = f"{PREFIX}_entropy_coefficient"
Q1_VALUE, Q2_VALUE = f"{PREFIX}_q1_value", f"{PREFIX}_q2_value"
Q1_LOSS, Q2_LOSS = f"{PREFIX}_q1_loss", f"{PREFIX}_q2_loss"
# An update's statistics exported as gauges: the name an algorithm reports in
# UpdateReport.losses -> (metric, help). A new algorithm's statistic is one row
# here (and a dashboard panel, if it should be drawn); one it reports without a
# row is not exported.
LOSS_GAUGES = {
    "policy_loss": (POLICY_LOSS, "Mean policy loss of the last update (PPO's clipped one, SAC's and TD3's actor loss)."),
    "value_loss": (VALUE_LOSS, "Mean value loss of the last update (PPO's critic, DQN's TD loss, SAC's and TD3's twin critics)."),
    "entropy": (ENTROPY, "Mean policy entropy of the last update (PPO; SAC: minus the mean log-probability of its actor's samples)."),
    "approx_kl": (APPROX_KL, "Mean approximate KL of the last update (PPO)."),
    "clip_fraction": (CLIP_FRACTION, "Fraction of samples whose probability ratio was clipped, last update (PPO)."),
    "q_value": (Q_VALUE, "Mean Q(s, a) of the replay batches of the last update (DQN: of the taken actions; SAC and TD3: their twin critics' mean; 0 for PPO)."),
    "entropy_coefficient": (ENTROPY_COEFFICIENT, "Entropy coefficient alpha after the last update (SAC; fixed, or autotuned)."),
    "q1_value": (Q1_VALUE, "Mean Q(s, a) of the first twin critic on the replay batches of the last update (SAC, TD3; 0 for others)."),
    "q2_value": (Q2_VALUE, "Mean Q(s, a) of the second twin critic on the replay batches of the last update (SAC, TD3; 0 for others)."),
    "q1_loss": (Q1_LOSS, "Mean squared error of the first twin critic against its target, last update (SAC, TD3; 0 for others)."),
    "q2_loss": (Q2_LOSS, "Mean squared error of the second twin critic against its target, last update (SAC, TD3; 0 for others)."),
}

# Histograms (Prometheus adds _bucket, _sum, _count).
ROLLOUT_DURATION = f"{PREFIX}_rollout_duration_seconds"
UPDATE_DURATION = f"{PREFIX}_update_duration_seconds"
ALLREDUCE_DURATION = f"{PREFIX}_allreduce_duration_seconds"

# The operator's own metrics (kuberl.operator.metrics).
OPERATOR_PREFIX = "kuberl_operator"
OPERATOR_JOBS = f"{OPERATOR_PREFIX}_jobs"  # gauge by phase
# 1 per job, labelled with its namespace, name and phase as last reconciled (kube-state-metrics' style):
# what "stuck Pending" alerts and per-namespace panels select on; gone with the job.
OPERATOR_JOB_PHASE = f"{OPERATOR_PREFIX}_job_phase"
# Per job, its gang restarts counted toward runPolicy.backoffLimit (crashes, stalls: status.restarts, what
# kubectl get rltj's RESTARTS shows): from 0 at the job's first reconcile, kept across operator restarts.
OPERATOR_JOB_RESTARTS = f"{OPERATOR_PREFIX}_job_restarts"
OPERATOR_RECONCILE_DURATION = f"{OPERATOR_PREFIX}_reconcile_duration_seconds"
# CPU seconds of each judgement of a job's spec generation (validated, its pods rendered and checked): a tenant's
# large spec edited in a loop shows here, its rate held to jobstatus.JUDGE_SHARE of the time.
OPERATOR_SPEC_JUDGEMENT = f"{OPERATOR_PREFIX}_spec_judgement_cpu_seconds"
OPERATOR_GANG_RESTARTS_TOTAL = f"{OPERATOR_PREFIX}_gang_restarts_total"  # by reason
OPERATOR_PODS_CREATED_TOTAL = f"{OPERATOR_PREFIX}_pods_created_total"
OPERATOR_API_ERRORS_TOTAL = f"{OPERATOR_PREFIX}_api_errors_total"  # by verb, resource, code
OPERATOR_API_THROTTLED_SECONDS_TOTAL = f"{OPERATOR_PREFIX}_api_throttled_seconds_total"  # waits for --kube-api-qps/--kube-api-burst
OPERATOR_API_RESOLVED_TOTAL = f"{OPERATOR_PREFIX}_api_resolved_total"  # 404/409/410 the operator resolves, by verb, resource, code
OPERATOR_PEERS_SAME_PRIORITY = f"{OPERATOR_PREFIX}_peers_same_priority"  # live replicas sharing this one's peering priority (0: fine)
# Per watched namespace of a namespaced install: 1 while RBAC refuses the operator its list or watch there (its
# jobs are not reconciled; the other namespaces are), 0 while it is served.
OPERATOR_NAMESPACE_REFUSED = f"{OPERATOR_PREFIX}_namespace_refused"
# The operator's process (prometheus_client's ProcessCollector on its registry): a start time that changes
# is a container restart, as the kubelet restarts an operator whose /healthz fails (blind watches, RBAC).
PROCESS_START_TIME = "process_start_time_seconds"
PROCESS_RESIDENT_MEMORY = "process_resident_memory_bytes"
# Per-job operator series: the job's namespace (the ServiceMonitor honours it over the operator's own) and name.
LABEL_NAMESPACE = "namespace"
LABEL_PHASE = "phase"
LABEL_REASON = "reason"
