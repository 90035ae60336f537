"""The operator's one line when RBAC refuses kopf's own list or watch: what to grant, to whom, where."""
import pytest
from kuberl.operator.config import (
    WatchedNamespaces,
    namespace_refusal_line,
    rbac_refusal_line,
    refused_namespace,
)

SA = 'system:serviceaccount:kuberl-system:kuberl-operator'


@pytest.mark.parametrize(('message', 'says'), [
    ((f'rltrainingjobs.kuberl.dev is forbidden: User "{SA}" cannot watch resource "rltrainingjobs" in API group "kuberl.dev"'
     ' at the cluster scope'),
     ['to watch rltrainingjobs.kuberl.dev at the cluster scope', ('grant verb "watch" on resource "rltrainingjobs" in API '
      'group "kuberl.dev" to ServiceAccount kuberl-system/kuberl-operator in the ClusterRole bound to it')]),
    (f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in the namespace "team"',
     ['to list pods in namespace "team"', ('on resource "pods" in the core API group ("") to ServiceAccount '
      'kuberl-system/kuberl-operator in the Role in namespace "team" bound to it')]),
    (('clusterkopfpeerings.kopf.dev "kuberl" is forbidden: User "alice" cannot patch resource "clusterkopfpeerings" in API '
     'group "kopf.dev" at the cluster scope'), ['to patch clusterkopfpeerings.kopf.dev', 'to user "alice" in the ClusterRole']),
    ('pods is forbidden: unable to create new content in namespace team because it is being terminated',
     ['(403: pods is forbidden: unable to create', 'the operator exits']),
])
def test_the_line_names_the_verb_the_resource_the_subject_and_the_role(message, says):
    line = rbac_refusal_line(message)
    assert '\n' not in line
    for words in says:
        assert words in line, line


REFUSED_IN_B = f'pods is forbidden: User "{SA}" cannot watch resource "pods" in API group "" in the namespace "team-b"'
REFUSED_CLUSTER = f'pods is forbidden: User "{SA}" cannot watch resource "pods" in API group "" at the cluster scope'


def test_one_refused_namespace_leaves_the_others_served_until_it_is_granted():
    watched = WatchedNamespaces(('team-a', 'team-b', 'team-c'))
    assert watched.refuse(refused_namespace(REFUSED_IN_B), REFUSED_IN_B)
    assert watched.served() == ('team-a', 'team-c')
    watched.grant('team-b')
    assert watched.served() == ('team-a', 'team-b', 'team-c') and not watched.refused


@pytest.mark.parametrize(('watched', 'message'), [
    ((), REFUSED_IN_B),  # cluster-wide: kopf's one watch refused, nothing else to serve
    (('team-a', 'team-b'), REFUSED_CLUSTER),  # not a namespace's grant
    (('team-a', 'team-c'), REFUSED_IN_B),  # a namespace the operator does not watch
    (('team-b',), REFUSED_IN_B),  # the last one served
])
def test_the_operator_exits_when_nothing_would_be_served_or_the_refusal_is_not_a_watched_namespaces(watched, message):
    namespaces = WatchedNamespaces(watched)
    assert not namespaces.refuse(refused_namespace(message), message)
    assert namespaces.served() == watched


def test_the_namespace_line_names_the_grant_and_the_namespaces_still_served():
    line = namespace_refusal_line(REFUSED_IN_B, ('team-a', 'team-c'), 10)
    assert '\n' not in line
    for words in ('to watch pods in namespace "team-b": its jobs there are not reconciled',
                  'in the Role in namespace "team-b" bound to it', 'goes on serving team-a, team-c',
                  'checks namespace "team-b" again every 10s'):
        assert words in line, line
