"""The operator's one line when RBAC refuses kopf's own list or watch: what to grant, to whom, where."""
import pytest
from kuberl.operator.config import rbac_refusal_line

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
