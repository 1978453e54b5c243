"""Reads started early, so their round trips overlap other work, and given up when the
run no longer wants them."""

from __future__ import annotations

import asyncio
import contextlib


async def abandon(*tasks: asyncio.Future) -> None:
    """Cancel those still running and collect every outcome, so none is left unretrieved."""
    for task in tasks:
        if not task.done():
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def in_background(read):
    """`read` started now and awaited where its answer is needed; abandoned when the
    block is left without having needed it."""
    task = asyncio.ensure_future(read)
    try:
        yield task
    finally:
        await abandon(task)


async def together(*work):
    """Run independent work at once; the first failure cancels the rest and is raised
    as itself (not as a group), so callers handle it like the failure of one step."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        return await asyncio.gather(*tasks)
    finally:
        await abandon(*tasks)
