"""bench/probe.py's step-time spread: what ranks that sync after every step pay for it."""

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from probe import step_spread


def test_the_slower_of_two_ranks_costs_the_mean_of_every_pairs_maximum_over_the_mean():
    durations = [0.5, 0.7, 0.6, 1.1, 0.6]
    by_every_pair = np.mean([max(a, b) for a, b in itertools.product(durations, repeat=2)])
    spread = step_spread(durations)
    assert spread["slower_of_two_extra"] == pytest.approx(by_every_pair - np.mean(durations))
    assert spread["steps"] == 5 and spread["mean"] == pytest.approx(0.7)


def test_steps_that_never_vary_cost_no_wait_and_too_few_steps_say_nothing():
    assert step_spread([0.3] * 10)["slower_of_two_extra"] == pytest.approx(0.0)
    assert step_spread([0.3]) is None
