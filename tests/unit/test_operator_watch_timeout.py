"""`kuberl operator --watch-timeout` takes whole seconds from 1 to MAX_WATCH_TIMEOUT, and refuses anything else
before kopf starts, naming the flag and the range: past the range the API server's watch timeout (an int64 of
nanoseconds) wraps, and far past it the client's bounds overflow a float inside kopf's startup handler. The low
end is safe: each watch's bounds (WatchBounds) stay finite and ordered, and --watch-timeout 1 runs the operator
tiers (tests/operator/test_operator_watch_error.py); kopf's own inactivity timeout, which crashed kopf when
lowered, is no flag's to set."""

import math

import pytest
from kuberl import cli
from kuberl.operator.config import MAX_WATCH_TIMEOUT, WatchBounds, operator_config


def configured(*flags: str):
    return operator_config(cli.build_parser().parse_args(["operator", *flags]))


@pytest.mark.parametrize("seconds", [1, 2, 300, MAX_WATCH_TIMEOUT])
def test_a_watch_timeout_in_range_gives_finite_ordered_bounds(seconds):
    bounds = configured("--watch-timeout", str(seconds)).watch
    assert bounds == WatchBounds(seconds)
    timeouts = (bounds.server_timeout, bounds.client_timeout, bounds.connect_timeout, bounds.inactivity_timeout,
                bounds.silent_bound)
    assert all(math.isfinite(t) and t > 0 for t in timeouts)
    assert bounds.server_timeout < bounds.client_timeout < bounds.silent_bound


@pytest.mark.parametrize("seconds", [MAX_WATCH_TIMEOUT + 1, pytest.param(10**400, id="10**400")])
def test_a_watch_timeout_past_the_range_is_refused_at_start_naming_the_flag_and_the_range(seconds):
    with pytest.raises(SystemExit) as refused:
        configured("--watch-timeout", str(seconds))
    message = str(refused.value.code)
    assert message.startswith(f"kuberl operator: --watch-timeout={seconds}: expected whole seconds from 1 to {MAX_WATCH_TIMEOUT}")
    assert "operator.watchTimeoutSeconds" in message


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "soon"])
def test_a_watch_timeout_that_is_no_positive_whole_number_is_refused_by_the_command_line(text, capsys):
    with pytest.raises(SystemExit) as refused:
        configured("--watch-timeout", text)
    assert refused.value.code == 2
    assert "--watch-timeout" in capsys.readouterr().err
