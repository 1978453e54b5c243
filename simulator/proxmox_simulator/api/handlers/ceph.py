"""Ceph: the OSD map flags, status, OSDs, pools, monitors and managers."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import ceph_cluster_service as cluster
from proxmox_simulator.domain import ceph_service as svc
from proxmox_simulator.domain.resource_shapes import returns_task


@route("/cluster/ceph/flags", "GET")
async def list_flags(ctx: RequestContext):
    return await svc.list_flags(ctx.rt)


@route("/cluster/ceph/flags", "PUT")
async def set_flags(ctx: RequestContext):
    return await svc.set_flags(ctx.rt, ctx.principal, ctx.params)


@route("/cluster/ceph/flags/{flag}", "GET")
async def get_flag(ctx: RequestContext):
    return await svc.get_flag(ctx.rt, ctx.params["flag"])


@route("/cluster/ceph/flags/{flag}", "PUT")
async def update_flag(ctx: RequestContext):
    await svc.update_flag(ctx.rt, ctx.params["flag"], ctx.params["value"])


_CEPH = "/nodes/{node}/ceph"


@route("/cluster/ceph/status", "GET")
async def cluster_status(ctx: RequestContext):
    return await cluster.status(ctx.rt)


@route(f"{_CEPH}/status", "GET")
async def node_status(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.status(ctx.rt)


@route(f"{_CEPH}/osd", "GET")
async def list_osds(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.list_osds(ctx.rt)


@route(f"{_CEPH}/osd", "POST")
async def create_osd(ctx: RequestContext):
    return await cluster.create_osd(ctx.rt, ctx.principal, ctx.node, ctx.params)


@route(f"{_CEPH}/osd/{{osdid}}", "DELETE")
async def destroy_osd(ctx: RequestContext):
    return await cluster.destroy_osd(
        ctx.rt, ctx.principal, ctx.node, int(ctx.params["osdid"]), bool(ctx.params.get("cleanup"))
    )


@route(f"{_CEPH}/osd/{{osdid}}/in", "POST")
async def osd_in(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    await cluster.set_osd_in(ctx.rt, int(ctx.params["osdid"]), True)


@route(f"{_CEPH}/osd/{{osdid}}/out", "POST")
async def osd_out(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    await cluster.set_osd_in(ctx.rt, int(ctx.params["osdid"]), False)


@route(f"{_CEPH}/mon", "GET")
async def list_monitors(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.list_monitors(ctx.rt)


@route(f"{_CEPH}/mgr", "GET")
async def list_managers(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.list_managers(ctx.rt)


@route(f"{_CEPH}/mon/{{monid}}", "POST")
async def create_monitor(ctx: RequestContext):
    return await cluster.create_monitor(ctx.rt, ctx.principal, ctx.node, ctx.params.get("monid"))


@route(f"{_CEPH}/mon/{{monid}}", "DELETE")
async def destroy_monitor(ctx: RequestContext):
    return await cluster.destroy_monitor(ctx.rt, ctx.principal, ctx.node, ctx.params["monid"])


@route(f"{_CEPH}/mgr/{{id}}", "POST")
async def create_manager(ctx: RequestContext):
    return await cluster.create_manager(ctx.rt, ctx.principal, ctx.node, ctx.params.get("id"))


@route(f"{_CEPH}/mgr/{{id}}", "DELETE")
async def destroy_manager(ctx: RequestContext):
    return await cluster.destroy_manager(ctx.rt, ctx.principal, ctx.node, ctx.params["id"])


@route(f"{_CEPH}/start", "POST")
async def start_service(ctx: RequestContext):
    service = ctx.params.get("service") or "ceph.target"
    return await cluster.set_service(ctx.rt, ctx.principal, ctx.node, service, True)


@route(f"{_CEPH}/stop", "POST")
async def stop_service(ctx: RequestContext):
    service = ctx.params.get("service") or "ceph.target"
    return await cluster.set_service(ctx.rt, ctx.principal, ctx.node, service, False)


def _register_pools(collection: str) -> None:
    """8.x+ name the collection ``pool``; 6.x/7.x ``pools``."""

    @route(f"{_CEPH}/{collection}", "GET")
    async def list_pools(ctx: RequestContext):
        await cluster.require_ceph_node(ctx.rt, ctx.node)
        return await cluster.list_pools(ctx.rt)

    @route(f"{_CEPH}/{collection}", "POST")
    async def create_pool(ctx: RequestContext):
        return await cluster.create_pool(ctx.rt, ctx.principal, ctx.node, ctx.params)

    @route(f"{_CEPH}/{collection}/{{name}}", "PUT")
    async def update_pool(ctx: RequestContext):
        return await cluster.update_pool(
            ctx.rt,
            ctx.principal,
            ctx.node,
            ctx.params["name"],
            ctx.params,
            as_task=returns_task(ctx.endpoint),
        )

    @route(f"{_CEPH}/{collection}/{{name}}", "DELETE")
    async def destroy_pool(ctx: RequestContext):
        return await cluster.destroy_pool(ctx.rt, ctx.principal, ctx.node, ctx.params["name"])


_register_pools("pool")
_register_pools("pools")


@route(f"{_CEPH}/pool/{{name}}/status", "GET")
async def pool_status(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.pool_status(ctx.rt, ctx.params["name"])


@route(f"{_CEPH}/pools/{{name}}", "GET")
async def pool_status_old_path(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.pool_status(ctx.rt, ctx.params["name"])


@route(f"{_CEPH}/rules", "GET")
async def crush_rules(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.crush_rules(ctx.rt)


@route(f"{_CEPH}/crush", "GET")
async def crush_map(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.crush_map(ctx.rt)


@route(f"{_CEPH}/cfg/raw", "GET")
async def ceph_conf(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.ceph_conf(ctx.rt)


@route(f"{_CEPH}/config", "GET")
async def ceph_conf_old_path(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.ceph_conf(ctx.rt)


@route(f"{_CEPH}/osd/{{osdid}}/scrub", "POST")
async def scrub(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    await cluster.scrub(ctx.rt, ctx.node, int(ctx.params["osdid"]))
