"""Idempotency-Key claims: who runs a keyed write, and the answer it gave."""

from __future__ import annotations

import asyncpg

# A new key is inserted; an unanswered claim older than ``$3`` seconds was left
# by a process that died mid-request and is taken over.  No row comes back when
# someone else holds (or answered) the key.
_CLAIM = """
INSERT INTO idempotency_claims AS c (key, request) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET claimed_at = clock_timestamp(), request = EXCLUDED.request
WHERE NOT c.answered AND c.claimed_at < clock_timestamp() - make_interval(secs => $3)
RETURNING key
"""
_GET = "SELECT request, answered, answer FROM idempotency_claims WHERE key = $1"
_ANSWER = "UPDATE idempotency_claims SET answered = true, answer = $2 WHERE key = $1"
_RELEASE = "DELETE FROM idempotency_claims WHERE key = $1 AND NOT answered"


async def claim(conn: asyncpg.Connection, key: str, request: str, stale_after: float) -> bool:
    return await conn.fetchval(_CLAIM, key, request, stale_after) is not None


async def get(conn: asyncpg.Connection, key: str):
    return await conn.fetchrow(_GET, key)


async def record_answer(conn: asyncpg.Connection, key: str, answer) -> None:
    await conn.execute(_ANSWER, key, answer)


async def release(conn: asyncpg.Connection, key: str) -> None:
    await conn.execute(_RELEASE, key)
