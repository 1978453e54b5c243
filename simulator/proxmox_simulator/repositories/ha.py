"""HA groups and resources (/etc/pve/ha/*.cfg)."""

from __future__ import annotations

import asyncpg

_GROUPS = "SELECT group_id, options, version FROM ha_groups ORDER BY group_id"
_GROUP = "SELECT group_id, options, version FROM ha_groups WHERE group_id = $1"
_INSERT_GROUP = """
INSERT INTO ha_groups (group_id, options) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING group_id
"""
_UPDATE_GROUP = """
UPDATE ha_groups SET options = $3, version = version + 1
WHERE group_id = $1 AND version = $2 RETURNING version
"""
_DELETE_GROUP = "DELETE FROM ha_groups WHERE group_id = $1 RETURNING group_id"
_GROUP_IN_USE = "SELECT EXISTS (SELECT 1 FROM ha_resources WHERE options->>'group' = $1)"

_RESOURCES = """
SELECT r.sid, r.type, r.vmid, r.options, r.version, g.node, g.status
FROM ha_resources r LEFT JOIN guests g ON g.vmid = r.vmid ORDER BY r.sid
"""
_RESOURCE = """
SELECT r.sid, r.type, r.vmid, r.options, r.version, g.node, g.status
FROM ha_resources r LEFT JOIN guests g ON g.vmid = r.vmid WHERE r.sid = $1
"""
_INSERT_RESOURCE = """
INSERT INTO ha_resources (sid, type, vmid, options) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING sid
"""
_UPDATE_RESOURCE = """
UPDATE ha_resources SET options = $3, version = version + 1
WHERE sid = $1 AND version = $2 RETURNING version
"""
_DELETE_RESOURCE = "DELETE FROM ha_resources WHERE sid = $1 RETURNING sid"


async def groups(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_GROUPS)


async def group(conn: asyncpg.Connection, group_id: str):
    return await conn.fetchrow(_GROUP, group_id)


async def insert_group(conn, group_id: str, options: dict) -> bool:
    return await conn.fetchval(_INSERT_GROUP, group_id, options) is not None


async def update_group(conn, group_id: str, expected_version: int, options: dict) -> int | None:
    return await conn.fetchval(_UPDATE_GROUP, group_id, expected_version, options)


async def delete_group(conn, group_id: str) -> bool:
    return await conn.fetchval(_DELETE_GROUP, group_id) is not None


async def group_in_use(conn, group_id: str) -> bool:
    return await conn.fetchval(_GROUP_IN_USE, group_id)


async def resources(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_RESOURCES)


async def resource(conn: asyncpg.Connection, sid: str):
    return await conn.fetchrow(_RESOURCE, sid)


async def insert_resource(conn, sid: str, kind: str, vmid: int, options: dict) -> bool:
    return await conn.fetchval(_INSERT_RESOURCE, sid, kind, vmid, options) is not None


async def update_resource(conn, sid: str, expected_version: int, options: dict) -> int | None:
    return await conn.fetchval(_UPDATE_RESOURCE, sid, expected_version, options)


async def delete_resource(conn, sid: str) -> bool:
    return await conn.fetchval(_DELETE_RESOURCE, sid) is not None
