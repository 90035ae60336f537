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
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from ..core import metricnames as m
from ..core import safetext
from ..core.lifecycle import SUCCEEDED
from ..core.outputfile import output_problem
from ..core.rundirs import RUN_JOB_FILE, missing_run_hint, runs_in
from ..core.runrecords import (
    RECORD_LIMIT,
    job_of,
    read_regular_file,
    recorded_learned_values,
    recorded_target_return,
    run_labels,
)
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


# The largest magnitude drawn or compared: matplotlib's axis ticks overflow (ValueError: arange) for a range near
# float's limit, and a progress.jsonl is the run's to write (a trainer's own, or anyone's on the volume).
MAX_NUMBER = 1e100


def finite_number(value: object) -> float | None:
    """`value` where it is a number (no bool) of magnitude at most MAX_NUMBER; None otherwise: NaN, infinities, and
    an integer of thousands of digits, which no float holds (math.isfinite raised OverflowError on it)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return value if math.isfinite(value) and abs(value) <= MAX_NUMBER else None
    except OverflowError:
        return None


def progress_files(checkpoints: str) -> list[str]:
    """Every progress.jsonl under the checkpoint directory that is a regular file; links are not followed (a trainer's
    or a careless hand's `ln -s . a; ln -s . b` there made a recursive glob walk 2^40 paths), and a link named
    progress.jsonl is none: read_regular_tail never reads one, and its time, read through a loop, raised."""
    found = (os.path.join(parent, "progress.jsonl") for parent, _, files in os.walk(checkpoints) if "progress.jsonl" in files)
    return [path for path in found if is_regular_file(path)]


def is_regular_file(path: str) -> bool:
    """Whether `path` itself, not a link's target, is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


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


def is_progress_file(path: str) -> bool:
    """A progress.jsonl given itself (fetched from a cluster's pod: docs/cluster.md), not its run directory."""
    return path.endswith(".jsonl") and os.path.isfile(path)


def run_dir_problem(run_dir: str) -> str | None:
    """Why `run_dir` is no directory to look for runs in (nor a progress file), naming the runs beside it a typo
    may have meant."""
    if os.path.isdir(run_dir) or is_progress_file(run_dir):
        return None
    what = "not a directory" if os.path.exists(run_dir) else "no such directory"
    hint = missing_run_hint(run_dir) if what == "no such directory" else ""
    return f"{run_dir}: {what} (give a run directory of kuberl run, e.g. runs/<job>){hint}"


def newest_progress_file(run_dir: str) -> str | None:
    """The progress.jsonl a run wrote last (one per job uid it ran as), or None; a progress file given is itself."""
    if is_progress_file(run_dir):
        return run_dir
    found = sorted(progress_files(os.path.join(run_dir, "checkpoints")), key=os.path.getmtime)
    return found[-1] if found else None


def read_progress(path: str) -> tuple[list[dict], int]:
    """The records of a progress.jsonl's last PROGRESS_TAIL_BYTES, and the file's size."""
    text, size = read_regular_tail(path, PROGRESS_TAIL_BYTES) or ("", 0)
    return progress_records(text.splitlines()), size


def literal(text: str) -> str:
    """`text` as matplotlib draws it letter for letter: two '$' in a title or legend start its mathtext, and a run
    directory or a learned value holding `$\\frac{$` ended kuberl plot in a ParseSyntaxException at savefig."""
    return text.replace("$", r"\$")


def shortened(text: str, width: int = 80) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    line = safetext.one_line(text)
    return line if len(line) <= width else line[:width - 1] + "…"


class PlotNotWritten(OSError):
    """The PNG could not take its name (a directory there, a directory of runs that refuses the rename)."""


def save_png(fig, out: str) -> None:
    """`fig` as a PNG at `out`, written to a new file beside it and renamed onto the name: a runs/ directory is anyone's
    to write (a shared volume, a run's own pods), and a link left at learning-curve.png had the plot written over the
    file the link named, a FIFO there hung kuberl plot. A link or a FIFO at `out` is replaced, never followed."""
    fd, part = tempfile.mkstemp(dir=os.path.dirname(out) or ".", prefix=f".{os.path.basename(out)}.", suffix=".part")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as a file opened to write is made (mkstemp's is 0600)
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, dpi=100, format="png")
        try:
            os.replace(part, out)
        except OSError as e:
            why = "a directory is there" if os.path.isdir(out) else e.strerror or str(e)
            raise PlotNotWritten(f"{out}: not written, {why} (name another file with -o)") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


AXES = (("timesteps", "timesteps"), ("wall_seconds", "wall time (s)"))
# The job's success.targetReturn, across the return axes: whether and when the evaluations reached what the run
# stops at, and how far off a run that did not, at a glance
TARGET_STYLE = {"color": "black", "linestyle": "-.", "linewidth": 1, "alpha": 0.6}
# A target that would leave the returns less of their axis than this is not drawn: a targetReturn of 1e9, set so
# that nothing stops a run early, flattened its curves into one line
TARGET_MIN_SHARE = 0.05


def targets_in_reach(targets: list[float], low: float, high: float) -> list[float]:
    """The targets to draw on an axis whose returns span `low` to `high`: each that leaves them at least
    TARGET_MIN_SHARE of the axis it stretches to."""
    return [t for t in targets if high - low >= TARGET_MIN_SHARE * (max(high, t) - min(low, t))]


def draw_targets(axes, targets: list[float]) -> None:
    """Each target return in reach a line across each of `axes`, named in the first one's legend."""
    for i, ax in enumerate(axes):
        for target in targets_in_reach(targets, *ax.get_ylim()):
            ax.axhline(target, label=f"target {target:g} (success.targetReturn)" if i == 0 else None, **TARGET_STYLE)


def plot(run_dir: str, output: str | None = None) -> str:
    """A PNG of return against timesteps and against wall time, from progress.jsonl; written to `output`,
    else to the run directory's learning-curve.png. Returns where."""
    if refused := run_dir_problem(run_dir):  # "has the run reported progress yet?" misleads about a path that is no run
        raise FileNotFoundError(refused)
    found = newest_progress_file(run_dir)
    if not found:
        raise FileNotFoundError(f"no progress.jsonl under {run_dir}/checkpoints (has the run reported progress yet?)")
    rows, size = read_progress(found)
    target = recorded_target_return(progress_run_dir(found))
    plt = pyplot()
    names = update_names([rows])
    fig, [(axes, panels)] = figure(plt, 11, [names])
    for ax, (x_key, x_label) in zip(axes, AXES, strict=True):
        for key, label in (("episode_return_mean", "training return (mean)"), ("eval_return", "evaluation return")):
            if points := curve(rows, x_key, key):
                ax.plot(*zip(*points, strict=True), marker="o" if key == "eval_return" else ".", markersize=3, label=label)
        if marks := resume_marks(rows, x_key)[-MAX_RESUME_MARKS:]:
            ax.vlines(marks, 0, 1, transform=ax.get_xaxis_transform(), colors="grey", linestyles=":", linewidth=1)
        ax.set_xlabel(x_label)
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    draw_targets(axes, [target] if target is not None else [])
    if axes[0].get_legend_handles_labels()[0]:  # none before a first return: matplotlib warned of an empty legend
        axes[0].legend(loc="lower right")
    for name, ax in zip(names, panels, strict=True):
        if points := update_points(rows, name):
            ax.plot(*zip(*points, strict=True), linewidth=1, marker=".", markersize=3)
    over_timesteps([(axes, panels)])
    fig.suptitle(literal(plot_title(run_names([run_dir])[0], rows, size)))
    out = output or (os.path.splitext(run_dir)[0] + ".png" if is_progress_file(run_dir) else os.path.join(run_dir, "learning-curve.png"))
    save_png(fig, out)
    plt.close(fig)
    return out


# --- the updates' statistics, under the returns -----------------------------------

# What an update reports (UpdateReport.losses, the trainer's metrics) and its learning rate, in the order drawn;
# a progress.jsonl's other keys are not drawn (the file is anyone's to write: 10,000 keys are not 10,000 panels).
UPDATE_STATISTICS = (*m.LOSS_GAUGES, "learning_rate")
PANELS_PER_ROW = 4


def update_names(runs_rows: list[list[dict]]) -> list[str]:
    """The update statistics any of these runs recorded as numbers (progress.jsonl's `update`), in UPDATE_STATISTICS'
    order: one with nothing to draw has no panel."""
    seen = {name for rows in runs_rows for row in rows if isinstance(row.get("update"), dict)
            for name, value in row["update"].items() if finite_number(value) is not None}
    rate = any(finite_number(row.get(STEPS_PER_SECOND)) is not None for rows in runs_rows for row in rows)
    return [name for name in UPDATE_STATISTICS if name in seen] + ([STEPS_PER_SECOND] if seen and rate else [])


# The run's speed, each progress line's (env steps of every rank a second), drawn beside what each update reports.
STEPS_PER_SECOND = "steps_per_second"
PANEL_TITLES = {STEPS_PER_SECOND: "env steps/s (all ranks)"}


def update_points(rows: list[dict], name: str) -> list[tuple[float, float]]:
    """One update statistic (or the run's speed) against timesteps, ordered as `curve` orders a return."""
    if name == STEPS_PER_SECOND:
        return curve(rows, "timesteps", name)
    flat = [{"timesteps": row.get("timesteps"), "restart": row.get("restart"), name: row["update"].get(name)}
            for row in rows if isinstance(row.get("update"), dict)]
    return curve(flat, "timesteps", name)


def figure(plt, width: float, sections: list[list[str]]):
    """A figure of `sections`, one an env where runs of several are compared (their returns and losses share no
    scale: CartPole's policy loss beside Pendulum SAC's): each a row of two return axes (timesteps, wall time) and,
    under it, a small axes for each of its statistics that its runs recorded. Returns the figure and, for each
    section, its pair of return axes and its statistics' axes."""
    heights = [h for statistics in sections for h in (2, *[1] * math.ceil(len(statistics) / PANELS_PER_ROW))]
    fig = plt.figure(figsize=(width, sum(heights) * 2 + 0.2 * (len(heights) - len(sections))), layout="constrained")
    grid = fig.add_gridspec(len(heights), 2 * PANELS_PER_ROW, height_ratios=heights)
    laid_out, row = [], 0
    for statistics in sections:
        pair = [fig.add_subplot(grid[row, :PANELS_PER_ROW]), fig.add_subplot(grid[row, PANELS_PER_ROW:])]
        panels = []
        for i, name in enumerate(statistics):
            panel_row, column = divmod(i, PANELS_PER_ROW)
            ax = fig.add_subplot(grid[row + 1 + panel_row, 2 * column:2 * column + 2])
            ax.set_title(PANEL_TITLES.get(name, name.replace("_", " ")), fontsize="small")
            ax.tick_params(labelsize="x-small")
            ax.locator_params(axis="x", nbins=4)  # timesteps' labels, five digits each, ran into one another
            ax.grid(alpha=0.3)
            panels.append(ax)
        laid_out.append((pair, panels))
        row += 1 + math.ceil(len(statistics) / PANELS_PER_ROW)
    return fig, laid_out


def over_timesteps(sections) -> None:
    """Each statistic's panel spans its section's timesteps axis, so a panel's points sit under the returns of the same
    timesteps: a short run's one speed point (its final progress line) had an axis of its own, 20,250 to 20,330,
    beside panels of 2,500 to 20,000."""
    for (timesteps, _), panels in sections:
        for ax in panels:
            ax.set_xlim(timesteps.get_xlim())


# --- several runs on one figure --------------------------------------------------

# Runs drawn at most, the ones that reported last: matplotlib's tab20 has as many colours, and more lines than
# that on one axes are not told apart.
MAX_COMPARED_RUNS = 20
# Target returns drawn on one env's axes at most (runs of one job with targets raised and lowered); the lowest first
MAX_TARGET_LINES = 3
COMPARISON_FILE = "learning-curves.png"


def holds_runs(path: str) -> bool:
    """Whether `path` is a directory of runs (kuberl run's --dir, `runs`) rather than one run."""
    return os.path.isdir(path) and not progress_files(os.path.join(path, "checkpoints")) and bool(runs_in(path))


def compared_runs(paths: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The (name, progress.jsonl) of each run to compare, in the order given (a directory of runs gives its runs,
    sorted), and a line for each run left out: no progress yet, or beyond MAX_COMPARED_RUNS (the newest are drawn).
    A path that is no directory raises FileNotFoundError naming it; so does having no run with progress at all."""
    runs: list[str] = []
    for path in paths:
        if refused := run_dir_problem(path):
            raise FileNotFoundError(refused)
        runs += runs_in(path) if holds_runs(path) else [path]
    seen, found, left_out = set(), [], []
    for run in runs:
        if os.path.realpath(run) in seen:
            continue
        seen.add(os.path.realpath(run))
        progress = newest_progress_file(run)
        if progress is None:
            left_out.append(f"{run}: no progress.jsonl under {run}/checkpoints yet (left out)")
        else:
            found.append((run, progress))
    if not found:
        raise FileNotFoundError(f"no progress.jsonl in any of {', '.join(runs[:4])}{', …' if len(runs) > 4 else ''}"
                                " (has any run reported progress yet?)")
    if len(found) > MAX_COMPARED_RUNS:
        newest = set(sorted((p for _, p in found), key=os.path.getmtime)[-MAX_COMPARED_RUNS:])
        left_out += [f"{run}: left out, only the {MAX_COMPARED_RUNS} runs that reported last are drawn"
                     for run, p in found if p not in newest]
        found = [(run, p) for run, p in found if p in newest]
    return [(name, p) for name, p in zip(run_names([run for run, _ in found]), (p for _, p in found), strict=True)], left_out


# Runs of one job named in kuberl run's summary at most; past it, their directory.
MAX_NAMED_RUNS = 4


def job_runs(run_dir: str) -> list[str]:
    """The runs of `run_dir`'s job that have reported progress, this one among them, in its --dir: the job's own
    directory and each runs/<job>.<fingerprint> that a spec learning something else started beside it."""
    base = os.path.dirname(os.path.normpath(run_dir))
    return [run for run in runs_in(base) if job_of(run) == job_of(run_dir) and newest_progress_file(run)]


def compare_note(run_dir: str, shown: Callable[[str], str] = str) -> str:
    """kuberl run's summary's pointer to the kuberl plot that compares this run with its job's others (another
    learning rate, another seed), '' where it has none: the runs named, or their directory past MAX_NAMED_RUNS."""
    runs = job_runs(run_dir)
    if len(runs) < 2:
        return ""
    named = runs if len(runs) <= MAX_NAMED_RUNS else [os.path.dirname(os.path.normpath(run_dir))]
    return f"; compared with its other runs: kuberl plot {' '.join(map(shown, named))}"


def labelled(runs: list[tuple[str, str]], learned: Callable[[str], Mapping[str, Any] | None] | None
             ) -> list[tuple[str, str, int, str | None]]:
    """`compared_runs`' runs as (legend entry, progress.jsonl, group, env id where recorded): named and grouped by
    `run_labels` (a configuration's seeds one group, drawn in one colour), from what `learned` reads of each run."""
    run_dirs = [progress_run_dir(progress) for _, progress in runs]
    values = [learned(run_dir) if learned is not None and run_dir else None for run_dir in run_dirs]
    labels, groups = run_labels([name for name, _ in runs], [job_of(run_dir) for run_dir in run_dirs], values)
    envs = [env_id(v) for v in values]
    return [(label, progress, group, env) for label, (_, progress), group, env in zip(labels, runs, groups, envs, strict=True)]


def env_id(learned: Mapping[str, Any] | None) -> str | None:
    """The env a run's recorded learned values name (`env.id`), or None."""
    env = learned.get("env") if isinstance(learned, Mapping) else None
    found = env.get("id") if isinstance(env, Mapping) else None
    return found if isinstance(found, str) else None


def progress_run_dir(progress: str) -> str | None:
    """The run directory of kuberl run a progress.jsonl is in (RUN_DIR/checkpoints/<uid>/progress.jsonl, RUN_DIR
    holding the job.yaml kuberl run wrote), or None: a file fetched from a cluster, wherever it was put."""
    run_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(progress))))
    inside = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(progress)))) == "checkpoints"
    return run_dir if inside and os.path.isfile(os.path.join(run_dir, RUN_JOB_FILE)) else None


def run_names(runs: list[str]) -> list[str]:
    """Each run's legend entry: its directory's name, or the path as given where two runs share a name
    (runs/ppo beside other-runs/ppo)."""
    names = [os.path.splitext(os.path.basename(run))[0] if run.endswith(".jsonl") else os.path.basename(os.path.abspath(run))
             for run in runs]  # abspath: `kuberl plot .` is the run's own name, not "."
    return [name if names.count(name) == 1 else os.path.normpath(run) for name, run in zip(names, runs, strict=True)]


def comparison_output(paths: list[str]) -> str:
    """Where a comparison goes without -o: into the directory of runs given (`kuberl plot runs`), or the directory
    every given run sits in; the current directory where they sit in different ones."""
    if len(paths) == 1:
        return os.path.join(paths[0], COMPARISON_FILE)
    parents = {os.path.dirname(os.path.abspath(path)) for path in paths}
    return os.path.join(parents.pop(), COMPARISON_FILE) if len(parents) == 1 else COMPARISON_FILE


def comparison_lines(rows: list[dict], x_key: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """One run's evaluation line and training line on the `x_key` axis (`curve`'s points)."""
    return curve(rows, x_key, "eval_return"), curve(rows, x_key, "episode_return_mean")


def compare(paths: list[str], output: str | None = None,
            learned: Callable[[str], Mapping[str, Any] | None] | None = None) -> tuple[str, list[str]]:
    """A PNG of several runs' returns against timesteps and against wall time, one colour a group of runs (`labelled`:
    a run, or one configuration's seeds): evaluation return solid with dots, training return dashed; a group of seeds
    draws each seed faint and, on both axes, their mean evaluation return where every seed evaluated. Returns
    where it went and what was left out (`compared_runs`)."""
    found, left_out = compared_runs(paths)
    runs = labelled(found, learned)
    plt = pyplot()
    group_ids = list(dict.fromkeys(group for _, _, group, _ in runs))
    colours = dict(zip(group_ids, plt.get_cmap("tab20" if len(group_ids) > 10 else "tab10").colors, strict=False))
    read = [(label, group, *read_progress(progress)) for label, progress, group, _ in runs]
    # returns and losses of different envs share no scale (CartPole's 0 to 500 beside Pendulum's -1,500 to -150):
    # a section each, its returns and its own runs' update statistics
    envs = list(dict.fromkeys(env for *_, env in runs))
    names = {env: update_names([rows for (*_, rows, _), (*_, of) in zip(read, runs, strict=True) if of == env]) for env in envs}
    fig, sections = figure(plt, 12, [names[env] for env in envs])
    axes_of = {group: sections[envs.index(env)][0] for _, _, group, env in runs}
    panels_of = {group: list(zip(names[env], sections[envs.index(env)][1], strict=True)) for _, _, group, env in runs}
    members = {group: [rows for _, of, rows, _ in read if of == group] for group in group_ids}
    succeeded = {group: [run_succeeded(progress) for _, progress, of, _ in runs if of == group] for group in group_ids}
    # a configuration's seeds: their mean against each axis (the k-th evaluations' mean timesteps, mean wall time)
    means = {group: {x_key: mean_evaluation(rows, x_key, succeeded[group]) for x_key, _ in AXES}
             for group, rows in members.items() if len(rows) > 1}
    cut_short = []
    for label, group, rows, size in read:
        axes = axes_of[group]
        if size > PROGRESS_TAIL_BYTES:
            cut_short.append(label)
        colour, seeds = colours.get(group, "grey"), len(members[group]) > 1
        named = rows is members[group][0] and not means.get(group, {}).get("timesteps")  # once a group: by its mean line where it has one
        faint = {"alpha": 0.35, "linewidth": 0.8} if seeds else {}
        for statistic, ax in panels_of[group]:
            if points := update_points(rows, statistic):
                ax.plot(*zip(*points, strict=True), marker=".", markersize=3, color=colour, **(faint or {"linewidth": 1}))
        for ax, (x_key, _) in zip(axes, AXES, strict=True):
            evaluated, trained = comparison_lines(rows, x_key)
            if trained:
                ax.plot(*zip(*trained, strict=True), linestyle="--", linewidth=1, alpha=0.7 if not seeds else 0.35,
                        color=colour, label=literal(label) if named and not evaluated else None)
            if evaluated:
                ax.plot(*zip(*evaluated, strict=True), marker="o", markersize=3, color=colour,
                        label=literal(label) if named else None, **faint)
    for group, on_axes in means.items():
        label = next(label for label, of, _, _ in read if of == group)
        for ax, (x_key, _) in zip(axes_of[group], AXES, strict=True):
            if mean := on_axes[x_key]:
                ax.plot(*zip(*mean, strict=True), marker="o", markersize=4, linewidth=2.2, color=colours.get(group, "grey"),
                        label=literal(label) if x_key == "timesteps" else None)  # the legend is on the timesteps axes
    targets = {env: set() for env in envs}  # an env's runs' targets: one line each, as many as differ
    for _, progress, _, env in runs:
        if (target := recorded_target_return(progress_run_dir(progress))) is not None:
            targets[env].add(target)
    for env, (axes, _) in zip(envs, sections, strict=True):
        for ax, (_, x_label) in zip(axes, AXES, strict=True):
            ax.set_xlabel(x_label)
            ax.set_ylabel("return")
            ax.grid(alpha=0.3)
        draw_targets(axes, sorted(targets[env])[:MAX_TARGET_LINES])
        if len(envs) > 1:
            # the id a run's fingerprint.json records, anyone's to write: 2 MB of it collapsed the layout
            axes[0].set_title(literal(shortened(env or "env not recorded")), fontsize="medium")
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(loc="lower right", fontsize="small")
    over_timesteps(sections)
    notes = [f"the last {PROGRESS_TAIL_BYTES >> 20} MiB of records of {', '.join(cut_short)}"] if cut_short else []
    seeded = " (seeds faint, their mean bold)" if any(len(rows) > 1 for rows in members.values()) else ""
    fig.suptitle(literal(f"{len(runs)} runs: evaluation return solid{seeded}, training return (mean) dashed"
                         + (f" ({'; '.join(notes)})" if notes else "")))
    out = output or comparison_output(paths)
    save_png(fig, out)
    plt.close(fig)
    return out, left_out


def mean_evaluation(runs_rows: list[list[dict]], x_key: str = "timesteps",
                    finished: list[bool] | None = None) -> list[tuple[float, float]]:
    """Several seeds' mean evaluation return: the mean of each one's k-th evaluation, at their mean `x_key` (seeds
    evaluate after the same updates, whose timesteps differ by a few steps, as episodes end differently: CartPole's
    seeds' 20th evaluations were at 25,129 and 25,152; their wall times differ more); as far as the shortest seed
    still to finish goes, [] below two points. A `finished` seed (it succeeded: its target met, its model final)
    keeps its last evaluation in the mean after it stopped, at the others' `x_key`: the mean of three CartPole seeds
    that met 475 at 18,000, 38,000 and 41,000 timesteps ended at 270, at the first one's stop, where each seed's
    model scores about 490 (`kuberl run --seeds`' mean, `kuberl eval runs`')."""
    curves = [curve(rows, x_key, "eval_return") for rows in runs_rows]
    done = finished or [False] * len(curves)
    held = [c for c, over in zip(curves, done, strict=True) if c or not over]  # a finished seed never evaluated: none to hold
    running = [len(c) for c, over in zip(curves, done, strict=True) if not over]
    length = min(running) if running else max(map(len, held), default=0)
    if length < 2 or not held:
        return []
    points = []
    for k in range(length):
        xs = [c[k][0] for c in held if k < len(c)]
        points.append((sum(xs) / len(xs), sum(c[min(k, len(c) - 1)][1] for c in held) / len(held)))
    return points


def run_succeeded(progress: str) -> bool:
    """Whether the run a progress.jsonl is of ended succeeded (its run directory's status.json); False for a file
    fetched from a cluster, alone, and for a run that failed, was stopped or still runs."""
    run_dir = progress_run_dir(progress)
    text = read_regular_file(os.path.join(run_dir, "status.json"), RECORD_LIMIT) if run_dir else None
    with contextlib.suppress(ValueError, AttributeError, TypeError, RecursionError):
        return bool(text) and json.loads(text).get("phase") == SUCCEEDED
    return False


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
        if len(args.run_dirs) == 1 and not holds_runs(args.run_dirs[0]):
            print(plot(args.run_dirs[0], output))
            return 0
        out, left_out = compare(args.run_dirs, output, learned=recorded_learned_values)
    except (FileNotFoundError, PlotNotWritten) as e:
        print(f"kuberl plot: {safetext.one_line(str(e))}", file=sys.stderr)
        return 1
    for line in left_out:  # a run's directory name is anyone's to choose: escaped, one line each
        print(f"kuberl plot: {safetext.one_line(line)}", file=sys.stderr)
    print(out)
    return 0
