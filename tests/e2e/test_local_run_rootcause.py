"""Under torchrun a failure's reason names the worker, the global rank and the child's exception (the
nanoGPT --device=cpu case): in the Failed condition and in restartHistory, also at backoffLimit 0."""

from __future__ import annotations

import json

from tests.e2e.test_local_run_scripts import run_script_job

EXCEPTION = "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"


def test_the_failed_condition_names_worker_rank_and_the_childs_exception(tmp_path):
    code, out, run_dir = run_script_job(tmp_path, "cudacpu", ["torchrun", "/app/cuda_on_cpu.py"], workers=2, procs=2,
                                        env=[{"name": "FAILING_RANK", "value": "3"}])
    assert code == 1, out[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    said = f"worker 1 (cudacpu-1) exit code 1: torchrun: global rank 3 (local rank 1) failed first, exit code 1: {EXCEPTION}"
    assert said in failed["message"], failed["message"]
    assert [said in h["message"] for h in status["restartHistory"]] == [True], status["restartHistory"]
