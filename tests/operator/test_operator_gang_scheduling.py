"""Gang scheduling objects through the real operator: Kueue's pod group, Volcano's and coscheduling's PodGroups."""
from kuberl.core import names

from tests.operator.operatorkit import (
    NS,
    create_job,
    events,
    pods,
    start_gang,
    terminated,
    wait_for,
    wait_phase,
)


def podgroup_crd(group: str, version: str) -> dict:
    return {
        'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'podgroups.{group}'},
        'spec': {'group': group, 'scope': 'Namespaced',
                 'names': {'kind': 'PodGroup', 'plural': 'podgroups', 'singular': 'podgroup', 'listKind': 'PodGroupList'},
                 'versions': [{'name': version, 'served': True, 'storage': True,
                               'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}]},
    }




def test_kueue_pod_group_labels_and_the_group_marked_finished_at_the_end(standin, rest, operator):
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


def test_rbac_refusing_the_kueue_mark_is_said_on_the_finished_job_and_asked_again(standin, rest, operator):
    """The ClusterRole lost `patch` on pods: the finished job's group could not be marked, and the operator's
    log held a traceback (inside kopf's daemon) every 5 s, the job nothing. Now its phase stands, a Warning
    and one log line say what was refused and what it costs, and the mark is made once RBAC allows it."""
    create_job(rest, 'unmarked', workers=2, queueName='team-a')
    gang = start_gang(standin, 'unmarked', 2)
    wait_phase(rest, 'unmarked', 'Running')
    standin.handler.denied.add(('patch', 'pods'))
    for pod in gang:
        terminated(standin, pod, 0, 'Succeeded: budget spent')
    wait_phase(rest, 'unmarked', 'Succeeded')
    [warning] = wait_for(lambda: [e for e in events(rest, 'unmarked') if e['reason'] == 'OperatorForbidden'],
                         what='an OperatorForbidden warning')
    assert warning['type'] == 'Warning' and 'cannot patch resource "pods"' in warning['message'], warning
    assert 'so Kueue keeps its quota until then (asked again every 1s' in warning['message'], warning
    said = [line for line in operator.log().splitlines() if 'Kueue keeps its quota' in line]
    assert len(said) == 1 and 'job default/unmarked: pods "unmarked-' in said[0], said
    assert 'Traceback' not in operator.log(), operator.log()[-3000:]

    standin.handler.denied.clear()  # the RBAC is mended
    wait_for(lambda: all(p['metadata']['annotations'].get(names.KUEUE_RETRIABLE_IN_GROUP) == 'false'
                         for p in pods(standin, 'unmarked')), what='the pod group marked once RBAC allows it')
    assert wait_phase(rest, 'unmarked', 'Succeeded')


def test_volcano_gets_an_owned_podgroup_for_the_whole_gang(standin, rest, operator):
    standin.apply_crd(podgroup_crd('scheduling.volcano.sh', 'v1beta1'))
    # The Priority admission plugin refuses a pod whose class does not exist (as a real API server does).
    high = {'apiVersion': 'scheduling.k8s.io/v1', 'kind': 'PriorityClass', 'metadata': {'name': 'high'}, 'value': 1000}
    assert rest.post('/apis/scheduling.k8s.io/v1/priorityclasses', high).status == 201
    uid = create_job(rest, 'volc', workers=3, schedulerName='volcano', priorityClassName='high')['metadata']['uid']
    gang = start_gang(standin, 'volc', 3)
    group = standin.store.find('scheduling.volcano.sh', 'podgroups', NS, 'volc-gang')
    assert group['spec'] == {'minMember': 3, 'priorityClassName': 'high'}
    assert group['metadata']['ownerReferences'][0]['uid'] == uid
    for pod in gang:
        assert pod['spec']['schedulerName'] == 'volcano'
        assert pod['spec']['priorityClassName'] == 'high'
        assert pod['metadata']['annotations'][names.VOLCANO_GROUP_NAME] == 'volc-gang'


def test_coscheduling_gets_its_podgroup_and_a_users_claim_is_mounted_never_created(standin, rest, operator):
    standin.apply_crd(podgroup_crd('scheduling.x-k8s.io', 'v1alpha1'))
    create_job(rest, 'cosched', workers=2, schedulerName='scheduler-plugins-scheduler', checkpoint={'claimName': 'shared-data'},
               runPolicy={'startupTimeoutSeconds': 120})
    gang = start_gang(standin, 'cosched', 2)
    group = standin.store.find('scheduling.x-k8s.io', 'podgroups', NS, 'cosched-gang')
    assert group['spec'] == {'minMember': 2, 'scheduleTimeoutSeconds': 120}
    assert all(p['metadata']['labels'][names.COSCHEDULING_POD_GROUP] == 'cosched-gang' for p in gang)
    assert standin.store.find('', 'persistentvolumeclaims', NS, 'cosched-checkpoints') is None
    claims = [v['persistentVolumeClaim']['claimName'] for v in gang[0]['spec']['volumes'] if 'persistentVolumeClaim' in v]
    assert claims == ['shared-data']
