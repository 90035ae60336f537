"""Reading rank 0's metrics page over HTTP, bounded (the parsing is the core's)."""

from __future__ import annotations

from typing import Any

from ..core.rank0metrics import PageTooLarge


async def read_at_most(response: Any, limit: int) -> bytes:
    """An aiohttp response's body, or PageTooLarge as soon as it is known to exceed `limit` bytes
    (before reading any of it when Content-Length says so); what is beyond the limit is never read."""
    if response.content_length is not None and response.content_length > limit:
        raise PageTooLarge(response.content_length)
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PageTooLarge(None)
        chunks.append(chunk)
    return b"".join(chunks)
