"""`kuberl plot runs/<job>`: a PNG learning curve from the trainer's progress.jsonl."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from kuberl.local.curves import (
    MAX_RESUME_MARKS,
    PROGRESS_TAIL_BYTES,
    cmd_plot,
    curve,
    plot,
    plot_title,
)

PNG = b"\x89PNG\r\n\x1a\n"


def a_run(tmp_path):
    run_dir = tmp_path / "runs" / "job"
    checkpoints = run_dir / "checkpoints" / "job-uid"
    checkpoints.mkdir(parents=True)
    rows = [{"timesteps": 1000 * i, "wall_seconds": 2.0 * i, "episode_return_mean": 20.0 * i,
             "eval_return": None if i % 2 else 40.0 * i, "restart": 0 if i < 5 else 1} for i in range(1, 9)]
    (checkpoints / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def kuberl_plot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "plot", *args], check=False, capture_output=True,
                          text=True, timeout=120)


def test_a_learning_curve_is_written_from_progress(tmp_path):
    run_dir = a_run(tmp_path)
    out = plot(str(run_dir))
    assert out == str(run_dir / "learning-curve.png")
    with open(out, "rb") as f:
        assert f.read(8) == PNG


def test_dash_o_writes_the_png_where_the_user_says_and_nothing_in_the_run(tmp_path):
    """`kuberl plot` had no way to choose where the PNG goes: always RUN_DIR/learning-curve.png."""
    run_dir = a_run(tmp_path)
    for flag, name in (("-o", "a.png"), ("--output", "b.PNG")):
        done = kuberl_plot(str(run_dir), flag, str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{tmp_path / name}\n"
        assert (tmp_path / name).read_bytes()[:8] == PNG
    assert not (run_dir / "learning-curve.png").exists()


@pytest.mark.parametrize("name,said", [
    ("curve.svg", "only .png is written"),
    ("missing/curve.png", "no directory {tmp}/missing"),
    ("dir.png", "is a directory; name a file"),
])
def test_dash_o_that_cannot_be_written_is_refused_before_plotting_naming_the_flag(tmp_path, name, said):
    run_dir = a_run(tmp_path)
    (tmp_path / "dir.png").mkdir()
    done = kuberl_plot(str(run_dir), "-o", str(tmp_path / name))
    assert done.returncode == 1
    assert done.stderr == f"kuberl plot: -o {tmp_path / name}: {said.format(tmp=tmp_path)}\n"
    assert "Traceback" not in done.stderr and not (run_dir / "learning-curve.png").exists()


def test_plotting_a_run_without_progress_says_so(tmp_path, capsys):
    assert cmd_plot(argparse.Namespace(run_dir=str(tmp_path))) == 1
    assert "no progress.jsonl" in capsys.readouterr().err


def test_plotting_a_path_that_is_no_directory_names_it_without_asking_about_progress(tmp_path, capsys):
    model = tmp_path / "final-model.pt"
    model.write_bytes(b"x")
    for path, what in ((tmp_path / "runs" / "typo", "no such directory"), (model, "not a directory")):
        assert cmd_plot(argparse.Namespace(run_dir=str(path))) == 1
        assert capsys.readouterr().err == f"kuberl plot: {path}: {what} (give a run directory of kuberl run, e.g. runs/<job>)\n"


def test_plotting_the_directory_of_runs_names_the_runs_in_it(tmp_path, capsys):
    """`kuberl plot runs` asked "has the run reported progress yet?" of kuberl run's --dir itself."""
    for job in ("cartpole-ppo", "cartpole-dqn"):
        (tmp_path / "runs" / job).mkdir(parents=True)
        (tmp_path / "runs" / job / "job.yaml").write_text("{}\n")
    runs = tmp_path / "runs"
    assert cmd_plot(argparse.Namespace(run_dir=str(runs))) == 1
    assert capsys.readouterr().err == (f"kuberl plot: {runs} holds runs, not one run: give one of them"
                                       f" ({runs}/cartpole-dqn, {runs}/cartpole-ppo)\n")



def test_evaluations_recorded_at_earlier_timesteps_are_drawn_in_timestep_order_within_their_generation():
    """evalWhileTraining records an evaluation when it ends, at the timesteps of the copy it evaluated
    (256 after 1152), and each progress line repeats the last eval return: drawn in file order, both
    lines went back and forth, the evaluation line between fresh and repeated returns, and the training
    line through returns recorded later than their timesteps."""
    def row(steps, wall, mean, last_eval, restart=0, evaluation=False):
        return {"timesteps": steps, "wall_seconds": wall, "episode_return_mean": mean, "eval_return": last_eval,
                "restart": restart, **({"evaluation": True, "evaluated_while_training": True} if evaluation else {})}

    rows = [row(1152, 5.1, -21.0, None), row(256, 10.4, -21.0, -20.0, evaluation=True), row(2816, 10.5, -20.5, -20.0),
            row(4480, 15.6, -20.5, -20.0), row(2816, 18.2, -20.5, -20.5, evaluation=True), row(6144, 20.6, -20.5, -20.5),
            row(3000, 30.0, -20.0, -19.0, restart=1, evaluation=True), row(2000, 31.0, -20.0, -18.0, restart=1, evaluation=True)]
    assert curve(rows, "timesteps", "eval_return") == [(256, -20.0), (2816, -20.5), (2000, -18.0), (3000, -19.0)]
    assert [x for x, _ in curve(rows, "timesteps", "episode_return_mean")] == [1152, 2816, 4480, 6144]  # an evaluation's
    # row carries the training return of when it was recorded, not of its timesteps
    assert [x for x, _ in curve(rows, "wall_seconds", "eval_return")] == [10.4, 18.2, 30.0, 31.0]
    unmarked = [{k: v for k, v in r.items() if k not in ("evaluation", "evaluated_while_training")}
                for r in rows[:4]]  # an earlier trainer's file
    assert curve(unmarked, "timesteps", "eval_return") == [(256, -20.0), (2816, -20.0), (4480, -20.0)]


def test_the_training_line_goes_through_evaluations_between_updates():
    """`make train`'s own file: an evaluation every 5 updates, a progress line every 5 s, so 16 of its 22 rows are
    evaluations. The training line went through the other 6 alone, flat from 20,304 to 33,022 timesteps where
    the run had said 180 and 177 on the way: an evaluation between updates is at its own timesteps."""
    def row(steps, mean, evaluation=False, checkpoint=None):
        return {"timesteps": steps, "wall_seconds": steps / 5000, "episode_return_mean": mean, "eval_return": 100.0,
                "restart": 0, **({"evaluation": True} if evaluation else {}), **({"checkpoint": checkpoint} if checkpoint else {})}

    rows = [row(20304, 164.2, evaluation=True), row(20304, 164.2, checkpoint="ckpt-40.pt"), row(22844, 180.2, evaluation=True),
            row(25386, 176.8, evaluation=True), row(28445, 164.0), row(30479, 164.8, evaluation=True)]
    assert curve(rows, "timesteps", "episode_return_mean") == [
        (20304, 164.2), (20304, 164.2), (22844, 180.2), (25386, 176.8), (28445, 164.0), (30479, 164.8)]
    assert [x for x, _ in curve(rows, "timesteps", "eval_return")] == [20304, 22844, 25386, 30479]


def test_the_title_names_the_dotted_lines_only_where_there_are_some():
    """Every plot said "(dotted: gang restarts)", make train's included, which has none."""
    one = [{"timesteps": 1, "restart": 0}, {"timesteps": 2, "restart": 0}]
    assert plot_title("cartpole-ppo", one, 100) == "cartpole-ppo"
    resumed = [*one, {"timesteps": 3, "restart": 2}]
    assert plot_title("cartpole-ppo", resumed, 100) == "cartpole-ppo (dotted: gang restarts and resumes)"
    assert plot_title("j", one, PROGRESS_TAIL_BYTES + 1).startswith("j (the last 16 MiB of ")
    many = [{"timesteps": i, "restart": i} for i in range(MAX_RESUME_MARKS + 2)]
    assert plot_title("j", many, 100) == f"j (dotted: gang restarts and resumes (the newest {MAX_RESUME_MARKS} of 501))"


def test_a_file_of_thousands_of_generations_draws_its_newest_marks_as_one_collection(tmp_path, monkeypatch):
    """progress.jsonl is the trainer's to write, and a run directory anyone's: 5,000 one-row generations (each a
    resumed row and a report) took kuberl plot 14.6 s, one axvline each; the 16 MiB it reads holds 90,000. What is
    drawn is counted, not timed (a timed bound fails on a loaded CI machine): per axes its curves, a legend and one collection
    of at most MAX_RESUME_MARKS dotted lines, where one axvline each drew 5,000 artists."""
    from matplotlib.figure import Figure

    run_dir = a_run(tmp_path)
    rows = [row for i in range(5000) for row in ({"timesteps": 10 * i, "wall_seconds": i, "restart": i, "resumed": True},
                                                 {"timesteps": 10 * i + 5, "wall_seconds": i + 0.5, "restart": i,
                                                  "episode_return_mean": float(i % 50)})]
    (run_dir / "checkpoints" / "job-uid" / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn, savefig = [], Figure.savefig

    def counted_savefig(fig, *args, **kwargs):
        for ax in fig.axes:
            segments = sum(len(c.get_segments()) for c in ax.collections if hasattr(c, "get_segments"))
            drawn.append((len(ax.get_children()), segments))
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", counted_savefig)
    with open(plot(str(run_dir)), "rb") as f:
        assert f.read(8) == PNG
    empty = len(Figure().add_subplot().get_children())  # an axes' own artists: spines, axis, title, patch
    assert len(drawn) == 2 and all(artists <= empty + 4 and segments == MAX_RESUME_MARKS for artists, segments in drawn), drawn


def test_the_resumed_marker_sits_at_the_step_the_run_resumed_from():
    """A CartPole run stopped at 68,722 timesteps and run again: its dotted line was drawn at 71,281, the first
    report after the resume, not at 68,722, the checkpoint it resumed from (which the trainer now marks)."""
    from kuberl.local.curves import resume_marks

    before = [{"timesteps": 61065, "wall_seconds": 17.2, "restart": 0}, {"timesteps": 68722, "wall_seconds": 18.3, "restart": 0,
                                                                         "checkpoint": "ckpt-0000000135.pt"}]
    after = [{"timesteps": 68722, "wall_seconds": 18.4, "episode_return_mean": None, "restart": 1, "resumed": True},
             {"timesteps": 71281, "wall_seconds": 18.9, "episode_return_mean": 127.0, "restart": 1}]
    assert resume_marks(before + after, "timesteps") == [68722]
    assert resume_marks(before + after, "wall_seconds") == [18.4]
    # a gang restart that went back to an older checkpoint: the marker goes back with it
    older = [{"timesteps": 40000, "wall_seconds": 19.0, "restart": 2, "resumed": True}, {"timesteps": 42000, "restart": 2}]
    assert resume_marks(before + after + older, "timesteps") == [68722, 40000]
    # an earlier trainer's file (no resumed row), or a restart before any checkpoint: the generation's first row
    assert resume_marks(before + after[1:], "timesteps") == [71281]
    assert resume_marks(before, "timesteps") == [] and resume_marks([], "timesteps") == []
    # the resumed row carries no training return: no point of the training line at the resume
    assert curve(before + after, "timesteps", "episode_return_mean") == [(71281, 127.0)]
