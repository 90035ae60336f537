"""Run the API stand-in (and optionally a local node) by hand: `python -m tests.support --crd manifests/crd.yaml`.

Prints the kubeconfig path; point kubectl or `kuberl operator` at it. Ctrl-C stops everything.
"""
import argparse
import pathlib
import signal
import tempfile
import threading

from tests.support.apiserver import StandinServer
from tests.support.localnode import LocalNode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--port', type=int, default=None, help='listen on 127.0.0.1:PORT (default: a free port)')
    parser.add_argument('--crd', action='append', default=[], help='CRD YAML to install (repeatable)')
    parser.add_argument('--workdir', default=None, help='kubeconfig and local node files (default: a temp dir)')
    parser.add_argument('--node', action='store_true', help='also run a local node that starts bound pods as processes')
    args = parser.parse_args()
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix='standin-'))
    workdir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with StandinServer(args.port, workdir=workdir) as server:
        for crd in args.crd:
            server.apply_crd(crd)
        node = LocalNode(server.url, workdir / 'node', image_pull_failure=server.store.hooks.image_pull_failure) if args.node else None
        if node:
            node.start()
        print(f'API stand-in at {server.url}; KUBECONFIG={server.kubeconfig}', flush=True)
        stop.wait()
        if node:
            node.stop()


if __name__ == '__main__':
    main()
