"""Rank <-> GPU and CPU placement in a pod of several processes, without a GPU.

The pods come from the operator's own render, their env as a kubelet serves it (the local
runner's downward API: OMP_NUM_THREADS from limits.cpu, rounded up); each process's RANK,
LOCAL_RANK and LOCAL_WORLD_SIZE are what torch's launcher gives it with static rendezvous
(tests/distributed/test_pod_launcher.py reads them from a real one); `distributed.placement`
then chooses its device, threads and CPUs. Only the count of GPUs a pod sees is stood in for:
the device plugin's (the pod's own, numbered from 0 inside the container), or every GPU of a
machine that hides none (a privileged pod, or `kuberl run` on a bare host)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from kuberl.core import contract
from kuberl.core.render import render_pod
from kuberl.local.containerenv import container_env
from kuberl_trainer import atari
from kuberl_trainer.distributed import BadEnvironment, Placement, placement

from tests.support.jobs import make_job

HOST_GPUS = 8  # a node (or a machine under kuberl run) with 8 GPUs, none hidden
NODE_CPUS = 64  # without the kubelet's static CPU manager a pod may run on every CPU of the node


def pod_env(workers: int, gpus: int, cpu_limit: str, rank: int) -> dict[str, str]:
    job = make_job("pong").env("ALE/Pong-v5").workers(workers).replace(
        gpusPerWorker=gpus, resources={"limits": {"cpu": cpu_limit}}).obj()
    pod = render_pod(job, "team-rl", "0f0e0d0c-1111-2222-3333-444455556666", rank)
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
    return container_env(pod, container, "10.0.0.1", {}, lambda name: name, node_cpus=NODE_CPUS)


def processes(env: dict[str, str]) -> list[dict[str, int]]:
    """What torch's launcher gives each child of a pod (static rendezvous: the node's rank times its
    processes, plus the local rank), or the pod's own env when it runs one process."""
    procs, node = int(env[contract.ENV_NPROC_PER_NODE]), int(env[contract.ENV_NODE_RANK])
    if procs == 1:
        return [{"rank": int(env[contract.ENV_RANK]), "local_rank": int(env[contract.ENV_LOCAL_RANK]), "local_world_size": 1}]
    assert contract.ENV_LOCAL_RANK not in env  # the launcher's to set, per child
    return [{"rank": node * procs + local, "local_rank": local, "local_world_size": procs} for local in range(procs)]


def placed(env: dict[str, str], backend: str, visible: int, allowed=range(NODE_CPUS)) -> list[tuple[dict, Placement]]:
    return [(p, placement(backend, p["local_rank"], p["local_world_size"], visible, int(env["OMP_NUM_THREADS"]), allowed))
            for p in processes(env)]


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("visible", ["device plugin", "every GPU of the host"])
def test_each_process_of_two_gpu_pods_computes_on_its_own_local_rank_gpu_with_its_share_of_the_cpu_limit(gpus, visible):
    world = 2 * gpus
    seen = [gpus if visible == "device plugin" else HOST_GPUS] * 2
    ranks = []
    for node in (0, 1):
        env = pod_env(2, gpus, "16", node)
        assert (env[contract.ENV_WORLD_SIZE], env[contract.ENV_NPROC_PER_NODE], env["OMP_NUM_THREADS"]) == (str(world), str(gpus), "16")
        rows = placed(env, "nccl", seen[node])
        assert [where.device for _, where in rows] == [torch.device("cuda", i) for i in range(gpus)]
        assert [where.device_id for _, where in rows] == [where.device for _, where in rows]  # init_process_group's
        assert all(where.threads == 16 // gpus and where.cpus == tuple(range(NODE_CPUS)) and not where.split
                   for _, where in rows)  # GPU ranks keep the pod's whole set, each with its share of threads
        assert sum(atari.env_threads(where.threads) for _, where in rows) <= 16  # ale-py's pools: the limit, not more
        ranks += [p["rank"] for p, _ in rows]
    assert sorted(ranks) == list(range(world))


@pytest.mark.parametrize("procs", [1, 2, 4, 8])
def test_cpu_ranks_sharing_a_pod_each_take_their_own_slice_of_its_cpus(procs):
    """gpusPerWorker 0, procsPerWorker N on 16 CPUs the kubelet's static CPU manager pinned (cores 16-31): disjoint
    slices, each within the set, each rank's threads (torch's and its envs') within its slice."""
    job = make_job("pong").env("ALE/Pong-v5").workers(2).replace(procsPerWorker=procs, resources={"limits": {"cpu": "16"}}).obj()
    pod = render_pod(job, "team-rl", "0f0e0d0c-1111-2222-3333-444455556666", 1)
    env = container_env(pod, pod["spec"]["containers"][0], "10.0.0.1", {}, lambda name: name, node_cpus=NODE_CPUS)
    rows = placed(env, "gloo", 0, allowed=range(16, 32))
    assert [p["rank"] for p, _ in rows] == list(range(procs, 2 * procs))
    slices = [set(where.cpus) for _, where in rows]
    assert all(where.device == torch.device("cpu") and where.device_id is None for _, where in rows)
    assert set().union(*slices) <= set(range(16, 32)) and sum(map(len, slices)) == len(set().union(*slices))
    assert all(where.split == (procs > 1) for _, where in rows)
    assert all(atari.env_threads(where.threads) <= where.threads <= len(where.cpus) for _, where in rows)


@pytest.mark.parametrize(("limit", "procs", "threads"), [
    ("16", 4, 4), ("6", 4, 1), ("500m", 2, 1),  # 500m is 1 CPU to the downward API (rounded up): one thread each
    ("3", 8, 1),  # fewer CPUs than processes: one thread each, the least there is
])
def test_a_cpu_limit_is_split_among_the_pods_processes_rounding_down_to_at_least_one(limit, procs, threads):
    env = pod_env(1, procs, limit, 0)
    assert {where.threads for _, where in placed(env, "nccl", procs)} == {threads}


def test_threads_never_outnumber_the_cpus_a_rank_may_run_on():
    """A limit of 16 on a pod the kubelet pinned to 4 CPUs (or a machine with fewer cores than the limit)."""
    assert placement("nccl", 1, 2, 2, 16, range(4)).threads == 4
    assert placement("gloo", 1, 2, 0, 16, range(4)) == Placement(torch.device("cpu"), 2, (2, 3), True)


def test_a_pod_that_sees_fewer_gpus_than_it_runs_processes_is_refused_naming_gpus_per_worker():
    """A template that limits nvidia.com/gpu below gpusPerWorker, or kuberl run of a 4-GPU job on a 2-GPU machine:
    the ranks past the GPUs seen are a configuration error, not "invalid device ordinal" at every restart."""
    assert placement("nccl", 1, 4, 2, 16, range(16)).device == torch.device("cuda", 1)
    with pytest.raises(BadEnvironment, match=r"^spec.gpusPerWorker: this pod runs 4 process\(es\), one per GPU, but sees 2"):
        placement("nccl", 2, 4, 2, 16, range(16))
    with pytest.raises(BadEnvironment, match=r"^spec.rendezvous.backend: nccl needs a CUDA device per process"):
        placement("nccl", 0, 1, 0, 16, range(16))


def test_a_cpu_ranks_ale_pool_threads_stay_in_its_slice():
    """ale-py's threaded env is built with thread_affinity_offset=-1 (no pinning of its own), so its threads inherit
    the slice the rank took (distributed.pin_threads): two CPU ranks of a pod never step their emulators on each
    other's cores. A pool that pinned from core 0 would leave the second rank's slice; so did the OpenBLAS
    workers numpy's import starts, before pin_threads set the slice on the calling thread alone."""
    pytest.importorskip("ale_py")
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU here: no slice to leave")
    code = textwrap.dedent("""
        import os, sys
        from kuberl_trainer import atari, distributed
        where = distributed.placement("gloo", 1, 2, 0, 2, os.sched_getaffinity(0))
        distributed.pin_threads(where)
        envs = atari.make_atari_envs("ALE/Pong-v5", 2, {}, "ale", num_threads=2)
        envs.reset(seed=1)
        tasks = os.listdir("/proc/self/task")
        print(sorted(where.cpus), len(tasks), sorted({c for t in tasks for c in os.sched_getaffinity(int(t))}), sep="\t")
        envs.close()
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    mine, threads, used = done.stdout.strip().splitlines()[-1].split("\t")
    assert int(threads) >= 3  # the main thread and the pool's two
    assert used == mine and mine != str(allowed)


def test_numpys_blas_threads_are_the_ranks_share_not_the_pods_cpu_limit():
    """OpenBLAS sizes numpy's pool from OMP_NUM_THREADS at import (the pod's limit): pin_threads sets it to the rank's
    threads, as torch's. Two BLAS threads on a rank's one-CPU slice made DQN's greedy evaluation (a 20 x 256 by
    256 x 256 product per step) about 900x slower on a loaded 2-core machine (distributed.blas_threads)."""
    code = textwrap.dedent("""
        import os
        import numpy as np
        from kuberl_trainer import distributed
        before = distributed.blas_threads()
        where = distributed.placement("gloo", 1, 2, 0, 2, os.sched_getaffinity(0))
        distributed.pin_threads(where)
        print(where.threads, sorted(before.values()), sorted(distributed.blas_threads().values()), sep="\\t")
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    threads, before, after = done.stdout.strip().splitlines()[-1].split("\t")
    assert before == "[2]"  # numpy's wheel bundles one OpenBLAS, sized from OMP_NUM_THREADS
    assert (threads, after) == ("1", "[1]")


def test_a_cpu_limit_of_more_cores_than_any_node_runs_on_the_cpus_the_rank_may_use():
    """limits.cpu 1e999 passes the API server (ValidateResourceQuantityValue checks sign and whole numbers only);
    the kubelet's downward API renders it as int64's most, which the trainer refused as no thread count, and the
    job crash-looped. It is a limit above every CPU the rank may run on: those bound it."""
    from kuberl_trainer.distributed import omp_threads

    env = pod_env(1, 0, "1e999", 0)
    assert env["OMP_NUM_THREADS"] == str(2**63 - 1)
    [(_, where)] = [(p, placement("gloo", p["local_rank"], p["local_world_size"], 0,
                                  omp_threads(env["OMP_NUM_THREADS"], 1), range(NODE_CPUS))) for p in processes(env)]
    assert where.threads == NODE_CPUS
