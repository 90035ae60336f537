"""What `kuberl run` records of each run in its run directory, read back by a rerun (which run it continues), by
`kuberl plot` and by `kuberl eval` (what sets compared runs apart): fingerprint.json, the learned fields the run
trains with. In the core because the trainer's `kuberl eval` reads them too, and the trainer imports the core only."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from collections.abc import Mapping
from typing import Any

from . import fingerprint
from .rules import validate_job
from .validation import InvalidJob
from .yamlreader import UnreadableSpec, load_documents

FINGERPRINT_FILE = "fingerprint.json"
RECORD_LIMIT = 16 << 20  # a run's own records are small; a file put in their place is not read whole
# fingerprint.json holds a valid spec's learned values, written as the trainer's ConfigMap weighs the spec (indented
# JSON, within 1 MiB: rules.config_size_problems), and its fingerprint; twice that is no record of kuberl's. One of
# 16 MiB, anyone's to write, held 150 MB parsed, for every run `kuberl plot` (20) or `kuberl eval runs` (all) compares.
FINGERPRINT_LIMIT = 2 << 20


def read_regular_file(path: str, limit: int = -1) -> str | None:
    """A file a container wrote, read only if it is a regular file (else None): the process owns its root and
    volumes here, and a FIFO or a link put in a file's place must not hang the runner (nor a link be followed)."""
    f = open_regular(path)
    if f is None:
        return None
    with f:
        return f.read(limit).decode(errors="replace")


def open_regular(path: str):
    """`path` opened for reading if it is a regular file, without following a link or blocking on a FIFO; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which raises for a directory and leaves fd open
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def recorded_learned_values(run_dir: str) -> dict | None:
    """The learned fields a run recorded (`fingerprint.json`), or, for a run an older kuberl started,
    those of the job.yaml it kept; None when neither can be read."""
    text = read_regular_file(os.path.join(run_dir, FINGERPRINT_FILE), FINGERPRINT_LIMIT + 1)
    with contextlib.suppress(ValueError, TypeError, AttributeError, RecursionError):
        record = json.loads(text) if text and len(text) <= FINGERPRINT_LIMIT else None
        if isinstance(record, dict) and isinstance(record.get("learned"), dict):
            return record["learned"]
    text = read_regular_file(os.path.join(run_dir, "job.yaml"), RECORD_LIMIT)
    with contextlib.suppress(InvalidJob, UnreadableSpec, ValueError, TypeError, AttributeError):
        docs = load_documents(text) if text else []
        if len(docs) == 1:
            return fingerprint.learned_values(validate_job(docs[0]))
    return None


def recorded_target_return(run_dir: str | None) -> float | None:
    """success.targetReturn of the job a run directory ran (its job.yaml): the return its evaluations had to reach to
    stop. None where there is none: no run directory (a progress.jsonl fetched from a cluster), no target set, a
    custom trainer's job, a job.yaml that is no valid job, or a target no axis can hold (inf)."""
    text = read_regular_file(os.path.join(run_dir, "job.yaml"), RECORD_LIMIT) if run_dir else None
    with contextlib.suppress(InvalidJob, UnreadableSpec, ValueError, TypeError, AttributeError):
        docs = load_documents(text) if text else []
        spec = validate_job(docs[0]) if len(docs) == 1 else None
        target = spec.success.target_return if spec is not None and spec.trainer == "kuberl" else None
        return target if target is not None and math.isfinite(target) else None
    return None


def job_of(run_dir: str | None) -> str | None:
    """The job a run directory of kuberl run belongs to: runs/<job> and runs/<job>.<fingerprint> (a job's name has
    no dot); None for no run directory (a model file given alone, a progress.jsonl fetched from a cluster)."""
    return os.path.basename(os.path.normpath(run_dir)).split(".", 1)[0] if run_dir else None


def run_labels(names: list[str], jobs: list[str | None], values: list[Mapping[str, Any] | None]
               ) -> tuple[list[str], list[int]]:
    """Runs compared side by side (`kuberl plot`, `kuberl eval` of several runs): each one's name and group. Runs of
    one job are named with the learned values that set them apart (fingerprint.distinguishing_values of `values`,
    what each run recorded), and those that differ in their seed alone form one group (the index of its first run),
    named once with their seeds; runs of different jobs are told apart by their names already (a PPO job beside a
    DQN one differs in 40 values). `names` are the runs' own names, kept where nothing is added."""
    labels, groups = list(names), list(range(len(names)))
    for job, members in jobs_runs(jobs).items():
        if len(members) < 2:
            continue
        apart = fingerprint.distinguishing_values([values[i] for i in members], ignored=(fingerprint.SEED,))
        seeds_of: dict[int, list[Any]] = {}  # a group's seeds; a run with no record is a group of its own
        for i, group in zip(members, fingerprint.seed_groups([values[i] for i in members]), strict=True):
            groups[i] = members[group]
            seeds_of.setdefault(groups[i], []).append((values[i] or {}).get(fingerprint.SEED))
        seeds_of = {group: [seeds[k] for k in seed_order(seeds)] for group, seeds in seeds_of.items()}
        for i, text in zip(members, apart, strict=True):
            seeds = seeds_of[groups[i]]
            seeded = f"seeds {shown_seeds(seeds)}" if len(seeds) > 1 else ""
            name = job if seeded else labels[i]  # a configuration's seeds: named by their job, not one seed's run
            described = "; ".join(part for part in (text, seeded) if part)
            labels[i] = f"{name} ({described})" if described else name
    return labels, groups


def values_apart(jobs: list[str | None], values: list[Mapping[str, Any] | None]) -> list[str]:
    """Each run's learned values that its job's other runs do not share, its seed among them
    (`ppo.learningRate 0.0025, seed 2`: `kuberl eval runs`' line of each run); '' for a run alone of its job, or
    with no record. `run_labels` names a configuration's seeds together instead."""
    texts = [""] * len(jobs)
    for members in jobs_runs(jobs).values():
        if len(members) > 1:
            for i, text in zip(members, fingerprint.distinguishing_values([values[i] for i in members]), strict=True):
                texts[i] = text
    return texts


def jobs_runs(jobs: list[str | None]) -> dict[str, list[int]]:
    """Each job's runs among `jobs` (each run's job, None for none), in one pass: thousands of runs, thousands of jobs."""
    runs: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        if job is not None:
            runs.setdefault(job, []).append(i)
    return runs


def seed_order(seeds: list[Any]) -> list[int]:
    """The positions of a configuration's seeds, in their order: `--set seed=1`, 2, 3 are runs/<job>.<fingerprint>,
    whose hashes sort the runs in any order (`seeds 1, 3, 2`). Recorded values that are not all integers
    (fingerprint.json is anyone's to write) stay as given."""
    if all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds):
        return sorted(range(len(seeds)), key=lambda k: seeds[k])
    return list(range(len(seeds)))


SEEDS_NAMED = 8  # a configuration's seeds named in its label at most; past it, how many more


def shown_seeds(seeds: list[Any]) -> str:
    """`1, 2, 3` (each as fingerprint.json recorded it, cut short: a 200 kB "seed" collapsed a plot's layout), the
    first SEEDS_NAMED and how many more."""
    named = ", ".join(fingerprint.short_value(seed, 24) for seed in seeds[:SEEDS_NAMED])
    return named + (f" and {len(seeds) - SEEDS_NAMED} more" if len(seeds) > SEEDS_NAMED else "")
