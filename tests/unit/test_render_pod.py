"""The environment contract and the pod details, rank by rank; spec.template merging."""

import copy
import json
import re

import pytest
from kuberl.core import contract, jobstatus, names
from kuberl.core.crd import crd
from kuberl.core.render import (
    CONFIG_PATH,
    Job,
    as_job,
    merge_patch,
    merge_template,
    networkpolicy_patch,
    pod_environment,
    pod_field_path,
    render_configmap,
    render_job,
    render_networkpolicy,
    render_pod,
    render_service,
    scheduler_name,
)
from kuberl.core.rules import defaulted, parse_spec, validate_job
from kuberl.core.trainerconfig import load
from kuberl.core.validation import InvalidJob

from tests.support import patching
from tests.support.jobs import make_job as job_builder

NAMESPACE = "team-rl"
UID = "0f0e0d0c-1111-2222-3333-444455556666"


def make_job(name="cartpole", **spec):
    """The one builder's job (env id alone, 10000 timesteps, 3 workers); `spec` fields set whole."""
    return job_builder(name).env("CartPole-v1").with_spec(totalTimesteps=10000).workers(3).replace(**spec).obj()


def env_of(pod, container=names.TRAINER_CONTAINER):
    c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def trainer(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == names.TRAINER_CONTAINER)


def pods(job, **kwargs):
    return [o for o in render_job(job, NAMESPACE, UID, **kwargs) if o["kind"] == "Pod"]


# --- environment contract -----------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_one_process_per_pod_environment(rank):
    env = env_of(pods(make_job())[rank])
    assert env == {
        "MASTER_ADDR": "cartpole-0.cartpole.team-rl.svc",
        "MASTER_PORT": "29500",
        "NNODES": "3",
        "NODE_RANK": str(rank),
        "NPROC_PER_NODE": "1",
        "WORLD_SIZE": "3",
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "PET_NNODES": "3",
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": "1",
        "PET_MASTER_ADDR": "cartpole-0.cartpole.team-rl.svc",
        "PET_MASTER_PORT": "29500",
        "PET_RDZV_ENDPOINT": "cartpole-0.cartpole.team-rl.svc:29500",
        "PET_RDZV_ID": "team-rl.cartpole.0",
        "PET_RDZV_CONF": f"is_host={'true' if rank == 0 else 'false'},read_timeout=600",
        "PET_LOCAL_ADDR": f"cartpole-{rank}.cartpole.team-rl.svc",
        "KUBERL_JOB": "cartpole",
        "KUBERL_RESTART": "0",
        "KUBERL_CONFIG": "/etc/kuberl/config.json",
        "KUBERL_METRICS_ADDR": "0.0.0.0",
        "OMP_NUM_THREADS": {"resourceFieldRef": {"containerName": "trainer", "resource": "limits.cpu", "divisor": "1"}},
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "30",
        "PYTHONUNBUFFERED": "1",
    }


def test_several_processes_per_pod_set_world_size_and_rank_as_pytorchjob_does():
    """Kubeflow's envvar.go: WORLD_SIZE = replicas x nprocPerNode and RANK = the
    pod's index in every pod (a script that spawns its own processes computes
    RANK * nproc + local_rank); LOCAL_RANK is left to torch's launcher."""
    env = env_of(pods(make_job(procsPerWorker=4, rendezvous={"port": 23456}))[2])
    assert (env["WORLD_SIZE"], env["RANK"]) == ("12", "2")
    assert "LOCAL_RANK" not in env
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"], env["MASTER_PORT"]) == ("3", "2", "4", "23456")
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"], env["PET_MASTER_PORT"]) == ("3", "2", "4", "23456")


def test_torchs_launcher_waits_the_pods_grace_period_for_its_children_after_a_sigterm():
    """torchrun passes the kubelet's SIGTERM on to its children, then kills them after its
    shutdown timeout: 30 s by default, while a pod's trainers stop at an update boundary and
    checkpoint within terminationGracePeriodSeconds (120 in the 4-GPU examples)."""
    env = env_of(pods(make_job(procsPerWorker=4, runPolicy={"terminationGracePeriodSeconds": 120}))[0])
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "120"
    assert torchrun_config(env).shutdown_timeout == 120  # what torch's own launcher reads from it
    assert torchrun_config({}).shutdown_timeout == 30


def torchrun_config(env: dict):
    """The LaunchConfig torchrun builds from a pod's environment alone (its PET_* flags)."""
    import os
    from unittest import mock

    from torch.distributed.run import config_from_args, get_args_parser
    with mock.patch.dict(os.environ, {k: v for k, v in env.items() if isinstance(v, str)}, clear=True):
        return config_from_args(get_args_parser().parse_args(["--rdzv-backend=c10d", "script.py"]))[0]


def test_torchrun_meets_at_worker_0_whichever_rendezvous_backend_the_script_picks():
    """torch's static backend takes PET_RDZV_ENDPOINT over --master-addr/--master-port
    (torch/distributed/run.py, get_rdzv_endpoint), so it must be MASTER_ADDR:MASTER_PORT;
    c10d hosts its store where is_host is true (c10d_rendezvous_backend._create_tcp_store):
    worker 0 only. The backend stays the script's choice."""
    rendered = pods(make_job(procsPerWorker=2), restart=3)
    envs = [env_of(p) for p in rendered]
    for env in envs:
        assert env["PET_RDZV_ENDPOINT"] == f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        assert env["PET_RDZV_ID"] == "team-rl.cartpole.3"
        assert "PET_RDZV_BACKEND" not in env
    assert [e["PET_RDZV_CONF"] for e in envs] == [f"is_host={h},read_timeout=600" for h in ("true", "false", "false")]
    # torchrun reads it as its --rdzv-conf: the host flag and a store timeout longer than c10d's 60 s default
    configs = torchrun_config(envs[1]).rdzv_configs
    assert (configs["is_host"], configs["read_timeout"]) == ("false", "600"), configs
    slow = env_of(pods(make_job(runPolicy={"startupTimeoutSeconds": 1800}))[1])
    assert slow["PET_RDZV_CONF"] == "is_host=false,read_timeout=1800"
    # torchrun makes a timedelta of it: the longest startup timeout (30 days) is capped at a day
    huge = env_of(pods(make_job(runPolicy={"startupTimeoutSeconds": 30 * 24 * 3600}))[1])
    assert huge["PET_RDZV_CONF"] == "is_host=false,read_timeout=86400"
    assert torchrun_config(huge).rdzv_configs["read_timeout"] == "86400"
    assert envs[0]["PET_LOCAL_ADDR"] == envs[0]["MASTER_ADDR"]  # c10d's workers meet where static ones do
    for pod, env in zip(rendered, envs, strict=True):
        assert env["PET_LOCAL_ADDR"] == f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.team-rl.svc"
    assert env_of(pods(make_job(), restart=4)[0])["PET_RDZV_ID"] != envs[0]["PET_RDZV_ID"]


def test_every_identity_name_rendered_is_reserved_and_tuning_names_are_not():
    env = {}
    for procs in (1, 2):
        for target in ("cluster", "local"):
            env.update(env_of(pods(make_job(procsPerWorker=procs), target=target)[1]))
    tuning = {"OMP_NUM_THREADS", "PYTHONUNBUFFERED", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}
    identity = set(env) - tuning
    assert identity <= contract.RESERVED_ENV_NAMES
    assert all(contract.is_reserved_env(n) for n in identity)
    assert not any(contract.is_reserved_env(n) for n in tuning)
    assert contract.is_reserved_env("KUBERL_ANYTHING") and not contract.is_reserved_env("PET_MAX_RESTARTS")


def test_contract_names_come_from_the_contract_module():
    env = env_of(pods(make_job())[0])
    for name in (contract.ENV_MASTER_ADDR, contract.ENV_MASTER_PORT, contract.ENV_NNODES, contract.ENV_NODE_RANK,
                 contract.ENV_NPROC_PER_NODE, contract.ENV_WORLD_SIZE, contract.ENV_RANK, contract.ENV_LOCAL_RANK,
                 contract.ENV_JOB, contract.ENV_RESTART, contract.ENV_METRICS_ADDR, contract.ENV_CONFIG):
        assert name in env


def test_restart_generation_is_in_env_and_label():
    pod = pods(make_job(), restart=7)[1]
    assert env_of(pod)["KUBERL_RESTART"] == "7"
    assert pod["metadata"]["labels"][names.LABEL_RESTART] == "7"
    assert pod["metadata"]["labels"][names.LABEL_RANK] == "1"
    assert pod["metadata"]["labels"][names.LABEL_JOB] == "cartpole"
    assert pod["metadata"]["labels"][names.LABEL_MANAGED_BY] == "kuberl"


def test_local_target_binds_metrics_to_the_pods_own_address():
    env = env_of(pods(make_job(), target="local")[0])
    assert env["KUBERL_METRICS_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["MASTER_ADDR"] == "cartpole-0.cartpole.team-rl.svc"


def test_pod_environment_is_the_function_render_uses():
    job = as_job(make_job(procsPerWorker=2))
    for rank in range(3):
        pod = render_pod(job, NAMESPACE, UID, rank, restart=2)
        assert trainer(pod)["env"] == pod_environment("cartpole", NAMESPACE, job.spec, rank, 2, "cluster")


def test_master_addr_is_rank_0s_dns_name_and_the_service_selects_rank_0():
    job = make_job()
    rank0 = pods(job)[0]
    service = render_service(job, NAMESPACE)
    spec = rank0["spec"]
    assert env_of(rank0)["MASTER_ADDR"] == f"{spec['hostname']}.{spec['subdomain']}.{NAMESPACE}.svc"
    assert spec["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= rank0["metadata"]["labels"].items()
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in service["spec"]["ports"]] == [29500]


# --- command ------------------------------------------------------------------


def test_one_process_runs_the_trainer_directly():
    pod = pods(make_job())[0]
    assert trainer(pod)["command"] == ["python", "-m", "kuberl_trainer"]
    assert env_of(pod)[contract.ENV_CONFIG] == CONFIG_PATH


def expand(arg, env):
    """Kubernetes' $(VAR) expansion; an undefined reference stays as written."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def test_several_processes_go_through_torchrun_with_static_rendezvous():
    pod = pods(make_job(procsPerWorker=4))[1]
    env = env_of(pod)
    command = [expand(a, env) for a in trainer(pod)["command"]]
    assert not any("$(" in a for a in command), "every $(VAR) is defined in the container env"
    assert command[:3] == ["python", "-m", "kuberl_trainer.launch"]  # torch.distributed.run, its store on loopback locally
    torchrun = pytest.importorskip("torch.distributed.run")
    args = torchrun.get_args_parser().parse_args(command[3:])
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("3", 1, "4")
    assert (args.master_addr, args.master_port) == ("cartpole-0.cartpole.team-rl.svc", 29500)
    assert (args.rdzv_backend, args.max_restarts, args.module) == ("static", 0, True)
    assert (args.training_script, args.training_script_args) == ("kuberl_trainer", [])


# --- pod details --------------------------------------------------------------


def test_one_metrics_port_per_local_rank():
    ports = trainer(pods(make_job(procsPerWorker=4, metrics={"port": 9100}))[0])["ports"]
    assert ports == [{"name": f"metrics-{i}", "containerPort": 9100 + i, "protocol": "TCP"} for i in range(4)]


def test_checkpoint_volume_on_rank_0_only():
    for rank, pod in enumerate(pods(make_job())):
        claims = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
        mounts = [m for m in trainer(pod)["volumeMounts"] if m["mountPath"] == names.CHECKPOINT_MOUNT_DIR]
        if rank == 0:
            assert claims == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "cartpole-checkpoints"}}]
            assert len(mounts) == 1
        else:
            assert claims == [] and mounts == []


def test_config_shm_and_tmp_volumes():
    pod = pods(make_job(shmSize="4Gi"))[1]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"] == {"name": "config", "configMap": {"name": "cartpole-config"}}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    assert volumes["tmp"]["emptyDir"] == {}
    mounts = {m["mountPath"]: m["name"] for m in trainer(pod)["volumeMounts"]}
    assert mounts == {"/etc/kuberl": "config", "/dev/shm": "dshm", "/tmp": "tmp"}


def test_default_resources_per_process():
    assert trainer(pods(make_job(procsPerWorker=3))[0])["resources"] == {
        "requests": {"cpu": "3", "memory": "6Gi"},
        "limits": {"cpu": "3"},
    }


def test_user_resources_merge_over_defaults_and_a_cpu_request_sets_the_cpu_limit():
    resources = trainer(pods(make_job(resources={"requests": {"cpu": "4"}, "limits": {"memory": "3Gi"}}))[0])["resources"]
    assert resources == {"requests": {"cpu": "4"}, "limits": {"cpu": "4", "memory": "3Gi"}}


def test_gpus_only_from_gpus_per_worker():
    pod = pods(make_job(gpusPerWorker=2))[0]
    assert trainer(pod)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert env_of(pod)["NPROC_PER_NODE"] == "2"
    assert "nvidia" not in json.dumps(pods(make_job())[0]).lower()


def test_scheduling_fields_are_passed_through():
    tolerations = [{"key": "rl", "operator": "Exists"}]
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod = pods(make_job(nodeSelector={"pool": "rl"}, tolerations=tolerations, affinity=affinity,
                        priorityClassName="high", schedulerName="my-scheduler", labels={"team": "a"}))[0]
    spec = pod["spec"]
    assert (spec["nodeSelector"], spec["tolerations"], spec["affinity"]) == ({"pool": "rl"}, tolerations, affinity)
    assert (spec["priorityClassName"], spec["schedulerName"]) == ("high", "my-scheduler")
    assert pod["metadata"]["labels"]["team"] == "a"


def test_pod_runs_locked_down():
    pod = pods(make_job(runPolicy={"terminationGracePeriodSeconds": 90}))[0]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 90
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = trainer(pod)
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_image_defaults_to_the_operators_and_the_spec_wins():
    assert trainer(pods(make_job(), default_image="reg/trainer:9")[0])["image"] == "reg/trainer:9"
    assert trainer(pods(make_job(image="mine:1", imagePullPolicy="Always"))[0])["image"] == "mine:1"
    assert trainer(pods(make_job(image="mine:1", imagePullPolicy="Always"))[0])["imagePullPolicy"] == "Always"


def test_kueue_pod_group_labels_and_annotations():
    pod = pods(make_job(queueName="team-a"))[2]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "cartpole-gang"
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
    assert not any(k.startswith("kueue") for k in pods(make_job())[0]["metadata"]["labels"])


def test_volcano_and_coscheduling_get_a_podgroup_and_the_group_on_each_pod():
    objects = render_job(make_job(schedulerName="volcano"), NAMESPACE, UID)
    group = next(o for o in objects if o["kind"] == "PodGroup")
    assert (group["apiVersion"], group["spec"]["minMember"]) == ("scheduling.volcano.sh/v1beta1", 3)
    for pod in (o for o in objects if o["kind"] == "Pod"):
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
    objects = render_job(make_job(schedulerName="scheduler-plugins-scheduler"), NAMESPACE, UID)
    group = next(o for o in objects if o["kind"] == "PodGroup")
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    for pod in (o for o in objects if o["kind"] == "Pod"):
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == group["metadata"]["name"]
    assert "PodGroup" not in [o["kind"] for o in render_job(make_job(), NAMESPACE, UID)]


SCHEDULER_SOURCES = {  # where a job may name its pods' scheduler, and the scheduler its pods then get
    "spec": ({"schedulerName": "volcano"}, "volcano"),
    "template": ({"template": {"spec": {"schedulerName": "volcano"}}}, "volcano"),
    "template-over-spec": ({"schedulerName": "volcano", "template": {"spec": {"schedulerName": "scheduler-plugins-scheduler"}}},
                           "scheduler-plugins-scheduler"),
    "template-back-to-default": ({"schedulerName": "volcano", "template": {"spec": {"schedulerName": "default-scheduler"}}},
                                 "default-scheduler"),
    "template-empties-it": ({"schedulerName": "volcano", "template": {"spec": {"schedulerName": ""}}}, None),
    "none": ({}, None),
}
GROUP_OF_SCHEDULER = {"volcano": ("scheduling.volcano.sh/v1beta1", "annotations", "scheduling.k8s.io/group-name"),
                      "scheduler-plugins-scheduler": ("scheduling.x-k8s.io/v1alpha1", "labels", "scheduling.x-k8s.io/pod-group")}


@pytest.mark.parametrize("source", SCHEDULER_SOURCES)
def test_the_gang_is_grouped_for_the_scheduler_its_pods_get_wherever_the_job_names_it(source):
    """Volcano and coscheduling gang-schedule only pods that name their PodGroup: a pod that goes to Volcano without
    one gets a PodGroup of its own (minMember 1), so part of a gang can start and hold its nodes while the rest
    waits, and DDP's rendezvous never completes. The pods' scheduler (template over spec) and the group's kind come
    from one function; a group for a scheduler the pods do not go to would wait for ever."""
    spec, expected = SCHEDULER_SOURCES[source]
    objects = render_job(make_job(**copy.deepcopy(spec)), NAMESPACE, UID)
    pods = [o for o in objects if o["kind"] == "Pod"]
    groups = [o for o in objects if o["kind"] == "PodGroup"]
    assert {p["spec"].get("schedulerName") for p in pods} == {expected}
    if expected not in GROUP_OF_SCHEDULER:
        assert groups == [] and not any(key in p["metadata"][where] for p in pods for _, where, key in GROUP_OF_SCHEDULER.values())
        return
    api_version, where, key = GROUP_OF_SCHEDULER[expected]
    assert [g["apiVersion"] for g in groups] == [api_version]
    assert {p["metadata"][where].get(key) for p in pods} == {groups[0]["metadata"]["name"]}


def test_a_podgroup_the_cluster_does_not_serve_names_where_the_job_names_its_scheduler():
    job = make_job(template={"spec": {"schedulerName": "volcano"}})
    group = next(o for o in render_job(job, NAMESPACE, UID) if o["kind"] == "PodGroup")
    spec = validate_job(job)
    refusal = jobstatus.not_served(404, jobstatus.NOT_SERVED, group, scheduler_name(spec), pod_field_path(spec, "schedulerName"))
    assert "spec.template.spec.schedulerName 'volcano' needs it" in refusal.message


def test_the_coscheduling_podgroups_timeout_fits_its_int32_at_the_largest_startup_timeout_the_crd_takes():
    """scheduler-plugins' PodGroupSpec.ScheduleTimeoutSeconds is an *int32 (apis/scheduling/v1alpha1/types.go). The API
    server checks no int32 range in a CRD's schema, so a PodGroup of 2147483648 is stored, and then every client of
    the typed PodGroup API (the coscheduling plugin's informer) fails to decode the whole list: one tenant's job
    stalled the gang scheduling of all of them. startupTimeoutSeconds, which it carries, is bounded below that."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    largest = schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]["startupTimeoutSeconds"].get("maximum")
    assert largest is not None and largest <= 2**31 - 1
    job = make_job(schedulerName="scheduler-plugins-scheduler", runPolicy={"startupTimeoutSeconds": largest})
    group = next(o for o in render_job(job, NAMESPACE, UID) if o["kind"] == "PodGroup")
    assert 0 < group["spec"]["scheduleTimeoutSeconds"] <= 2**31 - 1
    with pytest.raises(InvalidJob, match=r"spec\.runPolicy\.startupTimeoutSeconds"):
        validate_job(make_job(schedulerName="scheduler-plugins-scheduler", runPolicy={"startupTimeoutSeconds": 2**31}))


def test_volcanos_podgroup_takes_its_queue_from_the_pods_queue_annotation():
    """A PodGroup's spec.queue is where Volcano queues the gang (its pods' own annotation is read only for pods
    without a group); without one the gang lands in Volcano's "default" queue, outside the team's quota."""
    template = {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "team-a"}}}
    objects = render_job(make_job(schedulerName="volcano", template=template), NAMESPACE, UID)
    group = next(o for o in objects if o["kind"] == "PodGroup")
    assert group["spec"]["queue"] == "team-a"
    assert all(o["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-a" for o in objects if o["kind"] == "Pod")
    group = next(o for o in render_job(make_job(schedulerName="volcano"), NAMESPACE, UID) if o["kind"] == "PodGroup")
    assert "queue" not in group["spec"]


def test_networkpolicy_lets_the_gang_talk_and_monitoring_scrape():
    objects = render_job(make_job(procsPerWorker=2), NAMESPACE, UID)
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    gang, metrics = policy["spec"]["ingress"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {names.LABEL_JOB: "cartpole"}}
    assert gang == {"from": [{"podSelector": {"matchLabels": {names.LABEL_JOB: "cartpole"}}}]}  # every port
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberl-system"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},  # Prometheus' pods, not their neighbours
    ]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9090, "endPort": 9091}]


def test_networkpolicy_admits_the_operator_and_prometheus_where_they_run_and_no_one_else():
    objects = render_job(make_job(), NAMESPACE, UID, operator_namespace="ops", monitoring_namespace="observability",
                         monitoring_pod_labels={"app": "vmagent"})
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert peers == [
        {"podSelector": {"matchLabels": {names.LABEL_JOB: "cartpole"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}, "podSelector": {"matchLabels": {"app": "vmagent"}}},
    ]
    anyone = render_networkpolicy(make_job(), NAMESPACE, operator_namespace="ops", monitoring_namespace="observability",
                                  monitoring_pod_labels={})
    assert anyone["spec"]["ingress"][1]["from"][1] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    # Prometheus in the operator's namespace: that whole namespace is admitted already, one peer
    same = render_networkpolicy(make_job(), NAMESPACE, operator_namespace="ops", monitoring_namespace="ops")
    assert same["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}]
    # of the operator's namespace its own pods only: Prometheus there is then a peer of its own
    own = render_networkpolicy(make_job(), NAMESPACE, operator_namespace="ops", monitoring_namespace="ops",
                               operator_pod_labels={"app.kubernetes.io/component": "operator"})
    assert own["spec"]["ingress"][1]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
    ]
    alone = render_job(make_job(), NAMESPACE, UID, operator_namespace="ops", monitoring_namespace="")
    policy = next(o for o in alone if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}]


def test_an_existing_networkpolicy_is_patched_to_the_desired_form_and_a_right_one_is_left_alone():
    job = make_job()
    old = render_networkpolicy(job, NAMESPACE)  # an older operator's defaults
    old["metadata"]["resourceVersion"] = "7"
    old["spec"]["ingress"].append({"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})  # a hand edit
    desired = render_networkpolicy(job, NAMESPACE, operator_namespace="ops", monitoring_namespace="observability")
    patch = networkpolicy_patch(old, desired)
    assert patch == {"spec": {"ingress": desired["spec"]["ingress"]}}
    assert networkpolicy_patch(desired, desired) is None
    assert networkpolicy_patch(old, old) is None
    assert patching.merge_patch(old, patch)["spec"] == desired["spec"]


def test_merge_patch_removes_keys_the_desired_form_lacks():
    existing = {"podSelector": {"matchLabels": {"a": "1", "stray": "x"}}, "policyTypes": ["Ingress", "Egress"]}
    desired = {"podSelector": {"matchLabels": {"a": "1"}}, "policyTypes": ["Ingress"]}
    patch = merge_patch(existing, desired)
    assert patch == {"podSelector": {"matchLabels": {"stray": None}}, "policyTypes": ["Ingress"]}
    assert patching.merge_patch(existing, patch) == desired


# --- frozen config ------------------------------------------------------------


def test_configmap_is_immutable_and_loads_back_to_the_spec():
    job = make_job(ppo={"learningRate": 0.001})
    cm = render_configmap(job, NAMESPACE, UID)
    assert cm["immutable"] is True and cm["metadata"]["name"] == "cartpole-config"
    config = load(json.loads(cm["data"][names.CONFIG_FILE]))
    assert defaulted(config.spec) == defaulted(parse_spec(job["spec"]))
    assert config.spec.hyperparameters.learning_rate == 0.001
    assert config.checkpoint_dir == f"/checkpoints/cartpole-{UID}"
    pod = pods(job)[0]
    assert pod["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH] == cm["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]


def test_same_spec_same_bytes():
    assert render_job(make_job(), NAMESPACE, UID) == render_job(make_job(), NAMESPACE, UID)


# --- spec.template ------------------------------------------------------------


def test_template_patches_trainer_env_by_name_and_appends_sidecars():
    template = {
        "metadata": {"labels": {"team": "rl", names.LABEL_JOB: "hijack"}, "annotations": {"a": "b"}},
        "spec": {
            "serviceAccountName": "trainer-sa",
            "hostname": "elsewhere",
            "containers": [
                {"name": "trainer", "env": [{"name": "PYTHONUNBUFFERED", "value": "0"}, {"name": "EXTRA", "value": "x"}],
                 "volumeMounts": [{"name": "data", "mountPath": "/tmp"}], "command": ["torchrun", "mine.py"]},
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
        },
    }
    pod = pods(make_job(template=template))[0]
    env = env_of(pod)
    assert env["PYTHONUNBUFFERED"] == "0" and env["EXTRA"] == "x" and env["MASTER_ADDR"].startswith("cartpole-0.")
    names_in_order = [e["name"] for e in trainer(pod)["env"]]
    assert names_in_order[-1] == "EXTRA" and names_in_order.index("PYTHONUNBUFFERED") < names_in_order.index("EXTRA")
    mounts = {m["mountPath"]: m["name"] for m in trainer(pod)["volumeMounts"]}
    assert mounts["/tmp"] == "data" and mounts["/etc/kuberl"] == "config"
    assert trainer(pod)["command"] == ["torchrun", "mine.py"]
    assert trainer(pod)["image"] == "ghcr.io/kuberl/trainer:0.1.0"  # fields the template does not set stay ours
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "sidecar"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"]["sizeLimit"] == "8Gi" and "data" in volumes and "config" in volumes
    assert pod["spec"]["serviceAccountName"] == "trainer-sa"
    assert pod["metadata"]["labels"]["team"] == "rl" and pod["metadata"]["annotations"]["a"] == "b"
    # kuberl's own labels and DNS identity are put back: the Service and MASTER_ADDR depend on them
    assert pod["metadata"]["labels"][names.LABEL_JOB] == "cartpole"
    assert pod["spec"]["hostname"] == "cartpole-0"


def test_template_replaces_other_pod_spec_fields():
    pod = pods(make_job(tolerations=[{"key": "a", "operator": "Exists"}],
                        template={"spec": {"tolerations": [{"key": "b", "operator": "Exists"}], "automountServiceAccountToken": True}}))[0]
    assert pod["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_merge_template_does_not_mutate_either_input():
    pod = pods(make_job())[0]
    template = {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}]},
                                                                          {"name": "side", "image": "i"}],
                                                           "volumes": [{"name": "v", "emptyDir": {}}]}}
    pod_before, template_before = copy.deepcopy(pod), copy.deepcopy(template)
    merged = merge_template(pod, template)
    assert pod == pod_before and template == template_before
    merged["spec"]["containers"][1]["image"] = "changed"
    merged["spec"]["containers"][0]["env"][-1]["value"] = "changed"
    assert template == template_before


def test_builders_do_not_mutate_inputs_or_share_state_between_calls():
    job = make_job(template={"spec": {"containers": [{"name": "side", "image": "i"}]}}, tolerations=[{"key": "a", "operator": "Exists"}])
    before = copy.deepcopy(job)
    parsed = as_job(job)
    first = render_job(parsed, NAMESPACE, UID)
    first[-1]["spec"]["tolerations"].append({"key": "leak"})
    first[-1]["spec"]["containers"][1]["image"] = "leak"
    assert render_job(parsed, NAMESPACE, UID) == render_job(job, NAMESPACE, UID)
    assert job == before
    assert parsed == Job("cartpole", parse_spec(before["spec"]))


def test_rank_outside_the_gang_is_refused():
    with pytest.raises(ValueError):
        render_pod(make_job(), NAMESPACE, UID, 3)


@pytest.mark.parametrize(("trainer", "procs", "has_omp"), [("kuberl", 1, True), ("kuberl", 2, True),
                                                           ("custom", 1, True), ("custom", 2, False)])
def test_omp_num_threads_is_the_cpu_limit_unless_a_custom_command_starts_several_processes(trainer, procs, has_omp):
    """torchrun gives each child OMP_NUM_THREADS=1 only where the pod sets none (torch/distributed/run.py),
    and PyTorchJob sets none: the pod's whole CPU limit in each of a custom command's children
    oversubscribed the pod procs-fold. kuberl's own trainer divides the limit by its local world size."""
    spec = {"procsPerWorker": procs}
    if trainer == "custom":
        spec |= {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["torchrun", "x.py"]}]}}}
    env = env_of(pods(make_job(**spec))[0])
    assert ("OMP_NUM_THREADS" in env) == has_omp
    assert env["PYTHONUNBUFFERED"] == "1"
