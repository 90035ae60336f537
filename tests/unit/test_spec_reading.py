"""One safe way to read a job file: hostile input gets ONE line naming the
problem and exit 1 from the real `kuberl validate`, never a traceback."""

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob
from kuberl.core.yamlreader import (
    MAX_ALIAS_BYTES,
    MAX_ALIAS_EXPANSION,
    MAX_DOCUMENT_BYTES,
    MAX_NESTING,
    UnreadableSpec,
    load_documents,
)

from tests.support.jobs import make_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "manifests" / "examples" / "cartpole-ppo.yaml").read_text()
KUBERL = [sys.executable, "-m", "kuberl.cli"]
MEMORY_LIMIT = 1 << 30  # an alias bomb must fail inside 1 GiB of address space


def job_with_kwargs(kwargs_yaml: str) -> str:
    lines = "".join(f"      {line}\n" for line in kwargs_yaml.splitlines())
    return (
        "apiVersion: kuberl.dev/v1alpha1\nkind: RLTrainingJob\nmetadata: {name: hostile}\n"
        f"spec:\n  algorithm: ppo\n  totalTimesteps: 1000\n  env:\n    id: CartPole-v1\n    kwargs:\n{lines}"
    )


# Nine levels of ten aliases each: 10**9 strings once expanded.
ALIAS_BOMB = job_with_kwargs(
    "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))
)

# One 1.4 MB string behind 9,000 aliases: under the node budget, 12.6 GB once expanded.
LONG_STRING_BOMB = job_with_kwargs("big: &s " + "x" * 1_400_000 + "\nuses: [" + ", ".join(["*s"] * 9000) + "]\n")
TEMPLATE_BOMB = (
    "apiVersion: kuberl.dev/v1alpha1\nkind: RLTrainingJob\nmetadata: {name: hostile}\n"
    "spec:\n  algorithm: ppo\n  totalTimesteps: 1000\n  env: {id: CartPole-v1}\n  template:\n"
    "    metadata: {annotations: {a: &s " + "x" * 1_400_000 + "}}\n"
    "    spec: {containers: [{name: trainer, args: [" + ", ".join(["*s"] * 9000) + "]}]}\n"
)

HOSTILE = {
    "a long string behind many aliases": (LONG_STRING_BOMB, f"spec.env.kwargs.uses[1]: aliases expand the document by more than {MAX_ALIAS_BYTES} bytes"),
    "the same in the pod template": (TEMPLATE_BOMB, "spec.template.spec.containers[0].args[1]: aliases expand the document by more"),
    "alias bomb": (ALIAS_BOMB, f"aliases expand past {MAX_ALIAS_EXPANSION} nodes"),
    "duplicate key": (EXAMPLE.replace("  algorithm: ppo\n", "  algorithm: ppo\n  algorithm: dqn\n", 1),
                      "spec.algorithm: duplicate key (first at line"),
    "duplicate nested key": (job_with_kwargs("a: 1\nb: 2\na: 3\n"), "spec.env.kwargs.a: duplicate key"),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", "binary data"),
    "not UTF-8": (EXAMPLE.encode().replace(b"cartpole-ppo", b"cartpole-p\xe9o"), "not UTF-8 text (byte 0xe9"),
    "python tag": ("!!python/object/apply:os.system ['touch pwned']\n", "tag !!python/object/apply:os.system is not allowed"),
    "python tag inside": (job_with_kwargs("x: !!python/name:os.system\n"), "tag !!python/name:os.system is not allowed"),
    "syntax error": ("spec: {algorithm: ppo\n  env: [\n", "expected ',' or '}'"),
    "1000-deep flow nesting": ("spec: " + "[" * 1000 + "]" * 1000 + "\n", "nested deeper than 64 levels"),
    "1000-deep block nesting": ("".join("  " * i + "a:\n" for i in range(1000)) + "  " * 1000 + "x\n", "nested deeper than 64 levels"),
    "5000-digit integer": (EXAMPLE.replace("totalTimesteps: 500000", "totalTimesteps: " + "9" * 5000, 1),
                           "spec.totalTimesteps: a number of 5000 characters"),
    "larger than etcd's limit": (EXAMPLE + "# " + "x" * MAX_DOCUMENT_BYTES + "\n", "larger than 1572864 bytes"),
    "a structure that contains itself": ("spec: &a {x: *a}\n", "aliases nest deeper than 64 levels"),
    # 1, 0x1 and 1.0 (or true and yes) are one key once built: the last would silently win.
    "keys spelled apart, equal once built": (job_with_kwargs("1: a\n0x1: b\n1.0: c\n"), "spec.env.kwargs.0x1: duplicate key"),
    "booleans spelled apart": (job_with_kwargs("true: a\nyes: b\n"), "spec.env.kwargs.yes: duplicate key"),
    "nulls spelled apart": (job_with_kwargs("null: a\n~: b\n"), "spec.env.kwargs.~: duplicate key"),
    # JSON has no NaN or infinity; kubectl cannot send them, and config.json would not parse.
    "NaN": (EXAMPLE.replace("targetReturn: 475", "targetReturn: .nan", 1), "spec.success.targetReturn: .nan is not a JSON number"),
    "infinity": (job_with_kwargs("x: -.inf\n"), "spec.env.kwargs.x: -.inf is not a JSON number"),
}


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def kuberl(tmp_path, *args, content=None, timeout=60):
    path = tmp_path / "job.yaml"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return subprocess.run([*KUBERL, *args, str(path)], check=False, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, preexec_fn=limit_memory)


@pytest.mark.parametrize(("content", "expected"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_file_gets_one_line_and_exit_1(tmp_path, content, expected):
    started = time.monotonic()
    result = kuberl(tmp_path, "validate", content=content)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"{tmp_path / 'job.yaml'}: ")
    assert expected in result.stderr
    assert result.stdout == ""
    assert time.monotonic() - started < 30
    assert not (tmp_path / "pwned").exists()


def test_a_byte_bomb_is_refused_quickly_in_one_gibibyte(tmp_path):
    """Counted in CPU seconds (the child's own), so a loaded machine does not fail it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = kuberl(tmp_path, "validate", content=LONG_STRING_BOMB)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.stderr == (f"{tmp_path / 'job.yaml'}: line 10, column 12: spec.env.kwargs.uses[1]: aliases expand the document"
                             f" by more than {MAX_ALIAS_BYTES} bytes (refused, like an alias bomb: the API server stores at most that)\n")
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 5


def test_aliases_that_add_less_than_the_budget_are_fine():
    [doc] = load_documents(job_with_kwargs("big: &s " + "x" * 700_000 + "\nuse: *s\n"))
    assert doc["spec"]["env"]["kwargs"]["use"] == "x" * 700_000


@pytest.mark.parametrize("command", ["render", "run"])
def test_render_and_run_read_the_same_safe_way(tmp_path, command):
    result = kuberl(tmp_path, command, content=ALIAS_BOMB)
    assert (result.returncode, result.stderr.count("\n"), "Traceback" in result.stderr) == (1, 1, False), result
    assert "aliases expand past" in result.stderr


def test_missing_file_is_one_line(tmp_path):
    result = kuberl(tmp_path, "validate")
    assert (result.returncode, result.stderr.strip()) == (1, f"{tmp_path / 'job.yaml'}: No such file or directory")


def test_plain_yaml_still_reads_as_kubectl_reads_it():
    [doc] = load_documents("a: 1e-3\nb: 5e5\nc: !!str 12\nbase: &b {x: 1}\nd: {<<: *b, z: 2}\n")
    assert doc == {"a": 0.001, "b": 500000, "c": "12", "base": {"x": 1}, "d": {"x": 1, "z": 2}}
    assert load_documents(b"\xef\xbb\xbfa: 1\n---\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize("text, sent", [
    # go-yaml v2 (sigs.k8s.io/yaml's YAMLToJSON, which kubectl sends by) applies a merge key where it stands among
    # the mapping's keys (decoder.mapping), so a merge after a key replaces it; PyYAML let every explicit key win
    ("workers: 2\n<<: {workers: 4}\n", {"workers": 4}),
    ("<<: {workers: 4}\nworkers: 2\n", {"workers": 2}),
    # of a list of maps, an earlier one wins over a later one (decoder.merge steps backwards), and all over a key before
    ("a: 1\n<<: [{a: 2, b: 2}, {b: 3, c: 3}]\n", {"a": 2, "b": 2, "c": 3}),
    # a merged map's own merge is applied where it stands in that map
    ("base: &b {<<: {x: 1}, x: 2}\nd: {x: 0, <<: *b}\n", {"base": {"x": 2}, "d": {"x": 2}}),
])
def test_a_merge_key_is_applied_where_it_stands_as_kubectl_applies_it(monkeypatch, libyaml, text, sent):
    """`kuberl validate` and `render` read a job file as kubectl sends it: `workers: 2` followed by
    `<<: *defaults` holding `workers: 4` ran 4 workers on the cluster and validated and rendered as 2."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml)
    assert load_documents(text) == [sent]


def test_a_merge_of_anything_but_maps_is_refused_as_kubectl_refuses_it():
    for text in ("a: 1\n<<: 3\n", "<<: [{a: 1}, 2]\n"):
        with pytest.raises(UnreadableSpec, match="map merge requires map or sequence of maps as the value"):
            load_documents(text)


@pytest.mark.parametrize("libyaml", [True, False])
@pytest.mark.parametrize(("text", "sent"), [
    # go-yaml v2's resolve (kubectl's YAMLToJSON): y and n are booleans, 0o is octal, there is no base 60,
    # `=` is a string, and a number that overflows float64 is left a string
    ("y", True), ("N", False), ("0o17", 15), ("-0o17", -15), ("017", 15), ("1_000", 1000), ("0x_1F", 31),
    ("1:20", "1:20"), ("190:20:30.15", "190:20:30.15"), ("=", "="), ("1e400", "1e400"), ("08", 8),
    ("1e3", 1000), (".5", 0.5), ("'y'", "y"), ('"0o17"', "0o17"), ("2026-01-01", "2026-01-01"),
    ("<<", "<<"),  # a merge key only as a key: a value `<<` is the string (a shell's heredoc in args)
    # kubectl sends a uint64 (or an integral float) as an integer the API server decodes past int64 as a float64
    ("9223372036854775807", 2**63 - 1), ("9223372036854775808", float(2**63)), ("1e20", 1e20),
    # an integral float is sent as its shortest digits then zeros (Go's 'f' format), which the API server reads
    ("-9223372036854775809", -float(2**63)), ("9.2233720368547e18", 9223372036854700000),
])
def test_an_unquoted_scalar_is_what_kubectl_sends(monkeypatch, libyaml, text, sent):
    """PyYAML's YAML 1.1 read `y` as a string (kubectl sends true), `0o17` as a string (15) and `1:20` as 80
    (a string), and refused `=` outright: `kuberl validate` passed `value: n` for an env var, a boolean the API
    server refuses, and `kuberl run` gave env kwargs other values than the cluster's pods got."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml)
    assert load_documents(f"a: {text}\n") == [{"a": sent}]
    assert type(load_documents(f"a: {text}\n")[0]["a"]) is type(sent)


@pytest.mark.parametrize("libyaml", [True, False])
def test_a_key_read_as_a_boolean_or_an_integer_is_the_text_kubectl_sends(monkeypatch, libyaml):
    """sigs.k8s.io/yaml's convertToJSONableObject writes a key go-yaml v2 read as a boolean or an integer as its text:
    `on: x` is {"true": "x"}, a label key the API server takes. kuberl kept True, refused as 'expected a string', and
    took `1` and `true` for one key (Python's True == 1), refusing a mapping kubectl sends as two."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml)
    assert load_documents("a: {on: x, 1: one, n: z, 0x10: w}\n") == [{"a": {"true": "x", "1": "one", "false": "z", "16": "w"}}]
    with pytest.raises(UnreadableSpec, match="a.true: duplicate key"):
        load_documents("a: {y: 1, true: 2}\n")


@pytest.mark.parametrize("libyaml", [True, False])
def test_a_key_read_as_a_float_is_the_text_kubectl_sends(monkeypatch, libyaml):
    """convertToJSONableObject writes a float key by strconv.FormatFloat(key, 'g', -1, 32): `1.5: x` is {"1.5": "x"},
    an annotation key the API server takes, and `1e6` is "1e+06" (each pair checked with kubectl 1.33's
    `label --local -o json`). kuberl kept the float and refused it as 'expected annotation keys that are qualified
    names (got key 1.5)'; `1.0` and `1` stay one key."""
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml)
    keys = {"1.5": "1.5", "1e6": "1e+06", "1e3": "1000", "-0.0": "-0", "0.00012345": "0.00012345", "1e-5": "1e-05",
            "0.1234567891": "0.12345679", "16777217.0": "1.6777216e+07", "3.5e38": ".inf", "7e-46": "0"}
    [doc] = load_documents("a: {" + ", ".join(f"{key}: {i}" for i, key in enumerate(keys)) + "}\n")
    assert doc == {"a": {sent: i for i, sent in enumerate(keys.values())}}
    with pytest.raises(UnreadableSpec, match="a.1.0: duplicate key"):
        load_documents("a: {1: x, 1.0: y}\n")


def test_an_integer_past_int64_is_refused_at_its_field_as_the_api_server_refuses_it():
    """apimachinery's util/json decodes a number outside int64 into a float64, and a CRD's `type: integer` takes none
    (kube-openapi: no JSON integer past 2**53): `kubectl apply` refused what `kuberl validate` passed and `kuberl run`
    ran, in the fields the CRD gives no maximum."""
    text = yaml.safe_dump(make_job("big").obj()).replace("workers: 2", "workers: 2\n  runPolicy: {activeDeadlineSeconds: 9223372036854775808}")
    [job] = load_documents(text)
    with pytest.raises(InvalidJob, match=r"spec\.runPolicy\.activeDeadlineSeconds: expected an integer"):
        validate_job(job)
    [job] = load_documents(text.replace("9223372036854775808", "9223372036854775807"))
    assert validate_job(job).run_policy.active_deadline_seconds == 2**63 - 1


@pytest.mark.parametrize(("key", "said"), [("~", "null"), ("null", "null"), ("9223372036854775808", "go-yaml's uint64"),
                                         ("[x]", "a list or map")])
def test_a_map_key_kubectl_cannot_send_is_refused_where_it_stands(key, said):
    """kubectl refuses a null, a uint64 or a list key (sigs.k8s.io/yaml: 'unsupported map key of type'); kuberl read
    `spec.template.spec.affinity: {~: 1}` as valid, rendered and ran it."""
    with pytest.raises(UnreadableSpec, match=rf"line 2, column 25: (.* \()?{re.escape(said)}\)? as a map key: kubectl refuses"):
        load_documents(f"spec:\n  template: {{affinity: {{{key}: 1, a: 2}}}}\n")


def test_a_few_shared_blocks_are_fine():
    shared = "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(50)) + "}\n"
    uses = "".join(f"u{i}: *b\n" for i in range(50))
    [doc] = load_documents(shared + uses)
    assert doc["u49"]["k49"] == 49


@pytest.mark.parametrize("content", ["a: " + "[" * 100 + "]" * 100, "a: !!python/name:os.system\n"])
def test_without_libyaml_the_python_composer_checks_the_same(monkeypatch, content):
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    with pytest.raises(UnreadableSpec, match="nested deeper than 64 levels|tag !!python/name:os.system is not allowed"):
        load_documents(content)


def test_both_parsers_draw_the_nesting_line_at_the_same_place(monkeypatch):
    """One check for both: a scalar inside MAX_NESTING collections reads, one more collection does not."""
    deepest = "a: " + "[" * (MAX_NESTING - 1) + "1" + "]" * (MAX_NESTING - 1)
    too_deep = "a: " + "[" * MAX_NESTING + "1" + "]" * MAX_NESTING
    with_libyaml = load_documents(deepest)
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert load_documents(deepest) == with_libyaml
    with pytest.raises(UnreadableSpec, match=f"nested deeper than {MAX_NESTING} levels"):
        load_documents(too_deep)


def test_limits_are_checked_before_anything_is_built():
    with pytest.raises(UnreadableSpec, match="aliases expand past"):
        load_documents(ALIAS_BOMB)
    with pytest.raises(UnreadableSpec, match="larger than"):
        load_documents(b"a" * (MAX_DOCUMENT_BYTES + 1))


def test_a_job_from_the_api_server_is_bounded_too():
    """The operator reads JSON, not this file reader: parse_spec bounds nesting
    itself, naming the field, before pydantic or render recurse into it."""
    from kuberl.core.rules import validate_job
    from kuberl.core.validation import InvalidJob

    deep: dict = {}
    node = deep
    for _ in range(1000):
        node["a"] = {}
        node = node["a"]
    job = make_job("deep").minimal().with_spec(totalTimesteps=10).obj()
    job["spec"]["env"]["kwargs"] = deep  # set after building: the builder's deepcopy would recurse 1000 levels
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    assert [str(p) for p in refused.value.problems] == ["spec.env.kwargs.a: nested deeper than 64 levels"]


MISINDENTED = EXAMPLE.replace("    updateEpochs: 4", "   updateEpochs: 4")  # one space short, as a hand types it


@pytest.mark.parametrize(("text", "hint"), [
    # libyaml said only "line 12, column 4: did not find expected key", as kubectl does
    (MISINDENTED, "(in the block mapping from line 7, column 3: is this line indented as its entries are?)"),
    ("spec:\n  env: {id: CartPole-v1\n  seed: 1\n", "(in the flow mapping from line 2, column 8, not closed)"),
    ("spec:\n\tworkers: 2\n", "(a tab: YAML indents with spaces)"),
    ("spec:\n  workers: 2\n    seed: 1\n", "(a line indented deeper than the key above it, or a value holding ': ' that needs quotes?)"),
])
@pytest.mark.parametrize("libyaml", [True, False])
def test_a_yaml_syntax_error_says_where_the_collection_it_broke_began(monkeypatch, libyaml, text, hint):
    monkeypatch.setattr(yaml, "__with_libyaml__", libyaml)
    with pytest.raises(UnreadableSpec) as refused:
        load_documents(text)
    assert str(refused.value).endswith(hint), str(refused.value)


def test_kuberl_validate_says_the_misindented_line_and_its_mapping(tmp_path):
    result = kuberl(tmp_path, "validate", content=MISINDENTED)
    assert (result.returncode, result.stderr) == (1, (f"{tmp_path / 'job.yaml'}: line 12, column 4: did not find expected key"
                                                     " (in the block mapping from line 7, column 3: is this line indented as"
                                                     " its entries are?)\n"))


def test_spec_fields_written_at_the_top_are_named_as_spec_fields_and_missing_headers_say_what_to_write():
    """An SB3 user's first job file, `algorithm: ppo`, `env: …`, `totalTimesteps: …` with no header, was told
    "algorithm: unknown field (an RLTrainingJob has apiVersion, kind, metadata, spec)" and "apiVersion: expected
    'kuberl.dev/v1alpha1' (got None)"."""
    with pytest.raises(InvalidJob) as refused:
        validate_job({"metadata": {"name": "j"}, "algorithm": "ppo", "env": {"id": "CartPole-v1"}, "totalTimesteps": 1000, "foo": 1})
    said = {p.path: p.message for p in refused.value.problems}
    assert said["apiVersion"] == "required field is missing (write apiVersion: kuberl.dev/v1alpha1)"
    assert said["kind"] == "required field is missing (write kind: RLTrainingJob)"
    assert said["algorithm"] == said["env"] == said["totalTimesteps"] == "a field of spec, not of the document: indent it under spec:"
    assert said["foo"] == "unknown field (an RLTrainingJob has apiVersion, kind, metadata, spec)"
    with pytest.raises(InvalidJob, match=r"expected 'RLTrainingJob' \(got 'PyTorchJob'\)"):  # a wrong value keeps its words
        validate_job({**make_job("j").obj(), "kind": "PyTorchJob"})
