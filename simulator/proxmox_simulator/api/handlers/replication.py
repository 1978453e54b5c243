"""/cluster/replication jobs, node replication status and runs; /cluster/options and /cluster/log."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import replication_service as svc


@route("/cluster/replication", "GET")
async def list_jobs(ctx: RequestContext):
    return await svc.list_jobs(ctx.rt)


@route("/cluster/replication", "POST")
async def create_job(ctx: RequestContext):
    await svc.create_job(ctx.rt, ctx.params)


@route("/cluster/replication/{id}", "GET")
async def get_job(ctx: RequestContext):
    return await svc.get_job(ctx.rt, ctx.params["id"])


@route("/cluster/replication/{id}", "PUT")
async def update_job(ctx: RequestContext):
    await svc.update_job(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/replication/{id}", "DELETE")
async def delete_job(ctx: RequestContext):
    await svc.delete_job(ctx.rt, ctx.params["id"])


@route("/nodes/{node}/replication", "GET")
async def node_status(ctx: RequestContext):
    guest = ctx.params.get("guest")
    return await svc.node_status(ctx.rt, ctx.node, int(guest) if guest is not None else None)


@route("/nodes/{node}/replication/{id}", "GET")
async def job_index(ctx: RequestContext):
    await svc.job_status(ctx.rt, ctx.node, ctx.params["id"])
    return [{"name": "schedule_now"}, {"name": "log"}, {"name": "status"}]


@route("/nodes/{node}/replication/{id}/status", "GET")
async def job_status(ctx: RequestContext):
    return await svc.job_status(ctx.rt, ctx.node, ctx.params["id"])


@route("/nodes/{node}/replication/{id}/log", "GET")
async def job_log(ctx: RequestContext):
    return await svc.job_log(
        ctx.rt,
        ctx.node,
        ctx.params["id"],
        int(ctx.params.get("start") or 0),
        int(ctx.params.get("limit") or 50),
    )


@route("/nodes/{node}/replication/{id}/schedule_now", "POST")
async def schedule_now(ctx: RequestContext):
    return await svc.schedule_now(ctx.rt, ctx.principal, ctx.node, ctx.params["id"])


@route("/cluster/options", "GET")
async def cluster_options(ctx: RequestContext):
    return await svc.cluster_options(ctx.rt)


@route("/cluster/options", "PUT")
async def set_cluster_options(ctx: RequestContext):
    await svc.set_cluster_options(ctx.rt, ctx.params, {p.name for p in ctx.endpoint.parameters})


@route("/cluster/log", "GET")
async def cluster_log(ctx: RequestContext):
    return await svc.cluster_log(ctx.rt, int(ctx.params.get("max") or 50))
