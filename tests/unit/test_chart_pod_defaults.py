"""trainer.podDefaults: the chart hands a platform's defaults for every trainer pod to the operator
(KUBERL_TRAINER_POD_DEFAULTS), which reads exactly what was set; the chart refuses what the operator would
(kuberl's own label prefix, kuberl's identity env), naming the value, before anything is installed."""

from __future__ import annotations

import pytest
from chart_support import CHART, HelmError, helm, operator_container, render
from kuberl.core import contract, poddefaults

PLATFORM = {
    "labels": {"cost-center": "rl", "tier": 2},  # a number, as --set and YAML write one: a label value is a string
    "annotations": {"sidecar.istio.io/inject": False},
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.corp.example:3128"}, {"name": "NCCL_IB_HCA", "value": "mlx5_0"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "gpu"},
    "priorityClassName": "ml-batch",
}


def handed_over(values: dict | None) -> poddefaults.PodDefaults:
    _, container = operator_container(render(values))
    (variable,) = [e for e in container["env"] if e["name"] == contract.ENV_OPERATOR_TRAINER_POD_DEFAULTS]
    return poddefaults.from_text(variable["value"])


def test_the_operator_reads_what_the_platform_set():
    assert handed_over(None) == poddefaults.NONE
    got = handed_over({"trainer": {"podDefaults": PLATFORM}})
    assert got.labels == {"cost-center": "rl", "tier": "2"} and got.annotations == {"sidecar.istio.io/inject": "false"}
    assert list(got.env) == PLATFORM["env"] and list(got.tolerations) == PLATFORM["tolerations"]
    assert (got.node_selector, got.priority_class_name) == ({"pool": "gpu"}, "ml-batch")


def test_the_charts_reserved_env_is_the_contracts():
    rendered = helm("template", "kuberl", str(CHART), "--show-only", "templates/operator.yaml",
                    "--set", "trainer.podDefaults.env[0].name=X", "--set", "trainer.podDefaults.env[0].value=y")
    assert "X" in rendered
    for name in sorted(contract.RESERVED_ENV_NAMES) + ["KUBERL_ANYTHING"]:
        with pytest.raises(HelmError) as refused:
            render({"trainer": {"podDefaults": {"env": [{"name": name, "value": "1"}]}}})
        assert f"trainer.podDefaults.env[0] is {name}, which kuberl sets in each pod" in str(refused.value)


@pytest.mark.parametrize(("defaults", "said"), [
    ({"labels": {"kuberl.dev/job": "x"}}, 'trainer.podDefaults.labels has the key "kuberl.dev/job": kuberl.dev/ is kuberl\'s own prefix'),
    ({"annotations": {"kuberl.dev/spec-hash": "x"}}, 'trainer.podDefaults.annotations has the key "kuberl.dev/spec-hash"'),
    ({"labels": {"Bad Key": "x"}}, 'trainer.podDefaults.labels has the key "Bad Key"'),
    ({"nodeSelector": {"pool": "a b"}}, "at '/trainer/podDefaults/nodeSelector/pool'"),
    ({"priorityClassName": "Not_A_Class"}, "at '/trainer/podDefaults/priorityClassName'"),
    ({"tolerations": [{"key": "gpu", "effect": "Sometimes"}]}, "at '/trainer/podDefaults/tolerations/0/effect'"),
    ({"podLabels": {"a": "b"}}, "podLabels"),
])
def test_what_the_operator_would_refuse_the_chart_refuses_naming_the_value(defaults, said):
    with pytest.raises(HelmError) as refused:
        render({"trainer": {"podDefaults": defaults}})
    assert said in str(refused.value)


def test_kuberl_render_previews_a_values_files_defaults_as_the_operator_lays_them(tmp_path):
    """`kuberl render --pod-defaults values.yaml`: the pods the operator would create from the defaults the chart
    hands it (the same values file, through helm), and a refusal, exit 2, for defaults it would stop on."""
    import subprocess
    import sys

    import yaml
    from kuberl.core.render import PLACEHOLDER_UID, render_pods

    from tests.support.jobs import make_job

    values = {"trainer": {"podDefaults": PLATFORM}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    job = make_job("cartpole").with_spec(labels={"tier": "1"}).obj()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    out = subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(tmp_path / "job.yaml"), "--pod-defaults",
                          str(tmp_path / "values.yaml")], capture_output=True, text=True, check=True).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"]
    expected = [poddefaults.apply(p, handed_over(values)) for p in render_pods(job, "default", PLACEHOLDER_UID, [0, 1])]
    assert rendered == expected and rendered[0]["metadata"]["labels"]["tier"] == "1"  # the job's own label won
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"trainer": {"podDefaults": {"env": [{"name": "RANK", "value": "1"}]}}}))
    refused = subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(tmp_path / "job.yaml"), "--pod-defaults",
                              str(tmp_path / "bad.yaml")], capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "trainer.podDefaults.env[0].name: RANK is reserved" in refused.stderr
    # a default the platform enforces: the job that sets it otherwise is refused, as the operator refuses it
    (tmp_path / "enforced.yaml").write_text(yaml.safe_dump({"trainer": {"podDefaults": {**PLATFORM, "enforced": ["labels"]}}}))
    refused = subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(tmp_path / "job.yaml"), "--pod-defaults",
                              str(tmp_path / "enforced.yaml")], capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and not refused.stdout
    assert refused.stderr.strip().endswith("metadata.labels.tier: trainer.podDefaults enforces '2' (got '1')"), refused.stderr


def test_the_chart_hands_over_the_enforced_fields_and_refuses_another_name():
    assert handed_over({"trainer": {"podDefaults": {**PLATFORM, "enforced": ["nodeSelector", "priorityClassName"]}}}).enforced == {
        "nodeSelector", "priorityClassName"}
    with pytest.raises(HelmError) as refused:
        render({"trainer": {"podDefaults": {"enforced": ["image"]}}})
    assert "enforced" in str(refused.value)


def test_the_example_values_file_installs_and_previews_the_same_defaults():
    import yaml
    from chart_support import validate
    from kuberl.cli import pod_defaults_file

    example = CHART / "examples" / "platform-defaults.yaml"
    values = yaml.safe_load(example.read_text())
    assert handed_over(values) == pod_defaults_file(str(example)) != poddefaults.NONE
    assert all(validate(o) == [] for o in render(values))
