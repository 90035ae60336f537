"""The checked-in CRD: fresh, documented, and bounded the way a real API
server's CEL cost estimator needs it."""

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kuberl import cli
from kuberl.core import names
from kuberl.core.crd import crd
from kuberl.core.rules import (
    CROSS_FIELD_RULES,
    immutable_fields,
    optional_immutable_fields,
)

from tests.support.crdschema import schema_nodes, validate

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "manifests" / "crd.yaml"
# Kubernetes owns these; the CRD only narrows metadata.name.
EXEMPT = {".apiVersion", ".kind", ".metadata"}
STRUCTURAL_KEYWORDS = {
    "type", "description", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "enum", "minItems", "maxItems", "maxProperties",
    "items", "properties", "required", "additionalProperties", "nullable", "format", "anyOf",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations", "x-kubernetes-int-or-string",
}


def checked_in():
    return yaml.safe_load(CRD_FILE.read_text())


def root_schema(doc=None):
    return (doc or checked_in())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_checked_in_crd_equals_kuberl_crd_output():
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(["crd"]) == 0
    assert CRD_FILE.read_text() == printed.getvalue(), "manifests/crd.yaml is stale: run `make manifests`"
    assert checked_in() == crd()


def test_every_field_has_a_description():
    missing = [p for p, node in schema_nodes(root_schema()) if p and not p.startswith(tuple(EXEMPT)) and not node.get("description")]
    assert missing == []


def test_every_list_map_and_string_is_bounded():
    """Unbounded lists, maps and strings make the API server assume the largest
    request size when it estimates CEL cost; a CRD over budget is refused."""
    unbounded = []
    for path, node in schema_nodes(root_schema()):
        if path.startswith((*EXEMPT, ".status")):
            continue
        if node.get("type") == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: list without maxItems")
        if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path}: string without maxLength or enum")
        if node.get("x-kubernetes-int-or-string") and "maxLength" not in node:
            unbounded.append(f"{path}: int-or-string without maxLength")
        if isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
    assert unbounded == []


def test_status_lists_are_bounded_too():
    for path, node in schema_nodes(root_schema()["properties"]["status"], ".status"):
        assert node.get("type") != "array" or "maxItems" in node, path


def test_schema_is_structural():
    for path, node in schema_nodes(root_schema()):
        assert set(node) <= STRUCTURAL_KEYWORDS, f"{path}: {set(node) - STRUCTURAL_KEYWORDS}"
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node:
            assert node.get("x-kubernetes-preserve-unknown-fields"), f"{path}: an empty object would prune everything"
        if "default" in node and node.get("type") == "object" and "properties" in node:
            pytest.fail(f"{path}: object default hides nested defaults")


def test_every_rule_has_a_message_and_a_known_reason():
    spec = root_schema()["properties"]["spec"]
    for path, node in schema_nodes(root_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message") or rule.get("messageExpression"), (path, rule)
            assert rule.get("reason", "FieldValueInvalid") in {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}
            if "fieldPath" in rule:
                target = spec
                for part in rule["fieldPath"].strip(".").split("."):
                    target = target["properties"][part]  # a fieldPath must name a field of the schema


def test_every_cross_field_rule_and_every_immutable_field_is_in_the_crd():
    spec = root_schema()["properties"]["spec"]
    rules = {r["rule"] for r in spec["x-kubernetes-validations"]}
    assert {r.cel for r in CROSS_FIELD_RULES} <= rules
    for field in immutable_fields():
        assert {"rule": "self == oldSelf", "message": "immutable while the job exists", "reason": "FieldValueForbidden"} in \
            spec["properties"][field]["x-kubernetes-validations"], field
    for field in optional_immutable_fields():
        assert f"has(self.{field}) == has(oldSelf.{field})" in rules, field
    assert set(optional_immutable_fields()) == {"algorithm", "env", "totalTimesteps", "ppo", "dqn", "sac", "td3", "procsPerWorker", "image", "queueName"}


def test_name_is_capped_so_derived_names_fit():
    name = root_schema()["properties"]["metadata"]["properties"]["name"]
    assert name["maxLength"] == names.MAX_JOB_NAME
    longest = "a" * names.MAX_JOB_NAME
    for derived in (names.pvc_name(longest), names.configmap_name(longest), names.pod_name(longest, names.MAX_WORKERS - 1),
                    names.networkpolicy_name(longest), names.podgroup_name(longest), names.service_name(longest)):
        assert len(derived) <= 63 and re.match(name["pattern"], derived)


def test_crd_identity_printer_columns_and_status():
    doc = checked_in()
    assert doc["metadata"]["name"] == names.CRD_NAME
    assert doc["spec"]["names"]["shortNames"] == ["rltj"]
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert {"Phase", "Workers", "Restarts", "Timesteps", "Return", "Age"} <= set(columns)
    spec_fields = root_schema()["properties"]["spec"]["properties"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"].startswith(".spec."):
            assert column["jsonPath"].split(".")[2] in spec_fields


def test_crd_is_a_valid_customresourcedefinition():
    kubernetes_validate.validate(checked_in(), "1.32", strict=True)


@pytest.mark.parametrize(("name", "valid"), [("cartpole", True), ("cartpole\n", False), ("..\n", False)])
def test_the_api_stand_in_matches_the_wandb_name_pattern_as_the_api_server_does(name, valid):
    """The API server matches a schema's pattern with Go's regexp, whose `$` is the end of the text; Python's also
    matches before a final newline, so the stand-in let spec.tracking.wandb.project "cartpole\\n" through, which the
    server (and kuberl's own model) refuses."""
    wandb = root_schema()["properties"]["spec"]["properties"]["tracking"]["properties"]["wandb"]["properties"]
    for field in ("project", "entity"):
        errors = []
        validate(name, wandb[field], f"spec.tracking.wandb.{field}", errors)
        assert [e.field for e in errors] == ([] if valid else [f"spec.tracking.wandb.{field}"]), errors
