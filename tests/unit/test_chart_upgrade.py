"""`helm upgrade` as the docs tell a platform team to run it, with real Helm.

Helm's upgrade (pkg/action/upgrade.go, reuseValues) with `--reuse-values` renders the new chart's
templates over the *installed* chart's coalesced values; with `--reset-then-reuse-values` over the
new chart's defaults plus the values the user set. Here the installed chart is today's without its
newest value (`monitoring.prometheusRule`), the way every earlier release of the chart lacks it: a
copy of the chart whose values.yaml is the old one renders as `--reuse-values` would, and the new
chart with the user's values as a file renders as `--reset-then-reuse-values` would."""

from __future__ import annotations

import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from chart_support import CHART, CLUSTER_SCOPED, HELM, ROOT, HelmError, helm, render
from kuberl.core import names
from kuberl.core.crd import crd, spec_hash

from tests.support.apiserver import StandinServer

USER_VALUES = {"operator": {"image": {"repository": "registry.example.com/you/operator"}},
               "trainer": {"image": {"repository": "registry.example.com/you/trainer"}}}
DOCUMENTED = [ROOT / "docs" / "cluster.md", CHART / "README.md"]


def installed_chart_values() -> dict:
    """The values of a release installed before monitoring.prometheusRule existed: old defaults, the user's values on top."""
    old = yaml.safe_load((CHART / "values.yaml").read_text())
    del old["monitoring"]["prometheusRule"]
    old["operator"]["image"].update(USER_VALUES["operator"]["image"])
    old["trainer"]["image"].update(USER_VALUES["trainer"]["image"])
    return old


def test_reuse_values_renders_the_new_chart_over_the_old_defaults_and_fails_on_a_new_value(tmp_path: Path):
    """Why the docs do not say --reuse-values: this is what it does with any value added since the install."""
    chart = tmp_path / "kuberl"
    shutil.copytree(CHART, chart)
    (chart / "values.yaml").write_text(yaml.safe_dump(installed_chart_values()))
    with pytest.raises(HelmError, match=r"monitoring\.prometheusRule\.enabled|nil pointer"):
        helm("template", "kuberl", str(chart), "--namespace", "kuberl-system")


def test_reset_then_reuse_values_keeps_what_the_user_set_and_takes_the_new_defaults():
    out = helm("template", "kuberl", str(CHART), "--namespace", "kuberl-system", values=USER_VALUES)
    images = set(re.findall(r"image: (\S+)", out)) | set(re.findall(r'KUBERL_TRAINER_IMAGE\n\s+value: "?([^"\n]+)', out))
    assert {"registry.example.com/you/operator:0.1.0", "registry.example.com/you/trainer:0.1.0"} <= images


@pytest.mark.parametrize("doc", DOCUMENTED, ids=lambda p: p.name)
def test_the_documented_upgrade_takes_the_new_defaults(doc: Path):
    commands = [line for line in doc.read_text().splitlines() if line.startswith("helm upgrade")]
    assert commands, f"{doc}: no helm upgrade command"
    for command in commands:
        assert "--reset-then-reuse-values" in command.split() and "--reuse-values" not in command.split(), command


def test_helm_offers_the_documented_flag():
    help_text = subprocess.run([str(HELM), "upgrade", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--reset-then-reuse-values" in help_text


@pytest.mark.parametrize("doc", [*DOCUMENTED, CHART / "templates" / "NOTES.txt", CHART / "Chart.yaml"], ids=lambda p: p.name)
def test_the_documented_crd_upgrade_takes_the_fields_helm_owns(doc: Path):
    """Helm installs crds/ and owns their fields (managedFields manager "helm"): a server-side apply of a changed
    CRD by kubectl stops at `Apply failed with 1 conflict: conflict with "helm" ... .spec.versions` without
    --force-conflicts (prometheus-community/helm-charts#2489, ansible/awx-operator#1716)."""
    commands = [line for line in doc.read_text().splitlines() if "kubectl apply" in line and "charts/kuberl/crds" in line]
    assert commands, f"{doc}: no CRD upgrade command"
    for command in commands:
        assert "--server-side" in command and "--force-conflicts" in command, command


def test_the_crd_carries_the_hash_of_its_spec():
    """`kuberl crd` writes it; a hand edit of crds/ (or manifests/crd.yaml) without `make manifests` fails here."""
    for path in (CHART / "crds" / "rltrainingjobs.yaml", ROOT / "manifests" / "crd.yaml"):
        written = yaml.safe_load(path.read_text())
        assert written["metadata"]["annotations"][names.ANNOTATION_CRD_HASH] == spec_hash(written["spec"]), path
    assert spec_hash({**crd()["spec"], "scope": "Cluster"}) != spec_hash(crd()["spec"])


def render_against(standin: StandinServer, tmp_path: Path, values: dict | None = None) -> subprocess.CompletedProcess:
    """The chart's own helpers and values over the stand-in, as `helm upgrade` renders them (`lookup` asks the
    server); its templates one ConfigMap that runs the chart's checks, as templates/operator.yaml does. The
    stand-in serves no apps/v1 or rbac: Helm could not build the chart's own objects against it."""
    chart = tmp_path / "chart" / "kuberl"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "templates")
    (chart / "templates").mkdir()
    shutil.copy(CHART / "templates" / "_helpers.tpl", chart / "templates")
    (chart / "templates" / "checked.yaml").write_text(
        '{{- include "kuberl.validate" . -}}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: checked}\n')
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values or {}))
    return subprocess.run([str(HELM), "--kubeconfig", str(standin.kubeconfig), "template", "kuberl", str(chart), "--namespace",
                           "kuberl-system", "--dry-run=server", "--values", str(tmp_path / "values.yaml")],
                          check=False, capture_output=True, text=True, timeout=120)


@contextmanager
def installed(tmp_path: Path, crd_object: dict | None):
    """The API stand-in, holding `crd_object` as its installed CRD (or none)."""
    with StandinServer(workdir=tmp_path) as server:
        if crd_object is not None:
            path = tmp_path / "installed-crd.yaml"
            path.write_text(yaml.safe_dump(crd_object))
            server.apply_crd(path)
        yield server


@pytest.mark.parametrize("installed_crd", ["this chart's", "none"])
def test_an_upgrade_over_this_charts_crd_or_none_renders(tmp_path: Path, installed_crd: str):
    ours = yaml.safe_load((CHART / "crds" / "rltrainingjobs.yaml").read_text())
    with installed(tmp_path, ours if installed_crd == "this chart's" else None) as server:
        result = render_against(server, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "name: checked" in result.stdout
    if installed_crd == "this chart's":
        assert any(c.resource == "customresourcedefinitions" and c.verb == "get" for c in server.calls)


@pytest.mark.parametrize("annotations", [None, {names.ANNOTATION_CRD_HASH: "0" * 64}], ids=["before-the-hash", "another-schema"])
def test_an_upgrade_over_another_crd_is_refused_naming_the_command_that_applies_this_charts(tmp_path: Path, annotations):
    """Helm installs crds/ only where the CRD is missing (pkg/action/install.go installCRDs) and never on upgrade:
    the operator would then meet a schema that prunes its new fields. The check says so before anything changes."""
    older = yaml.safe_load((CHART / "crds" / "rltrainingjobs.yaml").read_text())
    older["metadata"] = {"name": older["metadata"]["name"], **({"annotations": annotations} if annotations else {})}
    with installed(tmp_path, older) as server:
        result = render_against(server, tmp_path)
    assert result.returncode != 0
    command = yaml.safe_load((CHART / "Chart.yaml").read_text())["annotations"]["kuberl.dev/crd-upgrade"]
    assert "the installed CRD rltrainingjobs.kuberl.dev is not this chart's" in result.stderr and command in result.stderr


ALONE = {"operator": {"watchNamespaces": ["kuberl-system"]}, "rbac": {"userRoles": False}}


@pytest.mark.parametrize("values", [
    {}, ALONE, {**ALONE, "operator": {"watchNamespaces": ["kuberl-system"], "replicas": 3}},
    {**ALONE, "rbac": {"userRoles": True}}, {"operator": {"watchNamespaces": ["team-a"]}, "rbac": {"userRoles": False}},
    {"rbac": {"create": False, "userRoles": False}, "operator": {"serviceAccount": {"create": False, "name": "mine"}}},
    {"rbac": {"create": False, "userRoles": False}, "operator": {"replicas": 2, "serviceAccount": {"create": False, "name": "mine"}}},
], ids=["defaults", "alone", "alone-peering", "user-roles", "other-namespace", "no-rbac", "no-rbac-peering"])
def test_the_crd_check_asks_only_where_the_release_writes_cluster_scoped_objects(tmp_path: Path, values: dict):
    """A namespace's admin installing for that namespace alone may not read CRDs (Kubernetes' admin role grants
    none), and Helm's lookup fails the install on that 403 (pkg/engine/lookup_func.go returns any error but a
    404): such a release, holding nothing outside its namespace, leaves the CRD to the cluster's admin."""
    older = yaml.safe_load((CHART / "crds" / "rltrainingjobs.yaml").read_text())
    older["metadata"] = {"name": older["metadata"]["name"]}
    cluster_scoped = [o["kind"] for o in render(values) if o["kind"] in CLUSTER_SCOPED]
    with installed(tmp_path, older) as server:
        result = render_against(server, tmp_path, values)
        asked = any(c.resource == "customresourcedefinitions" for c in server.calls)
    assert (result.returncode != 0) == asked == bool(cluster_scoped), (cluster_scoped, result.stderr)
