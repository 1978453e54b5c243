"""Backup jobs (/etc/pve/jobs.cfg vzdump sections) and vzdump archive volumes."""

from __future__ import annotations

import asyncpg

_JOBS = "SELECT id, options, version FROM backup_jobs ORDER BY id"
_JOB = "SELECT id, options, version FROM backup_jobs WHERE id = $1"
_JOB_FOR_UPDATE = _JOB + " FOR UPDATE"
_INSERT_JOB = (
    "INSERT INTO backup_jobs (id, options) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id"
)
_UPDATE_JOB = """
UPDATE backup_jobs SET options = $3, version = version + 1
WHERE id = $1 AND version = $2 RETURNING version
"""
_DELETE_JOB = "DELETE FROM backup_jobs WHERE id = $1 RETURNING id"
_INSERT_ARCHIVE = """
INSERT INTO volumes (volid, storage, node, vmid, content, format, size, ctime, notes, protected,
                     guest_config)
VALUES ($1, $2, $3, $4, 'backup', $5, $6, $7, $8, $9, $10)
"""
_SET_ANNOTATIONS = """
UPDATE volumes SET notes = coalesce($2, notes), protected = coalesce($3, protected)
WHERE volid = $1 RETURNING volid
"""
_ARCHIVES = """
SELECT * FROM volumes WHERE content = 'backup' AND storage = $1 AND vmid = $2
  AND (node IS NULL OR node = $3)
ORDER BY ctime DESC, volid DESC
"""
_DELETE_VOLUME = "DELETE FROM volumes WHERE volid = $1"
_SET_VERIFICATION = """
UPDATE volumes SET verify_state = $2, verify_upid = $3
WHERE volid = $1 AND content = 'backup' RETURNING volid
"""


async def jobs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_JOBS)


async def job(conn: asyncpg.Connection, job_id: str, *, for_update: bool = False):
    return await conn.fetchrow(_JOB_FOR_UPDATE if for_update else _JOB, job_id)


async def insert_job(conn: asyncpg.Connection, job_id: str, options: dict) -> bool:
    return await conn.fetchval(_INSERT_JOB, job_id, options) is not None


async def update_job(conn, job_id: str, expected_version: int, options: dict) -> int | None:
    """The new version, or None when another writer committed first."""
    return await conn.fetchval(_UPDATE_JOB, job_id, expected_version, options)


async def delete_job(conn: asyncpg.Connection, job_id: str) -> bool:
    return await conn.fetchval(_DELETE_JOB, job_id) is not None


async def insert_archive(
    conn, *, volid, storage_name, node_name, vmid, fmt, size, ctime, notes, protected, config
) -> None:
    await conn.execute(
        _INSERT_ARCHIVE,
        volid,
        storage_name,
        node_name,
        vmid,
        fmt,
        size,
        ctime,
        notes,
        protected,
        config,
    )


async def set_annotations(conn, volid: str, notes: str | None, protected: bool | None) -> bool:
    return await conn.fetchval(_SET_ANNOTATIONS, volid, notes, protected) is not None


async def archives(conn, storage_name: str, vmid: int, node_name: str) -> list[asyncpg.Record]:
    """A guest's archives on one storage, newest first (prune order)."""
    return await conn.fetch(_ARCHIVES, storage_name, vmid, node_name)


async def delete_volume(conn: asyncpg.Connection, volid: str) -> None:
    await conn.execute(_DELETE_VOLUME, volid)


async def set_verification(conn, volid: str, state: str, upid: str) -> bool:
    """Record a PBS snapshot's last verification; False when there is no such backup."""
    return await conn.fetchval(_SET_VERIFICATION, volid, state, upid) is not None
