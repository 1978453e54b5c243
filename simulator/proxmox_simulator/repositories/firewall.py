"""Firewall configuration files, one row per scope (cluster, node, guest, group)."""

from __future__ import annotations

import asyncpg

_GET = (
    "SELECT scope, options, rules, aliases, ipsets, version FROM firewall_configs WHERE scope = $1"
)
_ENSURE = "INSERT INTO firewall_configs (scope) VALUES ($1) ON CONFLICT DO NOTHING"
_LOCK = _GET + " FOR UPDATE"
_SAVE = """
UPDATE firewall_configs SET options = $3, rules = $4, aliases = $5, ipsets = $6,
       version = version + 1
WHERE scope = $1 AND version = $2 RETURNING version
"""
_DELETE = "DELETE FROM firewall_configs WHERE scope = $1 RETURNING scope"
_SCOPES_LIKE = (
    "SELECT scope, options, version FROM firewall_configs WHERE scope LIKE $1 ORDER BY scope"
)


async def get(conn: asyncpg.Connection, scope: str):
    return await conn.fetchrow(_GET, scope)


async def lock(conn: asyncpg.Connection, scope: str):
    """The scope's row, created empty if missing, locked until the transaction ends."""
    await conn.execute(_ENSURE, scope)
    return await conn.fetchrow(_LOCK, scope)


async def save(conn, scope: str, expected_version: int, *, options, rules, aliases, ipsets):
    return await conn.fetchval(_SAVE, scope, expected_version, options, rules, aliases, ipsets)


async def delete(conn: asyncpg.Connection, scope: str) -> bool:
    return await conn.fetchval(_DELETE, scope) is not None


async def scopes_with_prefix(conn: asyncpg.Connection, prefix: str) -> list[asyncpg.Record]:
    return await conn.fetch(_SCOPES_LIKE, prefix.replace("%", r"\%") + "%")
