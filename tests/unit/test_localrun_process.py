"""A pod's process group: output prefixed, the whole group signalled and
reaped, exit codes and termination messages as a kubelet reports them."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time

from kuberl.local.process import Launch, PodProcess, processes_under


def start(tmp_path, code: str, prefix: str = "[rank 0]") -> PodProcess:
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {**os.environ, "TERMINATION_LOG": str(log)}
    return PodProcess(Launch([sys.executable, "-c", textwrap.dedent(code)], env, str(tmp_path), str(log)), prefix, io.StringIO())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(") ")[1][0] != "Z"


def test_output_is_prefixed_and_the_message_read(tmp_path):
    p = start(tmp_path, """
        import os
        print("hello")
        open(os.environ["TERMINATION_LOG"], "w").write("Succeeded: done\\n")
    """)
    assert p.wait(10) == 0
    assert p.out.getvalue() == "[rank 0] hello\n"
    assert p.termination_message() == "Succeeded: done"


def test_a_long_message_is_read_as_the_kubelet_reads_it_its_last_4096_bytes(tmp_path):
    p = start(tmp_path, """
        import os
        open(os.environ["TERMINATION_LOG"], "w").write("first line, lost in a cluster\\n" + "x" * 5000 + "\\nthe end\\n")
    """)
    assert p.wait(10) == 0
    assert p.termination_message() == ("x" * 5000 + "\nthe end")[-(4096 - 1):]  # the kubelet's tail, its last newline stripped


def test_a_failure_without_a_message_falls_back_to_the_log_tail(tmp_path):
    p = start(tmp_path, "import sys; print('line 1'); print('boom', file=sys.stderr); sys.exit(3)")
    assert p.wait(10) == 3
    assert p.termination_message() == "line 1\nboom"


def test_a_killed_process_reports_128_plus_the_signal(tmp_path):
    p = start(tmp_path, "import time; print('up', flush=True); time.sleep(60)")
    while "up" not in p.out.getvalue():
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    assert p.wait(10) == 137


def test_terminate_reaches_the_whole_group_then_kills_what_ignores_it(tmp_path):
    p = start(tmp_path, """
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE)
        child.stdout.readline()  # the child ignores SIGTERM from here on
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    # The pid is printed only once both processes ignore SIGTERM: a signal
    # sent earlier would end them and fail the test, not kuberl (a CI flake).
    while not p.out.getvalue().strip():
        time.sleep(0.05)
    child = int(p.out.getvalue().split()[2])
    kill_at = p.terminate(0.5)
    # both ignore SIGTERM: looked at within the grace period by the poll's clock, which a loaded machine's stall
    # between these lines cannot push past it (the poll would then SIGKILL the group, and the child be gone)
    assert p.poll(now=kill_at - 0.5) is None and alive(child)
    while p.poll() is None:
        time.sleep(0.05)
    assert time.time() >= kill_at and p.poll() == 137
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_when_the_main_process_ends_nothing_it_started_survives(tmp_path):
    p = start(tmp_path, """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
    """)
    assert p.wait(10) == 0
    child = int(p.out.getvalue().split()[2])
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_command_that_cannot_start_is_a_start_error(tmp_path):
    p = PodProcess(Launch(["/nonexistent/python"], {}, str(tmp_path), str(tmp_path / "log")), "[rank 0]", io.StringIO())
    assert p.poll() == 128 and p.termination_message().startswith("StartError:")


def test_a_pod_dies_with_the_runner_that_started_it(tmp_path):
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from kuberl.local.process import Launch, PodProcess
        env = {{**os.environ, "KUBERL_FS_ROOT": {str(tmp_path / "pods" / "p" / "root")!r}}}
        p = PodProcess(Launch([sys.executable, "-c", "import time; time.sleep(60)"], env, ".", "log"), "[p]")
        print(p.pid, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    pod = int(runner.stdout.readline())
    assert processes_under(str(tmp_path / "pods")) == [pod]
    runner.kill()
    runner.wait()
    deadline = time.time() + 5
    while alive(pod) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(pod) and processes_under(str(tmp_path / "pods")) == []


def test_a_grandchild_in_its_own_session_ends_with_the_pod(tmp_path):
    """A daemonised helper (setsid) leaves the process group, not the container:
    a kubelet ends it with the pod's main process, and the log is not held open by it."""
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {**os.environ, "KUBERL_FS_ROOT": str(tmp_path / "pods" / "p" / "root")}
    code = """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        print(child.pid, flush=True)
    """
    p = PodProcess(Launch([sys.executable, "-c", textwrap.dedent(code)], env, str(tmp_path), str(log)), "[rank 0]", io.StringIO())
    assert p.wait(10) == 0
    assert not p._reader.is_alive(), "the escaped grandchild still holds the log pipe open"
    child = int(p.out.getvalue().split()[2])
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(child) and processes_under(str(tmp_path / "pods")) == []


def test_of_two_processes_seen_ended_in_one_poll_the_first_to_exit_finished_first(tmp_path):
    """kuberl run looks at its pods every 0.2 s: a rank that exits 50 ms after another (its echo: 'Connection
    closed by peer') was given the same look's time, so the job named the lower rank, not the first failure."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    failed = tmp_path / "failed"  # the echo exits 0.1 s after the cause, however late either process started
    echo = start(tmp_path / "a", f"""
        import os, time
        while not os.path.exists({str(failed)!r}):
            time.sleep(0.005)
        time.sleep(0.1)
        raise SystemExit(1)
    """, "[rank 0]")
    cause = start(tmp_path / "b", f"open({str(failed)!r}, 'w').close(); raise SystemExit(3)", "[rank 1]")
    deadline = time.monotonic() + 30
    while (alive(echo.popen.pid) or alive(cause.popen.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)  # both ended before the one look below, as within one of kuberl run's polls
    assert (echo.poll(), cause.poll()) == (1, 3)
    assert cause.finished_at < echo.finished_at, (cause.finished_at, echo.finished_at)


def test_a_process_that_closed_its_output_long_before_it_exited_did_not_finish_then(tmp_path):
    """Both descriptors of the output pipe are closed (stderr shares it: closing stdout alone ended nothing), and
    the process exits when the test says, not after a sleep a loaded machine could outlast before the poll."""
    go = tmp_path / "go"
    p = start(tmp_path, f"import os, time; os.close(1); os.close(2)\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)")
    deadline = time.time() + 10
    while p.output_ended_at is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # its output ended well before the poll that sees it running
    assert p.output_ended_at is not None and p.poll() is None
    seen_running = time.time()
    go.touch()
    assert p.wait(10) == 0
    assert p.finished_at >= seen_running - 0.01, (p.finished_at, seen_running)
