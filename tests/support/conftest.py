"""The stand-in's own tests use the fixtures the operator tier uses (tests.support.fixtures)."""
from tests.support.fixtures import kube_api, local_node, rest, standin  # noqa: F401 — fixtures
