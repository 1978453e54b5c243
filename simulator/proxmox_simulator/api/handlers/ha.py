"""/cluster/ha: groups, resources and the manager's status."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import ha_service as svc


@route("/cluster/ha/resources", "GET")
async def list_resources(ctx: RequestContext):
    return await svc.list_resources(ctx.rt, ctx.params.get("type"))


@route("/cluster/ha/resources", "POST")
async def create_resource(ctx: RequestContext):
    await svc.create_resource(ctx.rt, ctx.params)


@route("/cluster/ha/resources/{sid}", "GET")
async def get_resource(ctx: RequestContext):
    return await svc.get_resource(ctx.rt, ctx.params["sid"])


@route("/cluster/ha/resources/{sid}", "PUT")
async def update_resource(ctx: RequestContext):
    await svc.update_resource(ctx.rt, ctx.params["sid"], ctx.params)


@route("/cluster/ha/resources/{sid}", "DELETE")
async def delete_resource(ctx: RequestContext):
    await svc.delete_resource(ctx.rt, ctx.params["sid"])


@route("/cluster/ha/groups", "GET")
async def list_groups(ctx: RequestContext):
    return await svc.list_groups(ctx.rt)


@route("/cluster/ha/groups", "POST")
async def create_group(ctx: RequestContext):
    await svc.create_group(ctx.rt, ctx.params)


@route("/cluster/ha/groups/{group}", "GET")
async def get_group(ctx: RequestContext):
    return await svc.get_group(ctx.rt, ctx.params["group"])


@route("/cluster/ha/groups/{group}", "PUT")
async def update_group(ctx: RequestContext):
    await svc.update_group(ctx.rt, ctx.params["group"], ctx.params)


@route("/cluster/ha/groups/{group}", "DELETE")
async def delete_group(ctx: RequestContext):
    await svc.delete_group(ctx.rt, ctx.params["group"])


@route("/cluster/ha/status/current", "GET")
async def current_status(ctx: RequestContext):
    return await svc.current_status(ctx.rt)


@route("/cluster/ha/status/manager_status", "GET")
async def manager_status(ctx: RequestContext):
    return await svc.manager_status(ctx.rt)


@route("/cluster/ha/resources/{sid}/migrate", "POST")
async def migrate(ctx: RequestContext):
    result = await svc.request_move(ctx.rt, ctx.params["sid"], ctx.params["node"], relocate=False)
    # 8.x declares no answer; 9.x describes the request.
    return result if ctx.endpoint.returns.get("type") == "object" else None


@route("/cluster/ha/resources/{sid}/relocate", "POST")
async def relocate(ctx: RequestContext):
    result = await svc.request_move(ctx.rt, ctx.params["sid"], ctx.params["node"], relocate=True)
    return result if ctx.endpoint.returns.get("type") == "object" else None


@route("/cluster/ha/status/arm-ha", "POST")
async def arm(ctx: RequestContext):
    await svc.set_armed(ctx.rt, True, None)


@route("/cluster/ha/status/disarm-ha", "POST")
async def disarm(ctx: RequestContext):
    await svc.set_armed(ctx.rt, False, ctx.params["resource-mode"])
