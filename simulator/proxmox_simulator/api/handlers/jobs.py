"""/cluster/jobs: realm-sync jobs and the calendar-event analysis."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import realm_sync_service as svc


@route("/cluster/jobs/realm-sync", "GET")
async def list_realm_sync_jobs(ctx: RequestContext):
    return await svc.list_jobs(ctx.rt)


@route("/cluster/jobs/realm-sync/{id}", "GET")
async def get_realm_sync_job(ctx: RequestContext):
    return await svc.get_job(ctx.rt, ctx.params["id"])


@route("/cluster/jobs/realm-sync/{id}", "POST")
async def create_realm_sync_job(ctx: RequestContext):
    await svc.create_job(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/jobs/realm-sync/{id}", "PUT")
async def update_realm_sync_job(ctx: RequestContext):
    await svc.update_job(ctx.rt, ctx.params["id"], ctx.params)


@route("/cluster/jobs/realm-sync/{id}", "DELETE")
async def delete_realm_sync_job(ctx: RequestContext):
    await svc.delete_job(ctx.rt, ctx.params["id"])


@route("/cluster/jobs/schedule-analyze", "GET")
async def schedule_analyze(ctx: RequestContext):
    return await svc.schedule_analyze(ctx.rt, ctx.params)
