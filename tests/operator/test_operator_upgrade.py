"""An operator upgrade that adds a rule weighing a job against its own resources (the replay buffer against the pod's
memory limit, rules.replay_memory_problems) must not fail the jobs an older operator admitted and runs: the new
operator failed such a job, InvalidSpec, at its first reconcile, and deleted its gang. The older operator is this one
with that rule taken out (`OLDER`), as every release before the rule was."""
import pathlib

from kuberl.core import jobstatus, rules

from tests.operator.operatorkit import (
    JOBS,
    TRAINER_IMAGE,
    Operator,
    condition,
    events,
    manifest,
    pods,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
)

OLDER = 'import kuberl.core.replaymemory as weighing\nweighing.spec_problem = lambda spec, replay: None'
BUFFER = 'spec.dqn.bufferSize'


def pong(name: str, memory: str = '4Gi') -> dict:
    """SB3's Atari buffer, 1,000,000 transitions (6.6 GiB a rank), in a pod of 4Gi: refused by today's rule."""
    job = manifest(name, workers=1, algorithm='dqn', env={'id': 'ALE/Pong-v5', 'numEnvs': 8}, totalTimesteps=10_000_000,
                   dqn={'bufferSize': 1_000_000, 'learningStarts': 1000, 'batchSize': 32},
                   resources={'limits': {'memory': memory}})
    job['spec'].pop('ppo', None)
    return job


def started_by_the_older_operator(standin, rest, tmp_path: pathlib.Path, name: str, job: dict | None = None,
                                  preload: str = OLDER) -> None:
    older = Operator(standin, tmp_path / 'older', '--trainer-image', TRAINER_IMAGE, preload=preload)
    (tmp_path / 'older').mkdir()
    older.start()
    try:
        reply = rest.post(JOBS, job or pong(name))
        assert reply.status == 201, reply.body
        start_gang(standin, name, 1)
        wait_phase(rest, name, 'Running')
    finally:
        older.stop()


def test_a_job_the_older_operator_admitted_runs_on_and_restarts_under_the_new_one_which_says_why(standin, rest, tmp_path):
    started_by_the_older_operator(standin, rest, tmp_path, 'admitted')
    (tmp_path / 'newer').mkdir()
    newer = Operator(standin, tmp_path / 'newer', '--trainer-image', TRAINER_IMAGE).start()
    try:
        wait_for(lambda: condition(rest, 'admitted', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES),
                 what='the new operator to say the job runs under older rules', explain=lambda: status(rest, 'admitted'))
        said = condition(rest, 'admitted', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES)
        assert said['status'] == 'True' and BUFFER in said['message'], said
        assert status(rest, 'admitted')['phase'] == 'Running', status(rest, 'admitted')
        assert len(pods(standin, 'admitted', 0)) == 1, 'the running gang is kept'
        # kopf posts Events from a queue of its own, after the status write: waited for
        warned = wait_for(lambda: [e for e in events(rest, 'admitted') if e['reason'] == jobstatus.REASON_ADMITTED_UNDER_OLDER_RULES],
                          what='the Warning Event', explain=lambda: events(rest, 'admitted'))
        assert warned[0]['type'] == 'Warning' and BUFFER in warned[0]['message'], warned
        # a crash restarts the gang, which resumes from its checkpoint: the admission holds for every generation
        terminated(standin, pods(standin, 'admitted', 0)[0], 1, 'Error: a crash')
        start_gang(standin, 'admitted', 1, generation=1)
        wait_phase(rest, 'admitted', 'Running')
        # an edit that leaves what the rule weighs as it was keeps the admission: suspend, then resume
        assert rest.patch(f'{JOBS}/admitted', {'spec': {'runPolicy': {'suspend': True}}}).status == 200
        wait_phase(rest, 'admitted', 'Suspended')
        assert rest.patch(f'{JOBS}/admitted', {'spec': {'runPolicy': {'suspend': False}}}).status == 200
        start_gang(standin, 'admitted', 1, generation=2)
        wait_phase(rest, 'admitted', 'Running')
        # a new job like it meets today's rule
        reply = rest.post(JOBS, pong('fresh'))
        assert reply.status == 201, reply.body
        failed = wait_phase(rest, 'fresh', 'Failed')
        assert BUFFER in condition(rest, 'fresh', 'Failed')['message'], failed
        # and so does an edit of what the rule weighs: a smaller memory limit is judged anew, and refused
        assert rest.patch(f'{JOBS}/admitted', {'spec': {'resources': {'limits': {'memory': '2Gi'}}}}).status == 200
        wait_phase(rest, 'admitted', 'Failed')
        assert BUFFER in condition(rest, 'admitted', 'Failed')['message'], status(rest, 'admitted')
        assert not condition(rest, 'admitted', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES), 'it no longer runs on'
    finally:
        newer.stop()


def test_a_spec_the_schema_refuses_is_refused_whatever_its_status_says(standin, rest, tmp_path):
    """Only the weighing rules ratchet: a status that claims this generation was admitted (written by an older
    operator, or forged by whoever may write status) lets no other rule's refusal through."""
    started_by_the_older_operator(standin, rest, tmp_path, 'forged')
    # an older operator's admission of a spec today's operator refuses for another reason: its pod security
    reply = rest.patch(f'{JOBS}/forged', {'spec': {'template': {'spec': {'hostNetwork': True}}}})
    assert reply.status == 200, reply.body
    generation = reply.body['metadata']['generation']
    assert rest.patch(f'{JOBS}/forged/status', {'status': {'observedGeneration': generation}}).status == 200
    (tmp_path / 'newer').mkdir()
    newer = Operator(standin, tmp_path / 'newer', '--trainer-image', TRAINER_IMAGE).start()
    try:
        wait_phase(rest, 'forged', 'Failed')
        assert condition(rest, 'forged', 'Failed')['reason'] == 'PodSecurity', status(rest, 'forged')
    finally:
        newer.stop()


def test_an_admission_written_with_the_job_on_create_admits_nothing(standin, rest, tmp_path):
    """A status is the operator's to write: the API server drops one sent with the object on create (the status
    subresource's strategy: apiextensions-apiserver pkg/registry/customresource/strategy.go, PrepareForCreate), and the chart's edit role reads rltrainingjobs/status only. A job
    that claims, on create, to have been admitted with its buffer is judged as the new job it is."""
    job = pong('claims')
    weighed = jobstatus.admission(job, rules.validate_job(job, ratchet=lambda *_: True)).record['weighed']
    job['status'] = {'phase': 'Running', 'observedGeneration': 1, 'admitted': {'generation': 1, 'weighed': weighed}}
    created = rest.post(JOBS, job)
    assert created.status == 201 and 'status' not in created.body, created.body
    (tmp_path / 'newer').mkdir()
    newer = Operator(standin, tmp_path / 'newer', '--trainer-image', TRAINER_IMAGE).start()
    try:
        failed = wait_phase(rest, 'claims', 'Failed')
        assert BUFFER in condition(rest, 'claims', 'Failed')['message'], failed
        assert not condition(rest, 'claims', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES) and not pods(standin, 'claims')
    finally:
        newer.stop()


# A cross-field rule (CEL in the CRD, Python in the operator) that a newer kuberl adds: the older kuberl is this one
# without it, in its CRD and in its operator.
CROSS = 'spec.labels'
OLDER_CROSS = ("import kuberl.core.rules as rules\n"
               "rules.CROSS_FIELD_RULES[:] = [r for r in rules.CROSS_FIELD_RULES if r.field_path != '.labels']")
QUEUE_LABEL = 'kueue.x-k8s.io/queue-name'


def queued(name: str, queue: str = 'team-a') -> dict:
    """Kueue's queue label on the pods without spec.queueName: refused by today's rule (each pod queued alone)."""
    return manifest(name, workers=1, labels={QUEUE_LABEL: queue})


CRD = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rltrainingjobs.kuberl.dev'


def spec_rules(rest) -> list[dict]:
    return rest.get(CRD).body['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']['x-kubernetes-validations']


def put_crd(rest, rules: list[dict]) -> None:
    """The installed CRD with `rules` at spec: today's, or the older ones."""
    crd = rest.get(CRD).body
    crd['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']['x-kubernetes-validations'] = rules
    assert rest.put(CRD, crd).status == 200


def test_a_job_an_older_cross_field_rule_admitted_runs_on_through_the_edits_the_api_server_lets_through(standin, rest, tmp_path):
    """The API server ratchets the CRD's rules on an unchanged value (KEP-4008; the stand-in as
    apiextensions-apiserver's ratcheting.go and schema/cel/validation.go do it): kuberl's cross-field rules sit at
    spec, so a label's edit, and the operator's own status writes, pass; an edit anywhere in the spec (a suspend)
    meets the rule there. Where the CRD is older than the operator (a release whose CRD is its cluster admin's), the
    operator is the only judge and ratchets each rule until what it reads changes."""
    today = spec_rules(rest)
    older = [rule for rule in today if rule.get('fieldPath') != '.labels']
    put_crd(rest, older)
    started_by_the_older_operator(standin, rest, tmp_path, 'lagged', queued('lagged'), OLDER_CROSS)
    put_crd(rest, today)  # the upgrade: today's CRD first, then today's operator
    (tmp_path / 'newer').mkdir()
    newer = Operator(standin, tmp_path / 'newer', '--trainer-image', TRAINER_IMAGE).start()
    try:
        wait_for(lambda: condition(rest, 'lagged', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES),
                 what='the new operator to say the job runs under older rules', explain=lambda: status(rest, 'lagged'))
        assert CROSS in condition(rest, 'lagged', jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES)['message']
        assert status(rest, 'lagged')['phase'] == 'Running' and len(pods(standin, 'lagged', 0)) == 1
        relabelled = rest.patch(f'{JOBS}/lagged', {'metadata': {'labels': {'team': 'rl'}}})
        assert relabelled.status == 200 and CROSS in relabelled.headers.get('Warning', ''), relabelled.body
        # the API server judges an edited spec by today's CRD: the suspend is refused, naming the field
        refused = rest.patch(f'{JOBS}/lagged', {'spec': {'runPolicy': {'suspend': True}}})
        assert refused.status == 422 and CROSS in refused.message, refused.body
        assert rest.post(JOBS, queued('fresh')).status == 422
        # with the older CRD the server lets the suspend through, and the operator keeps the job's admission
        put_crd(rest, older)
        assert rest.patch(f'{JOBS}/lagged', {'spec': {'runPolicy': {'suspend': True}}}).status == 200
        wait_phase(rest, 'lagged', 'Suspended')
        assert rest.patch(f'{JOBS}/lagged', {'spec': {'runPolicy': {'suspend': False}}}).status == 200
        start_gang(standin, 'lagged', 1, generation=1)
        wait_phase(rest, 'lagged', 'Running')
        # an edit of what the rule reads meets it
        assert rest.patch(f'{JOBS}/lagged', {'spec': {'labels': {QUEUE_LABEL: 'team-b'}}}).status == 200
        wait_phase(rest, 'lagged', 'Failed')
        assert CROSS in condition(rest, 'lagged', 'Failed')['message'], status(rest, 'lagged')
    finally:
        newer.stop()
