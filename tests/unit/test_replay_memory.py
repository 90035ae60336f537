"""A rank's replay buffer (DQN's, SAC's) is weighed by one formula (kuberl.core.replaymemory) against the memory
its pod gives it: by the trainer at start, before the buffer is made (reading its cgroup), and by `kuberl validate`
and the operator before any pod (reading the spec's limit). A buffer numpy had only reserved was OOM-killed once it
filled, hours in, and the gang restarted into the same end, with no message naming spec.<algorithm>.bufferSize."""

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from kuberl import cli
from kuberl.core import (
    contract,
    jobstatus,
    lifecycle,
    names,
    replaymemory,
    rules,
    trainerconfig,
)
from kuberl.core.replaymemory import GIB, Replay
from kuberl.core.spec import DQNConfig, SACConfig, TD3Config
from kuberl_trainer import budget
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.replay import ReplayBuffer
from kuberl_trainer.sac import SACTrainer
from kuberl_trainer.td3 import TD3Trainer

from tests.support.jobs import make_job


def allocated(buffer: ReplayBuffer) -> int:
    """Every numpy array the buffer holds, whatever the formula names."""
    return sum(value.nbytes for value in vars(buffer).values() if isinstance(value, np.ndarray))


def one_process(cgroup: str = "/sys/fs/cgroup", procs: int = 1) -> Dist:
    return Dist(0, procs, 0, procs, torch.device("cpu"), None, cgroup=str(cgroup))


# --- the formula is the buffer's own -------------------------------------------------------------------


def test_a_dqn_trainers_vector_buffer_is_the_formulas_bytes():
    hp = DQNConfig(buffer_size=10_001)
    trainer = DQNTrainer(one_process(), hp, "CartPole-v1", 4, {}, 10**6, 1, 0)
    planned = replaymemory.for_algorithm("dqn", hp, 4, (4,), "float32", ())
    assert allocated(trainer.replay) == planned.nbytes == 2501 * 4 * (16 + 8 + 4 + 4) + 4  # rows rounded up to envs


def test_a_sac_trainers_buffer_is_the_formulas_bytes():
    hp = SACConfig(buffer_size=4_000, learning_starts=100, batch_size=64)
    trainer = SACTrainer(one_process(), hp, "Pendulum-v1", 3, {}, 10**6, 1, 0)
    planned = replaymemory.for_algorithm("sac", hp, 3, (3,), "float32", (1,))
    assert allocated(trainer.replay) == planned.nbytes == 1334 * 3 * (12 + 4 + 4 + 4) + 3


def test_a_td3_trainers_buffer_is_the_formulas_bytes_and_too_large_a_one_is_refused_naming_its_field(tmp_path):
    hp = TD3Config(buffer_size=4_000, learning_starts=100, batch_size=64)
    trainer = TD3Trainer(one_process(), hp, "Pendulum-v1", 3, {}, 10**6, 1, 0)
    planned = replaymemory.for_algorithm("td3", hp, 3, (3,), "float32", (1,))
    assert allocated(trainer.replay) == planned.nbytes == 1334 * 3 * (12 + 4 + 4 + 4) + 3
    (tmp_path / "memory.max").write_text(str(4 * GIB))
    with pytest.raises(budget.BufferTooLarge, match=r"^spec\.td3\.bufferSize: .* shared by the pod's 4 ranks"):
        TD3Trainer(one_process(tmp_path, procs=4), TD3Config(buffer_size=40_000_000), "Pendulum-v1", 2, {}, 10**9, 1, 0)


@pytest.mark.parametrize("planned", [
    Replay(5000, 3, (4, 84, 84), "uint8", (), "int64", 3, 4),  # Atari frame stacks: one frame stored a transition
    Replay(640, 8, (1, 84, 84), "uint8", (), "int64", 1, 1),  # frameStack 1: the whole (1, 84, 84)
    Replay(7, 4, (2,), "float64", (), "int64", 5, 1),  # fewer rows than an n-step window needs: the window's
    Replay(100, 2, (5,), "uint8", (2,), "float32", 1, 1),  # a flattened one-hot (uint8), SAC's action vectors
])
def test_a_buffers_arrays_are_the_formulas(planned):
    buffer = ReplayBuffer.of(planned)
    assert allocated(buffer) == planned.nbytes == buffer.nbytes
    assert {name: (a.shape, a.dtype.name) for name, a in vars(buffer).items() if isinstance(a, np.ndarray)} == planned.layout()


def test_an_atari_transition_is_one_frame_whatever_the_stack():
    """The Pong DQN example (manifests/examples/pong-dqn-gpu.yaml): 250,000 per rank over 32 envs is 7,813 rows."""
    for stack in (1, 4, 16):
        assert Replay(32, 32, (stack, 84, 84), "uint8", (), "int64", 3, stack).describe().startswith("7,072 bytes per transition")
    assert Replay(250_000, 32, (4, 84, 84), "uint8", (), "int64", 3, 4).nbytes == 7813 * 32 * 7072 + 32


def test_the_largest_buffer_within_a_budget_fits_and_one_row_more_does_not():
    planned = Replay(10**6, 8, (4, 84, 84), "uint8", (), "int64", 3, 4)
    fits = planned.largest_within(GIB)
    assert fits % 8 == 0 and Replay(fits, 8, (4, 84, 84), "uint8", (), "int64", 3, 4).nbytes <= GIB
    assert Replay(fits + 8, 8, (4, 84, 84), "uint8", (), "int64", 3, 4).nbytes > GIB
    assert planned.largest_within(1000) == 0  # not even an n-step window's rows


# --- the trainer, at start, reading its cgroup ---------------------------------------------------------


@pytest.fixture(autouse=True)
def a_trainers_resident_memory(monkeypatch):
    """What the rank holds already is subtracted from its share: a pytest worker that ran many tests held 0.98 GiB
    (CI failed a 1 GiB limit on it), a trainer process ~300 MiB (measured). These tests fix it at the latter."""
    monkeypatch.setattr(budget, "resident_bytes", lambda: 300 * 2**20)


@pytest.mark.parametrize("file", ["memory.max", "memory/memory.limit_in_bytes"])  # cgroup v2, v1
def test_the_trainer_refuses_a_buffer_over_its_cgroups_limit_naming_the_field(tmp_path, file):
    (tmp_path / file).parent.mkdir(exist_ok=True)
    (tmp_path / file).write_text(f"{2 * GIB}\n")
    with pytest.raises(budget.BufferTooLarge) as refused:  # 100M CartPole transitions: 3.0 GiB
        DQNTrainer(one_process(tmp_path), DQNConfig(buffer_size=100_000_000), "CartPole-v1", 8, {}, 10**9, 1, 0)
    message = str(refused.value)
    assert message.startswith("spec.dqn.bufferSize: a replay buffer of 100,000,000 transitions of CartPole-v1 takes"
                              " 3.0 GiB per rank, more than the "), message
    assert "(2.0 GiB of memory, the container's limit or else the machine's, less the " in message
    assert "; 32 bytes per transition (a (4,) float32 observation, its action, reward and flags)); at most " in message
    fits = int(message.split("; at most ")[1].split(" ")[0].replace(",", ""))
    assert 0 < fits and Replay(fits, 8, (4,), "float32", (), "int64", 3).nbytes <= 2 * GIB
    assert message.endswith(" would fit: lower spec.dqn.bufferSize or raise the pod's resources.limits.memory"
                            + replaymemory.FILLED_LATER)


def test_the_trainer_divides_its_containers_limit_among_the_pods_processes(tmp_path):
    (tmp_path / "memory.max").write_text(f"{4 * GIB}\n")
    hp = SACConfig(buffer_size=40_000_000)  # Pendulum: 24 bytes a transition, 0.9 GiB
    SACTrainer(one_process(tmp_path), hp, "Pendulum-v1", 2, {}, 10**9, 1, 0)  # fits 4 GiB alone
    with pytest.raises(budget.BufferTooLarge, match=r"^spec\.sac\.bufferSize: .* shared by the pod's 4 ranks"):
        SACTrainer(one_process(tmp_path, procs=4), hp, "Pendulum-v1", 2, {}, 10**9, 1, 0)


def test_under_kuberl_run_every_rank_of_the_run_shares_the_machine(tmp_path, monkeypatch):
    """kuberl run's pods are processes of one machine: 2 pods of 2 processes are 4 ranks on its memory, where
    each pod's 2 alone share a cluster pod's limit."""
    (tmp_path / "memory.max").write_text(f"{4 * GIB}\n")
    hp = SACConfig(buffer_size=40_000_000)  # Pendulum: 24 bytes a transition, 0.9 GiB
    two_of_four = Dist(0, 4, 0, 2, torch.device("cpu"), None, cgroup=str(tmp_path))
    SACTrainer(two_of_four, hp, "Pendulum-v1", 2, {}, 10**9, 1, 0)  # a pod's 4 GiB for 2
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))  # what kuberl run gives its pods
    with pytest.raises(budget.BufferTooLarge, match=r"4\.0 GiB of memory, .*, shared by the run's 4 ranks on this machine \(kuberl run\)"):
        SACTrainer(two_of_four, hp, "Pendulum-v1", 2, {}, 10**9, 1, 0)


class Wide(gym.Env):
    """4 KiB observations: 100,000,000 of them (the largest bufferSize) are 383 GiB, more than any machine here."""

    observation_space = gym.spaces.Box(-1, 1, (1024,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return np.zeros(1024, np.float32), {}

    def step(self, action):
        return np.zeros(1024, np.float32), 0.0, False, False, {}


def test_a_trainer_refusing_its_buffer_exits_with_a_configuration_error_naming_the_field(tmp_path):
    """The pod's path: exit 78 and the reason in the termination log, so the operator fails the job at once
    (ConfigError) instead of restarting the gang into the same end."""
    env = {"id": "tests.unit.test_replay_memory:Wide", "numEnvs": 2}
    spec = make_job().minimal().algorithm("dqn").replace(env=env, totalTimesteps=10**9).with_spec(
        workers=1, dqn={"bufferSize": 100_000_000}).spec()
    config = tmp_path / names.CONFIG_MOUNT_DIR.lstrip("/") / names.CONFIG_FILE
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(trainerconfig.trainer_config("t", "default", "uid", spec)))
    done = subprocess.run([sys.executable, "-m", "kuberl_trainer", "--config", f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"],
                          check=False, env={**os.environ, contract.ENV_FS_ROOT: str(tmp_path)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == contract.EXIT_CONFIG_ERROR, done.stderr
    termination = (tmp_path / names.TERMINATION_LOG.lstrip("/")).read_text()
    assert ("ConfigError: spec.dqn.bufferSize: a replay buffer of 100,000,000 transitions of tests.unit.test_replay_memory:Wide takes"
            " 383.0 GiB per rank") in termination, termination
    assert "4,112 bytes per transition" in termination, termination


def test_no_cgroup_limit_is_the_machines_memory(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    trainer = DQNTrainer(one_process(tmp_path), DQNConfig(buffer_size=100_000), "CartPole-v1", 8, {}, 10**6, 1, 0)
    assert trainer.replay.rows == 12_500


# --- kuberl validate and the operator, before any pod ---------------------------------------------------


def pong_dqn(buffer_size: int, memory: str | None, procs: int = 1, total: int = 10_000_000, **more):
    job = make_job("pong").minimal().algorithm("dqn").replace(env={"id": "ALE/Pong-v5", "numEnvs": 8}, totalTimesteps=total)
    job = job.with_spec(dqn={"bufferSize": buffer_size, "learningStarts": 1000, "batchSize": 32}, procsPerWorker=procs, **more)
    return job.with_spec(resources={"limits": {"memory": memory}}) if memory else job


def validate(tmp_path, capsys, job):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.obj()))
    code = cli.main(["validate", str(path)])
    return code, capsys.readouterr().err


def test_validate_refuses_an_atari_buffer_over_the_pods_limit_naming_the_field(tmp_path, capsys):
    """SB3's Atari bufferSize, 1,000,000 transitions: 6.6 GiB a rank, in a pod of 8Gi for 2 processes."""
    code, err = validate(tmp_path, capsys, pong_dqn(1_000_000, "8Gi", procs=2))
    assert code == 1
    assert ("  spec.dqn.bufferSize: a replay buffer of 1,000,000 transitions of ALE/Pong-v5 takes 6.6 GiB per rank, more"
            " than the 3.8 GiB it may use (spec.resources.limits.memory 8.0 GiB shared by the pod's 2 processes, less the"
            " 256 MiB at least that a rank holds besides (torch, its envs); 7,072 bytes per transition (one (84, 84) uint8"
            " frame of each stack of 4, its action, reward and flags)); at most 569," in err), err
    assert "would fit: lower spec.dqn.bufferSize or raise the pod's resources.limits.memory; it is reserved at start" in err


def test_the_operator_refuses_it_too_without_gymnasium():
    spec, refusal = jobstatus.judge(pong_dqn(1_000_000, "4Gi").obj())
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC
    assert refusal.message.startswith("spec.dqn.bufferSize: a replay buffer of 1,000,000 transitions of ALE/Pong-v5 takes")


@pytest.mark.parametrize("job", [
    pong_dqn(1_000_000, "8Gi"),  # 6.6 GiB of 8
    pong_dqn(1_000_000, None),  # no limit: nothing to weigh against
    pong_dqn(250_000, "4Gi", procs=2),  # 1.6 GiB of 2
    pong_dqn(1_000_000, "32Gi", procs=4),
    pong_dqn(1_000_000, "4Gi", total=200_000),  # the budget fills at most 400,016 transitions: 2.6 GiB
])
def test_a_buffer_that_fits_or_no_limit_is_valid(tmp_path, capsys, job):
    code, err = validate(tmp_path, capsys, job)
    assert code == 0, err


def test_what_is_weighed_is_what_the_budget_can_fill(tmp_path, capsys):
    """numpy takes a page when a row in it is first written: a run whose totalTimesteps ends before its buffer is
    full never holds all of it. A rank writes at most twice its share of the budget in rows (autoreset rows count
    none, and never follow each other), plus an update's."""
    assert replaymemory.budget_rows(200_000, 1, 8, 4) == 50_002
    code, err = validate(tmp_path, capsys, pong_dqn(1_000_000, "2Gi", total=200_000))
    assert code == 1 and ("  spec.dqn.bufferSize: a replay buffer of 1,000,000 transitions of ALE/Pong-v5, of which"
                          " totalTimesteps fills at most 400,016 a rank, takes 2.6 GiB per rank, more than the 1.8 GiB") in err, err


def test_the_trainer_weighs_what_its_budget_can_fill(tmp_path):
    (tmp_path / "memory.max").write_text(f"{GIB}\n")
    trainer = DQNTrainer(one_process(tmp_path), DQNConfig(buffer_size=50_000_000), "CartPole-v1", 8, {}, 10**6, 1, 0)
    assert trainer.replay.rows == 6_250_000  # 1.5 GiB reserved; at most 250,002 rows (61 MB) written
    assert allocated(trainer.replay) == replaymemory.for_algorithm(
        "dqn", trainer.hp, 8, (4,), "float32", (), total_timesteps=10**6).nbytes


def test_the_trainer_containers_resources_in_the_template_are_the_limit(tmp_path, capsys):
    """A template's `trainer` container that sets resources replaces spec.resources (render.merge_template)."""
    template = {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"memory": "2Gi"}}}]}}
    code, err = validate(tmp_path, capsys, pong_dqn(1_000_000, "64Gi").template(template))
    assert code == 1 and "(spec.template.spec.containers[0].resources.limits.memory 2.0 GiB, less the 256 MiB" in err, err
    template = {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"memory": "64Gi"}}}]}}
    code, err = validate(tmp_path, capsys, pong_dqn(1_000_000, "2Gi").template(template))
    assert code == 0, err


def test_validate_weighs_a_gymnasium_envs_spaces_it_makes(tmp_path, capsys):
    """A classic env's spaces cost a millisecond to make here: 100M CartPole transitions are 3.0 GiB."""
    job = make_job("c").minimal().algorithm("dqn").replace(env={"id": "CartPole-v1", "numEnvs": 8}, totalTimesteps=10**9)
    job = job.with_spec(dqn={"bufferSize": 100_000_000}, resources={"limits": {"memory": "2Gi"}})
    code, err = validate(tmp_path, capsys, job)
    assert code == 1 and ("  spec.dqn.bufferSize: a replay buffer of 100,000,000 transitions of CartPole-v1 takes 3.0 GiB"
                          " per rank" in err), err
    assert "32 bytes per transition (a (4,) float32 observation," in err
    code, err = validate(tmp_path, capsys, job.with_spec(resources={"limits": {"memory": "4Gi"}}))
    assert code == 0, err


def test_validate_and_the_trainer_weigh_the_same_bytes_for_an_atari_id():
    """What validate reckons of an Atari id without ale-py is the buffer the trainer makes with it."""
    pytest.importorskip("ale_py")
    hp = DQNConfig(buffer_size=2_000, learning_starts=100, batch_size=32)
    trainer = DQNTrainer(one_process(), hp, "ALE/Pong-v5", 2, {"frameStack": 3}, 10**6, 1, 0)
    job = make_job("p").minimal().algorithm("dqn").replace(env={"id": "ALE/Pong-v5", "numEnvs": 2, "kwargs": {"frameStack": 3}})
    planned = replaymemory.job_replay(job.with_spec(dqn={"bufferSize": 2_000, "learningStarts": 100, "batchSize": 32}).spec())
    assert planned is not None and allocated(trainer.replay) == planned.nbytes


# --- ratcheted across operator upgrades (rules.WEIGHING_RULES, jobstatus.ratchet) ---------------------------


def admitted_before(job: dict, generation: int = 1, phase: str = "Running", **status) -> dict:
    """`job` as an operator left it having admitted its spec `generation` (observedGeneration and a phase no refusal leaves)."""
    job = {**job, "metadata": {**job["metadata"], "uid": "u", "generation": generation}}
    return {**job, "status": {"phase": phase, "observedGeneration": generation, **status}}


def fingerprint_of(job: dict) -> str:
    return next(f for rule, f, _ in rules.weighings(rules.validate_job(job, ratchet=lambda *_: True)) if rule == "replayMemory")


@pytest.mark.parametrize(("case", "admitted"), [
    ("a new job", False),
    ("this generation admitted, by an operator that kept no record", True),
    ("this generation admitted and suspended since", True),
    ("this generation refused (Failed)", False),
    ("an older generation admitted, no record of what it weighed", False),
    ("an older generation admitted, what the rule weighs unchanged since", True),
    ("an older generation admitted, what the rule weighs changed since", False),
])
def test_the_buffer_rule_is_ratcheted_for_a_generation_admitted_or_one_that_left_what_it_weighs_as_it_was(case, admitted):
    job = pong_dqn(1_000_000, "4Gi").obj()
    weighed = {"generation": 1, "weighed": {"replayMemory": fingerprint_of(job)}}
    other = {"generation": 1, "weighed": {"replayMemory": fingerprint_of(pong_dqn(1_000_000, "8Gi").obj())}}
    state = {
        "a new job": {**job, "metadata": {**job["metadata"], "uid": "u", "generation": 1}},
        "this generation admitted, by an operator that kept no record": admitted_before(job),
        "this generation admitted and suspended since": admitted_before(job, phase="Suspended"),
        "this generation refused (Failed)": admitted_before(job, phase="Failed"),
        "an older generation admitted, no record of what it weighed": admitted_before(job, observedGeneration=1, generation=2),
        "an older generation admitted, what the rule weighs unchanged since": admitted_before(job, 2, observedGeneration=1,
                                                                                              admitted=weighed),
        "an older generation admitted, what the rule weighs changed since": admitted_before(job, 2, observedGeneration=1,
                                                                                            admitted=other),
    }[case]
    spec, refusal = jobstatus.judge(state)
    if not admitted:
        assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC and refusal.message.startswith(
            "spec.dqn.bufferSize: a replay buffer"), refusal
        return
    assert refusal is None, refusal
    admission = jobstatus.admission(state, spec)
    assert admission.record == {"generation": state["metadata"]["generation"], "weighed": weighed["weighed"]}
    assert [p.path for p in admission.ratcheted] == ["spec.dqn.bufferSize"]
    written = jobstatus.admitted_status({"conditions": []}, admission, 0.0)
    said = next(c for c in written["conditions"] if c["type"] == jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES)
    assert said["status"] == "True" and "spec.dqn.bufferSize" in said["message"] and len(said["message"]) <= lifecycle.MESSAGE_LIMIT


def test_an_admitted_status_lets_no_other_rule_through():
    """A status can be forged by whoever may write it: only the rules that weigh a job against its own resources ratchet."""
    job = pong_dqn(1_000_000, "4Gi", workers=0).obj()
    spec, refusal = jobstatus.judge(admitted_before(job))
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC
    assert "spec.workers" in refusal.message, refusal.message


def test_a_fitting_buffer_is_recorded_and_says_nothing():
    job = admitted_before(pong_dqn(1_000_000, "8Gi").obj())
    spec, refusal = jobstatus.judge(job)
    admission = jobstatus.admission(job, spec)
    assert refusal is None and admission.ratcheted == ()
    written = jobstatus.admitted_status({"conditions": [{"type": jobstatus.CONDITION_ADMITTED_UNDER_OLDER_RULES}]}, admission, 0.0)
    assert written["conditions"] == [] and written["admitted"]["weighed"]["replayMemory"] == fingerprint_of(job)


# --- cross-field rules, ratcheted the same way (rules.cross_field_failures, jobstatus.ratchet) ----------------------


def queue_labelled(queue: str = "team-a", **spec) -> dict:
    """Kueue's queue label without spec.queueName: the cross-field rule at spec.labels refuses it."""
    return make_job("q").minimal().with_spec(labels={"kueue.x-k8s.io/queue-name": queue}, **spec).obj()


def cross_fingerprint(job: dict, name: str) -> str:
    return next(f for rule, f, _ in rules.cross_field_failures(job["spec"], []) if rule == name)


@pytest.mark.parametrize(("case", "admitted"), [
    ("a new job", False),
    ("this generation admitted (an upgrade added the rule since)", True),
    ("an older generation admitted, what the rule reads unchanged since (a suspend)", True),
    ("an older generation admitted, what the rule reads changed since", False),
    ("an older generation admitted, another rule's record", False),
])
def test_a_cross_field_rule_is_ratcheted_for_a_generation_admitted_or_one_that_left_what_it_reads_as_it_was(case, admitted):
    job = queue_labelled()
    record = {"generation": 1, "weighed": {"spec.labels": cross_fingerprint(job, "spec.labels")}}
    changed = {"generation": 1, "weighed": {"spec.labels": cross_fingerprint(queue_labelled("team-b"), "spec.labels")}}
    another = {"generation": 1, "weighed": {"spec.resources": cross_fingerprint(job, "spec.labels")}}
    state = {
        "a new job": {**job, "metadata": {**job["metadata"], "uid": "u", "generation": 1}},
        "this generation admitted (an upgrade added the rule since)": admitted_before(job),
        "an older generation admitted, what the rule reads unchanged since (a suspend)": admitted_before(job, 2, observedGeneration=1, admitted=record),
        "an older generation admitted, what the rule reads changed since": admitted_before(job, 2, observedGeneration=1, admitted=changed),
        "an older generation admitted, another rule's record": admitted_before(job, 2, observedGeneration=1, admitted=another),
    }[case]
    spec, refusal = jobstatus.judge(state)
    if not admitted:
        assert spec is None and refusal.message.startswith("spec.labels: kueue.x-k8s.io/queue-name"), refusal
        return
    assert refusal is None, refusal
    admission = jobstatus.admission(state, spec)
    assert admission.record["weighed"]["spec.labels"] == record["weighed"]["spec.labels"]
    assert [p.path for p in admission.ratcheted] == ["spec.labels"]


def test_the_record_of_cross_field_rules_stays_within_its_bound(monkeypatch):
    """status.admitted.weighed holds at most ADMITTED_RECORD_LIMIT fingerprints (its maxProperties): a status past it
    would be refused at every write; a rule past the bound ratchets on this generation alone."""
    job = admitted_before(queue_labelled(resources={"limits": {"nvidia.com/gpu": 1}}))
    spec, refusal = jobstatus.judge(job)
    assert refusal is None, refusal
    monkeypatch.setattr(jobstatus, "ADMITTED_RECORD_LIMIT", 2)
    admission = jobstatus.admission(job, spec)
    assert list(admission.record["weighed"]) == ["replayMemory", "spec.resources"]
    assert [p.path for p in admission.ratcheted] == ["spec.resources", "spec.labels"]
