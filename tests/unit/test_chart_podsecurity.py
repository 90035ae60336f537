"""The chart's podSecurity and allowedServiceAccounts values reach the
operator as `kuberl operator` flags, parsed by the real CLI; the schema
refuses a level that does not exist."""

import pytest
from chart_support import (
    CHART,
    HelmError,
    helm,
    operator_container,
    parse_operator_args,
    render,
)


def operator_args(values: dict | None = None):
    _, container = operator_container(render(values))
    return parse_operator_args(container["args"])


def test_defaults_are_baseline_and_any_service_account():
    parsed = operator_args()
    assert (parsed.pod_security, parsed.allowed_service_accounts, parsed.forbid_pod_fields) == ("baseline", None, None)


def test_values_reach_the_operator():
    parsed = operator_args({"podSecurity": "restricted", "allowedServiceAccounts": ["default", "rl-trainer"],
                            "forbidPodFields": ["nodeName", "tolerations"]})
    assert (parsed.pod_security, parsed.allowed_service_accounts) == ("restricted", "default,rl-trainer")
    assert parsed.forbid_pod_fields == {"nodeName", "tolerations"}


@pytest.mark.parametrize(("values", "expected"), [
    ({"podSecurity": "strict"}, "podSecurity"),
    ({"allowedServiceAccounts": ["Not_A_Name"]}, "allowedServiceAccounts"),
    ({"forbidPodFields": ["hostNetwork"]}, "forbidPodFields"),
])
def test_schema_refuses_bad_values(values, expected):
    with pytest.raises(HelmError) as refused:
        helm("template", "kuberl", str(CHART), values=values)
    assert expected in str(refused.value)
