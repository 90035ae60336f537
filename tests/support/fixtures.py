"""The stand-in fixtures, shared by its own tests (tests/support) and the operator tier (tests/operator):
the API stand-in with kuberl's CRD, clients pointed at it, and a local node."""
import pathlib

import pytest

from tests.support.apiserver import StandinServer
from tests.support.localnode import LocalNode
from tests.support.rest import Rest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / 'manifests' / 'crd.yaml'


@pytest.fixture
def standin(tmp_path: pathlib.Path):
    """The API stand-in on a free 127.0.0.1 port with manifests/crd.yaml applied.

    `standin.url`, `standin.kubeconfig` (a file), `standin.store` (hooks), `standin.calls` (API call log).
    """
    with StandinServer(workdir=tmp_path) as server:
        server.apply_crd(CRD)
        yield server


@pytest.fixture
def rest(standin: StandinServer) -> Rest:
    return Rest(standin.url)


@pytest.fixture
def kube_api(standin: StandinServer):
    """A `kubernetes.client.ApiClient` configured from the stand-in's kubeconfig."""
    import kubernetes
    client = kubernetes.config.new_client_from_config(config_file=str(standin.kubeconfig))
    yield client
    client.close()


@pytest.fixture
def local_node(standin: StandinServer, tmp_path: pathlib.Path):
    """A kubelet stand-in for node `local-node` (where the stand-in's scheduler binds pods), running them as processes.

    Shares `standin.store.hooks.image_pull_failure`; `local_node.lose()` simulates node loss; stopping kills every process.
    """
    with LocalNode(standin.url, tmp_path / 'node', image_pull_failure=standin.store.hooks.image_pull_failure) as node:
        yield node
