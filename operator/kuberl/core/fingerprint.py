"""Which spec fields change what a job learns, and a run's fingerprint of them.

`kuberl run` keeps a job's run in `runs/<job>/` and resumes it when run again. Resuming is right
only when the rerun would learn the same thing: a rerun with another learning rate that picked up
the old run's checkpoint trained neither. `FIELDS` sorts every top-level spec field (a unit test
fails when a field is added to `JobSpec` without a row here); the fingerprint is a hash of the
defaulted values of the `LEARNED` ones.

`totalTimesteps` is learned: PPO's annealed learning rate and DQN's epsilon decay are scheduled
over it, so a run resumed under another budget would jump to another point of its schedule.
`kuberl run --resume` continues a run all the same (to extend a budget, knowingly).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from . import safetext
from .rules import defaulted
from .spec import JobSpec

LEARNED = "learned"
OPERATIONAL = "operational"

# Every JobSpec field (camelCase): whether a change to it changes what is learned, and why.
FIELDS: dict[str, tuple[str, str]] = {
    "trainer": (LEARNED, "which program trains"),
    "algorithm": (LEARNED, "the learning algorithm"),
    "ppo": (LEARNED, "PPO's hyperparameters and network"),
    "dqn": (LEARNED, "DQN's hyperparameters and network"),
    "sac": (LEARNED, "SAC's hyperparameters and networks"),
    "td3": (LEARNED, "TD3's hyperparameters and networks"),
    "env": (LEARNED, "the environment and how many copies each rank steps"),
    "totalTimesteps": (LEARNED, "learning-rate and exploration schedules run over it"),
    "workers": (LEARNED, "world size: the global batch and the seeds of every rank's envs"),
    "gpusPerWorker": (LEARNED, "sets processes per pod by default, hence the world size"),
    "procsPerWorker": (LEARNED, "world size"),
    "seed": (LEARNED, "every random number the run draws"),
    "deterministic": (LEARNED, "which kernels compute the updates"),
    "image": (LEARNED, "the trainer's code, in a cluster"),
    "template": (LEARNED, "may replace the command, its arguments and environment"),
    "success": (OPERATIONAL, "when to stop, not what each update does"),
    "imagePullPolicy": (OPERATIONAL, "when the image is pulled"),
    "resources": (OPERATIONAL, "CPU and memory the pods get"),
    "nodeSelector": (OPERATIONAL, "where the pods run"),
    "tolerations": (OPERATIONAL, "where the pods run"),
    "affinity": (OPERATIONAL, "where the pods run"),
    "priorityClassName": (OPERATIONAL, "scheduling priority"),
    "schedulerName": (OPERATIONAL, "which scheduler places the pods"),
    "labels": (OPERATIONAL, "labels on the pods"),
    "shmSize": (OPERATIONAL, "size of /dev/shm"),
    "checkpoint": (OPERATIONAL, "how often and where state is saved"),
    "runPolicy": (OPERATIONAL, "restarts, deadlines and timeouts"),
    "queueName": (OPERATIONAL, "which Kueue queue admits the pods"),
    "metrics": (OPERATIONAL, "the metrics port"),
    "tracking": (OPERATIONAL, "where the numbers are also sent"),
    "rendezvous": (OPERATIONAL, "the process group's port and backend (same sums either way)"),
}


def learned_fields() -> list[str]:
    return [name for name, (kind, _) in FIELDS.items() if kind == LEARNED]


# A container's env variables that configure a tracking client (spec.tracking): where the numbers are sent, and its
# credentials, which change nothing learned and must not reach fingerprint.json or a run's hyperparameters text
# (TensorBoard's, and the params MLflow is sent). So with any variable whose name reads as a credential
# (WANDB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD): a plain value in the template is the user's
# secret in the spec already, and must not travel further, to a shared TensorBoard or a tracking server. A KEY, PASS
# or PWD word and a passphrase or connection string too, as tools' own variables name theirs: KAGGLE_KEY,
# AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING, B2_APPLICATION_KEY, MYSQL_PWD, RCLONE_CONFIG_PASS,
# BORG_PASSPHRASE, SSHPASS (each reached fingerprint.json and MLflow's params).
TRACKING_ENV_PREFIXES = ("MLFLOW_", "WANDB_")
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH"
                             r"|CONNECTION_?STRING|^SSHPASS$|(?:^|_)(?:KEY|PASS|PWD)(?:_|$)", re.IGNORECASE)


def operational_env(name: str) -> bool:
    """Whether a template env variable named `name` is left out of what is learned: a tracking client's, or a credential."""
    return name.startswith(TRACKING_ENV_PREFIXES) or CREDENTIAL_NAME.search(name) is not None


def learned_values(spec: JobSpec) -> dict[str, Any]:
    """The defaulted values (camelCase, JSON types) of the fields that change what is learned; the template's
    containers without their tracking client's variables and credentials (`operational_env`)."""
    data = defaulted(spec)
    values = {name: data.get(name) for name in learned_fields()}
    if values.get("template"):
        values["template"] = _without_tracking_env(values["template"])
    return values


def _without_tracking_env(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """`template` (a PodTemplateSpec) less every container's `operational_env` entries, and less what
    that leaves empty (an env, a container of a name only, the containers, the pod spec): a template that only sets the
    tracking client's variables fingerprints as none, so turning tracking on does not start a fresh run."""
    pod = template.get("spec")
    if not isinstance(pod, Mapping):
        return template
    pod = dict(pod)
    for kind in ("containers", "initContainers"):
        if isinstance(pod.get(kind), list):
            kept = [c for c in map(_container_without_tracking_env, pod[kind]) if c is not None]
            if kept:
                pod[kind] = kept
            else:
                del pod[kind]
    rest = {k: v for k, v in template.items() if k != "spec"}
    return rest | ({"spec": pod} if pod else {})


def _container_without_tracking_env(container: Any) -> Any:
    """`container` less its tracking client's and credentials' env entries; None when nothing but its name is left."""
    if not isinstance(container, Mapping) or not isinstance(container.get("env"), list):
        return container
    env = [e for e in container["env"]
           if not (isinstance(e, Mapping) and operational_env(str(e.get("name", ""))))]
    kept = {k: v for k, v in container.items() if k != "env"} | ({"env": env} if env else {})
    return None if set(kept) <= {"name"} else kept


def fingerprint(values: Mapping[str, Any]) -> str:
    """A hex digest of `learned_values`: equal values, equal fingerprint (key order aside)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def flat(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` by dotted path (`ppo.learningRate`), a leaf each: an empty mapping or a list is one value."""
    out: dict[str, Any] = {}
    _flat(values, "", out)
    return out


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            _flat(inner, f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = value


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(dotted path, old value, new value) for every leaf that differs; a missing leaf is None. An empty map on
    one side whose keys the other side has is no leaf of its own: `env.kwargs.foo null -> 1`, not also
    `env.kwargs {} -> null`."""
    flat_old: dict[str, Any] = {}
    flat_new: dict[str, Any] = {}
    _flat(old, "", flat_old)
    _flat(new, "", flat_new)
    return [(path, flat_old.get(path), flat_new.get(path))
            for path in leaves(flat_old.keys() | flat_new.keys()) if flat_old.get(path) != flat_new.get(path)]


def leaves(paths: Iterable[str]) -> list[str]:
    """`paths` sorted, less those that are a parent of another (`a` beside `a.b`: an empty map on one side). Each path's
    children are found by a bisection of the sorted paths: naming every prefix of each path took the square of its
    dots (a fingerprint.json is anyone's to write: one key of 20,000 dots, 2 s; of 16 MB, for ever)."""
    ordered = sorted(set(paths))
    found = []
    for path in ordered:
        child = path + "."
        at = bisect.bisect_left(ordered, child)
        if not (at < len(ordered) and ordered[at].startswith(child)):
            found.append(path)
    return found


def short_value(value: Any, width: int = 40) -> str:
    """A recorded value as one safe line of at most `width` characters (a fingerprint.json is anyone's to write)."""
    text = json.dumps(value)  # escapes control characters, so a value prints as one safe line
    return text if len(text) <= width else text[: width - 3] + "..."


def short_path(path: str, width: int = 40) -> str:
    """A recorded field's dotted path as one safe line of at most `width` characters: its keys are anyone's too."""
    text = safetext.one_line(path[: 4 * width])
    return text if len(text) <= width else text[: width - 3] + "..."


def describe_changes(changes: list[tuple[str, Any, Any]], limit: int = 6) -> str:
    """`ppo.learningRate 0.0025 -> 0.001, workers 2 -> 1` (and how many more)."""
    shown = [f"{short_path(path)} {short_value(a)} -> {short_value(b)}" for path, a, b in changes[:limit]]
    more = len(changes) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


SEED = "seed"


def seed_groups(runs: list[Mapping[str, Any] | None]) -> list[int]:
    """Each run's group among runs compared side by side: those whose learned values are the same but for the seed
    share one (the index of its first run), so a plot draws one configuration's seeds together; a run with no
    record is a group of its own."""
    keys = [json.dumps({k: v for k, v in values.items() if k != SEED}, sort_keys=True) if values is not None else i
            for i, values in enumerate(runs)]
    first: dict[object, int] = {}
    return [first.setdefault(key, i) for i, key in enumerate(keys)]


def distinguishing_values(runs: list[Mapping[str, Any] | None], limit: int = 3, ignored: tuple[str, ...] = ()) -> list[str]:
    """For runs compared side by side (`kuberl plot runs`), each one's values of the learned fields that are not
    the same in all of them (`ppo.learningRate 0.001, seed 2`), `ignored` top-level fields aside; '' for a run
    with no record, or where every recorded run learns the same. What tells runs/cartpole-ppo from
    runs/cartpole-ppo.3fa2b1c0 apart."""
    flats: list[dict[str, Any] | None] = []
    for values in runs:
        flat: dict[str, Any] = {}
        if values is not None:
            _flat({k: v for k, v in values.items() if k not in ignored}, "", flat)
        flats.append(flat if values is not None else None)
    recorded = [flat for flat in flats if flat is not None]
    # a path differs where a run's value (None where it has none) is not the first run's; counted leaf by leaf, once
    # each (comparing every path with every run took paths times runs: 1,000 runs beside one of a million keys)
    first, having, differs = recorded[0] if recorded else {}, {}, set()
    for flat in recorded if len(recorded) > 1 else []:
        for path, value in flat.items():
            having[path] = having.get(path, 0) + 1
            if value != first.get(path):
                differs.add(path)
    differs.update(path for path, count in having.items() if count < len(recorded) and first.get(path) is not None)
    # an empty map beside one with keys is no leaf of its own (as changed_fields)
    differing = [path for path in leaves(having) if path in differs]
    described = []
    for flat in flats:
        shown = [f"{short_path(path)} {short_value(flat.get(path), 24)}" for path in differing[:limit]] if flat is not None else []
        more = len(differing) - limit
        described.append(", ".join(shown) + (f" and {more} more" if shown and more > 0 else ""))
    return described

