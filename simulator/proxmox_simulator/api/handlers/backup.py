"""vzdump, /cluster/backup jobs, backup-info and prune."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import backup_service as svc


@route("/nodes/{node}/vzdump", "POST")
async def vzdump(ctx: RequestContext):
    return await svc.vzdump(ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params)


@route("/cluster/backup", "GET")
async def list_jobs(ctx: RequestContext):
    return await svc.list_jobs(ctx.rt)


@route("/cluster/backup", "POST")
async def create_job(ctx: RequestContext):
    await svc.create_job(ctx.rt, ctx.params)


@route("/cluster/backup/{id}", "GET")
async def get_job(ctx: RequestContext):
    return await svc.get_job(ctx.rt, ctx.params["id"])


@route("/cluster/backup/{id}", "PUT")
async def update_job(ctx: RequestContext):
    await svc.update_job(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/backup/{id}", "DELETE")
async def delete_job(ctx: RequestContext):
    await svc.delete_job(ctx.rt, ctx.params["id"])


@route("/cluster/backup/{id}/included_volumes", "GET")
async def included_volumes(ctx: RequestContext):
    return await svc.included_volumes(ctx.rt, ctx.params["id"])


@route("/cluster/backup-info/not-backed-up", "GET")
@route("/cluster/backupinfo/not_backed_up", "GET")  # 6.x
async def not_backed_up(ctx: RequestContext):
    return await svc.not_backed_up(ctx.rt)


@route("/cluster/backupinfo", "GET")  # 6.x
async def backupinfo_index(ctx: RequestContext):
    # 6.x declares this index as a bare string ("shows stub message"), not a directory
    # index of its one child; PVE 6 answers a fixed placeholder text.
    return "backup info index: see not_backed_up"


@route("/nodes/{node}/storage/{storage}/prunebackups", "GET")
async def prune_preview(ctx: RequestContext):
    return await svc.prune_preview(ctx.rt, ctx.node, ctx.params["storage"], ctx.params)


@route("/nodes/{node}/storage/{storage}/prunebackups", "DELETE")
async def prune(ctx: RequestContext):
    return await svc.prune(ctx.rt, ctx.principal, ctx.node, ctx.params["storage"], ctx.params)


@route("/nodes/{node}/storage/{storage}/content/{volume}", "PUT")
async def annotate_volume(ctx: RequestContext):
    await svc.set_volume_annotations(
        ctx.rt,
        ctx.state,
        ctx.principal,
        ctx.node,
        ctx.params["storage"],
        ctx.params["volume"],
        ctx.params,
    )


@route("/nodes/{node}/storage/{storage}/content/{volume}", "DELETE")
async def delete_volume(ctx: RequestContext):
    return await svc.delete_volume(
        ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params["storage"], ctx.params["volume"]
    )


@route("/nodes/{node}/vzdump/extractconfig", "GET")
async def extract_config(ctx: RequestContext):
    return await svc.extract_config(ctx.rt, ctx.node, ctx.params["volume"])
