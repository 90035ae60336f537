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
from pathlib import Path

import pytest
import yaml
from chart_support import CHART, HELM, ROOT, HelmError, helm

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
