"""/cluster/sdn: zones, vnets, subnets, controllers, IPAMs, DNS plugins, VNet IP
mappings, the global lock, rollback and apply (``PUT /cluster/sdn``); and what
each node runs of it (``/nodes/{node}/sdn``)."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import sdn_fabrics as fabrics
from proxmox_simulator.domain import sdn_node_service as node_svc
from proxmox_simulator.domain import sdn_prefix_lists as prefix_lists
from proxmox_simulator.domain import sdn_route_maps as route_maps
from proxmox_simulator.domain import sdn_service as svc


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/cluster/sdn", "PUT")
async def apply(ctx: RequestContext):
    return await svc.apply(
        ctx.rt, ctx.principal, ctx.params.get("lock-token"), _flag(ctx, "release-lock", True)
    )


def _flag(ctx: RequestContext, name: str, default: bool) -> bool:
    value = ctx.params.get(name)
    return default if value is None else bool(int(value))


def _token(ctx: RequestContext) -> str | None:
    return ctx.params.get("lock-token")


@route("/cluster/sdn/lock", "POST")
async def acquire_lock(ctx: RequestContext):
    return await svc.acquire_lock(ctx.rt, _flag(ctx, "allow-pending", False))


@route("/cluster/sdn/lock", "DELETE")
async def release_lock(ctx: RequestContext):
    await svc.release_lock(ctx.rt, _token(ctx), _flag(ctx, "force", False))


@route("/cluster/sdn/rollback", "POST")
async def rollback(ctx: RequestContext):
    await svc.rollback(ctx.rt, _token(ctx), _flag(ctx, "release-lock", True))


@route("/cluster/sdn/zones", "GET")
async def list_zones(ctx: RequestContext):
    return await svc.list_sections(ctx.rt, "zones", ctx.params)


@route("/cluster/sdn/zones", "POST")
async def create_zone(ctx: RequestContext):
    await svc.create_zone(ctx.rt, ctx.params, _declared(ctx))


@route("/cluster/sdn/zones/{zone}", "GET")
async def get_zone(ctx: RequestContext):
    return await svc.get_section(ctx.rt, "zones", ctx.params["zone"], ctx.params)


@route("/cluster/sdn/zones/{zone}", "PUT")
async def update_zone(ctx: RequestContext):
    await svc.update_zone(ctx.rt, ctx.params["zone"], ctx.params, _declared(ctx))


@route("/cluster/sdn/zones/{zone}", "DELETE")
async def delete_zone(ctx: RequestContext):
    await svc.delete_zone(ctx.rt, ctx.params["zone"], _token(ctx))


@route("/cluster/sdn/vnets", "GET")
async def list_vnets(ctx: RequestContext):
    return await svc.list_sections(ctx.rt, "vnets", ctx.params)


@route("/cluster/sdn/vnets", "POST")
async def create_vnet(ctx: RequestContext):
    await svc.create_vnet(ctx.rt, ctx.params, _declared(ctx))


@route("/cluster/sdn/vnets/{vnet}", "GET")
async def get_vnet(ctx: RequestContext):
    return await svc.get_section(ctx.rt, "vnets", ctx.params["vnet"], ctx.params)


@route("/cluster/sdn/vnets/{vnet}", "PUT")
async def update_vnet(ctx: RequestContext):
    await svc.update_vnet(ctx.rt, ctx.params["vnet"], ctx.params, _declared(ctx))


@route("/cluster/sdn/vnets/{vnet}", "DELETE")
async def delete_vnet(ctx: RequestContext):
    await svc.delete_vnet(ctx.rt, ctx.params["vnet"], _token(ctx))


@route("/cluster/sdn/vnets/{vnet}/subnets", "GET")
async def list_subnets(ctx: RequestContext):
    return await svc.list_sections(ctx.rt, "subnets", ctx.params, vnet=ctx.params["vnet"])


@route("/cluster/sdn/vnets/{vnet}/subnets", "POST")
async def create_subnet(ctx: RequestContext):
    await svc.create_subnet(ctx.rt, ctx.params["vnet"], ctx.params, _declared(ctx))


@route("/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "GET")
async def get_subnet(ctx: RequestContext):
    return await svc.get_section(
        ctx.rt, "subnets", ctx.params["subnet"], ctx.params, vnet=ctx.params["vnet"]
    )


@route("/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "PUT")
async def update_subnet(ctx: RequestContext):
    await svc.update_subnet(
        ctx.rt, ctx.params["vnet"], ctx.params["subnet"], ctx.params, _declared(ctx)
    )


@route("/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "DELETE")
async def delete_subnet(ctx: RequestContext):
    await svc.delete_subnet(ctx.rt, ctx.params["vnet"], ctx.params["subnet"], _token(ctx))


def _register_plugin(what: str) -> None:
    key = svc.KEYS[what]
    base = f"/cluster/sdn/{what}"

    @route(base, "GET")
    async def list_plugins(ctx: RequestContext):
        return await svc.list_sections(ctx.rt, what, ctx.params)

    @route(base, "POST")
    async def create_plugin(ctx: RequestContext):
        await svc.create_plugin(ctx.rt, what, ctx.params, _declared(ctx))

    @route(f"{base}/{{{key}}}", "GET")
    async def get_plugin(ctx: RequestContext):
        return await svc.get_section(ctx.rt, what, ctx.params[key], ctx.params)

    @route(f"{base}/{{{key}}}", "PUT")
    async def update_plugin(ctx: RequestContext):
        await svc.update_plugin(ctx.rt, what, ctx.params[key], ctx.params, _declared(ctx))

    @route(f"{base}/{{{key}}}", "DELETE")
    async def delete_plugin(ctx: RequestContext):
        await svc.delete_plugin(ctx.rt, what, ctx.params[key], _token(ctx))


for _what in ("controllers", "ipams", "dns"):
    _register_plugin(_what)


@route("/cluster/sdn/ipams/{ipam}/status", "GET")
async def ipam_status(ctx: RequestContext):
    return await svc.ipam_status(ctx.rt, ctx.params["ipam"])


@route("/cluster/sdn/vnets/{vnet}/ips", "POST")
async def create_ip(ctx: RequestContext):
    await svc.add_ip(ctx.rt, ctx.params["vnet"], ctx.params)


@route("/cluster/sdn/vnets/{vnet}/ips", "PUT")
async def update_ip(ctx: RequestContext):
    await svc.update_ip(ctx.rt, ctx.params["vnet"], ctx.params)


@route("/cluster/sdn/vnets/{vnet}/ips", "DELETE")
async def delete_ip(ctx: RequestContext):
    await svc.delete_ip(ctx.rt, ctx.params["vnet"], ctx.params)


@route("/nodes/{node}/sdn/zones", "GET")
async def node_zones(ctx: RequestContext):
    return await node_svc.zones(ctx.rt, ctx.params["node"])


@route("/nodes/{node}/sdn/zones/{zone}/content", "GET")
async def node_zone_content(ctx: RequestContext):
    return await node_svc.zone_content(ctx.rt, ctx.params["node"], ctx.params["zone"])


@route("/nodes/{node}/sdn/zones/{zone}/bridges", "GET")
async def node_zone_bridges(ctx: RequestContext):
    return await node_svc.zone_bridges(ctx.rt, ctx.params["node"], ctx.params["zone"])


@route("/nodes/{node}/sdn/zones/{zone}/ip-vrf", "GET")
async def node_zone_ip_vrf(ctx: RequestContext):
    return await node_svc.ip_vrf(ctx.rt, ctx.params["node"], ctx.params["zone"])


@route("/nodes/{node}/sdn/vnets/{vnet}/mac-vrf", "GET")
async def node_vnet_mac_vrf(ctx: RequestContext):
    return await node_svc.mac_vrf(ctx.rt, ctx.params["node"], ctx.params["vnet"])


@route("/cluster/sdn/dry-run", "GET")
async def dry_run(ctx: RequestContext):
    return await node_svc.dry_run(ctx.rt, ctx.params["node"])


@route("/cluster/sdn/prefix-lists", "GET")
async def list_prefix_lists(ctx: RequestContext):
    return await prefix_lists.list_prefix_lists(ctx.rt, ctx.params)


@route("/cluster/sdn/prefix-lists", "POST")
async def create_prefix_list(ctx: RequestContext):
    await prefix_lists.create_prefix_list(ctx.rt, ctx.params)


@route("/cluster/sdn/prefix-lists/{id}", "GET")
async def get_prefix_list(ctx: RequestContext):
    return await prefix_lists.get_prefix_list(ctx.rt, ctx.params["id"])


@route("/cluster/sdn/prefix-lists/{id}", "PUT")
async def update_prefix_list(ctx: RequestContext):
    await prefix_lists.update_prefix_list(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/sdn/prefix-lists/{id}", "DELETE")
async def delete_prefix_list(ctx: RequestContext):
    await prefix_lists.delete_prefix_list(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/sdn/prefix-lists/{id}/entries", "GET")
async def list_prefix_list_entries(ctx: RequestContext):
    return await prefix_lists.list_entries(ctx.rt, ctx.params["id"])


@route("/cluster/sdn/prefix-lists/{id}/entries", "POST")
async def create_prefix_list_entry(ctx: RequestContext):
    await prefix_lists.create_entry(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/sdn/prefix-lists/{id}/entries/{url_seq}", "GET")
async def get_prefix_list_entry(ctx: RequestContext):
    return await prefix_lists.get_entry(ctx.rt, ctx.params["id"], ctx.params["url_seq"])


@route("/cluster/sdn/prefix-lists/{id}/entries/{url_seq}", "PUT")
async def update_prefix_list_entry(ctx: RequestContext):
    await prefix_lists.update_entry(ctx.rt, ctx.params["id"], ctx.params["url_seq"], ctx.params)


@route("/cluster/sdn/prefix-lists/{id}/entries/{url_seq}", "DELETE")
async def delete_prefix_list_entry(ctx: RequestContext):
    await prefix_lists.delete_entry(ctx.rt, ctx.params["id"], ctx.params["url_seq"], ctx.params)


@route("/cluster/sdn/route-maps", "GET")
async def list_route_maps(ctx: RequestContext):
    return await route_maps.list_route_maps(ctx.rt, ctx.params)


@route("/cluster/sdn/route-maps/entries", "GET")
async def list_route_map_entries(ctx: RequestContext):
    return await route_maps.list_entries(ctx.rt, ctx.params)


@route("/cluster/sdn/route-maps/entries", "POST")
async def create_route_map_entry(ctx: RequestContext):
    await route_maps.create_entry(ctx.rt, ctx.params)


@route("/cluster/sdn/route-maps/entries/{route-map-id}", "GET")
async def list_route_map(ctx: RequestContext):
    return await route_maps.list_entries(ctx.rt, ctx.params, ctx.params["route-map-id"])


_ENTRY = "/cluster/sdn/route-maps/entries/{route-map-id}/entry/{order}"


@route(_ENTRY, "GET")
async def get_route_map_entry(ctx: RequestContext):
    return await route_maps.get_entry(ctx.rt, ctx.params["route-map-id"], ctx.params["order"])


@route(_ENTRY, "PUT")
async def update_route_map_entry(ctx: RequestContext):
    await route_maps.update_entry(
        ctx.rt, ctx.params["route-map-id"], ctx.params["order"], ctx.params
    )


@route(_ENTRY, "DELETE")
async def delete_route_map_entry(ctx: RequestContext):
    await route_maps.delete_entry(
        ctx.rt, ctx.params["route-map-id"], ctx.params["order"], ctx.params
    )


# -- fabrics (PVE 9.x) ----------------------------------------------------------------


def _can(ctx: RequestContext):
    """PVE's check_any: does the caller hold any of ``privs`` on ``path``?"""
    return lambda path, privs: ctx.state.has(ctx.principal, path, privs, any_of=True)


@route("/cluster/sdn/fabrics/all", "GET")
async def list_all_fabrics(ctx: RequestContext):
    return await fabrics.list_all(ctx.rt, ctx.params, _can(ctx))


@route("/cluster/sdn/fabrics/fabric", "GET")
async def list_fabrics(ctx: RequestContext):
    return await fabrics.list_fabrics(ctx.rt, ctx.params, _can(ctx))


@route("/cluster/sdn/fabrics/fabric", "POST")
async def add_fabric(ctx: RequestContext):
    await fabrics.add_fabric(ctx.rt, ctx.params)


@route("/cluster/sdn/fabrics/fabric/{id}", "GET")
async def get_fabric(ctx: RequestContext):
    return await fabrics.get_fabric(ctx.rt, ctx.params["id"])


@route("/cluster/sdn/fabrics/fabric/{id}", "PUT")
async def update_fabric(ctx: RequestContext):
    await fabrics.update_fabric(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/sdn/fabrics/fabric/{id}", "DELETE")
async def delete_fabric(ctx: RequestContext):
    can = _can(ctx)
    await fabrics.delete_fabric(
        ctx.rt, ctx.params["id"], ctx.params, lambda node: can(f"/nodes/{node}", ["Sys.Modify"])
    )


@route("/cluster/sdn/fabrics/node", "GET")
async def list_fabric_nodes(ctx: RequestContext):
    return await fabrics.list_nodes(ctx.rt, ctx.params, _can(ctx))


@route("/cluster/sdn/fabrics/node/{fabric_id}", "GET")
async def list_nodes_of_fabric(ctx: RequestContext):
    return await fabrics.list_nodes(ctx.rt, ctx.params, _can(ctx), ctx.params["fabric_id"])


@route("/cluster/sdn/fabrics/node/{fabric_id}", "POST")
async def add_fabric_node(ctx: RequestContext):
    await fabrics.add_node(ctx.rt, ctx.params["fabric_id"], ctx.params)


_FABRIC_NODE = "/cluster/sdn/fabrics/node/{fabric_id}/{node_id}"


@route(_FABRIC_NODE, "GET")
async def get_fabric_node(ctx: RequestContext):
    return await fabrics.get_node(ctx.rt, ctx.params["fabric_id"], ctx.params["node_id"])


@route(_FABRIC_NODE, "PUT")
async def update_fabric_node(ctx: RequestContext):
    await fabrics.update_node(ctx.rt, ctx.params["fabric_id"], ctx.params["node_id"], ctx.params)


@route(_FABRIC_NODE, "DELETE")
async def delete_fabric_node(ctx: RequestContext):
    await fabrics.delete_node(ctx.rt, ctx.params["fabric_id"], ctx.params["node_id"], ctx.params)


@route("/nodes/{node}/sdn/fabrics/{fabric}/interfaces", "GET")
async def node_fabric_interfaces(ctx: RequestContext):
    return await fabrics.interfaces(ctx.rt, ctx.params["node"], ctx.params["fabric"])


@route("/nodes/{node}/sdn/fabrics/{fabric}/neighbors", "GET")
async def node_fabric_neighbors(ctx: RequestContext):
    return await fabrics.neighbors(
        ctx.rt, ctx.params["node"], ctx.params["fabric"], ctx.rt.clock.now()
    )


@route("/nodes/{node}/sdn/fabrics/{fabric}/routes", "GET")
async def node_fabric_routes(ctx: RequestContext):
    return await fabrics.routes(ctx.rt, ctx.params["node"], ctx.params["fabric"])
