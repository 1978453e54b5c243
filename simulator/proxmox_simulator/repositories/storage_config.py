"""storage.cfg sections: create, update (compare-and-swap), delete."""

from __future__ import annotations

import asyncpg

_INSERT = """
INSERT INTO storages (storage, type, content, shared, path, nodes, total, enabled, options)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT DO NOTHING RETURNING storage
"""
_LOCK = "SELECT * FROM storages WHERE storage = $1 FOR UPDATE"
_UPDATE = """
UPDATE storages SET content = $3, shared = $4, path = $5, nodes = $6, enabled = $7,
       options = $8, version = version + 1
WHERE storage = $1 AND version = $2 RETURNING version
"""
_DELETE = "DELETE FROM storages WHERE storage = $1"
_GUEST_VOLUMES = """
SELECT count(*) FROM volumes WHERE storage = $1 AND content IN ('images', 'rootdir')
"""


async def insert(
    conn: asyncpg.Connection,
    *,
    storage,
    type,
    content,
    shared,
    path,
    nodes,
    total,
    enabled,
    options,
) -> bool:
    return (
        await conn.fetchval(
            _INSERT, storage, type, content, shared, path, nodes, total, enabled, options
        )
        is not None
    )


async def lock(conn: asyncpg.Connection, storage: str):
    return await conn.fetchrow(_LOCK, storage)


async def update(
    conn, storage: str, expected_version: int, *, content, shared, path, nodes, enabled, options
):
    return await conn.fetchval(
        _UPDATE, storage, expected_version, content, shared, path, nodes, enabled, options
    )


async def delete(conn: asyncpg.Connection, storage: str) -> None:
    await conn.execute(_DELETE, storage)


async def guest_volume_count(conn: asyncpg.Connection, storage: str) -> int:
    return await conn.fetchval(_GUEST_VOLUMES, storage)
