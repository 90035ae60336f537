"""Every chart value, set the way a platform team types it (`helm install --set`, whose parser turns
`2` into a number and `{a,b}` into a list), renders objects valid for Kubernetes 1.33 (and for
prometheus-operator's and the chart's own CRDs), and visibly reaches them. A value added to
values.yaml without a row here fails the first test."""

from __future__ import annotations

import json
import subprocess
from functools import cache

import pytest
import yaml
from chart_support import CHART, HELM, validate

MONITORS = "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true"
RULES = f"{MONITORS},monitoring.prometheusRule.enabled=true"
DASHBOARD = "monitoring.dashboard.enabled=true"
AFFINITY_TERM = "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"

# leaf value -> (the --set arguments, a string the rendered objects then hold; None: the value switches something off)
SETS: dict[str, tuple[list[str], str | None]] = {
    "nameOverride": (["nameOverride=trainer-ops"], "name: kuberl-trainer-ops"),
    "fullnameOverride": (["fullnameOverride=rl-operator"], "name: rl-operator"),
    "commonLabels": (["commonLabels.cost-center=research"], '"cost-center": "research"'),
    "operator.image.repository": (["operator.image.repository=registry.example.com/you/operator"], "image: registry.example.com/you/operator:0.1.0"),
    "operator.image.tag": (["operator.image.tag=0.2.0"], "operator:0.2.0"),
    "operator.image.digest": (["operator.image.digest=sha256:" + "a" * 64], "operator@sha256:" + "a" * 64),
    "operator.image.pullPolicy": (["operator.image.pullPolicy=Always"], "imagePullPolicy: Always"),
    "operator.imagePullSecrets": (["operator.imagePullSecrets={regcred}"], "- name: regcred"),
    "operator.replicas": (["operator.replicas=3"], "kind: StatefulSet"),
    "operator.watchNamespaces": (["operator.watchNamespaces={team-a,team-b}"], "namespace: team-b"),
    "operator.logLevel": (["operator.logLevel=debug"], 'value: "debug"'),
    "operator.scrapeIntervalSeconds": (["operator.scrapeIntervalSeconds=30"], "--scrape-interval=30"),
    "operator.scrapeTimeoutSeconds": (["operator.scrapeTimeoutSeconds=1"], "--scrape-timeout=1"),
    "operator.maxConcurrentReconciles": (["operator.maxConcurrentReconciles=8"], "--max-concurrent-reconciles=8"),
    "operator.watchTimeoutSeconds": (["operator.watchTimeoutSeconds=120"], "--watch-timeout=120"),
    "operator.kubeApiQps": (["operator.kubeApiQps=20"], "--kube-api-qps=20"),
    "operator.kubeApiBurst": (["operator.kubeApiBurst=300"], "--kube-api-burst=300"),
    "operator.resources": (["operator.resources.limits.cpu=1", "operator.resources.requests.memory=200Mi"], "memory: 200Mi"),
    "operator.nodeSelector": (["operator.nodeSelector.kubernetes\\.io/os=linux"], '"kubernetes.io/os": "linux"'),
    "operator.tolerations": (["operator.tolerations[0].key=dedicated", "operator.tolerations[0].operator=Exists",
                              "operator.tolerations[0].effect=NoSchedule"], "key: dedicated"),
    "operator.affinity": ([f"{AFFINITY_TERM}.key=kubernetes.io/arch", f"{AFFINITY_TERM}.operator=In", f"{AFFINITY_TERM}.values={{amd64}}"],
                          "key: kubernetes.io/arch"),
    "operator.topologySpreadConstraints": (["operator.topologySpreadConstraints[0].maxSkew=1",
                                            "operator.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                                            "operator.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"],
                                           "topologyKey: topology.kubernetes.io/zone"),
    "operator.priorityClassName": (["operator.priorityClassName=system-cluster-critical"], "priorityClassName: system-cluster-critical"),
    "operator.podAnnotations": (["operator.podAnnotations.example\\.com/team=rl"], '"example.com/team": "rl"'),
    "operator.env": (["operator.env[0].name=HTTPS_PROXY", "operator.env[0].value=http://proxy.example.com:3128"], "name: HTTPS_PROXY"),
    "operator.envFrom": (["operator.envFrom[0].configMapRef.name=operator-extra"], "name: operator-extra"),
    "operator.volumes": (["operator.volumes[0].name=corp-ca", "operator.volumes[0].configMap.name=corp-ca"], "name: corp-ca"),
    "operator.volumeMounts": (["operator.volumes[0].name=corp-ca", "operator.volumes[0].configMap.name=corp-ca",
                               "operator.volumeMounts[0].name=corp-ca", "operator.volumeMounts[0].mountPath=/etc/ssl/corp"],
                              "mountPath: /etc/ssl/corp"),
    "operator.podLabels": (["operator.podLabels.team=rl"], '"team": "rl"'),
    "operator.podSecurityContext": (["operator.podSecurityContext.runAsUser=1000"], "runAsUser: 1000"),
    "operator.securityContext": (["operator.securityContext.runAsUser=1001"], "runAsUser: 1001"),
    "operator.health.port": (["operator.health.port=9090"], "--health-port=9090"),
    "operator.health.path": (["operator.health.path=/livez"], "--health-path=/livez"),
    "operator.peering.name": (["operator.replicas=2", "operator.peering.name=rl-peering"], "--peering=rl-peering"),
    "operator.peering.failoverSeconds": (["operator.replicas=2", "operator.peering.failoverSeconds=30"], "--peering-lifetime=30"),
    "operator.serviceAccount.create": (["operator.serviceAccount.create=false", "operator.serviceAccount.name=kuberl-sa"], "serviceAccountName: kuberl-sa"),
    "operator.serviceAccount.name": (["operator.serviceAccount.name=kuberl-operator-sa"], "name: kuberl-operator-sa"),
    "operator.serviceAccount.annotations": (["operator.serviceAccount.annotations.iam\\.example\\.com/role=kuberl"], '"iam.example.com/role": "kuberl"'),
    "podSecurity": (["podSecurity=restricted"], "--pod-security=restricted"),
    "allowedServiceAccounts": (["allowedServiceAccounts={trainer,default}"], "trainer,default"),
    "forbidPodFields": (["forbidPodFields={nodeName,tolerations}"], "nodeName,tolerations"),
    "trainer.image.repository": (["trainer.image.repository=registry.example.com/you/trainer"], "registry.example.com/you/trainer:0.1.0"),
    "trainer.image.tag": (["trainer.image.tag=0.2.0"], "trainer:0.2.0"),
    "trainer.image.digest": (["trainer.image.digest=sha256:" + "b" * 64], "trainer@sha256:" + "b" * 64),
    "trainer.image.pullPolicy": (["trainer.image.pullPolicy=Always"], 'value: "Always"'),
    "trainer.imagePullSecrets": (["trainer.imagePullSecrets={regcred,mirror}"], "regcred,mirror"),
    "trainer.podDefaults.labels": (["trainer.podDefaults.labels.cost-center=rl"], '\\"cost-center\\":\\"rl\\"'),
    "trainer.podDefaults.annotations": (["trainer.podDefaults.annotations.sidecar\\.istio\\.io/inject=false"], 'sidecar.istio.io/inject\\":\\"false'),
    "trainer.podDefaults.env": (["trainer.podDefaults.env[0].name=NCCL_IB_HCA", "trainer.podDefaults.env[0].value=mlx5_0"], "NCCL_IB_HCA"),
    "trainer.podDefaults.tolerations": (["trainer.podDefaults.tolerations[0].key=nvidia.com/gpu", "trainer.podDefaults.tolerations[0].operator=Exists"],
                                        "nvidia.com/gpu"),
    "trainer.podDefaults.nodeSelector": (["trainer.podDefaults.nodeSelector.pool=gpu"], '\\"pool\\":\\"gpu\\"'),
    "trainer.podDefaults.priorityClassName": (["trainer.podDefaults.priorityClassName=ml-batch"], "ml-batch"),
    "trainer.podDefaults.enforced": (["trainer.podDefaults.enforced[0]=nodeSelector"], '\\"enforced\\":[\\"nodeSelector\\"]'),
    "trainer.resourcesPerProcess.cpu": (["trainer.resourcesPerProcess.cpu=2"], 'value: "2"'),
    "trainer.resourcesPerProcess.memory": (["trainer.resourcesPerProcess.memory=8Gi"], 'value: "8Gi"'),
    "gangScheduling.podGroupApis": (["gangScheduling.podGroupApis={volcano,coscheduling}"], "scheduling.volcano.sh"),
    "networkPolicy.enabled": (["networkPolicy.enabled=false"], None),
    "networkPolicy.extraFrom": (["networkPolicy.extraFrom[0].ipBlock.cidr=10.0.0.0/8"], "cidr: 10.0.0.0/8"),
    "rbac.create": (["rbac.create=false"], None),
    "rbac.userRoles": (["rbac.userRoles=false"], None),
    "metrics.enabled": (["metrics.enabled=false"], None),
    "metrics.port": (["metrics.port=9100"], "--metrics-port=9100"),
    "metrics.service.type": (["metrics.service.type=NodePort"], "type: NodePort"),
    "metrics.service.annotations": (["metrics.service.annotations.example\\.com/scrape=true"], '"example.com/scrape": "true"'),
    "monitoring.prometheusPodLabels": (["monitoring.prometheusPodLabels.app=vmagent"], "--monitoring-pod-labels=app=vmagent,app.kubernetes.io/name=prometheus"),
    "monitoring.prometheusNamespace": (["monitoring.prometheusNamespace=observability"], "--monitoring-namespace=observability"),
    "monitoring.serviceMonitor.enabled": ([MONITORS], "kind: ServiceMonitor"),
    "monitoring.serviceMonitor.interval": ([MONITORS, "monitoring.serviceMonitor.interval=1m"], "interval: 1m"),
    "monitoring.serviceMonitor.scrapeTimeout": ([MONITORS, "monitoring.serviceMonitor.scrapeTimeout=20s"], "scrapeTimeout: 20s"),
    "monitoring.serviceMonitor.labels": ([MONITORS, "monitoring.serviceMonitor.labels.release=kps"], '"release": "kps"'),
    "monitoring.podMonitor.enabled": ([MONITORS], "kind: PodMonitor"),
    "monitoring.podMonitor.interval": ([MONITORS, "monitoring.podMonitor.interval=30s"], "interval: 30s"),
    "monitoring.podMonitor.scrapeTimeout": ([MONITORS, "monitoring.podMonitor.scrapeTimeout=3s"], "scrapeTimeout: 3s"),
    "monitoring.podMonitor.labels": ([MONITORS, "monitoring.podMonitor.labels.release=kps"], '"release": "kps"'),
    "monitoring.podMonitor.sampleLimit": ([MONITORS, "monitoring.podMonitor.sampleLimit=5000"], "sampleLimit: 5000"),
    "monitoring.podMonitor.labelLimit": ([MONITORS, "monitoring.podMonitor.labelLimit=30"], "labelLimit: 30"),
    "monitoring.podMonitor.labelNameLengthLimit": ([MONITORS, "monitoring.podMonitor.labelNameLengthLimit=64"], "labelNameLengthLimit: 64"),
    "monitoring.podMonitor.labelValueLengthLimit": ([MONITORS, "monitoring.podMonitor.labelValueLengthLimit=512"], "labelValueLengthLimit: 512"),
    "monitoring.podMonitor.bodySizeLimit": ([MONITORS, "monitoring.podMonitor.bodySizeLimit=5MiB"], 'bodySizeLimit: "5MiB"'),
    "monitoring.prometheusRule.enabled": ([RULES], "kind: PrometheusRule"),
    "monitoring.prometheusRule.labels": ([RULES, "monitoring.prometheusRule.labels.release=kps"], '"release": "kps"'),
    "monitoring.prometheusRule.alertLabels": ([RULES, "monitoring.prometheusRule.alertLabels.team=ml_platform"], '"team": "ml_platform"'),
    "monitoring.prometheusRule.notRunningFor": ([RULES, "monitoring.prometheusRule.notRunningFor=2h"], "for: 2h"),
    "monitoring.prometheusRule.crashLoopRestarts": ([RULES, "monitoring.prometheusRule.crashLoopRestarts=5"], ">= 5"),
    "monitoring.prometheusRule.volumeFailureRestarts": ([RULES, "monitoring.prometheusRule.volumeFailureRestarts=7"], ">= 7"),
    "monitoring.prometheusRule.checkpointMaxAgeSeconds": ([RULES, "monitoring.prometheusRule.checkpointMaxAgeSeconds=7200"], "> 7200"),
    "monitoring.dashboard.enabled": ([DASHBOARD], "kuberl.json"),
    "monitoring.dashboard.namespace": ([DASHBOARD, "monitoring.dashboard.namespace=grafana"], "namespace: grafana"),
    "monitoring.dashboard.label": ([DASHBOARD, "monitoring.dashboard.label=grafana_dashboards"], '"grafana_dashboards":'),
    "monitoring.dashboard.labelValue": ([DASHBOARD, "monitoring.dashboard.labelValue=yes"], '"grafana_dashboard": "yes"'),
    "monitoring.dashboard.folder": ([DASHBOARD, "monitoring.dashboard.folder=ML"], "ML"),
    "tests.timeoutSeconds": (["tests.timeoutSeconds=30"], "timeout=30)"),
}
OPAQUE = ("operator.resources", "operator.podSecurityContext", "operator.securityContext", "monitoring.prometheusPodLabels")  # Kubernetes objects, set field by field


@cache
def default_render() -> str:
    return subprocess.run([str(HELM), "template", "kuberl", str(CHART), "-n", "kuberl-system"], capture_output=True, text=True,
                          check=True, timeout=120).stdout


@cache
def default_objects() -> frozenset[str]:
    """The default render's objects (test_chart.py validates them): only what a setting changed is validated again."""
    return frozenset(json.dumps(o, sort_keys=True) for o in yaml.safe_load_all(default_render()) if o)


def leaves(values: dict, prefix: str = "") -> list[str]:
    found = []
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        found += leaves(value, path) if isinstance(value, dict) and value and path not in OPAQUE else [path]
    return found


def test_every_value_has_a_row():
    assert sorted(leaves(yaml.safe_load((CHART / "values.yaml").read_text()))) == sorted(SETS)


@pytest.mark.parametrize("leaf", sorted(SETS))
def test_set_as_typed_it_renders_valid_objects_that_carry_it(leaf):
    sets, shown = SETS[leaf]
    default = default_render()
    result = subprocess.run([str(HELM), "template", "kuberl", str(CHART), "-n", "kuberl-system", *[a for s in sets for a in ("--set", s)]],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    changed = [o for o in yaml.safe_load_all(result.stdout) if o and json.dumps(o, sort_keys=True) not in default_objects()]
    assert {f"{o['kind']}/{o['metadata']['name']}": p for o in changed if (p := validate(o))} == {}
    if shown is None:
        assert result.stdout != default, f"{leaf}: the output did not change"
    else:
        assert shown in result.stdout and shown not in default, f"{leaf}: {shown!r} not rendered"


@pytest.mark.parametrize(("setting", "written"), [
    ("metrics.service.annotations.prometheus\\.io/scrape=true", '"prometheus.io/scrape": "true"'),
    ("commonLabels.tier=2", '"tier": "2"'),
    ("operator.podAnnotations.example\\.com/replicas=3", '"example.com/replicas": "3"'),
    ("monitoring.serviceMonitor.labels.critical=true", '"critical": "true"'),
])
def test_a_value_set_as_a_bool_or_a_number_is_written_as_the_string_kubernetes_wants(setting, written):
    """`--set ...prometheus\\.io/scrape=true` makes a YAML true, which an annotation or a label (strings) cannot hold."""
    result = subprocess.run([str(HELM), "template", "kuberl", str(CHART), "-n", "kuberl-system", "--set", MONITORS, "--set", setting],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    objects = [o for o in yaml.safe_load_all(result.stdout) if o]
    assert {f"{o['kind']}/{o['metadata']['name']}": p for o in objects if (p := validate(o))} == {}
    assert written in result.stdout


@pytest.mark.parametrize("who", ["operator", "trainer"])
def test_an_image_tag_helm_reads_as_a_number_is_written_as_typed(who):
    """`--set operator.image.tag=20241127` is an integer to Helm; it was refused (got number, want string)."""
    result = subprocess.run([str(HELM), "template", "kuberl", str(CHART), "-n", "kuberl-system", "--set", f"{who}.image.tag=20241127"],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"ghcr.io/kuberl/{who}:20241127" in result.stdout
