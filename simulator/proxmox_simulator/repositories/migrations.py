"""Explicit, numbered SQL migrations.

Files ``migrations/NNNN_name.sql`` apply in order, each in its own
transaction, under an advisory lock so two migrators cannot interleave.
Readiness compares the database's latest version with the packaged latest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x5065_5653_494D  # "PeVSIM": any constant unique to this schema


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def packaged_migrations() -> list[Migration]:
    folder = resources.files("proxmox_simulator.repositories") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


def latest_packaged_version() -> int:
    return packaged_migrations()[-1].version


_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def applied_version(conn: asyncpg.Connection) -> int:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return 0
    return await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")


async def migrate(conn: asyncpg.Connection) -> list[Migration]:
    applied: list[Migration] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(_CREATE_TABLE)
        current = await applied_version(conn)
        for migration in packaged_migrations():
            if migration.version <= current:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            applied.append(migration)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied


async def is_ready(conn: asyncpg.Connection) -> tuple[bool, int, int]:
    """Ready only when the newest packaged migration is applied."""
    current = await applied_version(conn)
    latest = latest_packaged_version()
    return current >= latest, current, latest
