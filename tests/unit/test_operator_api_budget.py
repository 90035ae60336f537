"""The operator's budget of API requests (kubeapi.RateLimiter, client-go's token bucket): `burst` at once,
then `qps` a second, a debt waited for by whoever comes next; from --kube-api-qps and --kube-api-burst."""

from __future__ import annotations

import pytest
from kuberl.cli import build_parser
from kuberl.operator.config import MIN_KUBE_API_QPS, OperatorConfig, operator_config
from kuberl.operator.kubeapi import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_and_the_rest_at_qps():
    clock = Clock()
    limiter = RateLimiter(qps=10, burst=3, clock=clock)
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # the 4th to 6th wait 0.1, 0.2, 0.3 s: each takes the next token to come
    assert [round(limiter.reserve(), 9) for _ in range(3)] == [0.1, 0.2, 0.3]
    clock.now += 0.3  # the debt is paid: the bucket is empty, not full
    assert round(limiter.reserve(), 9) == 0.1
    clock.now += 10  # a quiet spell refills up to the burst, no more
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve() > 0


def test_qps_0_is_no_limit_and_a_burst_below_1_still_lets_one_through():
    clock = Clock()
    assert all(RateLimiter(qps=0, burst=1, clock=clock).reserve() == 0 for _ in range(10_000))
    one = RateLimiter(qps=2, burst=0, clock=clock)
    assert (one.reserve(), one.reserve()) == (0.0, 0.5)


def test_the_flags_reach_the_configuration_and_bad_ones_are_refused(capsys):
    parse = build_parser().parse_args
    config = operator_config(parse(['operator', '--kube-api-qps', '7.5', '--kube-api-burst', '15']))
    assert (config.kube_api_qps, config.kube_api_burst) == (7.5, 15)
    assert operator_config(parse(['operator', '--kube-api-qps', '0'])).kube_api_qps == 0  # no limit, not the default
    default = operator_config(parse(['operator']))
    assert (default.kube_api_qps, default.kube_api_burst) == (OperatorConfig.kube_api_qps, OperatorConfig.kube_api_burst) == (50.0, 100)
    assert operator_config(parse(['operator', '--kube-api-qps', '1'])).kube_api_qps == MIN_KUBE_API_QPS == 1
    # Below 1 a second the operator is blind in effect: at 0.0001 one request every 2.8 hours once the burst is spent.
    for flag, bad, said in [('--kube-api-qps', '-1', 'from 1 up'), ('--kube-api-qps', 'inf', 'from 1 up'),
                            ('--kube-api-qps', 'nan', 'from 1 up'), ('--kube-api-qps', '0.0001', 'from 1 up'),
                            ('--kube-api-qps', '0.99', '0 (no limit) or'), ('--kube-api-burst', '0', 'positive')]:
        with pytest.raises(SystemExit):
            parse(['operator', flag, bad])
        assert f'argument {flag}: expected ' in (err := capsys.readouterr().err) and said in err
