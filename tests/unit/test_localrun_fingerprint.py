"""A rerun of `kuberl run` resumes only the run of a spec that learns the same thing (`kuberl.core.fingerprint`)."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from kuberl.cli import main
from kuberl.core import fingerprint
from kuberl.core.spec import JobSpec
from kuberl.local.runner import (
    choose_run,
    record_fingerprint,
    target_not_met,
    write_json,
)

from tests.support.jobs import make_job


def learned(**spec):
    return fingerprint.learned_values(make_job("cartpole").with_spec(**spec).spec())


def finished_run(run_dir, values, phase):
    os.makedirs(run_dir)
    record_fingerprint(str(run_dir), values)
    write_json(os.path.join(run_dir, "status.json"), {"phase": phase, "generation": 0})


def test_every_spec_field_is_sorted_into_learned_or_operational():
    aliases = {field.alias or name for name, field in JobSpec.model_fields.items()}
    assert set(fingerprint.FIELDS) == aliases
    assert "ppo" in fingerprint.learned_fields() and "resources" not in fingerprint.learned_fields()


def test_operational_fields_keep_the_fingerprint_and_learned_ones_change_it():
    base = fingerprint.fingerprint(learned())
    assert fingerprint.fingerprint(learned(resources={"limits": {"cpu": "2"}}, labels={"team": "a"},
                                           checkpoint={"everyUpdates": 5})) == base
    # the default written out is the same spec
    assert fingerprint.fingerprint(learned(ppo={"learningRate": 2.5e-3})) == base
    for change in ({"ppo": {"learningRate": 1e-3}}, {"workers": 1}, {"seed": 7}, {"totalTimesteps": 2000}):
        assert fingerprint.fingerprint(learned(**change)) != base, change


def test_turning_tracking_on_keeps_the_fingerprint_and_no_tracking_credential_is_recorded():
    """spec.tracking and the MLflow client's variables in the template change nothing learned: a rerun with tracking
    on resumes the run, and a token set in the template's env never reaches fingerprint.json or the hyperparameters."""
    base = fingerprint.fingerprint(learned())
    tracking_env = [{"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow:5000"},
                    {"name": "MLFLOW_TRACKING_TOKEN", "value": "s3cret"}]
    tracked = learned(tracking={"mlflow": {"experiment": "cartpole"}},
                      template={"spec": {"containers": [{"name": "trainer", "env": tracking_env}]}})
    assert fingerprint.fingerprint(tracked) == base
    assert "s3cret" not in json.dumps(tracked)
    # the rest of the template is still learned: a variable the trainer reads beside them changes it
    other = {"name": "OMP_NUM_THREADS", "value": "1"}
    with_other = learned(template={"spec": {"containers": [{"name": "trainer", "env": [*tracking_env, other]}]}})
    assert fingerprint.fingerprint(with_other) != base
    assert with_other["template"] == {"spec": {"containers": [{"name": "trainer", "env": [other]}]}}


def test_a_credential_set_in_the_template_changes_nothing_learned_and_is_never_recorded():
    """A plain WANDB_API_KEY, HF_TOKEN or AWS_SECRET_ACCESS_KEY value in the template reached fingerprint.json,
    TensorBoard's hyperparameters text and the params sent to an MLflow server; a rotated key started a fresh run."""
    base = fingerprint.fingerprint(learned())
    secrets = [{"name": name, "value": f"v-{name}"} for name in
               ("WANDB_API_KEY", "WANDB_PROJECT", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "db_password", "GITHUB_AUTH",
                # tools' own names for theirs: Kaggle's API, Azure Storage, Backblaze B2, the MySQL client, rclone,
                # borg, sshpass -e
                "KAGGLE_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "B2_APPLICATION_KEY", "MYSQL_PWD",
                "RCLONE_CONFIG_PASS", "BORG_PASSPHRASE", "SSHPASS")]
    with_secrets = learned(template={"spec": {"containers": [{"name": "trainer", "env": secrets}]}})
    assert fingerprint.fingerprint(with_secrets) == base and "v-" not in json.dumps(with_secrets)
    # variables the trainer reads, named like none of them (a word that merely holds KEY or PASS is no credential)
    learned_too = [{"name": name, "value": "1"} for name in ("MUJOCO_GL", "KEYBOARD_LAYOUT", "PASSES", "MONKEY_PATCH")]
    with_both = learned(template={"spec": {"containers": [{"name": "trainer", "env": [*secrets, *learned_too]}]}})
    assert with_both["template"] == {"spec": {"containers": [{"name": "trainer", "env": learned_too}]}}


def test_a_recurrent_policy_and_its_width_each_learn_otherwise():
    plain, lstm = fingerprint.fingerprint(learned()), fingerprint.fingerprint(learned(ppo={"lstm": {}}))
    assert lstm != plain
    assert fingerprint.fingerprint(learned(ppo={"lstm": {"hiddenSize": 128}})) == lstm  # the default written out
    assert fingerprint.fingerprint(learned(ppo={"lstm": {"hiddenSize": 64}})) not in (plain, lstm)


def test_a_key_added_to_an_empty_map_is_one_change_not_also_the_map_turned_null():
    """`--set env.kwargs.foo=1` was described as "env.kwargs {} -> null, env.kwargs.foo null -> 1"."""
    old, new = learned(), learned(env={"id": "CartPole-v1", "kwargs": {"sutton_barto_reward": True}})
    assert fingerprint.changed_fields(old, new) == [("env.kwargs.sutton_barto_reward", None, True)]
    assert fingerprint.changed_fields(new, old) == [("env.kwargs.sutton_barto_reward", True, None)]
    assert fingerprint.changed_fields({"template": {}}, {"template": None}) == [("template", {}, None)]


def test_the_same_spec_resumes_its_unfinished_run(tmp_path):
    finished_run(tmp_path / "cartpole", learned(), "Running")
    choice = choose_run(str(tmp_path), "cartpole", learned(resources={"limits": {"cpu": "3"}}))
    assert choice.run_dir == str(tmp_path / "cartpole") and not choice.succeeded and choice.note is None


def test_a_spec_that_learns_otherwise_starts_a_fresh_run_beside_the_old_one_naming_the_change(tmp_path):
    finished_run(tmp_path / "cartpole", learned(), "Succeeded")
    new = learned(ppo={"learningRate": 1e-3}, workers=1)
    choice = choose_run(str(tmp_path), "cartpole", new)
    assert choice.run_dir == str(tmp_path / f"cartpole.{fingerprint.fingerprint(new)[:8]}")
    assert "ppo.learningRate 0.0025 -> 0.001" in choice.note and "workers 2 -> 1" in choice.note
    assert "--resume" in choice.note and not choice.succeeded
    # once that run exists, the same spec finds it again, and the first spec its own
    finished_run(choice.run_dir, new, "Running")
    assert choose_run(str(tmp_path), "cartpole", new).run_dir == choice.run_dir
    assert choose_run(str(tmp_path), "cartpole", learned()).run_dir == str(tmp_path / "cartpole")


def test_resume_continues_the_latest_run_whatever_changed(tmp_path):
    finished_run(tmp_path / "cartpole", learned(), "Suspended")
    choice = choose_run(str(tmp_path), "cartpole", learned(totalTimesteps=5000), resume=True)
    assert choice.run_dir == str(tmp_path / "cartpole")
    assert "totalTimesteps 1000 -> 5000" in choice.note


def test_a_run_an_older_kuberl_started_is_compared_by_its_job_yaml(tmp_path):
    run = tmp_path / "cartpole"
    run.mkdir()
    (run / "job.yaml").write_text(yaml.safe_dump(make_job("cartpole").obj()))
    (run / "status.json").write_text(json.dumps({"phase": "Suspended", "generation": 1}))
    assert choose_run(str(tmp_path), "cartpole", learned()).run_dir == str(run)
    assert choose_run(str(tmp_path), "cartpole", learned(seed=3)).run_dir != str(run)


def test_a_run_that_already_succeeded_says_where_its_model_is_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = make_job("cartpole").obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run = tmp_path / "runs" / "cartpole"
    finished_run(run, fingerprint.learned_values(make_job("cartpole").spec()), "Succeeded")
    uid = "00000000-0000-4000-8000-000000000001"
    (run / "uid").write_text(uid + "\n")
    model = run / "checkpoints" / f"cartpole-{uid}" / "final-model.pt"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"x")
    assert main(["run", "job.yaml"]) == 0
    out = capsys.readouterr().out
    assert "cartpole already succeeded" in out and f"runs/cartpole/checkpoints/cartpole-{uid}/final-model.pt" in out
    assert not (run / "pods").exists() and not (run / "logs").exists()


@pytest.mark.parametrize("planted", ["garbage", "link"])
def test_a_run_that_already_succeeded_with_a_uid_not_kuberls_is_refused_in_a_line(tmp_path, capsys, monkeypatch, planted):
    """The rerun of a run that succeeded names its model by the run's uid: a uid file edited (or a link left there)
    ended `kuberl run` in a LocalRunError traceback, exit 1, where every other run's refusal is a line, exit 3."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(make_job("cartpole").obj()))
    run = tmp_path / "runs" / "cartpole"
    finished_run(run, fingerprint.learned_values(make_job("cartpole").spec()), "Succeeded")
    if planted == "link":
        (run / "uid").symlink_to(tmp_path / "elsewhere")
    else:
        (run / "uid").write_text("garbage\n")
    assert main(["run", "job.yaml"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("kuberl run: cartpole cannot run here: ") and "not the uid kuberl run wrote: delete it" in err
    assert len(err.splitlines()) == 1, err


def test_a_rerun_that_trains_nothing_says_nothing_of_a_rendezvous_port(tmp_path, capsys, monkeypatch):
    """`make train` twice, with another run holding 29500: the rerun said "rendezvous port 29500 is taken here:
    using 29501" before "already succeeded …; nothing to train", a port for a run that never starts."""
    import contextlib

    from kuberl.local.runner import reserve_port

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    job = make_job("cartpole").workers(2).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    finished_run(tmp_path / "runs" / "cartpole", fingerprint.learned_values(make_job("cartpole").workers(2).spec()), "Succeeded")
    with contextlib.ExitStack() as other_run:
        reserve_port(JobSpec().rendezvous.port, other_run)
        assert main(["run", "job.yaml"]) == 0
    out = capsys.readouterr().out
    assert "cartpole already succeeded" in out
    assert "rendezvous port" not in out, out


def test_a_run_that_starts_runs_on_the_port_it_said_it_moved_to(tmp_path, capsys, monkeypatch):
    """Choosing the port once the run is sure to start left the job with the taken port: "using 29502", then
    "cannot run here: rendezvous port 29500 is in use here"."""
    import contextlib

    from kuberl.local import runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(make_job("cartpole").workers(2).obj()))
    started = []
    monkeypatch.setattr(runner, "_run_held", lambda args, job, spec, run_dir, configmaps, fresh: started.append((job, spec)) or 0)
    with contextlib.ExitStack() as other_run:
        runner.reserve_port(JobSpec().rendezvous.port, other_run)
        assert main(["run", "job.yaml"]) == 0
    (job, spec), = started
    assert job.spec.rendezvous.port == spec.rendezvous.port != JobSpec().rendezvous.port
    assert f"using {spec.rendezvous.port}" in capsys.readouterr().out


def test_resume_onto_another_env_is_refused_before_the_run_is_touched(tmp_path, capsys, monkeypatch):
    """`kuberl run acrobot.yaml --set env.id=CartPole-v1 --resume` said "resuming … from ckpt-…56.pt", started the
    pods, whose trainer refused every checkpoint (trained on Acrobot-v1) and failed NoUsableCheckpoint; and the
    run's job.yaml and fingerprint were CartPole's from then on, so the plain rerun of acrobot.yaml started a fresh
    run beside its own stopped one, and `kuberl eval` refused the run's checkpoints."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "cartpole"
    old = make_job("cartpole").env("Acrobot-v1")
    finished_run(run, fingerprint.learned_values(old.spec()), "Suspended")
    (run / "job.yaml").write_text(yaml.safe_dump(old.obj()))
    uid = "00000000-0000-4000-8000-000000000001"
    (run / "uid").write_text(uid + "\n")
    (run / "checkpoints" / f"cartpole-{uid}").mkdir(parents=True)
    (run / "checkpoints" / f"cartpole-{uid}" / "ckpt-0000000056.pt").write_bytes(b"x")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(make_job("cartpole").env("CartPole-v1").obj()))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["run", "job.yaml", "--resume"]) == 1
    err = capsys.readouterr().err
    assert ("--resume cannot continue runs/cartpole: its checkpoints were trained with env.id \"Acrobot-v1\", and the"
            " trainer refuses them for \"CartPole-v1\"") in err, err
    assert "checkpoint.whenNoneUsable=StartOver" in err and "without --resume" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing rewritten, no pod started
    # asked to start over, it resumes the run (the trainer moves the checkpoints aside): kuberl run says nothing
    choice = choose_run("runs", "cartpole", learned(), resume=True, start_over=True)
    assert choice.refused is None and choice.run_dir == str(run)


def test_a_succeeded_run_below_a_raised_target_is_trained_on_not_called_done(tmp_path, capsys, monkeypatch):
    """`make train` (stopped at eval 494.9 >= 475), then `--set success.targetReturn=500` for a better policy: it said
    "already succeeded with this spec … nothing to train", though the spec changed. The success rule decides when a
    run stops, not what it learns: the same run is resumed and trained on until the new target or its budget."""
    from kuberl.local import runner

    monkeypatch.chdir(tmp_path)
    job = make_job("cartpole").with_spec(totalTimesteps=500_000, success={"targetReturn": 475})
    run = tmp_path / "runs" / "cartpole"
    finished_run(run, fingerprint.learned_values(job.spec()), "Succeeded")
    write_json(str(run / "status.json"), {"phase": "Succeeded", "generation": 0,
                                          "progress": {"evalReturn": 494.95, "timesteps": 38644}})
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job.obj()))
    started = []
    monkeypatch.setattr(runner, "_run_held", lambda args, job, spec, run_dir, configmaps, fresh: started.append(run_dir) or 0)
    assert main(["run", "job.yaml", "--set", "success.targetReturn=500"]) == 0
    assert started == [str(run)]
    assert ("cartpole succeeded before in runs/cartpole, but its last evaluation, 494.95 at 38,644 timesteps, is below"
            " success.targetReturn 500: training it on") in capsys.readouterr().out
    for met in ("success.targetReturn=494.95", "success.targetReturn=400"):  # met already: nothing to train
        assert main(["run", "job.yaml", "--set", met]) == 0
        assert "cartpole already succeeded" in capsys.readouterr().out
    assert started == [str(run)]


def test_only_a_run_stopped_early_below_the_target_is_trained_on():
    spec = make_job("cartpole").with_spec(totalTimesteps=500_000, success={"targetReturn": 500}).spec()
    early = {"progress": {"evalReturn": 494.95, "timesteps": 38644}}
    assert target_not_met(early, spec).startswith("its last evaluation, 494.95 at 38,644 timesteps")
    assert target_not_met({"progress": {"evalReturn": 494.95, "timesteps": 500_000}}, spec) is None  # budget spent
    assert target_not_met({"progress": {"evalReturn": 500, "timesteps": 38644}}, spec) is None
    assert target_not_met({"progress": {"evalReturn": None, "timesteps": 38644}}, spec) is None  # no evaluation
    assert target_not_met({}, spec) is None
    assert target_not_met({"progress": "x"}, spec) is None
    no_target = make_job("cartpole").with_spec(totalTimesteps=500_000).spec()
    assert target_not_met(early, no_target) is None


def test_a_fresh_run_the_trainer_refuses_at_once_is_not_kept_beside_the_jobs_run(tmp_path, capsys, monkeypatch):
    """An env whose package is not installed here (an Atari id without ale-py) failed at the trainer's first step and
    left runs/<job>.<hash>: the job's latest run from then on, which the next changed spec was compared with and
    --resume continued. The job's first run keeps its refusal (status.json, logs): a rerun says how it ended."""
    from tests.support.ports import free_port

    monkeypatch.chdir(tmp_path)
    finished_run(tmp_path / "runs" / "cartpole", learned(), "Succeeded")
    job = make_job("cartpole").with_spec(workers=1, env={"id": "nosuchpkg_zz.envs:Env", "numEnvs": 2}).obj()
    job["spec"]["rendezvous"] = {"port": free_port()}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["run", str(tmp_path / "job.yaml")]) == 1
    out = capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "runs")) == ["cartpole"], out
    last = out.strip().splitlines()[-1]
    assert "ConfigError" in last, last
    assert last.endswith("is not kept (the worker's refusal is above)"), last
    os.rename(tmp_path / "runs" / "cartpole", tmp_path / "old")
    job["spec"]["rendezvous"] = {"port": free_port()}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["run", str(tmp_path / "job.yaml")]) == 1  # the job's first run: kept, with its refusal
    assert json.loads((tmp_path / "runs" / "cartpole" / "status.json").read_text())["phase"] == "Failed"
