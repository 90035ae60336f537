"""The kuberl CLI keeps kubectl's habits: help when bare, --version, -f/-/directories, -o json, errors with
the subcommand's usage, --set errors naming the flag, and one table of exit codes for every subcommand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.jobs import make_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"


def kuberl(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120, cwd=cwd, input=stdin)


def test_kuberl_alone_and_help_print_help_with_the_exit_codes_and_exit_0():
    for args in ([], ["--help"]):
        done = kuberl(*args)
        assert done.returncode == 0, done
        assert "usage: kuberl" in done.stdout and "validate" in done.stdout and "exit codes" in done.stdout
        assert "130" in done.stdout and "invalid input" in done.stdout


def test_every_subcommands_help_describes_each_argument_and_ends_with_the_exit_codes():
    """`kuberl plot --help` showed a bare `run_dir`, the operator's two ports had no word, and only `run` and
    `validate` of the eight subcommands printed the exit codes the top-level help says hold for every one."""
    from kuberl.cli import build_parser

    parser = build_parser()
    assert set(parser.subcommands) == {"validate", "crd", "render", "convert", "run", "plot", "eval", "operator"}
    for name, sub in parser.subcommands.items():
        undescribed = [action.dest for action in sub._actions if not action.help]
        assert undescribed == [], (name, undescribed)
        assert sub.format_help().endswith("the same command resumes\n"), name


def test_every_subcommands_help_says_what_it_does_as_kuberl_help_lists_it():
    """`kuberl convert --help` showed its usage and options with no word of what convert does."""
    top = kuberl("--help").stdout
    for name in ("validate", "crd", "render", "convert", "run", "plot", "eval", "operator"):
        said = kuberl(name, "--help").stdout.split("\n\n")[1]  # after the usage
        assert not said.startswith(("positional arguments:", "options:")), (name, said)
        assert " ".join(said.split()) in " ".join(top.split()), (name, said)


def test_version():
    done = kuberl("--version")
    assert done.returncode == 0 and done.stdout.startswith("kuberl 0.")


def test_validate_takes_several_files_a_directory_and_repeated_f():
    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    by_args = kuberl("validate", *[str(EXAMPLES / n) for n in names])
    by_dir = kuberl("validate", str(EXAMPLES))
    by_f = kuberl("validate", "-f", str(EXAMPLES / names[0]), "-f", str(EXAMPLES / names[1]))
    assert by_args.returncode == by_dir.returncode == by_f.returncode == 0, (by_args, by_dir, by_f)
    assert by_args.stdout == by_dir.stdout and by_args.stdout.count(": valid:") == len(names)
    assert by_f.stdout.count(": valid:") == 2


def test_one_bad_file_among_several_is_named_and_the_rest_still_checked(tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(make_job("bad").with_spec(workers=0).obj()))
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(make_job("good").obj()))
    done = kuberl("validate", str(tmp_path / "missing.yaml"), str(tmp_path))
    assert done.returncode == 1
    assert "missing.yaml" in done.stderr and "spec.workers" in done.stderr and "good: valid" in done.stdout


def test_stdin_is_dash_as_positional_or_f():
    text = (EXAMPLES / "cartpole-ppo.yaml").read_text()
    for args in (["validate", "-"], ["validate", "-f", "-"]):
        done = kuberl(*args, stdin=text)
        assert done.returncode == 0 and "cartpole-ppo: valid" in done.stdout, done


def test_render_o_json_is_one_list_and_yaml_stays_the_default():
    done = kuberl("render", "-o", "json", "-f", str(EXAMPLES / "cartpole-ppo.yaml"), str(EXAMPLES / "cartpole-dqn.yaml"))
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["kind"] == "List" and listed["apiVersion"] == "v1"
    assert {o["metadata"]["labels"]["kuberl.dev/job"] for o in listed["items"] if o["kind"] == "Pod"} == {"cartpole-ppo", "cartpole-dqn"}
    as_yaml = kuberl("render", str(EXAMPLES / "cartpole-ppo.yaml"))
    assert [d["kind"] for d in yaml.safe_load_all(as_yaml.stdout) if d][:1] == ["ConfigMap"]


@pytest.mark.parametrize(("args", "usage", "message"), [
    (["validate"], "usage: kuberl validate", "a job file is required"),
    (["run", "a.yaml", "--bogus"], "usage: kuberl run", "unrecognized arguments: --bogus"),
    (["run", "a.yaml", "b.yaml"], "usage: kuberl run", "takes one job file"),
    (["run", str(EXAMPLES)], "usage: kuberl run", "is a directory"),
    (["render", "-o", "xml", "a.yaml"], "usage: kuberl render", "invalid choice: 'xml'"),
    # a space for the `=` said "unrecognized arguments: 0.001" or "takes one job file (got 2: 2000, a.yaml)"
    (["run", "a.yaml", "--set", "ppo.learningRate", "0.001"], "usage: kuberl run",
     "--set ppo.learningRate 0.001: one argument, KEY=VALUE: --set ppo.learningRate=0.001"),
    (["run", "--set", "totalTimesteps", "2000", "a.yaml"], "usage: kuberl run", "--set totalTimesteps=2000"),
    # a --set that is not KEY=VALUE at all exited 1 as an invalid job, though argparse's own usage errors exit 2
    *[(["run", "a.yaml", "--set", setting], "usage: kuberl run",
       f"kuberl run: error: argument --set: expected --set KEY=VALUE, e.g. --set ppo.learningRate=0.001 (got '{setting}')")
      for setting in ("foo", "ppo..learningRate=1", "=3", "ppo.=1")],
    # Helm's list index set a key "containers[0]" in the template, which the API server drops: the env never reached the pod
    (["run", "a.yaml", "--set", "template.spec.containers[0].env[0].name=MLFLOW_TRACKING_URI"], "usage: kuberl run",
     ("argument --set: a list item is not set by its index here, as Helm's --set does: set the whole list as a YAML value,"
      " --set 'template.spec.containers=[…]', each item whole")),
    (["render", "-n", "Bad_NS", "a.yaml"], "usage: kuberl render", "argument --namespace/-n: expected a namespace"),
    (["render", "--monitoring-namespace", "Mon", "a.yaml"], "usage: kuberl render", "argument --monitoring-namespace: expected a namespace"),
    (["operator", "-n", "team_a"], "usage: kuberl operator", "argument --namespace/-n: expected a namespace"),
])
def test_a_usage_error_prints_the_subcommands_usage_and_exits_2(args, usage, message):
    done = kuberl(*args)
    assert done.returncode == 2, done
    assert done.stderr.startswith(usage) and message in done.stderr, done.stderr


def test_a_set_naming_no_field_names_the_flag_suggests_the_path_and_exits_1_as_validate_does(tmp_path):
    job = EXAMPLES / "cartpole-ppo.yaml"
    done = kuberl("run", str(job), "--set", "learningRate=0.001", "--dir", str(tmp_path / "runs"))
    assert done.returncode == 1, done
    # the job's algorithm's block alone: dqn.learningRate is refused for a PPO job (it was suggested beside ppo's)
    assert done.stderr.strip() == ("kuberl run: --set learningRate=0.001: the spec has no field learningRate;"
                                   " did you mean --set ppo.learningRate=…?")
    typo = kuberl("run", str(job), "--set", "totalTimestep=10", "--dir", str(tmp_path / "runs"))
    assert typo.returncode == 1 and "did you mean --set totalTimesteps=…?" in typo.stderr
    unreadable = kuberl("run", str(job), "--set", "env.id=[", "--dir", str(tmp_path / "runs"))
    assert unreadable.returncode == 1 and unreadable.stderr.startswith("kuberl run: --set env.id=[: the value is not plain YAML: ")
    assert "is invalid" not in unreadable.stderr and len(unreadable.stderr.splitlines()) == 1, unreadable.stderr  # not the file's fault
    bad_value = kuberl("run", str(job), "--set", "workers=abc", "--dir", str(tmp_path / "runs"))
    assert bad_value.returncode == 1 and "spec.workers: expected an integer (got 'abc') (from --set workers=abc)" in bad_value.stderr
    # a free-form map takes any key
    free = kuberl("run", str(job), "--set", "env.kwargs.sutton_barto_reward=true", "--set", "totalTimesteps=0", "--dir", str(tmp_path / "runs"))
    assert free.returncode == 1 and "env.kwargs" not in free.stderr and "spec.totalTimesteps" in free.stderr
    assert not (tmp_path / "runs").exists()
    invalid = make_job("bad").with_spec(workers=0).obj()
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(invalid))
    assert kuberl("run", str(tmp_path / "bad.yaml"), "--dir", str(tmp_path / "runs")).returncode == kuberl(
        "validate", str(tmp_path / "bad.yaml")).returncode == 1


def test_run_refuses_a_misspelt_env_id_as_validate_does_before_any_run_directory_or_pod(tmp_path):
    """`kuberl run` took Cartpole-v1 (validate refused it): it named env.id among the fields that "learn something
    other" than the earlier run, started a fresh run directory beside it and two pods, which failed."""
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "cartpole-ppo.yaml").read_text().replace("CartPole-v1", "Cartpole-v1"))
    ran = kuberl("run", str(job), "--dir", str(tmp_path / "runs"))
    validated = kuberl("validate", str(job))
    line = "spec.env.id: expected a gymnasium id registered here, or \"module:Class\" (got 'Cartpole-v1'); did you mean 'CartPole-v1'?"
    assert ran.returncode == validated.returncode == 1, (ran, validated)
    assert line in ran.stderr and line in validated.stderr, (ran.stderr, validated.stderr)
    assert ran.stdout == "" and not (tmp_path / "runs").exists()


def test_run_whose_output_reader_goes_away_stops_as_on_ctrl_c_without_a_traceback(tmp_path):
    """`kuberl run job.yaml | head -2` ended in a BrokenPipeError traceback, its ranks killed unsaved."""
    run = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "run", str(EXAMPLES / "cartpole-ppo.yaml"), "--dir",
                            str(tmp_path / "runs"), "--workers", "1", "--set", "env.numEnvs=2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = run.stdout.readline()
    run.stdout.close()  # as head does once it has its lines
    try:
        stderr = run.stderr.read()
        code = run.wait(timeout=90)
    finally:
        run.kill()
    assert first.startswith("[kuberl] ") and "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == 130, stderr
    assert "the output's reader is gone (a pipe closed): stopping as on Ctrl-C" in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("[kuberl] cartpole-ppo stopped at "), stderr


@pytest.mark.parametrize("args", [["crd"], ["render", str(EXAMPLES / "cartpole-ppo.yaml")]])
def test_output_into_a_pipe_closed_early_ends_quietly_as_unix_tools_do(args):
    """`kuberl crd | head -1` printed a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: no race with a listing the pipe could hold whole
    try:
        done = subprocess.run([sys.executable, "-m", "kuberl.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert done.returncode == -signal.SIGPIPE and done.stderr == "", done.stderr  # SIGPIPE's death, as cat's or kubectl's


def test_run_whose_terminal_hangs_up_stops_as_on_ctrl_c(tmp_path):
    """A closed terminal or a dropped ssh session (SIGHUP) killed the runner, and with it every rank, unsaved."""
    run = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "run", str(EXAMPLES / "cartpole-ppo.yaml"), "--dir",
                            str(tmp_path / "runs"), "--workers", "1", "--set", "env.numEnvs=2"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while "Creating" not in run.stdout.readline():
            pass
        run.send_signal(signal.SIGHUP)
        said = run.stdout.read()
        code = run.wait(timeout=90)
    finally:
        run.kill()
    assert code == 130 and "Traceback" not in said, said
    assert said.rstrip().splitlines()[-1].startswith("[kuberl] cartpole-ppo stopped at "), said
    assert json.loads((tmp_path / "runs" / "cartpole-ppo" / "status.json").read_text())["phase"] == "Suspended"


def test_operator_without_a_cluster_says_so_in_one_line_instead_of_retrying_with_tracebacks(tmp_path):
    """`kuberl operator` on a laptop logged two tracebacks and "will try again in 60 seconds", forever."""
    from kuberl.operator.config import no_cluster_problem

    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "operator"], env={**env, "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done
    assert done.stderr == (f"kuberl operator: no Kubernetes cluster to run against: not in a pod, and no kubeconfig at"
                           f" {tmp_path}/.kube/config. The chart runs the operator in your cluster (docs/cluster.md);"
                           " `kuberl run JOB.yaml` runs a job here without one\n")
    there = {"/k/a", "/home/me/.kube/config"}.__contains__
    assert no_cluster_problem({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, there) is None
    assert no_cluster_problem({"HOME": "/home/me"}, there) is None
    assert no_cluster_problem({"KUBECONFIG": "/k/missing:/k/a"}, there) is None  # any of its files, as kubectl merges them
    assert "KUBECONFIG=/k/missing" in no_cluster_problem({"KUBECONFIG": "/k/missing", "HOME": "/home/me"}, there)


def test_validate_and_run_warn_of_a_misspelt_template_field_naming_the_one_meant(tmp_path):
    job = make_job("byo").custom_trainer({"spec": {"containers": [{"name": "trainer", "comand": ["python", "t.py"]}]}}).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    warning = ("warning: spec.template.spec.containers[0].comand: not a field of a container (Kubernetes v1.33):"
               " the API server drops it; did you mean command?")
    validated = kuberl("validate", str(tmp_path / "job.yaml"))
    ran = kuberl("run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"))
    assert validated.returncode == ran.returncode == 1  # no command: the consequence is still refused
    assert f"{tmp_path / 'job.yaml'}: byo: {warning}" in validated.stderr.splitlines(), validated.stderr
    assert f"{tmp_path / 'job.yaml'}: {warning}" in ran.stderr.splitlines(), ran.stderr


def test_run_refuses_the_metadata_validate_refuses(tmp_path):
    """A label value the API server refuses ('bad value!') failed `kuberl validate` and `kubectl apply`, but ran here."""
    job = make_job("labelled").env("CartPole-v1").with_spec(totalTimesteps=1000).obj()
    job["metadata"]["labels"] = {"team": "bad value!"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    line = "  metadata.labels.team: expected a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending"
    ran = kuberl("run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"))
    validated = kuberl("validate", str(tmp_path / "job.yaml"))
    assert ran.returncode == validated.returncode == 1, ran
    assert any(x.startswith(line) for x in ran.stderr.splitlines()) and any(x.startswith(line) for x in validated.stderr.splitlines())
    assert not (tmp_path / "runs").exists()
    fixed = kuberl("run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs"), "--set", "metadata.labels.team=rl",
                   "--set", "workers=0")  # --set reaches metadata too: only the workers refused now
    assert fixed.returncode == 1 and "metadata.labels" not in fixed.stderr and "spec.workers" in fixed.stderr, fixed.stderr


def test_validate_says_nothing_of_evaluation_fields_without_a_target_return(tmp_path, capsys):
    """`success: {evalWhileTraining: true, evalEvery: 2}` without targetReturn was warned of as idle: the trainer
    evaluated only to decide the early stop. It now evaluates every evalEvery updates with or without a target
    (test_trainer_untargeted_evaluation.py), so the fields act and validate says so in its summary, warning of nothing."""
    from kuberl import cli

    untargeted = make_job("untargeted").minimal().with_spec(success={"evalWhileTraining": True, "evalEvery": 2})
    (tmp_path / "untargeted.yaml").write_text(yaml.safe_dump(untargeted.obj()))
    assert cli.main(["validate", str(tmp_path / "untargeted.yaml")]) == 0
    said = capsys.readouterr()
    assert said.err == "" and "evaluating while training" in said.out and "stop at eval return" not in said.out, said


def test_a_block_a_set_brought_in_is_said_to_come_from_that_flag(tmp_path):
    """`kuberl run cartpole-dqn.yaml --set ppo.learnWhileCollecting=true` said "spec.ppo: only allowed with
    algorithm: ppo" as if the file held a ppo block; a block the file does hold stays the file's."""
    done = kuberl("run", str(EXAMPLES / "cartpole-dqn.yaml"), "--set", "ppo.learnWhileCollecting=true", "--dir", str(tmp_path / "runs"))
    assert done.returncode == 1
    assert done.stderr == (f"{EXAMPLES / 'cartpole-dqn.yaml'}: RLTrainingJob 'cartpole-dqn' is invalid (1 problem(s)):\n"
                           "  spec.ppo: only allowed with algorithm: ppo (got algorithm: dqn) (from --set ppo.learnWhileCollecting=true)\n")
    held = make_job("held").minimal().with_spec(algorithm="dqn", ppo={"numSteps": 16}).obj()
    (tmp_path / "held.yaml").write_text(yaml.safe_dump(held))
    done = kuberl("run", str(tmp_path / "held.yaml"), "--set", "ppo.learningRate=0.001", "--dir", str(tmp_path / "runs"))
    assert done.returncode == 1 and "  spec.ppo: only allowed with algorithm: ppo (got algorithm: dqn)\n" in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()


def test_validate_warns_that_the_api_server_sets_a_pods_priority_itself(tmp_path, capsys):
    """`priority: 1000` in the template was valid; the Priority admission plugin refuses (403) every pod whose priority
    differs from its PriorityClass's value (0 with none), so the job failed at its first pod."""
    from kuberl import cli

    job = make_job("urgent").minimal().template({"spec": {"priority": 1000, "containers": [{"name": "trainer"}]}})
    (tmp_path / "urgent.yaml").write_text(yaml.safe_dump(job.obj()))
    assert cli.main(["validate", str(tmp_path / "urgent.yaml")]) == 0
    assert capsys.readouterr().err == (
        f"{tmp_path / 'urgent.yaml'}: urgent: warning: spec.template.spec.priority: the API server sets it from the pod's"
        " PriorityClass (0 with none and no global default) and refuses a pod whose priority differs (got 1000): leave it"
        " out and set spec.priorityClassName\n")


def test_every_option_with_a_default_says_it_in_its_help():
    """`kuberl run --help` said "--dir DIR  where runs keep checkpoints, logs and plots", and a user looked for runs/
    wherever they had not run from; render's -o, namespaces and the operator's listen address were silent too."""
    import argparse

    from kuberl import cli

    subcommands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"kuberl {name} {action.option_strings[-1]}" for name, parser in subcommands.choices.items()
              for action in parser._actions
              if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS)
              and "default" not in (action.help or "")]
    assert silent == []


def test_a_set_misspelling_a_block_on_the_way_to_a_key_suggests_the_whole_path(tmp_path):
    """`--set env.kwarg.max_episode_steps=100` said "the spec has no field env.kwarg (kuberl validate lists every
    field)": no suggestion (the whole path is too long for a close match), and kuberl validate lists no fields."""
    from kuberl.local.runner import override_problem

    problem = override_problem("env.kwarg.max_episode_steps=100", "env.kwarg.max_episode_steps", "ppo")
    assert problem.message == "the spec has no field env.kwarg; did you mean --set env.kwargs.max_episode_steps=…?"
    nothing_like = override_problem("zzz=1", "zzz", "ppo")
    assert nothing_like.message == "the spec has no field zzz (docs/spec-reference.md lists every field)"


@pytest.mark.parametrize(("key", "algorithm", "meant"), [
    ("ppo.ent_coef", "ppo", "ppo.entCoef"),  # it offered entCoef, clipCoef and vfCoef
    ("ppo.max-grad-norm", "ppo", "ppo.maxGradNorm"),
    ("num_envs", "ppo", "env.numEnvs"),  # it offered nothing
    ("n_envs", "ppo", "env.numEnvs"),  # it offered env
    ("ppo.lr", "ppo", "ppo.learningRate"),  # it offered ppo.annealLr first
    ("lr", "dqn", "dqn.learningRate"),
    ("ppo.clip_range", "ppo", "ppo.clipCoef"),
    ("ppo.n_steps", "ppo", "ppo.numSteps"),
    ("ppo.n_epochs", "ppo", "ppo.updateEpochs"),
    ("gym_id", "ppo", "env.id"),
    ("train_freq", "dqn", "dqn.trainFrequency"),
    ("target_network_frequency", "dqn", "dqn.targetUpdateInterval"),
    ("end_e", "dqn", "dqn.explorationFinalEps"),
])
def test_a_set_in_sb3_or_cleanrl_words_suggests_the_one_field_it_means(key, algorithm, meant):
    """An ML engineer's first --set is their last library's name for the field: each names one field here."""
    from kuberl.local.runner import override_problem

    problem = override_problem(f"{key}=1", key, algorithm)
    assert problem.message.endswith(f"; did you mean --set {meant}=…?"), problem.message


def test_a_set_of_a_name_only_the_other_algorithm_has_is_not_suggested_its_field():
    """SB3's PPO batch_size (a minibatch's size) is no field of ppo: dqn.batchSize was offered for a PPO job."""
    from kuberl.local.runner import override_problem

    assert "dqn." not in override_problem("ppo.batch_size=64", "ppo.batch_size", "ppo").message


def test_validate_checks_a_job_with_runs_set_and_workers_as_run_would_run_it(capsys):
    """`kuberl validate job.yaml --set env.id=Acrobot-v1`, to check a change before running it, was a usage error
    ("unrecognized arguments"): only `kuberl run` took --set, and it starts the run once the job is valid."""
    from kuberl import cli

    job = str(EXAMPLES / "cartpole-ppo.yaml")
    assert cli.main(["validate", job, "--set", "env.id=Acrobot-v1", "--workers", "3"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("cartpole-ppo: valid: ppo on Acrobot-v1, 3 worker(s) x 1 process(es)"), out
    assert "warning: spec.success.targetReturn: 475 is above the most an episode of Acrobot-v1 returns" in err
    assert cli.main(["validate", job, "--set", "ppo.gamma=2"]) == 1
    assert "  spec.ppo.gamma: expected at most 1.0 (got 2) (from --set ppo.gamma=2)\n" in capsys.readouterr().err
    assert cli.main(["validate", job, "--set", "ppo.lr=1"]) == 1
    assert ("  --set ppo.lr=1: the spec has no field ppo.lr; did you mean --set ppo.learningRate=…?\n"
            in capsys.readouterr().err)
    assert cli.main(["validate", job]) == 0 and "on CartPole-v1, 2 worker(s)" in capsys.readouterr().out


def test_validate_names_the_job_a_set_renames_and_checks_its_pods_under_that_name(tmp_path, capsys):
    """`kuberl validate job.yaml --set metadata.name=ppo-lr3` said "cartpole-ppo: valid" (the file's name, checked
    against the file's metadata, its pods rendered under that name), while `kuberl run` with the same flags runs the
    job as ppo-lr3; a file's bad name that the flag mends was refused."""
    from kuberl import cli

    job = str(EXAMPLES / "cartpole-ppo.yaml")
    assert cli.main(["validate", job, "--set", "metadata.name=ppo-lr3"]) == 0
    assert capsys.readouterr().out.startswith("ppo-lr3: valid: ppo on CartPole-v1")
    assert cli.main(["validate", job, "--set", "metadata.name=Bad_Name"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{job}: RLTrainingJob 'Bad_Name' is invalid (1 problem(s)):\n  metadata.name: expected a DNS-1035"), err
    assert err.rstrip().endswith("(from --set metadata.name=Bad_Name)"), err
    (tmp_path / "bad.yaml").write_text((EXAMPLES / "cartpole-ppo.yaml").read_text().replace("name: cartpole-ppo", "name: Bad_Name"))
    assert cli.main(["validate", str(tmp_path / "bad.yaml"), "--set", "metadata.name=fixed"]) == 0  # the flag mends the file
    assert capsys.readouterr().out.startswith("fixed: valid:")
