"""The operator's request budget, in the real operator: with --kube-api-burst 2 and --kube-api-qps 5 a gang of six
is still created whole, its requests paced (the waits counted on /metrics); the default budget lets it through unpaced."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)

THROTTLED = 'kuberl_operator_api_throttled_seconds_total'


def throttled(op: Operator) -> float:
    return sum(s.value for f in text_string_to_metric_families(op.metrics()) for s in f.samples if s.name == THROTTLED)


@pytest.mark.parametrize(('budget', 'paced'), [(('--kube-api-qps', '5', '--kube-api-burst', '2'), True), ((), False)],
                         ids=['qps-5-burst-2', 'default'])
def test_a_gang_is_created_whole_within_the_request_budget(standin, rest, tmp_path, budget, paced):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, *budget).start()
    try:
        create_job(rest, 'paced', workers=6)
        wait_for(lambda: len(pods(standin, 'paced')) == 6, what='the six pods')
        # ConfigMap, PVC, NetworkPolicy, Service, six pods, status writes: at 5 a second after the first 2, over a second of waits
        assert (throttled(op) > 1.0) if paced else throttled(op) == 0
    finally:
        op.stop()
