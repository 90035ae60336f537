"""Every pod runs with PYTHONUNBUFFERED=1, which makes print() two writes, the text and its newline. Ranks sharing a
pod's stdout (procsPerWorker > 1, through torchrun) then merged lines, `kuberl run` showing
"[worker 0] kuberl trainer: rank 3 ready …kuberl trainer: rank 1 ready …" and then an empty "[worker 0] " line
(pong-ppo-gpu.yaml here; `kubectl logs` alike). A rank launched writes each line in one write."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from kuberl_trainer.startup import one_write_per_line


class Writes(io.RawIOBase):
    """A raw stream recording each write, as the kernel sees them."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.writes.append(bytes(b))
        return len(b)


def test_a_line_is_one_write_under_pythonunbuffered():
    raw = Writes()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # how -u / PYTHONUNBUFFERED opens stdout
    print("rank 3 ready", file=stream)
    assert raw.writes == [b"rank 3 ready", b"\n"]  # the merge's cause
    raw.writes.clear()
    one_write_per_line(stream)
    print("rank 3 ready", file=stream)
    print("a", "b", file=stream)
    assert raw.writes == [b"rank 3 ready\n", b"a b\n"]


def test_ranks_sharing_a_stdout_never_merge_lines():
    rank = ("import sys\nfrom kuberl_trainer.startup import one_write_per_line\none_write_per_line(sys.stdout)\n"
            "for i in range(300):\n    print(f'rank {sys.argv[1]} line {i} ' + 'x' * 200)\n")
    read, write = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ranks = [subprocess.Popen([sys.executable, "-c", rank, str(r)], stdout=write, env=env) for r in range(4)]
    os.close(write)
    with os.fdopen(read) as out:
        lines = out.read().splitlines()
    assert all(p.wait(timeout=60) == 0 for p in ranks)
    assert len(lines) == 1200
    assert all(line.startswith("rank ") and line.count(" line ") == 1 and line.endswith("x" * 200) for line in lines)
