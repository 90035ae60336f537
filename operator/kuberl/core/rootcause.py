"""Why a torchrun pod failed, in one line: the failing rank and its child's exception.

torch's launcher ends a failed run with a "Root Cause (first observed failure)" block naming the
global rank, local rank and exit code of the first child that failed, and, unless that child's
entrypoint used `@record`, nothing more ("traceback : To enable traceback see: ..."). The child's
exception is further up the log: once a process group exists, torch prefixes every line of an
uncaught exception's traceback with `[rankN]:` (distributed_c10d's excepthook), so its last
`[rankN]:` line is the exception itself. Pure: text in, text out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import safetext

ROOT_CAUSE = "Root Cause (first observed failure):"
LINE_LIMIT = 300  # characters of the exception line kept: the status message is bounded as a whole
_FIELD = re.compile(r"^\s*(rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
# matched at the field's start, never searched: a search from each digit of a field of digits is quadratic in it
_RANK = re.compile(r"(-?\d{1,10}) \(local_rank: (-?\d{1,10})\)")
_EXIT = re.compile(r"(-?\d+)")


@dataclass(frozen=True)
class Failure:
    rank: int
    local_rank: int
    exit_code: int | None
    exception: str | None  # the child's last `[rankN]:` line, or its error file's message


def _bounded(line: str) -> str:
    line = safetext.one_line(line.strip())  # pod-originated: escaped before it is cut
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 1] + "…"


def exception_line(text: str, rank: int) -> str | None:
    """The last line torch's excepthook wrote for `rank` (its exception), without the prefix."""
    prefix = f"[rank{rank}]:"
    for line in reversed(text.split("\n")):  # lines as a log has them: \r is a character of one
        if line.startswith(prefix):
            body = line[len(prefix):].strip()
            if body and not set(body) <= set("^~ "):  # not the caret line under a frame
                return _bounded(body)
    return None


# An exception's last line, or the interpreter refusing to start the script (no exception is raised then).
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))(?::|$)"
                        r"|^\S*python[\d.]*: (?:can't open file|No module named|Error while finding module)")
_LAUNCHER_REPORT = "failed (exitcode:"  # torchrun's own log line once a child failed: its traceback follows


def unprefixed_exception(text: str) -> str | None:
    """The last exception line of a child that failed before its process group existed (no `[rankN]:`
    prefix yet: `torch.cuda.set_device` before `init_process_group`), above torchrun's own report;
    marked as such, since with several processes per pod it may be another rank's."""
    report = text.rfind(_LAUNCHER_REPORT)
    before = text[:report] if report >= 0 else ""
    for line in reversed(before.split("\n")):
        if _EXCEPTION.match(line):
            return _bounded(line) + " (the last exception above torchrun's report; no [rankN]: line)"
    return None


def parse(text: str) -> Failure | None:
    """The root cause torchrun printed at the end of `text` (a log tail), with the rank's exception line
    when the text holds it; None when the text has no root-cause block."""
    at = text.rfind(ROOT_CAUSE)
    if at < 0:
        return None
    fields: dict[str, str] = {}
    traceback: list[str] = []  # the traceback field and the lines that continue it, up to the block's end
    for line in text[at + len(ROOT_CAUSE):].split("\n"):
        if line.startswith("====="):
            break
        match = _FIELD.match(line)
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2).strip()
            if match.group(1) == "traceback":
                traceback = [match.group(2)]
        elif traceback and line.strip():
            traceback.append(line)
    rank = _RANK.match(fields.get("rank", ""))
    if rank is None:
        return None
    code = _EXIT.match(fields.get("exitcode", ""))
    global_rank = int(rank.group(1))
    exception = exception_line(text[:at], global_rank) or unprefixed_exception(text[:at])
    if exception is None and traceback and not traceback[0].startswith(("To enable traceback", "Signal ")):
        exception = _bounded(traceback[-1])  # a child that used @record: its error file's traceback ends in it
    return Failure(global_rank, int(rank.group(2)), int(code.group(1)) if code else None, exception)


def describe(text: str) -> str | None:
    """One line for a failed torchrun pod: global rank, local rank, exit code and the exception;
    None when `text` holds no root cause."""
    failure = parse(text)
    if failure is None:
        return None
    code = f", exit code {failure.exit_code}" if failure.exit_code is not None else ""
    head = f"torchrun: global rank {failure.rank} (local rank {failure.local_rank}) failed first{code}"
    if failure.exception:
        return f"{head}: {failure.exception}"
    return (f"{head}; no exception line in the log's end (a kubelet keeps its last 2 KiB):"
            f" kubectl logs POD | grep '^\\[rank{failure.rank}\\]:' | tail -1")


# torch's NCCL watchdog, when a collective outlives its process group's timeout: WorkNCCL::checkTimeout
# (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) logs "<prefix>Watchdog caught collective operation timeout:
# WorkNCCL(SeqNum=N, OpType=OP, ..., Timeout(ms)=T) ran for M milliseconds before timing out.", where the prefix ends
# in "Rank R] ", and the watchdog then takes the process down with SIGABRT (TORCH_NCCL_ASYNC_ERROR_HANDLING's
# default), as it does on an NCCL error (a peer's process gone): no Python exception and no stated reason, only that
# line, std::terminate's report of the exception and its frames, and exit 134.
_WATCHDOG = re.compile(r"Rank (\d{1,7})\] Watchdog caught collective operation timeout: WorkNCCL\(([^\n]{0,400}?)\)"
                       r" ran for (\d{1,15}) milliseconds")
_WORK_FIELD = re.compile(r"(SeqNum|OpType|Timeout\(ms\))=(\w{1,32})")
# The watchdog's exception as the end of the log has it once the line itself is further up: std::terminate's what()
# and the "raised from" line above each block of frames, naming the watchdog's own source file.
_WATCHDOG_ENDING = re.compile(r"Process group watchdog thread terminated with exception"
                              r"|Exception raised from \w{1,64} at \S{0,200}ProcessGroupNCCL\.cpp")
_WATCHDOG_KEY = -3  # where remember() keeps the last watchdog line (ranks are 0 and up; -1 and -2 are taken)


@dataclass(frozen=True)
class WatchdogAbort:
    """NCCL's watchdog took a rank down. With `rank` None only its ending was in the text, not what it caught."""

    rank: int | None
    op: str | None = None  # ALLREDUCE, BROADCAST, ...
    seq: str | None = None  # the process group's count of collectives: ranks that ran different numbers diverged
    timeout_ms: int | None = None
    ran_ms: int | None = None


def nccl_watchdog(text: str | None) -> WatchdogAbort | None:
    """NCCL's watchdog ending a rank in `text` (a log or its tail), or None when it did not."""
    if not text:
        return None
    found = None
    for found in _WATCHDOG.finditer(text):  # the last one: each rank of a pod logs its own
        pass
    if found is None:
        return WatchdogAbort(None) if _WATCHDOG_ENDING.search(text) else None
    fields = dict(_WORK_FIELD.findall(found.group(2)))
    timeout = fields.get("Timeout(ms)", "")
    return WatchdogAbort(int(found.group(1)), fields.get("OpType"), fields.get("SeqNum"),
                         int(timeout) if timeout.isdigit() else None, int(found.group(3)))


def describe_watchdog(abort: WatchdogAbort) -> str:
    """One line for a rank NCCL's watchdog took down: which collective waited, for how long, and what that means."""
    if abort.rank is None:
        return ("NCCL's watchdog took this rank down (SIGABRT): a collective timed out or NCCL failed, waiting on a peer"
                " (what it caught is above the log's end: kubectl logs POD | grep -m1 -e 'Watchdog caught' -e 'NCCL error')")
    op = safetext.one_line(abort.op) if abort.op else "collective"
    seq = f" (collective #{safetext.one_line(abort.seq)})" if abort.seq else ""
    waited = f" waited {abort.ran_ms / 1000:.1f} s" if abort.ran_ms is not None else " waited"
    limit = f" of {abort.timeout_ms / 1000:g} s" if abort.timeout_ms is not None else ""
    return (f"NCCL's watchdog took rank {abort.rank} down (SIGABRT): its {op}{seq}{waited}, past its process group's"
            f" timeout{limit}, for a peer that never joined it: another rank hung or died first, or the network between"
            " them stalled (kuberl's trainer takes that timeout from runPolicy.collectiveTimeoutSeconds)")


_PREFIX = re.compile(r"\[rank(\d{1,7})\]:")
MAX_RANKS_REMEMBERED = 256  # a pod runs at most names.MAX_PROCS_PER_WORKER ranks; bounded whatever it prints


def remember(line: str, last: dict[int, str]) -> None:
    """Keep `line` as its rank's last `[rankN]:` line, and an unprefixed exception line under -1 (the local
    node's log reader calls this per line)."""
    at = line.rfind("Watchdog caught")  # the line's last one alone: kuberl run reads every line, whatever it says
    if at >= 0 and _WATCHDOG.search(line[max(0, at - 16):at + 600]):
        last[_WATCHDOG_KEY] = line[:LINE_LIMIT * 4]
        return
    if _LAUNCHER_REPORT in line:
        last.setdefault(-2, "")  # torchrun's report: what follows is torchrun's own traceback
    if _EXCEPTION.match(line):
        if -2 not in last:
            last[-1] = line[:LINE_LIMIT * 4]
        return
    match = _PREFIX.match(line)
    if match and exception_line(line, int(match.group(1))) is not None:
        rank = int(match.group(1))
        if rank in last or len(last) < MAX_RANKS_REMEMBERED:
            last[rank] = line[:LINE_LIMIT * 4]


def completed(tail: str, last: dict[int, str]) -> str:
    """The log tail with the failing rank's last `[rankN]:` line put first when the tail names the rank
    in torchrun's root cause but has lost the line above its last 2 KiB (kuberl run reads every line);
    with no such line, the last unprefixed exception line, put just above torchrun's report (the
    tail's first line may be a cut piece of it)."""
    if _WATCHDOG_KEY in last and not _WATCHDOG.search(tail):
        tail = last[_WATCHDOG_KEY] + "\n" + tail  # the collective and its timeout, above the frames the tail kept
    failure = parse(tail)
    if failure is None or exception_line(tail, failure.rank) is not None:
        return tail
    if failure.rank in last:
        return last[failure.rank] + "\n" + tail
    report = tail.rfind(_LAUNCHER_REPORT)
    if -1 not in last or report < 0:
        return tail
    at = tail.rfind("\n", 0, report) + 1
    return tail[:at] + last[-1] + "\n" + tail[at:]
