"""/cluster/metrics/server, /cluster/metrics/export and /cluster/mapping/{pci,usb,dir}."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import mapping_service, metrics_service, pull_metrics


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/cluster/metrics/server", "GET")
async def list_servers(ctx: RequestContext):
    return await metrics_service.list_servers(ctx.rt)


@route("/cluster/metrics/server/{id}", "GET")
async def get_server(ctx: RequestContext):
    return await metrics_service.get_server(ctx.rt, ctx.params["id"])


@route("/cluster/metrics/server/{id}", "POST")
async def create_server(ctx: RequestContext):
    await metrics_service.create_server(ctx.rt, ctx.params, _declared(ctx))


@route("/cluster/metrics/server/{id}", "PUT")
async def update_server(ctx: RequestContext):
    await metrics_service.update_server(ctx.rt, ctx.params["id"], ctx.params, _declared(ctx))


@route("/cluster/metrics/server/{id}", "DELETE")
async def delete_server(ctx: RequestContext):
    await metrics_service.delete_server(ctx.rt, ctx.params["id"])


@route("/cluster/metrics/export", "GET")
async def export_metrics(ctx: RequestContext):
    return await pull_metrics.export(ctx.rt, ctx.params)


def _register_mapping(kind: str) -> None:
    base = f"/cluster/mapping/{kind}"

    @route(base, "GET")
    async def list_mappings(ctx: RequestContext):
        return await mapping_service.list_mappings(ctx.rt, kind, ctx.params.get("check-node"))

    @route(base, "POST")
    async def create_mapping(ctx: RequestContext):
        await mapping_service.create_mapping(ctx.rt, kind, ctx.params)

    @route(f"{base}/{{id}}", "GET")
    async def get_mapping(ctx: RequestContext):
        return await mapping_service.get_mapping(ctx.rt, kind, ctx.params["id"])

    @route(f"{base}/{{id}}", "PUT")
    async def update_mapping(ctx: RequestContext):
        await mapping_service.update_mapping(ctx.rt, kind, ctx.params["id"], ctx.params)

    @route(f"{base}/{{id}}", "DELETE")
    async def delete_mapping(ctx: RequestContext):
        await mapping_service.delete_mapping(ctx.rt, kind, ctx.params["id"])


for _kind in mapping_service.KINDS:
    _register_mapping(_kind)
