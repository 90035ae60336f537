"""A run directory named that is not there (`kuberl eval runs/cartpole`, where the job, and so the run, is
cartpole-ppo): the runs beside it, nearest first, for `kuberl eval` and `kuberl plot` to name."""

from __future__ import annotations

import difflib
import os

from . import safetext

# what kuberl run writes into each run directory (runs_in tells runs by it)
RUN_JOB_FILE = "job.yaml"


def missing_run_hint(path: str) -> str:
    """`; did you mean runs/cartpole-ppo?` for a path that is not there, naming the runs in its parent directory
    (each holds the job.yaml kuberl run writes) closest to its name, else the first few; '' where there are none."""
    trimmed = path.rstrip("/") or path
    parent = os.path.dirname(trimmed)
    try:
        runs = sorted(entry for entry in os.listdir(parent or ".") if os.path.isfile(os.path.join(parent or ".", entry, RUN_JOB_FILE)))
    except OSError:
        return ""
    close = difflib.get_close_matches(os.path.basename(trimmed), runs, n=3, cutoff=0.6)
    # a run's name is anyone's to choose (a shared runs/): escaped, so the hint stays one line of kuberl's own
    named = [safetext.one_line(os.path.join(parent, run)) for run in (close or runs[:4])]
    if close:
        return f"; did you mean {' or '.join(named)}?"
    return f"; the runs in {parent or '.'}: {', '.join(named)}{', …' if len(runs) > 4 else ''}" if runs else ""


def runs_in(directory: str) -> list[str]:
    """The run directories directly under `directory` (each has the job.yaml kuberl run writes), sorted: a directory
    of runs, kuberl run's --dir, that `kuberl plot` and `kuberl eval` take for its runs."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in entries if os.path.isfile(os.path.join(directory, n, RUN_JOB_FILE))]

