"""`kuberl run JOB.yaml --seeds 1,2,3`: a configuration's seeds in one command, as CleanRL's benchmark utility runs
them (--num-seeds); before it, a researcher wrote a shell loop of `--set seed=N` (docs/local-runs.md's) and summed
the returns by hand. Each seed is a run of its own, one after another, then one summary: each seed's result and
their mean as `kuberl eval runs` scores a configuration."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import yaml
from kuberl import cli
from kuberl.core import fingerprint
from kuberl.core.runrecords import recorded_learned_values
from kuberl.local.curves import last_progress, newest_progress_file
from kuberl.local.seeds import (
    SeedRun,
    exit_code,
    goes_on,
    seeds_argument,
    seeds_usage_problem,
    summary_lines,
)

from tests.support.jobs import make_job


@pytest.mark.parametrize(("text", "seeds"), [("1,2,3", [1, 2, 3]), ("3, 1", [3, 1]), ("0,2147483647", [0, 2**31 - 1])])
def test_seeds_are_listed_in_the_order_they_run(text, seeds):
    assert seeds_argument(text) == seeds


@pytest.mark.parametrize(("text", "words"), [
    ("3", "expected two or more seeds, the seeds themselves (1,2,3), not how many (got '3'); one seed is --set seed=3"),
    ("1,1", "seed 1 is listed twice"),
    ("1,-2", "each a whole number from 0 to 2147483647 as spec.seed takes it (got '1,-2')"),
    ("1,2147483648", "from 0 to 2147483647"),
    ("1,,2", "expected seeds separated by commas (1,2,3)"),
    ("1,²", "expected seeds separated by commas"),  # a digit to str.isdigit, not to int()
    # past int()'s 4,300 digits: argparse's "invalid seeds_argument value" and the whole argument
    ("1," + "9" * 5000, "each a whole number from 0 to 2147483647 as spec.seed takes it (got '1,99999"),
])
def test_a_seed_list_that_is_not_two_or_more_distinct_seeds_is_refused_saying_what_was_expected(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=None) as refused:
        seeds_argument(text)
    assert words in str(refused.value) and len(str(refused.value)) < 300, refused.value


@pytest.mark.parametrize(("argv", "words"), [
    (["--seeds", "1,2", "--set", "seed=4"], "argument --seeds: --seeds sets each run's seed: leave out --set seed=…"),
    (["--seeds", "1,2", "--resume"], "argument --seeds: --resume continues the job's latest run, one run"),
    (["--seeds", "3"], "not how many"),
    # a list that starts with a minus is an option to argparse, which said only "expected one argument"
    (["--seeds", "-1,2"], ("argument --seeds: expected seeds separated by commas (1,2,3), each a whole number from 0"
                           " to 2147483647 as spec.seed takes it (got '-1,2')")),
    (["--seeds", "-3"], "each a whole number from 0 to 2147483647 as spec.seed takes it (got '-3')"),
    (["--seeds=-1,2"], "each a whole number from 0 to 2147483647 as spec.seed takes it (got '-1,2')"),
])
def test_seeds_with_a_flag_that_contradicts_them_is_a_usage_error(tmp_path, capsys, argv, words):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(make_job("j").obj()))
    with pytest.raises(SystemExit) as ended:
        cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"), *argv])
    assert ended.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert seeds_usage_problem(["ppo.learningRate=0.001"], False) is None


def test_the_next_seed_runs_after_a_result_and_not_after_an_interrupt_or_a_refusal():
    assert goes_on(SeedRun(1, 0, "runs/j")) and goes_on(SeedRun(1, 1, "runs/j"))  # a job that failed training: a result
    assert not goes_on(SeedRun(1, 130, "runs/j")) and not goes_on(SeedRun(1, 3, "runs/j"))
    assert not goes_on(SeedRun(1, 1, None))  # refused before it ran: the next seeds' jobs differ in their seed alone
    assert exit_code([SeedRun(1, 0), SeedRun(2, 1), SeedRun(3, 0)]) == 1
    assert exit_code([SeedRun(1, 0), SeedRun(2, 130), SeedRun(3, None)]) == 130
    assert exit_code([SeedRun(1, 0), SeedRun(2, 0)]) == 0


def test_the_summary_gives_each_seeds_result_their_mean_and_the_commands_that_compare_them():
    runs = [SeedRun(1, 0, "runs/j", 500.0, 20480), SeedRun(2, 1, "runs/j.ab12cd34", None, 512),
            SeedRun(3, 0, "runs/j.0f0f0f0f", 440.5, 30720), SeedRun(4, None)]
    assert summary_lines("j", runs) == [
        "seed 1: eval return 500.0 at 20,480 timesteps (runs/j)",
        "seed 2: failed: no evaluation yet at 512 timesteps (runs/j.ab12cd34)",
        "seed 3: eval return 440.5 at 30,720 timesteps (runs/j.0f0f0f0f)",
        "seed 4: not run",
        "j (seeds 1, 3): mean over 2 of 4 seeds 470.2 (500.0, 440.5), each seed's last evaluation of its model",
        ("learning curves: kuberl plot runs/j runs/j.ab12cd34 runs/j.0f0f0f0f; every model on the same episodes:"
        " kuberl eval runs/j runs/j.ab12cd34 runs/j.0f0f0f0f"),
        "seed(s) 4 not started: run the same command again to run them (seeds already trained are not trained again)",
    ]
    assert summary_lines("j", [SeedRun(1, 130, "runs/j", 9.5, 100), SeedRun(2, None)])[:2] == [
        "seed 1: stopped, resumable: eval return 9.5 at 100 timesteps (runs/j)", "seed 2: not run"]
    assert summary_lines("j", [SeedRun(1, 3), SeedRun(2, None)])[0] == "seed 1: could not run here (said above)"


def cartpole(tmp_path, **spec):
    job = make_job("seeded").env("CartPole-v1", numEnvs=2).with_spec(
        workers=1, totalTimesteps=1024, success={"evalEpisodes": 2, "evalEvery": 2}, **spec)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job.obj()))
    return str(tmp_path / "job.yaml")


def test_each_seed_is_a_run_of_its_own_and_a_rerun_trains_none_again(tmp_path, capsys):
    """Two real PPO runs, one after the other; the summary's numbers are each run's own last evaluation."""
    path, runs = cartpole(tmp_path), tmp_path / "runs"
    assert cli.main(["run", path, "--dir", str(runs), "--seeds", "2,1"]) == 0
    out = capsys.readouterr().out
    dirs = sorted(str(runs / name) for name in os.listdir(runs))
    assert len(dirs) == 2 and {recorded_learned_values(d)[fingerprint.SEED] for d in dirs} == {1, 2}
    by_seed = {recorded_learned_values(d)[fingerprint.SEED]: d for d in dirs}
    returns = {seed: last_progress(os.path.dirname(newest_progress_file(d)))["eval_return"] for seed, d in by_seed.items()}
    assert out.index("[kuberl] seed 2 (1 of 2)") < out.index("[kuberl] seed 1 (2 of 2)")
    assert "the spec learns something other than" not in out  # another seed's run is no change to name
    assert f"[kuberl] seed 2: eval return {returns[2]:.1f} at " in out and f"({by_seed[2]})" in out
    mean = (returns[2] + returns[1]) / 2
    assert f"[kuberl] seeded (seeds 2, 1): mean over 2 seeds {mean:.1f} ({returns[2]:.1f}, {returns[1]:.1f})" in out, out
    assert f"kuberl plot {by_seed[2]} {by_seed[1]}" in out
    assert cli.main(["run", path, "--dir", str(runs), "--seeds", "1,2"]) == 0
    out = capsys.readouterr().out
    assert out.count("already succeeded with this spec") == 2 and "Creating" not in out, out
    assert f"mean over 2 seeds {mean:.1f}" in out


def test_a_ctrl_c_stops_every_seed_and_says_which_were_not_started(tmp_path, capsys):
    """The first seed's trainer sends the runner a real SIGINT: that run stops (130), the second never starts."""
    job = make_job("stopped").custom_trainer({"spec": {"containers": [{
        "name": "trainer", "env": [{"name": "RUNNER", "value": str(os.getpid())}],
        "command": ["python", "-c", "import os, signal, time; os.kill(int(os.environ['RUNNER']), signal.SIGINT); time.sleep(60)"]}]}})
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job.obj()))
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"), "--seeds", "1,2"]) == 130
    out = capsys.readouterr().out
    assert "[kuberl] seed 1 (1 of 2)" in out and "(2 of 2)" not in out
    assert "[kuberl] seed 2: not run" in out and "[kuberl] seed(s) 2 not started: run the same command again" in out
    assert os.listdir(tmp_path / "runs") == ["stopped"]
    assert json.loads((tmp_path / "runs" / "stopped" / "status.json").read_text())["phase"] != "Succeeded"


def test_a_job_refused_before_it_runs_is_said_once_not_once_per_seed(tmp_path, capsys):
    path = cartpole(tmp_path)
    assert cli.main(["run", path, "--dir", str(tmp_path / "runs"), "--seeds", "1,2,3", "--set", "ppo.learningRate=-1"]) == 1
    said = capsys.readouterr()
    assert said.err.count("spec.ppo.learningRate") == 1, said.err
    out = said.out
    assert "[kuberl] seed 1: refused before it ran (said above)" in out and "(2 of 3)" not in out and "(3 of 3)" not in out, out
    assert "[kuberl] seed 2: not run" in out and "[kuberl] seed 3: not run" in out
