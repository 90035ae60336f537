"""Chaos trials for checkpoints and restarts: real `kuberl run` jobs (CartPole PPO and DQN, 2 ranks, gloo,
deterministic mode) whose ranks are killed at chosen points, and whose runs are then driven to the end
(rerun until they succeed, as a user would) and checked.

    python bench/chaos.py                        # every fault class, a few seeds each; a table at the end
    python bench/chaos.py --seeds 8 --only ckpt-rename,random-kill --keep runs/chaos

A trial is (algorithm, fault, seed). Faults come from two sides: inside a rank, at a named point
(bench/chaos_hook.py, mounted into each pod as sitecustomize.py: SIGKILL or SIGTERM before or after a
checkpoint's rename, while pruning, in evaluation, in the rendezvous, around the final model's rename, a
full disk at one save), and from outside (SIGKILL or SIGTERM of a rank at a random moment, `kuberl run`
itself killed or interrupted, a second `kuberl run` of the same job, a tmpfs checkpoint volume too small).

After every trial the run must end with a final model whose timesteps and (deterministic mode) weights
equal an uninterrupted run's, every resume must start from the newest checkpoint written before it (or
say why not), no checkpoint that does not load may be left among the kept ones, no temp file left, no
process of the run left alive, and no `kuberl run` may outlast its timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
KUBERL = [str(Path(sys.executable).with_name("kuberl"))]  # the CLI installed beside this interpreter
RUN_TIMEOUT = 180.0  # one `kuberl run`: a few seconds, or about a minute when a frozen rank must meet the timeouts
MAX_RUNS = 5  # a trial's runs (the faulted one, then reruns) before it counts as never finishing

JOBS = {
    "ppo": {"algorithm": "ppo", "ppo": {"numSteps": 32, "numMinibatches": 2, "updateEpochs": 2},
            "env": {"id": "CartPole-v1", "numEnvs": 4}, "totalTimesteps": 256 * 30},
    "dqn": {"algorithm": "dqn", "dqn": {"learningStarts": 256, "trainFrequency": 64, "gradientSteps": 8,
                                        "bufferSize": 20000, "batchSize": 32, "hiddenSizes": [32, 32]},
            "env": {"id": "CartPole-v1", "numEnvs": 4}, "totalTimesteps": 6000},
}

# (name, side, what): "hook" faults are plans for chaos_hook (point, rank, signal; nth drawn per seed)
HOOK_FAULTS = {
    "rendezvous-kill": ("rendezvous", None, signal.SIGKILL),
    "update-kill": ("update", None, signal.SIGKILL),
    "save-term": ("save", None, signal.SIGTERM),
    "save-kill": ("save", None, signal.SIGKILL),
    "ckpt-fsync-kill": ("ckpt-fsync", 0, signal.SIGKILL),
    "ckpt-rename-kill": ("ckpt-rename", 0, signal.SIGKILL),
    "ckpt-renamed-kill": ("ckpt-renamed", 0, signal.SIGKILL),
    "ckpt-rename-term": ("ckpt-rename", 0, signal.SIGTERM),
    "prune-kill": ("prune", 0, signal.SIGKILL),
    "eval-kill": ("eval", 0, signal.SIGKILL),
    "eval-peer-kill": ("update", 1, signal.SIGKILL),  # rank 1 dies while rank 0 evaluates (evalEvery 1)
    "final-rename-kill": ("final-rename", 0, signal.SIGKILL),
    "final-renamed-kill": ("final-renamed", 0, signal.SIGKILL),
    "enospc": ("enospc", 0, 0),
    "final-enospc": ("final-enospc", 0, 0),
}
OUTSIDE_FAULTS = ("random-kill", "random-term", "rank-freeze", "runner-kill", "runner-interrupt", "runner-interrupt-twice",
                  "second-run", "tmpfs-full")
FAULTS = (*HOOK_FAULTS, *OUTSIDE_FAULTS)


@dataclass
class Trial:
    algorithm: str
    fault: str
    seed: int
    root: Path
    runs: list[dict] = field(default_factory=list)  # each kuberl run: code, seconds, output
    problems: list[str] = field(default_factory=list)
    fired: dict | None = None

    @property
    def name(self) -> str:
        return f"{self.algorithm}/{self.fault}/{self.seed}"


# --- the job ------------------------------------------------------------------------


def job_documents(algorithm: str, state: Path, with_hook: bool, evaluate: bool) -> list[dict]:
    spec = {
        **json.loads(json.dumps(JOBS[algorithm])),
        "workers": 2, "seed": 7, "deterministic": True,
        "checkpoint": {"everyUpdates": 3, "keep": 2},
        # a killed peer is noticed in seconds, a restart waits half of one
        "runPolicy": {"collectiveTimeoutSeconds": 20, "rendezvousTimeoutSeconds": 30, "stallTimeoutSeconds": 30,
                      "restartBackoffSeconds": 0.5, "backoffLimit": 6,
                      "terminationGracePeriodSeconds": 20},
    }
    if evaluate:
        spec["success"] = {"targetReturn": 10_000, "evalEpisodes": 2, "evalEvery": 4}  # evaluated, never met
    docs = [{"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": f"chaos-{algorithm}"},
             "spec": spec}]
    if with_hook:
        hook = (REPO / "bench" / "chaos_hook.py").read_text().replace("@STATE@", str(state))
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chaos-hook"},
                     "data": {"sitecustomize.py": hook}})
        spec["template"] = {"spec": {
            "containers": [{"name": "trainer", "env": [{"name": "PYTHONPATH", "value": "/chaos"}],
                            "volumeMounts": [{"name": "chaos", "mountPath": "/chaos"}]}],
            "volumes": [{"name": "chaos", "configMap": {"name": "chaos-hook"}}],
        }}
    return docs


def write_job(path: Path, docs: list[dict]) -> None:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


# --- processes ------------------------------------------------------------------------


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def start_run(job: Path, runs: Path, prefix: list[str] | None = None) -> subprocess.Popen:
    command = [*(prefix or []), *KUBERL, "run", str(job), "--dir", str(runs), "-v"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                            cwd=runs.parent, start_new_session=True)


def finish(process: subprocess.Popen, started: float, timeout: float = RUN_TIMEOUT) -> dict:
    try:
        output, _ = process.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = "timeout"
    return {"code": code, "seconds": round(time.monotonic() - started, 1), "output": output}


def pods_of(runs: Path) -> list[tuple[int, str]]:
    """(pid, pod root) of every live process whose KUBERL_FS_ROOT is under `runs`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            if Path(f"/proc/{entry}/stat").read_text().split(") ")[1].startswith("Z"):
                continue
        except (OSError, IndexError):
            continue
        for value in environ:
            if value.startswith(b"KUBERL_FS_ROOT=") and value[15:].decode(errors="replace").startswith(str(runs) + "/"):
                found.append((int(entry), value[15:].decode(errors="replace")))
    return found


def rank_pid(runs: Path, algorithm: str, rank: int) -> int | None:
    pod = f"/pods/chaos-{algorithm}-{rank}/"
    return next((pid for pid, root in pods_of(runs) if pod in root + "/"), None)


def run_once(trial: Trial, job: Path, runs: Path, rng: random.Random, outside: str | None, wall: float) -> dict:
    """One `kuberl run` of the job, with an outside fault applied to it (once per trial) at a moment drawn from
    the first 90% of `wall`, an uninterrupted run's seconds."""
    started = time.monotonic()
    moment = rng.uniform(0.5, 0.9 * wall)
    if outside == "tmpfs-full":
        return tmpfs_run(trial, job, runs, started)
    process = start_run(job, runs)
    extra = None
    if outside in ("random-kill", "random-term", "rank-freeze"):
        rank, at = rng.randrange(2), moment
        deadline = started + at
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        pid = rank_pid(runs, trial.algorithm, rank)
        while pid is None and process.poll() is None and time.monotonic() < deadline + 3.0:  # pods not started yet
            time.sleep(0.05)
            pid = rank_pid(runs, trial.algorithm, rank)
        if pid is not None:
            os.kill(pid, {"random-kill": signal.SIGKILL, "random-term": signal.SIGTERM, "rank-freeze": signal.SIGSTOP}[outside])
            trial.fired = {"rank": rank, "at": round(at, 2), "pid": pid}
    elif outside in ("runner-kill", "runner-interrupt", "runner-interrupt-twice"):
        at = moment
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=at)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL if outside == "runner-kill" else signal.SIGINT)
            if outside == "runner-interrupt-twice":
                time.sleep(rng.uniform(0.0, 0.5))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGINT)
            trial.fired = {"runner": process.pid, "at": round(at, 2)}
    elif outside == "second-run":
        time.sleep(moment)
        if process.poll() is None:
            extra = finish(start_run(job, runs), time.monotonic(), 30)
            trial.fired = {"second": extra["code"]}
            if extra["code"] != 3 or "another kuberl run (pid" not in extra["output"]:
                trial.problems.append(f"a second kuberl run of the running job did not exit 3 naming the first: "
                                      f"{extra['code']} {extra['output'][-300:]!r}")
    return finish(process, started)  # after a runner-kill the rerun starts at once: it must wait for the old pods


def tmpfs_run(trial: Trial, job: Path, runs: Path, started: float) -> dict:
    """The run with its checkpoint volume a tmpfs too small for keep+1 checkpoints (a private mount namespace);
    what was saved there is copied out afterwards, as a claim expanded keeps its files."""
    volume = runs / f"chaos-{trial.algorithm}" / "checkpoints"
    volume.mkdir(parents=True, exist_ok=True)
    saved = trial.root / "volume-copy"
    size = "320k"  # two checkpoints fit, not keep (2) + one being written
    script = (f'mount -t tmpfs -o size={size} tmpfs "$1" && shift && "$@"; code=$?; '
              f'cp -a "{volume}/." "{saved}/" 2>/dev/null; exit $code')
    saved.mkdir(exist_ok=True)
    process = start_run(job, runs, prefix=["unshare", "-rm", "sh", "-c", script, "sh", str(volume)])
    result = finish(process, started)
    shutil.copytree(saved, volume, dirs_exist_ok=True, symlinks=True)
    trial.fired = {"tmpfs": size}
    return result


# --- checks ---------------------------------------------------------------------------


CHECKPOINT_LINE = re.compile(r"checkpoint \S*/(ckpt-\d{10}\.pt) \(timesteps (\d+)\)")
RESUME_LINE = re.compile(r"resuming from \S*/(ckpt-\d{10}\.pt) \(timesteps (\d+)\)")


def checkpoint_dir(runs: Path, algorithm: str) -> Path | None:
    found = sorted((runs / f"chaos-{algorithm}" / "checkpoints").glob(f"chaos-{algorithm}-*"))
    return found[0] if found else None


def check(trial: Trial, runs: Path, reference: dict | None) -> None:
    from kuberl_trainer import checkpoint

    last = trial.runs[-1]
    if last["code"] != 0:
        trial.problems.append(f"never succeeded in {len(trial.runs)} run(s): last exit {last['code']}: {last['output'][-600:]!r}")
    if any(r["code"] == "timeout" for r in trial.runs):
        trial.problems.append("a kuberl run hung past its timeout")
    if leftovers := pods_of(runs):
        trial.problems.append(f"processes left after the runs ended: {leftovers}")
        for pid, _ in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    directory = checkpoint_dir(runs, trial.algorithm)
    if directory is None:
        trial.problems.append("no checkpoint directory")
        return
    if temps := [p.name for p in directory.iterdir() if p.name.startswith(".tmp-")]:
        trial.problems.append(f"temp files left: {temps}")
    for path in directory.glob("ckpt-*.pt"):
        try:
            state = checkpoint.read(str(path))
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            trial.problems.append(f"{path.name} kept among the checkpoints and does not load: {e}")
            continue
        if checkpoint.checkpoint_name(state["counters"]["updates"]) != path.name:
            trial.problems.append(f"{path.name} holds updates {state['counters']['updates']}")
    if (aside := directory / "unreadable").exists() and any(aside.iterdir()):
        trial.problems.append(f"files moved aside: {sorted(p.name for p in aside.iterdir())} (said in the log?)")
    # every resume starts at the newest checkpoint logged before it, or a newer one that was never logged
    logged: dict[str, int] = {}
    for run in trial.runs:
        for line in run["output"].splitlines():
            if m := CHECKPOINT_LINE.search(line):
                logged[m.group(1)] = int(m.group(2))
            elif m := RESUME_LINE.search(line):
                name, steps = m.group(1), int(m.group(2))
                newest = max(logged, default=None)
                if newest is not None and name < newest and "skipped" not in run["output"]:
                    trial.problems.append(f"resumed from {name} while {newest} was saved and logged before: silently older")
                if name in logged and logged[name] != steps:
                    trial.problems.append(f"resumed from {name} at timesteps {steps}; its save logged {logged[name]}")
    model_path = directory / "final-model.pt"
    if last["code"] == 0 and reference is not None:
        try:
            model = checkpoint.read_model(str(model_path))
        except Exception as e:  # noqa: BLE001
            trial.problems.append(f"final-model.pt does not load: {e}")
            return
        if model["timesteps"] != reference["timesteps"]:
            trial.problems.append(f"final timesteps {model['timesteps']}, uninterrupted {reference['timesteps']}")
        weights = "agent" if "agent" in model else "q_network" if "q_network" in model else None
        differing = [k for k, v in model.get(weights, {}).items() if not torch.equal(v, reference[weights][k])]
        if differing:
            trial.problems.append(f"final weights differ from the uninterrupted run's ({len(differing)} tensors, "
                                  f"e.g. {differing[0]}); deterministic mode promises equality")


# --- trials ---------------------------------------------------------------------------


def reference_model(algorithm: str, root: Path, evaluate: bool) -> dict:
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    job = root / "job.yaml"
    write_job(job, job_documents(algorithm, root, with_hook=False, evaluate=evaluate))
    result = finish(start_run(job, runs), time.monotonic())
    if result["code"] != 0:
        raise SystemExit(f"the uninterrupted {algorithm} run failed: {result['output'][-2000:]}")
    from kuberl_trainer import checkpoint
    model = checkpoint.read_model(str(checkpoint_dir(runs, algorithm) / "final-model.pt"))
    return {**model, "wall_seconds": result["seconds"]}


def run_trial(trial: Trial, reference: dict | None) -> Trial:
    rng = random.Random(f"{trial.fault}/{trial.seed}")
    runs = trial.root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    job = trial.root / "job.yaml"
    plan = None
    if trial.fault in HOOK_FAULTS:
        point, rank, signum = HOOK_FAULTS[trial.fault]
        nth = 1 if point in ("rendezvous", "final-rename", "final-renamed", "final-enospc") else rng.randint(1, 4)
        plan = {"point": point, "rank": rng.randrange(2) if rank is None else rank, "nth": nth, "signal": int(signum)}
        (trial.root / "plan.json").write_text(json.dumps(plan))
    write_job(job, job_documents(trial.algorithm, trial.root, with_hook=True, evaluate=needs_evaluation(trial.fault)))
    outside = trial.fault if trial.fault in OUTSIDE_FAULTS else None
    for attempt in range(MAX_RUNS):
        result = run_once(trial, job, runs, rng, outside if attempt == 0 else None, reference["wall_seconds"] if reference else 5.0)
        trial.runs.append(result)
        (trial.root / f"run-{attempt + 1}.log").write_text(result["output"])
        killed_runner = outside == "runner-kill" and attempt == 0 and trial.fired  # its pods save, then end
        if not killed_runner and (leftovers := pods_of(runs)):
            trial.problems.append(f"run {attempt + 1} (exit {result['code']}) left processes: {leftovers}")
            for pid, _ in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if result["code"] == 0 or result["code"] == "timeout":
            break
    if plan is not None:
        fired = trial.root / "fired.json"
        trial.fired = json.loads(fired.read_text()) if fired.exists() else None
    check(trial, runs, reference)
    return trial


def needs_evaluation(fault: str) -> bool:
    return fault in ("eval-kill", "eval-peer-kill")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per (algorithm, fault)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated faults (default: all)")
    parser.add_argument("--algorithms", default="ppo,dqn")
    parser.add_argument("--keep", default="", help="keep trial directories under this path")
    args = parser.parse_args(argv)
    faults = [f for f in args.only.split(",") if f] or list(FAULTS)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    base = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="kuberl-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    results: list[Trial] = []
    for algorithm in args.algorithms.split(","):
        references = {}
        for fault in faults:
            evaluate = needs_evaluation(fault)
            if evaluate not in references:
                references[evaluate] = reference_model(algorithm, base / f"{algorithm}-reference-{int(evaluate)}", evaluate)
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                root = base / f"{algorithm}-{fault}-{seed}"
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
                trial = run_trial(Trial(algorithm, fault, seed, root), references[evaluate])
                results.append(trial)
                verdict = "ok" if not trial.problems else "FOUND: " + " | ".join(trial.problems)
                codes = ",".join(str(r["code"]) for r in trial.runs)
                print(f"{trial.name:32s} runs {codes:12s} fired {json.dumps(trial.fired)[:80]:80s} {verdict}", flush=True)
    found = [t for t in results if t.problems]
    print(f"\n{len(results)} trials, {len(found)} with findings; trial directories in {base}")
    if not args.keep and not found:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
