"""Each job's NetworkPolicy admits the namespace the operator really runs in (the chart's
downward-API KUBERL_POD_NAMESPACE) and Prometheus' (--monitoring-namespace); a policy an
operator installed elsewhere wrote is corrected when the new operator starts, running jobs included."""
from kuberl.core import contract, names
from kuberl.operator.kubeapi import API_CALLS

from tests.operator.operatorkit import (
    NS,
    TRAINER_IMAGE,
    Operator,
    create_job,
    running_job,
    start_gang,
    wait_for,
)

POLICY = ('networking.k8s.io', 'networkpolicies')


def scrapers(standin, job: str) -> list[str]:
    """The namespaces the job's policy admits to the metrics ports."""
    policy = standin.store.find(*POLICY, NS, names.networkpolicy_name(job))
    if policy is None:
        return []
    metrics_rule = policy['spec']['ingress'][1]
    return [peer['namespaceSelector']['matchLabels']['kubernetes.io/metadata.name'] for peer in metrics_rule['from']]


def test_the_policy_admits_the_operators_own_namespace_and_prometheus(standin, rest, tmp_path):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--monitoring-namespace', 'observability',
                  '--monitoring-pod-labels', 'app.kubernetes.io/name=prometheus,prometheus=k8s',
                  '--operator-pod-labels', 'app.kubernetes.io/instance=kuberl,app.kubernetes.io/component=operator',
                  env={contract.ENV_OPERATOR_POD_NAMESPACE: 'ops'}).start()
    try:
        create_job(rest, 'fenced', workers=2)
        start_gang(standin, 'fenced', 2)
        assert wait_for(lambda: scrapers(standin, 'fenced')) == ['ops', 'observability']
        policy = standin.store.find(*POLICY, NS, names.networkpolicy_name('fenced'))
        assert policy['spec']['ingress'][0] == {'from': [{'podSelector': {'matchLabels': {names.LABEL_JOB: 'fenced'}}}]}
        # of Prometheus' namespace, its pods only; of the operator's, its own (its scrapes of rank 0)
        assert [peer.get('podSelector') for peer in policy['spec']['ingress'][1]['from']] == [
            {'matchLabels': {'app.kubernetes.io/instance': 'kuberl', 'app.kubernetes.io/component': 'operator'}},
            {'matchLabels': {'app.kubernetes.io/name': 'prometheus', 'prometheus': 'k8s'}}]
    finally:
        op.stop()


def test_a_running_jobs_policy_from_an_operator_in_another_namespace_is_corrected_on_restart(standin, rest, tmp_path):
    first = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE).start()  # defaults: kuberl-system, monitoring
    try:
        running_job(standin, rest, 'moved', 2)
        assert scrapers(standin, 'moved') == ['kuberl-system', 'monitoring']
    finally:
        first.stop()
    uid = standin.store.find(*POLICY, NS, names.networkpolicy_name('moved'))['metadata']['ownerReferences'][0]['uid']

    second = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--monitoring-namespace', '',
                      env={contract.ENV_OPERATOR_POD_NAMESPACE: 'platform'}).start()
    try:
        wait_for(lambda: scrapers(standin, 'moved') == ['platform'], what='the policy to admit the new operator only')
        policy = standin.store.find(*POLICY, NS, names.networkpolicy_name('moved'))
        assert policy['metadata']['ownerReferences'][0]['uid'] == uid, 'patched in place, never replaced'
        patches = sum(n for c, n in standin.calls.items() if c.agent == 'kopf' and c.verb == 'patch' and c.resource == 'networkpolicies')
        assert patches == 1, 'one patch, then the policy is left alone'
    finally:
        second.stop()
    made = {(c.verb, c.group, c.resource, c.subresource) for c in standin.calls if c.agent == 'kopf'}
    assert made <= API_CALLS, sorted(made - API_CALLS)
