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

# One rank: join the group (or hang first, for `hang` seconds; or, `held`, once a line comes on stdin), and print how
# it ended.
RANK = f"""
import json, os, sys, threading, time
from datetime import timedelta
hang, rendezvous, leave_once, held = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "held"


def leave():  # once rank `leave_once` has checked in on the store, this rank is gone
    import torch.distributed as dist
    from kuberl_trainer.distributed import check_in_key
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=60))
    store.wait([check_in_key(leave_once)])
    os._exit(3)


if leave_once >= 0:
    threading.Thread(target=leave, daemon=True).start()
time.sleep(hang)
from kuberl_trainer.distributed import PeerLost, process_group
if held:  # torch imported: the test says when this rank comes
    sys.stdin.readline()
started = time.monotonic()
try:
    with process_group("gloo", {COLLECTIVE}, rendezvous):
        ended = "joined"
except PeerLost as e:
    ended = "PeerLost: " + str(e)
print(json.dumps({{"seconds": time.monotonic() - started, "ended": ended}}), flush=True)
"""


def start_ranks(world_size: int, hangs: dict[int, float], rendezvous: float = RENDEZVOUS,
                leaves: dict[int, int] | None = None, held: dict[int, float] | None = None) -> dict[int, subprocess.Popen]:
    """`hangs`: seconds a rank sleeps before its rendezvous (< 0: never started); `leaves`: a rank that exits once
    the rank given has checked in on the store; `held`: a rank (and its rendezvous timeout) that comes once a line is
    written to its stdin."""
    port = free_ports(1)
    procs = {}
    for rank in range(world_size):
        if rank in hangs and hangs[rank] < 0:  # never started: a pod still Pending, a node gone
            continue
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs[rank] = subprocess.Popen([sys.executable, "-c", RANK, str(hangs.get(rank, 0.0)),
                                        str((held or {}).get(rank, rendezvous)), str((leaves or {}).get(rank, -1)),
                                        "held" if rank in (held or {}) else "-"], env=env, cwd=REPO,
                                       stdin=subprocess.PIPE if rank in (held or {}) else None,
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


# One rank of a formed gang that all-reduces until it fails; `leave` names the rank that goes first, and how.
GANG = f"""
import json, os, sys, time
import torch, torch.distributed as dist
from kuberl_trainer.distributed import PeerLost, collectives, process_group
leaver, how = int(sys.argv[1]), sys.argv[2]
rank = int(os.environ["RANK"])
try:
    with process_group("gloo", {COLLECTIVE}, 30):
        t = torch.ones(4)
        with collectives():
            for step in range(400):
                if rank == leaver and step == 10:
                    if how == "killed":
                        os._exit(9)  # SIGKILL, OOM: nothing said
                    raise ValueError("boom at step 10")
                dist.all_reduce(t)
                time.sleep(0.02)
    ended = "finished"
except PeerLost as e:
    ended = "PeerLost: " + str(e)
except ValueError as e:
    ended = "ValueError: " + str(e)
print(json.dumps({{"seconds": 0, "ended": ended}}), flush=True)
"""


def start_gang(world_size: int, leaver: int, how: str) -> dict[int, subprocess.Popen]:
    port = free_ports(1)
    return {rank: subprocess.Popen([sys.executable, "-c", GANG, str(leaver), how], cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT,
                                   env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
                                        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                        "OMP_NUM_THREADS": "1"})
            for rank in range(world_size)}


def test_when_rank_0_goes_first_the_others_say_so_not_only_that_a_peer_closed():
    """Rank 0 hosts the store; killed mid-training, its peers said gloo's "Connection closed by peer
    [127.0.0.1]:40511 ... GLHF!", naming an address, not who."""
    procs = start_gang(3, 0, "killed")
    ended = {rank: outcome(procs[rank])["ended"] for rank in (1, 2)}
    for said in ended.values():
        assert said.startswith("PeerLost: rank 0 (it hosts the rendezvous store at 127.0.0.1:") and " left: the store is gone; " in said, ended
        assert "pair.cc" not in said and "GLHF" not in said, ended  # gloo's source line and its guess: the cause is said


def test_a_rank_that_fails_on_its_own_is_named_by_every_peer_rank_0_included():
    procs = start_gang(3, 2, "raised")
    ended = {rank: outcome(procs[rank])["ended"] for rank in (0, 1, 2)}
    assert ended[2] == "ValueError: boom at step 10", ended
    for rank in (0, 1):  # rank 1 blocked on rank 0 alone fails once rank 0's group is gone: the store outlives it
        assert ended[rank].startswith("PeerLost: rank 2 (ValueError: boom at step 10) left first; "), ended


def test_when_rank_0_leaves_during_the_rendezvous_the_ranks_waiting_and_those_still_coming_name_it():
    """A rank waiting for its peers said "not every rank of 3 joined … (a rank that runs but never joins is hung
    …)", blaming a hung peer; one that came after rank 0 had left, that the rendezvous "did not complete"."""
    procs = start_ranks(3, {}, rendezvous=6, leaves={0: 1}, held={2: RENDEZVOUS})  # rank 0 goes once rank 1 joined
    procs[0].wait(timeout=COLLECTIVE + 30)
    procs[2].stdin.write(b"come\n")  # rank 2 comes once rank 0 has gone (a sleep of 6 s guessed when)
    procs[2].stdin.flush()
    ended = {rank: outcome(procs[rank])["ended"] for rank in (1, 2)}
    assert ended[1].startswith("PeerLost: rendezvous: rank 0 (it hosts the rendezvous store at 127.0.0.1:"), ended
    assert ") left before every rank joined (" in ended[1], ended
    assert ended[2].startswith("PeerLost: rendezvous: rank 0 (it hosts the rendezvous store at 127.0.0.1:"), ended
    assert ") did not answer for " in ended[2] and "it never started, or left" in ended[2], ended


# One rank joining with torch._dynamo to import in the background, as the trainer does for a learner that
# needs it; it says whether that import had begun when init_process_group was called (torch reads
# torch._dynamo there once its import has begun, and so waited for the whole import: two gloo ranks of a
# Pong job spent 5 s in the rendezvous), and whether it was under way once the group existed.
IMPORTING = """
import json, sys, threading
import torch.distributed as dist
from kuberl_trainer.distributed import process_group
begun_at_init = []
init_process_group = dist.init_process_group
def observed(*args, **kwargs):
    begun_at_init.append("torch._dynamo" in sys.modules)
    return init_process_group(*args, **kwargs)
dist.init_process_group = observed
with process_group("gloo", 60, 60, background_imports=("torch._dynamo",)):
    importing = "torch._dynamo" in sys.modules or any(t.name == "import torch._dynamo" for t in threading.enumerate())
import torch._dynamo  # the background import's module, once it is done
print(json.dumps({"begun_at_init": begun_at_init, "importing_once_formed": importing}), flush=True)
"""


def start_importing(world_size: int) -> list[dict]:
    port = free_ports(1)
    procs = [subprocess.Popen([sys.executable, "-c", IMPORTING], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
                                   "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "OMP_NUM_THREADS": "1"})
             for rank in range(world_size)]
    said = []
    for proc in procs:
        try:
            out = proc.communicate(timeout=120)[0].decode()
        finally:
            proc.kill()
        lines = [line for line in out.splitlines() if line.startswith('{"begun_at_init"')]
        said.append(json.loads(lines[-1]) if lines else {"output": out})
    return said


def test_a_background_import_starts_once_the_group_is_formed_so_the_rendezvous_does_not_wait_for_it():
    assert start_importing(2) == [{"begun_at_init": [False], "importing_once_formed": True}] * 2


def test_one_rank_forms_no_group_and_starts_its_background_import_at_once():
    assert start_importing(1) == [{"begun_at_init": [], "importing_once_formed": True}]
