"""Rows of the contract-driven resource store (see migration 0005)."""

from __future__ import annotations

import asyncpg

from proxmox_simulator.domain.errors import StaleWrite

_COLUMNS = "collection, scope, key, data, version"
_GET = f"SELECT {_COLUMNS} FROM resource_store WHERE collection = $1 AND scope = $2 AND key = $3"
_GET_FOR_UPDATE = _GET + " FOR UPDATE"
_LIST = f"""
SELECT {_COLUMNS} FROM resource_store WHERE collection = $1 AND scope = $2
ORDER BY position
"""
_INSERT = """
INSERT INTO resource_store (collection, scope, key, data, position, updated_at)
VALUES ($1, $2, $3, $4, nextval('resource_store_position'), $5)
ON CONFLICT DO NOTHING
RETURNING version
"""
_UPSERT = """
INSERT INTO resource_store (collection, scope, key, data, position, updated_at)
VALUES ($1, $2, $3, $4, nextval('resource_store_position'), $5)
ON CONFLICT (collection, scope, key)
DO UPDATE SET data = EXCLUDED.data, updated_at = EXCLUDED.updated_at,
              version = resource_store.version + 1
RETURNING version
"""
# Compare-and-swap on the version column: a writer that read an older row
# updates nothing and is told so.
_UPDATE = """
UPDATE resource_store SET data = $4, version = version + 1, updated_at = $6
WHERE collection = $1 AND scope = $2 AND key = $3 AND version = $5
RETURNING version
"""
_DELETE = "DELETE FROM resource_store WHERE collection = $1 AND scope = $2 AND key = $3"
# Children live in collections below the item's template and carry the item's
# key in their scope, so removing an item removes everything beneath it.
_DELETE_BELOW = """
DELETE FROM resource_store WHERE collection LIKE $1 || '/%' AND scope @> $2
"""
_NEXT_INTEGER_KEY = """
SELECT coalesce(max(key::bigint) + 1, 0) FROM resource_store
WHERE collection = $1 AND scope = $2 AND key ~ '^[0-9]+$'
"""


async def get(
    conn: asyncpg.Connection, collection: str, scope: dict, key: str, *, for_update=False
):
    return await conn.fetchrow(_GET_FOR_UPDATE if for_update else _GET, collection, scope, key)


async def list_items(conn: asyncpg.Connection, collection: str, scope: dict) -> list:
    return await conn.fetch(_LIST, collection, scope)


async def insert(
    conn: asyncpg.Connection, collection: str, scope: dict, key: str, data: dict, now: float
) -> bool:
    """False when the key is taken (the caller reports PVE's 'already exists')."""
    return await conn.fetchval(_INSERT, collection, scope, key, data, now) is not None


async def upsert(
    conn: asyncpg.Connection, collection: str, scope: dict, key: str, data: dict, now: float
) -> int:
    return await conn.fetchval(_UPSERT, collection, scope, key, data, now)


async def update(
    conn: asyncpg.Connection,
    collection: str,
    scope: dict,
    key: str,
    data: dict,
    *,
    expected_version: int,
    now: float,
) -> int:
    version = await conn.fetchval(_UPDATE, collection, scope, key, data, expected_version, now)
    if version is None:
        raise StaleWrite("detected modified configuration - file changed by other user? Try again.")
    return version


async def delete(
    conn: asyncpg.Connection, collection: str, scope: dict, key: str, key_param: str | None
) -> bool:
    removed = await conn.execute(_DELETE, collection, scope, key)
    if key_param is not None:
        await conn.execute(_DELETE_BELOW, collection, {**scope, key_param: key})
    return removed != "DELETE 0"


async def next_integer_key(conn: asyncpg.Connection, collection: str, scope: dict) -> int:
    return await conn.fetchval(_NEXT_INTEGER_KEY, collection, scope)


async def delete_scope(conn: asyncpg.Connection, scope: dict) -> None:
    """Everything stored below one parent (a destroyed guest's firewall, ...)."""
    await conn.execute("DELETE FROM resource_store WHERE scope @> $1", scope)
