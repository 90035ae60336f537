"""The checkpoint directory is the tenant's (their PVC): whatever sits under a
checkpoint's name is read in bounded time and memory, never deleted unless it
is a file, and a checkpoint for another job's trainer fails loudly."""

import io
import json
import os
import pathlib
import subprocess
import sys
import threading
import zipfile

import numpy as np
import pytest
import torch
from kuberl.core import contract, safetext, trainerconfig
from kuberl_trainer import __main__ as entry
from kuberl_trainer import checkpoint, paths, session
from kuberl_trainer.metrics import TrainerMetrics
from trainer_support import one_process_run

from tests.support.jobs import make_job
from tests.unit.test_trainer_checkpoint import flip_one_bit, ppo_like_state


def newest_name(directory) -> str:
    return str(directory / checkpoint.checkpoint_name(9_999_999_999))


def load_in_a_child(directory, seconds: float = 20.0) -> subprocess.CompletedProcess:
    """load_newest in its own process, under a 2 GiB address-space limit and a deadline:
    a hang or an unbounded read fails the test instead of the test run."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
            "from kuberl_trainer import checkpoint;"
            f"found = checkpoint.load_newest({str(directory)!r});"
            "print('LOADED', found and found[0])")
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=seconds)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_name_that_is_not_a_regular_file_is_skipped_at_once_and_never_deleted(tmp_path, kind):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    hostile = newest_name(tmp_path)
    {"fifo": os.mkfifo, "dev-zero": lambda p: os.symlink("/dev/zero", p), "directory": os.mkdir}[kind](hostile)
    child = load_in_a_child(tmp_path)  # a hang is its timeout, an unbounded read its memory limit
    assert child.returncode == 0, child.stderr[-2000:]
    assert "LOADED " + str(tmp_path / "ckpt-0000000001.pt") in child.stdout
    assert "not a regular file" in child.stderr
    # rotation leaves it alone (it used to unlink a directory and fail every save)
    checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=1)
    assert os.path.lexists(hostile)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000002.pt", os.path.basename(hostile)]


def test_a_file_larger_than_the_rank_can_load_fails_loudly_and_is_kept(tmp_path):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    sparse = newest_name(tmp_path)
    with open(sparse, "wb") as f:  # a sparse file: costs nothing to make, more than the machine's memory to read
        f.truncate(checkpoint.memory_limit() + 1)
    child = load_in_a_child(tmp_path)  # read whole, it would take all the memory of this test run
    assert child.returncode != 0 and "CheckpointTooLarge: checkpoint " + sparse + " is " in child.stderr, child.stderr[-2000:]
    assert issubclass(checkpoint.CheckpointTooLarge, checkpoint.UnusableCheckpoint)
    checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=1)
    assert os.path.exists(sparse), "a file too large to judge is not ours to delete"


def deflated_payload(numel: int) -> bytes:
    """A torch.save zip whose one float tensor of `numel` zeros is a deflated member: a few KiB
    on disk, numel * 4 bytes once torch.load inflates it."""
    buffer = io.BytesIO()
    torch.save({"state": json.dumps({"x": {"$tensor": 0}}), "tensors": [torch.zeros(numel)]}, buffer)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source, zipfile.ZipFile(out, "w") as bomb:
        for member in source.infolist():
            deflate = member.filename.endswith("/data/0")
            bomb.writestr(zipfile.ZipInfo(member.filename), source.read(member),
                          compress_type=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
    return out.getvalue()


def test_a_decompression_bomb_is_not_inflated(tmp_path):
    payload = deflated_payload(1 << 22)  # 16 MiB of tensor in ~16 KiB: the same file scales to any size
    assert len(payload) < 64 * 1024
    bomb = tmp_path / "ckpt-0000000009.pt"
    bomb.write_bytes(checkpoint._framed(2, payload))
    with pytest.raises(checkpoint.CorruptCheckpoint, match="compressed members"):  # refused before torch.load
        checkpoint.read(str(bomb))
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    assert not bomb.exists()
    path, _ = checkpoint.load_newest(str(tmp_path))
    assert path.endswith("ckpt-0000000001.pt")


def test_zip_members_claiming_more_than_the_file_holds_are_refused():
    buffer = io.BytesIO()
    torch.save({"state": "{}", "tensors": []}, buffer)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source, zipfile.ZipFile(out, "w") as copy:
        for member in source.infolist():
            copy.writestr(zipfile.ZipInfo(member.filename), source.read(member))
    data = bytearray(out.getvalue())
    central = data.rindex(b"PK\x01\x02")  # the last member's central record: claim 1 GiB for it
    data[central + 24:central + 28] = (1 << 30).to_bytes(4, "little")
    with pytest.raises(checkpoint.CorruptCheckpoint, match="claim more bytes"):
        checkpoint.decode(checkpoint._framed(2, bytes(data)))


def training_session(tmp_path, name: str, deterministic: bool = False, env_id: str = "CartPole-v1", when_none_usable: str = "Fail",
                     **block) -> tuple[object, session.TrainingSession]:
    spec = (make_job().algorithm(name, **block).env(env_id)
            .with_spec(totalTimesteps=256, workers=1, seed=1, deterministic=deterministic,
                       checkpoint={"whenNoneUsable": when_none_usable}).spec())
    return one_process_run(spec)


@pytest.mark.parametrize("foreign, expected", [
    ("dqn", "state lacks 'obs_norm', 'ret_norm'"),
    ("ppo-wider", "state.agent.* is torch.float32\\[\\d+, \\d+\\], this job's is torch.float32\\[64, 4\\]"),
], ids=["another-algorithm", "another-network"])
def test_a_checkpoint_for_another_algorithm_or_network_fails_as_a_config_error_naming_the_file(tmp_path, monkeypatch, foreign, expected):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    other, _ = training_session(tmp_path, "dqn" if foreign == "dqn" else "ppo",
                                **({"learningStarts": 32, "batchSize": 16, "bufferSize": 256} if foreign == "dqn" else {"hiddenSizes": [32, 32]}))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16, hiddenSizes=[64, 64])
    path = checkpoint.save(training.checkpoint_dir, 3, {**other.shared_state(), "elapsed_seconds": 1.0, "per_rank": None}, keep=3)
    with pytest.raises(checkpoint.CheckpointMismatch, match=f"checkpoint {path} was not written by this job's trainer \\({expected}"):
        session.run_updates(trainer, training)


def trained_state(tmp_path, monkeypatch, env_id: str = "CartPole-v1", **block) -> dict:
    """The checkpoint state of a short PPO run on `env_id` (its trainer's own save, recording what it was trained
    as), trained under a root of its own; the job under test then runs under `tmp_path`."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path / f"other-{env_id}-{len(block)}"))
    trainer, training = training_session(tmp_path, "ppo", env_id=env_id, numSteps=16, **block)
    assert session.run_updates(trainer, training) == "budget"
    training.save(trainer)
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    return checkpoint.read(training.last_good)


def placed(training: session.TrainingSession, updates: int, state: dict) -> str:
    return checkpoint.save(training.checkpoint_dir, updates, state, keep=3)


@pytest.mark.parametrize("other, said", [
    ({"env_id": "CartPole-v0"}, "trained on CartPole-v0 with ppo; this job is CartPole-v1 with ppo"),
    ({"normalizeObservation": True}, "trained on CartPole-v1 with ppo, observations normalised; this job is CartPole-v1 with ppo"),
], ids=["another-env-same-shapes", "observation-normalisation-switched"])
def test_a_checkpoint_trained_as_something_else_is_unusable_naming_what_differs(tmp_path, monkeypatch, other, said):
    # CartPole-v0's and -v1's networks (and a switched normaliser's) have the same tensors: it resumed in silence
    state = trained_state(tmp_path, monkeypatch, **other)
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    foreign = placed(training, 5, state)
    with pytest.raises(checkpoint.NoUsableCheckpoint, match="ckpt-0000000005.pt: " + said) as refused:
        session.run_updates(trainer, training)
    assert refused.value.unusable == [(foreign, said)] and os.path.exists(foreign)  # whenNoneUsable: Fail keeps it


def test_a_payload_torch_refuses_is_said_on_one_escaped_line(tmp_path):
    # torch's refusal has ANSI bold and line breaks of its own, and quotes the pickle's global (the file's text):
    # the 'skipping checkpoint' log line and the termination message ran over several lines, escapes raw
    saved = io.BytesIO()
    torch.save({"a": 1}, saved)
    crafted = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as original, zipfile.ZipFile(crafted, "w", zipfile.ZIP_STORED) as out:
        for member in original.infolist():
            data = original.read(member.filename)
            out.writestr(member, b"\x80\x02cos\x1b[2J\x07\nsystem\n)R." if member.filename.endswith("data.pkl") else data)
    with pytest.raises(checkpoint.CorruptCheckpoint) as refused:
        checkpoint.decode(checkpoint._framed(2, crafted.getvalue()))
    said = str(refused.value)
    assert "UnpicklingError" in said and "\n" not in said and not safetext.has_unsafe(said) and len(said) < 400, said


def test_a_checkpoints_extra_keys_are_named_cut_to_a_line():
    said = checkpoint.mismatch({"agent": 1}, {"agent": 1, "k" * 1_000_000: 1, "x\u202e\x1b": 2})
    assert said.startswith("state has 'kkkk") and "'x\\u202e\\x1b'" in said and len(said) < 300, said[:300]


HOSTILE_TRAINED_AS = {  # a tenant's crafted file: (what trained_as becomes, what the refusal says)
    "megabyte-env": ({"env": "A" * 1_000_000}, "trained on " + "A" * 80 + "… (1000000 characters) with ppo; this job is"),
    "escapes-and-breaks": ({"env": "\x1b[2J\x1b]8;;http://x\x07ok\r\u202eFORGED: line\n"},
                           "trained on \\x1b[2J\\x1b]8;;http://x\\x07ok\\r\\u202eFORGED: line\\n with ppo; this job is"),
    "list-env": ({"env": list(range(100_000))}, "trained_as.env is list, not text"),
    "dict-algorithm": ({"algorithm": {"k": "v" * 100_000}}, "trained_as.algorithm is dict, not text"),
    "tensor-normalisation": ({"normalizeObservation": torch.ones(3)}, "trained_as.normalizeObservation is Tensor, not true or false"),
    "missing-env": ({"env": None}, "trained_as.env is NoneType, not text"),
    "huge-int": ({"env": 10 ** 4000}, "trained_as.env is int, not text"),  # JSON's most; weights_only reads no longer
}


@pytest.mark.parametrize("hostile", HOSTILE_TRAINED_AS, ids=list(HOSTILE_TRAINED_AS))
def test_a_crafted_trained_as_is_refused_in_a_short_escaped_line_never_a_crash(tmp_path, monkeypatch, caplog, hostile):
    # a 1 MB env name reached the log and the termination message whole, escapes raw; a tensor crashed the start
    fields, said = HOSTILE_TRAINED_AS[hostile]
    state = trained_state(tmp_path, monkeypatch)
    state["trained_as"] = {**state["trained_as"], **fields}
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    placed(training, 5, state)
    with pytest.raises(checkpoint.NoUsableCheckpoint) as refused:
        session.run_updates(trainer, training)
    (_, why), = refused.value.unusable
    assert why.startswith(said) and len(why) < 400 and "\n" not in why and not safetext.has_unsafe(why), why[:500]
    warned = [r.getMessage() for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    assert warned and all(len(line) < 1000 and not safetext.has_unsafe(line) for line in warned)


@pytest.mark.parametrize("key", ["\x1b[2J\nFORGED: line", "k" * 1_000_000], ids=["escapes-and-breaks", "megabyte-key"])
def test_a_crafted_non_finite_value_is_named_in_a_short_escaped_line(tmp_path, monkeypatch, caplog, key):
    """A checkpoint holding a NaN is refused naming where (checkpoint.nonfinite), before its keys are compared with this
    job's: a key of the file's own choosing, holding NaN, reached the refusal and the log whole, escapes raw."""
    state = trained_state(tmp_path, monkeypatch)
    state[key] = {"inner\u202e": float("nan")}
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    placed(training, 5, state)
    with pytest.raises(checkpoint.NoUsableCheckpoint) as refused:
        session.run_updates(trainer, training)
    (_, why), = refused.value.unusable
    assert why.endswith("not finite (written as the run diverged, by a trainer that did not check)"), why[:300]
    assert len(why) < 400 and "\n" not in why and not safetext.has_unsafe(why), why[:500]
    warned = [r.getMessage() for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    assert warned and all(len(line) < 1000 and not safetext.has_unsafe(line) for line in warned)


def test_a_foreign_checkpoint_is_set_aside_and_the_older_own_one_resumed(tmp_path, monkeypatch):
    own_state = trained_state(tmp_path, monkeypatch)
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    own = placed(training, 5, own_state)
    foreign = placed(training, 6, trained_state(tmp_path, monkeypatch, env_id="CartPole-v0"))
    session.run_updates(trainer, training)
    assert training.resumed_from == own
    assert os.listdir(os.path.join(training.checkpoint_dir, checkpoint.ASIDE)) == [os.path.basename(foreign)]


def test_start_over_sets_a_foreign_checkpoint_aside_and_trains_from_zero(tmp_path, monkeypatch):
    state = trained_state(tmp_path, monkeypatch, env_id="CartPole-v0")
    trainer, training = training_session(tmp_path, "ppo", when_none_usable="StartOver", numSteps=16)
    foreign = placed(training, 5, state)
    session.run_updates(trainer, training)
    assert training.resumed_from is None and training.start_step == 0
    assert os.listdir(os.path.join(training.checkpoint_dir, checkpoint.ASIDE)) == [os.path.basename(foreign)]


def test_a_checkpoint_that_records_nothing_resumes_as_before_said_once(tmp_path, monkeypatch):
    state = trained_state(tmp_path, monkeypatch)
    del state["trained_as"]  # as a trainer before 2026-11-28 wrote it
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    old = placed(training, 5, state)
    lines = []
    training.log = lines.append
    session.run_updates(trainer, training)
    assert training.resumed_from == old
    unchecked = [line for line in lines if "records no env and algorithm" in line]
    assert len(unchecked) == 1 and unchecked[0].endswith("resuming it unchecked as CartPole-v1 with ppo"), lines


def test_the_jobs_own_checkpoint_passes_the_same_check(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    assert session.run_updates(trainer, training) == "budget"
    training.save(trainer)
    resumed, again = training_session(tmp_path, "ppo", numSteps=16)
    assert session.run_updates(resumed, again) == "budget" and again.resumed_from is not None
    assert resumed.counters == trainer.counters


def test_a_resumed_run_shows_the_last_evaluation_until_its_next_one(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    assert session.run_updates(trainer, training) == "budget"
    training.eval_return = 123.5
    training.save(trainer)
    resumed, again = training_session(tmp_path, "ppo", numSteps=16)
    lines = []
    again.log = lines.append
    session.run_updates(resumed, again)
    again.report(resumed.counters.global_step + 1)
    assert again.eval_return == 123.5 and lines[-1].endswith("eval 123.5"), lines


@pytest.mark.parametrize("eval_return", [float("nan"), float("inf"), "500", True], ids=["nan", "inf", "text", "bool"])
def test_an_eval_return_that_is_no_finite_number_is_skipped_like_a_corrupt_file(tmp_path, eval_return):
    checkpoint.save(str(tmp_path), 1, {**ppo_like_state(1), "eval_return": 20.0}, keep=3)
    checkpoint.save(str(tmp_path), 2, {**ppo_like_state(2), "eval_return": eval_return}, keep=3)
    path, state = checkpoint.load_newest(str(tmp_path), accept=session._resumable)
    assert path.endswith("ckpt-0000000001.pt") and state["eval_return"] == 20.0


@pytest.mark.parametrize("counters", [
    {"global_step": -5, "updates": 1, "episodes": 0},
    {"global_step": 10**30, "updates": 1, "episodes": 0},
    {"global_step": True, "updates": 1, "episodes": 0},
], ids=["negative", "past-int64", "bool"])
def test_counters_out_of_range_are_skipped_like_a_corrupt_file(tmp_path, counters):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    checkpoint.save(str(tmp_path), 2, {**ppo_like_state(2), "counters": counters}, keep=3)
    path, state = checkpoint.load_newest(str(tmp_path), accept=session._resumable)
    assert path.endswith("ckpt-0000000001.pt") and state["counters"]["updates"] == 1


def test_an_unusable_checkpoint_exits_with_the_configuration_error_code_and_one_line(tmp_path, monkeypatch, capsys):
    spec = make_job().algorithm("ppo").with_spec(totalTimesteps=256, workers=1, seed=1).spec()
    config_file = tmp_path / "config.json"
    config_file.write_text(trainerconfig.dump(trainerconfig.trainer_config("t", "default", "uid", spec)))
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))

    def run(config, stop, startup=None):
        raise checkpoint.CheckpointMismatch("/ckpt/ckpt-0000000003.pt", "state lacks 'obs_norm'")

    monkeypatch.setattr(entry, "run", run)
    assert entry.main(["--config", "/config.json"]) == contract.EXIT_CONFIG_ERROR  # under KUBERL_FS_ROOT
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == ("ConfigError: checkpoint /ckpt/ckpt-0000000003.pt was not written by this job's trainer "
                    "(state lacks 'obs_norm'): move it away to resume from an older checkpoint")


def test_a_fifo_named_progress_jsonl_does_not_block_the_trainer(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    _, training = training_session(tmp_path, "ppo")
    os.makedirs(training.checkpoint_dir)
    os.mkfifo(os.path.join(training.checkpoint_dir, "progress.jsonl"))  # nobody ever reads it
    lines = []
    training.log = lines.append
    writer = threading.Thread(target=lambda: [training.curve_point(step) for step in (1, 2)], daemon=True)
    writer.start()
    writer.join(10)
    assert not writer.is_alive(), "opening the FIFO for append blocked the trainer"
    assert len(lines) == 1 and lines[0].startswith("progress.jsonl not written")


def test_a_link_named_progress_jsonl_is_not_appended_through(tmp_path, monkeypatch):
    """The volume is the tenant's: a link there named progress.jsonl had every progress line appended to the file it
    named, outside the checkpoint directory (a shell's rc file under kuberl run)."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    _, training = training_session(tmp_path, "ppo")
    os.makedirs(training.checkpoint_dir)
    (tmp_path / "elsewhere").write_text("kept\n")
    os.symlink(tmp_path / "elsewhere", os.path.join(training.checkpoint_dir, "progress.jsonl"))
    lines = []
    training.log = lines.append
    training.curve_point(1)
    assert (tmp_path / "elsewhere").read_text() == "kept\n"
    assert len(lines) == 1 and lines[0].startswith("progress.jsonl not written")


def test_a_name_that_only_starts_like_a_checkpoints_is_not_ours(tmp_path):
    """Matched whole: `ckpt-0000000001.pt` plus a newline is the tenant's file, never listed,
    so never loaded nor deleted by rotation."""
    (tmp_path / "ckpt-0000000001.pt\n").write_bytes(b"x")
    assert checkpoint.list_checkpoints(str(tmp_path)) == []


def test_a_job_created_again_under_its_name_says_where_the_earlier_ones_checkpoints_are(tmp_path, monkeypatch):
    """Deleted and created again (to change an immutable field), a job has a new uid and a directory of
    its own on the same claim: it starts from zero, and says so, naming the earlier job's newest checkpoint."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    said = []
    training.log = said.append
    volume = os.path.dirname(training.checkpoint_dir)
    earlier = os.path.join(volume, "t-5f0c8a5e-2c1d-4d3e-9a8b-7c6d5e4f3a21")
    another = os.path.join(volume, "t-other-5f0c8a5e-2c1d-4d3e-9a8b-7c6d5e4f3a21")  # job t-other's: not ours to name
    for directory in (earlier, another):
        for updates in (1, 2):
            checkpoint.save(directory, updates, {**trainer.shared_state(), "elapsed_seconds": 1.0, "per_rank": None}, keep=3)
    assert training.load() is None
    line, = [s for s in said if s.startswith("starting from zero")]
    own, earlier = (paths.pod_path(d) for d in (training.checkpoint_dir, earlier))  # as the pod sees them
    assert f"{own} holds no checkpoint of this job, but {earlier}/ckpt-0000000002.pt is one of an earlier job named t " \
           f"(1 such job(s) on this volume); a job resumes only from its own directory, named by its uid. To continue " \
           f"from it, copy it into {own}" in line, line
    assert "t-other" not in line


def test_a_resume_past_a_corrupt_newest_checkpoint_counts_it_for_the_operator_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    training.metrics, said = TrainerMetrics("t", 0, 1), []
    training.log = said.append
    for updates in (1, 2):
        newest = checkpoint.save(training.checkpoint_dir, updates, {**trainer.shared_state(), "elapsed_seconds": 1.0,
                                                                    "per_rank": None}, keep=3)
    flip_one_bit(pathlib.Path(newest))
    checkpoint._verified.clear()
    assert training.load() is not None and training.resumed_from.endswith("ckpt-0000000001.pt")
    assert training.metrics.checkpoints_skipped._value.get() == 1
    assert os.path.exists(os.path.join(training.checkpoint_dir, checkpoint.ASIDE, os.path.basename(newest)))  # before a save takes its name
    assert said[-2].startswith("resuming from ") and said[-1].startswith("1 newer checkpoint(s) skipped"), said


def test_a_tensor_claiming_more_than_its_data_holds_is_refused_and_the_last_good_one_loads(tmp_path):
    """A one-element view with stride 0 and shape (2**40,) is saved whole by torch.save in a few KB; the
    optimizer's state (which takes any tensor before the first step) or a normaliser copied it into 8 TiB."""
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    forged = ppo_like_state(2)
    forged["optimizer"]["state"][0]["exp_avg"] = torch.zeros(1, dtype=torch.float64).as_strided((2**40,), (0,))
    data = checkpoint.encode(forged)
    assert len(data) < 16 * 1024
    with pytest.raises(checkpoint.CorruptCheckpoint, match=r"claims \[1099511627776\] of torch.float64, more than the 8 bytes"):
        checkpoint.decode(data)
    (tmp_path / checkpoint.checkpoint_name(2)).write_bytes(data)
    path, _ = checkpoint.load_newest(str(tmp_path))
    assert path.endswith(checkpoint.checkpoint_name(1))


def test_a_slice_of_a_larger_tensor_is_no_claim_beyond_its_data():
    state = ppo_like_state(1)
    state["obs_norm"]["mean"] = torch.arange(10.0)[2:6]  # a view onto fewer bytes than its storage: loads
    assert checkpoint.decode(checkpoint.encode(state))["obs_norm"]["mean"].tolist() == [2.0, 3.0, 4.0, 5.0]


def test_a_sparse_tensor_is_refused_before_anything_touches_it(tmp_path):
    """Its size is a claim on its dense form, and one whose indices break its invariants is unsafe to operate on;
    reading its storage to check it raised NotImplementedError, a traceback from kuberl eval."""
    sparse = torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.tensor([1.0]), (2**20, 2**20))
    state = ppo_like_state(1)
    state["agent"]["weight"] = sparse
    with pytest.raises(checkpoint.CorruptCheckpoint, match="holds a torch.sparse_coo tensor, not a dense one"):
        checkpoint.decode(checkpoint.encode(state))
    torch.save({"algorithm": "ppo", "env_id": "CartPole-v1", "agent": {"w": sparse}, "hidden_sizes": [8]}, str(tmp_path / "m.pt"))
    with pytest.raises(checkpoint.CorruptCheckpoint, match="sparse_coo"):
        checkpoint.read_model(str(tmp_path / "m.pt"))


def test_a_peer_lost_in_the_middle_of_an_update_leaves_no_checkpoint_of_the_torn_state(tmp_path, monkeypatch):
    """A stopping gang whose peer left while rank 0 was in an update's gradient all-reduce: rank 0 saved what it
    held, weights partly trained on a rollout whose steps were counted, under the last whole update's number;
    its resume counted that rollout's steps twice. Only an update boundary's state is saved."""
    from kuberl_trainer.distributed import PeerLost

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    learn, calls = trainer.learn, []

    def learn_then_lose_the_peer(*args, **kwargs):
        calls.append(learn(*args, **kwargs))
        if len(calls) == 3:  # a minibatch's all-reduce fails after others stepped the optimiser
            raise PeerLost("Connection reset by peer")
        return calls[-1]

    monkeypatch.setattr(trainer, "learn", learn_then_lose_the_peer)
    with pytest.raises(PeerLost):
        session.run_updates(trainer, training)
    assert trainer.counters.updates == 2 and trainer.counters.global_step > training.boundary[0]  # torn: steps counted
    assert training.save_after_peer_lost(trainer) is False
    assert checkpoint.load_newest(training.checkpoint_dir) is None


def lose_the_peer_in_the_third_counters_all_reduce(trainer, monkeypatch) -> None:
    """The third update's all-reduce fails as a peer's going makes it fail: updates 1 and 2 are whole."""
    from kuberl_trainer.distributed import PeerLost

    sync, calls = trainer.sync_update, []

    def sync_then_lose_the_peer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise PeerLost("Connection reset by peer")
        return sync(*args, **kwargs)

    monkeypatch.setattr(trainer, "sync_update", sync_then_lose_the_peer)


def test_a_peer_lost_at_an_update_boundary_leaves_the_checkpoint_of_that_update(tmp_path, monkeypatch):
    from kuberl_trainer.distributed import PeerLost

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    lose_the_peer_in_the_third_counters_all_reduce(trainer, monkeypatch)
    with pytest.raises(PeerLost):
        session.run_updates(trainer, training)
    steps = trainer.counters.global_step
    assert training.save_after_peer_lost(trainer) is True
    path, saved = checkpoint.load_newest(training.checkpoint_dir)
    assert path.endswith("ckpt-0000000002.pt") and saved["counters"]["global_step"] == steps == training.boundary[0]


def test_a_deterministic_run_whose_peer_left_writes_no_checkpoint_without_every_ranks_state(tmp_path, monkeypatch):
    """Rank 0 alone cannot gather its peers' envs and RNGs: a checkpoint it wrote after a peer left (chaos.py
    eval-peer-kill: rank 1 killed at an update boundary, rank 0 told to stop as the gang restarted) held none, and
    the run resumed from it ended at other weights and timesteps (7822, uninterrupted 7815). The resume redoes the
    training since the last whole checkpoint instead, bitwise as an uninterrupted run."""
    from kuberl_trainer.distributed import PeerLost

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", deterministic=True, numSteps=16)
    lose_the_peer_in_the_third_counters_all_reduce(trainer, monkeypatch)
    with pytest.raises(PeerLost):
        session.run_updates(trainer, training)
    assert training.save_after_peer_lost(trainer) is False
    assert checkpoint.load_newest(training.checkpoint_dir) is None

    def the_peer_is_gone(*_args, **_kwargs):
        raise PeerLost("Connection reset by peer")

    monkeypatch.setattr(session.distributed, "gather_bytes", the_peer_is_gone)
    training.finish(trainer, "stopped")  # a stop whose gather finds the peer gone: likewise none
    assert checkpoint.load_newest(training.checkpoint_dir) is None


@pytest.mark.parametrize("edit", ["tracker", "tracker-arrays", "torch-rng", "discounted-nan", "lstm-state", "lstm-state-nan",
                                  "lstm-starts"])
def test_a_ranks_own_state_unlike_its_own_is_left_out_said_once_never_a_crash(tmp_path, monkeypatch, edit):
    """A deterministic run's checkpoint keeps each rank's own state (its envs, episode tracker, RNGs), which nothing
    checked before loading it: a file edited to a tracker of 5 ended every start in a TypeError traceback (a crash,
    restarted to crash again), arrays of another shape failed at the first step. It is optional (a resume without it is
    only not bitwise), so a rank whose state differs in kind from its own resumes without it and says so. A
    discounted return of NaN reached the return normaliser and the first update's losses (the run ended Diverged,
    advising a lower learning rate); an LSTM
    state of NaN, or a pending reset of NaN (which multiplies the state), made every state NaN at the first step,
    where torch's sampling refused it: a RuntimeError at every start."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    block = {"numSteps": 16, **({"lstm": {"hiddenSize": 8}} if edit.startswith("lstm") else {}),
             **({"normalizeReward": True} if edit == "discounted-nan" else {})}
    trainer, training = training_session(tmp_path, "ppo", deterministic=True, **block)
    for _ in range(3):
        trainer.update(False, False)
    state = {**trainer.shared_state(), "elapsed_seconds": 1.0, "trained_as": session.trained_as(training.spec),
             "per_rank": [checkpoint.decode(checkpoint.encode({"own": trainer.rank_state()}))["own"]]}
    own = state["per_rank"][0]
    own.update({"tracker": 5} if edit == "tracker" else {"torch_rng": torch.zeros(3, dtype=torch.uint8)} if edit == "torch-rng"
               else {"lstm_state": (np.zeros((5, 3), np.float32),) * 2} if edit == "lstm-state"
               else {"discounted": np.full_like(own["discounted"], np.nan)} if edit == "discounted-nan"
               else {"lstm_state": (np.full((2, 8), np.nan, np.float32),) * 2} if edit == "lstm-state-nan"
               else {"next_starts": np.full_like(own["next_starts"], np.nan)} if edit == "lstm-starts"
               else {"tracker": tuple(np.zeros(7, a.dtype) for a in own["tracker"])})
    placed(training, 3, state)
    said = []
    trainer, training = training_session(tmp_path, "ppo", deterministic=True, **block)
    assert trainer.rank_state_problem(checkpoint.decode(checkpoint.encode({"own": trainer.rank_state()}))["own"]) is None
    training.log = said.append
    assert session.run_updates(trainer, training) == "budget"
    assert [line for line in said if "per-rank state" in line] == [
        f"the checkpoint's per-rank state is not this rank's ({why}): resuming without it"
        for why in [{"tracker": "state.tracker is int, not a tuple of 3", "torch-rng": "state.torch_rng is torch.uint8[3], this job's is torch.uint8[5056]",
                     "tracker-arrays": "state.tracker[0] is float64[7], this job's is float64[2]",
                     "lstm-state": "state.lstm_state[0] is float32[5, 3], this job's is float32[2, 8]",
                     "discounted-nan": "state.discounted not finite",
                     "lstm-state-nan": "state.lstm_state[0], state.lstm_state[1] not finite",
                     "lstm-starts": "state.next_starts holds values other than 0 and 1"}[edit]]], said


def test_a_ranks_own_state_where_its_envs_keep_none_is_left_out_never_loaded(tmp_path, monkeypatch):
    """A job whose envs' state is no plain data (a wrapped env) saves no rank state, and took any a file held: loaded
    as its own, it failed at every start."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    masked = "kuberl_trainer.masked:CartPoleNoVelocity"
    trainer, training = training_session(tmp_path, "ppo", deterministic=True, env_id=masked, numSteps=16)
    assert trainer.rank_state() is None
    trainer.update(False, False)
    state = {**trainer.shared_state(), "elapsed_seconds": 1.0, "trained_as": session.trained_as(training.spec),
             "per_rank": [{"envs": 5, "next_obs": 1}]}
    placed(training, 1, state)
    said = []
    trainer, training = training_session(tmp_path, "ppo", deterministic=True, env_id=masked, numSteps=16)
    training.log = said.append
    assert session.run_updates(trainer, training) == "budget"
    assert [line for line in said if "per-rank state" in line] == [
        ("the checkpoint's per-rank state is not this rank's (state is dict, where this rank keeps none: its envs' state"
         " is no plain data): resuming without it")], said


@pytest.mark.parametrize("edit, said", [
    ({"added": -1}, "state.replay.added or real_added is not a whole number from 0"),
    ({"added": 10**15}, "state.replay.arrays.obs is float32[20, 2, 4], this buffer's 64 rows held are float32[64, 2, 4]"),
    ({"arrays": {"obs": 1}}, "state.replay.arrays are not obs, actions, rewards, terminated, truncated, valid, first"),
], ids=["negative-count", "count-past-its-rows", "arrays-gone"])
def test_a_ranks_replay_state_unlike_its_buffer_is_left_out_said_once_never_a_crash(tmp_path, monkeypatch, edit, said):
    """An off-policy rank's replay buffer rides in its own state (deterministic mode): a file edited to another count
    or other arrays failed in numpy as it was loaded (a crash at every start)."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    block = {"learningStarts": 32, "batchSize": 16, "bufferSize": 128}
    trainer, training = training_session(tmp_path, "dqn", deterministic=True, **block)
    for _ in range(10):
        trainer.update(False, False)
    state = {**trainer.shared_state(), "elapsed_seconds": 1.0, "trained_as": session.trained_as(training.spec),
             "per_rank": [checkpoint.decode(checkpoint.encode({"own": trainer.rank_state()}))["own"]]}
    lines = []
    trainer, training = training_session(tmp_path, "dqn", deterministic=True, **block)
    assert trainer.rank_state_problem(state["per_rank"][0]) is None  # the rank's own, as saved: loaded
    state["per_rank"][0]["replay"].update(edit)
    placed(training, 10, state)
    training.log = lines.append
    assert session.run_updates(trainer, training) == "budget"
    assert [line for line in lines if "per-rank state" in line] == [
        f"the checkpoint's per-rank state is not this rank's ({said}): resuming without it"], lines


@pytest.mark.parametrize("kind", ["fifo", "symlink", "garbage", "huge"])
def test_a_stop_record_the_tenant_replaced_is_read_bounded_and_never_followed(tmp_path, kind):
    """.stop-pending.json sits in the tenant's directory: a FIFO is not waited on, a symlink not followed (nor what it
    points at removed), garbage is a record with nothing known, and no more than 4 KiB is read."""
    record = tmp_path / session.STOP_PENDING
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"updates": 7}')
    {"fifo": os.mkfifo, "symlink": lambda p: os.symlink(outside, p), "garbage": lambda p: p.write_bytes(b"\xff{not json"),
     "huge": lambda p: p.write_bytes(b"[" * (1 << 20))}[kind](record)
    found = session.read_stop_pending(str(tmp_path))
    if kind in ("fifo", "symlink"):
        assert found is None and os.path.lexists(record) and outside.exists()
    else:
        assert found == {} and not record.exists()
        assert session.stop_lost(found, resumed_updates=10)  # nothing known: said as lost, never hidden


@pytest.mark.parametrize("change, expected", [
    ("lacks", "state lacks 'ret_norm'"),
    ("has", "state has 'curiosity', which this job's has not"),
])
def test_a_checkpoint_of_this_job_by_another_trainer_version_says_so_not_to_move_it_away(tmp_path, monkeypatch, change, expected):
    """A checkpoint that records it was trained as this very job (its trained_as) but whose state has a key this trainer's
    lacks, or lacks one it has, was written by another version of the trainer (a kuberl upgraded between two runs of
    `kuberl run`). It said "was not written by this job's trainer: move it away to resume from an older checkpoint",
    and every older checkpoint, of the same version, failed alike: moved away one by one, the run's work went with them."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    trainer, training = training_session(tmp_path, "ppo", numSteps=16)
    state = {**trainer.shared_state(), "elapsed_seconds": 1.0, "per_rank": None, "trained_as": session.trained_as(training.spec)}
    if change == "lacks":
        del state["ret_norm"]
    else:
        state["curiosity"] = 1.0
    path = checkpoint.save(training.checkpoint_dir, 3, state, keep=3)
    with pytest.raises(checkpoint.CheckpointMismatch) as refused:
        session.run_updates(trainer, training)
    said = str(refused.value)
    assert said.startswith(f"checkpoint {path} was written for this job (CartPole-v1 with ppo) by another version of"
                           f" kuberl's trainer, whose state differs from this one's ({expected}): resume it with the"
                           " trainer that wrote it"), said
    assert "move it away to resume" not in said
