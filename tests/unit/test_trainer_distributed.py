"""What a rank decides about its process before and around its syncs: the
CPU quota read from the container's cgroup and the yielding window it allows,
the CPU slice and thread count per process (OMP_NUM_THREADS read as OpenMP
reads it), gloo's event loop thread found by name and made SCHED_BATCH, and
the probe of rank 0's store before the rendezvous. The syncs themselves run
with real gloo ranks in tests/distributed/test_ddp.py."""

import ast
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from kuberl.core import contract, names, trainerconfig
from kuberl_trainer.distributed import (
    GLOO_LOOP_THREAD,
    GRADIENT_SPIN_SECONDS,
    BadEnvironment,
    calm_gloo_loop,
    collective_failure,
    cpu_quota_cores,
    omp_threads,
    read_cpu_quota,
    tcp_port,
    threads_named,
    wait_for_store,
    yield_window,
)

from tests.support.jobs import make_job
from tests.support.ports import free_port


@pytest.mark.parametrize(("cpu_max", "quota_us", "period_us", "cores"), [
    ("max 100000", None, None, None),          # cgroup v2, no limit
    ("200000 100000", None, None, 2.0),        # v2, limits.cpu: 2
    ("50000 100000", None, None, 0.5),         # v2, limits.cpu: 500m
    (None, "-1", "100000", None),              # cgroup v1, no limit
    (None, "150000", "100000", 1.5),           # v1, limits.cpu: 1500m
    (None, None, None, None),                  # neither mounted
    ("garbage", None, None, None),             # not the kernel's format: no limit assumed, no crash
    (None, "x", "100000", None),
    ("100000 0", None, None, None),            # a zero period: no division by it
    (None, "100000", "0", None),
    ("0 100000", None, None, None),            # no quota at all is not "no CPU"
    ("1 2 3", None, None, None),
    ("9" * 5000 + " 100000", None, None, None),  # past int()'s digit limit: still no crash
])
def test_cpu_quota_from_either_cgroup_version(cpu_max, quota_us, period_us, cores):
    assert cpu_quota_cores(cpu_max, quota_us, period_us) == cores


def test_a_rank_waits_for_the_store_to_listen_and_not_past_its_deadline():
    """wait_for_store (ranks > 0, before init_process_group): it returns as
    soon as rank 0's port accepts, which torch's own backing-off client
    would notice up to ~0.5 s later, and gives up at the deadline."""
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    opened = threading.Timer(0.2, lambda: (listener.bind(("127.0.0.1", port)), listener.listen()))
    opened.start()
    try:
        started = time.monotonic()
        assert wait_for_store("127.0.0.1", str(port), started + 30)
        assert 0.15 < time.monotonic() - started < 5
    finally:
        opened.join()
        listener.close()
    started = time.monotonic()  # nothing listens now
    assert not wait_for_store("127.0.0.1", str(port), started + 0.2)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("text", "port"), [
    ("29500", 29500), ("1", 1), ("65535", 65535),
    (None, None), ("", None), ("http", None), ("-1", None), ("0", None), ("70000", None), ("+80", None),
    ("٣", None), ("9" * 5000, None),   # a non-ASCII digit; past int()'s digit limit
])
def test_a_port_is_read_from_its_environment_value(text, port):
    assert tcp_port(text) == port


@pytest.mark.parametrize("port", [None, "", "http", "-1", "0", "70000", "+80", "9" * 5000])
def test_a_master_port_that_is_no_port_is_left_to_torch_to_report(port):
    started = time.monotonic()
    assert not wait_for_store("127.0.0.1", port, started + 30)
    assert time.monotonic() - started < 1


def test_read_cpu_quota_reads_the_files_under_the_root(tmp_path):
    (tmp_path / "cpu.max").write_text("300000 100000\n")
    assert read_cpu_quota(str(tmp_path)) == 3.0
    assert read_cpu_quota(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(("cores", "processes", "window"), [
    (None, 1, GRADIENT_SPIN_SECONDS),   # no limit: yield
    (1.0, 1, GRADIENT_SPIN_SECONDS),    # a whole core each
    (4.0, 2, GRADIENT_SPIN_SECONDS),
    (0.5, 1, 0.0),                      # a fraction of a core: yielding would spend the quota compute needs
    (1.0, 2, 0.0),                      # two processes on one core's quota
])
def test_a_rank_yields_only_with_a_whole_core_of_quota(cores, processes, window):
    assert yield_window(cores, processes) == window


def test_threads_are_found_by_name_and_a_thread_that_ended_is_skipped(tmp_path):
    for tid, name in ((11, "gloo_tcp_loop"), (12, "pt_gloo_runloop"), (13, "gloo_tcp_loop")):
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "comm").write_text(name + "\n")
    (tmp_path / "14").mkdir()  # listed, then gone before its comm was read
    assert sorted(threads_named("gloo_tcp_loop", str(tmp_path))) == [11, 13]
    assert threads_named("absent", str(tmp_path)) == []
    assert threads_named("gloo_tcp_loop", str(tmp_path / "no-proc-here")) == []


def test_a_thread_named_as_gloos_event_loop_becomes_sched_batch_and_nothing_else_does():
    """calm_gloo_loop on a live thread of this process given gloo's loop name
    (a thread may rename itself through /proc): it alone changes policy."""
    ready, done = threading.Event(), threading.Event()

    def loop():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(GLOO_LOOP_THREAD)
        ready.set()
        done.wait(30)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        ready.wait(30)
        assert calm_gloo_loop() == 1
        assert os.sched_getscheduler(thread.native_id) == os.SCHED_BATCH
        assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER
    finally:
        done.set()
        thread.join()


def _affinity_after(local_rank: int, procs: int, backend: str = "gloo") -> set[int]:
    """The CPUs a fresh process's threads may run on after pin_threads placed it as `local_rank` of `procs`
    (it changes its process's affinity, so each case gets its own process): their union."""
    code = ("import os; from kuberl_trainer.distributed import pin_threads, placement; "
            f"pin_threads(placement({backend!r}, {local_rank}, {procs}, {procs}, 1, os.sched_getaffinity(0))); "
            "print(sorted({c for t in os.listdir('/proc/self/task') for c in os.sched_getaffinity(int(t))}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


def test_only_cpu_ranks_sharing_a_pod_take_a_slice_of_its_cpus():
    allowed = os.sched_getaffinity(0)
    assert _affinity_after(0, 1) == allowed              # one process: the whole set
    assert _affinity_after(5, 2) == allowed              # a local rank out of range: untouched
    if len(allowed) >= 2:
        first, second = _affinity_after(0, 2), _affinity_after(1, 2)
        assert first and second and not first & second and first | second <= allowed


@pytest.mark.parametrize(("value", "threads"), [
    (None, 7), ("", 7),   # unset: the default
    ("4", 4),
    ("4,2", 4),           # OpenMP's threads per nesting level: the outer level's count
    (" 3 , 1", 3),
    ("9223372036854775807", 2**63 - 1),  # limits.cpu 1e999 through the downward API: the kubelet's int64
])
def test_omp_num_threads_is_read_as_openmp_reads_it(value, threads):
    assert omp_threads(value, 7) == threads


@pytest.mark.parametrize("value", ["four", "0", "-1", "4;2", "1e3", "..", "9223372036854775808", "9" * 5000])
def test_an_omp_num_threads_nobody_can_use_is_refused_naming_it(value):
    with pytest.raises(BadEnvironment, match=r"^environment variable OMP_NUM_THREADS=.*expected a positive integer") as caught:
        omp_threads(value, 7)
    assert len(str(caught.value)) < 300  # a huge value is cut, not echoed whole


@pytest.mark.parametrize(("variable", "value", "reason"), [
    ("OMP_NUM_THREADS", "four", "ConfigError: environment variable OMP_NUM_THREADS='four'"),
    # set by a launcher; a value nobody can read is not a silent default, and a huge one is cut
    ("LOCAL_WORLD_SIZE", "x" * 100_000, "ConfigError: environment variable LOCAL_WORLD_SIZE='xxx"),
])
def test_a_trainer_given_an_unusable_environment_exits_with_a_config_error(tmp_path, variable, value, reason):
    """Not a crash to retry until backoffLimit: the pod's environment (its
    spec.template) is the configuration, and the reason names the variable."""
    spec = make_job().minimal().with_spec(workers=1).spec()
    config = tmp_path / names.CONFIG_MOUNT_DIR.lstrip("/") / names.CONFIG_FILE
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(trainerconfig.trainer_config("t", "default", "uid", spec)))
    env = {**os.environ, contract.ENV_FS_ROOT: str(tmp_path), variable: value}
    done = subprocess.run([sys.executable, "-m", "kuberl_trainer", "--config", f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"],
                          check=False, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == contract.EXIT_CONFIG_ERROR, done.stderr
    termination = (tmp_path / names.TERMINATION_LOG.lstrip("/")).read_text()
    assert reason in termination and len(termination) < 1000, termination[:200]


@pytest.mark.parametrize(("raised", "line"), [
    # gloo's words when a peer of a gang went away (a local run's rank SIGKILLed past its grace, 2026-11-28)
    (("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:56242."
      " This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an"
      " error. GLHF! \U0001f3d6\ufe0f"),
     ("a peer's connection closed (127.0.0.1:56242): another rank exited or was killed; its own log, and the job's"
      " status, say why")),
    # the same when the peer's socket was reset (killed with data unread: tests/distributed/test_rendezvous.py, rank 2 of 3)
    (("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:16084: Connection reset"
      " by peer. This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the"
      " remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f"),
     ("a peer's connection closed (127.0.0.1:16084): another rank exited or was killed; its own log, and the job's"
      " status, say why")),
    (("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to"
      " complete\nmore detail"), "Timed out waiting 1800000ms for recv operation to complete"),
    ("NCCL communicator was aborted on rank 1.", "NCCL communicator was aborted on rank 1."),
    ("", "RuntimeError"),
])
def test_a_failed_collective_is_one_line_without_gloos_source_location_and_advice(raised, line):
    """The PeerLost line reaches the pod's termination message and the job's status: gloo's C++ file and line and
    its closing emoji were shown there."""
    assert collective_failure(RuntimeError(raised)) == line
