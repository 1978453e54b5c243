"""Small key/value settings (signing keys, clock state) shared by all replicas."""

from __future__ import annotations

import base64

import asyncpg

from proxmox_simulator.domain.auth import AuthKeys

_GET = "SELECT value FROM simulator_settings WHERE key = $1"
_INSERT_IF_ABSENT = """
INSERT INTO simulator_settings (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO NOTHING
"""


async def get(conn: asyncpg.Connection, key: str):
    return await conn.fetchval(_GET, key)


async def auth_keys(conn: asyncpg.Connection) -> AuthKeys:
    """Load the signing keys, generating them once; concurrent starters agree."""
    value = await get(conn, "auth_keys")
    if value is None:
        fresh = AuthKeys.generate()
        await conn.execute(
            _INSERT_IF_ABSENT,
            "auth_keys",
            {
                "private_key_pem": fresh.private_key_pem.decode(),
                "csrf_secret": base64.b64encode(fresh.csrf_secret).decode(),
            },
        )
        value = await get(conn, "auth_keys")
    return AuthKeys(value["private_key_pem"].encode(), base64.b64decode(value["csrf_secret"]))


_UPSERT = """
INSERT INTO simulator_settings (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
"""


async def get_or_create(conn: asyncpg.Connection, key: str, make) -> dict:
    """The value under ``key``; ``make()`` creates it once (concurrent callers agree)."""
    value = await get(conn, key)
    if value is None:
        await conn.execute(_INSERT_IF_ABSENT, key, make())
        value = await get(conn, key)
    return value


async def put(conn: asyncpg.Connection, key: str, value: dict) -> None:
    await conn.execute(_UPSERT, key, value)


async def delete(conn: asyncpg.Connection, key: str) -> bool:
    return (
        await conn.fetchval("DELETE FROM simulator_settings WHERE key = $1 RETURNING key", key)
        is not None
    )
