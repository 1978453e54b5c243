"""/nodes, node status, storage and tasks."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.api.render import WithTotal
from proxmox_simulator.domain import bulk_guest_service as bulk
from proxmox_simulator.domain import inventory_service as svc
from proxmox_simulator.domain import node_power_service as power
from proxmox_simulator.domain import rrd_service as rrd
from proxmox_simulator.domain import storage_service
from proxmox_simulator.domain.errors import PermissionDenied, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.service import task_list_entry, task_status
from proxmox_simulator.tasks.upid import Upid


@route("/nodes", "GET")
async def list_nodes(ctx: RequestContext):
    return await svc.list_nodes(ctx.rt, ctx.state, ctx.principal)


@route("/nodes/{node}/status", "GET")
async def node_status(ctx: RequestContext):
    return await svc.node_status(ctx.rt, ctx.node)


@route("/nodes/{node}/rrddata", "GET")
async def node_rrddata(ctx: RequestContext):
    return await rrd.node_rrddata(ctx.rt, ctx.node, ctx.params["timeframe"], ctx.params.get("cf"))


@route("/nodes/{node}/rrd", "GET")
async def node_rrd(ctx: RequestContext):
    return await rrd.node_rrd(ctx.rt, ctx.node, ctx.params["ds"], ctx.params["timeframe"])


@route("/nodes/{node}/status", "POST")
async def node_power(ctx: RequestContext):
    await power.node_power(ctx.rt, ctx.node, ctx.params["command"])


@route("/nodes/{node}/startall", "POST")
async def start_all(ctx: RequestContext):
    power.require_bulk_permission(ctx.state, ctx.principal, ctx.params.get("vms"), "VM.PowerMgmt")
    return await power.start_all(ctx.rt, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/stopall", "POST")
async def stop_all(ctx: RequestContext):
    power.require_bulk_permission(ctx.state, ctx.principal, ctx.params.get("vms"), "VM.PowerMgmt")
    return await power.stop_all(ctx.rt, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/migrateall", "POST")
async def migrate_all(ctx: RequestContext):
    return await bulk.migrate_all(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/suspendall", "POST")
async def suspend_all(ctx: RequestContext):
    return await bulk.suspend_all(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/version", "GET")
async def node_version(ctx: RequestContext):
    async with ctx.rt.pool.acquire() as conn:
        await require_node(conn, ctx.node)
    return svc.pve_release(ctx.rt.contract.version)


@route("/storage", "GET")
async def storage_config(ctx: RequestContext):
    return await svc.storage_config(ctx.rt, ctx.state, ctx.principal)


@route("/nodes/{node}/storage", "GET")
async def node_storage(ctx: RequestContext):
    return await svc.node_storage(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/storage/{storage}/content", "GET")
async def storage_content(ctx: RequestContext):
    return await svc.storage_content(ctx.rt, ctx.node, ctx.params["storage"], ctx.params)


@route("/nodes/{node}/storage/{storage}/content/{volume}", "GET")
async def volume_attributes(ctx: RequestContext):
    storage = ctx.params["storage"]
    ctx.state.require(
        ctx.principal,
        f"/storage/{storage}",
        ["Datastore.Audit", "Datastore.AllocateSpace"],
        any_of=True,
    )
    return await svc.volume_attributes(
        ctx.rt, ctx.node, ctx.params["storage"], ctx.params["volume"]
    )


@route("/nodes/{node}/storage/{storage}/content/{volume}", "POST")
async def copy_volume(ctx: RequestContext):
    return await storage_service.copy_volume(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


# -- tasks --------------------------------------------------------------------------


async def _task(ctx: RequestContext):
    try:
        upid = Upid.parse(ctx.params["upid"])
    except ValueError as exc:
        raise PveError(str(exc), status=400) from None
    async with ctx.rt.pool.acquire() as conn:
        row = await task_repo.get(conn, str(upid))
    if row is None or row["node"] != ctx.node:
        raise PveError(f"no such task '{ctx.params['upid']}'")
    # PVE: your own tasks, or Sys.Audit on the node for anybody's.
    own = row["userid"] == ctx.principal.userid
    if not own and not ctx.state.has(ctx.principal, f"/nodes/{ctx.node}", ["Sys.Audit"]):
        raise PermissionDenied(f"Permission check failed (/nodes/{ctx.node}, Sys.Audit)")
    return row


@route("/nodes/{node}/tasks/{upid}/status", "GET")
async def get_task_status(ctx: RequestContext):
    return task_status(await _task(ctx))


@route("/nodes/{node}/tasks/{upid}/log", "GET")
async def get_task_log(ctx: RequestContext):
    row = await _task(ctx)
    start = int(ctx.params.get("start") or 0)
    limit = int(ctx.params.get("limit") or 50)
    async with ctx.rt.pool.acquire() as conn:
        lines, total = await task_repo.log(conn, row["upid"], start, limit)
    return WithTotal([{"n": r["n"], "t": r["t"]} for r in lines], total)


@route("/nodes/{node}/tasks/{upid}", "GET")
async def task_index(ctx: RequestContext):
    await _task(ctx)
    return [{"name": "log"}, {"name": "status"}]


@route("/nodes/{node}/tasks/{upid}", "DELETE")
async def stop_task(ctx: RequestContext):
    row = await _task(ctx)
    if row["userid"] != ctx.principal.userid:
        ctx.state.require(ctx.principal, f"/nodes/{ctx.node}", ["Sys.Modify"])
    async with ctx.rt.pool.acquire() as conn, conn.transaction():
        await task_repo.abort(
            conn,
            row["upid"],
            "interrupted by signal",
            int(ctx.rt.clock.now()),
            ctx.principal.auth_id,
        )


@route("/nodes/{node}/tasks", "GET")
async def list_tasks(ctx: RequestContext):
    params = ctx.params
    async with ctx.rt.pool.acquire() as conn:
        await require_node(conn, ctx.node)
        rows = await task_repo.list_tasks(
            conn,
            node=ctx.node,
            typefilter=params.get("typefilter"),
            userfilter=params.get("userfilter"),
            vmid=str(params["vmid"]) if params.get("vmid") is not None else None,
            source=params.get("source") or "archive",
            errors=bool(params.get("errors")),
            start=int(params.get("start") or 0),
            limit=int(params.get("limit") or 50),
        )
    audit = ctx.state.has(ctx.principal, f"/nodes/{ctx.node}", ["Sys.Audit"])
    return [task_list_entry(r) for r in rows if audit or r["userid"] == ctx.principal.userid]
