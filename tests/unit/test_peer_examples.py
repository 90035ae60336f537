"""Manifests in the shape of the examples users copy from upstream projects (tests/fixtures/peers: each
written for these tests, not copied, its header naming the upstream file whose shape it takes), through `kuberl convert`: each converts to an RLTrainingJob that
the CRD's schema and the operator's validation accept and whose pods get the torch environment the
upstream operator gave, or is refused naming the field; none ends in a traceback.

What the upstream operators set is written out below from their code, each function citing it; where
kuberl's value differs on purpose, the difference is a row of ALLOWED and convert must have said so."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from conversion_support import assert_any_junk_anywhere_is_converted_or_refused
from kuberl import cli
from kuberl.core.render import PLACEHOLDER_UID, pod_dns_name, render_pods
from kuberl.core.rules import validate_job
from kuberl.core.yamlreader import load_documents
from kuberl.tools.convert import convert as convert_pytorchjob
from kuberl.tools.jobset import convert_jobset
from kuberl.tools.trainjob import convert_trainjob

from tests.support.crdschema import CustomSchema

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "fixtures" / "peers"
CRD = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
TORCH_NAMES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES",
               "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_MAX_RESTARTS",
               "JOB_COMPLETION_INDEX", "PYTHONUNBUFFERED")


def training_operator_env(job: dict) -> list[dict[str, str]]:
    """Each pod's env from kubeflow/training-operator release-1.9 (078ec30), Master first then Workers:
    pkg/apis/kubeflow.org/v1/pytorch_defaults.go (replicas 1, port pytorchjob-port 23456, nprocPerNode 'auto'
    unless elasticPolicy.nProcPerNode, elastic min/max from each other or the Worker replicas), then
    pkg/controller.v1/pytorch/envvar.go setPodEnv, master.go, elastic.go; a later duplicate name wins, as in a pod."""
    name, spec = job["metadata"]["name"], job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    counts = {rtype: r.get("replicas", 1) for rtype, r in replicas.items()}

    def port(rtype: str) -> str:
        for container in replicas[rtype]["template"]["spec"]["containers"]:
            for p in container.get("ports", []) if container["name"] == "pytorch" else []:
                if p.get("name") == "pytorchjob-port":
                    return str(p["containerPort"])
        return "23456"

    elastic = spec.get("elasticPolicy")
    nproc = spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = "auto"
    total = sum(counts.values())
    pods = []
    for rtype in ("Master", "Worker"):
        for index in range(counts.get(rtype, 0)):
            env = {"PYTHONUNBUFFERED": "1"}
            if "Master" in replicas:
                addr = f"{name}-master-0"
                env |= {"MASTER_PORT": port("Master"), "PET_MASTER_PORT": port("Master"), "MASTER_ADDR": addr, "PET_MASTER_ADDR": addr}
                rank = str(index + (rtype == "Worker"))
                world = total * (int(nproc) if str(nproc).isdigit() else 1)  # getNprocPerNodeInt: 1 for a word
                env |= {"WORLD_SIZE": str(world), "RANK": rank, "PET_NODE_RANK": rank}
            if nproc is not None:
                env["PET_NPROC_PER_NODE"] = str(nproc)
            if elastic is not None:
                low = elastic.get("minReplicas", elastic.get("maxReplicas", counts.get("Worker")))
                high = elastic.get("maxReplicas", low)
                env["PET_RDZV_ENDPOINT"] = f"{elastic.get('rdzvHost', f'{name}-worker-0')}:{elastic.get('rdzvPort', port('Worker'))}"
                env["PET_RDZV_BACKEND"] = elastic.get("rdzvBackend", "c10d")
                env["PET_NNODES"] = f"{low}:{high}"
                if "maxRestarts" in elastic:
                    env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
                if "nProcPerNode" in elastic:
                    env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
            else:
                env["PET_NNODES"] = str(total)
            pods.append(env)
    return pods


def trainer_env(trainjob: dict, runtime: dict | None) -> list[dict[str, str]]:
    """Each node's env from kubeflow/trainer master (8c0f505): pkg/runtime/framework/plugins/torch/torch.go
    EnforceMLPolicy (PET_NNODES the node count, PET_NPROC_PER_NODE numProcPerNode, else 'auto' made
    max(1, CPU request, else limit) when resourcesPerNode, the TrainJob's else the runtime's, has no GPU;
    PET_NODE_RANK the completion index, PET_MASTER_ADDR <job>-node-0-0.<job>, PET_MASTER_PORT
    constants.ContainerTrainerPort 29500), after the TrainJob's own env; JOB_COMPLETION_INDEX from the Job
    controller (Trainer's node Job is Indexed)."""
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    nodes = trainer.get("numNodes") or (runtime or {}).get("spec", {}).get("mlPolicy", {}).get("numNodes", 1)
    resources = trainer.get("resourcesPerNode")
    if resources is None and runtime is not None:
        node = runtime["spec"]["template"]["spec"]["replicatedJobs"][-1]["template"]["spec"]["template"]["spec"]["containers"][0]
        resources = node.get("resources", {})
    nproc = str(trainer.get("numProcPerNode", "auto"))
    gpus = [k for kind in ("requests", "limits") for k in (resources or {}).get(kind, {}) if "gpu" in k.lower()]  # GetNumGPUPerNode
    if nproc == "auto" and not gpus:
        cpu = (resources or {}).get("requests", {}).get("cpu") or (resources or {}).get("limits", {}).get("cpu") or 0
        nproc = str(max(1, int(cpu)))
    own = {e["name"]: e["value"] for e in trainer.get("env", [])}
    return [own | {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": str(i), "JOB_COMPLETION_INDEX": str(i),
                   "PET_MASTER_ADDR": f"{name}-node-0-0.{name}", "PET_MASTER_PORT": "29500"} for i in range(nodes)]


def jobset_env(jobset: dict) -> list[dict[str, str]]:
    """Each pod's env of a JobSet of one replicated Job: JobSet's controller injects none (its pods get labels,
    annotations, hostname and subdomain), so it is the template's own, a fieldRef to the completion index read as
    that index, plus JOB_COMPLETION_INDEX from the Job controller (kubernetes pkg/controller/job/indexed_job_utils.go
    addCompletionIndexEnvVariable)."""
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    pods = []
    for j in range(replicated.get("replicas", 1)):
        for i in range(job["parallelism"]):
            env = {e["name"]: e["value"] if "value" in e else str(i) for e in container.get("env", [])}
            pods.append(env | {"JOB_COMPLETION_INDEX": str(i)})
    return pods


def upstream_host_rank(value: str, kind: str, name: str) -> int | None:
    """The pod an upstream address names, as kuberl's rank: the Service of training-operator's <job>-master-0
    or <job>-worker-<i>, a TrainJob's <job>-node-0-<i>.<job>, a JobSet's <job>-<replicatedJob>-<j>-<i>.<subdomain>."""
    host = value.rsplit(":", 1)[0] if ":" in value else value
    patterns = {"PyTorchJob": [(rf"{name}-master-0", lambda m: 0), (rf"{name}-worker-(\d+)", lambda m: int(m[1]))],
                "TrainJob": [(rf"{name}-node-0-(\d+)\.{name}", lambda m: int(m[1]))],
                "JobSet": [(rf"{name}-[a-z0-9-]+-0-(\d+)\.{name}", lambda m: int(m[1]))]}[kind]
    for pattern, rank in patterns:
        if m := re.fullmatch(pattern, host):
            return rank(m)
    return None


def port_of(value: str) -> str:
    return value.rsplit(":", 1)[1] if ":" in value else value


# Where kuberl's value differs from the upstream operator's on purpose: the name, why, and the field convert's note
# names (convert must have said it). Every other torch name must be equal.
ALLOWED = {
    # a word torchrun resolves ('auto'): kuberl writes the number of processes it starts, said at nprocPerNode
    # unless the command starts no launcher (then nothing reads it and each pod is one process, as PyTorchJob counted)
    ("PyTorchJob", "PET_NPROC_PER_NODE"): (lambda up, ours, spec: not up.isdigit() and ours == str(spec.get("procsPerWorker", 1)), None),
    # an elastic range: kuberl's gang has a fixed size within it, said at elasticPolicy.minReplicas
    ("PyTorchJob", "PET_NNODES"): (lambda up, ours, spec: ":" in up and int(up.split(":")[0]) <= int(ours) <= int(up.split(":")[1]),
                                   "spec.elasticPolicy.minReplicas"),
    # no PET_RDZV_BACKEND: torchrun's static rendezvous at worker 0 (or the command line's c10d) replaces it, said so
    ("PyTorchJob", "PET_RDZV_BACKEND"): (lambda up, ours, spec: ours is None, "spec.elasticPolicy.rdzvBackend"),
    ("PyTorchJob", "PET_MAX_RESTARTS"): (lambda up, ours, spec: ours is None, "spec.elasticPolicy.maxRestarts"),
    # a command that starts no launcher is one process whatever Trainer counted (kuberl's WORLD_SIZE counts it so)
    ("TrainJob", "PET_NPROC_PER_NODE"): (lambda up, ours, spec: ours == "1" and "procsPerWorker" not in spec,
                                         "spec.trainer.numProcPerNode"),
}

# (fixture, convert's extra arguments, the upstream env model, or the refused field and words of its message)
CASES = [
    ("training-operator/simple.yaml", [], training_operator_env),
    ("training-operator/cpu-demo_demo.yaml", [], training_operator_env),
    ("training-operator/elastic_echo_echo.yaml", [], training_operator_env),
    ("training-operator/elastic_imagenet_imagenet.yaml", [], training_operator_env),
    ("training-operator/mnist_v1_pytorch_job_mnist_gloo.yaml", [], training_operator_env),
    ("training-operator/mnist_v1_pytorch_job_mnist_nccl.yaml", [], training_operator_env),
    ("training-operator/mnist_v1_pytorch_job_mnist_mpi.yaml", [], training_operator_env),
    ("training-operator/deepspeed-demo_pytorch_deepspeed_demo.yaml", [], training_operator_env),
    ("kueue/sample-pytorchjob.yaml", [], training_operator_env),
    ("trainer/02-runtime-patches.yaml", ["--image", "registry.example.com/kuberl/torch:2.13-cpu"], trainer_env),
    ("trainer/03-kueue-integration.yaml", [], trainer_env),
    ("trainer/04-volcano-integration.yaml", [], trainer_env),
    ("trainer/05-multi-step.yaml", [], trainer_env),
    ("trainer/migration-guide_trainjob.yaml", [], trainer_env),
    ("trainer/runtime_torch_distributed.yaml+trainer/01-multi-node.yaml", [], trainer_env),
    ("jobset/pytorch_cnn-mnist.yaml", [], jobset_env),
    ("jobset/pytorch_resnet-cifar10.yaml", [], jobset_env),
    ("jobset/pytorch_gpu-training.yaml", [], jobset_env),
    ("jobset/simple_ttl-after-finished.yaml", [], jobset_env),
    ("kueue/sample-jobset-tas-required.yaml", [], jobset_env),
]
REFUSED = [
    # no command: the image's ENTRYPOINT ran, which kuberl's container would replace with its own trainer
    ("training-operator/smoke-dist_pytorch_job_sendrecv.yaml", [],
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command", "ENTRYPOINT"),
    ("training-operator/elastic_etcd.yaml", [], None, "no PyTorchJob, TrainJob or JobSet document"),
    ("trainer/runtime_torch_distributed.yaml", [], None, "no PyTorchJob, TrainJob or JobSet document"),
    # the chart's copy of that runtime is a Helm template: YAML cannot read it, and the error said only where
    ("trainer/chart_torch-distributed.yaml", [], None, ("line 9, column 1: could not find expected ':' (a Helm or Jinja"
     " template's {{ }}: render it first")),
    ("trainer/01-multi-node.yaml", [], "spec.trainer.image", "--image"),
    ("trainer/01-multi-node.yaml", ["--image", "registry.example.com/kuberl/torch:2.13-cpu"], "spec.trainer.numProcPerNode",
     "--procs-per-worker"),
    ("jobset/simple_paralleljobs.yaml", [], "spec.replicatedJobs", "2 replicated Jobs"),
    # LAMMPS under Flux: Trainer's flux runtime wraps the command in flux run, which kuberl's pods do not do
    ("trainer/flux_lammps-train-job.yaml", [], "spec.runtimeRef.name", "Kubeflow Trainer's flux runtime"),
    ("kueue/sample-jobset.yaml", [], "metadata.generateName", "write metadata.name"),
]


def fixture_file(tmp_path: Path, names: str) -> Path:
    """The fixture, or several in one file (a runtime beside its TrainJob, as `kubectl get -o yaml` gives it)."""
    parts = [(PEERS / n).read_text() for n in names.split("+")]
    if len(parts) == 1:
        return PEERS / names
    path = tmp_path / "together.yaml"
    path.write_text("\n---\n".join(parts))
    return path


def convert(capsys, path: Path, args: list[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(["convert", *args, str(path)])
        said = ""
    except SystemExit as e:  # a file that cannot be read: Python prints the message and exits 1
        code, said = (1, e.code) if isinstance(e.code, str) else (e.code, "")
    out, err = capsys.readouterr()
    err += said
    assert "Traceback" not in out + err
    return code, out, err


def test_every_fixture_names_the_upstream_file_whose_shape_it_takes():
    files = sorted(PEERS.rglob("*.yaml"))
    assert len(files) >= 20
    for path in files:
        header = path.read_text().splitlines()[0]
        assert re.fullmatch(r"# kuberl's own manifest in the shape of [\w.-]+/[\w.-]+'s \S+ \(written for these tests, not copied\)",
                            header), path
    listed = {n for case in CASES + REFUSED for n in case[0].split("+")}
    assert listed == {str(p.relative_to(PEERS)) for p in files}


@pytest.mark.parametrize(("names", "args", "upstream"), CASES, ids=[c[0] for c in CASES])
def test_an_upstream_example_converts_to_a_job_whose_pods_get_the_upstream_torch_env(tmp_path, capsys, names, args, upstream):
    path = fixture_file(tmp_path, names)
    code, out, err = convert(capsys, path, args)
    assert code == 0, err
    (job,) = load_documents(out)
    noted = {m[1] for m in re.finditer(r"^\S+: \S+ '[^']+': (\S+?):? ", err, re.MULTILINE)}
    # the CRD's schema, as the API server applies it, and the operator's own validation
    schema = CustomSchema(CRD)
    assert schema.prepare(job) == [] and schema.validate(job, None) == []
    spec = validate_job(job)
    (tmp_path / "converted.yaml").write_text(out)
    assert cli.main(["validate", str(tmp_path / "converted.yaml")]) == 0, capsys.readouterr()  # and the Pod Security check
    capsys.readouterr()
    namespace = job["metadata"].get("namespace", "default")
    pods = render_pods(job, namespace, PLACEHOLDER_UID, range(spec.workers))
    for pod in pods[:2] + pods[-1:]:
        kubernetes_validate.validate(pod, "1.32", strict=True)
    docs = load_documents(path.read_text())
    source = next(d for d in docs if d["kind"] in ("PyTorchJob", "TrainJob", "JobSet"))
    kind = source["kind"]
    expected = upstream(source, next((d for d in docs if d["kind"].endswith("TrainingRuntime")), None)) \
        if upstream is trainer_env else upstream(source)
    assert len(expected) == spec.workers == len(pods)
    for rank, (theirs, pod) in enumerate(zip(expected, pods, strict=True)):
        ours = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        for name in (n for n in TORCH_NAMES if n in theirs):
            up, mine = theirs[name], ours.get(name)
            if name.endswith("_ADDR") or name == "PET_RDZV_ENDPOINT":  # the pod it names, by kuberl's DNS name
                at = upstream_host_rank(up, kind, source["metadata"]["name"])
                assert mine is not None and mine.split(":")[0] == pod_dns_name(job["metadata"]["name"], namespace, at), (rank, name, mine)
                if ":" in up:
                    assert port_of(mine) == str(spec.rendezvous.port)
            elif name == "JOB_COMPLETION_INDEX" and mine is None:  # a fieldRef to the pod's rank label
                assert pod["metadata"]["labels"]["kuberl.dev/rank"] == up
            elif mine != up:
                allowed, said = ALLOWED.get((kind, name), (None, None))
                assert allowed and allowed(up, mine, job["spec"] | {"rendezvous": {"port": spec.rendezvous.port}}), \
                    f"rank {rank}: {name}: upstream {up!r}, kuberl {mine!r}"
                assert said is None or said in noted, (name, said, err)


@pytest.mark.parametrize(("names", "args", "field", "words"), REFUSED, ids=[f"{c[0]}{' '.join(c[1])}" for c in REFUSED])
def test_an_upstream_example_kuberl_cannot_run_is_refused_naming_the_field(tmp_path, capsys, names, args, field, words):
    code, out, err = convert(capsys, fixture_file(tmp_path, names), args)
    assert (code, out) == (1, "")
    assert words in err
    if field:
        assert f"\n  {field}: " in err, err


def test_a_jobsets_torchrun_without_nnodes_is_told_its_pods_now_form_one_world(capsys):
    """A JobSet in the shape of JobSet's resnet-cifar10 runs `torchrun --nproc_per_node=1 --master_addr=... x.py` on 4
    pods: no --nnodes
    and no PET_NNODES (JobSet sets none), so torchrun took its default, 1 (torch/distributed/run.py), on every pod;
    kuberl's PET_NNODES=4 and PET_NODE_RANK join them, which convert said nothing of. cnn-mnist's --nnodes=4 needs no word."""
    code, _, err = convert(capsys, PEERS / "jobset" / "pytorch_resnet-cifar10.yaml", [])
    assert code == 0
    assert ("spec.replicatedJobs[0].template.spec.template.spec.containers[0].command: torchrun's --nnodes unset: changed,"
            " under the JobSet it took its default, 1, so each of the 4 pods ran a world of its own") in err, err
    code, _, err = convert(capsys, PEERS / "jobset" / "pytorch_cnn-mnist.yaml", [])
    assert code == 0 and "--nnodes" not in err.replace("--nnodes=4", "")


def test_an_image_left_as_a_readmes_placeholder_is_said_to_be_one(capsys):
    """A JobSet in the shape of JobSet's gpu-training example names its image <REGISTRY>/<TEAM>/<NAME>:latest, for the reader
    to fill in: no image reference holds '<', so every pod would fail InvalidImageName. convert carried it silently."""
    code, _, err = convert(capsys, PEERS / "jobset" / "pytorch_gpu-training.yaml", [])
    assert code == 0
    assert ("spec.replicatedJobs[0].template.spec.template.spec.containers[0].image: '<REGISTRY>/<TEAM>/kr-gpu-fit:latest'"
            " is a template's blank") in err, err
    code, _, err = convert(capsys, PEERS / "jobset" / "pytorch_cnn-mnist.yaml", [])
    assert code == 0 and "blank" not in err


@pytest.mark.parametrize("name", sorted(str(p.relative_to(PEERS)) for p in PEERS.rglob("*.yaml")
                                         if not p.name.startswith("chart_")))  # a Helm template: no YAML to put junk in
def test_any_value_anywhere_in_an_upstream_example_converts_or_is_refused(name):
    """Each job document of the fixture, and each Trainer runtime beside a TrainJob, with every JSON type put at
    every one of its fields in turn: a job, or a refusal whose every problem names a field; never a traceback."""
    docs = load_documents((PEERS / name).read_text())
    runtimes = [d for d in docs if str(d.get("kind")).endswith("TrainingRuntime")]
    for doc in docs:
        if doc["kind"] == "TrainJob":
            def with_runtimes(job, runtimes=runtimes):
                return convert_trainjob(job, image="registry.example.com/train:1", runtimes=runtimes)
            assert_any_junk_anywhere_is_converted_or_refused(doc, with_runtimes)
            for runtime in runtimes:
                def beside(junk_runtime, job=doc):
                    return convert_trainjob(job, runtimes=[junk_runtime])
                assert_any_junk_anywhere_is_converted_or_refused(runtime, beside)
        elif doc["kind"] in ("PyTorchJob", "JobSet"):
            assert_any_junk_anywhere_is_converted_or_refused(doc, convert_pytorchjob if doc["kind"] == "PyTorchJob" else convert_jobset)


def test_a_trainjob_command_with_no_launcher_is_told_it_now_gets_world_size_and_rank(capsys):
    """Trainer's migration guide turns a PyTorchJob into a TrainJob of 2 nodes running a plain `python3 fit.py`,
    which (as such scripts do) calls init_process_group only when WORLD_SIZE > 1. Trainer's torch
    plugin sets PET_* alone (torch.go), so each node trained alone; kuberl's WORLD_SIZE=2, RANK and MASTER_ADDR join
    them, which convert said nothing of. A torchrun command, which sets them per child under both, is not told."""
    code, _, err = convert(capsys, PEERS / "trainer" / "migration-guide_trainjob.yaml", [])
    assert code == 0
    assert ("spec.trainer.command: starts no torch launcher: changed, Trainer gave its pods only the PET_* names" in err
            and "now joins the 2 pods in one group" in err), err
    code, _, err = convert(capsys, PEERS / "trainer" / "02-runtime-patches.yaml", ["--image", "registry.example.com/kuberl/torch:2.13"])
    assert code == 0 and "starts no torch launcher" not in err


def test_a_jobset_command_with_no_launcher_and_no_rank_of_its_own_is_told_its_pods_now_join(capsys):
    """A JobSet in the shape of JobSet's ttl-after-finished runs `sleep 45s` on 4 Indexed pods whose template writes no WORLD_SIZE or RANK:
    JobSet sets none, so a script there that read them ran alone in each pod; kuberl's env joins the 4. cnn-mnist
    writes its own RANK and starts torchrun: not told."""
    code, _, err = convert(capsys, PEERS / "jobset" / "simple_ttl-after-finished.yaml", [])
    assert code == 0
    assert ("spec.replicatedJobs[0].template.spec.template.spec.containers[0].command: starts no torch launcher: changed,"
            " the JobSet's pods had no WORLD_SIZE, RANK or MASTER_ADDR") in err and "now joins the 4 pods" in err, err
    code, _, err = convert(capsys, PEERS / "jobset" / "pytorch_cnn-mnist.yaml", [])
    assert code == 0 and "starts no torch launcher" not in err
