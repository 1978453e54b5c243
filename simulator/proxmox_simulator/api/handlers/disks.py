"""/nodes/{node}/disks: list, SMART, GPT, wipe, ZFS, LVM, LVM-thin, directories; and the
local storage scans (/nodes/{node}/scan/{lvm,lvmthin,zfs})."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import disk_service as svc

_BASE = "/nodes/{node}/disks"


@route(f"{_BASE}/list", "GET")
async def list_disks(ctx: RequestContext):
    return await svc.list_disks(ctx.rt, ctx.node, ctx.params)


@route(f"{_BASE}/smart", "GET")
async def smart(ctx: RequestContext):
    return await svc.smart(ctx.rt, ctx.node, ctx.params["disk"], bool(ctx.params.get("healthonly")))


@route(f"{_BASE}/initgpt", "POST")
async def initgpt(ctx: RequestContext):
    return await svc.start(ctx.rt, ctx.principal, ctx.node, "initgpt", ctx.params)


@route(f"{_BASE}/wipedisk", "PUT")
async def wipedisk(ctx: RequestContext):
    return await svc.start(ctx.rt, ctx.principal, ctx.node, "wipedisk", ctx.params)


def _register(kind: str, item_key: str) -> None:
    @route(f"{_BASE}/{kind}", "GET")
    async def list_objects(ctx: RequestContext):
        return await svc.list_objects(ctx.rt, ctx.node, kind)

    @route(f"{_BASE}/{kind}", "POST")
    async def create(ctx: RequestContext):
        return await svc.start(ctx.rt, ctx.principal, ctx.node, kind, ctx.params)

    @route(f"{_BASE}/{kind}/{{{item_key}}}", "DELETE")
    async def remove(ctx: RequestContext):
        return await svc.start(
            ctx.rt, ctx.principal, ctx.node, kind, ctx.params, removal=(kind, ctx.params[item_key])
        )


for _kind in svc.KINDS:
    _register(_kind, "name")


@route(f"{_BASE}/zfs/{{name}}", "GET")
async def zfs_detail(ctx: RequestContext):
    return await svc.zfs_detail(ctx.rt, ctx.node, ctx.params["name"])


@route("/nodes/{node}/scan/lvm", "GET")
async def scan_lvm(ctx: RequestContext):
    return await svc.scan(ctx.rt, ctx.node, "lvm")


@route("/nodes/{node}/scan/lvmthin", "GET")
async def scan_lvmthin(ctx: RequestContext):
    return await svc.scan(ctx.rt, ctx.node, "lvmthin", ctx.params["vg"])


@route("/nodes/{node}/scan/zfs", "GET")
async def scan_zfs(ctx: RequestContext):
    return await svc.scan(ctx.rt, ctx.node, "zfs")
