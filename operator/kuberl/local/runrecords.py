"""What `kuberl run` records of each run in its run directory, read back by a rerun (which run it continues) and by
`kuberl plot` (what set a compared run apart): fingerprint.json, the learned fields the run trains with."""

from __future__ import annotations

import contextlib
import json
import os

from ..core import fingerprint
from ..core.rules import validate_job
from ..core.validation import InvalidJob
from ..core.yamlreader import UnreadableSpec, load_documents
from .process import read_regular_file

FINGERPRINT_FILE = "fingerprint.json"
RECORD_LIMIT = 16 << 20  # a run's own records are small; a file put in their place is not read whole


def recorded_learned_values(run_dir: str) -> dict | None:
    """The learned fields a run recorded (`fingerprint.json`), or, for a run an older kuberl started,
    those of the job.yaml it kept; None when neither can be read."""
    text = read_regular_file(os.path.join(run_dir, FINGERPRINT_FILE), RECORD_LIMIT)
    with contextlib.suppress(ValueError, TypeError, AttributeError, RecursionError):
        record = json.loads(text) if text else None
        if isinstance(record, dict) and isinstance(record.get("learned"), dict):
            return record["learned"]
    text = read_regular_file(os.path.join(run_dir, "job.yaml"), RECORD_LIMIT)
    with contextlib.suppress(InvalidJob, UnreadableSpec, ValueError, TypeError, AttributeError):
        docs = load_documents(text) if text else []
        if len(docs) == 1:
            return fingerprint.learned_values(validate_job(docs[0]))
    return None
