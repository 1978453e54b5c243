"""Storage replication jobs (replication.cfg), their status and runs; datacenter.cfg;
the cluster log."""

from __future__ import annotations

import re

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import replication as repo
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.service import enqueue

JOB_OPTIONS = frozenset({"comment", "disable", "rate", "remove_job", "schedule", "source"})
_JOB_ID = re.compile(r"^([1-9][0-9]{2,8})-(\d{1,9})$")
# Only ZFS volumes can be replicated (PVE's "replicate" volume feature).
_REPLICABLE = {"zfspool"}


def _entry(row) -> dict:
    return {
        "id": row["id"],
        "type": "local",
        "guest": row["vmid"],
        "jobnum": row["jobnum"],
        "target": row["target"],
        **row["options"],
        "digest": sections.digest("replication", row["id"], row["version"]),
    }


async def list_jobs(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_entry(r) for r in await repo.jobs(conn)]


async def _require_job(conn, job_id: str):
    row = await repo.job(conn, job_id)
    if row is None:
        raise PveError(f"replication job '{job_id}' does not exist")
    return row


async def get_job(rt, job_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        return _entry(await _require_job(conn, job_id))


async def create_job(rt, params: dict) -> None:
    match = _JOB_ID.match(params["id"])
    if not match:
        raise ParameterError({"id": "replication job ID must be <vmid>-<jobnum>"})
    vmid, jobnum = int(match.group(1)), int(match.group(2))
    options = {k: v for k, v in params.items() if k in JOB_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        guest = await guest_repo.get(conn, vmid)
        if guest is None:
            raise PveError(f"guest '{vmid}' does not exist")
        await require_node(conn, params["target"])
        if guest["node"] == params["target"]:
            raise PveError(f"guest '{vmid}' is already on target node '{params['target']}'")
        if not await repo.insert(conn, params["id"], vmid, jobnum, params["target"], options):
            raise PveError(
                f"replication job for guest '{vmid}' to target '{params['target']}' already exists"
            )


async def update_job(rt, job_id: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await _require_job(conn, job_id)
        sections.check_digest(
            params.get("digest"), sections.digest("replication", job_id, row["version"])
        )
        options = sections.updated_options(row["options"], params, JOB_OPTIONS)
        sections.require_saved(await repo.update(conn, job_id, row["version"], options))


async def delete_job(rt, job_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await repo.delete(conn, job_id):
            raise PveError(f"replication job '{job_id}' does not exist")


def _status(row, guest) -> dict:
    status = {
        "id": row["id"],
        "guest": row["vmid"],
        "jobnum": row["jobnum"],
        "target": row["target"],
        "type": "local",
        "schedule": row["options"].get("schedule", "*/15"),
        "last_sync": row["last_sync"],
        "last_try": row["last_try"],
        "fail_count": row["fail_count"],
        "duration": 1.0 if row["last_try"] else 0,
        "source": guest["node"] if guest else row["options"].get("source", ""),
        "vmtype": guest["type"] if guest else "qemu",
    }
    if row["error"]:
        status["error"] = row["error"]
    if row["options"].get("disable"):
        status["disable"] = 1
    return status


async def node_status(rt, node: str, guest_filter: int | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        out = []
        for row in await repo.jobs(conn):
            guest = await guest_repo.get(conn, row["vmid"])
            if guest is None or guest["node"] != node:
                continue
            if guest_filter is not None and row["vmid"] != guest_filter:
                continue
            out.append(_status(row, guest))
    return out


async def _local_job(conn, node: str, job_id: str):
    await require_node(conn, node)
    row = await _require_job(conn, job_id)
    guest = await guest_repo.get(conn, row["vmid"])
    if guest is None or guest["node"] != node:
        raise PveError(f"replication job '{job_id}' is not local to node '{node}'")
    return row, guest


async def job_status(rt, node: str, job_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row, guest = await _local_job(conn, node, job_id)
    return _status(row, guest)


async def job_log(rt, node: str, job_id: str, start: int, limit: int) -> list[dict]:
    async with rt.pool.acquire() as conn:
        row, _guest = await _local_job(conn, node, job_id)
    lines = row["log"][start : start + limit]
    return [{"n": start + i + 1, "t": line} for i, line in enumerate(lines)]


async def schedule_now(rt, principal, node: str, job_id: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        row, guest = await _local_job(conn, node, job_id)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="replicate",
            task_id=job_id,
            principal=principal,
            # A failed run notifies through the notification system where it exists.
            payload={"id": job_id, "notify": rt.adapter.notification_system},
            lock=f"replication-{job_id}",
        )


async def run_job(conn, job_id: str, now: int) -> tuple[list[str], str | None]:
    """One replication run: every guest volume must be on replicable storage."""
    row = await _require_job(conn, job_id)
    guest = await guest_repo.get(conn, row["vmid"])
    log = [f"start replication job {job_id}", f"guest => {rules.noun(guest['type'])} {row['vmid']}"]
    error = None
    for volume in await inventory.guest_volumes(conn, row["vmid"]):
        storage = await inventory.storage(conn, volume["volid"].split(":", 1)[0])
        if storage is None or storage["type"] not in _REPLICABLE:
            error = f"missing replicate feature on volume '{volume['volid']}'"
            break
        log.append(f"replicating volume '{volume['volid']}' to {row['target']}")
    log.append(f"end replication job{' with error: ' + error if error else ''}")
    await repo.record_run(conn, job_id, now, error, log)
    return log, error


# -- datacenter.cfg ----------------------------------------------------------------


async def cluster_options(rt) -> dict:
    async with rt.pool.acquire() as conn:
        row = await repo.cluster_options(conn)
    options = dict(row["options"])
    tags = sections.split_list(options.get("registered-tags"))
    return {**options, "allowed-tags": tags}


async def set_cluster_options(rt, params: dict, declared: set[str]) -> None:
    settable = frozenset(declared) - {"delete", "digest"}
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await repo.cluster_options(conn, for_update=True)
        options = sections.updated_options(row["options"], params, settable)
        sections.require_saved(await repo.save_cluster_options(conn, row["version"], options))


# -- cluster log ----------------------------------------------------------------------


async def cluster_log(rt, limit: int) -> list[dict]:
    """Task starts and ends, newest first, as pmxcfs's cluster log records them."""
    async with rt.pool.acquire() as conn:
        rows = await task_repo.list_tasks(
            conn,
            node=None,
            typefilter=None,
            userfilter=None,
            vmid=None,
            source="all",
            errors=False,
            start=0,
            limit=limit,
        )
    entries = []
    for row in rows:
        user = row["userid"] + (f"!{row['tokenid']}" if row["tokenid"] else "")
        base = {"node": row["node"], "pid": row["pid"], "tag": "pvedaemon", "user": user}
        if row["state"] == "stopped":
            entries.append(
                {
                    **base,
                    "time": row["endtime"],
                    "pri": 6,
                    "msg": f"end task {row['upid']} {row['exitstatus']}",
                }
            )
        entries.append(
            {**base, "time": row["starttime"], "pri": 6, "msg": f"starting task {row['upid']}"}
        )
    entries.sort(key=lambda e: e["time"], reverse=True)
    return [{"uid": i + 1, **e} for i, e in enumerate(entries[:limit])]
