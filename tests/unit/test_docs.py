"""The README is a front door and docs/ holds the rest: the spec reference is generated from the spec
model (stale: this fails), and every link between them resolves."""

from __future__ import annotations

import re
from pathlib import Path

from kuberl.core import fingerprint
from kuberl.core.spec import JobSpec
from kuberl.tools import specdoc

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_spec_reference_is_generated_from_the_spec_model():
    assert (DOCS / "spec-reference.md").read_text() == specdoc.reference(), "stale: run `make docs`"


def test_the_spec_reference_lists_every_field_and_what_changes_what_is_learned():
    text = (DOCS / "spec-reference.md").read_text()
    for name, field in JobSpec.model_fields.items():
        assert f"| `{field.alias or name}` |" in text
    assert "| `ppo.learningRate` | number | `0.0025` | > 0, <= 1 |" in text
    for name, (kind, _) in fingerprint.FIELDS.items():
        assert f"| `{name}` | {kind} |" in text


def test_the_readme_is_a_front_door_of_about_150_lines():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 180
    for section in ("## Install", "## Five-minute local quickstart", "## Cluster quickstart", "## Documentation"):
        assert section in readme
    assert "make images REGISTRY=" in readme and "kubectl get rltj -w" in readme and "make tools" in readme


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), ROOT / "charts" / "kuberl" / "README.md"]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
    for page in (ROOT / "README.md", *DOCS.glob("*.md")):
        assert "README.md#" not in page.read_text().replace("charts/kuberl/README.md", ""), page
