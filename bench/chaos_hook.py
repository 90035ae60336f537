"""A fault injected into a trainer rank, at a named point, once: the chaos harness (bench/chaos.py) mounts this
file into each pod as `sitecustomize.py` (a ConfigMap volume on PYTHONPATH), so Python imports it before the
trainer. `STATE` (filled in by the harness) is a host directory holding `plan.json`:

    {"point": "ckpt-rename", "rank": 0, "nth": 2, "signal": 9}

At the `nth` time the rank named reaches `point`, the hook records `fired.json` (created exclusively: a plan fires
once across every generation and rerun) and sends the signal to its own process. A plan with `"sleep": seconds`
instead waits that long every time the point is reached, and fires nothing: a slow volume (`ckpt-fsync`: every
checkpoint takes that much longer to save). Points:

- `rendezvous`: entering torch.distributed.init_process_group
- `update`: entering the session's after_update (an update boundary)
- `save`: entering the session's save (before deterministic mode's gather)
- `ckpt-fsync`: fsync of a checkpoint's temp file (written, not yet synced nor renamed)
- `ckpt-rename` / `ckpt-renamed`: just before / after a checkpoint's temp file is renamed into place
- `prune`: before a checkpoint file is deleted (pruning beyond spec.checkpoint.keep)
- `eval`: entering rank 0's evaluation
- `final-rename` / `final-renamed`: just before / after final-model.pt is renamed into place
- `enospc` / `final-enospc`: a checkpoint's / the final model's write fails with ENOSPC (no signal; the disk filled)
"""

import errno
import importlib.abc
import json
import os
import re
import sys
import time

STATE = "@STATE@"
CHECKPOINT = re.compile(r"^ckpt-\d{10}\.pt$")
TEMP = re.compile(r"^\.tmp-.*\.part$")


def _load_plan():
    try:
        with open(os.path.join(STATE, "plan.json")) as f:
            plan = json.load(f)
    except (OSError, ValueError):
        return None
    return plan if os.environ.get("RANK") == str(plan.get("rank")) else None


PLAN = _load_plan()
_seen: dict[str, int] = {}


def reached(point: str, detail: str = "") -> bool:
    """Whether the plan fires here (and it then has fired: recorded, and the signal sent)."""
    if PLAN is None or PLAN["point"] != point:
        return False
    if PLAN.get("sleep"):
        time.sleep(PLAN["sleep"])
        return False
    _seen[point] = _seen.get(point, 0) + 1
    if _seen[point] != PLAN.get("nth", 1):
        return False
    try:
        fd = os.open(os.path.join(STATE, "fired.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    record = {**PLAN, "pid": os.getpid(), "detail": detail, "generation": os.environ.get("KUBERL_RESTART")}
    os.write(fd, json.dumps(record).encode())
    os.fsync(fd)
    os.close(fd)
    if PLAN.get("signal"):
        os.kill(os.getpid(), PLAN["signal"])
    return True


if PLAN is not None:
    _replace, _unlink, _fsync, _write = os.replace, os.unlink, os.fsync, os.write

    def replace(src, dst, *args, **kwargs):
        name = os.path.basename(os.fsdecode(dst))
        kind = "ckpt" if CHECKPOINT.match(name) else "final" if name == "final-model.pt" else None
        if kind:
            reached(f"{kind}-rename", name)
        result = _replace(src, dst, *args, **kwargs)
        if kind:
            reached(f"{kind}-renamed", name)
        return result

    def unlink(path, *args, **kwargs):
        if isinstance(path, (str, bytes, os.PathLike)) and CHECKPOINT.match(os.path.basename(os.fsdecode(path))):
            reached("prune", os.path.basename(os.fsdecode(path)))
        return _unlink(path, *args, **kwargs)

    def _temp_name(fd) -> str:
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return ""

    def fsync(fd):
        if PLAN["point"] == "ckpt-fsync" and TEMP.match(_temp_name(fd)):
            reached("ckpt-fsync", _temp_name(fd))
        return _fsync(fd)

    os.replace, os.unlink, os.fsync = replace, unlink, fsync

    class _PatchAfterImport(importlib.abc.MetaPathFinder):
        """Patches a module once it has been executed (the trainer's modules import after this file)."""

        def __init__(self, patches):
            self.patches = patches

        def find_spec(self, name, path, target=None):
            if name not in self.patches:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            execute, patch = spec.loader.exec_module, self.patches.pop(name)

            def exec_module(module):
                execute(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    def _wrap(owner, attribute, point):
        original = getattr(owner, attribute)

        def wrapped(*args, **kwargs):
            reached(point)
            return original(*args, **kwargs)

        setattr(owner, attribute, wrapped)

    def _patch_session(module):
        _wrap(module.TrainingSession, "after_update", "update")
        _wrap(module.TrainingSession, "save", "save")
        _wrap(module.TrainingSession, "evaluate", "eval")

    def _patch_distributed(module):
        _wrap(module, "init_process_group", "rendezvous")

    def _patch_checkpoint(module):
        if PLAN["point"] not in ("enospc", "final-enospc"):
            return
        original = module.write_atomic

        def write_atomic(path, data):
            name = os.path.basename(path)
            point = "enospc" if CHECKPOINT.match(name) else "final-enospc" if name == "final-model.pt" else None
            if point and reached(point, name):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            return original(path, data)

        module.write_atomic = write_atomic

    sys.meta_path.insert(0, _PatchAfterImport({
        "kuberl_trainer.session": _patch_session,
        "torch.distributed.distributed_c10d": _patch_distributed,
        "kuberl_trainer.checkpoint": _patch_checkpoint,
    }))
