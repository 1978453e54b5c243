"""/cluster/ceph/flags: the OSD map flags."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import ceph_service as svc


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
