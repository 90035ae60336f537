"""Rank 0's experiment trackers (spec.tracking: MLflow, Weights & Biases), sinks beside the TensorBoard writer fed
from the same progress.jsonl lines: their scalars (tensorboard.scalars, CleanRL's names) against timesteps, and the
episodes that ended between two lines.

What every tracker shares lives here, each service's client in a backend of its own (tracking_mlflow,
tracking_wandb): a call to a tracking service blocks (an HTTP request; clients retry a refused one for minutes), so
nothing runs on the training thread but a queue's put. One thread of its own per tracker imports the client, starts
or resumes the run once the checkpoint volume was read (TrackedRun.start), and sends each line's points. A service that is down or refuses is said once, and that tracker
stops while training goes on; progress.jsonl and TensorBoard still hold every number. At the run's end the trackers
are waited on together while their services answer: until one has sent nothing for SEND_DEADLINE_SECONDS, and
SEND_CAP_SECONDS in all.

One tracked run per kuberl run: each backend keeps its run's id in a record file in the checkpoint directory, so a
gang restart or a `kuberl run` resume logs on into the same run and the curve is one. That directory is the tenant's
volume: a record is read only if it is a regular file, and written to a new file renamed onto its name.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kuberl.core import safetext
from kuberl.core.runrecords import read_regular_file

from .tensorboard import EPISODE_TAGS, EpisodeSample, Renames, scalars

# What rank 0 waits at the end for a sender that gets no answer (a service that hangs or is unreachable), and in all
# for one that does, call after call (a service slowed by load: its run's start, the last lines, the model and the
# run's end took 10 s through a real server on a loaded machine): a stop's grace period is the checkpoint's, and the
# run's end is not held long for a tracking service
SEND_DEADLINE_SECONDS = 10.0
SEND_CAP_SECONDS = 3 * SEND_DEADLINE_SECONDS
# What waits for a slow service, kept until sent; a line past either bound is dropped, said once. Points bound the
# memory (a line carries up to 2,000 episodes' points: 10,000 such lines held about 2 GB); lines bound the count
QUEUED_LINES_MAX = 10_000
QUEUED_POINTS_MAX = 200_000  # about 30 MB of (tag, value, step)
RECORD_MAX_BYTES = 64 * 1024
STOP_POLL_SECONDS = 0.5  # how soon a wait at the run's end sees a stop that came while it waits


@dataclass(frozen=True)
class Points:
    """One progress.jsonl line's scalars and the episodes that ended before it, (tag, value, timesteps) each, at the
    wall time the line was written."""

    values: list[tuple[str, float, int]]
    timestamp_ms: int


@dataclass(frozen=True)
class End:
    """The generation's end: the run's status (FINISHED; KILLED when stopped, to be resumed; FAILED) and the final
    model."""

    status: str
    model: str | None


class Backend(Protocol):
    """One tracking service's client, called from its tracker's sender thread only."""

    name: str  # how its lines start: "MLflow", "W&B"

    def where(self) -> str:
        """The service and run, as said in logs (no credentials)."""

    def connect(self) -> None:
        """Import the client and start the run, or resume the one recorded."""

    def send(self, lines: list[Points]) -> None:
        """The points of the lines queued since the last call."""

    def end(self, end: End) -> None:
        """End the generation's run."""


class TrackedRun:
    """Rank 0's run in one tracking service for one generation: `write` queues a line's points (the training thread's
    only cost), `close` (or `close_all`) ends the generation, waiting for the sender while it makes progress.
    `unusable`: why nothing can be tracked (a missing server), said once at the start instead."""

    def __init__(self, backend: Backend, log: Callable[[str], None] = print, unusable: str | None = None):
        self.backend, self.log = backend, log
        self.queue: queue.Queue[Points | End] = queue.Queue(QUEUED_LINES_MAX)
        self.sender: threading.Thread | None = None
        self.answered_at = 0.0  # monotonic time of the sender's last call the service answered
        self.failed = threading.Event()
        self.said = threading.Lock()  # the one failure said, by whichever thread meets it first
        self.dropped = 0
        self.queued_points = 0  # in the queue, not yet taken by the sender
        self.counting = threading.Lock()  # queued_points: added to by the training thread, taken from by the sender
        self.pending = EpisodeSample()  # finished episodes, sent with the next line's points
        if unusable is not None:
            self.fail(unusable)

    def episodes(self, ended: list[tuple[int, float, int]]) -> None:
        """Finished episodes, (global step, return, length) each, as the TensorBoard writer gets them (Scalars.episodes):
        charts/episodic_return and charts/episodic_length at the step each ended, sent with the next progress line."""
        if not self.failed.is_set():
            self.pending.add(ended)

    def write(self, line: Mapping[str, Any], renames: Renames | None = None) -> None:
        if self.failed.is_set():
            return
        episodes = [(tag, float(value), step) for step, episode_return, length in self.pending.take()
                    for tag, value in zip(EPISODE_TAGS, (episode_return, length), strict=True)]
        points = [*episodes, *((tag, value, int(line["timesteps"])) for tag, value in scalars(line, renames))]
        if not points:
            return
        self.start()
        if not self.enqueue(Points(points, int(time.time() * 1000))):  # a service slower than training
            self.dropped += 1
            if self.dropped == 1:
                self.log(f"{self.backend.name}: {self.queue.qsize()} progress lines ({self.queued_points} points) wait"
                         f" for {self.backend.where()}; later ones are dropped (progress.jsonl and TensorBoard keep them)")

    def start(self) -> None:
        """The sender started, once: the client's import and the run's start overlap training (at the first line, a
        short run's end waited for both within its deadline and, under load, left its lines unsent)."""
        if self.sender is None and not self.failed.is_set():
            self.sender = threading.Thread(target=self.send, name=f"tracking {self.backend.name}", daemon=True)
            self.sender.start()

    def enqueue(self, line: Points) -> bool:
        """`line` queued for the sender, or False where it would pass QUEUED_LINES_MAX or QUEUED_POINTS_MAX."""
        with self.counting:
            if self.queued_points + len(line.values) > QUEUED_POINTS_MAX:
                return False
            try:
                self.queue.put_nowait(line)
            except queue.Full:
                return False
            self.queued_points += len(line.values)
            return True

    def close(self, status: str, model: str | None = None) -> None:
        """End the generation: the run marked `status`, with the final model where the backend keeps one; what is
        not sent by then (close_all) is said once and left."""
        close_all([self], status, model)

    def finish(self, status: str, model: str | None, deadline: float) -> None:
        """The end queued behind the lines still to send (waiting for room until `deadline`, a monotonic time)."""
        if self.sender is None or self.failed.is_set():
            return
        with contextlib.suppress(queue.Full):
            self.queue.put(End(status, model), timeout=max(0.0, deadline - time.monotonic()))

    def wait(self, ended_at: float, cap: float, stop_by: Callable[[], float | None] = lambda: None) -> None:
        """The sender joined while its service answers: until SEND_DEADLINE_SECONDS pass with no call answered since
        `ended_at` or the last one, or `cap`, or `stop_by()` (monotonic times; a stop's, read again as the wait goes,
        so a stop that comes while it waits ends it in time); one still sending then is said once and left (a daemon
        thread)."""
        if self.sender is None or self.failed.is_set():
            return
        while self.sender.is_alive():
            stop = stop_by()
            until = min(max(ended_at, self.answered_at) + SEND_DEADLINE_SECONDS, cap, math.inf if stop is None else stop)
            if time.monotonic() >= until:
                break
            self.sender.join(min(until - time.monotonic(), STOP_POLL_SECONDS))
        if self.sender.is_alive():
            why = ("the stop's grace period ends (spec.runPolicy.terminationGracePeriodSeconds: the process exits before"
                   " its SIGKILL)" if stop_by() is not None and time.monotonic() >= stop_by() else
                   f"{SEND_DEADLINE_SECONDS:.0f} s without an answer, or {SEND_CAP_SECONDS:.0f} s in all: the service is"
                   " slow or unreachable")
            self.fail(f"{self.backend.name}: {self.queue.qsize()} line(s) not sent to {self.backend.where()} by the"
                      f" run's end ({why}): left unsent; progress.jsonl and TensorBoard hold them")

    def fail(self, message: str) -> None:
        """Said once, whichever thread fails first; nothing is sent after it."""
        if self.said.acquire(blocking=False):
            self.failed.set()
            self.log(message)

    def send(self) -> None:
        """The sender thread: the backend connected, then each batch of queued lines (what queued while one was sent
        goes in the next), until End."""
        try:
            self.backend.connect()
            self.answered_at = time.monotonic()
            while True:
                items = [self.queue.get()]
                while not isinstance(items[-1], End) and not self.queue.empty():
                    items.append(self.queue.get_nowait())
                lines = [item for item in items if isinstance(item, Points)]
                with self.counting:
                    self.queued_points -= sum(len(line.values) for line in lines)
                if lines:
                    self.backend.send(lines)
                    self.answered_at = time.monotonic()
                if isinstance(items[-1], End):
                    self.backend.end(items[-1])
                    return
        except Exception as e:  # noqa: BLE001 — whatever the client raises (refused, unreachable, not installed), training goes on
            self.fail(f"{self.backend.name}: not tracked from here on ({self.backend.where()}): {type(e).__name__}:"
                      f" {first_line(e)}; training goes on, progress.jsonl and TensorBoard keep every number")


def close_all(runs: Iterable[TrackedRun], status: str, model: str | None = None,
              stop_by: Callable[[], float | None] = lambda: None) -> None:
    """End every tracker's generation together: each end is queued first, then each sender waited on while its service
    answers (TrackedRun.wait), so two trackers hold the run's end SEND_CAP_SECONDS at most, not that each; and never
    past `stop_by()`, where a stop leaves the process only its grace period (None: no stop)."""
    runs = list(runs)
    ended_at = time.monotonic()
    cap = ended_at + SEND_CAP_SECONDS
    for run in runs:
        stop = stop_by()
        run.finish(status, model, min(ended_at + SEND_DEADLINE_SECONDS, math.inf if stop is None else stop))
    for run in runs:
        run.wait(ended_at, cap, stop_by)


# --- the record of a tracked run, in the checkpoint directory (the tenant's volume) ----------------------------------

def read_record(path: str) -> object:
    """A record's contents, None when it is missing, unreadable or no regular file (a new run is started): the
    checkpoint directory is the tenant's volume, and a FIFO there held the sender thread at open."""
    text = read_regular_file(path, RECORD_MAX_BYTES)
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None


def write_record(path: str, record: Mapping[str, Any]) -> None:
    """A record written to a new file and renamed onto its name: a link left at either name is replaced, never
    written through (it had the record written wherever it pointed)."""
    temp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as f:
        json.dump(dict(record), f)
    os.replace(temp, path)


# a URL's user and password (scheme://user:pass@host), up to the authority's last @ as urlsplit reads it: found by
# their shape, not parsed, so a URI that does not parse (a port past 65535, an unclosed IPv6 bracket) loses them too,
# where urlsplit raised in the sender thread and its traceback was all that was said; and so does one that an
# error message quotes (MLflow's InvalidUrlException quotes the whole URL)
USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")


def without_credentials(uri: str) -> str:
    """`uri` less a user and password in it (https://user:pass@host), wherever a URL in it has them: the form kept
    in a record and said in logs."""
    return USERINFO.sub(r"\1", uri)


def first_line(e: BaseException) -> str:
    """An error's first line for the log: cut, escaped (a server's reply is its own), and less any URL's credentials."""
    text = str(e).strip()
    return safetext.one_line(without_credentials((text.splitlines() or [""])[0][:300]))
