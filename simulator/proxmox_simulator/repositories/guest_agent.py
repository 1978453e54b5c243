"""Guest-agent side state of a simulated VM and its cloud-init drive."""

from __future__ import annotations

import asyncpg

from proxmox_simulator.repositories.db import INT4_MAX

_ENSURE = "INSERT INTO guest_agent_state (vmid) VALUES ($1) ON CONFLICT DO NOTHING"
_STATE = "SELECT * FROM guest_agent_state WHERE vmid = $1"
_LOCK = _STATE + " FOR UPDATE"
_SET_FROZEN = "UPDATE guest_agent_state SET frozen = $2 WHERE vmid = $1"
_NEXT_PID = """
UPDATE guest_agent_state SET next_pid = next_pid + 1 WHERE vmid = $1 RETURNING next_pid - 1
"""
_SET_CLOUDINIT = "UPDATE guest_agent_state SET cloudinit = $2 WHERE vmid = $1"
_INSERT_EXEC = "INSERT INTO guest_agent_exec (vmid, pid, command, result) VALUES ($1, $2, $3, $4)"
_EXEC = "SELECT command, result FROM guest_agent_exec WHERE vmid = $1 AND pid = $2"
_WRITE_FILE = """
INSERT INTO guest_files (vmid, path, content) VALUES ($1, $2, $3)
ON CONFLICT (vmid, path) DO UPDATE SET content = EXCLUDED.content
"""
_READ_FILE = "SELECT content FROM guest_files WHERE vmid = $1 AND path = $2"


async def state(conn: asyncpg.Connection, vmid: int, *, for_update: bool = False):
    await conn.execute(_ENSURE, vmid)
    return await conn.fetchrow(_LOCK if for_update else _STATE, vmid)


async def set_frozen(conn, vmid: int, frozen: bool) -> None:
    await conn.execute(_SET_FROZEN, vmid, frozen)


async def next_pid(conn, vmid: int) -> int:
    await conn.execute(_ENSURE, vmid)
    return await conn.fetchval(_NEXT_PID, vmid)


async def set_cloudinit(conn, vmid: int, values: dict) -> None:
    await conn.execute(_ENSURE, vmid)
    await conn.execute(_SET_CLOUDINIT, vmid, values)


async def insert_exec(conn, vmid: int, pid: int, command: list, result: dict) -> None:
    await conn.execute(_INSERT_EXEC, vmid, pid, command, result)


async def exec_result(conn, vmid: int, pid: int):
    # PVE passes any integer to the agent; pids are int4 here, so a larger one names no process.
    if not -INT4_MAX - 1 <= pid <= INT4_MAX:
        return None
    return await conn.fetchrow(_EXEC, vmid, pid)


async def write_file(conn, vmid: int, path: str, content: bytes) -> None:
    await conn.execute(_WRITE_FILE, vmid, path, content)


async def read_file(conn, vmid: int, path: str) -> bytes | None:
    return await conn.fetchval(_READ_FILE, vmid, path)
