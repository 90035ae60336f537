"""Fixtures for the operator tier: the API stand-in with kuberl's CRD, and clients pointed at it (tests.support.fixtures)."""
from tests.support.fixtures import kube_api, local_node, rest, standin  # noqa: F401 — fixtures
