"""The API stand-in is strict where the real API server is strict: each test fails on a lenient stand-in."""
import base64
import json
import sys
import threading
import time

import pytest

from tests.support.jobs import make_job

PODS = '/api/v1/namespaces/default/pods'
JOBS = '/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs'
CONFIGMAPS = '/api/v1/namespaces/default/configmaps'


def pod(name: str, labels: dict | None = None, **spec) -> dict:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'labels': labels or {}},
            'spec': {'containers': [{'name': 'main', 'image': 'busybox:1', 'command': ['sleep', '1']}], **spec}}


def configmap(name: str, owner: dict | None = None, **extra) -> dict:
    metadata = {'name': name}
    if owner:
        metadata['ownerReferences'] = [{'apiVersion': owner['apiVersion'], 'kind': owner['kind'], 'name': owner['metadata']['name'],
                                        'uid': owner['metadata']['uid'], 'controller': True, 'blockOwnerDeletion': True}]
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': metadata, 'data': {'a': '1'}, **extra}


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError('condition not reached in time')


def register_node(rest, name: str = 'local-node', ready: bool = True) -> None:
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': name}}
    assert rest.post('/api/v1/nodes', node).status == 201
    status = {'status': {'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'Unknown'}]}}
    assert rest.patch(f'/api/v1/nodes/{name}/status', status).status == 200


def test_create_answers_201_with_server_filled_metadata(rest):
    reply = rest.post(PODS, pod('a'))
    assert reply.status == 201
    metadata = reply.body['metadata']
    assert metadata['namespace'] == 'default' and metadata['uid'] and metadata['creationTimestamp']
    assert int(metadata['resourceVersion']) > 0 and metadata['generation'] == 1
    assert reply.body['status']['phase'] == 'Pending'
    assert reply.body['spec']['nodeName'] == 'local-node'  # the stand-in scheduler bound it


def test_create_of_an_existing_name_is_409_already_exists(rest):
    assert rest.post(CONFIGMAPS, configmap('c')).status == 201
    reply = rest.post(CONFIGMAPS, configmap('c'))
    assert reply.status == 409 and reply.body['reason'] == 'AlreadyExists'


def test_create_over_a_terminating_pod_is_409(rest):
    register_node(rest)  # a registered kubelet must confirm the stop, so the pod stays terminating
    assert rest.post(PODS, pod('p')).status == 201
    deleted = rest.delete(f'{PODS}/p')
    assert deleted.status == 200 and deleted.body['metadata']['deletionTimestamp']
    assert deleted.body['metadata']['deletionGracePeriodSeconds'] == 30
    assert rest.get(f'{PODS}/p').status == 200
    assert rest.post(PODS, pod('p')).status == 409
    assert rest.delete(f'{PODS}/p?gracePeriodSeconds=0').status == 200  # the kubelet's confirmation, or a force delete
    assert rest.get(f'{PODS}/p').status == 404
    assert rest.post(PODS, pod('p')).status == 201


def test_pod_on_a_lost_node_stays_terminating_until_forced(rest, standin):
    standin.store.lose_node()
    rest.post(PODS, pod('lost'))
    rest.delete(f'{PODS}/lost', {'gracePeriodSeconds': 1})
    time.sleep(1.3)
    assert rest.get(f'{PODS}/lost').body['metadata']['deletionTimestamp']
    rest.delete(f'{PODS}/lost', {'gracePeriodSeconds': 0})
    assert rest.get(f'{PODS}/lost').status == 404


def test_without_a_registered_kubelet_a_deleted_pod_goes_after_its_deletion_is_seen(rest):
    rest.post(PODS, pod('quick'))
    assert rest.delete(f'{PODS}/quick').body['metadata']['deletionTimestamp']
    wait_for(lambda: rest.get(f'{PODS}/quick').status == 404)


def test_stale_resource_version_update_is_409(rest):
    created = rest.post(CONFIGMAPS, configmap('c')).body
    fresh = {**created, 'data': {'a': '2'}}
    assert rest.put(f'{CONFIGMAPS}/c', fresh).status == 200
    stale = {**created, 'data': {'a': '3'}}
    reply = rest.put(f'{CONFIGMAPS}/c', stale)
    assert reply.status == 409 and reply.body['reason'] == 'Conflict'
    stale_patch = {'metadata': {'resourceVersion': created['metadata']['resourceVersion']}, 'data': {'a': '4'}}
    assert rest.patch(f'{CONFIGMAPS}/c', stale_patch).status == 409
    assert rest.get(f'{CONFIGMAPS}/c').body['data'] == {'a': '2'}


def test_a_contested_object_refuses_its_next_guarded_writes_as_the_api_server_refuses_a_stale_one(rest, standin):
    """hooks.conflicts: the next N writes carrying a resourceVersion (a status patch, a PUT) of that object meet the
    same 409 a stale resourceVersion meets (store.OPTIMISTIC_LOCK cites the source), nothing stored; a write
    without one passes uncounted, and the one after the N lands."""
    job = rest.post(JOBS, make_job('j').obj()).body
    standin.store.hooks.conflicts[('rltrainingjobs', 'default', 'j')] = 2
    guarded = {'metadata': {'resourceVersion': job['metadata']['resourceVersion']}, 'status': {'phase': 'Running'}}
    refused = rest.patch(f'{JOBS}/j/status', guarded)
    assert refused.status == 409 and refused.body == {
        'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'reason': 'Conflict', 'code': 409,
        'message': 'Operation cannot be fulfilled on rltrainingjobs.kuberl.dev "j": the object has been modified; '
                   'please apply your changes to the latest version and try again',
        'details': {'name': 'j', 'group': 'kuberl.dev', 'kind': 'rltrainingjobs'}}, refused.body
    assert rest.patch(f'{JOBS}/j', {'metadata': {'labels': {'edited': 'yes'}}}).status == 200  # unguarded: not counted
    job = rest.get(f'{JOBS}/j').body
    assert rest.put(f'{JOBS}/j', job).status == 409 and 'status' not in rest.get(f'{JOBS}/j').body
    assert standin.store.hooks.conflicts[('rltrainingjobs', 'default', 'j')] == 0
    guarded['metadata']['resourceVersion'] = job['metadata']['resourceVersion']
    assert rest.patch(f'{JOBS}/j/status', guarded).body['status'] == {'phase': 'Running'}


def test_custom_resource_put_needs_a_resource_version(rest):
    created = rest.post(JOBS, make_job('j').obj()).body
    del created['metadata']['resourceVersion']
    reply = rest.put(f'{JOBS}/j', created)
    assert reply.status == 422 and 'metadata.resourceVersion' in reply.message


def test_noop_patch_changes_nothing(rest):
    created = rest.post(CONFIGMAPS, configmap('c')).body
    patched = rest.patch(f'{CONFIGMAPS}/c', {'data': {'a': '1'}}).body
    assert patched['metadata']['resourceVersion'] == created['metadata']['resourceVersion']


def test_pods_the_api_server_refuses_on_create(rest):
    """ValidatePodCreate and ValidateVolumeMounts (pkg/apis/core/validation/validation.go): ephemeral
    containers are added to running pods only ("spec.ephemeralContainers: Forbidden: cannot be set on
    create", as test/integration/pods/pods_test.go expects), and a mount needs its path."""
    debug = rest.post(PODS, pod('debug', ephemeralContainers=[{'name': 'dbg', 'image': 'busybox:1'}]))
    assert debug.status == 422 and 'spec.ephemeralContainers: Forbidden: cannot be set on create' in debug.message
    unmounted = pod('unmounted', volumes=[{'name': 'v', 'emptyDir': {}}])
    unmounted['spec']['containers'][0]['volumeMounts'] = [{'name': 'v'}]
    reply = rest.post(PODS, unmounted)
    assert reply.status == 422 and 'spec.containers[0].volumeMounts[0].mountPath: Required value' in reply.message


def test_container_fields_the_api_server_refuses_on_create(rest):
    """validateContainerCommon and validateContainers (pkg/apis/core/validation/validation.go): validatePullPolicy,
    validateContainerPorts (IsValidPortName, k8s.io/apimachinery/pkg/util/validation), validateEnvVarValueFrom,
    and a regular container's restartPolicy (without the ContainerRestartRules gate, alpha since v1.34)."""
    def refused(**container) -> str:
        body = pod('bad')
        body['spec']['containers'][0].update(container)
        reply = rest.post(PODS, body)
        assert reply.status == 422, reply.body
        return reply.message

    assert ('spec.containers[0].imagePullPolicy: Unsupported value: "always": supported values: "Always", "IfNotPresent",'
            ' "Never"') in refused(imagePullPolicy='always')
    assert ('spec.containers[0].ports[0].name: Invalid value: "prometheus-metrics": must be no more than 15 characters'
            in refused(ports=[{'name': 'prometheus-metrics', 'containerPort': 9100}]))
    assert 'spec.containers[0].ports[1].name: Duplicate value: "http"' in refused(
        ports=[{'name': 'http', 'containerPort': 80}, {'name': 'http', 'containerPort': 81}])
    assert ('spec.containers[0].env[0].valueFrom: Invalid value: "": may not be specified when `value` is not empty'
            in refused(env=[{'name': 'A', 'value': 'x', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}}]))
    assert 'spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers' in refused(restartPolicy='Always')
    fine = pod('fine', initContainers=[{'name': 'proxy', 'image': 'envoy:1', 'restartPolicy': 'Always'}])
    fine['spec']['containers'][0].update(imagePullPolicy='', ports=[{'name': 'metrics-0', 'containerPort': 9090}],
                                         env=[{'name': 'A', 'value': '', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}}])
    assert rest.post(PODS, fine).status == 201


def test_finalizers_hold_an_object_until_removed(rest):
    rest.post(CONFIGMAPS, configmap('held') | {'metadata': {'name': 'held', 'finalizers': ['x/y']}})
    assert rest.delete(f'{CONFIGMAPS}/held').body['metadata']['deletionTimestamp']
    assert rest.get(f'{CONFIGMAPS}/held').status == 200
    refused = rest.patch(f'{CONFIGMAPS}/held', {'metadata': {'finalizers': ['x/y', 'x/z']}})
    assert refused.status == 422
    assert rest.patch(f'{CONFIGMAPS}/held', {'metadata': {'finalizers': None}}).status == 200
    assert rest.get(f'{CONFIGMAPS}/held').status == 404


def test_a_built_in_kind_refuses_a_finalizer_name_the_api_server_refuses(rest):
    """ValidateFinalizers (k8s.io/apimachinery/pkg/api/validation/objectmeta.go: ValidateFinalizerName is
    IsQualifiedName) for every kind; core's ValidateObjectMeta (pkg/apis/core/validation, validateKubeFinalizerName)
    for a built-in one: without a '/', only kubernetes, orphan or foregroundDeletion."""
    bare = rest.post(PODS, pod('bare') | {'metadata': {'name': 'bare', 'finalizers': ['hold']}})
    assert bare.status == 422
    assert 'metadata.finalizers[0]: Invalid value: "hold": name is neither a standard finalizer name nor is it fully qualified' in bare.message
    spaced = rest.post(CONFIGMAPS, configmap('spaced') | {'metadata': {'name': 'spaced', 'finalizers': ['example.com/two words']}})
    assert spaced.status == 422 and 'metadata.finalizers: Invalid value: "example.com/two words": name part must consist' in spaced.message
    both = rest.post(CONFIGMAPS, configmap('both') | {'metadata': {'name': 'both', 'finalizers': ['orphan', 'foregroundDeletion']}})
    assert both.status == 422 and 'finalizer orphan and foregroundDeletion cannot be both set' in both.message
    assert rest.post(CONFIGMAPS, configmap('later')).status == 201
    assert rest.patch(f'{CONFIGMAPS}/later', {'metadata': {'finalizers': ['hold']}}).status == 422  # on update too
    fine = rest.post(PODS, pod('fine') | {'metadata': {'name': 'fine', 'finalizers': ['example.com/hold', 'kubernetes']}})
    assert fine.status == 201 and not fine.headers.get('Warning')


def test_a_custom_resource_is_warned_of_a_finalizer_without_a_domain_not_refused(rest):
    """apiextensions-apiserver pkg/registry/customresource: the strategy's WarningsOnCreate and WarningsOnUpdate
    (generateWarningsFromObj) run validator.go's validateKubeFinalizerName over the finalizers the write adds, as
    Warning headers (code 299), where a built-in kind refuses the name. kuberl's own finalizer has its domain."""
    from kuberl.operator.handlers import FINALIZER

    body = make_job('warned').obj()
    body['metadata']['finalizers'] = ['hold', FINALIZER]
    created = rest.post(JOBS, body)
    assert created.status == 201 and created.body['metadata']['finalizers'] == ['hold', FINALIZER]

    def warned(name: str) -> str:  # the text a quoted-string, its quotes escaped (NewWarningHeader)
        return (f'299 - "metadata.finalizers: \\"{name}\\": prefer a domain-qualified finalizer name to avoid'
                ' accidental conflicts with other finalizer writers"')
    assert created.headers.get('Warning') == warned('hold')
    added = rest.patch(f'{JOBS}/warned', {'metadata': {'finalizers': ['hold', FINALIZER, 'zeta', 'alpha']}})
    assert added.status == 200 and added.headers.get('Warning') == f"{warned('alpha')}, {warned('zeta')}"
    kept = rest.patch(f'{JOBS}/warned', {'metadata': {'labels': {'a': 'b'}}})
    assert kept.status == 200 and not kept.headers.get('Warning')  # only the finalizers a write adds
    assert rest.post(JOBS, make_job('bad').obj() | {'metadata': {'name': 'bad', 'finalizers': ['a b']}}).status == 422


@pytest.mark.parametrize('propagation', ['Background', 'Foreground'])
def test_deleting_an_owner_removes_its_children(rest, propagation):
    owner = rest.post(CONFIGMAPS, configmap('owner')).body
    rest.post(CONFIGMAPS, configmap('child', owner))
    rest.post(PODS, pod('child-pod') | {'metadata': configmap('x', owner)['metadata'] | {'name': 'child-pod'}})
    reply = rest.delete(f'{CONFIGMAPS}/owner', {'propagationPolicy': propagation})
    if propagation == 'Foreground':
        assert 'foregroundDeletion' in reply.body['metadata']['finalizers']
    wait_for(lambda: rest.get(f'{CONFIGMAPS}/child').status == 404)
    wait_for(lambda: rest.get(f'{PODS}/child-pod').status == 404)
    wait_for(lambda: rest.get(f'{CONFIGMAPS}/owner').status == 404)


def test_a_background_deletions_children_stay_as_they_are_until_the_garbage_collector_runs(standin, rest):
    """The owner goes at once; its children, untouched (no deletionTimestamp), until the collector deletes them."""
    owner = rest.post(CONFIGMAPS, configmap('owner')).body
    rest.post(CONFIGMAPS, configmap('child', owner))
    with standin.store.garbage_collector_held():
        assert rest.delete(f'{CONFIGMAPS}/owner').status == 200
        assert rest.get(f'{CONFIGMAPS}/owner').status == 404
        time.sleep(0.1)
        child = rest.get(f'{CONFIGMAPS}/child')
        assert child.status == 200 and not child.body['metadata'].get('deletionTimestamp')
    wait_for(lambda: rest.get(f'{CONFIGMAPS}/child').status == 404)


def test_orphan_deletion_keeps_children_and_a_dangling_owner_is_collected(rest):
    owner = rest.post(CONFIGMAPS, configmap('owner')).body
    rest.post(CONFIGMAPS, configmap('child', owner))
    rest.delete(f'{CONFIGMAPS}/owner', {'propagationPolicy': 'Orphan'})
    time.sleep(0.1)
    child = rest.get(f'{CONFIGMAPS}/child')
    assert child.status == 200 and 'ownerReferences' not in child.body['metadata']
    dangling = {**owner, 'metadata': {**owner['metadata'], 'uid': 'no-such-uid'}}
    rest.post(CONFIGMAPS, configmap('adopted-by-nobody', dangling))
    wait_for(lambda: rest.get(f'{CONFIGMAPS}/adopted-by-nobody').status == 404)


def test_pod_spec_is_immutable_except_what_kubernetes_allows(rest):
    rest.post(PODS, pod('p'))
    reply = rest.patch(f'{PODS}/p', {'spec': {'restartPolicy': 'Never'}})
    assert reply.status == 422 and 'pod updates may not change fields' in reply.message
    image = {'spec': {'containers': [{'name': 'main', 'image': 'busybox:2'}]}}
    patched = rest.patch(f'{PODS}/p', image, content_type='application/strategic-merge-patch+json')
    assert patched.status == 200
    assert patched.body['spec']['containers'][0] == {**patched.body['spec']['containers'][0], 'image': 'busybox:2', 'command': ['sleep', '1']}


def test_immutable_configmap_refuses_data_changes(rest):
    rest.post(CONFIGMAPS, configmap('frozen', immutable=True))
    reply = rest.patch(f'{CONFIGMAPS}/frozen', {'data': {'a': '2'}})
    assert reply.status == 422 and 'immutable' in reply.message


def test_status_subresource_is_isolated_and_generation_follows_spec(rest):
    created = rest.post(PODS, pod('s')).body
    assert rest.patch(f'{PODS}/s', {'status': {'phase': 'Running'}}).body['status']['phase'] == 'Pending'
    labelled = rest.patch(f'{PODS}/s', {'metadata': {'labels': {'a': 'b'}}}).body
    assert labelled['metadata']['generation'] == created['metadata']['generation']
    status = rest.patch(f'{PODS}/s/status', {'status': {'phase': 'Running'}, 'metadata': {'labels': {'c': 'd'}},
                                             'spec': {'restartPolicy': 'Never'}}).body
    assert status['status']['phase'] == 'Running' and 'c' not in status['metadata']['labels']
    assert status['spec']['restartPolicy'] == 'Always'
    image = rest.patch(f'{PODS}/s', {'spec': {'containers': [{'name': 'main', 'image': 'busybox:3'}]}},
                       content_type='application/strategic-merge-patch+json').body
    assert image['metadata']['generation'] == created['metadata']['generation'] + 1


def test_list_has_kind_resource_version_and_honours_selectors(rest):
    rest.post(PODS, pod('a', {'app': 'x', 'rank': '0'}))
    rest.post(PODS, pod('b', {'app': 'x', 'rank': '1'}))
    rest.post(PODS, pod('c', {'app': 'y'}))
    listing = rest.get(f'{PODS}?labelSelector=app%3Dx').body
    assert listing['kind'] == 'PodList' and int(listing['metadata']['resourceVersion']) > 0
    assert [p['metadata']['name'] for p in listing['items']] == ['a', 'b']
    names = lambda query: [p['metadata']['name'] for p in rest.get(f'{PODS}?{query}').body['items']]
    assert names('labelSelector=rank%20in%20(1,2)') == ['b']
    assert names('labelSelector=!rank') == ['c']
    assert names('fieldSelector=metadata.name%3Dc') == ['c']
    assert names('fieldSelector=metadata.name!%3Dc,spec.nodeName%3Dlocal-node') == ['a', 'b']
    assert rest.get(f'{PODS}?fieldSelector=spec.bogus%3D1').status == 400
    assert rest.get('/api/v1/pods').body['items'][0]['metadata']['namespace'] == 'default'


def test_watch_honours_resource_version_selectors_and_sends_json_lines(rest):
    first = rest.post(PODS, pod('a', {'app': 'x'})).body
    rest.patch(f'{PODS}/a', {'metadata': {'labels': {'extra': '1'}}})
    rest.post(PODS, pod('b', {'app': 'y'}))
    rest.patch(f'{PODS}/a', {'metadata': {'labels': {'app': 'gone'}}})
    since = first['metadata']['resourceVersion']
    events = rest.watch(f'{PODS}?watch=true&resourceVersion={since}&labelSelector=app%3Dx&timeoutSeconds=1')
    assert [(e['type'], e['object']['metadata']['name']) for e in events] == [('MODIFIED', 'a'), ('DELETED', 'a')]
    # The object that stopped matching leaves with its previous content at the event's resourceVersion
    # (cache_watcher.go, convertToWatchEvent): a client filtering on `app: x` still sees it go.
    gone = events[-1]['object']['metadata']
    assert gone['labels']['app'] == 'x' and gone['resourceVersion'] == rest.get(f'{PODS}/a').body['metadata']['resourceVersion']
    everything = rest.watch(f'{PODS}?watch=true&timeoutSeconds=1')
    assert sorted((e['type'], e['object']['metadata']['name']) for e in everything) == [('ADDED', 'a'), ('ADDED', 'b')]


def test_watch_sends_bookmarks_and_expires_old_versions(rest, standin):
    events = rest.watch(f'{PODS}?watch=true&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=2')
    assert any(e['type'] == 'BOOKMARK' and e['object']['metadata']['resourceVersion'] for e in events)
    standin.store.history_floor[('', 'pods')] = 50
    expired = rest.watch(f'{PODS}?watch=true&resourceVersion=3&timeoutSeconds=1')
    assert expired[0]['type'] == 'ERROR' and expired[0]['object']['code'] == 410


def test_patch_flavours(rest):
    rest.post(PODS, pod('p', {'a': '1'}))
    merged = rest.patch(f'{PODS}/p', {'metadata': {'labels': {'a': None, 'b': '2'}}}).body
    assert merged['metadata']['labels'] == {'b': '2'}
    ops = [{'op': 'add', 'path': '/metadata/labels/c', 'value': '3'}, {'op': 'test', 'path': '/metadata/labels/b', 'value': '2'}]
    assert rest.patch(f'{PODS}/p', ops, content_type='application/json-patch+json').body['metadata']['labels'] == {'b': '2', 'c': '3'}
    failing = [{'op': 'test', 'path': '/metadata/labels/b', 'value': 'nope'}]
    assert rest.patch(f'{PODS}/p', failing, content_type='application/json-patch+json').status == 422
    smp = {'metadata': {'finalizers': ['k/one']}, 'spec': {'containers': [{'name': 'main', 'image': 'busybox:9'}]}}
    patched = rest.patch(f'{PODS}/p', smp, content_type='application/strategic-merge-patch+json').body
    assert patched['spec']['containers'][0]['command'] == ['sleep', '1']
    job_smp = rest.patch(f'{JOBS}/x', {}, content_type='application/strategic-merge-patch+json')
    assert job_smp.status in (404, 415)


def test_namespaces_events_and_missing_namespace(rest):
    names = [n['metadata']['name'] for n in rest.get('/api/v1/namespaces').body['items']]
    assert 'default' in names and 'kube-system' in names
    assert rest.post('/api/v1/namespaces/nowhere/configmaps', configmap('c')).status == 404
    event = {'apiVersion': 'v1', 'kind': 'Event', 'metadata': {'name': 'e1'}, 'reason': 'Created', 'message': 'm',
             'type': 'Normal', 'involvedObject': {'kind': 'RLTrainingJob', 'name': 'j', 'namespace': 'default'}}
    assert rest.post('/api/v1/namespaces/default/events', event).status == 201
    new_style = {'apiVersion': 'events.k8s.io/v1', 'kind': 'Event', 'metadata': {'name': 'e2'}, 'reason': 'Created',
                 'note': 'm', 'type': 'Normal', 'action': 'Create', 'eventTime': '2026-01-01T00:00:00.000000Z',
                 'reportingController': 'kuberl', 'reportingInstance': 'x',
                 'regarding': {'kind': 'RLTrainingJob', 'name': 'j', 'namespace': 'default'}}
    assert rest.post('/apis/events.k8s.io/v1/namespaces/default/events', new_style).status == 201
    found = rest.get('/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dj').body['items']
    assert [e['metadata']['name'] for e in found] == ['e1']


def test_deleting_a_namespace_removes_its_contents(rest):
    assert rest.post('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'team'}}).status == 201
    rest.post('/api/v1/namespaces/team/configmaps', configmap('c'))
    assert rest.delete('/api/v1/namespaces/team').body['status']['phase'] == 'Terminating'
    assert rest.post('/api/v1/namespaces/team/configmaps', configmap('d')).status in (403, 404)
    wait_for(lambda: rest.get('/api/v1/namespaces/team').status == 404)


def test_table_rendering_for_pods(rest):
    rest.post(PODS, pod('p'))
    table = rest.get(PODS, headers={'Accept': 'application/json;as=Table;g=meta.k8s.io;v=v1'}).body
    assert table['kind'] == 'Table'
    assert [c['name'] for c in table['columnDefinitions']][:5] == ['Name', 'Ready', 'Status', 'Restarts', 'Age']
    assert table['rows'][0]['cells'][:3] == ['p', '0/1', 'Pending']


def test_eviction_sets_disruption_target_then_deletes_gracefully(rest, standin):
    register_node(rest)
    rest.post(PODS, pod('victim'))
    assert rest.post(f'{PODS}/victim/eviction', {'apiVersion': 'policy/v1', 'kind': 'Eviction',
                                                 'metadata': {'name': 'victim'}}).status == 201
    evicted = rest.get(f'{PODS}/victim').body
    assert evicted['metadata']['deletionTimestamp']
    assert any(c['type'] == 'DisruptionTarget' for c in evicted['status']['conditions'])


def test_unschedulable_hook_keeps_a_pod_pending_until_released(rest, standin):
    from tests.support.selectors import parse_label_selector
    standin.store.hooks.unschedulable.append(parse_label_selector('hold=yes'))
    held = rest.post(PODS, pod('held', {'hold': 'yes'})).body
    assert 'nodeName' not in held['spec']
    assert held['status']['conditions'][0]['reason'] == 'Unschedulable'
    standin.store.hooks.unschedulable.clear()
    standin.store.reschedule()
    assert rest.get(f'{PODS}/held').body['spec']['nodeName'] == 'local-node'


def test_call_log_counts_writes_for_rbac(rest, standin):
    rest.post(CONFIGMAPS, configmap('c'))
    rest.patch(f'{CONFIGMAPS}/c', {'data': {'b': '2'}})
    rest.get(f'{CONFIGMAPS}/c')
    verbs = {(c.verb, c.resource) for c in standin.calls}
    assert {('create', 'configmaps'), ('patch', 'configmaps'), ('get', 'configmaps')} <= verbs
    assert standin.writes() == 2


def test_builtin_kinds_drop_unknown_fields_and_refuse_wrong_types(rest):
    typo = pod('typo')
    typo['spec']['containers'][0]['imagePullPolicyy'] = 'Never'
    strict = rest.post(f'{PODS}?fieldValidation=Strict', typo)
    assert strict.status == 400 and 'unknown field "spec.containers[0].imagePullPolicyy"' in strict.message
    warned = rest.post(PODS, typo)
    assert warned.status == 201 and 'imagePullPolicyy' not in warned.body['spec']['containers'][0]
    assert 'imagePullPolicyy' in warned.headers.get('Warning', '')
    wrong = pod('wrong')
    wrong['spec']['containers'][0]['env'] = [{'name': 'RANK', 'value': 0}]
    refused = rest.post(PODS, wrong)
    assert refused.status == 400 and 'spec.containers.env.value' in refused.message


def test_owner_references_are_validated_and_resolved_like_the_garbage_collector(rest):
    owner = rest.post(CONFIGMAPS, configmap('owner')).body
    two_controllers = configmap('child', owner)
    two_controllers['metadata']['ownerReferences'].append({**two_controllers['metadata']['ownerReferences'][0], 'uid': 'other'})
    assert rest.post(CONFIGMAPS, two_controllers).status == 422
    misnamed = configmap('misnamed', owner)
    misnamed['metadata']['ownerReferences'][0]['name'] = 'not-the-owner'  # right uid, wrong name: no such owner
    rest.post(CONFIGMAPS, misnamed)
    rest.post(CONFIGMAPS, configmap('kept', owner))
    wait_for(lambda: rest.get(f'{CONFIGMAPS}/misnamed').status == 404)
    assert rest.get(f'{CONFIGMAPS}/kept').status == 200


def test_claims_are_bound_by_the_default_provisioner(rest):
    claim = {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': 'ckpt'},
             'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}}}
    bound = rest.post('/api/v1/namespaces/default/persistentvolumeclaims', claim).body
    assert bound['status']['phase'] == 'Bound' and bound['status']['capacity'] == {'storage': '1Gi'}
    resized = rest.patch('/api/v1/namespaces/default/persistentvolumeclaims/ckpt',
                         {'spec': {'resources': {'requests': {'storage': '2Gi'}}}})
    assert resized.status == 200
    assert rest.patch('/api/v1/namespaces/default/persistentvolumeclaims/ckpt',
                      {'spec': {'accessModes': ['ReadWriteMany']}}).status == 422


def test_kmock_reactions_inject_faults_ahead_of_the_realism_layer(rest, standin):
    import kmock
    rest.post(CONFIGMAPS, configmap('c'))
    standin.handler['patch', kmock.resource('', 'v1', 'configmaps')] << 503
    assert rest.patch(f'{CONFIGMAPS}/c', {'data': {'a': '2'}}).status == 503
    assert rest.get(f'{CONFIGMAPS}/c').body['data'] == {'a': '1'}


def test_size_limits_of_annotations_and_objects(rest):
    big = configmap('big') | {'metadata': {'name': 'big', 'annotations': {'a': 'x' * (256 * 1024 + 1)}}}
    assert rest.post(CONFIGMAPS, big).status == 422
    # Go's len() of a string counts its UTF-8 bytes: 'é' is two of them
    wide = configmap('wide') | {'metadata': {'name': 'wide', 'annotations': {'a': 'é' * (128 * 1024)}}}
    assert rest.post(CONFIGMAPS, wide).status == 422
    huge = configmap('huge') | {'data': {'blob': 'x' * (2 * 1024 * 1024)}}
    assert rest.post(CONFIGMAPS, huge).status == 422, 'ValidateConfigMap refuses it before etcd would'


def test_annotation_keys_are_qualified_names_case_aside(rest):
    """ValidateAnnotations: IsQualifiedName(strings.ToLower(key)); the stand-in checked only their total size."""
    ok = configmap('ok') | {'metadata': {'name': 'ok', 'annotations': {'Example.COM/Some_Key.1': 'v', 'plain': 'v'}}}
    assert rest.post(CONFIGMAPS, ok).status == 201
    for key, said in (('a' * 64, 'name part must be no more than 63 characters'), ('/x', 'prefix part must be non-empty'),
                      ('x/', 'name part must be non-empty'), ('bad key', 'name part must consist of'),
                      ('under_score.example.com/x', 'prefix part a lowercase RFC 1123 subdomain')):
        bad = configmap('bad') | {'metadata': {'name': 'bad', 'annotations': {key: 'v'}}}
        reply = rest.post(CONFIGMAPS, bad)
        assert reply.status == 422 and f'metadata.annotations: Invalid value: "{key}": {said}' in reply.body['message'], reply.body


def test_size_limits_of_configmaps_request_bodies_and_stored_objects(rest):
    """ValidateConfigMap: data and binaryData values at most 1 MiB in all (422, the value not quoted);
    MaxRequestBodyBytes: 3 MiB read (413 past it); etcd stores at most 1.5 MiB (413). A stand-in
    that read 1 MiB at most (aiohttp's default) refused a 1.2 MB job a real server keeps."""
    full = configmap('full') | {'data': {'a': 'x' * (512 * 1024)}, 'binaryData': {'b': 'eHh4' * (512 * 1024 // 3)}}
    assert rest.post(CONFIGMAPS, full).status == 201
    over = configmap('over') | {'data': {'a': 'x' * (1024 * 1024 + 1)}}
    reply = rest.post(CONFIGMAPS, over)
    assert reply.status == 422 and reply.body['message'] == 'ConfigMap "over" is invalid: : Too long: must have at most 1048576 bytes'
    big_job = make_job('big').with_spec(env={'id': 'CartPole-v1', 'kwargs': {'blob': 'x' * 1_200_000}}).obj()
    assert rest.post(JOBS, big_job).status == 201, 'under etcd\'s 1.5 MiB: stored'
    bigger = make_job('bigger').with_spec(env={'id': 'CartPole-v1', 'kwargs': {'blob': 'x' * 2_000_000}}).obj()
    reply = rest.post(JOBS, bigger)
    assert reply.status == 413 and reply.body['message'] == 'etcdserver: request is too large'
    reply = rest.post(JOBS, make_job('biggest').with_spec(env={'id': 'CartPole-v1', 'kwargs': {'blob': 'x' * 3_200_000}}).obj())
    assert reply.status == 413 and reply.body['message'] == 'Request entity too large: limit is 3145728'


def nested(levels: int, leaf: object = 1) -> object:
    for _ in range(levels):
        leaf = {'a': leaf}
    return leaf


def test_a_custom_resource_nested_to_the_json_decoders_bound_is_stored_and_served_and_one_level_more_is_400(rest):
    """Go's encoding/json (sigs.k8s.io/json's copy) refuses nesting past 10,000 (maxNestingDepth), and to nothing
    less: a preserve-unknown-fields subtree (spec.env.kwargs) nested so is stored and listed and watched. The
    stand-in answered 500 from Python's json past its 1,000 recursions, so no test could meet such a job."""
    job = make_job('deep').obj()
    job['spec']['env']['kwargs'] = {'x': nested(10_000 - 4)}  # the job, spec, env and kwargs are 4 levels
    reply = rest.post(JOBS, job)
    assert reply.status == 201, reply.message
    listed = rest.get(JOBS).body['items'][0]['spec']['env']['kwargs']['x']
    assert listed == nested(10_000 - 4)
    job['metadata']['name'], job['spec']['env']['kwargs'] = 'deeper', {'x': nested(10_000 - 3)}
    reply = rest.post(JOBS, job)
    assert reply.status == 400 and reply.body['reason'] == 'BadRequest'
    assert reply.message == "couldn't get version/kind; json parse error: invalid character '{' exceeded max depth"
    brackets_in_strings = make_job('quoted').with_spec(env={'id': 'CartPole-v1', 'kwargs': {'s': '{[' * 20_000}}).obj()
    assert rest.post(JOBS, brackets_in_strings).status == 201, 'brackets within strings do not nest'


def test_unattended_pods_can_be_held_for_their_grace_period(rest, standin):
    standin.store.unattended_pods_use_grace = True
    rest.post(PODS, pod('slow', terminationGracePeriodSeconds=2))
    started = time.monotonic()
    rest.delete(f'{PODS}/slow')
    time.sleep(0.5)  # 1.5 s before the grace period ends: a loaded machine's stall does not reach it (it was 0.5 s)
    assert rest.get(f'{PODS}/slow').status == 200
    wait_for(lambda: rest.get(f'{PODS}/slow').status == 404)
    assert time.monotonic() - started >= 2.0


def test_binding_assigns_an_unscheduled_pod_once(rest, standin):
    from tests.support.selectors import parse_label_selector
    standin.store.hooks.unschedulable.append(parse_label_selector('custom=scheduler'))
    rest.post(PODS, pod('waiting', {'custom': 'scheduler'}))
    binding = {'apiVersion': 'v1', 'kind': 'Binding', 'metadata': {'name': 'waiting'}, 'target': {'kind': 'Node', 'name': 'n2'}}
    assert rest.post(f'{PODS}/waiting/binding', binding).status == 201
    assert rest.get(f'{PODS}/waiting').body['spec']['nodeName'] == 'n2'
    assert rest.post(f'{PODS}/waiting/binding', binding).status == 409


def test_a_watch_timeout_that_is_not_an_integer_is_refused_as_the_api_server_does(rest):
    """timeoutSeconds is an int64 (strconv.ParseInt): kopf's server_timeout set to a float sends
    "300.0", which a real API server answers 400; the stand-in must too."""
    refused = rest.get(f'{PODS}?watch=true&timeoutSeconds=1.0')
    assert refused.status == 400 and 'parsing "1.0": invalid syntax' in refused.body['message'], refused.body
    assert rest.watch(f'{PODS}?watch=true&timeoutSeconds=1') == []


def test_a_name_or_label_ending_in_a_line_break_is_refused_as_go_regexps_refuse_it(rest):
    """IsDNS1123Subdomain, IsDNS1123Label and IsValidLabelValue (k8s.io/apimachinery/pkg/util/validation) match
    "^...$" with Go's regexp, whose $ is the end of the text; Python's re.match let "worker\\n" through."""
    assert rest.post(CONFIGMAPS, configmap('cm\n')).status == 422
    labelled = configmap('labelled') | {'metadata': {'name': 'labelled', 'labels': {'role': 'worker\n'}}}
    assert rest.post(CONFIGMAPS, labelled).status == 422
    keyed = configmap('keyed') | {'metadata': {'name': 'keyed', 'labels': {'role\n': 'worker'}}}
    assert rest.post(CONFIGMAPS, keyed).status == 422
    renamed = pod('renamed')
    renamed['spec']['containers'][0]['name'] = 'main\n'
    assert rest.post(PODS, renamed).status == 422
    long = pod('long')
    long['spec']['containers'][0]['name'] = 'c' * 64  # ValidateDNS1123Label: at most 63
    assert rest.post(PODS, long).status == 422
    assert rest.post(CONFIGMAPS, configmap('fine') | {'metadata': {'name': 'fine', 'labels': {'role': 'worker'}}}).status == 201


def test_a_throttled_list_is_shed_as_priority_and_fairness_sheds_it(rest, standin):
    """429 with Retry-After and a plain-text body, before authorization; the next request is served."""
    standin.handler.throttled['pods'] = 1
    shed = rest.get('/api/v1/namespaces/default/pods')
    assert shed.status == 429 and shed.headers['Retry-After'] == '1', shed
    assert shed.headers['Content-Type'].startswith('text/plain') and 'Too many requests' in str(shed.body)
    assert rest.get('/api/v1/namespaces/default/pods').status == 200


def test_a_shed_write_is_answered_as_a_shed_list_and_changes_nothing(rest, standin):
    """A create and a status patch shed as API Priority and Fairness sheds them: 429, Retry-After, plain text; nothing
    stored; the next one is served."""
    standin.handler.shed[('create', 'configmaps')] = 1
    shed = rest.post(CONFIGMAPS, configmap('later'))
    assert shed.status == 429 and shed.headers['Retry-After'] == '1' and 'Too many requests' in str(shed.body), shed
    assert rest.get(f'{CONFIGMAPS}/later').status == 404
    assert rest.post(CONFIGMAPS, configmap('later')).status == 201
    assert standin.handler.shed[('create', 'configmaps')] == 0


def test_a_bookmark_never_runs_ahead_of_the_events_queued_for_its_watch(rest, standin):
    # A real watch cache sends a bookmark through the watcher's one ordered channel, behind every event
    # it has dispatched (cacher.go dispatchEvents: the bookmark timer's event goes through dispatchEvent
    # like any other; cache_watcher.go: nonblockingAdd/add put it on the same `input` channel that
    # processInterval drains in order). So a bookmark at rv N means every event up to N was sent before
    # it, and a client resuming from N misses nothing. Writes from another thread race the watches here.
    standin.handler.bookmark_seconds = 0.002
    configmaps = standin.store.type_of('', 'v1', 'configmaps')
    created: list[str] = []
    done = threading.Event()

    def write() -> None:
        for index in range(400):
            standin.store.create(configmaps, 'default', configmap(f'cm-{index}'))
            created.append(f'cm-{index}')
            time.sleep(0.002)
        done.set()

    def follow(since: str, seen: set[str], out_of_order: list) -> None:
        """Watch with bookmarks, resuming each time the 1 s watch ends from the last resourceVersion it sent."""
        final_pass = False
        while not final_pass:
            final_pass = done.is_set()
            bookmark = 0
            for event in rest.watch(f'{CONFIGMAPS}?watch=true&allowWatchBookmarks=true&resourceVersion={since}&timeoutSeconds=1'):
                rv, name = int(event['object']['metadata']['resourceVersion']), event['object']['metadata'].get('name')
                if event['type'] == 'BOOKMARK':
                    bookmark = rv
                else:
                    if rv <= bookmark:
                        out_of_order.append((name, rv, bookmark))
                    seen.add(name)
                since = str(rv)

    since = rest.get(CONFIGMAPS).body['metadata']['resourceVersion']
    followers = [(set(), []) for _ in range(4)]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads interleave often, so the race shows within a few seconds
    try:
        threads = [threading.Thread(target=write, daemon=True)]
        threads += [threading.Thread(target=follow, args=(since, *f), daemon=True) for f in followers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        sys.setswitchinterval(switch_interval)
    for seen, out_of_order in followers:
        assert not out_of_order, f'events sent after a bookmark that claimed them (name, rv, bookmark): {out_of_order[:5]}'
        assert seen == set(created), f'missed on resume from a bookmark: {sorted(set(created) - seen)[:5]}'


@pytest.mark.parametrize(('spec', 'message'), [
    ({'priority': 2**31}, 'json: cannot unmarshal number 2147483648 into Go struct field PodSpec.spec.priority of type int32'),
    ({'terminationGracePeriodSeconds': 2**63},
     'json: cannot unmarshal number 9223372036854775808 into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64'),
    ({'containers': [{'name': 'main', 'image': 'busybox:1', 'ports': [{'containerPort': -(2**31) - 1}]}]},
     'json: cannot unmarshal number -2147483649 into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32'),
    ({'securityContext': {'supplementalGroups': [1, 2**64]}},
     ('json: cannot unmarshal number 18446744073709551616 into Go struct field PodSecurityContext.spec.securityContext.supplementalGroups'
      ' of type int64')),
])
def test_a_number_its_go_field_cannot_hold_is_refused_as_the_decoder_refuses_it(rest, spec, message):
    # literalStore (sigs.k8s.io/json internal/golang/encoding/json/decode.go): strconv.ParseInt, then v.OverflowInt(n),
    # saves UnmarshalTypeError{Value: "number " + s}; the create handler answers it 400, "... cannot be handled as a Pod".
    reply = rest.post(PODS, pod('big', **spec))
    assert reply.status == 400 and reply.body['reason'] == 'BadRequest'
    assert reply.body['message'] == f'Pod in version "v1" cannot be handled as a Pod: {message}'


# resource.ErrFormatWrong, ErrNumeric and ErrSuffix (apimachinery pkg/api/resource/quantity.go), as the server says them
QUANTITY_FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
QUANTITY_NUMERIC = 'unable to parse numeric part of quantity'
QUANTITY_SUFFIX = "unable to parse quantity's suffix"


def resources_pod(name: str, **limits) -> dict:
    return pod(name, containers=[{'name': 'main', 'image': 'busybox:1', 'resources': {'limits': limits}}])


@pytest.mark.parametrize(('limits', 'message'), [
    # suffixHandler.interpret (apimachinery pkg/api/resource/suffix.go): strconv.ParseInt(suffix[1:], 10, 64) fails
    ({'memory': '1e9223372036854775808'}, QUANTITY_SUFFIX),
    ({'cpu': '1e-99999999999999999999'}, QUANTITY_SUFFIX),
    ({'memory': '1ki'}, QUANTITY_SUFFIX),  # neither a decimal SI suffix (k) nor a binary one (Ki)
    ({'memory': '1e'}, QUANTITY_SUFFIX),
    # parseQuantityString: what follows the number is not suffix letters, a sign and digits (ErrFormatWrong)
    ({'memory': '1Qi'}, QUANTITY_FORMAT_WRONG),
    ({'cpu': 'lots'}, QUANTITY_FORMAT_WRONG),
    ({'cpu': '1\n'}, QUANTITY_FORMAT_WRONG),  # UnmarshalJSON sees the escape, 1\n, which TrimSpace leaves
    ({'cpu': True}, QUANTITY_FORMAT_WRONG),  # the raw bytes, true
    # a number of no digits past the int64 fast path: inf.Dec.SetString refuses it (ErrNumeric)
    ({'cpu': '.e-10'}, QUANTITY_NUMERIC),
])
def test_a_quantity_parse_quantity_refuses_is_refused_as_the_decoder_refuses_it(rest, limits, message):
    # Quantity.UnmarshalJSON (pkg/api/resource/quantity.go) returns ParseQuantity's error, which the decoder
    # returns as it is (a json.Unmarshaler's): 400, "Pod in version "v1" cannot be handled as a Pod: <error>".
    reply = rest.post(PODS, resources_pod('huge', **limits))
    assert reply.status == 400 and reply.body['reason'] == 'BadRequest'
    assert reply.body['message'] == f'Pod in version "v1" cannot be handled as a Pod: {message}'


@pytest.mark.parametrize('limits', [
    {'memory': '999999999999Ei'},  # capped at 2^63-1 by ParseQuantity, not refused
    {'memory': '1e999', 'cpu': '1e4294967296'},  # a decimal amount is not capped; the exponent kept as int32 (1)
    {'memory': '1e-9223372036854775808'},  # ParseInt's least int64
    {'cpu': '1 ', 'memory': 2.5},  # TrimSpace; a JSON number's text
    {'cpu': 'e5', 'memory': '+'},  # a number of no digits is 0 on the fast path
])
def test_a_quantity_parse_quantity_reads_is_accepted(rest, limits):
    assert rest.post(PODS, resources_pod('odd', **limits)).status == 201


def test_the_largest_numbers_the_go_fields_hold_are_stored(rest):
    spec = {'activeDeadlineSeconds': 2**31 - 1, 'securityContext': {'runAsUser': 2**63 - 1, 'supplementalGroups': [-(2**63)]}}
    assert rest.post(PODS, pod('edge', **spec)).status == 201


# Quantity.String's canonical forms (k8s.io/apimachinery/pkg/api/resource/quantity_test.go): TestQuantityString's
# (expect, alternate) pairs, where parsing the expected form keeps it and parsing the alternate gives it;
# TestQuantityParseEmit's (in, expect); TestJSONWhitespace's trimmed ones. Each also negated, as those tests do.
CANONICAL = [
    ('1Gi', '1024Mi'), ('300Mi', '307200Ki'), ('1001Gi', '1025024Mi'), ('1Ti', '1024Gi'), ('5', '5000m'), ('500m', '0.5'),
    ('1G', '1000M'), ('1G', '0.001T'), ('1m', '1000u'), ('1080m', '1.08'), ('1080m', '1080000000n'), ('1e9', '.001e12'),
    ('1e-3', '0.001e0'), ('1e-9', '1000e-12'), ('0', '00'), ('6Ki', '6Ki'), ('1234567M', '1234567M'), ('1025', '1025'),
    ('80e-3', '80e-3'), ('1080n', '1080n'), ('1080u', '1080u'),
    ('1Gi', '1Gi'), ('1G', '1000M'), ('1024m', '.001Ki'), ('1024u', '.000001Ki'), ('1024n', '.000000001Ki'), ('2n', '.000000000001Ki'),
    ('1', ' 1'), ('1', '1 '),
]


@pytest.mark.parametrize(('canonical', 'written'), CANONICAL)
def test_a_quantity_is_what_quantity_string_makes_of_it(canonical, written):
    from tests.support.coreschema import canonical_quantity
    assert canonical_quantity(written) == canonical
    if canonical != '0':
        assert canonical_quantity('-' + written.strip()) == '-' + canonical


@pytest.mark.parametrize(('written', 'stored'), [
    # TestQuantityParse's amounts (decQuantity(mantissa, exponent, format)), as CanonicalizeBytes writes them
    ('9Ei', '9223372036854775807'),  # capped at maxAllowed; not a whole number of Ki, so no binary suffix
    ('100.035Ki', '102435840m'),  # 102435.84, not whole: BinarySI shown as DecimalSI
    ('0.5Mi', '512Ki'), ('3.001n', '4n'), ('1.1E-9', '2e-9'), ('0.00000012345', '124n'), ('12E', '12E'), ('.0001k', '100m'),
    # ParseQuantity keeps the text where its int64 fast path finds it canonical (scale a multiple of 3, digits
    # neither ending in 000 nor starting with 0; a binary amount's digits not a multiple of 8): s: str, as written
    ('+1', '+1'), ('1.500', '1.500'), ('1e3', '1e3'), ('1E3', '1E3'), ('1.', '1.'), ('1025Mi', '1025Mi'),
    ('1000m', '1'), ('1.5Gi', '1536Mi'), ('8Ki', '8Ki'), ('1.0Ki', '1Ki'), ('-0.0', '0'),
])
def test_parse_quantity_keeps_a_canonical_text_and_canonicalises_the_rest(written, stored):
    from tests.support.coreschema import canonical_quantity
    assert canonical_quantity(written) == stored


def test_built_in_kinds_store_quantities_canonical_and_custom_resources_as_written(rest):
    # The API server decodes a built-in kind into its Go type, whose resource.Quantity fields (ResourceList values,
    # emptyDir.sizeLimit, a claim's requests) re-encode through Quantity.MarshalJSON: the stored object, and every
    # read and watch event of it, carries the canonical form. A custom resource is stored as the JSON it was sent.
    body = pod('sized', containers=[{'name': 'main', 'image': 'busybox:1', 'resources': {
        'requests': {'cpu': 0.5, 'memory': '1.5Gi'}, 'limits': {'cpu': '1000m', 'memory': '2048Mi', 'ephemeral-storage': '1e3'}}}],
        volumes=[{'name': 'scratch', 'emptyDir': {'sizeLimit': '0.5Gi'}}])
    created = rest.post(PODS, body)
    assert created.status == 201, created.body
    resources = created.body['spec']['containers'][0]['resources']
    assert resources == {'requests': {'cpu': '500m', 'memory': '1536Mi', 'ephemeral-storage': '1e3'},  # the last from its limit
                         'limits': {'cpu': '1', 'memory': '2Gi', 'ephemeral-storage': '1e3'}}
    assert created.body['spec']['volumes'][0]['emptyDir']['sizeLimit'] == '512Mi'
    assert rest.get(f'{PODS}/sized').body['spec']['containers'][0]['resources'] == resources
    claim = {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': 'ckpt'},
             'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1024Mi'}}}}
    stored = rest.post('/api/v1/namespaces/default/persistentvolumeclaims', claim)
    assert stored.status == 201 and stored.body['spec']['resources']['requests'] == {'storage': '1Gi'}, stored.body
    job = make_job('as-written').with_spec(resources={'limits': {'cpu': '1000m', 'memory': '2048Mi'}}).obj()
    created = rest.post(JOBS, job)
    assert created.status == 201 and created.body['spec']['resources']['limits'] == {'cpu': '1000m', 'memory': '2048Mi'}


def test_a_write_of_the_same_quantity_in_another_form_changes_nothing(rest):
    # What is compared is the decoded object: a claim's storage request sent again as 1024Mi over a stored 1Gi is
    # the object as it is, a no-op update that keeps its resourceVersion.
    claims = '/api/v1/namespaces/default/persistentvolumeclaims'
    claim = {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': 'same'},
             'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}}}
    version = rest.post(claims, claim).body['metadata']['resourceVersion']
    again = rest.patch(f'{claims}/same', {'spec': {'resources': {'requests': {'storage': '1024Mi'}}}})
    assert again.status == 200 and again.body['metadata']['resourceVersion'] == version, again.body
    assert again.body['spec']['resources']['requests'] == {'storage': '1Gi'}


CLAIMS = '/api/v1/namespaces/default/persistentvolumeclaims'


def claim(name: str, **spec) -> dict:
    return {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': name},
            'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}, **spec}}


@pytest.mark.parametrize(('spec', 'said'), [
    # ValidatePersistentVolumeClaimSpec (pkg/apis/core/validation/validation.go), its errors in its order
    ({'accessModes': []}, 'spec.accessModes: Required value: at least 1 access mode is required'),
    ({'accessModes': ['ReadWriteSometimes']}, ('spec.accessModes: Unsupported value: "ReadWriteSometimes": supported values: '
     '"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"')),
    ({'accessModes': ['ReadWriteOncePod', 'ReadOnlyMany']}, 'spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes'),
    ({'resources': {}}, 'spec.resources[storage]: Required value'),
    ({'resources': {'requests': {'storage': '0Gi'}}}, 'spec.resources[storage]: Invalid value: "0": must be greater than zero'),
    ({'resources': {'requests': {'storage': '-1Mi'}}}, 'spec.resources[storage]: Invalid value: "-1Mi": must be greater than zero'),
])
def test_a_claim_the_server_cannot_provision_is_refused(rest, spec, said):
    # a refused claim fails a job's first gang (the checkpoint claim kuberl renders from checkpoint.size)
    reply = rest.post(CLAIMS, claim('refused', **spec))
    assert reply.status == 422 and reply.body['message'] == f'PersistentVolumeClaim "refused" is invalid: {said}', reply.body


def test_a_bound_claim_grows_and_shrinks_only_down_to_its_capacity(rest):
    # ValidatePersistentVolumeClaimUpdate: a Bound claim's storage request may change (the stand-in binds at once,
    # capacity as requested); below status.capacity it is Forbidden (RecoverVolumeExpansionFailure on, as since v1.32),
    # compared as amounts (Quantity.Cmp): 1024Mi is 1Gi. Anything else in the spec is frozen.
    assert rest.post(CLAIMS, claim('grown')).status == 201
    for storage, status in (('2Gi', 200), ('1536Mi', 200), ('1024Mi', 422), ('512Mi', 422), ('1.5Gi', 200)):
        reply = rest.patch(f'{CLAIMS}/grown', {'spec': {'resources': {'requests': {'storage': storage}}}})
        assert reply.status == status, (storage, reply.body)
    said = rest.patch(f'{CLAIMS}/grown', {'spec': {'resources': {'requests': {'storage': '1Gi'}}}}).body['message']
    assert said == ('PersistentVolumeClaim "grown" is invalid: spec.resources.requests.storage: Forbidden: '
                    'field can not be less than status.capacity'), said
    assert rest.patch(f'{CLAIMS}/grown', {'spec': {'storageClassName': 'fast'}}).status == 422
    assert rest.get(f'{CLAIMS}/grown').body['spec']['resources']['requests'] == {'storage': '1536Mi'}


def event(message: str, **fields) -> dict:
    """A core/v1 Event as kopf posts one (events.py: eventTime, reportingComponent, reportingInstance, action)."""
    return {'apiVersion': 'v1', 'kind': 'Event', 'metadata': {'generateName': 'kuberl-'}, 'type': 'Warning', 'reason': 'Crashed',
            'message': message, 'action': 'Action?', 'reportingComponent': 'kuberl-operator', 'reportingInstance': 'op-0',
            'source': {'component': 'kuberl-operator'}, 'eventTime': '2026-11-29T04:00:00.000000Z',
            'involvedObject': {'apiVersion': 'v1', 'kind': 'Pod', 'name': 'p', 'namespace': 'default'}, **fields}


def test_an_event_is_held_to_the_legacy_event_rules(rest):
    events = '/api/v1/namespaces/default/events'
    # legacyValidateEvent (pkg/apis/core/validation/events.go): an Event with an eventTime has a message of at most
    # NoteLengthLimit, 1024, counted by Go's len: bytes. 512 characters of CJK are 1536 bytes.
    assert rest.post(events, event('x' * 1024)).status == 201
    refused = rest.post(events, event('训' * 512))
    assert refused.status == 422, refused.body
    assert refused.body['message'].endswith('is invalid: message: Invalid value: "": can have at most 1024 characters'), refused.body
    assert rest.post(events, event('训' * 512, eventTime=None)).status == 201, 'an Event without an eventTime has no such limit'
    said = rest.post(events, event('ok', reason='', reportingComponent='', action='a' * 129)).body['message']
    assert said.endswith('[reportingController: Required value, action: Invalid value: "": can have at most 128 characters, '
                         'reason: Required value]'), said
    # without an eventTime the involved object's namespace must be the Event's; with one, only set (or default)
    elsewhere = event('ok', eventTime=None, involvedObject={'kind': 'Pod', 'name': 'p', 'namespace': 'other'})
    assert rest.post(events, elsewhere).body['message'].endswith(
        'involvedObject.namespace: Invalid value: "other": does not match event.namespace')
    assert rest.post(events, {**elsewhere, 'eventTime': '2026-11-29T04:00:00.000000Z'}).status == 201


def test_a_write_with_a_dry_run_or_field_validation_the_server_does_not_know_is_refused_and_writes_nothing(rest):
    # ValidateCreateOptions / ValidatePatchOptions / ValidateDeleteOptions (apimachinery pkg/apis/meta/v1/validation):
    # ValidateDryRun takes only "All", ValidateFieldValidation "", Ignore, Strict, Warn; the handler answers NewInvalid
    # of the options (422) before it reads anything. dryRun=true is a client's mistake the stand-in took as a real write.
    refused = rest.post(f'{CONFIGMAPS}?dryRun=true', configmap('dry'))
    assert refused.status == 422 and refused.body['message'] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"true"}: supported values: "All"'), refused.body
    assert rest.get(f'{CONFIGMAPS}/dry').status == 404
    assert rest.post(f'{CONFIGMAPS}?dryRun=All', configmap('dry')).status == 201 and rest.get(f'{CONFIGMAPS}/dry').status == 404
    assert rest.post(CONFIGMAPS, configmap('wet')).status == 201
    said = rest.patch(f'{CONFIGMAPS}/wet?fieldValidation=strict', {'data': {'a': '2'}}).body['message']
    assert said == ('PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": '
                    'supported values: "", "Ignore", "Strict", "Warn"'), said
    assert rest.delete(f'{CONFIGMAPS}/wet?dryRun=yes').status == 422 and rest.get(f'{CONFIGMAPS}/wet').body['data'] == {'a': '1'}


@pytest.mark.parametrize(('resources', 'said'), [
    # ValidateResourceRequirements (pkg/apis/core/validation/validation.go): quantities compared as amounts
    ({'requests': {'cpu': '2'}, 'limits': {'cpu': '1500m'}},
     'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1500m'),
    ({'requests': {'memory': '-1Mi'}}, 'spec.containers[0].resources.requests[memory]: Invalid value: "-1Mi": must be greater than or equal to 0'),
    # an extended resource cannot be overcommitted: its request is its limit, and a request needs one
    ({'requests': {'nvidia.com/gpu': '1'}, 'limits': {'nvidia.com/gpu': '2'}},
     'spec.containers[0].resources.requests: Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'),
    ({'requests': {'nvidia.com/gpu': '1'}}, 'spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources'),
])
def test_a_container_s_requests_must_fit_its_limits(rest, resources, said):
    reply = rest.post(PODS, pod('sized', containers=[{'name': 'main', 'image': 'busybox:1', 'resources': resources}]))
    assert reply.status == 422 and reply.body['message'] == f'Pod "sized" is invalid: {said}', reply.body


@pytest.mark.parametrize(('resources', 'requests', 'qos'), [
    # SetDefaults_Pod (pkg/apis/core/v1/defaults.go): an unset request is its limit; ComputePodQOS names the class
    ({}, None, 'BestEffort'),
    ({'limits': {'cpu': '1', 'memory': '1Gi', 'nvidia.com/gpu': '1'}}, {'cpu': '1', 'memory': '1Gi', 'nvidia.com/gpu': '1'}, 'Guaranteed'),
    ({'requests': {'cpu': '500m'}, 'limits': {'cpu': '1', 'memory': '1Gi'}}, {'cpu': '500m', 'memory': '1Gi'}, 'Burstable'),
    ({'requests': {'memory': '1Gi'}}, {'memory': '1Gi'}, 'Burstable'),
])
def test_a_pod_s_requests_default_to_its_limits_and_its_qos_class_follows(rest, resources, requests, qos):
    created = rest.post(PODS, pod('classed', containers=[{'name': 'main', 'image': 'busybox:1', 'resources': resources}])).body
    assert created['spec']['containers'][0]['resources'].get('requests') == requests and created['status']['qosClass'] == qos, created


NETPOLS = '/apis/networking.k8s.io/v1/namespaces/default/networkpolicies'


def networkpolicy(name: str = 'np', **spec) -> dict:
    """What kuberl renders for a job of two processes per pod (render.render_networkpolicy), `spec` fields replaced."""
    from kuberl.core import render, rules
    job = make_job('np').workers(2).replace(procsPerWorker=2).obj()
    rendered = render.render_networkpolicy(render.Job('np', rules.parse_spec(job['spec'])), 'default')
    rendered['metadata'] = {'name': name}
    rendered['spec'].update(spec)
    return rendered


@pytest.mark.parametrize(('ports', 'peer', 'field', 'words'), [
    ([{'protocol': 'TCP', 'endPort': 9091}], None, 'spec.ingress[1].ports[0].endPort', 'may not be specified when `port` is not specified'),
    ([{'protocol': 'TCP', 'port': 9091, 'endPort': 9090}], None, 'spec.ingress[1].ports[0].endPort', 'must be greater than or equal to `port`'),
    ([{'protocol': 'TCP', 'port': 'metrics-0', 'endPort': 9091}], None, 'spec.ingress[1].ports[0].endPort', 'non-numeric'),
    ([{'protocol': 'TCP', 'port': 70000}], None, 'spec.ingress[1].ports[0].port', 'must be between 1 and 65535, inclusive'),
    ([{'protocol': 'tcp', 'port': 9090}], None, 'spec.ingress[1].ports[0].protocol', 'Unsupported value: "tcp"'),
    (None, {}, 'spec.ingress[1].from[0]', 'Required value: must specify a peer'),
    (None, {'ipBlock': {'cidr': '10.0.0.0/8'}, 'podSelector': {}}, 'spec.ingress[1].from[0]', 'may not specify both ipBlock'),
    (None, {'ipBlock': {'cidr': '10.0.0.0/8', 'except': ['10.0.0.0/8']}}, 'spec.ingress[1].from[0].ipBlock.except[0]', 'strict subset'),
    (None, {'namespaceSelector': {'matchExpressions': [{'key': 'team', 'operator': 'In'}]}},
     'spec.ingress[1].from[0].namespaceSelector.matchExpressions[0].values', "when `operator` is 'In' or 'NotIn'"),
])
def test_a_networkpolicy_the_api_server_refuses_is_refused_on_create_and_on_patch(rest, ports, peer, field, words):
    """ValidateNetworkPolicySpec (pkg/apis/networking/validation/validation.go: ValidateNetworkPolicyPort,
    ValidateNetworkPolicyPeer, ValidateIPBlock), run again on every update (ValidateNetworkPolicyUpdate): the operator
    creates each job's NetworkPolicy and corrects it with a merge patch of its own making."""
    assert rest.post(NETPOLS, networkpolicy()).status == 201, 'what kuberl renders passes'
    gang, metrics = networkpolicy()['spec']['ingress']  # the gang's own rule, and the scrapers'
    rules = [gang, {'from': [peer] if peer is not None else metrics['from'], 'ports': ports if ports is not None else metrics['ports']}]
    created = rest.post(NETPOLS, networkpolicy('bad', ingress=rules))
    assert created.status == 422 and field in fields_of(created) and words in created.message, created.body
    patched = rest.patch(f'{NETPOLS}/np', {'spec': {'ingress': rules}})
    assert patched.status == 422 and field in fields_of(patched) and words in patched.message, patched.body


def fields_of(reply) -> list[str]:
    return [cause['field'] for cause in reply.body['details']['causes']]


def test_a_paged_list_is_served_at_its_first_pages_revision_until_that_is_compacted(rest, standin):
    """A list in pages (limit, continue) reads every page at the first page's revision, so a change between pages
    does not show (etcd3/store.go GetList; the token as storage/continue.go writes it: base64url JSON of the API
    version, that revision and the key to go on from). Once compaction passes that revision the next page is 410
    Expired, with compactedContinue's message and a token for the rest at the latest revision; a token the server
    did not write is a 400 in DecodeContinue's words, as is a resourceVersion beside one."""
    for name in ('a', 'b', 'c', 'd', 'e'):
        assert rest.post(PODS, pod(name)).status == 201
    first = rest.get(f'{PODS}?limit=2').body
    token = first['metadata']['continue']
    assert [p['metadata']['name'] for p in first['items']] == ['a', 'b'] and first['metadata']['remainingItemCount'] == 3
    assert json.loads(base64.urlsafe_b64decode(token + '=' * (-len(token) % 4))) == {
        'v': 'meta.k8s.io/v1', 'rv': int(first['metadata']['resourceVersion']), 'start': 'default/b\x00'}
    assert rest.delete(f'{PODS}/c').status == 200
    assert rest.post(PODS, pod('f')).status == 201
    assert rest.patch(f'{PODS}/d', {'metadata': {'labels': {'later': '1'}}}).status == 200
    second = rest.get(f'{PODS}?limit=2&continue={token}').body
    assert [p['metadata']['name'] for p in second['items']] == ['c', 'd'], 'the deleted pod is in the snapshot'
    assert second['items'][1]['metadata'].get('labels') in (None, {}), 'and the patched one as it was'
    assert second['metadata']['resourceVersion'] == first['metadata']['resourceVersion']
    last = rest.get(f"{PODS}?limit=2&continue={second['metadata']['continue']}").body
    assert [p['metadata']['name'] for p in last['items']] == ['e'] and 'continue' not in last['metadata'], 'f came later'

    standin.store.history_floor[('', 'pods')] = standin.store.revision  # etcd compacted past the token's revision
    expired = rest.get(f"{PODS}?limit=2&continue={second['metadata']['continue']}")
    assert expired.status == 410 and expired.body['reason'] == 'Expired', expired.body
    assert expired.body['message'].startswith('The provided continue parameter is too old to display a consistent list')
    rest_of_it = rest.get(f"{PODS}?limit=5&continue={expired.body['metadata']['continue']}").body
    assert [p['metadata']['name'] for p in rest_of_it['items']] == ['e', 'f'], 'the inconsistent remainder, at the latest'

    garbage = rest.get(f'{PODS}?limit=2&continue=not-a-token')
    assert garbage.status == 400 and garbage.body['message'].startswith('invalid continue token: continue key is not valid')
    climbing = base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":5,"start":"../secrets/x"}').decode().rstrip('=')
    assert rest.get(f'{PODS}?limit=2&continue={climbing}').body['message'] == \
        'invalid continue token: continue key is not valid: ../secrets/x'
    pinned = rest.get(f'{PODS}?limit=2&resourceVersion=3&continue={token}')
    assert pinned.status == 400 and pinned.body['message'] == 'specifying resource version is not allowed when using continue'


def test_a_page_filled_by_its_last_match_still_carries_a_token_and_only_an_unfiltered_list_counts_the_rest(rest):
    """etcd3/store.go GetList takes hasMore from etcd's range before the selectors filter it: a page that fills up
    with keys still after it (matching or not) carries a continue token, and its next page may be empty; it sets
    remainingItemCount only when the predicate is empty (the range's count includes keys a selector drops)."""
    for name, labels in (('a', {'x': '1'}), ('b', {'x': '1'}), ('c', {}), ('d', {})):
        assert rest.post(PODS, pod(name, labels)).status == 201
    first = rest.get(f'{PODS}?labelSelector=x&limit=2').body
    assert [p['metadata']['name'] for p in first['items']] == ['a', 'b']
    assert 'continue' in first['metadata'] and 'remainingItemCount' not in first['metadata'], first['metadata']
    rest_of_it = rest.get(f"{PODS}?labelSelector=x&limit=2&continue={first['metadata']['continue']}").body
    assert rest_of_it['items'] == [] and 'continue' not in rest_of_it['metadata']
    unfiltered = rest.get(f'{PODS}?limit=3').body['metadata']
    assert unfiltered['remainingItemCount'] == 1 and 'continue' in unfiltered
    assert 'continue' not in rest.get(f'{PODS}?limit=4').body['metadata'], 'a page that takes the last key has no token'


def test_a_continue_token_from_a_revision_the_store_has_not_reached_is_a_504_too_large_resource_version(rest):
    """etcd refuses a read at a future revision (ErrFutureRev); store.go's GetList answers it with
    storage.NewTooLargeResourceVersionError: apierrors.NewTimeoutError's 504 and a ResourceVersionTooLarge cause,
    which client-go's IsTooLargeResourceVersion reads. A stand-in serving today's objects hid a forged token."""
    for name in ('a', 'b', 'c'):
        assert rest.post(PODS, pod(name)).status == 201
    current = int(rest.get(f'{PODS}?limit=1').body['metadata']['resourceVersion'])
    future = base64.urlsafe_b64encode(json.dumps(
        {'v': 'meta.k8s.io/v1', 'rv': current + 10, 'start': 'default/a\x00'}).encode()).decode().rstrip('=')
    reply = rest.get(f'{PODS}?limit=1&continue={future}')
    assert reply.status == 504 and reply.body['reason'] == 'Timeout', reply.body
    assert reply.body['message'] == f'Timeout: Too large resource version: {current + 10}, current: {current}'
    assert reply.body['details']['causes'] == [{'reason': 'ResourceVersionTooLarge', 'message': 'Too large resource version'}]


def test_a_list_at_a_resource_version_reads_as_its_match_says(rest, standin):
    """resourceVersion on a list (api-concepts "Semantics for get and list"): Exact, and the legacy form with a limit
    (etcd3/store.go GetList: `case "": … Limit > 0 && *fromRV > 0`), read at that revision, 410 once it is
    compacted (interpretListError: "…for the provided list is too old."); NotOlderThan and the legacy form without a
    limit read the latest; past the store's revision either is 504 Too large resource version."""
    assert rest.post(PODS, pod('a')).status == 201
    then = rest.get(PODS).body['metadata']['resourceVersion']
    assert rest.post(PODS, pod('b')).status == 201
    def names(reply):
        return [p['metadata']['name'] for p in reply.body['items']]

    exact = rest.get(f'{PODS}?resourceVersion={then}&resourceVersionMatch=Exact')
    assert names(exact) == ['a'] and exact.body['metadata']['resourceVersion'] == then
    assert names(rest.get(f'{PODS}?resourceVersion={then}&limit=5')) == ['a'], 'the legacy form with a limit is exact'
    assert names(rest.get(f'{PODS}?resourceVersion={then}&resourceVersionMatch=NotOlderThan')) == ['a', 'b']
    assert names(rest.get(f'{PODS}?resourceVersion={then}')) == ['a', 'b'], 'without a limit: not older than'
    future = int(then) + 100
    too_large = rest.get(f'{PODS}?resourceVersion={future}&resourceVersionMatch=NotOlderThan')
    assert too_large.status == 504 and too_large.body['message'].startswith(f'Timeout: Too large resource version: {future}')
    standin.store.history_floor[('', 'pods')] = standin.store.revision
    gone = rest.get(f'{PODS}?resourceVersion={then}&resourceVersionMatch=Exact')
    assert gone.status == 410 and gone.body['message'] == 'The resourceVersion for the provided list is too old.'


@pytest.mark.parametrize(('rv', 'unmarshal'), [('true', 'bool'), ('1' + '0' * 30, 'number 1' + '0' * 30)])
def test_a_continue_token_whose_revision_go_cannot_read_is_a_400(rest, rv, unmarshal):
    """DecodeContinue unmarshals the token into an int64 field (storage/continue.go): true or a number past int64
    is encoding/json's error, a 400; Python's json reads them as 1 and as a number of any size."""
    token = base64.urlsafe_b64encode(f'{{"v":"meta.k8s.io/v1","rv":{rv},"start":"default/a"}}'.encode()).decode()
    reply = rest.get(f"{PODS}?limit=1&continue={token.rstrip('=')}")
    assert reply.status == 400 and reply.body['message'] == ('invalid continue token: continue key is not valid: json: '
                                                             f'cannot unmarshal {unmarshal} into Go struct field continueToken.rv of type int64')


def test_a_resource_version_of_other_digits_is_no_revision_and_no_crash(rest):
    """'²' is a digit to Python's str.isdigit() and not to int(): the stand-in answered a 500 from its own error. The
    real server's versioner refuses a resourceVersion ParseUint cannot read; the stand-in still lists at the latest
    (a leniency said in the stop-56 note), so what is held here is only that it is no stand-in failure."""
    assert rest.post(PODS, pod('a')).status == 201
    reply = rest.get(f'{PODS}?resourceVersion=%C2%B2')
    assert reply.status < 500 and 'stand-in error' not in str(reply.body), reply.body


@pytest.mark.parametrize(('query', 'message'), [
    ('resourceVersionMatch=Exact',
     'resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided'),
    ('resourceVersion=0&resourceVersionMatch=Exact',
     'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
    ('resourceVersion=1&resourceVersionMatch=Newest',
     'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""'),
])
def test_list_options_validation_refuses_a_match_it_cannot_honour(rest, query, message):
    """ValidateListOptions (apimachinery meta/internalversion/validation), answered by ListResource as a 422 on
    ListOptions.meta.k8s.io."""
    reply = rest.get(f'{PODS}?{query}')
    assert reply.status == 422 and reply.body['message'] == f'ListOptions.meta.k8s.io "" is invalid: {message}', reply.body
    assert reply.body['details']['kind'] == 'ListOptions' and reply.body['details']['causes'][0]['field'] == 'resourceVersionMatch'
    assert 'name' not in reply.body['details'], 'metav1.StatusDetails omits an empty name (omitempty)'


def test_a_core_objects_status_details_carry_no_empty_group(rest):
    """metav1.StatusDetails' fields are omitempty: a Pod's 422 or 404 (the core group, "") names no group."""
    invalid = rest.post(PODS, pod('Not_A_Name'))
    assert invalid.status == 422 and invalid.body['details']['kind'] == 'Pod', invalid.body
    assert 'group' not in invalid.body['details'] and invalid.body['details']['name'] == 'Not_A_Name'
    missing = rest.get(f'{PODS}/nobody')
    assert missing.status == 404 and missing.body['details'] == {'name': 'nobody', 'kind': 'pods'}, missing.body


@pytest.mark.parametrize('limit', ['0', '-1', '-9223372036854775808'])
def test_a_limit_of_zero_or_less_lists_everything_in_one_page(rest, limit):
    """store.go pages only when `opts.Predicate.Limit > 0`: a negative limit is no limit, not a slice from the end."""
    for name in ('a', 'b', 'c'):
        assert rest.post(PODS, pod(name)).status == 201
    listed = rest.get(f'{PODS}?limit={limit}').body
    assert [p['metadata']['name'] for p in listed['items']] == ['a', 'b', 'c'] and 'continue' not in listed['metadata']


@pytest.mark.parametrize(('limit', 'why'), [
    ('two', 'invalid syntax'), ('2.0', 'invalid syntax'), ('%202', 'invalid syntax'), ('1_0', 'invalid syntax'),
    ('', 'invalid syntax'), ('9223372036854775808', 'value out of range')])
def test_a_limit_parseint_cannot_read_is_a_400_in_its_words(rest, limit, why):
    """The parameter codec reads limit with strconv.ParseInt(s, 10, 64) (apimachinery runtime/conversion.go,
    Convert_Slice_string_To_int64) and ListResource answers its error as a 400 (endpoints/handlers/get.go), so
    Python's lenient int() (spaces, underscores) must not read it."""
    reply = rest.get(f'{PODS}?limit={limit}')
    text = limit.replace('%20', ' ')
    assert reply.status == 400 and reply.body['message'] == f'strconv.ParseInt: parsing "{text}": {why}', reply.body
