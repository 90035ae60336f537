"""torchrun's --nproc-per-node on the command line wins over PET_NPROC_PER_NODE (torch/distributed/run.py
reads the flag first): kuberl reads it from the command (torchrun, python -m torch.distributed.run or
.launch, an sh -c script), makes it procsPerWorker when converting, and refuses a job whose command
line starts another count than the pods were sized for (WORLD_SIZE, CPU request, OMP_NUM_THREADS)."""

from __future__ import annotations

import pytest
from kuberl import cli
from kuberl.core import torchrun
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob
from kuberl.tools.convert import NotConvertible, convert, to_yaml

IMAGE = "registry.example.com/ml/train:1"


@pytest.mark.parametrize(("command", "args", "value", "where"), [
    (["torchrun", "--nproc_per_node=4", "--nnodes=2", "train.py"], None, "4", "command[1]"),
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "train.py"], None, "8", "command[4]"),
    (["/opt/conda/bin/torchrun", "--standalone", "--nproc_per_node", "gpu", "t.py"], None, "gpu", "command[3]"),
    (["python3", "-u", "-m", "torch.distributed.run", "--nproc-per-node=auto", "t.py"], None, "auto", "command[4]"),
    (["python", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node=2", "t.py"], None, "2", "command[4]"),
    (["torchrun"], ["--nproc_per_node=3", "t.py"], "3", "args[0]"),
    (["sh", "-c", "cd /w && exec torchrun --nnodes=2 --nproc_per_node=4 t.py --lr 1"], None, "4", "command[2] (the shell script)"),
    (["/bin/bash", "-lc"], ["pip install x; python -m torch.distributed.run --nproc_per_node 2 t.py"], "2",
     "args[0] (the shell script)"),
    (["sh", "-c", "torchrun --nproc_per_node=$NPROC t.py"], None, "$NPROC", "command[2] (the shell script)"),
    (["torchrun", "--nproc_per_node=$(NPROC)", "t.py"], None, "$(NPROC)", "command[1]"),
])
def test_the_flag_is_found_where_torchrun_reads_it(command, args, value, where):
    assert torchrun.find(command, args) == torchrun.Nproc(value, where)


@pytest.mark.parametrize(("command", "args"), [
    (["torchrun", "--nnodes=2", "train.py", "--nproc_per_node=9"], None),  # the script's own argument
    (["torchrun", "-m", "pkg.train", "--nproc_per_node=9"], None),
    (["python", "train.py", "--nproc_per_node=9"], None),
    (["sh", "-c", "python train.py --nproc_per_node=9"], None),
    (["torchrun", "--no-python", "python3", "-c", "print(1)"], None),
    (None, None),
])
def test_no_flag_is_read_from_the_script_or_a_plain_python(command, args):
    assert torchrun.find(command, args) is None


def test_a_script_the_shell_reads_and_shlex_cannot_is_said_so():
    found = torchrun.find(["sh", "-c", "torchrun --nproc_per_node='4 t.py"], None)
    assert found.value is None and "cannot be read" in found.problem and found.where == "command[2]"


# --- convert ---------------------------------------------------------------------------------------


def pytorchjob(command: list[str], gpus: int = 0, **spec) -> dict:
    limits = {"cpu": "4", **({"nvidia.com/gpu": gpus} if gpus else {})}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"}, "spec": {
        "runPolicy": {"backoffLimit": 3}, **spec, "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": IMAGE, "command": command, "resources": {"limits": limits},
                            "securityContext": {"runAsUser": 1000}}]}}}}}}


FLAG = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command[1]"


def test_the_issues_case_runs_4_processes_per_pod_where_torchrun_starts_4():
    """`torchrun --nproc_per_node=4 --nnodes=2` with no nprocPerNode: 1 process per pod before."""
    job, notes = convert(pytorchjob(["torchrun", "--nproc_per_node=4", "--nnodes=2", "/workspace/train.py"]))
    assert job["spec"]["procsPerWorker"] == 4
    assert [n.path for n in notes] == [FLAG]
    pods = [o for o in render_job(job, "default", PLACEHOLDER_UID) if o["kind"] == "Pod"]
    env = {e["name"]: e.get("value") for e in pods[1]["spec"]["containers"][0]["env"]}
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == ("8", "4")
    assert pods[1]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "4"


def test_the_flag_wins_over_nprocpernode_as_in_torchrun():
    job, notes = convert(pytorchjob(["torchrun", "--nproc_per_node=2", "t.py"], nprocPerNode="4"))
    assert job["spec"]["procsPerWorker"] == 2
    overridden = next(n for n in notes if n.path == "spec.nprocPerNode")
    assert "torchrun took the command line's --nproc-per-node '2'" in overridden.message


@pytest.mark.parametrize("word", ["gpu", "auto"])
def test_gpu_and_auto_with_gpus_are_one_process_per_gpu(word):
    job, notes = convert(pytorchjob(["torchrun", f"--nproc_per_node={word}", "t.py"], gpus=4))
    assert (job["spec"]["gpusPerWorker"], job["spec"].get("procsPerWorker")) == (4, None)
    assert any(n.path == FLAG and "one process per GPU" in n.message for n in notes)


@pytest.mark.parametrize(("command", "words"), [
    (["torchrun", "--nproc_per_node=gpu", "t.py"], "no nvidia.com/gpu limit"),
    (["torchrun", "--nproc_per_node=cpu", "t.py"], "affinity mask"),
    (["torchrun", "--nproc_per_node=auto", "t.py"], "pass --procs-per-worker N"),
])
def test_a_count_no_manifest_tells_is_refused_at_the_flag(command, words):
    with pytest.raises(NotConvertible) as e:
        convert(pytorchjob(command))
    (problem,) = e.value.problems
    assert problem.path == FLAG and words in problem.message, problem


def test_cpu_takes_the_count_given():
    job, notes = convert(pytorchjob(["torchrun", "--nproc_per_node=cpu", "t.py"]), procs_per_worker=3)
    assert job["spec"]["procsPerWorker"] == 3
    assert any(n.path == FLAG and "static CPU manager" in n.message for n in notes)
    with pytest.raises(NotConvertible, match="--procs-per-worker says 3"):
        convert(pytorchjob(["torchrun", "--nproc_per_node=2", "t.py"]), procs_per_worker=3)


def test_a_count_that_cannot_be_read_is_said_so():
    _, notes = convert(pytorchjob(["sh", "-c", "torchrun --nproc_per_node=$CPU_PER_NODE /workspace/ddp.py"]))
    note = next(n for n in notes if n.path == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command[2]")
    assert "'$CPU_PER_NODE'" in note.message and "cannot tell" in note.message


# --- an RLTrainingJob --------------------------------------------------------------------------------


def rltj(command: list[str], **spec) -> dict:
    return {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "j"}, "spec": {
        "trainer": "custom", "workers": 2, "image": IMAGE, **spec,
        "template": {"spec": {"containers": [{"name": "trainer", "command": command}]}}}}


@pytest.mark.parametrize(("job", "words"), [
    (rltj(["torchrun", "--nproc_per_node=4", "t.py"], procsPerWorker=2), "starts 4 process(es) per pod, spec.procsPerWorker is 2"),
    (rltj(["torchrun", "--nproc_per_node=4", "t.py"]), "spec.procsPerWorker is 1 (its default)"),
    (rltj(["torchrun", "--nproc_per_node=cpu", "t.py"]), "set spec.procsPerWorker"),
    (rltj(["torchrun", "--nproc_per_node=gpu", "t.py"]), "spec.gpusPerWorker is 0"),
])
def test_a_job_whose_command_line_disagrees_is_refused_in_one_line(job, words):
    with pytest.raises(InvalidJob) as e:
        validate_job(job)
    (problem,) = e.value.problems
    assert problem.path == "spec.template.spec.containers[0].command[1]" and words in problem.message, problem


@pytest.mark.parametrize("job", [
    rltj(["torchrun", "--nproc_per_node=4", "t.py"], procsPerWorker=4),
    rltj(["torchrun", "--nproc_per_node=cpu", "t.py"], procsPerWorker=4),
    rltj(["torchrun", "--nproc_per_node=auto", "t.py"], gpusPerWorker=2),
    rltj(["sh", "-c", "torchrun --nproc_per_node=$N t.py"]),  # may be right: validate warns, nothing refuses
])
def test_a_job_whose_command_line_agrees_is_valid(job):
    validate_job(job)


def test_validate_counts_the_processes_torchrun_starts(tmp_path, capsys):
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([pytorchjob(["torchrun", "--nproc_per_node=4", "--nnodes=2", "t.py"])]))
    assert cli.main(["validate", str(path)]) == 0
    assert "2 worker(s) x 4 process(es) = world size 8" in capsys.readouterr().out
    path.write_text(to_yaml([rltj(["sh", "-c", "torchrun --nproc_per_node=$N t.py"])]))
    assert cli.main(["validate", str(path)]) == 0
    assert "warning: spec.template.spec.containers[0].command[2]: torchrun's --nproc-per-node '$N' cannot be read" in capsys.readouterr().err


def test_convert_takes_procs_per_worker(tmp_path, capsys):
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([pytorchjob(["torchrun", "--nproc_per_node=cpu", "t.py"])]))
    assert cli.main(["convert", str(path)]) == 1
    assert "pass --procs-per-worker N" in capsys.readouterr().err
    assert cli.main(["convert", "--procs-per-worker", "3", str(path)]) == 0
    assert "procsPerWorker: 3" in capsys.readouterr().out


# --- torchrun's --nnodes -----------------------------------------------------------------------------


def custom_job(command: list[str], workers: int) -> dict:
    return {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "nodes"},
            "spec": {"trainer": "custom", "workers": workers, "image": IMAGE,
                     "template": {"spec": {"containers": [{"name": "trainer", "command": command}]}}}}


@pytest.mark.parametrize(("command", "workers", "words"), [
    (["torchrun", "--nnodes=2", "--nproc_per_node=1", "t.py"], 4, "waits for 2 node(s), and spec.workers starts 4"),
    (["bash", "-c", "torchrun --nnodes 4 --nproc_per_node=1 t.py"], 2, "the rendezvous never completes"),
    (["torchrun", "--nnodes=1:2", "t.py"], 3, "takes 1 to 2 nodes"),
])
def test_a_command_line_node_count_other_than_the_workers_is_refused_at_the_flag(command, workers, words):
    """torchrun takes --nnodes over PET_NNODES: a job whose spec.workers was changed after the command was written
    waited in its rendezvous for pods that never came (or failed the pods past the count)."""
    with pytest.raises(InvalidJob) as refused:
        validate_job(custom_job(command, workers))
    (problem,) = [p for p in refused.value.problems if "--nnodes" in p.message]
    assert problem.path.startswith("spec.template.spec.containers[0].command[") and words in problem.message, problem


@pytest.mark.parametrize(("command", "env", "words"), [
    (["torchrun", "--nnodes=$(NODES)", "t.py"], [{"name": "NODES", "value": "5"}], "waits for 5 node(s), and spec.workers starts 3"),
    # an env value may itself name one defined before it, as the kubelet expands them in order
    (["torchrun", "--nnodes", "$(NODES)", "t.py"], [{"name": "N", "value": "1:2"}, {"name": "NODES", "value": "$(N)"}],
     "takes 1 to 2 nodes"),
    (["sh", "-c", "torchrun --nnodes=$(NODES) t.py"], [{"name": "NODES", "value": "2"}], "waits for 2 node(s)"),
])
def test_a_node_count_the_kubelet_expands_from_the_containers_own_env_is_read_as_expanded(command, env, words):
    """The kubelet expands $(VAR) in command and args from the container's env before torchrun sees them
    (expansion.Expand); with `value: "5"` literally there, `--nnodes=$(NODES)` was taken as unreadable, and the
    gang of 3 waited in torchrun's rendezvous for 5 pods, holding its GPUs, until backoffLimit was spent."""
    job = custom_job(command, 3)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = env
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    (problem,) = [p for p in refused.value.problems if "--nnodes" in p.message]
    assert words in problem.message, problem


def test_a_process_count_the_kubelet_expands_converts_as_the_count_it_is():
    """`--nproc_per_node=$(NPROC)` with the container's NPROC "4": torchrun starts 4 per pod; convert said it
    could not tell and ran 1 per pod (every pod's WORLD_SIZE, CPU request and metrics ports counted 1)."""
    doc = pytorchjob(["torchrun", "--nproc_per_node=$(NPROC)", "--nnodes=2", "/workspace/train.py"])
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NPROC", "value": "4"}]
    job, notes = convert(doc)
    assert job["spec"]["procsPerWorker"] == 4
    assert any(n.path == FLAG and "--nproc-per-node 4 is now spec.procsPerWorker" in n.message for n in notes), notes


@pytest.mark.parametrize(("command", "env"), [
    (["torchrun", "--nnodes=$(NODES)", "t.py"], [{"name": "NODES", "value": "3"}]),
    (["torchrun", "--nnodes=$$(NODES)", "t.py"], [{"name": "NODES", "value": "5"}]),  # $$ escapes: torchrun reads '$(NODES)'
    (["torchrun", "--nnodes=$(NODES)", "t.py"], [{"name": "NODES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
    (["torchrun", "--nnodes=$(OTHER)", "t.py"], [{"name": "NODES", "value": "5"}]),  # not defined: left as written
])
def test_a_node_count_the_kubelet_leaves_or_makes_right_is_taken(command, env):
    job = custom_job(command, 3)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = env
    validate_job(job)


@pytest.mark.parametrize("command", [["torchrun", "--nnodes=3", "t.py"], ["torchrun", "--nnodes", "1:3", "t.py"],
                                     ["torchrun", "--nnodes", "1:4", "--rdzv-backend=c10d", "t.py"],
                                     ["torchrun", "--nnodes=$(NNODES)", "t.py"], ["sh", "-c", "torchrun --nnodes=$NNODES t.py"],
                                     ["python", "t.py", "--nnodes=9"], ["torchrun", "--nnodes", "1", "--rdzv-endpoint=localhost:0", "t.py"]])
def test_a_node_count_that_agrees_or_cannot_be_read_is_taken(command):
    validate_job(custom_job(command, 3))


@pytest.mark.parametrize(("command", "env"), [
    (["torchrun", "--nnodes=1:4", "t.py"], []),
    (["torchrun", "--nnodes", "2:4", "--rdzv_backend", "static", "t.py"], []),
    (["sh", "-c", "torchrun --nnodes=1:4 t.py"], [{"name": "PET_RDZV_BACKEND", "value": "static"}]),
])
def test_an_elastic_node_range_under_the_static_rendezvous_is_refused_when_the_workers_are_fewer_than_its_max(command, env):
    """torch's static rendezvous makes a world of MAX nodes (torch/distributed/elastic/rendezvous/
    static_tcp_rendezvous.py create_rdzv_handler: world_size = params.max_nodes), and kuberl sets no PET_RDZV_BACKEND:
    3 pods with --nnodes=1:4 validated and waited in the rendezvous for a fourth."""
    job = custom_job(command, 3)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = env
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    (problem,) = [p for p in refused.value.problems if "--nnodes" in p.message]
    assert "static rendezvous" in problem.message and "waits for MAX, 4 nodes" in problem.message, problem
    assert "--rdzv-backend=c10d" in problem.message and "--nnodes=3" in problem.message


@pytest.mark.parametrize(("command", "env"), [
    (["torchrun", "--nnodes=1:4", "--rdzv-backend", "c10d", "t.py"], []),
    (["torchrun", "--standalone", "--nnodes=1:4", "t.py"], []),
    (["torchrun", "--nnodes=1:4", "t.py"], [{"name": "PET_RDZV_BACKEND", "value": "c10d"}]),
    (["torchrun", "--nnodes=1:4", "t.py"], [{"name": "PET_RDZV_BACKEND", "valueFrom": {"configMapKeyRef": {"name": "r", "key": "b"}}}]),
])
def test_an_elastic_node_range_under_another_rendezvous_or_one_that_cannot_be_told_is_taken(command, env):
    job = custom_job(command, 3)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = env
    validate_job(job)


def test_an_elastic_pytorchjobs_node_range_is_refused_at_its_flag_and_converts_with_c10d():
    """kubeflow/training-operator examples/pytorch/elastic (an elasticPolicy with rdzvBackend c10d and min/max
    replicas): training-operator gave the pods PET_RDZV_BACKEND=c10d, kuberl gives none, so a command line
    --nnodes=1:3 for 2 pods waited for a third under torchrun's static default; convert took it."""
    doc = pytorchjob(["torchrun", "--nnodes=1:3", "--nproc_per_node=1", "t.py"],
                     elasticPolicy={"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3})
    with pytest.raises(NotConvertible) as refused:
        convert(doc)
    assert [p.path for p in refused.value.problems] == [FLAG]
    assert "--rdzv-backend=c10d" in refused.value.problems[0].message
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"].insert(1, "--rdzv-backend=c10d")
    job, _ = convert(doc)
    assert job["spec"]["workers"] == 2


@pytest.mark.parametrize(("value", "words"), [("x", "not a whole number"), ("-2", "0 < MIN <= MAX"), ("3:1", "0 < MIN <= MAX"),
                                              ("0", "0 < MIN <= MAX"), ("1:2:3", "MIN:MAX format"), ("", "not a whole number")])
def test_a_node_count_torchrun_refuses_is_refused_at_the_flag(value, words):
    """torchrun ends at start on these (torch/distributed/run.py: parse_min_max_nnodes' int(), then config_from_args'
    `0 < min_nodes <= max_nodes`), so every pod failed alike until backoffLimit; they validated ("3:1" read as MAX 1,
    each pod its own world)."""
    with pytest.raises(InvalidJob) as refused:
        validate_job(custom_job(["torchrun", f"--nnodes={value}", "t.py"], 3))
    (problem,) = [p for p in refused.value.problems if "--nnodes" in p.message]
    assert problem.path == "spec.template.spec.containers[0].command[1]" and words in problem.message, problem


def test_node_bounds_are_read_as_torchrun_reads_them():
    from torch.distributed.run import parse_min_max_nnodes
    for value in ("2", "1:4", " 3", "+2", "1_0"):  # Python's int() takes these, so torchrun does
        assert torchrun.torchrun_node_bounds(value) == parse_min_max_nnodes(value)


def test_a_flag_written_twice_is_read_as_torchrun_reads_it_the_last_one():
    """torchrun's argparse keeps the last of a repeated flag: kuberl read the first, so `--nnodes=2 ... --nnodes=3`
    validated with 2 workers and its rendezvous waited for a third pod that never came."""
    assert torchrun.find(["torchrun", "--nproc-per-node=1", "--nproc_per_node", "4", "t.py"], None) == torchrun.Nproc("4", "command[3]")
    with pytest.raises(InvalidJob, match="waits for 3 node"):
        validate_job(custom_job(["torchrun", "--nnodes=2", "--max-restarts=0", "--nnodes=3", "t.py"], 2))
    validate_job(custom_job(["torchrun", "--nnodes=3", "--nnodes=2", "t.py"], 2))


def test_a_converted_pytorchjob_with_a_wrong_node_count_is_refused_at_its_own_field():
    with pytest.raises(NotConvertible) as refused:
        convert(pytorchjob(["torchrun", "--nnodes=3", "--nproc_per_node=1", "t.py"]))
    (problem,) = refused.value.problems
    assert problem.path == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command[1]", problem


SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no: a digit torchrun cannot read either


# Python's int() reads at most 4300 digits (sys.int_info.default_max_str_digits): torchrun raises at more, as
# kuberl validate, the operator and kuberl convert did (a ValueError traceback; the operator retried the job every 5 s
# with nothing in its status)
LONG_COUNT = "9" * 5000


@pytest.mark.parametrize(("command", "word"), [(["torchrun", f"--nproc-per-node={LONG_COUNT}", "t.py"], 1),
                                             (["sh", "-c", f"torchrun --nproc-per-node={LONG_COUNT} t.py"], 2)])
def test_a_count_of_more_digits_than_int_reads_is_refused_at_the_flag(command, word):
    from kuberl.core import jobstatus

    job = rltj(command)
    with pytest.raises(InvalidJob) as e:
        validate_job(job)
    (problem,) = e.value.problems
    assert problem.path == f"spec.template.spec.containers[0].command[{word}]" and "4300" in problem.message, problem
    spec, refusal = jobstatus.judge({**job, "metadata": {"name": "j", "uid": "u"}})
    assert spec is None and refusal.reason == "InvalidSpec" and "command[" in refusal.message


@pytest.mark.parametrize("count", [SUPERSCRIPT_TWO, LONG_COUNT])
@pytest.mark.parametrize("convert_one", ["pytorchjob", "jobset", "jobset-env", "trainjob"])
def test_a_count_in_a_digit_int_cannot_read_is_said_at_its_field_not_a_traceback(convert_one, count):
    """A superscript count (str.isdigit() says yes, int() raised ValueError out of kuberl convert): read as any
    count kuberl cannot read, a note or a refusal at the field that holds it."""
    from kuberl.tools.jobset import convert_jobset
    from kuberl.tools.trainjob import convert_trainjob

    pod = {"containers": [{"name": "pytorch", "image": IMAGE, "command": ["torchrun", f"--nproc-per-node={count}", "t.py"]}]}
    docs = {
        "pytorchjob": (convert, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"}, "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": pod}}}}},
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command[1]"),
        "jobset": (convert_jobset, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "p"},
                                    "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}]}},
                   "spec.replicatedJobs[0].template.spec.template.spec.containers[0].command[1]"),
        "jobset-env": (convert_jobset, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "p"},
                                        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
                                            "containers": [{"name": "pytorch", "image": IMAGE, "command": ["torchrun", "t.py"], "env": [
                                                {"name": "PET_NPROC_PER_NODE", "value": count}]}]}}}}}]}},
                       "spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0]"),
        "trainjob": (convert_trainjob, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "p"},
                                        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {
                                            "image": IMAGE, "command": ["torchrun", "t.py"], "numProcPerNode": count}}},
                     "spec.trainer.numProcPerNode"),
    }
    convert_doc, doc, path = docs[convert_one]
    try:
        said = {n.path: n.message for n in convert_doc(doc)[1]}
    except NotConvertible as refused:
        said = {p.path: p.message for p in refused.problems}
    assert count[:40] in said[path] or f"{len(count)} " in said[path], said
