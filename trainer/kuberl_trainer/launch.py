"""`python -m kuberl_trainer.launch <torchrun flags> -m kuberl_trainer`: torch's launcher for a pod of
several processes, its rendezvous store on loopback alone under `kuberl run`.

torchrun's static rendezvous hosts the store in node rank 0's agent, a TCPStore that binds every
interface (`*:MASTER_PORT`) whatever address it is given. Where MASTER_ADDR is a loopback address
(each `kuberl run` pod has its own 127.x), the store's server is started here first, on a socket
bound to that address (distributed.loopback_server), and torchrun's own TCPStore, multi-tenant,
takes the server already running on its port in this process instead of binding another. Anywhere
else this is `python -m torch.distributed.run` with the same arguments.

A SIGTERM (a node drained, a job suspended) reaches torch's launcher, which passes it on to its
ranks, waits for them (TORCH_ELASTIC_SHUTDOWN_TIMEOUT: the pod's grace period) and re-raises it
as a SignalException: a traceback and exit 1, which the operator counted as a failure of the
workload. When the ranks stopped cleanly (rank 0 saved its checkpoint and stated "Stopped" in the
pod's termination log) the pod exits 0 instead, as a pod of one process does; otherwise
128 + the signal, as a process the signal killed. A rank's failure torch's launcher re-raises as a
ChildFailedError, with a traceback of its own and a table of every rank after the ranks' own
errors: here one line says it, and the pod exits 1 as under torch's launcher.
"""

from __future__ import annotations

import os
import signal

# The pod's launch: a SIGTERM/SIGINT that comes while torch is imported (two seconds and more, before
# torch's launcher holds the signals) killed the pod with no checkpoint, where a pod of one process
# stops at its first update with one. It is remembered, in the environment the ranks will inherit
# (torch's launcher copies os.environ when it starts them), so they stop as a one-process pod does.
STOP_REQUESTED = "KUBERL_STOP_REQUESTED"  # kuberl.core.contract.ENV_STOP_REQUESTED, before anything is imported
if __name__ == "__main__":
    def _remember_the_stop(_signum: int, _frame: object) -> None:
        os.environ[STOP_REQUESTED] = "1"

    for _signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_signum, _remember_the_stop)

import contextlib
import logging
import pathlib
import sys
import threading
import time
from datetime import timedelta

from kuberl.core import contract
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import get_args_parser, get_rdzv_endpoint
from torch.distributed.run import main as torchrun

from . import termination
from .distributed import loopback_server

# The agent's store outlives every rendezvous timeout torchrun gives it; only our own client uses this.
STORE_TIMEOUT = timedelta(hours=1)
# torch's launcher logs a warning for a signal and one per rank it passes it on to, with its file
# and line; main() says it once for the pod (a 4-GPU pod's suspend was 5 lines of torch internals)
SIGNAL_RELAY_LOGS = {
    "torch.distributed.elastic.agent.server.api": "Received %s death signal, shutting down workers",
    "torch.distributed.elastic.multiprocessing.api": "Sending process %s closing signal %s",
}


TORCH_SHUTDOWN_TIMEOUT_DEFAULT = 30  # seconds: torch.distributed.launcher.api's default for the variable

# The signals a rank of kuberl's trainer catches; kuberl_trainer.__main__ unblocks them once its handlers are in.
HELD_FOR_RANKS = (signal.SIGTERM, signal.SIGINT)


def hold_signals_for_ranks() -> None:
    """Start the ranks with SIGTERM and SIGINT blocked (a child inherits the mask of the thread that starts
    it, torch's launcher's main thread): one torch passes on while a rank is still in python's own start-up,
    30 to 100 ms before its first line can catch it, waits for that line instead of killing it with no
    checkpoint. This process still takes them: a thread that leaves them unblocked receives them, and
    Python runs the handler in the main thread (within torch's monitor interval, 0.1 s)."""
    threading.Thread(target=threading.Event().wait, name="kuberl-signals", daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD_FOR_RANKS)


def quiet_signal_relay() -> None:
    for logger, template in SIGNAL_RELAY_LOGS.items():
        logging.getLogger(logger).addFilter(lambda record, template=template: record.msg != template)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if problem := shutdown_timeout_problem(os.environ.get(contract.ENV_TORCH_SHUTDOWN_TIMEOUT)):
        termination.write_reason(contract.REASON_CONFIG_ERROR, problem)
        sys.exit(contract.EXIT_CONFIG_ERROR)
    args = get_args_parser().parse_args(argv)
    nodes = str(args.nnodes).split(":")[-1]
    held = None
    if args.rdzv_backend == "static" and args.node_rank == 0 and nodes.isdigit():
        host, _, port = get_rdzv_endpoint(args).rpartition(":")  # where torchrun's agent will host it
        held = loopback_server(host.strip("[]"), port, int(nodes), STORE_TIMEOUT, multi_tenant=True)
    quiet_signal_relay()
    if args.module and args.training_script == "kuberl_trainer":  # only a rank that unblocks them may start with them held
        hold_signals_for_ranks()
    try:
        torchrun(argv)
        if os.environ.get(STOP_REQUESTED):
            print("kuberl launcher: told to stop while starting; the ranks stopped at their first update",
                  file=sys.stderr, flush=True)
    except ChildFailedError as e:
        # each rank printed its own error (a traceback, or its one stated line); torch's launcher then
        # raised this with its own traceback and a table of every rank: one line instead, and exit 1 as it does
        rank, first = e.get_first_failure()
        print(f"kuberl launcher: {len(e.failures)} of {args.nproc_per_node} rank(s) failed; first rank {rank} "
              f"(local rank {first.local_rank}), {how_it_ended(first.exitcode)}", file=sys.stderr, flush=True)
        sys.exit(1)
    except SignalException as e:
        stop_ranks_torch_never_recorded(e.sigval)
        print(f"kuberl launcher: {e.sigval.name} passed on to the ranks; they have exited", file=sys.stderr, flush=True)
        sys.exit(contract.EXIT_OK if termination.stated() == contract.REASON_STOPPED else 128 + int(e.sigval))
    finally:
        if held is not None:
            held[1].close()


def stop_ranks_torch_never_recorded(signum: signal.Signals) -> None:
    """Pass the signal on to every rank still running, and wait for them as torch does for those it passes it to.
    torch's launcher records its ranks only once it has started them all: a signal that comes between the first
    start and that record ends the launcher having passed it to none, and those ranks ran on without it (orphans
    on a laptop; in a pod, killed with it and no checkpoint). Those torch stopped have been reaped: none here."""
    ranks = children_of_this_process()
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    timeout = os.environ.get(contract.ENV_TORCH_SHUTDOWN_TIMEOUT, "").strip()
    deadline = time.monotonic() + (int(timeout) if timeout.isdigit() else TORCH_SHUTDOWN_TIMEOUT_DEFAULT)
    for pid in ranks:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)  # as torch's launcher ends a rank past its shutdown timeout
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.05)


def children_of_this_process() -> list[int]:
    """The processes this one started and has not reaped (Linux's /proc/self/task/*/children)."""
    children = []
    for task in pathlib.Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(pid) for pid in (task / "children").read_text().split()]
    return children


def how_it_ended(exitcode: int) -> str:
    """A rank's end as a person reads it: torch reports a signal's death as a negative exit code."""
    if exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        return f"killed by signal {-exitcode}"
    return f"killed by {name}" + (" (the kernel's OOM killer sends it)" if name == "SIGKILL" else "")


def shutdown_timeout_problem(value: str | None) -> str | None:
    """TORCH_ELASTIC_SHUTDOWN_TIMEOUT as torch's launcher reads it (int(), at least 0): kuberl sets the
    pod's grace period; a spec.template value it cannot read failed every start with a traceback."""
    if value is None or (value.strip().isdigit() and len(value.strip()) <= 12):
        return None  # 12 digits: far past any grace period, yet a deadline time.monotonic() can add
    return (f"spec.template: environment variable {contract.ENV_TORCH_SHUTDOWN_TIMEOUT}={value[:64]!r}: expected "
            "whole seconds, 0 or more (kuberl sets it to runPolicy.terminationGracePeriodSeconds; leave it out)")


if __name__ == "__main__":
    main()
