"""kuberl.operator.kubeapi.ServerClock: the API server's time from its answers' Date headers."""
import email.utils

import pytest
from kuberl.operator.kubeapi import ServerClock

LOCAL = 1_800_000_000.0


def date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)  # one-second resolution, as servers send it


@pytest.mark.parametrize("skew", [-300.0, -3.0, 3.0, 420.0])
def test_a_skew_of_seconds_or_minutes_is_measured_to_within_a_second(skew):
    clock = ServerClock(clock=lambda: LOCAL)
    for sent in (0.0, 0.3, 0.7, 0.95):  # when within its second the server stamped each answer
        clock.observe(date(LOCAL + skew + sent), received=LOCAL + 0.05)
    assert abs(clock.offset() - skew) <= 1.0
    assert abs(clock.now() - (LOCAL + skew)) <= 1.0


def test_agreement_within_the_threshold_counts_as_none_and_garbage_is_ignored():
    clock = ServerClock(clock=lambda: LOCAL)
    for header in (date(LOCAL - 0.9), date(LOCAL + 1.2), None, "", "not a date", "Mon, 99 Foo 2026 99:99:99 GMT"):
        clock.observe(header, received=LOCAL)
    assert clock.offset() == 0.0 and clock.now() == LOCAL
