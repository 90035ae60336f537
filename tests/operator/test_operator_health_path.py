"""The liveness endpoint on the path the chart's probe asks for (operator.health.path -> --health-path):
kopf serves one route, so a probe on any other path fails and the kubelet restarts a healthy operator."""
import urllib.error
import urllib.request

import pytest

from tests.operator.operatorkit import Operator


def test_the_liveness_endpoint_answers_on_the_path_given_and_only_there(standin, tmp_path):
    operator = Operator(standin, tmp_path, '--health-path', '/livez').start()  # start() waits for /livez to answer 200
    try:
        with pytest.raises(urllib.error.HTTPError) as elsewhere:
            urllib.request.urlopen(f'http://127.0.0.1:{operator.health_port}/healthz', timeout=2)
        assert elsewhere.value.code == 404
    finally:
        operator.stop()
