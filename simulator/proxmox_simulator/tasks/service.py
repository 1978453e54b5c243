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


# PVE's active_workers keeps a node's running tasks and fills up to this many entries with
# its newest finished ones; that list is what the node broadcasts for /cluster/tasks.
RECENT_TASKS = 25


def cluster_task_list(rows) -> list[dict]:
    """`/cluster/tasks` as PVE answers it: node after node, each node's unfinished tasks
    first, then its newest finished ones (newest first) up to RECENT_TASKS entries in
    all; a finished task without its pid, no entry with pstart, a token's tasks with
    `user` and `tokenid` apart. `rows`: `repositories.tasks.recent`, grouped by node."""
    out: list[dict] = []
    per_node: dict[str, int] = {}
    running: dict[str, int] = {}
    for row in rows:
        if row["state"] != "stopped":
            running[row["node"]] = running.get(row["node"], 0) + 1
    for row in rows:
        node = row["node"]
        if row["state"] == "stopped" and per_node.get(node, 0) >= max(
            0, RECENT_TASKS - running.get(node, 0)
        ):
            continue
        entry = {
            "upid": row["upid"],
            "node": node,
            "starttime": row["starttime"],
            "type": row["type"],
            "id": row["id"],
            "user": row["userid"],
        }
        if row["tokenid"]:
            entry["tokenid"] = row["tokenid"]
        if row["state"] == "stopped":
            per_node[node] = per_node.get(node, 0) + 1
            entry["status"] = row["exitstatus"]
            entry["endtime"] = row["endtime"]
        else:
            entry["pid"] = row["pid"]
        out.append(entry)
    return out


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
