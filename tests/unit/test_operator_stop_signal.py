"""SIGTERM arriving as the operator itself stops kopf (a refused namespace granted, kopf stopped to start again
with it): kopf's own signal handler set a flag nobody awaited any more, the operator started kopf again, and the
pod ran on until the kubelet's SIGKILL. main.run_kopf now says whether a signal came."""
import asyncio
import os
import signal

import kopf
import pytest
from kuberl.operator import config, main


@pytest.fixture(autouse=True)
def not_stopping():
    """A SIGTERM a test sends marks this process as stopping (config.STOP_REQUESTED): each test starts without it."""
    config.STOP_REQUESTED.clear()
    yield
    config.STOP_REQUESTED.clear()


def test_a_signal_while_kopf_stops_for_the_operators_own_flag_is_reported(monkeypatch):
    async def spawn_tasks(stop_flag, **_):
        loop = asyncio.get_running_loop()
        for received in (signal.SIGTERM, signal.SIGINT):  # kopf's own: a future nobody awaits once it stops
            loop.add_signal_handler(received, lambda: None)
        loop.call_later(0.05, stop_flag.set)  # the refused namespace granted (handlers.RefusedNamespaces)
        return [asyncio.create_task(stop_flag.wait())]

    async def run_tasks(tasks, ignored):
        await asyncio.gather(*tasks)  # stopping: kopf's stop-flag checker is done
        os.kill(os.getpid(), signal.SIGTERM)  # the kubelet ends the pod meanwhile
        await asyncio.sleep(0.2)  # kopf stopping its daemons and running its cleanup

    monkeypatch.setattr(kopf, 'spawn_tasks', spawn_tasks)
    monkeypatch.setattr(kopf, 'run_tasks', run_tasks)
    assert main.run_kopf(stop_flag=asyncio.Event()) is True


def test_no_signal_is_no_signal(monkeypatch):
    async def spawn_tasks(stop_flag, **_):
        asyncio.get_running_loop().call_later(0.05, stop_flag.set)
        return [asyncio.create_task(stop_flag.wait())]

    async def run_tasks(tasks, ignored):
        await asyncio.gather(*tasks)

    monkeypatch.setattr(kopf, 'spawn_tasks', spawn_tasks)
    monkeypatch.setattr(kopf, 'run_tasks', run_tasks)
    assert main.run_kopf(stop_flag=asyncio.Event()) is False


def test_a_signal_is_not_lost_when_kopfs_run_then_ends_in_an_error(monkeypatch):
    """SIGTERM came, and kopf's run ended in an error raised as it stopped (a watch answered 410 meanwhile): the
    operator took the error for the run's end, started kopf again in 0 s, and ran on until the kubelet's SIGKILL."""
    class Gone(Exception):
        status = 410

    async def spawn_tasks(stop_flag, **_):
        return [asyncio.create_task(stop_flag.wait())]

    async def run_tasks(tasks, ignored):
        os.kill(os.getpid(), signal.SIGTERM)  # the kubelet ends the pod
        await asyncio.gather(*tasks)
        raise Gone("too old resource version")

    monkeypatch.setattr(kopf, 'spawn_tasks', spawn_tasks)
    monkeypatch.setattr(kopf, 'run_tasks', run_tasks)
    assert main.run_kopf(stop_flag=asyncio.Event()) is True


def test_once_signalled_nothing_restarts_the_operator_in_place(monkeypatch):
    """The heartbeat (a CRD served again), the finalizer recheck and the lost-watch watchdog restart the operator in
    place; one that fired between the signal and kopf's cleanup exec'd a fresh operator that ran on until SIGKILL."""
    execs = []
    monkeypatch.setattr(config.os, 'execv', lambda *args: execs.append(args))
    config.restart_in_place()
    assert len(execs) == 1, 'not signalled: it restarts'

    async def spawn_tasks(stop_flag, **_):
        return [asyncio.create_task(stop_flag.wait())]

    async def run_tasks(tasks, ignored):
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.gather(*tasks)
        config.restart_in_place()  # a recheck that fired as kopf stopped

    monkeypatch.setattr(kopf, 'spawn_tasks', spawn_tasks)
    monkeypatch.setattr(kopf, 'run_tasks', run_tasks)
    assert main.run_kopf(stop_flag=asyncio.Event()) is True
    assert len(execs) == 1, 'signalled: no restart'
