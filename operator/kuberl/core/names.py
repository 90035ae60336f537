"""Every name kuberl derives from a job, defined once.

The operator, the local runner, the chart and the tests all take names from
here, so a pod's hostname, its Service and its labels can never disagree.
"""

GROUP = "kuberl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RLTrainingJob"
PLURAL = "rltrainingjobs"
SINGULAR = "rltrainingjob"
SHORT_NAMES = ["rltj"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# Labels and annotations on every child object.
LABEL_JOB = f"{GROUP}/job"
LABEL_RANK = f"{GROUP}/rank"
LABEL_RESTART = f"{GROUP}/restart"
LABEL_COMPONENT = f"{GROUP}/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "kuberl"
ANNOTATION_SPEC_HASH = f"{GROUP}/config-hash"
# On the CRD: the sha256 of its spec, which the chart compares with the installed CRD's (Helm never upgrades crds/).
ANNOTATION_CRD_HASH = f"{GROUP}/crd-sha256"

# Gang scheduling: Kueue's pod-group integration, Volcano, scheduler-plugins.
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
# Volcano's queue for a pod (volcano.sh/apis scheduling/v1beta1 QueueNameAnnotationKey); a PodGroup states its own in spec.queue,
# so kuberl's Volcano PodGroup takes it from the pod template's annotation (else Volcano's "default" queue).
VOLCANO_QUEUE_NAME = "scheduling.volcano.sh/queue-name"
COSCHEDULING_POD_GROUP = "scheduling.x-k8s.io/pod-group"
# Set on the pods when the job ends: Kueue then finishes the pod group and releases its quota.
KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"

# A job name is capped so every derived name stays a DNS-1035 label (<= 63):
# the longest suffix below is "-checkpoints" (12 chars) and a rank suffix is at
# most "-1023" (5 chars).
MAX_JOB_NAME = 50
MAX_WORKERS = 1024
MAX_PROCS_PER_WORKER = 16

CONFIG_VOLUME = "config"  # the pod volume of the trainer configuration (the job's ConfigMap)
CONFIG_MOUNT_DIR = "/etc/kuberl"
CONFIG_FILE = "config.json"
CHECKPOINT_MOUNT_DIR = "/checkpoints"
# Beside a job's final-model.pt (the last weights): the weights of its best evaluation so far, as SB3's EvalCallback keeps
# best_model. Rank 0 writes it atomically at each evaluation that beats the one before; kuberl eval --best plays it.
BEST_MODEL = "best-model.pt"
# rank 0's TensorBoard event files, in the job's checkpoint directory beside progress.jsonl
TENSORBOARD_DIR = "tensorboard"
SHM_MOUNT_DIR = "/dev/shm"
TMP_MOUNT_DIR = "/tmp"
SHM_VOLUME = "dshm"
TMP_VOLUME = "tmp"
CHECKPOINT_VOLUME = "checkpoints"  # in worker 0's pod only
TERMINATION_LOG = "/dev/termination-log"
TRAINER_CONTAINER = "trainer"


def service_name(job: str) -> str:
    """Headless Service; also the pods' subdomain."""
    return job


def pod_name(job: str, rank: int) -> str:
    """Pod name and hostname of worker `rank`."""
    return f"{job}-{rank}"


def configmap_name(job: str) -> str:
    return f"{job}-config"


def pvc_name(job: str) -> str:
    return f"{job}-checkpoints"


def networkpolicy_name(job: str) -> str:
    return f"{job}-gang"


def podgroup_name(job: str) -> str:
    return f"{job}-gang"


def metrics_port_name(local_rank: int) -> str:
    """Container port names are IANA_SVC_NAMEs: at most 15 characters."""
    return f"metrics-{local_rank}"


def master_addr(job: str, namespace: str) -> str:
    """DNS name of rank 0: <hostname>.<subdomain>.<namespace>.svc."""
    return f"{pod_name(job, 0)}.{service_name(job)}.{namespace}.svc"


def checkpoint_subdir(job: str, uid: str) -> str:
    """Checkpoints live under a directory named by job name and uid, so a
    user's shared PVC never mixes two jobs that reuse a name."""
    return f"{job}-{uid}" if uid else job
