"""/nodes/{node}/certificates: the node's certificate files and the custom certificate."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import certificate_service as svc


@route("/nodes/{node}/certificates/info", "GET")
async def certificate_info(ctx: RequestContext):
    return await svc.info(ctx.rt, ctx.node)


@route("/nodes/{node}/certificates/custom", "POST")
async def upload_custom(ctx: RequestContext):
    return await svc.upload_custom(ctx.rt, ctx.node, ctx.params)


@route("/nodes/{node}/certificates/custom", "DELETE")
async def delete_custom(ctx: RequestContext):
    await svc.delete_custom(ctx.rt, ctx.node)
