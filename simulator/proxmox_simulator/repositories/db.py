"""Connection pool and transaction helpers (asyncpg, no ORM)."""

from __future__ import annotations

import json

import asyncpg

INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1


def saturated(value: int, maximum: int = INT8_MAX) -> int:
    """A count or position the API admits unbounded, at most what its column (int4) or
    OFFSET/LIMIT (int8) holds: past every row either way, as PVE reads past its log's end."""
    return min(value, maximum)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb columns round-trip as Python values; the codec is cheap and explicit.
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection
    )


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn
