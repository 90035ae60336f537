"""The frozen trainer configuration: ONE document, built here, mounted into
every pod as /etc/kuberl/config.json (a ConfigMap owned by the job) and read
by the trainer. `kubectl get configmap <job>-config -o yaml` shows exactly what ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import names
from .rules import defaulted, parse_spec
from .spec import JobSpec

CONFIG_VERSION = 1


def trainer_config(job: str, namespace: str, uid: str, spec: JobSpec) -> dict:
    """Everything the trainer needs, fully defaulted, as plain JSON data."""
    checkpoint_dir = f"{names.CHECKPOINT_MOUNT_DIR}/{names.checkpoint_subdir(job, uid)}"
    return {
        "configVersion": CONFIG_VERSION,
        "job": job,
        "namespace": namespace,
        "uid": uid,
        "spec": defaulted(spec),
        "paths": {
            "checkpointDir": checkpoint_dir,
            # a custom trainer writes what it writes: no model is claimed for it
            "finalModel": f"{checkpoint_dir}/final-model.pt" if spec.trainer == "kuberl" else None,
        },
    }


def dump(config: dict) -> str:
    """Stable text: the same spec always gives the same bytes (and hash)."""
    return json.dumps(config, sort_keys=True, indent=1)


@dataclass(frozen=True)
class TrainerConfig:
    job: str
    namespace: str
    uid: str
    spec: JobSpec
    checkpoint_dir: str
    final_model: str | None


def load(config: dict) -> TrainerConfig:
    """Parse a config document (raises kuberl.core.validation.InvalidJob with field paths)."""
    return TrainerConfig(
        job=config["job"],
        namespace=config.get("namespace", ""),
        uid=config.get("uid", ""),
        spec=parse_spec(config["spec"]),
        checkpoint_dir=config["paths"]["checkpointDir"],
        final_model=config["paths"]["finalModel"],
    )
