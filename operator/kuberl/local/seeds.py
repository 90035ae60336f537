"""`kuberl run JOB.yaml --seeds 1,2,3`: one configuration's seeds, as CleanRL's benchmark utility runs them
(`--num-seeds`), one after another (each run already uses every core through its ranks), each a run of its own
(runs/<job>.<fingerprint>, as `--set seed=N` makes it), then one summary: each seed's result and their mean, as
`kuberl eval runs` scores a configuration, with the `kuberl plot` that draws them. The decisions are here, pure;
runner.cmd_run_seeds runs each seed.

The seeds are listed, not counted: they are the values the runs are named by (`cartpole-ppo (seeds 1, 2, 3)` in
`kuberl plot` and `kuberl eval runs`), and a count would need a first seed besides (CleanRL's --start-seed).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.contract import shown_return
from ..core.spec import JobSpec

EXIT_CANNOT_RUN = 3  # kuberl.cli's table, as runner's
EXIT_INTERRUPTED = 130

_SEED_BOUNDS = {name: getattr(m, name) for m in JobSpec.model_fields["seed"].metadata for name in ("ge", "le") if hasattr(m, name)}


def seeds_argument(text: str) -> list[int]:
    """`--seeds`' value: two or more distinct seeds separated by commas, each within spec.seed's bounds."""
    low, high = _SEED_BOUNDS["ge"], _SEED_BOUNDS["le"]
    got = repr(text) if len(text) <= 80 else f"{text[:77]!r}…"  # an argument may be 128 KiB
    seeds: dict[int, None] = {}  # ordered, and a set: a list's lookups took 3.4 s for 20,000 seeds
    for part in text.split(","):
        part = part.strip()
        # its length first: int() refuses more than 4,300 digits with a ValueError, which argparse said as
        # "invalid seeds_argument value" and the whole argument
        if not (part.isascii() and part.isdigit()) or len(part) > len(str(high)) or not low <= int(part) <= high:
            raise argparse.ArgumentTypeError(f"expected seeds separated by commas (1,2,3), each a whole number from {low}"
                                             f" to {high} as spec.seed takes it (got {got})")
        if int(part) in seeds:
            raise argparse.ArgumentTypeError(f"seed {int(part)} is listed twice (got {got}): each seed is one run")
        seeds[int(part)] = None
    if len(seeds) < 2:
        raise argparse.ArgumentTypeError(f"expected two or more seeds, the seeds themselves (1,2,3), not how many (got"
                                         f" {got}); one seed is --set seed={next(iter(seeds))}")
    return list(seeds)


def seeds_flag_problem(argv: Sequence[str]) -> str | None:
    """Why `--seeds VALUE` is refused where argparse cannot say: a list that starts with a minus (`--seeds -1,2`) is
    an option to argparse, which said only "expected one argument" (a lone `-1` it takes as a value, refused as
    `--seeds=-1,2` is, by seeds_argument). None: argparse reads the value itself."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--seeds" and value.startswith("-") and value[1:2].isdigit():
            try:
                seeds_argument(value)
            except argparse.ArgumentTypeError as refused:
                return str(refused)
    return None


def seeds_usage_problem(settings: Sequence[str], resume: bool) -> str | None:
    """Why --seeds cannot go with the other flags given (None: it can): each seed's run sets spec.seed itself, and
    --resume continues the job's one latest run, where each seed has a run of its own (rerun without it to resume)."""
    if any(setting.partition("=")[0].strip() in ("seed", "spec.seed") for setting in settings):
        return "--seeds sets each run's seed: leave out --set seed=…"
    if resume:
        return ("--resume continues the job's latest run, one run: with --seeds each seed resumes its own run"
                " (run the same command again), and a spec that learns otherwise starts fresh runs beside them")
    return None


@dataclass(frozen=True)
class SeedRun:
    """One seed's run, as the summary tells it."""
    seed: int
    code: int | None  # kuberl run's exit code; None: not started (an earlier seed was interrupted, or could not run)
    run_dir: str | None = None  # None: nothing kept (refused before it started)
    eval_return: float | None = None  # its last evaluation: the model it leaves, by the trainer's evaluation protocol
    timesteps: int | None = None


def goes_on(run: SeedRun) -> bool:
    """Whether the next seed starts after `run`: not after an interrupt (Ctrl-C stops them all; a rerun resumes),
    nor where this machine could not run it, nor after a job refused before anything started (the next seeds'
    jobs differ in their seed alone, and would be refused alike). A seed whose job failed while training is a
    result: the next seeds run."""
    if run.code in (EXIT_INTERRUPTED, EXIT_CANNOT_RUN):
        return False
    return not (run.code not in (0, None) and run.run_dir is None)


def exit_code(runs: Sequence[SeedRun]) -> int:
    """The command's exit code, as for several files (cli.for_each_file): the worst seed's; 130 (interrupted,
    resumable) wins, as the rerun is what finishes the seeds."""
    return max((run.code for run in runs if run.code is not None), default=0)


def outcome(run: SeedRun) -> str:
    """A seed's result in a few words."""
    if run.code is None:
        return "not run"
    if run.run_dir is None and run.code != 0:  # nothing kept: what stopped it is said above, as a run says it
        return "could not run here (said above)" if run.code == EXIT_CANNOT_RUN else "refused before it ran (said above)"
    returned = f"eval return {shown_return(run.eval_return)}" if run.eval_return is not None else "no evaluation yet"
    at = f" at {run.timesteps:,} timesteps" if run.timesteps is not None else ""
    state = {0: "", EXIT_INTERRUPTED: "stopped, resumable: ", EXIT_CANNOT_RUN: "could not run here: "}.get(run.code, "failed: ")
    return f"{state}{returned}{at}"


def summary_lines(job: str, runs: Sequence[SeedRun], shown: Callable[[str], str] = str) -> list[str]:
    """The lines that end `kuberl run --seeds`: each seed's result and run directory, the mean over the seeds that
    were evaluated (`kuberl eval runs`' score of a configuration: the mean of its seeds' returns), and the commands
    that draw and score them together."""
    lines = [f"seed {run.seed}: {outcome(run)}" + (f" ({shown(run.run_dir)})" if run.run_dir else "") for run in runs]
    evaluated = [run.eval_return for run in runs if run.eval_return is not None]
    if evaluated:
        of = f"{len(evaluated)} seeds" if len(evaluated) == len(runs) else f"{len(evaluated)} of {len(runs)} seeds"
        seeds = ", ".join(str(run.seed) for run in runs if run.eval_return is not None)
        lines.append(f"{job} (seeds {seeds}): mean over {of} {shown_return(sum(evaluated) / len(evaluated))}"
                     f" ({', '.join(map(shown_return, evaluated))}), each seed's last evaluation of its model")
    kept = [shown(run.run_dir) for run in runs if run.run_dir]
    if len(kept) > 1:
        lines.append(f"learning curves: kuberl plot {' '.join(kept)}; every model on the same episodes:"
                     f" kuberl eval {' '.join(kept)}")
    not_run = [str(run.seed) for run in runs if run.code is None]
    if not_run:
        lines.append(f"seed(s) {', '.join(not_run)} not started: run the same command again to run them"
                     " (seeds already trained are not trained again)")
    return lines
