"""/cluster/ha: groups, resources, rules (9.x) and the manager's status."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import ha_rules_service as rules_svc
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


@route("/cluster/ha/rules", "GET")
async def list_rules(ctx: RequestContext):
    return await rules_svc.list_rules(ctx.rt, ctx.params.get("type"), ctx.params.get("resource"))


@route("/cluster/ha/rules", "POST")
async def create_rule(ctx: RequestContext):
    await rules_svc.create_rule(ctx.rt, ctx.params)


@route("/cluster/ha/rules/{rule}", "GET")
async def get_rule(ctx: RequestContext):
    return await rules_svc.get_rule(ctx.rt, ctx.params["rule"])


@route("/cluster/ha/rules/{rule}", "PUT")
async def update_rule(ctx: RequestContext):
    await rules_svc.update_rule(ctx.rt, ctx.params["rule"], ctx.params)


@route("/cluster/ha/rules/{rule}", "DELETE")
async def delete_rule(ctx: RequestContext):
    await rules_svc.delete_rule(ctx.rt, ctx.params["rule"])
