"""How a rank waits for its gradient syncs: the CPU quota read from the
container's cgroup, and the yielding window it allows. The syncs themselves
run with real gloo ranks in tests/distributed/test_ddp.py."""

import pytest
from kuberl_trainer.distributed import (
    GRADIENT_SPIN_SECONDS,
    cpu_quota_cores,
    read_cpu_quota,
    yield_window,
)


@pytest.mark.parametrize(("cpu_max", "quota_us", "period_us", "cores"), [
    ("max 100000", None, None, None),          # cgroup v2, no limit
    ("200000 100000", None, None, 2.0),        # v2, limits.cpu: 2
    ("50000 100000", None, None, 0.5),         # v2, limits.cpu: 500m
    (None, "-1", "100000", None),              # cgroup v1, no limit
    (None, "150000", "100000", 1.5),           # v1, limits.cpu: 1500m
    (None, None, None, None),                  # neither mounted
    ("garbage", None, None, None),             # not the kernel's format: no limit assumed, no crash
    (None, "x", "100000", None),
])
def test_cpu_quota_from_either_cgroup_version(cpu_max, quota_us, period_us, cores):
    assert cpu_quota_cores(cpu_max, quota_us, period_us) == cores


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
