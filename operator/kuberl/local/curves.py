"""progress.jsonl, rank 0's record of a run (docs/environment-contract.md), read and drawn: `kuberl run`'s summary
reads its last records; `kuberl plot` draws one run's learning curve, or several runs' on one figure to compare
them (seeds, hyperparameters, algorithms), as TensorBoard's or CleanRL's overlaid runs are compared."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import sys

from ..core.outputfile import output_problem
from ..core.rundirs import RUN_JOB_FILE, missing_run_hint
from .process import read_regular_tail

# What is read of a progress.jsonl: its last records (80,000 or so), whatever its size.
PROGRESS_TAIL_BYTES = 16 << 20


def progress_tail(checkpoint_dir: str | None) -> str:
    """The end of the run's progress.jsonl (`read_regular_tail`), or ""."""
    read = read_regular_tail(os.path.join(checkpoint_dir, "progress.jsonl"), PROGRESS_TAIL_BYTES) if checkpoint_dir else None
    return read[0] if read else ""


def last_progress(checkpoint_dir: str | None) -> dict:
    return progress_record(progress_tail(checkpoint_dir).splitlines())


def progress_records(lines: list[str]) -> list[dict]:
    """The lines of a progress.jsonl that are JSON objects: a line cut short (a disk that filled, a kill
    mid-write) or a custom trainer's own format in that file is skipped, never a traceback at the run's end."""
    records = []
    for line in lines:
        with contextlib.suppress(ValueError, RecursionError):  # a line of "[" nests deeper than json decodes
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def progress_record(lines: list[str]) -> dict:
    """The last record of a progress.jsonl (see `progress_records`), or {}."""
    for line in reversed(lines):
        found = progress_records([line])
        if found:
            return found[0]
    return {}


def finite_number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def progress_files(checkpoints: str) -> list[str]:
    """Every progress.jsonl under the checkpoint directory; links are not followed (a trainer's or a careless
    hand's `ln -s . a; ln -s . b` there made a recursive glob walk 2^40 paths)."""
    return [os.path.join(parent, "progress.jsonl") for parent, _, files in os.walk(checkpoints) if "progress.jsonl" in files]


def curve(rows: list[dict], x_key: str, y_key: str) -> list[tuple[float, float]]:
    """The (x, y) points of one line, in x order within each generation: an evaluation while training
    (spec.success.evalWhileTraining) is recorded when it ends, at the earlier timesteps of the weights it
    evaluated, and drawn in file order both lines went back and forth. Across generations the file's order
    stays (a resume from an older checkpoint goes back, as the dotted line shows). Where the trainer marks
    evaluations, the evaluation line goes through their rows alone (every row repeats the last eval return,
    older than a later-recorded evaluation of earlier weights), and the training line through every row but
    an evaluation while training's (it carries the training return of when it was recorded, not of its
    timesteps; an evaluation between updates is at its own timesteps, and most of a run's rows)."""
    evaluations = [r for r in rows if r.get("evaluation") is True]
    if evaluations:  # none: an earlier trainer's file, every row drawn on both lines
        rows = evaluations if y_key == "eval_return" else [r for r in rows if r.get("evaluated_while_training") is not True]
    points: list[tuple[float, float]] = []
    for _, generation in itertools.groupby(rows, key=lambda r: r.get("restart")):
        drawn = [(r[x_key], r[y_key]) for r in generation if finite_number(r.get(y_key)) is not None and finite_number(r.get(x_key)) is not None]
        points += sorted(drawn, key=lambda point: point[0])
    return points


def resume_marks(rows: list[dict], x_key: str) -> list[float]:
    """Where each generation after the first (a gang restart, or a resume after Ctrl-C) starts on the `x_key` axis:
    at the timesteps (or wall time) of the checkpoint it loaded, the row the trainer marks `resumed`. It was drawn at
    the generation's first row, the first report after the resume (an update or more later, 2,559 timesteps past a
    resume at 68,722 in a CartPole run). An earlier trainer's file, with no such row, keeps that first row; a
    generation that loaded nothing (a restart before any checkpoint) starts at its first row too."""
    marks = []
    for index, (_, generation) in enumerate(itertools.groupby(rows, key=lambda r: r.get("restart"))):
        records = list(generation)
        start = next((r for r in records if r.get("resumed") is True), records[0])
        if index > 0 and finite_number(start.get(x_key)) is not None:
            marks.append(start[x_key])
    return marks


# Dotted lines drawn at most (the newest): more than an axis' pixels show apart, and a file of 90,000 one-row
# generations (a hostile or broken trainer's) took 24 s to draw as one line each.
MAX_RESUME_MARKS = 500


def plot(run_dir: str, output: str | None = None) -> str:
    """A PNG of return against timesteps and against wall time, from progress.jsonl; written to `output`,
    else to the run directory's learning-curve.png. Returns where."""
    if not os.path.isdir(run_dir):  # "has the run reported progress yet?" misleads about a path that is no run
        what = "not a directory" if os.path.exists(run_dir) else "no such directory"
        hint = missing_run_hint(run_dir) if what == "no such directory" else ""
        raise FileNotFoundError(f"{run_dir}: {what} (give a run directory of kuberl run, e.g. runs/<job>){hint}")
    found = sorted(progress_files(os.path.join(run_dir, "checkpoints")), key=os.path.getmtime)
    if not found and (runs := runs_in(run_dir)):  # `kuberl plot runs`: --dir itself, not one of its runs
        raise FileNotFoundError(f"{run_dir} holds runs, not one run: give one of them ({', '.join(runs[:4])}"
                                f"{', …' if len(runs) > 4 else ''})")
    if not found:
        raise FileNotFoundError(f"no progress.jsonl under {run_dir}/checkpoints (has the run reported progress yet?)")
    text, size = read_regular_tail(found[-1], PROGRESS_TAIL_BYTES) or ("", 0)
    rows = progress_records(text.splitlines())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, x_key, x_label in ((axes[0], "timesteps", "timesteps"), (axes[1], "wall_seconds", "wall time (s)")):
        for key, label in (("episode_return_mean", "training return (mean)"), ("eval_return", "evaluation return")):
            if points := curve(rows, x_key, key):
                ax.plot(*zip(*points, strict=True), marker="o" if key == "eval_return" else ".", markersize=3, label=label)
        if marks := resume_marks(rows, x_key)[-MAX_RESUME_MARKS:]:
            ax.vlines(marks, 0, 1, transform=ax.get_xaxis_transform(), colors="grey", linestyles=":", linewidth=1)
        ax.set_xlabel(x_label)
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right")
    fig.suptitle(plot_title(os.path.basename(os.path.abspath(run_dir)), rows, size))
    out = output or os.path.join(run_dir, "learning-curve.png")
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)
    return out


def runs_in(directory: str) -> list[str]:
    """The run directories directly under `directory` (each has the job.yaml kuberl run writes), sorted."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if os.path.isfile(os.path.join(directory, n, RUN_JOB_FILE))]


def plot_title(name: str, rows: list[dict], size: int) -> str:
    """The run's name, what the dotted lines are where there are any (a new generation: a gang restart, or a resume
    after Ctrl-C), and how much of a long file was drawn. It named the dotted lines on every plot, none drawn."""
    generations = sum(r.get("restart") != prev.get("restart") for prev, r in itertools.pairwise(rows))
    newest = f" (the newest {MAX_RESUME_MARKS} of {generations:,})" if generations > MAX_RESUME_MARKS else ""
    notes = [*([f"dotted: gang restarts and resumes{newest}"] if generations else []),
             *([f"the last {PROGRESS_TAIL_BYTES >> 20} MiB of {size / 2**20:,.0f} MiB of records"] if size > PROGRESS_TAIL_BYTES else [])]
    return f"{name} ({'; '.join(notes)})" if notes else name


def plot_output_problem(path: str | None) -> str | None:
    """Why `kuberl plot -o` could not be written, said before anything is read (as kuberl eval's --video)."""
    return output_problem("-o", path, ".png")


def cmd_plot(args: argparse.Namespace) -> int:
    output = getattr(args, "output", None)
    if refused := plot_output_problem(output):
        print(f"kuberl plot: {refused}", file=sys.stderr)
        return 1
    try:
        print(plot(args.run_dir, output))
    except FileNotFoundError as e:
        print(f"kuberl plot: {e}", file=sys.stderr)
        return 1
    return 0
