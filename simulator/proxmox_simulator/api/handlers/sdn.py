"""/cluster/sdn: zones, vnets, subnets, controllers, IPAMs, DNS plugins, and apply
(``PUT /cluster/sdn``)."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import sdn_service as svc


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/cluster/sdn", "PUT")
async def apply(ctx: RequestContext):
    return await svc.apply(ctx.rt, ctx.principal)


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
    await svc.delete_zone(ctx.rt, ctx.params["zone"])


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
    await svc.delete_vnet(ctx.rt, ctx.params["vnet"])


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
    await svc.delete_subnet(ctx.rt, ctx.params["vnet"], ctx.params["subnet"])


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
        await svc.delete_plugin(ctx.rt, what, ctx.params[key])


for _what in ("controllers", "ipams", "dns"):
    _register_plugin(_what)


@route("/cluster/sdn/ipams/{ipam}/status", "GET")
async def ipam_status(ctx: RequestContext):
    return await svc.ipam_status(ctx.rt, ctx.params["ipam"])
