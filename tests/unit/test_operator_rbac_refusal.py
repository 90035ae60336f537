"""The operator's one line when RBAC refuses kopf's own list or watch: what to grant, to whom, where."""
import logging

import pytest
from kuberl.operator.config import (
    WatchedNamespaces,
    kopf_refusal_line,
    namespace_refusal_line,
    rbac_refusal_line,
    refused_finalizer_patch,
    refused_namespace,
)
from kuberl.operator.kubeapi import Forbidden
from kuberl.operator.main import KopfRefusals

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


def test_the_same_refusal_recorded_twice_is_still_a_namespace_refused_not_the_operators_end():
    """kopf's return and the hang watchdog (GoneWatchdog, 10 s on) can both record one refusal: the second saw a
    namespace no longer served and took it for one the operator cannot go on without, and the operator exited 1."""
    watched = WatchedNamespaces(('team-a', 'team-b'))
    assert watched.refuse(refused_namespace(REFUSED_IN_B), REFUSED_IN_B)
    assert watched.refuse(refused_namespace(REFUSED_IN_B), REFUSED_IN_B)
    assert watched.served() == ('team-a',) and list(watched.refused) == ['team-b']


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


FINALIZER_REFUSED = (f'rltrainingjobs.kuberl.dev "j" is forbidden: User "{SA}" cannot patch resource "rltrainingjobs" in API group'
                     ' "kuberl.dev" in the namespace "team"')


def kopf_record(name: str, message: str, error: BaseException | None = None) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, (), (type(error), error, None) if error else None)


def test_kopfs_refused_finalizer_patch_is_one_line_per_window_and_its_attempts_are_left_out():
    from kopf._cogs.clients.errors import (
        APIForbiddenError,  # what kopf's own client raises
    )

    now = [0.0]
    refusals = KopfRefusals(lambda message: kopf_refusal_line(message, 'kuberl.dev/operator', namespaced=False), clock=lambda: now[0])
    error = APIForbiddenError({'message': FINALIZER_REFUSED, 'code': 403}, status=403, headers={})
    attempt = kopf_record('kopf.objects', f'Request attempt #1/4 failed; will retry: PATCH /x -> {error!r}')
    assert not refusals.filter(attempt)
    throttled = kopf_record('kopf.objects', 'Throttling for 1 seconds due to an unexpected error: %r', error)
    assert refusals.filter(throttled) and throttled.exc_info is None
    line = throttled.getMessage()
    assert line.startswith('RBAC forbids the operator to patch rltrainingjobs.kuberl.dev "j" in namespace "team"'), line
    assert 'in the ClusterRole bound to it' in line and 'finalizer kuberl.dev/operator' in line, line
    now[0] = 599.0
    assert not refusals.filter(kopf_record('kopf.objects', 'Throttling again: %r', error))
    now[0] = 601.0
    assert refusals.filter(kopf_record('kopf.objects', 'Throttling again: %r', error))


def test_other_records_pass_as_they_are():
    from kopf._cogs.clients.errors import APIForbiddenError

    refusals = KopfRefusals(lambda message: kopf_refusal_line(message, 'kuberl.dev/operator', namespaced=False))
    ours = Forbidden(403, 'Forbidden', FINALIZER_REFUSED)  # a handler's own call: said on the job, not here
    watch = APIForbiddenError({'message': FINALIZER_REFUSED, 'code': 403}, status=403, headers={})
    for record in (kopf_record('kopf.objects', "Daemon 'reconcile' failed", ours),
                   kopf_record('kopf._core.reactor.running', 'Root task failed', watch),  # a watch: the run's end says it
                   kopf_record('kuberl.operator', 'ours', watch),
                   kopf_record('kopf.objects', 'Request attempt #1/4 failed; will retry: GET /x -> APIServerError(500)')):
        before = (record.msg, record.exc_info)
        assert refusals.filter(record) and (record.msg, record.exc_info) == before, record


def test_the_lines_said_of_refused_jobs_are_forgotten_once_their_window_is_past():
    """kopf's finalizer patch names the job, so each job refused is a line of its own: the record of when each
    was said grew by one per job name for the operator's life (a tenant creating jobs in a loop while the grant
    is missing); a line past its window is forgotten, as it would be said again anyway."""
    from kopf._cogs.clients.errors import APIForbiddenError

    now = [0.0]
    refusals = KopfRefusals(lambda message: kopf_refusal_line(message, 'kuberl.dev/operator', namespaced=False), clock=lambda: now[0])
    for i in range(3000):
        now[0] = i * 1.0  # one new job a second, for five windows
        error = APIForbiddenError({'message': FINALIZER_REFUSED.replace('"j"', f'"job-{i}"'), 'code': 403}, status=403, headers={})
        assert refusals.filter(kopf_record('kopf.objects', 'Throttling: %r', error))
    assert len(refusals.said) <= 2 * 600, len(refusals.said)


def test_a_refused_finalizer_patch_names_its_namespace_and_job():
    """What handlers.FinalizerRecheck asks about again: only kopf's patch of a job (its finalizer)."""
    patch = (f'rltrainingjobs.kuberl.dev "j" is forbidden: User "{SA}" cannot patch resource "rltrainingjobs" in API group'
             ' "kuberl.dev" in the namespace "team"')
    assert refused_finalizer_patch(patch) == ('team', 'j')
    assert refused_finalizer_patch(patch.replace('cannot patch', 'cannot get')) is None
    assert refused_finalizer_patch(patch.replace('rltrainingjobs.kuberl.dev "j"', 'rltrainingjobs.kuberl.dev')) is None
    assert refused_finalizer_patch(f'pods "p" is forbidden: User "{SA}" cannot patch resource "pods" in API group ""'
                                   ' in the namespace "team"') is None
