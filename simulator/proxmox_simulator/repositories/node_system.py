"""Per-node system files: /etc/network/interfaces(.new), resolv.conf, hosts, timezone."""

from __future__ import annotations

import asyncpg

_NETWORK = "SELECT node, applied, pending, version FROM node_network WHERE node = $1"
_ENSURE_NETWORK = """
INSERT INTO node_network (node, applied) VALUES ($1, $2) ON CONFLICT DO NOTHING
"""
_LOCK_NETWORK = _NETWORK + " FOR UPDATE"
_SAVE_NETWORK = """
UPDATE node_network SET applied = $3, pending = $4, version = version + 1
WHERE node = $1 AND version = $2 RETURNING version
"""
_SETTING = "SELECT value, version FROM node_settings WHERE node = $1 AND key = $2"
_ENSURE_SETTING = """
INSERT INTO node_settings (node, key, value) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
"""
_LOCK_SETTING = _SETTING + " FOR UPDATE"
_SAVE_SETTING = """
UPDATE node_settings SET value = $4, version = version + 1
WHERE node = $1 AND key = $2 AND version = $3 RETURNING version
"""


async def network(conn: asyncpg.Connection, node: str, initial: dict):
    """The node's interfaces row, created from ``initial`` (its seeded file) on first use."""
    await conn.execute(_ENSURE_NETWORK, node, initial)
    return await conn.fetchrow(_NETWORK, node)


async def lock_network(conn: asyncpg.Connection, node: str, initial: dict):
    await conn.execute(_ENSURE_NETWORK, node, initial)
    return await conn.fetchrow(_LOCK_NETWORK, node)


async def save_network(conn, node: str, expected_version: int, applied, pending) -> int | None:
    return await conn.fetchval(_SAVE_NETWORK, node, expected_version, applied, pending)


async def setting(conn: asyncpg.Connection, node: str, key: str, initial):
    await conn.execute(_ENSURE_SETTING, node, key, initial)
    return await conn.fetchrow(_SETTING, node, key)


async def lock_setting(conn: asyncpg.Connection, node: str, key: str, initial):
    await conn.execute(_ENSURE_SETTING, node, key, initial)
    return await conn.fetchrow(_LOCK_SETTING, node, key)


async def save_setting(conn, node: str, key: str, expected_version: int, value) -> int | None:
    return await conn.fetchval(_SAVE_SETTING, node, key, expected_version, value)


async def settings_by_node(conn: asyncpg.Connection, key: str) -> dict[str, object]:
    """Every node's value of one setting (nodes that never wrote it are absent)."""
    rows = await conn.fetch("SELECT node, value FROM node_settings WHERE key = $1", key)
    return {r["node"]: r["value"] for r in rows}


async def put_setting(conn: asyncpg.Connection, node: str, key: str, value) -> None:
    await conn.execute(
        "INSERT INTO node_settings (node, key, value) VALUES ($1, $2, $3)"
        " ON CONFLICT (node, key) DO UPDATE SET value = $3,"
        " version = node_settings.version + 1",
        node,
        key,
        value,
    )
