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
workload. (A rank's failure it re-raises as a ChildFailedError, with a traceback of its own and a
table of every rank: the pod's log says it in one line, and exits 1 as torch's launcher does.) When the ranks stopped cleanly (rank 0 saved its checkpoint and stated "Stopped" in the
pod's termination log) the pod exits 0 instead, as a pod of one process does; otherwise
128 + the signal, as a process the signal killed.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta

from kuberl.core import contract, names
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import get_args_parser, get_rdzv_endpoint
from torch.distributed.run import main as torchrun

from .distributed import loopback_server
from .paths import host_path

# The agent's store outlives every rendezvous timeout torchrun gives it; only our own client uses this.
STORE_TIMEOUT = timedelta(hours=1)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = get_args_parser().parse_args(argv)
    nodes = str(args.nnodes).split(":")[-1]
    held = None
    if args.rdzv_backend == "static" and args.node_rank == 0 and nodes.isdigit():
        host, _, port = get_rdzv_endpoint(args).rpartition(":")  # where torchrun's agent will host it
        held = loopback_server(host.strip("[]"), port, int(nodes), STORE_TIMEOUT, multi_tenant=True)
    try:
        torchrun(argv)
    except ChildFailedError as e:
        # each rank printed its own error (a traceback, or its one stated line); torch's launcher then
        # raised this with its own traceback and a table of every rank: one line instead, and exit 1 as it does
        rank, first = e.get_first_failure()
        print(f"kuberl launcher: {len(e.failures)} of {args.nproc_per_node} rank(s) failed; first rank {rank} "
              f"(local rank {first.local_rank}), {how_it_ended(first.exitcode)}", file=sys.stderr, flush=True)
        sys.exit(1)
    except SignalException as e:
        print(f"kuberl launcher: {e.sigval.name} passed on to the ranks; they have exited", file=sys.stderr, flush=True)
        sys.exit(contract.EXIT_OK if ranks_stopped_cleanly() else 128 + int(e.sigval))
    finally:
        if held is not None:
            held[1].close()


def how_it_ended(exitcode: int) -> str:
    """A rank's end as a person reads it: torch reports a signal's death as a negative exit code."""
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name} (the kernel's OOM killer sends SIGKILL)"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def ranks_stopped_cleanly() -> bool:
    """The pod's termination log states "Stopped": the ranks' last word, written after they saved."""
    path = host_path(names.TERMINATION_LOG)
    if not os.path.isfile(path):  # none written, or not a file the ranks could have written (a FIFO would block)
        return False
    try:
        with open(path) as f:
            stated = contract.stated_reason(f.read(4096))  # as much as the kubelet keeps
    except OSError:
        return False
    return stated is not None and stated[0] == contract.REASON_STOPPED


if __name__ == "__main__":
    main()
