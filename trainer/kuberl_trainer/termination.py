"""The pod's termination log, both ways: the reason a rank states when it ends
(`write_reason`), and what the pod's launcher reads back from it (`stated`)."""

from __future__ import annotations

import fcntl
import os
import sys

from kuberl.core import contract, names

from .paths import host_path

KUBELET_KEEPS = 4096  # bytes of a termination message the kubelet keeps


def said_in_the_log(reason: str, local_rank: int) -> bool:
    """Whether a rank's ending goes into the pod's log too: every rank's failure, but a clean
    end once per pod (its local rank 0), not once per GPU with the same words."""
    return local_rank == 0 or reason not in (contract.REASON_SUCCEEDED, contract.REASON_STOPPED)


def write_reason(reason: str, message: str) -> None:
    """One line for the pod's termination log (and the log itself, said_in_the_log)."""
    # unmarked: a log line states nothing. One write, so the ranks of one pod, sharing its log, cannot splice
    # their lines together (print writes the text and its newline apart)
    local_rank = os.environ.get(contract.ENV_LOCAL_RANK, "0")
    said = said_in_the_log(reason, int(local_rank) if local_rank.isdigit() else 0)
    if said:
        sys.stderr.write(contract.stated_line(reason, message) + "\n")
        sys.stderr.flush()
    path = host_path(names.TERMINATION_LOG)
    if os.path.lexists(path) and not os.path.isfile(path):
        return  # not a file a rank could have written: reading a FIFO would block
    try:
        if os.environ.get(contract.ENV_FS_ROOT):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        # a clean end of another local rank leaves what is stated already (local rank 0's words, which name the
        # checkpoint, or a rank's failure), whichever rank ends last. The read and the write under one lock: local
        # rank 1 reading nothing, rank 0 writing, then rank 1 writing replaced rank 0's words (a CI run saw it)
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            if not said:
                f.seek(0)
                if contract.stated_reason(f.read(KUBELET_KEEPS)):
                    return
            f.truncate(0)
            f.write(contract.termination_line(reason, message) + "\n")  # "a+" writes at the end: 0 once truncated
    except OSError:
        pass  # outside a pod there may be no termination log


def stated() -> str | None:
    """The reason the pod's ranks last stated (contract.TRAINER_REASONS), or None."""
    path = host_path(names.TERMINATION_LOG)
    if not os.path.isfile(path):  # none written, or not a file a rank could have written (a FIFO would block)
        return None
    try:
        with open(path) as f:
            found = contract.stated_reason(f.read(KUBELET_KEEPS))
    except OSError:
        return None
    return found[0] if found else None
