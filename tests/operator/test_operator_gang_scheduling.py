"""Gang scheduling objects through the real operator: Kueue's pod group, Volcano's PodGroup."""
from kuberl import names

from tests.operator.operatorkit import (
    NS,
    create_job,
    operator,  # noqa: F401 — fixture
    pods,
    start_gang,
    terminated,
    wait_for,
    wait_phase,
)

VOLCANO_PODGROUP_CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'podgroups.scheduling.volcano.sh'},
    'spec': {'group': 'scheduling.volcano.sh', 'scope': 'Namespaced',
             'names': {'kind': 'PodGroup', 'plural': 'podgroups', 'singular': 'podgroup', 'listKind': 'PodGroupList'},
             'versions': [{'name': 'v1beta1', 'served': True, 'storage': True,
                           'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}]},
}


def test_kueue_pod_group_labels_and_the_group_marked_finished_at_the_end(standin, rest, operator):  # noqa: F811
    create_job(rest, 'queued', workers=2, queueName='team-a')
    gang = start_gang(standin, 'queued', 2)
    for pod in gang:
        assert pod['metadata']['labels'][names.KUEUE_QUEUE_NAME] == 'team-a'
        assert pod['metadata']['labels'][names.KUEUE_POD_GROUP_NAME] == 'queued-gang'
        assert pod['metadata']['annotations'][names.KUEUE_POD_GROUP_TOTAL_COUNT] == '2'
        assert names.KUEUE_RETRIABLE_IN_GROUP not in pod['metadata']['annotations']
    wait_phase(rest, 'queued', 'Running')
    for pod in gang:
        terminated(standin, pod, 0, 'Succeeded: budget spent')
    wait_phase(rest, 'queued', 'Succeeded')
    wait_for(lambda: all(p['metadata']['annotations'].get(names.KUEUE_RETRIABLE_IN_GROUP) == 'false' for p in pods(standin, 'queued')),
             what='the pod group to be marked finished for Kueue')


def test_volcano_gets_an_owned_podgroup_for_the_whole_gang(standin, rest, operator):  # noqa: F811
    standin.apply_crd(VOLCANO_PODGROUP_CRD)
    uid = create_job(rest, 'volc', workers=3, schedulerName='volcano', priorityClassName='high')['metadata']['uid']
    gang = start_gang(standin, 'volc', 3)
    group = standin.store.find('scheduling.volcano.sh', 'podgroups', NS, 'volc-gang')
    assert group['spec'] == {'minMember': 3, 'priorityClassName': 'high'}
    assert group['metadata']['ownerReferences'][0]['uid'] == uid
    for pod in gang:
        assert pod['spec']['schedulerName'] == 'volcano'
        assert pod['spec']['priorityClassName'] == 'high'
        assert pod['metadata']['annotations'][names.VOLCANO_GROUP_NAME] == 'volc-gang'
