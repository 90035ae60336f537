"""kopf's credentials vault closed under a watcher that reads it, with a real kopf Vault: the race that ends a kopf
run with `TypeError: argument of type 'NoneType' is not iterable` in `Vault.extended` (seen in CI on 2026-11-30,
tests/operator/test_operator_rbac_namespace.py, the operator's kopf run ending while its watchers re-authenticated).

The interleaving, as it happened there: one watcher re-authenticates (`invalidate` holds the vault's lock while its
closed session's close() runs), a second watcher queues for the lock to read, and the run's end queues `close()`
behind it. The reader takes the lock, finds a cached item, releases it and queues again behind `close()` to add its
own cache entry; `close()` sets the item's caches to None; the reader then reads None."""

from __future__ import annotations

import asyncio

import kopf

# kopf does not export its Vault; the race is inside it
from kopf._cogs.structs.credentials import Vault


def vault_closed_under_a_reader() -> TypeError:
    """The reader's error, raised by kopf's own `Vault.extended` (its traceback's innermost frame)."""
    return asyncio.run(_race())


async def _race() -> TypeError:
    vault = Vault()
    closing, released = asyncio.Event(), asyncio.Event()

    class SlowSession:  # a cached client whose close() takes a while, as aiohttp's ClientSession's does
        async def close(self) -> None:
            closing.set()
            await released.wait()

    async def cache(factory):
        async for key, info, _ in vault.extended(factory, "session"):
            return key, info

    async def read():
        async for _ in vault.extended(lambda info: object(), "contexts"):
            return

    await vault.populate({"fresh": kopf.ConnectionInfo(server="http://127.0.0.1:1")})
    await cache(lambda info: object())
    await vault.populate({"stale": kopf.ConnectionInfo(server="http://127.0.0.1:2", priority=1)})  # chosen first
    invalidating = asyncio.create_task(vault.invalidate(*await cache(lambda info: SlowSession())))
    await closing.wait()  # the lock is held
    reading = asyncio.create_task(read())
    await asyncio.sleep(0)  # the reader queues for the lock
    closing_the_vault = asyncio.create_task(vault.close())
    await asyncio.sleep(0)  # and the run's end behind it
    released.set()
    await invalidating
    await closing_the_vault
    try:
        await reading
    except TypeError as error:
        return error
    raise AssertionError("the reader did not meet the closed vault: kopf's Vault has changed")
