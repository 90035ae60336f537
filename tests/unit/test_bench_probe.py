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


def test_the_pair_ceiling_runs_each_update_at_two_busy_cores_speed_then_adds_the_syncs():
    from bench import pair_ceiling, pair_note

    def result(rate, floor=None):
        return {"steps_per_second_rank": rate, "breakdown_seconds": {"update_total": 0.020}, "syncs_per_update": 20,
                "allreduce_floor_seconds": floor}

    probes = {"ppo-plain": [result(10_000)], "ppo-ddp2": [result(8_000, 0.0001)] * 2, "ppo-pair": [result(9_000)] * 2}
    pair, ceiling = pair_ceiling(probes, "ppo")
    assert pair == pytest.approx(1.8)
    # one update side by side: 2 x 20 ms / 1.8; then 20 syncs of 0.1 ms
    assert ceiling == pytest.approx(2 * 0.020 / (2 * 0.020 / 1.8 + 20 * 0.0001))
    assert "1.80x one alone" in pair_note(probes, "ppo", 1.6)
    assert pair_ceiling({**probes, "ppo-pair": []}, "ppo") is None and pair_note({**probes, "ppo-pair": []}, "ppo", 1.6) == ""


def test_every_side_of_a_dqn_solve_run_explores_over_the_same_32000_steps_of_a_budget_no_side_spends():
    """The cap, not a step budget, ends an unsolved solve run; the exploration schedule stays the one the
    bench measured before (0.16 of 200,000 steps), on SB3's side and kuberl's alike."""
    from bench import (
        KUBERL_DQN_CARTPOLE,
        KUBERL_PPO_CARTPOLE,
        RLZOO_DQN_CARTPOLE,
        SOLVE_BUDGET,
        solve_settings,
    )

    sb3 = solve_settings("dqn", RLZOO_DQN_CARTPOLE)
    kuberl = solve_settings("dqn", KUBERL_DQN_CARTPOLE)
    assert sb3["exploration_fraction"] * SOLVE_BUDGET["dqn"] == pytest.approx(32_000) == 0.16 * 200_000
    assert kuberl["explorationFraction"] == sb3["exploration_fraction"]
    assert "explorationFraction" not in sb3 and "exploration_fraction" not in kuberl
    assert {k: v for k, v in kuberl.items() if k != "explorationFraction"} == {
        k: v for k, v in KUBERL_DQN_CARTPOLE.items() if k != "explorationFraction"}
    assert SOLVE_BUDGET["dqn"] / 200 > 4 * 2_022  # more steps than 2 ranks at twice today's rate take in the cap
    assert solve_settings("ppo", KUBERL_PPO_CARTPOLE) is KUBERL_PPO_CARTPOLE


def test_the_median_time_to_solve_counts_a_seed_never_solved_as_slower_than_every_solved_one():
    """SB3 solved 3 DQN seeds of 5 (102, 188, 116 s): the median of those three alone, 116 s, hid two
    seeds that never solved within the cap; over every seed it is 188 s."""
    import math

    from bench import fmt, median_to_solve

    def run(seconds, side="sb3"):
        return {"algorithm": "dqn", "side": side, "solved_seconds": seconds}

    runs = [run(102.1), run(None), run(None), run(187.7), run(115.5), run(20.0, "kuberl-1")]
    assert median_to_solve(runs, "dqn", "sb3") == 187.7
    assert median_to_solve(runs, "dqn", "kuberl-1") == 20.0
    assert median_to_solve(runs + [run(None)], "dqn", "sb3") == math.inf and fmt(math.inf) == "never"
    assert median_to_solve(runs, "ppo", "sb3") is None


def test_the_scaling_rounds_give_a_95_percent_interval():
    from bench import interval_note, mean_interval, t_975

    values = [1.6, 1.8, 1.6, 1.8]  # mean 1.7, sample std 0.11547; t(0.975, 3 degrees of freedom) = 3.182
    mean, low, high = mean_interval(values)
    assert mean == pytest.approx(1.7) and high - mean == pytest.approx(3.182 * 0.115470 / 2, rel=1e-4) and mean - low == pytest.approx(high - mean)
    assert mean_interval([1.7]) is None
    # 15 rounds have 14 degrees of freedom: t = 2.145, not the normal's 1.96 (an interval 9% too narrow)
    assert t_975(14) == 2.145 and t_975(30) == 2.042
    for degrees, exact in ((40, 2.0211), (60, 2.0003), (120, 1.9799)):  # the usual table's values
        assert t_975(degrees) == pytest.approx(exact, abs=0.001)

    def probes(ddp_rates):
        return {"ppo-plain": [{"round_rates": [1000.0] * len(ddp_rates)}], "ppo-ddp2": [{"round_rates": ddp_rates}] * 2}

    assert interval_note(probes([1600.0, 1800.0, 1600.0, 1800.0]), "ppo") == "; the rounds' mean 1.70x, 95% interval 1.52x to 1.88x"
    assert interval_note(probes([1500.0, 1510.0, None]), "ppo").startswith("; the rounds' mean 1.50x")  # a failed round is left out
    assert interval_note(probes([1500.0]), "ppo") == ""


def test_the_bench_refuses_a_round_count_below_one_by_name(capsys):
    from bench import main

    for bad in ("0", "-3", "x", "1e9"):
        with pytest.raises(SystemExit) as refused:
            main(["--rounds", bad])
        assert refused.value.code == 2 and "argument --rounds" in capsys.readouterr().err
