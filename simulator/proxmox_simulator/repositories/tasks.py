"""Durable task queue: rows, events, logs, leases and resource locks.

A task is acknowledged (its UPID returned) only after ``create`` commits the
task row, its ``created`` event, its idempotency key and its resource lock in
the caller's transaction.  Workers claim with ``FOR UPDATE SKIP LOCKED`` and a
lease measured in PostgreSQL wall time; ``finish`` only succeeds for the
current lease holder, so a worker that lost its lease cannot complete twice.
"""

from __future__ import annotations

import asyncpg

from proxmox_simulator.domain.errors import Conflict
from proxmox_simulator.repositories.db import INT4_MAX, saturated

TASK_CHANNEL = "pvesim_tasks"

_BY_IDEMPOTENCY_KEY = "SELECT upid FROM tasks WHERE idempotency_key = $1"
_NEXT_PID = "SELECT nextval('task_pid_seq')"
_INSERT = """
INSERT INTO tasks (upid, node, pid, pstart, starttime, type, id, userid, tokenid, state,
                   payload, idempotency_key, clock_start)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11, $12)
"""
_EVENT = "INSERT INTO task_events (upid, kind, worker, detail) VALUES ($1, $2, $3, $4)"
_LOCK = "INSERT INTO resource_locks (resource, upid) VALUES ($1, $2)"
_LOCK_HOLDER = "SELECT upid FROM resource_locks WHERE resource = $1"
_CLAIM = """
UPDATE tasks SET state = 'running', lease_owner = $1,
                 lease_expires_at = clock_timestamp() + make_interval(secs => $2),
                 attempts = attempts + 1
WHERE upid = (
    SELECT upid FROM tasks
    WHERE state = 'queued' OR (state = 'running' AND lease_expires_at < clock_timestamp())
    ORDER BY created_at
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
RETURNING *
"""
_RENEW = """
UPDATE tasks SET lease_expires_at = clock_timestamp() + make_interval(secs => $3)
WHERE upid = $1 AND lease_owner = $2 AND state = 'running'
RETURNING upid
"""
# The UPDATE takes the task row's lock and, under READ COMMITTED, re-reads the
# counter a concurrent appender just committed: every append gets its own range.
_APPEND_LOG = """
WITH reserved AS (
    UPDATE tasks SET log_lines = log_lines + cardinality($2::text[])
    WHERE upid = $1
    RETURNING log_lines - cardinality($2::text[]) AS last_before
)
INSERT INTO task_log (upid, n, t)
SELECT $1, reserved.last_before + s.ord, s.line
FROM reserved, unnest($2::text[]) WITH ORDINALITY AS s(line, ord)
"""
_FINISH = """
UPDATE tasks SET state = 'stopped', exitstatus = $3, endtime = $4, warnings = $5,
                 lease_owner = NULL, lease_expires_at = NULL
WHERE upid = $1 AND lease_owner = $2 AND state = 'running'
RETURNING upid
"""
_RELEASE_LOCKS = "DELETE FROM resource_locks WHERE upid = $1"
_GET = "SELECT * FROM tasks WHERE upid = $1"
_LOG = "SELECT n, t FROM task_log WHERE upid = $1 AND n > $2 ORDER BY n LIMIT $3"
_LOG_TOTAL = "SELECT count(*) FROM task_log WHERE upid = $1"
_LIST = """
SELECT * FROM tasks
WHERE ($1::text IS NULL OR node = $1)
  AND ($2::text IS NULL OR type = $2)
  AND ($3::text IS NULL OR userid = $3 OR userid || '!' || tokenid = $3)
  AND ($4::text IS NULL OR id = $4)
  AND ($5::text IS NULL OR ($5 = 'active' AND state <> 'stopped')
                        OR ($5 = 'archive' AND state = 'stopped') OR $5 = 'all')
  AND (NOT $6::boolean OR (state = 'stopped' AND exitstatus <> 'OK'))
ORDER BY starttime DESC, pid DESC
OFFSET $7 LIMIT $8
"""
_EVENTS = "SELECT kind, worker, detail FROM task_events WHERE upid = $1 ORDER BY id"
# Per node: every unfinished task (oldest first), then its `$1` newest finished ones.
_RECENT = """
SELECT * FROM (
    SELECT *, row_number() OVER (PARTITION BY node ORDER BY starttime DESC, pid DESC) AS rank
    FROM tasks WHERE state = 'stopped'
) finished WHERE rank <= $1
UNION ALL
SELECT *, 0 AS rank FROM tasks WHERE state <> 'stopped'
ORDER BY node, rank, starttime, pid
"""


async def existing_for_key(conn: asyncpg.Connection, key: str) -> str | None:
    return await conn.fetchval(_BY_IDEMPOTENCY_KEY, key)


async def next_pid(conn: asyncpg.Connection) -> int:
    return await conn.fetchval(_NEXT_PID)


async def insert(
    conn,
    *,
    upid,
    node,
    pid,
    pstart,
    starttime,
    type,
    id,
    userid,
    tokenid,
    payload,
    idempotency_key,
    lock,
    clock_start=None,
):
    """Insert row, event and lock; must run inside the caller's transaction."""
    await conn.execute(
        _INSERT,
        upid,
        node,
        pid,
        pstart,
        starttime,
        type,
        id,
        userid,
        tokenid,
        payload,
        idempotency_key,
        clock_start,
    )
    await conn.execute(_EVENT, upid, "created", None, {"type": type, "id": id})
    if lock:
        try:
            async with conn.transaction():  # savepoint: report the holder, keep the txn
                await conn.execute(_LOCK, lock, upid)
        except asyncpg.UniqueViolationError:
            holder = await conn.fetchval(_LOCK_HOLDER, lock)
            raise Conflict(
                f"can't lock file '/var/lock/{lock}.conf' - got timeout (held by {holder})"
            ) from None
    await conn.execute(f"NOTIFY {TASK_CHANNEL}")


async def claim(conn, worker_id: str, lease_seconds: float):
    async with conn.transaction():
        row = await conn.fetchrow(_CLAIM, worker_id, lease_seconds)
        if row is not None:
            kind = "claimed" if row["attempts"] == 1 else "reclaimed"
            await conn.execute(_EVENT, row["upid"], kind, worker_id, {"attempt": row["attempts"]})
    return row


async def renew(conn, upid: str, worker_id: str, lease_seconds: float) -> bool:
    return await conn.fetchval(_RENEW, upid, worker_id, lease_seconds) is not None


async def append_log(conn, upid: str, lines: list[str]) -> None:
    await conn.execute(_APPEND_LOG, upid, lines)


class LeaseLost(Exception):
    """The worker no longer owns the task; its effects must be rolled back."""


async def finish(conn, *, upid, worker_id, exitstatus, endtime, warnings) -> None:
    """Mark stopped and release locks; call inside the effect's transaction."""
    done = await conn.fetchval(_FINISH, upid, worker_id, exitstatus, endtime, warnings)
    if done is None:
        raise LeaseLost(upid)
    await conn.execute(_RELEASE_LOCKS, upid)
    await conn.execute(_EVENT, upid, "finished", worker_id, {"exitstatus": exitstatus})


_ABORT = """
UPDATE tasks SET state = 'stopped', exitstatus = $2, endtime = $3,
                 lease_owner = NULL, lease_expires_at = NULL
WHERE upid = $1 AND state <> 'stopped'
RETURNING upid
"""


async def abort(conn, upid: str, exitstatus: str, endtime: int, by: str) -> bool:
    """Stop a queued or running task; its worker then fails ``finish`` (LeaseLost)
    and rolls its effect back.  Call inside a transaction."""
    if await conn.fetchval(_ABORT, upid, exitstatus, endtime) is None:
        return False
    await conn.execute(_RELEASE_LOCKS, upid)
    await append_log(conn, upid, [f"TASK ERROR: {exitstatus}"])
    await conn.execute(_EVENT, upid, "aborted", None, {"by": by})
    return True


async def get(conn, upid: str):
    return await conn.fetchrow(_GET, upid)


async def log(conn, upid: str, start: int, limit: int):
    page = await conn.fetch(_LOG, upid, saturated(start, INT4_MAX), saturated(limit))
    return page, await conn.fetchval(_LOG_TOTAL, upid)


async def events(conn, upid: str):
    return await conn.fetch(_EVENTS, upid)


async def list_tasks(conn, *, node, typefilter, userfilter, vmid, source, errors, start, limit):
    return await conn.fetch(
        _LIST,
        node,
        typefilter,
        userfilter,
        vmid,
        source,
        errors,
        saturated(start),
        saturated(limit),
    )


async def recent(conn, finished_per_node: int):
    """What each node's status cache holds for `/cluster/tasks` (see tasks.service)."""
    return await conn.fetch(_RECENT, finished_per_node)


_QUEUE_DEPTH = """
SELECT count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'running') AS running
FROM tasks WHERE state <> 'stopped'
"""


async def queue_depth(conn) -> tuple[int, int]:
    """(queued, running) tasks of every replica; served by the partial claim index."""
    row = await conn.fetchrow(_QUEUE_DEPTH)
    return row["queued"], row["running"]


_CONSOLE_PORTS = """
SELECT (payload->>'console_port')::int AS port FROM tasks
WHERE node = $1 AND state <> 'stopped' AND payload ? 'console_port'
"""


async def console_ports_in_use(conn, node: str) -> set[int]:
    """Ports the node's unfinished console tasks listen on (PVE's next_vnc_port skips them)."""
    # One allocator per node at a time, so two consoles opened together get two ports.
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('console-ports:' || $1))", node)
    return {row["port"] for row in await conn.fetch(_CONSOLE_PORTS, node)}


_NODE_HISTORY = """
SELECT upid, starttime, endtime, type, id, userid, tokenid, exitstatus
FROM tasks WHERE node = $1 ORDER BY starttime, pid
"""


async def node_history(conn, node: str):
    """Every task of ``node`` in start order (what its daemons logged)."""
    return await conn.fetch(_NODE_HISTORY, node)
