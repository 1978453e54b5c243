"""Sections of small PVE config files (status.cfg, mapping/*.cfg), one row each."""

from __future__ import annotations

import asyncpg

_LIST = "SELECT id, type, options, version FROM section_configs WHERE file = $1 ORDER BY id"
_GET = "SELECT id, type, options, version FROM section_configs WHERE file = $1 AND id = $2"
_LOCK = _GET + " FOR UPDATE"
_INSERT = """
INSERT INTO section_configs (file, id, type, options) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING id
"""
_UPDATE = """
UPDATE section_configs SET options = $4, version = version + 1
WHERE file = $1 AND id = $2 AND version = $3 RETURNING version
"""
_DELETE = "DELETE FROM section_configs WHERE file = $1 AND id = $2 RETURNING id"


async def sections(conn: asyncpg.Connection, file: str) -> list[asyncpg.Record]:
    return await conn.fetch(_LIST, file)


async def section(conn: asyncpg.Connection, file: str, section_id: str, *, for_update=False):
    return await conn.fetchrow(_LOCK if for_update else _GET, file, section_id)


async def insert(conn, file: str, section_id: str, kind: str, options: dict) -> bool:
    return await conn.fetchval(_INSERT, file, section_id, kind, options) is not None


async def update(conn, file: str, section_id: str, expected_version: int, options: dict):
    return await conn.fetchval(_UPDATE, file, section_id, expected_version, options)


async def delete(conn, file: str, section_id: str) -> bool:
    return await conn.fetchval(_DELETE, file, section_id) is not None


async def lock_file(conn, file: str) -> None:
    """Serialise writers of one file for the transaction (PVE takes a domain lock)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pvesim:section:' || $1))", file)
