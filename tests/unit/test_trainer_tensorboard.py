"""Rank 0 writes TensorBoard scalars beside progress.jsonl, under CleanRL's tags: a CleanRL or SB3 user's first
habit, `tensorboard --logdir runs`, found nothing in a kuberl run. Read back with TensorBoard's own reader
(EventAccumulator), through the real trainer and session."""

from __future__ import annotations

import itertools
import os

import pytest
from kuberl.core import contract, names
from kuberl.local.curves import UPDATE_STATISTICS
from kuberl_trainer import session
from kuberl_trainer.tensorboard import (
    EPISODE_POINTS_PER_LINE,
    EVALUATION_TAG,
    HYPERPARAMETER_ROWS,
    HYPERPARAMETERS_TAG,
    UPDATE_TAGS,
    EpisodeSample,
    Scalars,
    hyperparameters,
    run_name,
    scalars,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_support import one_process_run, progress_rows, small_job


def read_texts(log_dir: str) -> list[str]:
    """The run's hyperparameters texts (TensorBoard's Text tab), every file's."""
    events = EventAccumulator(log_dir, size_guidance={"tensors": 0})
    events.Reload()
    tag = f"{HYPERPARAMETERS_TAG}/text_summary"
    return [e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)] if tag in events.Tags()["tensors"] else []


def read_scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(log_dir, size_guidance={"scalars": 0})  # 0: every point, not a sample
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_progress_line_gives_its_returns_speed_and_update_statistics_and_nothing_twice():
    progress = {"timesteps": 2048, "episode_return_mean": 21.5, "eval_return": 90.0, "steps_per_second": 9000.0,
                "restart": 0, "update": {"policy_loss": -0.01, "approx_kl": 0.002, "learning_rate": 0.0025, "mine": 3}}
    assert scalars(progress) == [("charts/SPS", 9000.0), ("losses/policy_loss", -0.01),
                                 ("losses/approx_kl", 0.002), ("charts/learning_rate", 0.0025)]  # the eval return repeated: not
    evaluation = {"timesteps": 4096, "episode_return_mean": 30.0, "eval_return": 120.0, "restart": 0, "evaluation": True}
    assert scalars(evaluation) == [(EVALUATION_TAG, 120.0)]
    assert scalars({"timesteps": 4096, "eval_return": 120.0, "checkpoint": "ckpt-1.pt", "restart": 0}) == []
    assert scalars({"timesteps": 4096, "eval_return": 120.0, "resumed": True, "restart": 1}) == []
    assert scalars({**progress, "update": {"value_loss": None}, "episode_return_mean": None}) == [("charts/SPS", 9000.0)]
    assert set(UPDATE_TAGS) == set(UPDATE_STATISTICS)  # every statistic progress.jsonl records has its tag


def test_an_algorithms_statistic_goes_under_its_cleanrl_scripts_tag_at_its_scale():
    """CleanRL's dqn.py writes the TD loss as losses/td_loss, its SAC and TD3 the critics' loss halved as
    losses/qf_loss and the actor's as losses/actor_loss: under PPO's names a kuberl DQN and a CleanRL one drew their
    losses in two panels, and a SAC's critic loss beside CleanRL's read twice as large."""
    line = {"timesteps": 64, "restart": 0, "update": {"value_loss": 3.0, "policy_loss": -2.0, "q_value": 5.0}}
    renames = {"value_loss": ("losses/qf_loss", 0.5), "policy_loss": ("losses/actor_loss", 1.0)}
    assert scalars(line, renames) == [("losses/qf_loss", 1.5), ("losses/actor_loss", -2.0), ("losses/q_values", 5.0)]
    assert scalars(line) == [("losses/value_loss", 3.0), ("losses/policy_loss", -2.0), ("losses/q_values", 5.0)]


# each algorithm's critic (or value, or TD) loss: its tag, and CleanRL's number for kuberl's
LOSS_TAGS = {"ppo": ("losses/value_loss", 1.0), "dqn": ("losses/td_loss", 1.0), "sac": ("losses/qf_loss", 0.5),
             "td3": ("losses/qf_loss", 0.5)}


@pytest.mark.parametrize("name", ["ppo", "dqn", "sac", "td3"])
def test_a_run_writes_progress_jsonls_numbers_as_tensorboard_scalars(name, tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name).with_spec(totalTimesteps={"sac": 400, "td3": 400}.get(name, 640), workers=1, seed=1,
                                      success={"evalEpisodes": 1, "evalEvery": {"ppo": 2, "dqn": 64}.get(name, 100)}).spec())
    trainer, run = one_process_run(spec)
    monkeypatch.setattr(session, "PROGRESS_EVERY_SECONDS", 0.0)  # a progress line every update
    assert session.run_updates(trainer, run) == "budget"
    run.finish(trainer, "budget")
    rows = progress_rows(run)
    # a directory named as CleanRL names its runs, so TensorBoard's list of runs says which seed each is
    named = {"ppo": "CartPole-v1__ppo__1", "dqn": "CartPole-v1__dqn__1"}.get(name, f"Pendulum-v1__{name}__1")
    assert os.listdir(os.path.join(run.checkpoint_dir, names.TENSORBOARD_DIR)) == [named]
    drawn = read_scalars(os.path.join(run.checkpoint_dir, names.TENSORBOARD_DIR, named))
    assert drawn[EVALUATION_TAG] == [(row["timesteps"], pytest.approx(row["eval_return"])) for row in rows if row.get("evaluation")]
    # each finished episode once, as CleanRL writes them (one process: every episode is rank 0's), at the global step
    # it ended at; on CartPole a return is its length, on Pendulum every episode is 200 steps
    returns, lengths = drawn["charts/episodic_return"], drawn["charts/episodic_length"]
    assert len(returns) == len(lengths) == trainer.counters.episodes > 0
    assert [step for step, _ in returns] == [step for step, _ in lengths] == sorted(step for step, _ in returns)
    assert 0 < returns[0][0] and returns[-1][0] <= rows[-1]["timesteps"]
    if name in ("ppo", "dqn"):
        assert [value for _, value in returns] == [value for _, value in lengths]
    else:
        assert {value for _, value in lengths} == {200.0}
    updates = [row for row in rows if isinstance(row.get("update"), dict)]
    assert updates and drawn["charts/learning_rate"] == [(row["timesteps"], pytest.approx(row["update"]["learning_rate"])) for row in updates]
    assert {"ppo": "losses/approx_kl"}.get(name, "losses/q_values") in drawn
    tag, factor = LOSS_TAGS[name]
    losses = [(row["timesteps"], pytest.approx(row["update"]["value_loss"] * factor)) for row in updates
              if row["update"].get("value_loss") is not None]
    assert losses and drawn[tag] == losses
    if name != "ppo":  # its loss under CleanRL's tag alone, and the actor's under actor_loss
        assert "losses/value_loss" not in drawn and "losses/policy_loss" not in drawn
    if name in ("sac", "td3"):
        assert "losses/actor_loss" in drawn
        # each critic's mean Q and loss under CleanRL's names, as its sac_continuous_action.py and td3's write them
        for statistic, tag in (("q1_value", "losses/qf1_values"), ("q2_value", "losses/qf2_values"),
                               ("q1_loss", "losses/qf1_loss"), ("q2_loss", "losses/qf2_loss")):
            assert drawn[tag] == [(row["timesteps"], pytest.approx(row["update"][statistic])) for row in updates
                                  if row["update"].get(statistic) is not None], tag
        assert [value for _, value in drawn["losses/qf_loss"]] == pytest.approx(
            [(a + b) / 2 for (_, a), (_, b) in zip(drawn["losses/qf1_loss"], drawn["losses/qf2_loss"], strict=True)], rel=1e-4)
    # what it learned with, as CleanRL's runs say theirs: TensorBoard names a run by its directory alone
    [text] = read_texts(os.path.join(run.checkpoint_dir, names.TENSORBOARD_DIR, named))
    assert text.startswith("|param|value|\n|-|-|\n") and "\n|seed|1|" in text and f'\n|algorithm|"{name}"|' in text, text
    assert f"\n|{name}.gamma|" in text and "\n|totalTimesteps|" in text and "|null|" not in text, text


def test_hyperparameters_are_a_row_per_learned_field_each_one_safe_table_cell():
    text = hyperparameters({"seed": 2, "dqn": None, "env": {"id": "my|env", "kwargs": {}}, "ppo": {"hiddenSizes": [64, 64]}, "note": "x" * 500})
    rows = text.split("\n")
    assert rows[:2] == ["|param|value|", "|-|-|"]
    assert rows[2:5] == ["|seed|2|", '|env.id|"my&#124;env"|', "|env.kwargs|{}|"] and rows[5] == "|ppo.hiddenSizes|[64, 64]|"
    assert len(rows) == 7 and len(rows[6]) < 100  # a long value cut short


def test_a_kwargs_key_is_one_safe_short_table_cell_as_a_value_is():
    """env.kwargs' keys are the spec's author's to choose: one holding a line break and pipes added rows of its own to
    the table (`|seed|1|` under another run's name), and a key of 100,000 characters was a row of that length."""
    text = hyperparameters({"seed": 2, "env": {"id": "Pendulum-v1", "kwargs": {"g\n|seed|1|": 9.8, "k" * 100_000: 1}}})
    rows = text.split("\n")
    assert len(rows) == 2 + 4 and all(len(row) < 200 for row in rows), rows
    assert rows[4] == "|env.kwargs.g\\n&#124;seed&#124;1&#124;|9.8|" and rows[5].startswith("|env.kwargs.kkk"), rows
    many = hyperparameters({"seed": 2, "env": {"kwargs": {f"k{i}": i for i in range(50_000)}}}).split("\n")
    assert len(many) == 2 + HYPERPARAMETER_ROWS + 1 and many[-1] == f"|…|{50_001 - HYPERPARAMETER_ROWS:,} more fields (env.kwargs)|"


def written_earlier(log_dir: str) -> None:
    """The event files in `log_dir` named as if written a minute earlier. TensorBoard reads a directory's files in
    the order of their names, events.out.tfevents.<seconds>.<host>.<pid>.<writer count>: two generations of a real
    job are two processes seconds apart, so the seconds order them; two writers of one test process within the
    same second are ordered by their count as text, and a 10th writer sorts before a 9th (a test run after
    others in one pytest worker read the later generation first)."""
    for name in os.listdir(log_dir):
        events, out, tfevents, seconds, rest = name.split(".", 4)  # the host name may hold dots: it is in `rest`
        earlier = f"{events}.{out}.{tfevents}.{int(seconds) - 60:010d}.{rest}"
        os.rename(os.path.join(log_dir, name), os.path.join(log_dir, earlier))


def test_a_later_generation_supersedes_the_points_an_earlier_one_wrote_past_where_it_resumed(tmp_path):
    """A resume from a checkpoint at 3,000 timesteps after the first generation reached 5,000: TensorBoard drew both
    generations' points from 3,000 on, two curves in one. Each generation has a file of its own, and the later purges."""
    checkpoints = str(tmp_path)
    first = Scalars(checkpoints, text="|param|value|")
    for step in (1000, 2000, 3000, 4000, 5000):
        first.episodes([(step - 500, step / 100, 10)])
        first.write({"timesteps": step, "episode_return_mean": step / 100, "steps_per_second": step / 100})
    first.close()  # its process ended: the gang restarted
    written_earlier(os.path.join(checkpoints, names.TENSORBOARD_DIR))
    second = Scalars(checkpoints, text="|param|value|")
    second.write({"timesteps": 3000, "resumed": True, "eval_return": None})
    second.episodes([(3500, 99.0, 12)])
    second.write({"timesteps": 4000, "episode_return_mean": 99.0, "steps_per_second": 99.0})
    log_dir = os.path.join(checkpoints, names.TENSORBOARD_DIR)
    assert len(os.listdir(log_dir)) == 2
    drawn = read_scalars(log_dir)
    assert drawn["charts/SPS"] == [(1000, 10.0), (2000, 20.0), (4000, 99.0)]
    assert drawn["charts/episodic_return"] == [(500, 10.0), (1500, 20.0), (2500, 30.0), (3500, 99.0)]
    assert drawn["charts/episodic_length"] == [(500, 10.0), (1500, 10.0), (2500, 10.0), (3500, 12.0)]
    assert read_texts(log_dir) == ["|param|value|"]  # once, with the first generation's file


def test_episodes_that_end_after_the_last_progress_line_are_written_when_the_run_closes(tmp_path):
    written = Scalars(str(tmp_path))
    written.write({"timesteps": 100, "steps_per_second": 5.0})
    written.episodes([(120, 7.0, 7), (150, 30.0, 30)])
    written.close()
    drawn = read_scalars(os.path.join(str(tmp_path), names.TENSORBOARD_DIR))
    assert drawn["charts/episodic_return"] == [(120, 7.0), (150, 30.0)] and drawn["charts/episodic_length"] == [(120, 7.0), (150, 30.0)]


def test_an_unwritable_directory_is_said_once_and_the_run_goes_on(tmp_path):
    blocked = tmp_path / "checkpoints"
    blocked.mkdir()
    (blocked / names.TENSORBOARD_DIR).write_text("a file where the directory goes")  # the tenant's volume
    said = []
    scalars_of = Scalars(str(blocked), log=said.append)
    for step in (1, 2, 3):
        scalars_of.write({"timesteps": step, "episode_return_mean": 1.0, "steps_per_second": 1.0})
    assert len(said) == 1 and said[0].startswith(f"TensorBoard scalars not written ({blocked / names.TENSORBOARD_DIR}):"), said
    assert "\n" not in said[0]  # one line in the rank's log


def test_a_run_is_named_as_cleanrl_names_its_runs_one_directory_deep():
    assert run_name("CartPole-v1", "ppo", 2) == "CartPole-v1__ppo__2"
    assert run_name("ALE/Pong-v5", "dqn", 0) == "ALE-Pong-v5__dqn__0" and run_name("my envs:Maze", "sac", 7) == "my-envs:Maze__sac__7"
    assert run_name("../..", "td3", 1) == "..-..__td3__1"  # one directory, whatever the id


def test_a_run_of_the_longest_env_id_the_spec_takes_is_written(tmp_path):
    """spec.env.id takes 253 characters (`a.long.module:Class`), the largest seed ten digits: their run's directory name
    was 270 characters, past a filesystem's 255 (ENAMETOOLONG), and a valid job wrote no TensorBoard scalars."""
    env_id = "m" * 120 + ":" + "C" * 132
    name = run_name(env_id, "ppo", 2**31 - 1)
    assert len(name) <= 255 and name.endswith("__ppo__2147483647") and name.startswith("m" * 120 + ":CCC"), name
    said = []
    Scalars(str(tmp_path), log=said.append, name=name).write({"timesteps": 1, "steps_per_second": 1.0})
    assert said == [] and os.listdir(tmp_path / names.TENSORBOARD_DIR / name), said


def test_a_link_in_the_directorys_place_is_not_followed(tmp_path):
    """The checkpoint volume is the tenant's: a `tensorboard` link to elsewhere would have the trainer create files
    there (progress.jsonl's writer refuses anything but a regular file for the same reason)."""
    elsewhere, checkpoints = tmp_path / "elsewhere", tmp_path / "checkpoints"
    elsewhere.mkdir()
    checkpoints.mkdir()
    (checkpoints / names.TENSORBOARD_DIR).symlink_to(elsewhere)
    said = []
    Scalars(str(checkpoints), log=said.append).write({"timesteps": 1, "episode_return_mean": 1.0, "steps_per_second": 1.0})
    Scalars(str(checkpoints), log=said.append, name="CartPole-v1__ppo__1").write({"timesteps": 1, "steps_per_second": 1.0})
    assert list(elsewhere.iterdir()) == [] and len(said) == 2 and all("a link, not a directory" in line for line in said), said


def test_a_disk_that_fills_mid_run_is_said_once_and_the_run_goes_on(tmp_path, monkeypatch):
    """The checkpoint volume fills while the run writes (here the kernel's file size limit, RLIMIT_FSIZE: the same
    EFBIG a write past a quota meets; Python ignores SIGXFSZ). TensorBoard's writer thread died with its traceback in
    the rank's log, and the next flush raised it again: said once, as one line, and the lines after it cost nothing."""
    import resource
    import threading

    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)  # what a thread's traceback would have gone to
    said = []
    scalars_of = Scalars(str(tmp_path), log=said.append)
    before = set(threading.enumerate())
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        steps = 0
        while not scalars_of.failed and steps < 100_000:
            steps += 1
            scalars_of.write({"timesteps": steps, "episode_return_mean": 1.0, "steps_per_second": 1.0,
                              "update": {"policy_loss": 0.5, "value_loss": 0.25}})
        for later in range(steps + 1, steps + 50):  # the run goes on writing its lines
            scalars_of.write({"timesteps": later, "episode_return_mean": 1.0, "steps_per_second": 1.0})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    for thread in set(threading.enumerate()) - before:  # the writer's thread, ended by its failure
        thread.join(timeout=60)
    scalars_of.close()
    assert scalars_of.failed and len(said) == 1 and "File too large" in said[0] and "\n" not in said[0], said
    assert uncaught == []


def test_an_episode_sample_keeps_every_episode_while_they_fit_then_an_even_stride_of_them():
    """4,096 envs of one-step episodes end 130,000 episodes between two progress lines: each was a point for
    TensorBoard and MLflow alike, 20 MB of events a line. At most `limit` are kept, evenly spread."""
    few = EpisodeSample(limit=8)
    few.add([(step, 1.0, 1) for step in range(5)])
    assert [step for step, _, _ in few.take()] == [0, 1, 2, 3, 4] and few.take() == []
    many = EpisodeSample(limit=8)
    for first in range(0, 100, 7):  # in updates of 7 episodes
        many.add([(step, 1.0, 1) for step in range(first, min(first + 7, 100))])
    assert [step for step, _, _ in many.take()] == [0, 16, 32, 48, 64, 80, 96]  # every 16th, from the first
    flood = EpisodeSample()
    flood.add([(step, 0.0, 1) for step in range(130_000)])
    kept = flood.take()
    assert 500 < len(kept) <= EPISODE_POINTS_PER_LINE and {b[0] - a[0] for a, b in itertools.pairwise(kept)} == {256}
