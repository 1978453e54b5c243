"""Ceph: the OSD map flags, status, OSDs, pools, monitors, managers, MDS and CephFS,
service metadata, the config database and the cluster log."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.api.render import WithTotal
from proxmox_simulator.domain import ceph_cluster_service as cluster
from proxmox_simulator.domain import ceph_info_service as info
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
    return await cluster.set_service(
        ctx.rt, ctx.principal, ctx.node, ctx.params.get("service"), "start"
    )


@route(f"{_CEPH}/stop", "POST")
async def stop_service(ctx: RequestContext):
    return await cluster.set_service(
        ctx.rt, ctx.principal, ctx.node, ctx.params.get("service"), "stop"
    )


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
        return await cluster.destroy_pool(
            ctx.rt, ctx.principal, ctx.node, ctx.params["name"], ctx.params
        )


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


# -- pre-7.0 node-scoped flags (``osd set``/``osd unset``, no worker) -------------------


@route(f"{_CEPH}/flags", "GET")
async def node_flags(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await svc.osd_dump_flags(ctx.rt)


@route(f"{_CEPH}/flags/{{flag}}", "POST")
async def node_set_flag(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    await svc.update_flag(ctx.rt, ctx.params["flag"], 1)


@route(f"{_CEPH}/flags/{{flag}}", "DELETE")
async def node_unset_flag(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    await svc.update_flag(ctx.rt, ctx.params["flag"], 0)


# -- init, restart ----------------------------------------------------------------------


@route(f"{_CEPH}/init", "POST")
async def init(ctx: RequestContext):
    await cluster.init(ctx.rt, ctx.node, ctx.params)


@route(f"{_CEPH}/restart", "POST")
async def restart_service(ctx: RequestContext):
    return await cluster.set_service(
        ctx.rt, ctx.principal, ctx.node, ctx.params.get("service"), "restart"
    )


# -- metadata servers and CephFS --------------------------------------------------------


@route(f"{_CEPH}/mds", "GET")
async def list_mds(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.list_mds(ctx.rt)


@route(f"{_CEPH}/mds/{{name}}", "POST")
async def create_mds(ctx: RequestContext):
    return await cluster.create_mds(
        ctx.rt,
        ctx.principal,
        ctx.node,
        ctx.params.get("name"),
        bool(ctx.params.get("hotstandby")),
    )


@route(f"{_CEPH}/mds/{{name}}", "DELETE")
async def destroy_mds(ctx: RequestContext):
    return await cluster.destroy_mds(ctx.rt, ctx.principal, ctx.node, ctx.params["name"])


@route(f"{_CEPH}/fs", "GET")
async def list_fs(ctx: RequestContext):
    await cluster.require_ceph_node(ctx.rt, ctx.node)
    return await cluster.list_fs(ctx.rt)


@route(f"{_CEPH}/fs/{{name}}", "POST")
async def create_fs(ctx: RequestContext):
    return await cluster.create_fs(ctx.rt, ctx.principal, ctx.node, ctx.params)


@route(f"{_CEPH}/fs/{{name}}", "DELETE")
async def destroy_fs(ctx: RequestContext):
    # pveceph-managed storages exist only through add-storage, which the simulator
    # refuses, so ``remove-storages`` has none to remove.
    return await cluster.destroy_fs(
        ctx.rt, ctx.principal, ctx.node, ctx.params["name"], bool(ctx.params.get("remove-pools"))
    )


# -- metadata, config database, log, safety checks, disks -------------------------------


@route("/cluster/ceph/metadata", "GET")
async def cluster_metadata(ctx: RequestContext):
    return await info.metadata(ctx.rt, ctx.params.get("scope") or "all")


@route(f"{_CEPH}/osd/{{osdid}}/metadata", "GET")
async def osd_metadata(ctx: RequestContext):
    return await info.osd_metadata(ctx.rt, ctx.node, int(ctx.params["osdid"]))


@route(f"{_CEPH}/osd/{{osdid}}/lv-info", "GET")
async def osd_lv_info(ctx: RequestContext):
    kind = ctx.params.get("type") or "block"
    return await info.osd_lv_info(ctx.rt, ctx.node, int(ctx.params["osdid"]), kind)


@route(f"{_CEPH}/cfg/db", "GET")
async def config_db(ctx: RequestContext):
    # Nearly static on a PVE cluster: pveceph writes only the monitors' global-id
    # setting into the config database (see info.config_db).
    return await info.config_db(ctx.rt, ctx.node)


@route(f"{_CEPH}/configdb", "GET")
async def config_db_old_path(ctx: RequestContext):
    return await info.config_db(ctx.rt, ctx.node)


@route(f"{_CEPH}/cfg/value", "GET")
async def config_values(ctx: RequestContext):
    return await info.config_values(ctx.rt, ctx.node, ctx.params["config-keys"])


@route(f"{_CEPH}/log", "GET")
async def ceph_log(ctx: RequestContext):
    start, limit = ctx.params.get("start"), ctx.params.get("limit")
    lines, total = await info.cluster_log(
        ctx.rt, ctx.node, int(start) if start else None, int(limit) if limit else None
    )
    return WithTotal(lines, total)


@route(f"{_CEPH}/cmd-safety", "GET")
async def cmd_safety(ctx: RequestContext):
    p = ctx.params
    return await info.cmd_safety(ctx.rt, ctx.node, p["service"], str(p["id"]), p["action"])


@route(f"{_CEPH}/disks", "GET")
async def osd_disks(ctx: RequestContext):
    return await info.osd_disks(ctx.rt, ctx.node, ctx.params.get("type"))


# -- health mutes, releases, rolling restarts (9.x) ------------------------------------


@route("/cluster/ceph/health-mute", "GET")
async def health_mutes(ctx: RequestContext):
    return await cluster.list_health_mutes(ctx.rt)


@route("/cluster/ceph/health-mute/{code}", "PUT")
async def health_mute(ctx: RequestContext):
    await cluster.set_health_mute(ctx.rt, ctx.params["code"], ctx.params)


@route(f"{_CEPH}/releases", "GET")
async def releases(ctx: RequestContext):
    # Static in PVE too: a table of installable releases in pve-manager, not cluster state.
    return await cluster.releases(ctx.rt, ctx.node)


@route("/cluster/ceph/restart-bulk", "POST")
async def restart_bulk_cluster(ctx: RequestContext):
    return await cluster.restart_bulk(ctx.rt, ctx.principal, "", ctx.params, cluster_wide=True)


@route(f"{_CEPH}/restart-bulk", "POST")
async def restart_bulk_node(ctx: RequestContext):
    return await cluster.restart_bulk(
        ctx.rt, ctx.principal, ctx.node, ctx.params, cluster_wide=False
    )
