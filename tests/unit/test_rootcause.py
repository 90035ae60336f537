"""Under torchrun a failure's reason names the failing worker, the global rank and the child's exception
line: torchrun's "Root Cause" block gives the rank and exit code, the rank's last `[rankN]:` line (torch's
excepthook prefix) the exception. The log below has the shape of nanoGPT's train.py run with
--device=cpu under torchrun (its DDP path calls torch.cuda.set_device on a CPU-only torch): written here
from torch 2.13's own formats, not copied."""

from __future__ import annotations

import sys
from dataclasses import replace

from kuberl.core import lifecycle as lc
from kuberl.core import rootcause
from kuberl.local.process import LOG_TAIL_BYTES, Launch, PodProcess

from tests.support.jobs import make_job

SITE = "/opt/conda/lib/python3.11/site-packages/torch"
EXCEPTION = "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"


def rank_traceback(rank: int, last: str) -> list[str]:
    return [f"[rank{rank}]: {line}" for line in [
        "Traceback (most recent call last):", '  File "/workspace/nanoGPT/train.py", line 93, in <module>',
        "    torch.cuda.set_device(device)", f'  File "{SITE}/cuda/__init__.py", line 689, in set_device',
        "    torch._C._cuda_setDevice(device)", "    ^^^^^^^^^^^^^^^^^^^^^^^^", last]]


def torchrun_log(failing: int = 1, local: int = 1) -> str:
    """66 lines: the launcher's banner, the children's output and tracebacks, then torchrun's own."""
    lines = [f"W1127 06:29:19.441000 5642 {SITE}/distributed/run.py:874] " + "*" * 40] * 4
    lines += [f"overriding config with config/train_shakespeare_char.py: line {i}" for i in range(10)]
    lines += rank_traceback(failing, EXCEPTION) + rank_traceback(1 - failing, EXCEPTION)
    lines += [(f"E1127 06:29:21.589000 5642 {SITE}/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)"
              f" local_rank: {local} (pid: 5663) of binary: /opt/conda/bin/python3.11"),
              "Traceback (most recent call last):", '  File "/opt/conda/bin/torchrun", line 6, in <module>',
              "    sys.exit(main())", "             ^^^^^^"]
    lines += [f'  File "{SITE}/distributed/{p}", line {n}, in wrapper\n    return f(*args, **kwargs)'
              for p, n in (("elastic/multiprocessing/errors/__init__.py", 367), ("run.py", 1028), ("run.py", 1019),
                           ("launcher/api.py", 194), ("launcher/api.py", 383))]
    lines += ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED", "-" * 60,
              "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60, "Root Cause (first observed failure):", "[0]:",
              "  time      : 2026-11-27_06:29:21", "  host      : nanogpt-0.nanogpt.default.svc",
              f"  rank      : {failing} (local_rank: {local})", "  exitcode  : 1 (pid: 5663)", "  error_file: <N/A>",
              "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60]
    return "\n".join(lines)


def test_the_root_cause_names_the_rank_and_its_exception():
    assert rootcause.describe(torchrun_log()) == (
        f"torchrun: global rank 1 (local rank 1) failed first, exit code 1: {EXCEPTION}")
    # the second pod's ranks are 2 and 3: the global rank, not the local one
    assert rootcause.parse(torchrun_log(failing=3, local=1).replace("[rank0]", "[rank2]")).exception == EXCEPTION


def test_a_kubelets_2_kib_tail_says_where_the_exception_is():
    tail = torchrun_log()[-LOG_TAIL_BYTES:]
    assert "[rank1]" not in tail
    said = rootcause.describe(tail)
    assert said.startswith("torchrun: global rank 1 (local rank 1) failed first, exit code 1;")
    assert "grep '^\\[rank1\\]:'" in said


def test_the_line_is_escaped_and_bounded():
    hostile = rank_traceback(1, "ValueError: \x1b[2J\x1b[31mred\r\x00" + "y" * 5000)
    said = rootcause.describe("\n".join([*hostile, *torchrun_log().splitlines()[-9:]]))
    assert "\x1b" not in said and "\\x1b[2J" in said and "\\r" in said and "\\x00" in said
    assert len(said) < rootcause.LINE_LIMIT + 100


def test_a_rank_field_of_digits_is_read_without_searching_it_through(monkeypatch):
    """The rank field was searched for `N (local_rank: M)` from each of its digits: a pod's 4 KiB termination message
    of one (the kubelet's limit) took 0.26 s of the operator's event loop at every reconcile that read it. The places
    the rank pattern is tried from are counted, not timed (a timed bound fails on a loaded CI machine): a search
    tries it from every one of the field's 4,000 digits, a match from its start alone."""
    pattern, starts = rootcause._RANK, []

    class Counted:
        def match(self, text, pos=0, *args):
            starts.append(1)
            return pattern.match(text, pos, *args)

        def search(self, text, pos=0, *args):
            starts.append(len(text) - pos + 1)
            return pattern.search(text, pos, *args)

    monkeypatch.setattr(rootcause, "_RANK", Counted())
    message = "Root Cause (first observed failure):\n[0]:\n  rank      : " + "1" * 4000 + "\n  exitcode  : 1\n"
    assert rootcause.describe(message) is None
    assert starts and sum(starts) <= len(starts), starts  # a search from each digit tried it 4,001 times
    assert rootcause.describe("Root Cause (first observed failure):\n[0]:\n  rank      : 3 (local_rank: 1)\n").startswith(
        "torchrun: global rank 3 (local rank 1) failed first")


def test_no_root_cause_no_description():
    assert rootcause.describe("Traceback (most recent call last):\nValueError: boom") is None
    assert rootcause.describe("Root Cause (first observed failure):\n[0]:\n  rank : x\n") is None


def terminated_pod(rank: int, exit_code: int, message: str) -> dict:
    return {"metadata": {"name": f"nanogpt-{rank}", "labels": {"kuberl.dev/rank": str(rank), "kuberl.dev/restart": "0"}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}}]}}


def test_the_failed_condition_and_restart_history_name_worker_rank_and_exception_at_backoff_limit_0():
    """nanoGPT under kuberl run with backoffLimit 0: the condition held torchrun's block, the history nothing."""
    spec = make_job().env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).run_policy(backoffLimit=0).spec()
    up = lc.decide(spec, {"generation": 0}, [], None, 0.0).status
    running = [replace(lc.observed_pod(terminated_pod(0, 0, "")), name=f"nanogpt-{r}", rank=r, phase="Running",
                       exit_code=None, reason=None, ready=True, start_time=0.0) for r in range(2)]
    up = lc.decide(spec, up, running, None, 1.0).status
    decision = lc.decide(spec, up, [running[0], lc.observed_pod(terminated_pod(1, 1, torchrun_log(failing=3)))], None, 2.0)
    assert decision.phase == lc.FAILED
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    expected = f"worker 1 (nanogpt-1) exit code 1: torchrun: global rank 3 (local rank 1) failed first, exit code 1: {EXCEPTION}"
    assert expected in failed["message"]
    (entry,) = decision.status["restartHistory"]
    assert expected in entry["message"] and entry["generation"] == 0


def test_kuberl_runs_node_keeps_the_ranks_line_the_2_kib_tail_lost(tmp_path):
    """The local node reads every line: the failing rank's last `[rankN]:` line comes first in its message."""
    log = tmp_path / "log.txt"
    log.write_text(torchrun_log() + "\n")
    code = f"import sys; sys.stdout.write(open({str(log)!r}).read()); sys.exit(1)"
    process = PodProcess(Launch([sys.executable, "-c", code], {}, str(tmp_path), str(tmp_path / "termination-log")),
                         "[worker 0]", out=open(tmp_path / "out", "w"))  # noqa: SIM115
    assert process.wait(60) == 1
    process._reader.join(10)
    message = process.termination_message()
    assert rootcause.describe(message) == f"torchrun: global rank 1 (local rank 1) failed first, exit code 1: {EXCEPTION}"


def test_a_child_that_failed_before_its_process_group_is_read_without_a_prefix():
    """pytorch/examples' ddp-tutorial-series multinode.py calls torch.cuda.set_device before init_process_group:
    no `[rankN]:` prefix yet, so the last exception line above torchrun's own report stands in, marked."""
    plain = [line.removeprefix("[rank1]: ") for line in rank_traceback(1, EXCEPTION)]
    log = torchrun_log().replace("\n".join(rank_traceback(1, EXCEPTION) + rank_traceback(0, EXCEPTION)), "\n".join(plain))
    assert "[rank1]" not in log
    said = rootcause.describe(log)
    assert said.endswith(f"{EXCEPTION} (the last exception above torchrun's report; no [rankN]: line)"), said
    last: dict[int, str] = {}
    for line in log.split("\n"):
        rootcause.remember(line, last)
    assert rootcause.describe(rootcause.completed(log[-LOG_TAIL_BYTES:], last)) == said, "not torchrun's ChildFailedError"


def test_a_script_the_interpreter_cannot_open_is_the_reason():
    """AWS's DDP sample run unchanged here: /workspace/ddp.py is in its image, not on this machine."""
    log = torchrun_log().replace("\n".join(rank_traceback(1, EXCEPTION) + rank_traceback(0, EXCEPTION)),
                                 "/opt/conda/bin/python3.11: can't open file '/workspace/ddp.py': [Errno 2] No such file or directory")
    assert rootcause.describe(log).startswith(
        "torchrun: global rank 1 (local rank 1) failed first, exit code 1: /opt/conda/bin/python3.11: can't open file"
        " '/workspace/ddp.py'")


def test_the_local_node_gives_the_whole_line_where_the_tail_cut_it():
    line = "/opt/conda/bin/python3.11: can't open file '/workspace/ddp.py': [Errno 2] No such file or directory"
    log = torchrun_log().replace("\n".join(rank_traceback(1, EXCEPTION) + rank_traceback(0, EXCEPTION)), line)
    cut = log[log.index(line) + 20:]  # the tail starts inside the line, as a byte-counted tail may
    last: dict[int, str] = {}
    for each in log.split("\n"):
        rootcause.remember(each, last)
    assert f"exit code 1: {line}" in rootcause.describe(rootcause.completed(cut, last))


# --- NCCL's watchdog ------------------------------------------------------------------------------------------------
# What a rank NCCL's watchdog takes down leaves in its log, in the shapes torch 2.13's ProcessGroupNCCL.cpp formats
# (WorkNCCL::checkTimeout's line, then std::terminate's report and the exception's frames), written here, not copied.

LIB = "/usr/local/lib/python3.11/site-packages/torch/lib"


def frames(count: int) -> list[str]:
    return [f"frame #{i}: <unknown function> + 0x{0x9c5d10 + 97 * i:x} (0x7f3a5c{i:06x} in {LIB}/libtorch_cuda.so)"
            for i in range(count)]


def watchdog_log(rank: int = 1, last_frames: int = 6) -> str:
    work = "WorkNCCL(SeqNum=4180, OpType=ALLREDUCE, NumelIn=1686533, NumelOut=1686533, Timeout(ms)=120000)"
    said = (f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: {work}"
            " ran for 120046 milliseconds before timing out.")
    source = "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    return "\n".join([
        "timesteps 819200  steps/s 9120  return -20.1  eval -",
        f"[rank{rank}]:[E1128 12:01:07.412377035 ProcessGroupNCCL.cpp:688] {said}",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: {said}",
        f"Exception raised from checkTimeout at {source}:688 (most recent call first):", *frames(7),
        f"Exception raised from run at {source}:2041 (most recent call first):", *frames(last_frames)])


def test_nccls_watchdog_is_read_as_a_lost_peer_naming_the_collective_and_its_timeout():
    """With NCCL a rank waiting on a peer that hung or died is taken down by torch's watchdog (SIGABRT, exit 134) and
    states nothing: the job said 'worker 1 exit code 134' and the last frames of a C++ stack, and counted it as its
    own crash, not as the echo of another rank's failure."""
    abort = rootcause.nccl_watchdog(watchdog_log())
    assert abort == rootcause.WatchdogAbort(1, "ALLREDUCE", "4180", 120000, 120046)
    said = rootcause.describe_watchdog(abort)
    assert said.startswith("NCCL's watchdog took rank 1 down (SIGABRT): its ALLREDUCE (collective #4180) waited 120.0 s,"
                           " past its process group's timeout of 120 s, for a peer that never joined it")
    assert "runPolicy.collectiveTimeoutSeconds" in said
    assert "its collective waited" in rootcause.describe_watchdog(rootcause.WatchdogAbort(1, ran_ms=5))
    pod = lc.observed_pod(terminated_pod(1, 134, watchdog_log()[-LOG_TAIL_BYTES:]))  # what a kubelet keeps
    assert pod.reason == lc.REASON_PEER_LOST and pod.message.startswith("NCCL's watchdog took"), pod
    assert rootcause.nccl_watchdog("Traceback (most recent call last):\nValueError: boom") is None
    assert lc.observed_pod(terminated_pod(1, 1, "ValueError: boom")).reason == "Error"


def test_a_tail_past_the_watchdogs_line_still_says_it_and_the_local_node_puts_the_line_back(tmp_path):
    """The kubelet keeps a failed container's last 2 KiB, which may hold only the exception's frames and the line
    above them naming the watchdog's source. kuberl run reads every line, so its message has the watchdog's own
    line, with the collective and the timeout."""
    log = watchdog_log(rank=3, last_frames=8)
    tail = log[-LOG_TAIL_BYTES:]
    assert "Watchdog caught" not in tail and "Exception raised from run at" in tail
    assert rootcause.nccl_watchdog(tail) == rootcause.WatchdogAbort(None)
    pod = lc.observed_pod(terminated_pod(3, 134, tail))
    assert pod.reason == lc.REASON_PEER_LOST and "kubectl logs POD | grep -m1 -e 'Watchdog caught'" in pod.message
    assert rootcause.nccl_watchdog("\n".join(frames(20))) is None  # frames alone say nothing of whose they are
    (tmp_path / "log.txt").write_text(log + "\n")
    code = f"import os, sys; sys.stdout.write(open({str(tmp_path / 'log.txt')!r}).read()); sys.stdout.flush(); os.abort()"
    process = PodProcess(Launch([sys.executable, "-c", code], {}, str(tmp_path), str(tmp_path / "termination-log")),
                         "[worker 3]", out=open(tmp_path / "out", "w"))  # noqa: SIM115
    assert process.wait(60) == 134
    process._reader.join(10)
    assert rootcause.nccl_watchdog(process.termination_message()) == rootcause.WatchdogAbort(3, "ALLREDUCE", "4180", 120000, 120046)


def test_a_stated_reason_wins_over_a_watchdog_line_above_it():
    """A rank that stated its own reason (kuberl's trainer catches what gloo raises) is read by that, not by a line."""
    stated = "kuberl.dev/reason Crashed: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert lc.observed_pod(terminated_pod(0, 1, stated)).reason == "Crashed"


def test_the_watchdogs_echo_does_not_hide_the_rank_that_failed_first():
    spec = make_job().env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).spec()
    up = lc.decide(spec, {"generation": 0}, [], None, 0.0).status
    running = [replace(lc.observed_pod(terminated_pod(0, 0, "")), name=f"nanogpt-{r}", rank=r, phase="Running",
                       exit_code=None, reason=None, ready=True, start_time=0.0) for r in range(2)]
    up = lc.decide(spec, up, running, None, 1.0).status
    echo = replace(lc.observed_pod(terminated_pod(1, 134, watchdog_log())), finished_at=5.0)
    oom = replace(lc.observed_pod(terminated_pod(0, 137, "")), reason="OOMKilled", finished_at=9.0)
    (entry,) = lc.decide(spec, up, [oom, echo], None, 10.0).status["restartHistory"]
    assert entry["reason"] == "OOMKilled" and entry["message"].startswith("worker 0"), entry
