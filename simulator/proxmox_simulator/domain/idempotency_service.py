"""Idempotency-Key: a keyed write runs once; its duplicates get the first answer.

The key is claimed in PostgreSQL before the write runs, so duplicates arriving
at the same time (on this or another replica) wait for the first one's stored
answer instead of racing it.  A write that fails releases its claim: the retry
runs again.  A task a keyed write creates also records the key in its own row
(committed with the task), so even an answer lost to a crash right after that
commit is found again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import idempotency as claim_repo
from proxmox_simulator.repositories import tasks as task_repo

# How long a duplicate waits for the first request's answer before it is told
# the key is busy; every simulated write answers far sooner.
ANSWER_WAIT_SECONDS = 30.0
# An unanswered claim this old belongs to a process that died mid-request.
STALE_CLAIM_SECONDS = 120.0
_POLL_SECONDS = (0.01, 0.02, 0.05, 0.1)


class KeyInUse(PveError):
    status = 409


async def run_once(pool, key: str, request: str, write: Callable[[], Awaitable]):
    """The answer of ``write`` for ``key``: run now, or the stored one of a first run.

    ``request`` ("METHOD /path") tells a replay from a key reused for another
    request, which is refused.  ``write`` returns a JSON-serializable answer.
    """
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    attempt = 0
    while True:
        async with pool.acquire() as conn:
            if await claim_repo.claim(conn, key, request, STALE_CLAIM_SECONDS):
                upid = await task_repo.existing_for_key(conn, key)
                if upid is not None:  # answered before a crash lost the claim's answer
                    await claim_repo.record_answer(conn, key, {"data": upid})
                    return {"data": upid}
                break
            held = await claim_repo.get(conn, key)
        if held is not None:
            if held["request"] != request:
                raise KeyInUse(
                    f"Idempotency-Key already used for another request ({held['request']})"
                )
            if held["answered"]:
                return held["answer"]
        if time.monotonic() >= deadline:
            raise KeyInUse("a request with this Idempotency-Key is still in progress")
        await asyncio.sleep(_POLL_SECONDS[min(attempt, len(_POLL_SECONDS) - 1)])
        attempt += 1
    try:
        answer = await write()
    except BaseException:
        async with pool.acquire() as conn:
            await claim_repo.release(conn, key)
        raise
    async with pool.acquire() as conn:
        await claim_repo.record_answer(conn, key, answer)
    return answer
