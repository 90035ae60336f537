"""The README is a front door and docs/ holds the rest: the spec reference is generated from the spec
model (stale: this fails), every link between them resolves, and every kuberl command they show runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from kuberl.cli import build_parser
from kuberl.core import fingerprint
from kuberl.core.rules import validate_job
from kuberl.core.spec import JobSpec
from kuberl.local.runner import apply_overrides, check_overrides
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


SHOWN_IN = ("README.md", "docs/local-runs.md", "docs/troubleshooting.md", "docs/gpus-and-atari.md",
            "docs/environment-contract.md", "docs/security.md", "docs/cluster.md")
PLACEHOLDERS = ("…", "...", "<", ">", "\\|", "LEVEL", "FILE", "RUN_DIR")


def shown_commands() -> list[tuple[str, list[str]]]:
    """Every concrete `kuberl …` command the README and docs show (code blocks and inline code; ones with a
    placeholder such as FILE, <job> or … left out), as (page, arguments)."""
    found = []
    for page in SHOWN_IN:
        text = (ROOT / page).read_text()
        lines = [line for block in re.findall(r"```(?:bash|console)\n(.*?)```", text, re.DOTALL) for line in block.splitlines()]
        lines += [" ".join(span.split()) for span in re.findall(r"`(kuberl [a-z]+ [^`]+)`", text)]  # spans wrap lines
        for line in lines:
            if (m := re.match(r"\s*(?:\$ )?(?:\.venv/bin/)?kuberl ([a-z].*)", line)) is None:
                continue
            command = m.group(1).split(" #")[0].strip()
            if not any(p in command for p in PLACEHOLDERS):
                found.append((page, shlex.split(command)))
    return found


def test_the_docs_show_commands_of_every_kind():
    shown = {args[0] for _, args in shown_commands()}
    assert {"run", "eval", "plot", "validate", "render", "crd"} <= shown, shown


@pytest.mark.parametrize(("page", "args"), shown_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_every_kuberl_command_the_docs_show_parses_and_its_manifest_and_overrides_exist(page, args):
    """A renamed flag, example or spec field fails here, not in a new user's first hour."""
    parsed = build_parser().parse_args(args)  # an unknown flag or subcommand exits 2
    manifests = [a for a in args if a.startswith("manifests/")]
    for path in manifests:
        assert (ROOT / path).is_file(), (page, path)
    settings = getattr(parsed, "set", None) or []
    check_overrides(settings)  # each --set names a spec field
    if manifests and (settings or getattr(parsed, "workers", None)):
        job = yaml.safe_load((ROOT / manifests[0]).read_text())
        validate_job(apply_overrides(job, parsed.workers, settings))


def test_the_readmes_command_table_names_every_subcommand_and_only_flags_it_has():
    parser = build_parser()
    rows = [line for line in (ROOT / "README.md").read_text().split("## The `kuberl` command")[1].split("\n\n")[1].splitlines()
            if line.startswith("| `kuberl ")]
    named = {name for row in rows for name in re.findall(r"`kuberl ([a-z]+)", row.split(" | ")[0])}
    assert named == set(parser.subcommands), named
    for row in rows:
        command = re.match(r"\| `kuberl ([a-z]+)", row).group(1)
        options = parser.subcommands[command]._option_string_actions
        for flag in re.findall(r"`(--?[a-z][a-z-]*)", row):
            assert flag in options, (command, flag)


def test_every_install_command_the_docs_show_names_a_python_not_a_bare_pip():
    """The README's flow runs .venv/bin/kuberl without activating the venv: a bare `pip install` the docs showed (the
    operator extra, EnvPool, progress, video) is often another Python's, and installed nothing kuberl then saw."""
    bare = [(page.name, line.strip()) for page in (ROOT / "README.md", *DOCS.glob("*.md"))
            for line in page.read_text().replace("`pip install\n", "`pip install ").splitlines()
            if re.search(r"(?<!-m )(?<![\w./-])pip3? install", line)]
    assert bare == []


def test_the_files_the_docs_commands_write_land_where_git_ignores_them():
    """The README's second command wrote cartpole.gif into the clone's root, where `git status` then showed it
    untracked; a run's outputs belong with the run, under runs/ (.gitignore). docs/local-runs.md's `kuberl plot
    -o curve.png` did the same."""
    assert "runs/" in (ROOT / ".gitignore").read_text().splitlines()
    files = {"eval": ("video", "export"), "plot": ("output",)}  # render's -o is a format, not a file
    parsed = [(page, build_parser().parse_args(args)) for page, args in shown_commands()]
    written = [(page, getattr(command, flag)) for page, command in parsed
               for flag in files.get(command.command, ()) if getattr(command, flag, None)]
    assert written and all(path.startswith("runs/") for _, path in written), written
