"""The trainer marks in progress.jsonl where a resumed generation starts: at the checkpoint's timesteps, which
`kuberl plot` draws its dotted line at (`runner.resume_marks`); it drew it at the first report after the resume."""

from __future__ import annotations

import json
import os

from kuberl.core import contract
from kuberl.local.curves import progress_records, resume_marks
from trainer_support import one_process_run

from tests.support.jobs import make_job


def test_a_resumed_run_marks_the_step_it_resumed_from(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("ppo", numSteps=16).with_spec(totalTimesteps=4096, workers=1, seed=1).spec()
    trainer, run = one_process_run(spec)
    for _ in range(3):
        run.after_update(trainer.update(False, False), trainer)
    run.save(trainer)
    saved = trainer.counters.global_step
    for _ in range(2):  # trained past the checkpoint, then stopped without saving (a crash): the resume goes back
        run.after_update(trainer.update(False, False), trainer)
        run.report(trainer.counters.global_step)
    trainer, run = one_process_run(spec, restart=1)
    shared, _ = run.load()
    trainer.load_shared(shared)
    run.after_update(trainer.update(False, False), trainer)
    run.report(trainer.counters.global_step)
    with open(os.path.join(run.checkpoint_dir, "progress.jsonl")) as f:
        rows = progress_records(f.read().splitlines())
    [marked] = [r for r in rows if r.get("resumed")]
    assert marked["timesteps"] == saved and marked["restart"] == 1 and marked["episode_return_mean"] is None
    first_report = next(r for r in rows if r["restart"] == 1 and not r.get("resumed"))
    assert first_report["timesteps"] > saved  # where the marker was drawn
    assert resume_marks(rows, "timesteps") == [saved]
    assert json.dumps(marked)  # plain JSON, as every row
