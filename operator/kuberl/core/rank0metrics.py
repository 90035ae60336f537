"""Rank 0's metrics page, read once for the operator and `kuberl run` alike.

A metrics page comes from a pod the job's author controls, so it is untrusted
input: read at most `MAX_PAGE_BYTES`, and only finite numbers within the
bounds below reach status (a NaN or a 301-digit integer in status breaks
`kubectl get` for everyone). Pure: no I/O, no asyncio; callers read the bytes
and run `parse` off their event loop.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from . import contract, lifecycle, metricnames

MAX_PAGE_BYTES = 1 << 20  # a trainer's page is a few KiB; beyond this it is not read at all
MAX_TIMESTEPS = contract.MAX_STATUS_TIMESTEPS  # integers a JSON reader (kubectl, Prometheus) keeps exactly
MAX_GAUGE = contract.MAX_STATUS_GAUGE  # returns and rates beyond this are noise or an attack, not training
MAX_TIMESTAMP = 1e11  # POSIX seconds (year 5138): beyond it rfc3339 cannot render them
# The samples read here. Only their lines reach the parser, at most MAX_SAMPLE_LINES of them:
# a whole 1 MiB page of tiny series took 0.4-0.8 s of parsing (holding the GIL) per scrape.
READ_NAMES = (
    metricnames.ENV_STEPS_TOTAL, metricnames.STEPS_PER_SECOND, metricnames.EPISODE_RETURN,
    metricnames.EVAL_RETURN, metricnames.SUCCESS, metricnames.LAST_CHECKPOINT_TIMESTAMP, metricnames.CHECKPOINTS_SKIPPED,
    metricnames.RESUMED_TIMESTEPS, metricnames.CHECKPOINT_SAVE_SECONDS,
)
MAX_SAMPLE_LINES = 64  # a rank's own page has one line per name
# Longer sample lines are not read: prometheus_client parses a label value's escapes in time quadratic in their
# count (a 1 MiB line of \" took 17 s of the operator's CPU, holding the GIL, at every scrape). The trainer's lines
# are about 100 characters (a 50-character rltj, a rank); 64 lines of 2048 \" parse in about 0.2 s.
MAX_SAMPLE_LINE_CHARACTERS = 2048
_SAMPLE_LINE = re.compile(rf"^(?=.{{0,{MAX_SAMPLE_LINE_CHARACTERS}}}$)[ \t]*(?:{'|'.join(map(re.escape, READ_NAMES))})[{{ \t].*$",
                          re.MULTILINE)


class PageTooLarge(ValueError):
    """The page is longer than MAX_PAGE_BYTES: it is refused, not truncated (a cut page parses wrongly)."""

    def __init__(self, size: int | None):
        self.size = size
        said = f"{size} bytes" if size is not None else "more"
        super().__init__(f"rank 0's metrics page is {said}, over the {MAX_PAGE_BYTES}-byte limit: not read")


@dataclass(frozen=True)
class Rank0Reading:
    """Rank 0's metrics endpoint at one scrape; every number finite and bounded."""

    timesteps: int
    steps_per_second: float | None = None
    episode_return_mean: float | None = None
    eval_return: float | None = None
    succeeded: bool = False
    last_checkpoint_time: float | None = None  # POSIX seconds; None before the first checkpoint
    checkpoints_skipped: int = 0  # newer checkpoints rank 0 could not use when it started
    resumed_timesteps: int | None = None  # of the checkpoint rank 0 resumed from; 0: none found; None: not yet said
    checkpoint_save_seconds: float | None = None  # how long rank 0's last checkpoint took to write


def _bounded(value: float | None, low: float, high: float) -> float | None:
    return value if value is not None and math.isfinite(value) and low <= value <= high else None


def parse(page: bytes | str, job: str) -> Rank0Reading | None:
    """Global rank 0's values from a Prometheus text page of job `job`; None without a usable
    step counter. Samples of another job (`rltj` label) or rank are ignored; so are values that
    are not finite or out of range. Raises PageTooLarge, or ValueError for a malformed page."""
    if len(page) > MAX_PAGE_BYTES:
        raise PageTooLarge(len(page))
    text = page.decode("utf-8", errors="replace") if isinstance(page, bytes) else page
    lines = [m.group(0) for m in itertools.islice(_SAMPLE_LINE.finditer(text), MAX_SAMPLE_LINES)]
    values: dict[str, float] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            labels = sample.labels
            if labels.get(metricnames.LABEL_RANK, "0") != "0" or labels.get(metricnames.LABEL_RLTJ, job) != job:
                continue
            values[sample.name] = sample.value
    timesteps = _bounded(values.get(metricnames.ENV_STEPS_TOTAL), 0, MAX_TIMESTEPS)
    if timesteps is None:
        return None
    checkpoint = _bounded(values.get(metricnames.LAST_CHECKPOINT_TIMESTAMP), 0, MAX_TIMESTAMP)
    success = _bounded(values.get(metricnames.SUCCESS), -MAX_GAUGE, MAX_GAUGE)
    resumed = _bounded(values.get(metricnames.RESUMED_TIMESTEPS), 0, MAX_TIMESTEPS)
    return Rank0Reading(
        timesteps=int(timesteps),
        steps_per_second=_bounded(values.get(metricnames.STEPS_PER_SECOND), 0, MAX_GAUGE),
        episode_return_mean=_bounded(values.get(metricnames.EPISODE_RETURN), -MAX_GAUGE, MAX_GAUGE),
        eval_return=_bounded(values.get(metricnames.EVAL_RETURN), -MAX_GAUGE, MAX_GAUGE),
        succeeded=success is not None and success >= 1.0,
        last_checkpoint_time=checkpoint or None,
        checkpoints_skipped=int(_bounded(values.get(metricnames.CHECKPOINTS_SKIPPED), 0, MAX_TIMESTEPS) or 0),
        resumed_timesteps=None if resumed is None else int(resumed),
        checkpoint_save_seconds=_bounded(values.get(metricnames.CHECKPOINT_SAVE_SECONDS), 0, MAX_GAUGE),
    )


def progress_of(previous: lifecycle.Rank0Progress | None, generation: int, reading: Rank0Reading | None, now: float) -> lifecycle.Rank0Progress | None:
    """The lifecycle's view of rank 0; an unreadable endpoint keeps the last reading
    (a frozen rank 0 freezes its metrics server too, so the stall clock keeps running)."""
    if reading is None:
        return previous if previous is not None and previous.generation == generation else None
    return lifecycle.next_progress(
        previous, generation, reading.timesteps, now,
        succeeded=reading.succeeded,
        steps_per_second=reading.steps_per_second,
        episode_return_mean=reading.episode_return_mean,
        eval_return=reading.eval_return,
    )
