"""`kuberl run` takes a file of a job and the ConfigMaps it reads, as
`kubectl apply -f` does: envFrom, configMapKeyRef and configMap volumes of a
PyTorchJob-style template find them here."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kuberl.local.runner import split_documents

JOB = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "j"}, "spec": {}}


def configmap(name: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_the_job_and_its_configmaps_in_any_order():
    job, configmaps = split_documents([configmap("settings", {"A": "1"}), JOB, configmap("scripts", {"t.py": "print(1)"})], "f")
    assert job is JOB
    assert configmaps == {"settings": {"A": "1"}, "scripts": {"t.py": "print(1)"}}


def test_a_job_alone_has_no_configmaps():
    assert split_documents([JOB], "f") == (JOB, {})


@pytest.mark.parametrize("docs,why", [
    ([JOB, JOB], "exactly one RLTrainingJob"),
    ([configmap("a", {})], "exactly one RLTrainingJob"),
    ([JOB, configmap("../up", {})], "DNS-1123"),
    ([JOB, configmap("a", {"../x": "1"})], r"data\.\.\./x: expected a ConfigMap key"),
    ([JOB, configmap("a", {"k": 1})], "data.k: expected a string; quote it"),
    ([JOB, configmap("a", {}), configmap("a", {})], "two ConfigMaps"),
    ([JOB, configmap("a\n", {})], "DNS-1123"),  # Go's regexp has no "$ before a final newline"
    ([JOB, configmap("a" * 254, {})], "DNS-1123"),  # a subdomain is at most 253 characters
    ([JOB, configmap("a", {"k\n": "1"})], "expected a ConfigMap key"),
    ([JOB, {**configmap("a", {}), "apiVersion": "v2"}], "apiVersion: expected v1"),
])
def test_what_a_cluster_would_refuse_is_refused(docs, why):
    with pytest.raises(SystemExit, match=why):
        split_documents(docs, "f")


@pytest.mark.parametrize(("docs", "said"), [
    ([["a", "b"]], "f: expected an RLTrainingJob, a YAML mapping (got ['a', 'b'])"),
    ([42], "f: expected an RLTrainingJob, a YAML mapping (got 42)"),
])
def test_a_file_without_a_job_mapping_says_what_it_holds(docs, said):
    """A YAML list was refused with "expected exactly one RLTrainingJob document", which it was."""
    with pytest.raises(SystemExit) as e:
        split_documents(docs, "f")
    assert e.value.code == said


def test_binary_data_is_refused_rather_than_left_out_of_the_volume():
    with pytest.raises(SystemExit, match="binaryData: not served by kuberl run"):
        split_documents([JOB, {**configmap("a", {}), "binaryData": {"model.bin": "AAEC"}}], "f")


def test_validate_and_render_take_the_file_kuberl_run_takes(tmp_path):
    """The file a user runs is the file they validate and render: ConfigMaps beside the job
    were read as RLTrainingJobs and refused (exit 1), and a bad one still is."""
    job = {**JOB, "metadata": {"name": "byo"}, "spec": {"trainer": "custom", "template": {"spec": {
        "containers": [{"name": "trainer", "command": ["python", "/app/t.py"], "volumeMounts": [{"name": "code", "mountPath": "/app"}]}],
        "volumes": [{"name": "code", "configMap": {"name": "scripts"}}]}}}}
    path = tmp_path / "job.yaml"
    for command in ("validate", "render"):
        path.write_text(yaml.safe_dump_all([configmap("scripts", {"t.py": "print(1)"}), job]))
        done = subprocess.run([sys.executable, "-m", "kuberl.cli", command, str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "byo" in done.stdout
        path.write_text(yaml.safe_dump_all([configmap("Scripts", {"t.py": "print(1)"}), job]))
        done = subprocess.run([sys.executable, "-m", "kuberl.cli", command, str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 1 and "DNS-1123" in done.stderr


def test_a_file_of_configmaps_alone_is_no_valid_job(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(configmap("scripts", {"t.py": "print(1)"})))
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "validate", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "no RLTrainingJob document, only ConfigMaps" in done.stderr


def test_validate_lists_a_bad_configmaps_problems_and_goes_on_to_the_job(tmp_path, capsys):
    """A bad ConfigMap ended validate at once (the job after it unread), and binaryData, which a
    cluster takes, was refused for kuberl run's own limitation."""
    from kuberl import cli

    bad_job = {**JOB, "spec": {"workers": 0}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([configmap("a", {"..data": "x", "k": "v"}), bad_job]))
    assert cli.main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "ConfigMap 'a' is invalid (1 problem(s)):\n  data...data: expected a ConfigMap key" in err
    assert "RLTrainingJob 'j' is invalid" in err and "spec.workers" in err
    good_job = {**JOB, "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}}}
    path.write_text(yaml.safe_dump_all([{**configmap("w", {}), "binaryData": {"w.bin": "AAEC"}}, good_job]))
    assert cli.main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_an_unquoted_number_or_boolean_key_is_the_key_kubectl_sends(tmp_path):
    """kubectl turns YAML into JSON with sigs.k8s.io/yaml, which writes an integer or boolean key as its
    text: `1: x` is the key '1' to the API server. kuberl run took it so before configmap_problems, which
    then refused it as no ConfigMap key (validate and convert too)."""
    from kuberl import cli
    from kuberl.core.yamlreader import load_documents

    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  1: one\n  k: v\n"
    _, configmaps = split_documents([JOB, *load_documents(text)], "f")
    assert configmaps == {"a": {"1": "one", "k": "v"}}
    assert split_documents([JOB, configmap("b", {False: "no"})], "f")[1] == {"b": {"false": "no"}}
    good_job = {**JOB, "spec": {"trainer": "custom", "template": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}}}
    path = tmp_path / "job.yaml"
    path.write_text(text + "---\n" + yaml.safe_dump(good_job))
    assert cli.main(["validate", str(path)]) == 0
    with pytest.raises(SystemExit, match=r"data\.1\.5: expected a ConfigMap key"):  # Go writes a float key its own way: quote it
        split_documents([JOB, configmap("a", {1.5: "x"})], "f")
