"""The stand-in's authentication, when tokens are configured, answers as kube-apiserver's does
(staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go): a bearer token no
authenticator accepts gets 401 `Unauthorized`; no credentials at all is system:anonymous, who may
read only system:public-info-viewer's paths and gets 403 Forbidden elsewhere."""
import pathlib

import pytest

from tests.support.apiserver import StandinServer
from tests.support.rest import Rest

PODS = '/api/v1/namespaces/default/pods'


@pytest.fixture
def guarded(tmp_path: pathlib.Path):
    with StandinServer(workdir=tmp_path, tokens={'good'}) as server:
        yield server


def test_an_accepted_token_is_served(guarded):
    assert Rest(guarded.url, token='good').get(PODS).status == 200


def test_a_rejected_token_is_401_even_on_public_paths(guarded):
    for path in (PODS, '/healthz'):
        refused = Rest(guarded.url, token='expired').get(path)
        assert refused.status == 401, path
        assert refused.body == {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                                'message': 'Unauthorized', 'reason': 'Unauthorized', 'code': 401}
    assert guarded.handler.unauthorized == 2
    assert not guarded.calls, 'a refused request never reaches authorization, nor the call log'


def test_no_credentials_is_anonymous_who_reads_only_public_info(guarded):
    anonymous = Rest(guarded.url)
    assert anonymous.get('/healthz').status == 200 and anonymous.get('/version').status == 200
    listed = anonymous.get(PODS)
    assert listed.status == 403 and listed.body['reason'] == 'Forbidden'
    assert listed.message == 'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in the namespace "default"'
    assert anonymous.get('/apis').message == 'forbidden: User "system:anonymous" cannot get path "/apis"'


def test_without_tokens_every_request_is_trusted(tmp_path):
    with StandinServer(workdir=tmp_path) as server:
        assert Rest(server.url).get(PODS).status == 200
        assert Rest(server.url, token='anything').get(PODS).status == 200
