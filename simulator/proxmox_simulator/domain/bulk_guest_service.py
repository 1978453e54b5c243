"""Bulk guest actions: the cluster's ``bulk-action/guest/{start,shutdown,suspend,migrate}``
and a node's ``migrateall``.

PVE answers each with a worker (``bulk-start``, ``bulk-shutdown``, ``bulk-suspend``,
``bulk-migrate``, ``migrateall``) that asks for one ordinary guest task per guest
(``qmstart``, ``vzshutdown``, ``qmigrate``, ...), waits for them a few at a time and
logs what it did; the guests change through those sub-tasks, never directly.  Guests
are visited by their ``startup`` order (reversed for shutdown and suspend), then VMID.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxmox_simulator.domain import guest_placement, guest_service
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import ParameterError, PermissionDenied, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.node_power_service import startup_order
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import replication as replication_repo
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.service import enqueue

ACTIONS = ("start", "shutdown", "suspend", "migrate")
PRIVILEGE = {
    "start": "VM.PowerMgmt",
    "shutdown": "VM.PowerMgmt",
    "suspend": "VM.PowerMgmt",
    "migrate": "VM.Migrate",
}
# PVE's default number of guest tasks a bulk worker keeps running at once.
DEFAULT_WORKERS = {"start": 4, "shutdown": 4, "suspend": 4, "migrate": 1}
_POLL = 0.02  # real seconds between looks at a running sub-task


@dataclass(frozen=True)
class TaskRuntime:
    """What the guest services need from a runtime, inside a task worker."""

    pool: object
    clock: object


def vmid_list(value) -> list[int]:
    """``vms``: an array (the cluster endpoints) or a ``pve-vmid-list`` string (a node's)."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, list) else str(value).replace(";", ",").split(",")
    return sorted({int(str(v).strip()) for v in items if str(v).strip()})


def check_permissions(
    state: AccessState, principal: Principal, vms: list[int], privileges: list[str]
) -> None:
    """The privileges on ``/vms/<ID>`` for each listed guest, else on ``/``."""
    if vms:
        for vmid in vms:
            state.require(principal, f"/vms/{vmid}", privileges)
    elif not state.has(principal, "/", privileges):
        raise PermissionDenied(f"Permission check failed (/, {', '.join(privileges)})")


async def _local_node(conn) -> str:
    nodes = await inventory.nodes(conn)
    return min(nodes, key=lambda n: n["nodeid"])["node"]


async def cluster_action(
    rt, state: AccessState, principal: Principal, action: str, params: dict
) -> str:
    """``POST /cluster/bulk-action/guest/<action>``: the worker runs on the answering node."""
    vms = vmid_list(params.get("vms"))
    check_permissions(state, principal, vms, [PRIVILEGE[action]])
    if action == "suspend" and params.get("to-disk") and int(params["to-disk"]):
        # Hibernation writes a state volume: the config's disk privilege too (the state
        # storage is checked per guest, where it is known).
        check_permissions(state, principal, vms, ["VM.Config.Disk"])
    payload = {
        "action": action,
        "scope": None,
        "vms": vms,
        "max_workers": int(params.get("max-workers") or params.get("maxworkers") or 0)
        or DEFAULT_WORKERS[action],
    }
    for key in ("timeout", "force-stop", "to-disk", "statestorage", "target", "online"):
        if params.get(key) is not None:
            payload[key] = params[key]
    if params.get("with-local-disks") is not None:
        payload["with-local-disks"] = params["with-local-disks"]
    async with rt.pool.acquire() as conn, conn.transaction():
        if action == "migrate":
            await require_node(conn, params["target"])
        node = await _local_node(conn)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=f"bulk-{action}",
            task_id="",
            principal=principal,
            payload=payload,
        )


async def migrate_all(rt, state: AccessState, principal: Principal, node: str, params: dict) -> str:
    """``POST /nodes/{node}/migrateall``: every guest of the node (templates too) to one target."""
    vms = vmid_list(params.get("vms"))
    if not state.has(principal, "/", ["VM.Migrate"]):
        if not vms:
            raise PermissionDenied("Permission check failed (/, VM.Migrate)")
        for vmid in vms:
            state.require(principal, f"/vms/{vmid}", ["VM.Migrate"])
    target = params["target"]
    if target == node:
        raise ParameterError({"target": "target is local node."})
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        await require_node(conn, target)
        max_workers = int(params.get("maxworkers") or 0)
        if not max_workers:
            raise PveError(
                "either 'maxworkers' parameter or max_workers in datacenter.cfg must be set!"
            )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="migrateall",
            task_id="",
            principal=principal,
            payload={
                "action": "migrateall",
                "scope": node,
                "vms": vms,
                "target": target,
                "max_workers": max_workers,
                "with-local-disks": params.get("with-local-disks"),
            },
        )


async def suspend_all(rt, state: AccessState, principal: Principal, node: str, params: dict) -> str:
    """``POST /nodes/{node}/suspendall``: every running VM of the node to disk, in a
    ``suspendall`` worker (VM.PowerMgmt and VM.Config.Disk on ``/``, or VM.PowerMgmt
    on each listed VMID)."""
    vms = vmid_list(params.get("vms"))
    if not state.has(principal, "/", ["VM.PowerMgmt", "VM.Config.Disk"]):
        if not vms:
            raise PermissionDenied("Permission check failed (/, VM.PowerMgmt  && VM.Config.Disk)")
        for vmid in vms:
            state.require(principal, f"/vms/{vmid}", ["VM.PowerMgmt"])
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await require_node(conn, node)
        datacenter = await replication_repo.cluster_options(conn)
        # max-workers, else datacenter.cfg's max_workers, else the node's CPU threads.
        workers = int(params.get("max-workers") or 0) or int(
            (datacenter["options"] if datacenter else {}).get("max_workers") or row["cpus"]
        )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="suspendall",
            task_id="",
            principal=principal,
            payload={
                "action": "suspend",
                "scope": node,
                "vms": vms,
                "to-disk": 1,
                "node-wide": 1,
                "max_workers": workers,
            },
        )


# --- the worker -----------------------------------------------------------------

Log = Callable[..., Awaitable[None]]


@dataclass
class Sink:
    log: Log
    warn: Callable[[str], Awaitable[None]]
    sleep: Callable[[float], Awaitable[None]]


async def _wait(rt: TaskRuntime, upid: str) -> str:
    """Wait for a sub-task; its exit status.  The bulk task holds one worker slot while
    its sub-tasks run in the others (as PVE's worker waits for its children)."""
    while True:
        async with rt.pool.acquire() as conn:
            row = await task_repo.get(conn, upid)
        if row is None:
            return "could not query task status"
        if row["state"] == "stopped":
            return row["exitstatus"] or "unknown"
        await asyncio.sleep(_POLL)


def _is_error(exitstatus: str) -> bool:
    return exitstatus != "OK" and not exitstatus.startswith("WARNINGS:")


def _ordered(guests, reverse: bool) -> list[list]:
    """Guests grouped by startup order, ascending (descending with ``reverse``), VMID inside."""
    groups: dict[int, list] = {}
    for guest in guests:
        groups.setdefault(startup_order(guest["config"]), []).append(guest)
    return [
        sorted(groups[order], key=lambda g: g["vmid"]) for order in sorted(groups, reverse=reverse)
    ]


def _startup_value(config: dict, key: str) -> int | None:
    startup = config.get("startup")
    if not startup:
        return None
    value = rules.parse_property_string(str(startup), "order").get(key)
    return int(value) if value and str(value).isdigit() else None


async def _run_groups(rt, sink: Sink, groups, max_workers: int, start_one, on_done) -> list[int]:
    """Start one sub-task per guest, at most ``max_workers`` at once; the failed VMIDs."""
    failed: list[int] = []
    for group in groups:
        running: list[tuple[str, dict]] = []
        for guest in group:
            while len(running) >= max_workers:
                upid, done = running.pop(0)
                status = await _wait(rt, upid)
                if _is_error(status):
                    failed.append(done["vmid"])
                await on_done(done, status)
            try:
                upid = await start_one(guest)
            except PveError as exc:
                await sink.warn(exc.message)
                failed.append(guest["vmid"])
                continue
            if upid is not None:
                running.append((upid, guest))
        for upid, done in running:
            status = await _wait(rt, upid)
            if _is_error(status):
                failed.append(done["vmid"])
            await on_done(done, status)
    return failed


def _heading(vms: list[int], verb: str, suffix: str = "") -> str:
    suffix = f" {suffix}" if suffix else ""
    if vms:
        return f"{verb} guests{suffix}: {', '.join(str(v) for v in vms)}"
    return f"{verb} all guests{suffix}"


async def run(rt: TaskRuntime, principal: Principal, payload: dict, sink: Sink) -> str | None:
    """The bulk worker; the error it ends with, if any."""
    action, scope, vms = payload["action"], payload.get("scope"), payload.get("vms") or []
    async with rt.pool.acquire() as conn:
        guests = [g for g in await guest_repo.list_all(conn, scope) if not vms or g["vmid"] in vms]
    max_workers = max(1, int(payload.get("max_workers") or 1))
    if action == "migrateall":
        return await _migrate_all(rt, principal, payload, guests, sink, max_workers)
    if action == "migrate":
        return await _migrate(rt, principal, payload, guests, sink, max_workers)
    startable = [g for g in guests if not g["template"]]
    if action == "start":
        return await _start(rt, principal, payload, startable, sink, max_workers)
    if action == "shutdown":
        return await _shutdown(rt, principal, payload, startable, sink, max_workers)
    return await _suspend(rt, principal, payload, startable, sink, max_workers)


async def _current(rt, guest) -> dict | None:
    async with rt.pool.acquire() as conn:
        return await guest_repo.get(conn, guest["vmid"])


async def _start(rt, principal, payload, guests, sink: Sink, max_workers: int) -> str | None:
    await sink.log(_heading(payload["vms"], "Starting"))

    async def start_one(guest):
        row = await _current(rt, guest)
        who = f"{rules.noun(guest['type'])} {guest['vmid']}"
        if row is None:
            raise PveError(f"{who} does not exist")
        operation = "start"
        if row["status"] == rules.RUNNING:
            await sink.warn(f"Skipping {who}, already running.")
            return None
        if row["status"] == rules.PAUSED:
            operation = "resume"
        await sink.log(f"Starting {who}")
        return await guest_service.power(
            rt, principal, row["type"], row["node"], row["vmid"], operation, {}
        )

    async def on_done(guest, status):
        who = f"{rules.noun(guest['type'])} {guest['vmid']}"
        if _is_error(status):
            await sink.warn(f"Starting {who} failed: {status}")
            return
        delay = _startup_value(guest["config"], "up")
        if delay:
            await sink.log(f"Waiting for {delay} seconds (startup delay)")
            await sink.sleep(delay)

    failed = await _run_groups(rt, sink, _ordered(guests, False), max_workers, start_one, on_done)
    if failed:
        return f"Some guests failed to start: {', '.join(str(v) for v in failed)}"
    return None


async def _shutdown(rt, principal, payload, guests, sink: Sink, max_workers: int) -> str | None:
    await sink.log(_heading(payload["vms"], "Shutting down"))
    force_stop = payload.get("force-stop")
    force_stop = True if force_stop is None else bool(int(force_stop))

    async def start_one(guest):
        row = await _current(rt, guest)
        who = f"{rules.noun(guest['type'])} {guest['vmid']}"
        if row is None:
            raise PveError(f"{who} does not exist")
        if row["status"] == rules.STOPPED:
            await sink.warn(f"Skipping {who}, not running.")
            return None
        if row["status"] == rules.PAUSED and not force_stop:
            await sink.warn(f"Skipping {who}, resume paused VM before shutdown.")
            return None
        down = _startup_value(row["config"], "down")
        timeout = int(down if down is not None else payload.get("timeout") or 180)
        await sink.log(f"Shutting down {who} (Timeout = {timeout} seconds)")
        # A paused guest ignores the shutdown request; with force-stop PVE stops it
        # when the timeout ends, which here is the stop task itself.
        operation = "stop" if row["status"] == rules.PAUSED else "shutdown"
        return await guest_service.power(
            rt, principal, row["type"], row["node"], row["vmid"], operation, {}
        )

    on_done = _warn_when_stop_failed(sink)

    failed = await _run_groups(rt, sink, _ordered(guests, True), max_workers, start_one, on_done)
    if failed:
        return f"Some guests failed to shutdown {', '.join(str(v) for v in failed)}"
    return None


def _warn_when_stop_failed(sink: Sink):
    """Shutdown and suspend warn alike of a guest whose task failed (PVE's wording)."""

    async def on_done(guest, status):
        if _is_error(status):
            await sink.warn(
                f"Stopping {rules.noun(guest['type'])} {guest['vmid']} failed: {status}"
            )

    return on_done


async def _suspend(rt, principal, payload, guests, sink: Sink, max_workers: int) -> str | None:
    await sink.log(_heading(payload["vms"], "Suspending"))

    # A node's suspendall only notes what it skips; the cluster's bulk action warns.
    node_wide = payload.get("node-wide")

    async def start_one(guest):
        vmid = guest["vmid"]
        if guest["type"] != rules.QEMU:
            if node_wide:
                await sink.log(f"Skipping {vmid}, only VMs can be suspended")
            else:
                await sink.warn(f"skipping {vmid}, only VMs can be suspended")
            return None
        row = await _current(rt, guest)
        if row is None:
            raise PveError(f"VM {vmid} does not exist")
        if row["status"] == rules.STOPPED:
            if node_wide:
                await sink.log(f"VM {vmid} not running, skipping suspension")
            else:
                await sink.warn(f"Skipping VM {vmid}, not running.")
            return None
        await sink.log(f"Suspending VM {guest['vmid']}")
        params = {}
        if payload.get("to-disk") and int(payload["to-disk"]):
            params = {"todisk": 1, "statestorage": payload.get("statestorage")}
        return await guest_service.power(
            rt, principal, row["type"], row["node"], row["vmid"], "suspend", params
        )

    on_done = _warn_when_stop_failed(sink)

    failed = await _run_groups(rt, sink, _ordered(guests, True), max_workers, start_one, on_done)
    if failed:
        return f"Some guests failed to suspend {', '.join(str(v) for v in failed)}"
    return None


async def _migrate(rt, principal, payload, guests, sink: Sink, max_workers: int) -> str | None:
    target = payload["target"]
    await sink.log(_heading(payload["vms"], "Migrating", f"to {target}"))
    online = payload.get("online")

    async def start_one(guest):
        who = f"{rules.noun(guest['type'])} {guest['vmid']}"
        if guest["node"] == target:
            await sink.warn(f"{who} already on {target}, skipping.")
            return None
        params: dict = {"target": target}
        if guest["type"] == rules.LXC:
            if online is not None:
                params["restart"] = int(online)
        else:
            if online is not None:
                params["online"] = int(online)
            if payload.get("with-local-disks") is not None:
                params["with-local-disks"] = payload["with-local-disks"]
        await sink.log(f"Migrating {who}")
        return await guest_placement.migrate(
            rt, principal, guest["type"], guest["node"], guest["vmid"], params
        )

    async def on_done(guest, status):
        if _is_error(status):
            await sink.warn(
                f"Migrating {rules.noun(guest['type'])} {guest['vmid']} failed: {status}"
            )

    ordered = [sorted(guests, key=lambda g: g["vmid"])]
    failed = await _run_groups(rt, sink, ordered, max_workers, start_one, on_done)
    if failed:
        return f"Some guests failed to migrate {', '.join(str(v) for v in failed)}"
    return None


async def _migrate_all(rt, principal, payload, guests, sink: Sink, max_workers: int) -> str | None:
    """A node's ``migrateall``: running VMs live, running CTs in restart mode."""
    if not guests:
        await sink.log("no virtual guests matched, nothing to do..")
        return None
    target = payload["target"]
    started = 0

    async def start_one(guest):
        nonlocal started
        who = f"{rules.noun(guest['type'])} {guest['vmid']}"
        running = 1 if guest["status"] != rules.STOPPED else 0
        params: dict = {"target": target}
        if guest["type"] == rules.LXC:
            params["restart"] = running
        else:
            params["online"] = running
            if payload.get("with-local-disks") is not None:
                params["with-local-disks"] = payload["with-local-disks"]
        await sink.log(f"Migrating {who}")
        try:
            upid = await guest_placement.migrate(
                rt, principal, guest["type"], guest["node"], guest["vmid"], params
            )
        except PveError as exc:
            # PVE's migrateall only prints the error of a guest it could not hand over.
            await sink.log(exc.message)
            return None
        started += 1
        return upid

    async def on_done(_guest, _status):
        return None

    # PVE sorts the VMIDs as strings here.
    ordered = [sorted(guests, key=lambda g: str(g["vmid"]))]
    await _run_groups(rt, sink, ordered, max_workers, start_one, on_done)
    if not started:
        return "no migrations worker started..."
    await sink.log(f"All jobs finished, used {started} workers in total.")
    return None
