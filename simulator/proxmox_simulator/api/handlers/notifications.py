"""/cluster/notifications: endpoints, matchers, targets and their tests."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import notification_service as svc


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


def _register(kind: str, base: str) -> None:
    @route(base, "GET")
    async def list_items(ctx: RequestContext):
        return await svc.list_of(ctx.rt, kind)

    @route(base, "POST")
    async def create(ctx: RequestContext):
        await svc.create(ctx.rt, kind, ctx.params, _declared(ctx))

    @route(f"{base}/{{name}}", "GET")
    async def get_one(ctx: RequestContext):
        return await svc.get_one(ctx.rt, kind, ctx.params["name"])

    @route(f"{base}/{{name}}", "PUT")
    async def update(ctx: RequestContext):
        await svc.update(ctx.rt, kind, ctx.params["name"], ctx.params, _declared(ctx))

    @route(f"{base}/{{name}}", "DELETE")
    async def delete(ctx: RequestContext):
        await svc.delete(ctx.rt, kind, ctx.params["name"])


for _kind in svc.ENDPOINT_TYPES:
    _register(_kind, f"/cluster/notifications/endpoints/{_kind}")
_register(svc.MATCHER, "/cluster/notifications/matchers")


@route("/cluster/notifications/targets", "GET")
async def targets(ctx: RequestContext):
    return await svc.targets(ctx.rt)


@route("/cluster/notifications/targets/{name}/test", "POST")
async def test_target(ctx: RequestContext):
    await svc.test_target(ctx.rt, ctx.params["name"])


@route("/cluster/notifications/matcher-fields", "GET")
async def matcher_fields(ctx: RequestContext):
    return svc.matcher_fields()


@route("/cluster/notifications/matcher-field-values", "GET")
async def matcher_field_values(ctx: RequestContext):
    return await svc.matcher_field_values(ctx.rt)
