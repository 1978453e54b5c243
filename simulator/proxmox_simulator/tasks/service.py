"""Enqueueing durable tasks inside the caller's transaction."""

from __future__ import annotations

import contextvars

import asyncpg

from proxmox_simulator.domain.access import Principal
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.simulation.clock import Clock
from proxmox_simulator.tasks.upid import Upid

_U32 = 0xFFFFFFFF

# Set by the HTTP adapter from a client's ``Idempotency-Key`` header (scoped to
# the caller); the task a request creates records it, so a retried request
# gets the first request's UPID instead of a second task.
request_idempotency_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_idempotency_key", default=None
)


def scoped_idempotency_key(principal: Principal, key: str) -> str:
    return f"{principal.auth_id}:{key}"


async def enqueue(
    conn: asyncpg.Connection,
    clock: Clock,
    *,
    node: str,
    task_type: str,
    task_id: str,
    principal: Principal,
    payload: dict,
    lock: str | None = None,
    idempotency_key: str | None = None,
) -> str:
    """Create the task; the caller's transaction commits it together with its effects.

    ``conn`` must already be inside a transaction: the row, event, lock and the
    caller's own writes become visible together or not at all.
    """
    if not conn.is_in_transaction():
        raise RuntimeError("enqueue() must run inside a transaction")
    idempotency_key = idempotency_key or request_idempotency_key.get()
    if idempotency_key:
        existing = await task_repo.existing_for_key(conn, idempotency_key)
        if existing:
            return existing
    node_row = await inventory.node(conn, node)
    boot = node_row["boot_epoch"] if node_row else 0
    clock_start = clock.now()
    starttime = int(clock_start)
    pid = await task_repo.next_pid(conn)
    # pstart is the worker's start in clock ticks since boot (100 Hz), like /proc/<pid>/stat.
    pstart = max(0, (starttime - boot) * 100) & _U32
    upid = Upid(
        node=node,
        pid=pid & _U32,
        pstart=pstart,
        starttime=starttime & _U32,
        type=task_type,
        id=task_id,
        user=principal.auth_id,
    )
    await task_repo.insert(
        conn,
        upid=str(upid),
        node=node,
        pid=upid.pid,
        pstart=pstart,
        starttime=starttime,
        type=task_type,
        id=task_id,
        userid=principal.userid,
        tokenid=principal.tokenid,
        payload=payload,
        idempotency_key=idempotency_key,
        lock=lock,
        clock_start=clock_start,
    )
    return str(upid)


def task_status(row) -> dict:
    """PVE's ``GET /nodes/{node}/tasks/{upid}/status`` field set."""
    status = {
        "upid": row["upid"],
        "node": row["node"],
        "pid": row["pid"],
        "pstart": row["pstart"],
        "starttime": row["starttime"],
        "type": row["type"],
        "id": row["id"],
        "user": row["userid"],
        "status": "stopped" if row["state"] == "stopped" else "running",
    }
    if row["tokenid"]:
        status["tokenid"] = row["tokenid"]
    if row["state"] == "stopped":
        status["exitstatus"] = row["exitstatus"]
    return status


def task_list_entry(row) -> dict:
    entry = {
        "upid": row["upid"],
        "node": row["node"],
        "pid": row["pid"],
        "pstart": row["pstart"],
        "starttime": row["starttime"],
        "type": row["type"],
        "id": row["id"],
        "user": row["userid"] + (f"!{row['tokenid']}" if row["tokenid"] else ""),
    }
    if row["state"] == "stopped":
        entry["status"] = row["exitstatus"]
        entry["endtime"] = row["endtime"]
    return entry
