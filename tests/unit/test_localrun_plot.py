"""`kuberl plot runs/<job>`: a PNG learning curve from the trainer's progress.jsonl."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kuberl.core.fingerprint import distinguishing_values, seed_groups
from kuberl.local.curves import (
    COMPARISON_FILE,
    MAX_COMPARED_RUNS,
    MAX_NAMED_RUNS,
    MAX_RESUME_MARKS,
    PROGRESS_TAIL_BYTES,
    cmd_plot,
    compare_note,
    comparison_output,
    curve,
    mean_evaluation,
    plot,
    plot_title,
    run_names,
    targets_in_reach,
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
    assert cmd_plot(argparse.Namespace(run_dirs=[str(tmp_path)])) == 1
    assert "no progress.jsonl" in capsys.readouterr().err


def test_plotting_a_path_that_is_no_directory_names_it_without_asking_about_progress(tmp_path, capsys):
    model = tmp_path / "final-model.pt"
    model.write_bytes(b"x")
    for path, what in ((tmp_path / "runs" / "typo", "no such directory"), (model, "not a directory")):
        assert cmd_plot(argparse.Namespace(run_dirs=[str(path)])) == 1
        assert capsys.readouterr().err == f"kuberl plot: {path}: {what} (give a run directory of kuberl run, e.g. runs/<job>)\n"


def test_plotting_a_directory_of_runs_none_with_progress_names_the_runs_in_it(tmp_path, capsys):
    """`kuberl plot runs` asked "has the run reported progress yet?" of kuberl run's --dir itself."""
    for job in ("cartpole-ppo", "cartpole-dqn"):
        (tmp_path / "runs" / job).mkdir(parents=True)
        (tmp_path / "runs" / job / "job.yaml").write_text("{}\n")
    runs = tmp_path / "runs"
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)])) == 1
    assert capsys.readouterr().err == (f"kuberl plot: no progress.jsonl in any of {runs}/cartpole-dqn, {runs}/cartpole-ppo"
                                       " (has any run reported progress yet?)\n")
    assert not (runs / COMPARISON_FILE).exists()


def a_named_run(runs, name, scale=1.0, evaluated=True):
    """A run directory as kuberl run leaves one (job.yaml, checkpoints/<uid>/progress.jsonl)."""
    checkpoints = runs / name / "checkpoints" / f"{name}-uid"
    checkpoints.mkdir(parents=True)
    (runs / name / "job.yaml").write_text("{}\n")
    rows = [{"timesteps": 1000 * i, "wall_seconds": 2.0 * i, "episode_return_mean": scale * i,
             "eval_return": scale * 2 * i if evaluated and i % 2 == 0 else None, "restart": 0} for i in range(1, 7)]
    (checkpoints / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return runs / name


def drawn_lines(monkeypatch):
    """Per axes of each figure saved, its lines as (label, colour, linestyle, point count)."""
    from matplotlib.figure import Figure

    drawn, savefig = [], Figure.savefig

    def counted_savefig(fig, *args, **kwargs):
        drawn.append([[(line.get_label(), line.get_color(), line.get_linestyle(), len(line.get_xdata()))
                       for line in ax.get_lines()] for ax in fig.axes])
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", counted_savefig)
    return drawn


def test_several_runs_are_drawn_on_one_figure_a_colour_each(tmp_path, monkeypatch, capsys):
    """Comparing runs (seeds, a hyperparameter, two algorithms) meant one PNG each, side by side by hand."""
    runs = tmp_path / "runs"
    ppo, dqn = a_named_run(runs, "cartpole-ppo"), a_named_run(runs, "cartpole-dqn", scale=3.0)
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(ppo), str(dqn)], output=None)) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"{runs / COMPARISON_FILE}\n", "")
    assert (runs / COMPARISON_FILE).read_bytes()[:8] == PNG
    assert not (ppo / "learning-curve.png").exists()
    [axes] = drawn
    for lines in axes:  # per run: training dashed (6 reports), evaluation solid (3), the legend naming the run once
        assert [(label, style, n) for label, _, style, n in lines] == [
            ("_child0", "--", 6), ("cartpole-ppo", "-", 3), ("_child2", "--", 6), ("cartpole-dqn", "-", 3)]
        colours = [colour for _, colour, _, _ in lines]
        assert colours[0] == colours[1] != colours[2] == colours[3]


def test_a_directory_of_runs_compares_the_runs_that_reported_and_names_the_others(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    a_named_run(runs, "seed-1")
    a_named_run(runs, "seed-2", scale=2.0, evaluated=False)
    (runs / "seed-3").mkdir()
    (runs / "seed-3" / "job.yaml").write_text("{}\n")  # started, no report yet
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=str(tmp_path / "seeds.png"))) == 0
    out, err = capsys.readouterr()
    assert out == f"{tmp_path / 'seeds.png'}\n"
    assert err == f"kuberl plot: {runs}/seed-3: no progress.jsonl under {runs}/seed-3/checkpoints yet (left out)\n"
    # a run never evaluated has its training line in the legend
    assert [label for label, *_ in drawn[0][0]] == ["_child0", "seed-1", "seed-2"]


def test_past_the_colours_the_runs_that_reported_last_are_drawn_and_the_rest_named(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    for i in range(MAX_COMPARED_RUNS + 2):
        run = a_named_run(runs, f"run-{i:02d}")
        progress = next((run / "checkpoints").rglob("progress.jsonl"))
        os.utime(progress, (1_000_000 + i, 1_000_000 + i))  # run-00 and run-01 reported first
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert capsys.readouterr().err == "".join(
        f"kuberl plot: {runs}/run-0{i}: left out, only the {MAX_COMPARED_RUNS} runs that reported last are drawn\n"
        for i in (0, 1))
    labels = [label for label, *_ in drawn[0][0] if not label.startswith("_")]
    assert labels == [f"run-{i:02d}" for i in range(2, MAX_COMPARED_RUNS + 2)]
    assert len({colour for _, colour, *_ in drawn[0][0]}) == MAX_COMPARED_RUNS


def test_a_path_that_is_no_run_among_several_is_named_and_nothing_is_drawn(tmp_path, capsys):
    runs = tmp_path / "runs"
    ppo = a_named_run(runs, "cartpole-ppo")
    assert cmd_plot(argparse.Namespace(run_dirs=[str(ppo), str(runs / "cartpole-pp")], output=None)) == 1
    assert capsys.readouterr().err == (f"kuberl plot: {runs}/cartpole-pp: no such directory (give a run directory of"
                                       f" kuberl run, e.g. runs/<job>); did you mean {runs}/cartpole-ppo?\n")
    assert not (runs / COMPARISON_FILE).exists()


def test_runs_sharing_a_name_are_told_apart_by_path_and_the_picture_goes_where_they_sit():
    assert run_names(["runs/ppo", "runs/dqn"]) == ["ppo", "dqn"]
    assert run_names(["runs/ppo/", "old/ppo", "runs/dqn"]) == ["runs/ppo", "old/ppo", "dqn"]
    assert comparison_output(["runs"]) == os.path.join("runs", COMPARISON_FILE)
    assert comparison_output(["runs/a", "runs/b/"]) == os.path.join(os.path.abspath("runs"), COMPARISON_FILE)
    assert comparison_output(["runs/a", "old/b"]) == COMPARISON_FILE


def test_the_cli_takes_several_run_directories(tmp_path):
    runs = tmp_path / "runs"
    done = kuberl_plot(str(a_named_run(runs, "a")), str(a_named_run(runs, "b")))
    assert done.returncode == 0 and done.stdout == f"{runs / COMPARISON_FILE}\n", done.stderr
    assert kuberl_plot().returncode == 2  # one RUN_DIR at least


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


def test_each_legend_entry_names_the_learned_values_that_set_its_run_apart(tmp_path, monkeypatch):
    """A job run again with another learning rate lands in runs/<job>.<fingerprint>: a name that says nothing of
    what was tried. The legend reads each run's recorded learned values (fingerprint.json) and names the differing."""
    runs = tmp_path / "runs"
    learned = {"algorithm": "ppo", "seed": 1, "ppo": {"learningRate": 0.0003, "numEnvs": 8}}
    records = {"cartpole-ppo": learned, "cartpole-ppo.27acc18a": {**learned, "ppo": {"learningRate": 0.001, "numEnvs": 8}},
               "cartpole-ppo.9b1e0c2d": {**learned, "seed": 2}}
    for name, values in records.items():
        a_named_run(runs, name)
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": values}))
    a_named_run(runs, "older")  # no record: named alone
    a_named_run(runs, "cartpole-dqn")  # another job: its name tells it apart (from a PPO job, in 40 values)
    (runs / "cartpole-dqn" / "fingerprint.json").write_text(json.dumps({"learned": {"algorithm": "dqn", "seed": 1}}))
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert [label for label, *_ in drawn[0][0] if not label.startswith("_")] == [
        "cartpole-dqn", "cartpole-ppo.27acc18a (ppo.learningRate 0.001)", "older",
        # the two runs that differ in their seed alone: one configuration, drawn as their mean, named once
        "cartpole-ppo (ppo.learningRate 0.0003; seeds 1, 2)"]


def test_distinguishing_values_are_the_leaves_that_differ_and_nothing_when_all_agree():
    same = {"seed": 1, "env": {"kwargs": {}}}
    assert distinguishing_values([same, same]) == ["", ""]
    assert distinguishing_values([same]) == [""]  # one recorded run: nothing to tell it from
    assert distinguishing_values([same, None, {"seed": 1, "env": {"kwargs": {"max_episode_steps": 200}}}]) == [
        "env.kwargs.max_episode_steps null", "", "env.kwargs.max_episode_steps 200"]
    many = [{f"f{i}": run for i in range(5)} for run in (1, 2)]
    assert distinguishing_values(many, limit=3) == ["f0 1, f1 1, f2 1 and 2 more", "f0 2, f1 2, f2 2 and 2 more"]
    assert distinguishing_values([{"tag": "x" * 100}, {"tag": "y"}])[0] == 'tag "xxxxxxxxxxxxxxxxxxxx...'



def test_a_runs_summary_points_at_the_plot_comparing_it_with_its_jobs_other_runs(tmp_path):
    """A job rerun with another learning rate or seed starts runs/<job>.<fingerprint> beside the first; the summary
    named only the new run's own curve, and nothing said the runs could be drawn together."""
    runs = tmp_path / "runs"
    first = a_named_run(runs, "cartpole-ppo")
    assert compare_note(str(first)) == ""  # alone
    a_named_run(runs, "cartpole-ppo-big")  # another job whose name starts the same
    (runs / "cartpole-ppo.0badc0de").mkdir()  # started, never reported
    (runs / "cartpole-ppo.0badc0de" / "job.yaml").write_text("{}\n")
    assert compare_note(str(first)) == ""
    second = a_named_run(runs, "cartpole-ppo.27acc18a")
    assert compare_note(str(second)) == f"; compared with its other runs: kuberl plot {first} {second}"
    for i in range(MAX_NAMED_RUNS - 1):
        a_named_run(runs, f"cartpole-ppo.{i:08x}")
    assert compare_note(str(first), shown=os.path.basename) == "; compared with its other runs: kuberl plot runs"


def test_dollar_signs_in_names_and_values_are_drawn_as_they_are_not_as_mathtext(tmp_path, monkeypatch):
    """Two '$' in a title or legend are matplotlib's mathtext: a run directory or a learned value (env.kwargs is the
    tenant's to fill) holding `$\\frac{$` ended kuberl plot in a ParseSyntaxException when the PNG was written."""
    runs = tmp_path / "runs"
    odd = a_named_run(runs, "a$\\frac{$")
    (odd / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"kwargs": {"mode": "$\\sqrt{$"}}}}))
    other = a_named_run(runs, "a$\\frac{$.0badc0de")  # the same job, run again with another value
    (other / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"kwargs": {"mode": "plain"}}}}))
    assert plot(str(odd)).endswith("learning-curve.png")
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert (runs / COMPARISON_FILE).read_bytes()[:8] == PNG
    assert "a\\$\\frac{\\$ (env.kwargs.mode \"\\$\\\\sqrt{\\$\")" in [label for label, *_ in drawn[0][0]]


def test_a_progress_file_fetched_from_a_cluster_is_plotted_and_compared_by_its_name(tmp_path, monkeypatch, capsys):
    """A cluster run's progress.jsonl is on its checkpoint volume: fetched with kubectl exec … cat (docs/cluster.md),
    it could not be drawn (kuberl plot took run directories of kuberl run only)."""
    run = a_run(tmp_path)
    fetched = tmp_path / "pong-ppo.jsonl"
    fetched.write_bytes(next((run / "checkpoints").rglob("progress.jsonl")).read_bytes())
    assert plot(str(fetched)) == str(tmp_path / "pong-ppo.png")
    assert (tmp_path / "pong-ppo.png").read_bytes()[:8] == PNG
    local = a_named_run(tmp_path / "runs", "pong-ppo")
    (local / "fingerprint.json").write_text(json.dumps({"learned": {"seed": 1}}))
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(fetched), str(local)], output=str(tmp_path / "both.png"))) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'both.png'}\n"
    # the same name, told apart by path; the fetched file's directory is no run, so no values are read for it
    assert [label for label, *_ in drawn[0][0] if not label.startswith("_")] == [str(fetched), str(local)]
    assert run_names([".", "x.jsonl"]) == [os.path.basename(os.getcwd()), "x"]


def test_each_statistics_panel_spans_the_returns_timesteps(tmp_path, monkeypatch):
    """docs/local-runs.md's seeds loop with a short budget: each run's speed was one point, its final line's, and its
    panel's axis ran from 20,250 to 20,330 beside the others' 2,500 to 20,000: no point sat under its returns."""
    from matplotlib.figure import Figure

    runs = tmp_path / "runs"
    for name in ("ppo", "ppo.0000aaaa"):
        progress = a_named_run(runs, name) / "checkpoints" / f"{name}-uid" / "progress.jsonl"
        rows = [{**json.loads(line), "update": {"value_loss": 1.0}} for line in progress.read_text().splitlines()]
        rows[-1]["steps_per_second"] = 5000.0
        progress.write_text("".join(json.dumps(r) + "\n" for r in rows))
    limits, savefig = [], Figure.savefig

    def recorded_savefig(fig, *args, **kwargs):
        limits.append([ax.get_xlim() for ax in fig.axes])
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recorded_savefig)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0  # compared
    plot(str(runs / "ppo"))  # one run
    for timesteps, _wall_time, *panels in limits:
        assert len(panels) == 2 and all(panel == timesteps for panel in panels), (timesteps, panels)  # value loss, speed


def test_one_configurations_seeds_are_one_colour_and_their_mean_the_bold_line(tmp_path, monkeypatch):
    """Three seeds of a job (`--set seed=N`, each its own runs/<job>.<fingerprint>) were three unrelated colours:
    the spread between seeds, which RL results are read against, looked like three configurations."""
    runs = tmp_path / "runs"
    for seed, name in ((1, "ppo"), (2, "ppo.0000aaaa"), (3, "ppo.0000bbbb")):
        a_named_run(runs, name, scale=float(seed))
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"seed": seed, "ppo": {"numEnvs": 8}}}))
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    lines = drawn[0][0]  # timesteps axes: per seed training and evaluation, then the mean
    assert len({colour for _, colour, _, _ in lines}) == 1
    assert [(label, n) for label, _, _, n in lines if not label.startswith("_")] == [("ppo (seeds 1, 2, 3)", 3)]
    # wall time: each seed and their mean too (against their k-th evaluations' mean wall time), named on the other axes
    assert all(label.startswith("_") for label, *_ in drawn[0][1])
    assert [(colour, n) for *_, colour, _, n in drawn[0][1]][-1] == (lines[-1][1], 3)
    def evaluated_at(*points):
        return [{"timesteps": 100 * k, "wall_seconds": x, "eval_return": y, "restart": 0} for k, (x, y) in enumerate(points)]

    slow, fast = evaluated_at((6.0, 30.0), (10.0, 40.0), (14.0, 50.0)), evaluated_at((4.0, 10.0), (8.0, 20.0), (12.0, 30.0))
    assert mean_evaluation([slow, fast], "wall_seconds") == [(5.0, 20.0), (9.0, 30.0), (13.0, 40.0)]


def test_seeds_mean_is_each_ones_kth_evaluation_as_far_as_the_shortest_goes():
    def evaluated(*points):
        return [{"timesteps": x, "eval_return": y, "evaluation": True, "restart": 0} for x, y in points]

    seeds = [evaluated((1000, 10.0), (2003, 20.0), (3000, 90.0)), evaluated((1001, 30.0), (2001, 40.0))]
    assert mean_evaluation(seeds) == [(1000.5, 20.0), (2002.0, 30.0)]  # timesteps differ a little, seed to seed
    assert mean_evaluation([evaluated((1, 1.0)), evaluated((1, 3.0), (2, 4.0))]) == []  # one point is no line
    assert seed_groups([{"seed": 1, "a": 1}, {"seed": 2, "a": 2}, {"seed": 3, "a": 1}, None, None]) == [0, 1, 0, 3, 4]
    assert distinguishing_values([{"seed": 1, "a": 1}, {"seed": 2, "a": 2}], ignored=("seed",)) == ["a 1", "a 2"]



def test_a_seed_that_succeeded_keeps_its_last_evaluation_in_the_mean_after_it_stopped():
    """Three CartPole seeds that met 475 at 18,000, 38,000 and 41,000 timesteps: the bold mean ended at 270, where
    the first one stopped, while `kuberl run --seeds` and `kuberl eval runs` gave the configuration about 490."""
    def evaluated(*points):
        return [{"timesteps": x, "eval_return": y, "evaluation": True, "restart": 0} for x, y in points]

    early, late = evaluated((1000, 10.0), (2000, 480.0)), evaluated((1001, 30.0), (2001, 40.0), (3001, 470.0))
    assert mean_evaluation([early, late], finished=[True, True]) == [(1000.5, 20.0), (2000.5, 260.0), (3001.0, 475.0)]
    assert mean_evaluation([early, late], finished=[True, False]) == [(1000.5, 20.0), (2000.5, 260.0), (3001.0, 475.0)]
    # one still to finish (stopped, failed, running, or a cluster's file alone) ends the mean where it ends, as before
    assert mean_evaluation([early, late], finished=[False, True]) == [(1000.5, 20.0), (2000.5, 260.0)]
    assert mean_evaluation([early, late]) == [(1000.5, 20.0), (2000.5, 260.0)]
    assert mean_evaluation([[], late], finished=[True, True]) == [(1001.0, 30.0), (2001.0, 40.0), (3001.0, 470.0)]


def test_the_plot_reads_which_seeds_succeeded_from_their_run_directories(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for seed, name, evaluations in ((1, "ppo", 3), (2, "ppo.0000aaaa", 2)):
        checkpoints = runs / name / "checkpoints" / f"{name}-uid"
        checkpoints.mkdir(parents=True)
        (runs / name / "job.yaml").write_text("{}\n")
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"seed": seed}}))
        rows = [{"timesteps": 1000 * k, "wall_seconds": k, "eval_return": 100.0 * k, "evaluation": True, "restart": 0}
                for k in range(1, evaluations + 1)]
        (checkpoints / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    (runs / "ppo.0000aaaa" / "status.json").write_text(json.dumps({"phase": "Succeeded", "generation": 0}))
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    (runs / "ppo.0000aaaa" / "status.json").write_text(json.dumps({"phase": "Failed", "generation": 0}))
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    # the timesteps axes' last line is the seeds' mean: as far as seed 2 goes, then on to seed 1's end once it succeeded
    assert [figure[0][-1][3] for figure in drawn] == [2, 3, 2]

def test_runs_of_different_envs_get_a_row_of_return_axes_each(tmp_path, monkeypatch):
    """After the README's quickstart `kuberl plot runs` drew CartPole's returns (0 to 500) and Pendulum's (-1,500 to
    -150) on one axis, each flattened by the other's scale."""
    from matplotlib.figure import Figure

    runs = tmp_path / "runs"
    for name, env, scale in (("cartpole-ppo", "CartPole-v1", 50.0), ("cartpole-dqn", "CartPole-v1", 40.0),
                             ("pendulum-sac", "Pendulum-v1", -100.0)):
        a_named_run(runs, name, scale=scale)
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"id": env}, "seed": 1}}))
    drawn, savefig = [], Figure.savefig

    def axes_drawn(fig, *args, **kwargs):
        drawn.extend((ax.get_title(), [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")])
                     for ax in fig.axes)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", axes_drawn)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert drawn == [("CartPole-v1", ["cartpole-dqn", "cartpole-ppo"]), ("", ["cartpole-dqn", "cartpole-ppo"]),
                     ("Pendulum-v1", ["pendulum-sac"]), ("", ["pendulum-sac"])]  # each env's timesteps, then wall time


def test_an_env_id_of_megabytes_in_a_fingerprint_is_a_short_title(tmp_path, monkeypatch):
    """fingerprint.json is anyone's to write: a 2 MB env id became a row's title, and the figure's layout collapsed."""
    from matplotlib.figure import Figure

    runs = tmp_path / "runs"
    for name, env in (("a", "CartPole-v1"), ("b", "x" * 2_000_000 + "\n")):
        a_named_run(runs, name)
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"id": env}}}))
    titles, savefig = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (titles.extend(ax.get_title() for ax in fig.axes), savefig(fig, *a, **k)))
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert titles[0] == "CartPole-v1" and titles[2] == "x" * 79 + "…"


def test_each_envs_update_statistics_are_drawn_under_its_own_returns(tmp_path, monkeypatch):
    """The update statistics' panels were shared by every run: CartPole PPO's policy loss (about 0.01) and Pendulum
    SAC's (about 100) on one scale after the README's quickstart, one of them a flat line. Each env now has its own
    panels, of what its runs recorded, under its returns."""
    from matplotlib.figure import Figure

    runs = tmp_path / "runs"
    recorded = {"cartpole-ppo": ("CartPole-v1", {"policy_loss": 0.01, "approx_kl": 0.002}),
                "cartpole-dqn": ("CartPole-v1", {"q_value": 20.0}),
                "pendulum-sac": ("Pendulum-v1", {"policy_loss": 100.0, "entropy_coefficient": 0.1})}
    for name, (env, update) in recorded.items():
        progress = a_named_run(runs, name) / "checkpoints" / f"{name}-uid" / "progress.jsonl"
        rows = [{**json.loads(line), "update": update} for line in progress.read_text().splitlines()]
        progress.write_text("".join(json.dumps(r) + "\n" for r in rows))
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"id": env}, "seed": 1}}))
    drawn, savefig = [], Figure.savefig

    def axes_drawn(fig, *args, **kwargs):
        drawn.extend((ax.get_title(), len(ax.get_lines())) for ax in fig.axes)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", axes_drawn)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    cartpole = [("CartPole-v1", 4), ("", 4), ("policy loss", 1), ("approx kl", 1), ("q value", 1)]
    pendulum = [("Pendulum-v1", 2), ("", 2), ("policy loss", 1), ("entropy coefficient", 1)]
    assert drawn == cartpole + pendulum, drawn


def test_a_recorded_seed_of_any_size_or_shape_is_named_short():
    """fingerprint.json is anyone's to write: a 200 kB string as a run's `seed` became its legend entry, and the
    figure's layout collapsed (as a 2 MB env id's title had). Seeds are named as other recorded values are, cut
    short, and at most SEEDS_NAMED of a configuration's."""
    from kuberl.core.runrecords import SEEDS_NAMED, run_labels

    values = [{"seed": "x" * 200_000, "a": 1}, {"seed": {"deep": [1] * 1000}, "a": 1}, {"seed": 3, "a": 1}]
    labels, groups = run_labels(["j", "j.1", "j.2"], ["j"] * 3, values)
    assert groups == [0, 0, 0] and labels[0] == labels[1] == labels[2]
    assert labels[0] == 'j (seeds "xxxxxxxxxxxxxxxxxxxx..., {"deep": [1, 1, 1, 1,..., 3)', labels[0]  # 24 characters each
    many = [{"seed": s, "a": 1} for s in range(SEEDS_NAMED + 5)]
    labels, _ = run_labels([f"j.{s}" for s in range(len(many))], ["j"] * len(many), many)
    assert labels[0] == f"j (seeds {', '.join(map(str, range(SEEDS_NAMED)))} and 5 more)"


def test_a_run_of_the_job_without_a_readable_record_is_drawn_beside_its_others(tmp_path, monkeypatch):
    """A job's run whose fingerprint.json went missing or holds no record (and whose job.yaml is no job) beside one
    that has its record: `kuberl plot` (and `kuberl eval runs`) ended in an AttributeError naming its seed."""
    runs = tmp_path / "runs"
    a_named_run(runs, "cartpole-ppo")
    (runs / "cartpole-ppo" / "fingerprint.json").write_text(json.dumps({"learned": {"seed": 1, "algorithm": "ppo"}}))
    a_named_run(runs, "cartpole-ppo.1a2b3c4d", scale=2.0)
    (runs / "cartpole-ppo.1a2b3c4d" / "fingerprint.json").write_text("[]")
    a_named_run(runs, "cartpole-ppo.5e6f7a8b", scale=3.0)  # no fingerprint.json at all
    drawn = drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert sorted(label for label, *_ in drawn[0][0] if not label.startswith("_")) == [
        "cartpole-ppo", "cartpole-ppo.1a2b3c4d", "cartpole-ppo.5e6f7a8b"]


def test_a_recorded_fields_path_is_named_short_and_safe_however_its_keys_are_written():
    """fingerprint.json's keys are anyone's too: one of 20,000 dots took 2 s to tell apart (every prefix of every path
    was named, the square of its dots; 16 MB of them, for ever) and became a legend entry 20,000 characters long; a
    key with an escape sequence reached the terminal of `kuberl eval runs` as it was."""
    from kuberl.core.fingerprint import changed_fields, describe_changes

    dotted = {"a" + "." * 20_000: 1}
    assert distinguishing_values([dotted, {"b": 2}]) == ["a....................................... 1, b null", "a....................................... null, b 2"]
    escaped = distinguishing_values([{"x\x1b[2J\n": 1}, {"x\x1b[2J\n": 2}])
    assert escaped == ["x\\x1b[2J\\n 1", "x\\x1b[2J\\n 2"]
    assert describe_changes(changed_fields({"k\r": 1}, {"k\r": 2})) == "k\\r 1 -> 2"
    assert changed_fields({"env": {}}, {"env": {"a": 1}}) == [("env.a", None, 1)]  # an empty map is no leaf beside keys


@pytest.mark.parametrize("rows", [
    [{"timesteps": 1, "episode_return_mean": 1e308}, {"timesteps": 2, "episode_return_mean": -1e308}],
    [{"timesteps": 1, "episode_return_mean": -1e308}],
    [{"timesteps": 10**4000, "episode_return_mean": 1.0}, {"timesteps": 2, "episode_return_mean": 1.0}],
    [{"timesteps": 1, "episode_return_mean": 1.0, "update": {"policy_loss": 10**4000, "value_loss": 1e308}}],
    [{"timesteps": 1, "episode_return_mean": None}, {"timesteps": [2], "episode_return_mean": {"a": 1}}],
], ids=["returns-at-floats-limit", "one-return-at-floats-limit", "timesteps-of-4000-digits", "statistics-past-float",
        "no-return-yet"])
def test_numbers_no_axis_can_hold_are_left_out_and_the_curve_is_drawn(tmp_path, rows, recwarn):
    """progress.jsonl is the run's to write: returns at float's limit ended kuberl plot in matplotlib's `ValueError:
    arange: cannot compute length` (its ticks overflow), an integer of 4,000 digits (within json's 4,300) in an
    OverflowError, and a run with no return yet warned of an empty legend, with matplotlib's source line."""
    import warnings

    warnings.simplefilter("always")
    run_dir = tmp_path / "runs" / "job"
    checkpoints = run_dir / "checkpoints" / "job-uid"
    checkpoints.mkdir(parents=True)
    (checkpoints / "progress.jsonl").write_text("".join(json.dumps({**row, "restart": 0}) + "\n" for row in rows))
    assert cmd_plot(argparse.Namespace(run_dirs=[str(run_dir)], output=None)) == 0
    assert (run_dir / "learning-curve.png").read_bytes().startswith(PNG)
    assert [str(w.message) for w in recwarn if "matplotlib" in w.filename or "curves" in w.filename] == []


def test_a_fingerprint_larger_than_any_kuberl_writes_is_not_read(tmp_path):
    """fingerprint.json is anyone's to write: one of 16 MiB (the limit of every run record) held 150 MB parsed, for
    each run compared. A valid spec's learned values fit the trainer's 1 MiB ConfigMap; a record past twice that is
    not kuberl's, and the run is named as one without a record (its job.yaml, where valid, still says)."""
    from kuberl.core.runrecords import FINGERPRINT_LIMIT, recorded_learned_values

    run = a_named_run(tmp_path / "runs", "j")
    learned = {"seed": 1, "env": {"kwargs": {"pad": "x" * (FINGERPRINT_LIMIT - 100)}}}
    (run / "fingerprint.json").write_text(json.dumps({"learned": learned}))
    assert recorded_learned_values(str(run)) == learned  # within the limit: read
    learned["env"]["kwargs"]["pad"] += "x" * 200
    (run / "fingerprint.json").write_text(json.dumps({"learned": learned}))
    assert recorded_learned_values(str(run)) is None  # its job.yaml is `{}`: no job either


def test_a_run_left_out_is_named_escaped_on_one_line(tmp_path, monkeypatch, capsys):
    """A run directory's name is anyone's to choose: one left out (no progress yet) was named as it was, its escape
    sequences and line breaks reaching the terminal."""
    runs = tmp_path / "runs"
    a_named_run(runs, "job")
    a_named_run(runs, "job.1")
    (runs / "job.\x1b[2J\nkuberl plot: forged").mkdir()
    (runs / "job.\x1b[2J\nkuberl plot: forged" / "job.yaml").write_text("{}\n")
    drawn_lines(monkeypatch)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and len(err.splitlines()) == 1 and "job.\\x1b[2J\\nkuberl plot: forged" in err, err


@pytest.mark.parametrize("planted", ["link", "fifo", "directory"])
def test_a_name_planted_where_the_png_goes_is_never_written_through_nor_waited_on(tmp_path, planted):
    """A runs/ directory is anyone's to write (a shared volume, a run's own pods): a link left at learning-curve.png
    had kuberl plot write its PNG over the file the link named, a FIFO there hung it, and a directory ended it in a
    traceback. The PNG is written beside the name and renamed onto it: a link or a FIFO is replaced, never followed."""
    run_dir = a_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("kept\n")
    out = run_dir / "learning-curve.png"
    {"link": lambda: out.symlink_to(victim), "fifo": lambda: os.mkfifo(out), "directory": out.mkdir}[planted]()
    done = kuberl_plot(str(run_dir))
    assert victim.read_bytes() == b"kept\n" and "Traceback" not in done.stderr, done.stderr
    if planted == "directory":
        assert done.returncode == 1 and out.is_dir()
        assert done.stderr == f"kuberl plot: {out}: not written, a directory is there (name another file with -o)\n"
    else:
        assert done.returncode == 0 and done.stdout == f"{out}\n", done.stderr
        assert not out.is_symlink() and out.read_bytes()[:8] == PNG
        assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())  # as a file opened to write is made
    assert sorted(os.listdir(run_dir)) == ["checkpoints", "learning-curve.png"]  # nothing left beside it


def test_a_comparison_never_writes_through_a_link_left_in_the_directory_of_runs(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    a_named_run(runs, "a")
    a_named_run(runs, "b")
    victim = tmp_path / "victim.txt"
    victim.write_text("kept\n")
    (runs / COMPARISON_FILE).symlink_to(victim)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    assert victim.read_bytes() == b"kept\n" and (runs / COMPARISON_FILE).read_bytes()[:8] == PNG


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def a_job_yaml(example: str, target: float | None) -> str:
    """The job.yaml kuberl run keeps of an example run with success.targetReturn `target` (None: unset)."""
    import yaml

    job = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests" / "examples" / example).read_text())
    job["spec"]["success"].pop("targetReturn")
    if target is not None:
        job["spec"]["success"]["targetReturn"] = target
    return yaml.safe_dump(job)


TARGET_LABEL = "target {:g} (success.targetReturn)"


def test_the_jobs_target_return_is_a_line_across_both_return_axes(tmp_path, monkeypatch):
    """make train's learning curve showed its evaluations climb to 492 and stop, with nothing to say that 475 was what
    it stopped at: whether and when a run reached its target was read off the summary line, not the picture."""
    runs = tmp_path / "runs"
    run = a_named_run(runs, "cartpole-ppo", scale=50.0)
    drawn = drawn_lines(monkeypatch)
    for target in (475, None, 1e9):  # 1e9: no early stop wanted, and no line that flattens the curves
        (run / "job.yaml").write_text(a_job_yaml("cartpole-ppo.yaml", target))
        plot(str(run))
    with_target, without, far = drawn
    for axes in with_target[:2]:  # timesteps, wall time: the line spans each, named in the first one's legend
        assert [(style, n) for _, _, style, n in axes][-1] == ("-.", 2)
    assert TARGET_LABEL.format(475) in [label for label, *_ in with_target[0]]
    assert all(style != "-." for axes in (*without[:2], *far[:2]) for _, _, style, _ in axes)


def test_a_target_is_drawn_where_the_returns_keep_a_twentieth_of_their_axis():
    assert targets_in_reach([475.0, 500.0, 1e9, -1e9], 0.0, 300.0) == [475.0, 500.0]
    assert targets_in_reach([475.0], 20.0, 50.0) == [475.0]  # a run far below its target: 30 of 455, how far is seen
    assert targets_in_reach([475.0], 20.0, 40.0) == []  # 20 of 455: the run's own ups and downs would be lost
    assert targets_in_reach([-200.0], -1750.0, -150.0) == [-200.0]


def test_compared_runs_draw_each_envs_targets_on_its_own_return_axes(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for name, example, env, target in (("cartpole-ppo", "cartpole-ppo.yaml", "CartPole-v1", 475),
                                       ("cartpole-dqn", "cartpole-dqn.yaml", "CartPole-v1", 500),
                                       ("cartpole-dqn.0000aaaa", "cartpole-dqn.yaml", "CartPole-v1", 500),
                                       ("pendulum-sac", "pendulum-sac.yaml", "Pendulum-v1", -200)):
        a_named_run(runs, name, scale=target / 10)  # returns of the target's size and sign
        (runs / name / "job.yaml").write_text(a_job_yaml(example, target))
        (runs / name / "fingerprint.json").write_text(json.dumps({"learned": {"env": {"id": env}, "seed": 1}}))
    from matplotlib.figure import Figure

    drawn, savefig = [], Figure.savefig

    def targets_drawn(fig, *args, **kwargs):  # per axes: each dash-dot line's height, and whether the legend names it
        drawn.extend([(line.get_ydata()[0], not line.get_label().startswith("_")) for line in ax.get_lines()
                      if line.get_linestyle() == "-."] for ax in fig.axes)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", targets_drawn)
    assert cmd_plot(argparse.Namespace(run_dirs=[str(runs)], output=None)) == 0
    cartpole, pendulum = ([(475, True), (500, True)], [(475, False), (500, False)]), ([(-200, True)], [(-200, False)])
    assert [axes for axes in drawn if axes] == [*cartpole, *pendulum]  # each env's timesteps and wall time axes alone
