"""`python -m kuberl_trainer.launch <torchrun flags> -m kuberl_trainer`: torch's launcher for a pod of
several processes, its rendezvous store on loopback alone under `kuberl run`.

torchrun's static rendezvous hosts the store in node rank 0's agent, a TCPStore that binds every
interface (`*:MASTER_PORT`) whatever address it is given. Where MASTER_ADDR is a loopback address
(each `kuberl run` pod has its own 127.x), the store's server is started here first, on a socket
bound to that address (distributed.loopback_server), and torchrun's own TCPStore, multi-tenant,
takes the server already running on its port in this process instead of binding another. Anywhere
else this is `python -m torch.distributed.run` with the same arguments.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from torch.distributed.run import get_args_parser, get_rdzv_endpoint
from torch.distributed.run import main as torchrun

from .distributed import loopback_server

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
    finally:
        if held is not None:
            held[1].close()


if __name__ == "__main__":
    main()
