"""Replication jobs and datacenter.cfg."""

from __future__ import annotations

import asyncpg

_JOBS = "SELECT * FROM replication_jobs ORDER BY vmid, jobnum"
_JOB = "SELECT * FROM replication_jobs WHERE id = $1"
_INSERT = """
INSERT INTO replication_jobs (id, vmid, jobnum, target, options) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING RETURNING id
"""
_UPDATE = """
UPDATE replication_jobs SET options = $3, version = version + 1
WHERE id = $1 AND version = $2 RETURNING version
"""
_DELETE = "DELETE FROM replication_jobs WHERE id = $1 RETURNING id"
_RECORD_RUN = """
UPDATE replication_jobs
SET last_try = $2, last_sync = CASE WHEN $3::text IS NULL THEN $2 ELSE last_sync END,
    fail_count = CASE WHEN $3::text IS NULL THEN 0 ELSE fail_count + 1 END,
    error = $3, log = $4
WHERE id = $1
"""
_OPTIONS = "SELECT options, version FROM cluster_options WHERE id = 1"
_LOCK_OPTIONS = _OPTIONS + " FOR UPDATE"
_SAVE_OPTIONS = """
UPDATE cluster_options SET options = $2, version = version + 1
WHERE id = 1 AND version = $1 RETURNING version
"""


async def jobs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_JOBS)


async def job(conn: asyncpg.Connection, job_id: str):
    return await conn.fetchrow(_JOB, job_id)


async def insert(conn, job_id: str, vmid: int, jobnum: int, target: str, options: dict) -> bool:
    """False when the ID, or a job for the same guest and target, already exists."""
    return await conn.fetchval(_INSERT, job_id, vmid, jobnum, target, options) is not None


async def update(conn, job_id: str, expected_version: int, options: dict) -> int | None:
    return await conn.fetchval(_UPDATE, job_id, expected_version, options)


async def delete(conn, job_id: str) -> bool:
    return await conn.fetchval(_DELETE, job_id) is not None


async def record_run(conn, job_id: str, when: int, error: str | None, log: list[str]) -> None:
    await conn.execute(_RECORD_RUN, job_id, when, error, log)


async def cluster_options(conn, *, for_update: bool = False):
    return await conn.fetchrow(_LOCK_OPTIONS if for_update else _OPTIONS)


async def save_cluster_options(conn, expected_version: int, options: dict) -> int | None:
    return await conn.fetchval(_SAVE_OPTIONS, expected_version, options)
