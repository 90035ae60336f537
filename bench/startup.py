"""Launch to first env step, per rank and phase, through `kuberl run` as a user runs it: each case
is a short job (one update) whose ranks print `ready to step X s after launch (phases)`. The first
run of the whole script warms the page cache and is reported apart (cold); then every case runs
--reps times, interleaved, and each phase is reported as its median over runs and ranks.

    python bench/startup.py                                   # Pong and CartPole PPO, 1 and 2 ranks, 2 and 16 envs
    python bench/startup.py --cases pong:1:16 cartpole:2:2 --reps 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KUBERL = Path(sys.executable).with_name("kuberl")
JOBS = {  # the shipped examples, on the CPU (gpusPerWorker 0), for one update
    "pong": ("manifests/examples/pong-ppo-gpu.yaml", ["gpusPerWorker=0", "totalTimesteps=64"]),
    "cartpole": ("manifests/examples/cartpole-ppo.yaml", ["totalTimesteps=64"]),
}
READY = re.compile(r"\[rank (\d+)\] kuberl trainer: rank \d+ ready to step ([\d.]+) s after launch \((.*)\)")


def phases(line_tail: str) -> dict[str, float]:
    """'python and imports 2.01, rendezvous 0.05' -> {'python and imports': 2.01, 'rendezvous': 0.05}."""
    out = {}
    for part in line_tail.split(", "):
        name, _, value = part.rpartition(" ")
        out[name] = float(value)
    return out


def run_case(case: str, workdir: Path) -> list[dict[str, float]]:
    """One `kuberl run` of `case` (job:ranks:envs); each rank's phases and total."""
    job, ranks, envs = case.split(":")
    manifest, sets = JOBS[job]
    args = [str(KUBERL), "run", manifest, "--dir", str(workdir / f"{case.replace(':', '-')}-{time.monotonic_ns()}"),
            "--workers", ranks, "--set", f"env.numEnvs={envs}", *(a for s in sets for a in ("--set", s))]
    done = subprocess.run(args, check=False, cwd=REPO, capture_output=True, text=True, timeout=900)
    found = [(int(m[1]), {**phases(m[3]), "total": float(m[2])}) for m in READY.finditer(done.stdout)]
    if done.returncode != 0 or len(found) != int(ranks):
        raise SystemExit(f"{case}: kuberl run exited {done.returncode} with {len(found)} startup line(s):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return [seconds for _, seconds in sorted(found)]


def summary(runs: list[list[dict[str, float]]]) -> str:
    """Each phase's median over every run and rank (with its range), in the line's order."""
    rows = [rank for run in runs for rank in run]
    names = list(rows[0])
    return ", ".join(f"{name} {statistics.median(r[name] for r in rows):.2f}"
                     f" ({min(r[name] for r in rows):.2f}-{max(r[name] for r in rows):.2f})" for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["pong:1:2", "pong:1:16", "pong:2:2", "pong:2:16",
                                                       "cartpole:1:2", "cartpole:1:16", "cartpole:2:2", "cartpole:2:16"],
                        help="job:ranks:envs per rank (job: pong, cartpole)")
    parser.add_argument("--reps", type=int, default=3, help="warm runs per case, interleaved")
    parser.add_argument("--warm", action="store_true", help="no first (cold) run: the page cache is warm already")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kuberl-startup-") as tmp:
        if not args.warm:
            cold = run_case(args.cases[0], Path(tmp))
            print(f"cold   {args.cases[0]:14s} {summary([cold])}", flush=True)
        results: dict[str, list] = {case: [] for case in args.cases}
        for _ in range(args.reps):
            for case in args.cases:
                results[case].append(run_case(case, Path(tmp)))
        for case, runs in results.items():
            print(f"warm   {case:14s} {summary(runs)}", flush=True)


if __name__ == "__main__":
    main()
