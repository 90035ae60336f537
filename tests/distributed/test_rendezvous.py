"""Every rank joining is bounded by the rendezvous timeout, not the collective one: real gloo
processes on 127.0.0.1 with a rank that never joins (absent, or running but hung before its
rendezvous, as a rank stuck in CUDA set-up is). Before, rank 0 waited in init_process_group for the
collective timeout (1800 s by default) and then said the rendezvous had taken the rendezvous timeout."""

import json
import os
import subprocess
import sys

from .support import REPO, free_ports

COLLECTIVE, RENDEZVOUS = 15, 3

# One rank: join the group (or hang first, for `hang` seconds), and print how it ended.
RANK = f"""
import json, sys, time
hang, rendezvous = float(sys.argv[1]), float(sys.argv[2])
time.sleep(hang)
from kuberl_trainer.distributed import PeerLost, process_group
started = time.monotonic()
try:
    with process_group("gloo", {COLLECTIVE}, rendezvous):
        ended = "joined"
except PeerLost as e:
    ended = "PeerLost: " + str(e)
print(json.dumps({{"seconds": time.monotonic() - started, "ended": ended}}), flush=True)
"""


def start_ranks(world_size: int, hangs: dict[int, float], rendezvous: float = RENDEZVOUS) -> dict[int, subprocess.Popen]:
    port = free_ports(1)
    procs = {}
    for rank in range(world_size):
        if rank in hangs and hangs[rank] < 0:  # never started: a pod still Pending, a node gone
            continue
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs[rank] = subprocess.Popen([sys.executable, "-c", RANK, str(hangs.get(rank, 0.0)), str(rendezvous)], env=env, cwd=REPO,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return procs


def outcome(proc: subprocess.Popen) -> dict:
    try:
        out = proc.communicate(timeout=COLLECTIVE + 30)[0].decode()
    finally:
        proc.kill()
    said = [line for line in out.splitlines() if line.startswith('{"seconds"')]
    return json.loads(said[-1]) if said else {"ended": None, "output": out}


def test_rank_0_alone_gives_up_at_the_rendezvous_timeout_naming_the_absent_rank():
    rank0 = start_ranks(2, {1: -1})[0]
    ended = outcome(rank0)
    assert ended["ended"].startswith("PeerLost: rendezvous: rank 1 of 2 never joined in 3."), ended
    assert RENDEZVOUS <= ended["seconds"] < RENDEZVOUS + 4, ended  # not the collective timeout (15 s)


def test_ranks_that_joined_give_up_at_the_rendezvous_timeout_when_a_running_rank_hangs_before_joining():
    procs = start_ranks(3, {1: 60.0})  # rank 1 runs, but reaches its rendezvous only after a minute
    try:
        joined = {rank: outcome(procs[rank]) for rank in (0, 2)}
    finally:
        procs[1].kill()
    assert joined[0]["ended"].startswith("PeerLost: rendezvous: rank 1 of 3 never joined in 3."), joined
    assert joined[2]["ended"].startswith("PeerLost: rendezvous:"), joined
    for rank in (0, 2):
        assert joined[rank]["seconds"] < RENDEZVOUS + 4, joined  # not the collective timeout (15 s)


def test_a_rank_that_comes_late_but_within_the_rendezvous_timeout_joins():
    procs = start_ranks(2, {1: 2.0}, rendezvous=30)  # time to import torch on a busy machine
    ended = [outcome(procs[rank]) for rank in (0, 1)]
    assert [e["ended"] for e in ended] == ["joined", "joined"], ended
