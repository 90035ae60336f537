"""Returns in progress lines, the progress bar and a run's last line: one decimal from 10 up, three significant
digits below. FrozenLake-v1 (rewards 0 or 1, success.targetReturn 0.7) printed "eval 0.7" for 0.685, a target not
met, and a custom env's "eval return 1.0 >= 0.9" stood for 0.957."""

import json

import pytest
from kuberl.core.contract import shown_return
from kuberl.core.render import Job
from kuberl.core.rules import validate_job
from kuberl.local import console, runner
from kuberl_trainer import session

from tests.support.jobs import make_job


@pytest.mark.parametrize(("value", "shown"), [
    (None, "-"), (494.95, "494.9"), (-74.8, "-74.8"), (123.45, "123.5"), (10.0, "10.0"),  # as before from 10 up
    (0.685, "0.685"), (0.957, "0.957"), (9.99, "9.99"), (-0.5, "-0.5"), (7.0, "7.0"), (1.0, "1.0"), (0.0, "0.0"),
])
def test_a_return_keeps_the_digits_a_small_target_is_judged_by(value, shown):
    assert shown_return(value) == shown


def test_the_trainer_the_progress_bar_and_the_last_line_write_returns_alike(tmp_path):
    assert session._fmt(0.685) == console._number(0.685) == "0.685"
    job = Job("j", validate_job(make_job("j").env("FrozenLake-v1").with_spec(success={"targetReturn": 0.7}).obj()))
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 1000, "eval_return": 0.685}) + "\n")
    line = runner.summary(job, {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}, {}, 0, 9.0)
    assert "eval return 0.685 (below success.targetReturn 0.7: totalTimesteps ran out first)" in line, line
