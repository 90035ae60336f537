"""Deleting a CustomResourceDefinition, as the real API server does it: the CRD is Terminating first, its instances
are deleted as a client's delete would delete them (their own finalizers hold them), creates are refused meanwhile,
and once none is left the CRD goes, its storage with it, which ends the watches of it.

Sources (kubernetes/kubernetes, staging/src/k8s.io/apiextensions-apiserver/): pkg/registry/customresourcedefinition/
etcd.go (REST.Delete), pkg/controller/finalizer/crd_finalizer.go (sync, deleteInstances), pkg/apiserver/
customresource_handler.go (serveResource, removeDeadStorage, tearDown)."""
import threading
import time

from tests.support.store import CRD_CLEANUP_FINALIZER
from tests.support.test_standin_api import wait_for
from tests.support.test_standin_crd import WIDGET_CRD, WIDGETS

CRD_PATH = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.kuberl.dev'
HOLD = 'test.kuberl.dev/hold'


def widget(name: str, finalizers: list[str] | None = None) -> dict:
    metadata = {'name': name, **({'finalizers': finalizers} if finalizers else {})}
    return {'apiVersion': 'test.kuberl.dev/v1', 'kind': 'Widget', 'metadata': metadata, 'spec': {}}


def terminating(rest) -> dict:
    """The CRD's Terminating condition ({} when it has none; None when the CRD is gone)."""
    reply = rest.get(CRD_PATH)
    if reply.status == 404:
        return None
    return next((c for c in reply.body['status']['conditions'] if c['type'] == 'Terminating'), {})


def test_a_deleted_crd_is_terminating_until_its_instances_finalizers_let_them_go(standin, rest):
    standin.apply_crd(WIDGET_CRD)
    assert rest.post(WIDGETS, widget('held', [HOLD])).status == 201
    assert rest.post(WIDGETS, widget('free')).status == 201

    deleted = rest.delete(CRD_PATH)
    # etcd.go, REST.Delete: deletionTimestamp, the cleanup finalizer and the condition in one update; the CRD stays
    assert deleted.status == 200 and deleted.body['metadata']['deletionTimestamp']
    assert deleted.body['metadata']['finalizers'] == [CRD_CLEANUP_FINALIZER]
    condition = next(c for c in deleted.body['status']['conditions'] if c['type'] == 'Terminating')
    assert (condition['status'], condition['reason']) == ('True', 'InstanceDeletionPending')

    # crd_finalizer.go: InstanceDeletionInProgress, then DeleteCollection: 'free' goes, 'held' waits for its finalizer
    wait_for(lambda: rest.get(f'{WIDGETS}/free').status == 404)
    held = rest.get(f'{WIDGETS}/held')
    assert held.status == 200 and held.body['metadata']['deletionTimestamp'], held.body
    assert terminating(rest)['reason'] == 'InstanceDeletionInProgress'
    assert rest.get(WIDGETS).status == 200  # still served: the operator of 'held' reads and patches it

    # customresource_handler.go, serveResource: a create is refused while Terminating is True, a dry run and a
    # server-side apply that would create too (finalization_test.go, TestApplyCRDuringCRDFinalization)
    for reply in (rest.post(WIDGETS, widget('late')), rest.post(f'{WIDGETS}?dryRun=All', widget('late')),
                  rest.patch(f'{WIDGETS}/late?fieldManager=test', widget('late'), content_type='application/apply-patch+yaml')):
        assert reply.status == 405 and reply.body['reason'] == 'MethodNotAllowed', reply.body
        assert reply.message == 'create not allowed while custom resource definition is terminating'
        assert reply.body['details'] == {'group': 'test.kuberl.dev', 'kind': 'widgets'}

    assert rest.patch(f'{WIDGETS}/held', {'metadata': {'finalizers': None}}).status == 200
    assert rest.get(f'{WIDGETS}/held').status == 404
    # the finalizer polls every 5 s (deleteInstances' wait.PollImmediate(5*time.Second, ...))
    wait_for(lambda: terminating(rest) is None)
    assert rest.get(WIDGETS).status == 404


def test_instances_still_held_past_the_minute_are_said_and_the_cleanup_starts_again(standin, rest):
    standin.store.crd_cleanup_poll, standin.store.crd_cleanup_timeout = 0.05, 0.3  # 5 s and 1 min, shortened
    standin.apply_crd(WIDGET_CRD)
    rest.post(WIDGETS, widget('held', [HOLD]))
    updates: list[dict] = []  # each update of the CRD, as a watch sees it (the Check lasts the rate limit's few ms)
    crds = standin.store.type_of('apiextensions.k8s.io', 'v1', 'customresourcedefinitions')
    standin.store.subscribe(crds, str(standin.store.revision), lambda event: updates.append(event.obj), lambda *_: None)
    rest.delete(CRD_PATH)
    wait_for(lambda: len(updates) >= 4)
    conditions = [next(c for c in update['status']['conditions'] if c['type'] == 'Terminating') for update in updates]
    reasons = [c['reason'] for c in conditions]
    # past the poll's bound InstanceDeletionCheck (deleteInstances), then the sync again after the rate limit
    assert reasons[:4] == ['InstanceDeletionPending', 'InstanceDeletionInProgress', 'InstanceDeletionCheck',
                           'InstanceDeletionInProgress'], reasons
    assert conditions[2]['status'] == 'True'
    assert conditions[2]['message'] == 'could not confirm zero CustomResources remaining: timed out waiting for the condition'
    assert rest.get(f'{WIDGETS}/held').status == 200
    rest.patch(f'{WIDGETS}/held', {'metadata': {'finalizers': None}})
    wait_for(lambda: terminating(rest) is None)


def test_a_crd_with_a_finalizer_of_its_own_stays_after_its_cleanup_and_takes_creates_again(standin, rest):
    standin.apply_crd({**WIDGET_CRD, 'metadata': {**WIDGET_CRD['metadata'], 'finalizers': [HOLD]}})
    rest.delete(CRD_PATH)
    # the sync's last status update: Terminating False InstanceDeletionCompleted, its own finalizer off, another's kept
    done = wait_for(lambda: terminating(rest)['status'] == 'False' and terminating(rest))
    assert (done['reason'], done['message']) == ('InstanceDeletionCompleted', 'removed all instances')
    assert rest.get(CRD_PATH).body['metadata']['finalizers'] == [HOLD]
    assert rest.post(WIDGETS, widget('after')).status == 201  # the handler refuses only while Terminating is True


def test_the_crd_gone_ends_the_open_watches_of_its_resource_and_a_new_one_is_404(standin, rest):
    standin.apply_crd(WIDGET_CRD)
    rest.post(WIDGETS, widget('w'))
    events: list[dict] = []
    watching = threading.Thread(target=lambda: events.extend(rest.watch(f'{WIDGETS}?watch=true&timeoutSeconds=60', 60)),
                                daemon=True)
    watching.start()
    wait_for(lambda: events or standin.store.watchers)
    asked = time.monotonic()
    rest.delete(CRD_PATH)
    wait_for(lambda: terminating(rest) is None)
    # tearDown destroys the storage a second after (customresource_handler.go), not at the watch's timeoutSeconds
    watching.join(30)
    assert not watching.is_alive(), 'the watch of a removed CRD stayed open'
    took = time.monotonic() - asked
    print(f'watch closed {took:.2f}s after the CRD delete')
    assert took < 30  # half the watch's timeoutSeconds
    assert [e['type'] for e in events] == ['ADDED', 'DELETED']  # by the cleanup, before the CRD went
    gone = rest.get(f'{WIDGETS}?watch=true&timeoutSeconds=5')
    assert gone.status == 404 and gone.body['reason'] == 'NotFound'


def test_a_cleanup_finalizer_taken_off_by_hand_leaves_the_instances_stored_and_served_again_with_the_crd(standin, rest):
    """The usual way out of a CRD stuck Terminating; the instances a finalizer of theirs held stay in storage, since
    only the CRD finalizer deletes them, and a CRD of that name created again serves them as they were. Their
    namespace deleted meanwhile goes all the same: the namespace controller waits only for what discovery shows."""
    team = WIDGETS.replace('/namespaces/default/', '/namespaces/team/')
    assert rest.post('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'team'}}).status == 201
    standin.apply_crd(WIDGET_CRD)
    rest.post(WIDGETS, widget('held', [HOLD]))
    rest.post(team, widget('held', [HOLD]))
    rest.delete(CRD_PATH)
    wait_for(lambda: rest.get(f'{WIDGETS}/held').body['metadata'].get('deletionTimestamp'))
    assert rest.patch(CRD_PATH, {'metadata': {'finalizers': None}}).status == 200
    assert rest.get(CRD_PATH).status == 404 and rest.get(f'{WIDGETS}/held').status == 404
    rest.delete('/api/v1/namespaces/team')
    wait_for(lambda: rest.get('/api/v1/namespaces/team').status == 404)
    standin.apply_crd(WIDGET_CRD)
    for path in (WIDGETS, team):
        held = rest.get(f'{path}/held')
        assert held.status == 200 and held.body['metadata']['finalizers'] == [HOLD], held.body
        assert held.body['metadata']['deletionTimestamp']
    rest.patch(f'{WIDGETS}/held', {'metadata': {'finalizers': None}})
    assert rest.get(f'{WIDGETS}/held').status == 404
