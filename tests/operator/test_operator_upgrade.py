"""An operator upgrade that adds a rule weighing a job against its own resources (the replay buffer against the pod's
memory limit, rules.replay_memory_problems) must not fail the jobs an older operator admitted and runs: the new
operator failed such a job, InvalidSpec, at its first reconcile, and deleted its gang. The older operator is this one
with that rule taken out (`OLDER`), as every release before the rule was."""
import pathlib

from kuberl.core import jobstatus

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


def started_by_the_older_operator(standin, rest, tmp_path: pathlib.Path, name: str) -> None:
    older = Operator(standin, tmp_path / 'older', '--trainer-image', TRAINER_IMAGE, preload=OLDER)
    (tmp_path / 'older').mkdir()
    older.start()
    try:
        reply = rest.post(JOBS, pong(name))
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
