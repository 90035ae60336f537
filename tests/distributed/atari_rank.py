"""One trainer rank (`python -m kuberl_trainer`'s very main()), which also
leaves what the Atari tests compare in its filesystem root: final
parameters, every update's losses, and its own /metrics page as served
over HTTP at the end."""

import json
import os
import sys
import urllib.request

import torch
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session

ROOT = os.environ["KUBERL_FS_ROOT"]
losses: list[dict] = []
original_after_update = session.TrainingSession.after_update
original_finish = session.TrainingSession.finish


def after_update(self, report, trainer):
    losses.append(dict(report.losses))
    return original_after_update(self, report, trainer)


def finish(self, trainer, outcome):
    torch.save({k: v.cpu() for k, v in trainer.agent.state_dict().items()}, os.path.join(ROOT, "params.pt"))
    with open(os.path.join(ROOT, "losses.json"), "w") as f:
        json.dump(losses, f)
    port = self.spec.metrics.port + self.ctx.local_rank
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    with open(os.path.join(ROOT, "metrics.txt"), "wb") as f:
        f.write(page)
    return original_finish(self, trainer, outcome)


session.TrainingSession.after_update = after_update
session.TrainingSession.finish = finish
entry.exit_process(entry.main(sys.argv[1:]))  # as a pod's trainer ends: no interpreter teardown
