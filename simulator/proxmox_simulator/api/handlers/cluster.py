"""/cluster, /version and /pools."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import bulk_guest_service as bulk
from proxmox_simulator.domain import corosync_service as corosync
from proxmox_simulator.domain import inventory_service as svc
from proxmox_simulator.domain.errors import PermissionDenied
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.service import RECENT_TASKS, cluster_task_list


@route("/version", "GET")
async def version(ctx: RequestContext):
    return svc.pve_release(ctx.rt.contract.version)


@route("/cluster/status", "GET")
async def cluster_status(ctx: RequestContext):
    return await svc.cluster_status(ctx.rt)


@route("/cluster/resources", "GET")
async def cluster_resources(ctx: RequestContext):
    return await svc.cluster_resources(ctx.rt, ctx.state, ctx.principal, ctx.params.get("type"))


@route("/cluster/nextid", "GET")
async def nextid(ctx: RequestContext):
    vmid = ctx.params.get("vmid")
    return await svc.next_vmid(ctx.rt, int(vmid) if vmid is not None else None)


@route("/cluster/config", "POST")
async def create_cluster(ctx: RequestContext):
    return await svc.create_cluster(ctx.rt, ctx.principal, ctx.params["clustername"])


@route("/cluster/tasks", "GET")
async def cluster_tasks(ctx: RequestContext):
    async with ctx.rt.pool.acquire() as conn:
        rows = await task_repo.recent(conn, RECENT_TASKS)
    # PVE: Sys.Audit on / lists every node's tasks; anyone else sees the tasks whose user
    # is the caller itself (a token's user never is: it is the token's user@realm).
    audit = ctx.state.has(ctx.principal, "/", ["Sys.Audit"])
    return [e for e in cluster_task_list(rows) if audit or e["user"] == ctx.principal.auth_id]


@route("/pools", "GET")
async def list_pools(ctx: RequestContext):
    if ctx.params.get("poolid"):
        pool = await svc.get_pool(ctx.rt, ctx.state, ctx.principal, ctx.params["poolid"])
        return [{"poolid": ctx.params["poolid"], **pool}]
    return await svc.list_pools(ctx.rt, ctx.state, ctx.principal)


@route("/pools", "POST")
async def create_pool(ctx: RequestContext):
    await svc.create_pool(ctx.rt, ctx.params["poolid"], ctx.params.get("comment") or "")


@route("/pools/{poolid}", "GET")
async def get_pool(ctx: RequestContext):
    return await svc.get_pool(ctx.rt, ctx.state, ctx.principal, ctx.params["poolid"])


@route("/pools/{poolid}", "PUT")
async def update_pool(ctx: RequestContext):
    require_vm_allocate(ctx)
    await svc.update_pool(ctx.rt, ctx.params["poolid"], ctx.params)


@route("/pools/{poolid}", "DELETE")
async def delete_pool(ctx: RequestContext):
    await svc.delete_pool(ctx.rt, ctx.params["poolid"])


def require_vm_allocate(ctx: RequestContext) -> None:
    """Moving a guest into a pool also needs VM.Allocate on that guest (PVE rule)."""
    for vmid in str(ctx.params.get("vms") or "").replace(";", ",").split(","):
        if vmid.strip() and not ctx.state.has(
            ctx.principal, f"/vms/{vmid.strip()}", ["VM.Allocate"]
        ):
            raise PermissionDenied(f"Permission check failed (/vms/{vmid.strip()}, VM.Allocate)")


@route("/cluster/config/apiversion", "GET")
async def join_api_version(ctx: RequestContext):
    return corosync.JOIN_API_VERSION


@route("/cluster/config/nodes", "GET")
async def corosync_nodes(ctx: RequestContext):
    return await corosync.config_nodes(ctx.rt)


@route("/cluster/config/join", "GET")
async def join_info(ctx: RequestContext):
    return await corosync.join_info(ctx.rt, ctx.params.get("node"))


@route("/cluster/config/totem", "GET")
async def totem(ctx: RequestContext):
    return await corosync.totem(ctx.rt)


@route("/cluster/config/qdevice", "GET")
async def qdevice(ctx: RequestContext):
    return await corosync.qdevice(ctx.rt)


@route("/cluster/config/nodes/{node}", "POST")
async def add_corosync_node(ctx: RequestContext):
    return await corosync.add_node(ctx.rt, ctx.node, ctx.params)


@route("/cluster/config/nodes/{node}", "DELETE")
async def delete_corosync_node(ctx: RequestContext):
    await corosync.delete_node(ctx.rt, ctx.node)


@route("/cluster/config/join", "POST")
async def join_cluster(ctx: RequestContext):
    return await corosync.join(ctx.rt, ctx.principal, ctx.params)


def _bulk_route(action: str):
    @route(f"/cluster/bulk-action/guest/{action}", "POST")
    async def bulk_action(ctx: RequestContext):
        return await bulk.cluster_action(ctx.rt, ctx.state, ctx.principal, action, ctx.params)

    return bulk_action


for _action in bulk.ACTIONS:
    _bulk_route(_action)
