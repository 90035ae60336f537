"""checkov, a real security scanner, over everything we ship: the chart with
every feature on, manifests/, the pods the operator renders for the example
job, and the Dockerfiles. Findings must equal the accepted list in
charts/kuberl/SECURITY-ACCEPTED.md, each with its reason: nothing new, nothing
stale. About 10 s (checkov's start-up is most of it)."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import time

import yaml
from chart_support import ALL_FEATURES, CHART, ROOT, helm

CHECKOV = ROOT / ".tools" / "checkov-venv" / "bin" / "checkov"
ACCEPTED = CHART / "SECURITY-ACCEPTED.md"
EXAMPLE = ROOT / "manifests" / "examples" / "cartpole-ppo.yaml"


def accepted_findings() -> list[tuple[str, str, str]]:
    rows = re.findall(r"^\| (CKV\w+) \| (\S+) \| (.+) \|$", ACCEPTED.read_text(), re.MULTILINE)
    assert rows and all(len(reason) > 20 for _, _, reason in rows), "every accepted finding says why"
    return rows


def scan(tmp_path) -> list[tuple[str, str]]:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: `make test-unit` creates it (pip install checkov in its own venv)"
    stage = tmp_path / "scan"
    shutil.copytree(ROOT / "manifests", stage / "manifests")
    shutil.copytree(ROOT / "dockerfiles", stage / "dockerfiles")
    (stage / "chart-all-features.yaml").write_text(
        helm("template", "kuberl", str(CHART), "--namespace", "kuberl-system", "--include-crds", values=ALL_FEATURES))
    rendered = subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(EXAMPLE), "--namespace", "team-a"],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    assert any(d and d["kind"] == "Pod" for d in yaml.safe_load_all(rendered))
    (stage / "trainer-pods.yaml").write_text(rendered)
    result = subprocess.run(
        [str(CHECKOV), "--directory", str(stage), "--framework", "kubernetes", "dockerfile",
         "--output", "json", "--quiet", "--compact", "--skip-download"],
        capture_output=True, text=True, timeout=300, check=False)
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert {r["check_type"] for r in reports} == {"kubernetes", "dockerfile"}, result.stderr[-2000:]
    assert all(r["summary"]["parsing_errors"] == 0 and r["summary"]["passed"] > 0 for r in reports)
    return sorted({(f["check_id"], f["resource"]) for r in reports for f in r["results"]["failed_checks"]})


def test_checkov_findings_are_exactly_the_accepted_ones(tmp_path, capsys):
    started = time.monotonic()
    findings = scan(tmp_path)
    with capsys.disabled():
        print(f"\n  checkov: {len(findings)} findings, all checked against {ACCEPTED.name}, in {time.monotonic() - started:.0f} s")
    accepted = accepted_findings()

    def matches(finding, row):
        return finding[0] == row[0] and fnmatch.fnmatchcase(finding[1], row[1])

    unaccepted = [f for f in findings if not any(matches(f, row) for row in accepted)]
    stale = [row[:2] for row in accepted if not any(matches(f, row) for f in findings)]
    assert unaccepted == [], "new checkov findings: fix them or accept them, with a reason, in SECURITY-ACCEPTED.md"
    assert stale == [], "accepted findings that no longer occur: remove their rows"
