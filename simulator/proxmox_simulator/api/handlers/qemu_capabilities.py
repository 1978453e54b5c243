"""QEMU capabilities of a node and the cluster: CPU flags, machine types, migration,
and the cluster's custom CPU models."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import qemu_cpu_service as svc


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/nodes/{node}/capabilities/qemu/cpu-flags", "GET")
async def node_cpu_flags(ctx: RequestContext):
    return await svc.cpu_flags(
        ctx.rt, ctx.node, ctx.params.get("accel") or "kvm", ctx.params.get("arch"), True
    )


@route("/cluster/qemu/cpu-flags", "GET")
async def cluster_cpu_flags(ctx: RequestContext):
    return await svc.cpu_flags(
        ctx.rt, None, ctx.params.get("accel") or "kvm", ctx.params.get("arch"), False
    )


@route("/nodes/{node}/capabilities/qemu/machines", "GET")
async def machines(ctx: RequestContext):
    return await svc.machines(ctx.rt, ctx.node, ctx.params.get("arch"), ctx.endpoint.returns)


@route("/nodes/{node}/capabilities/qemu/migration", "GET")
async def migration(ctx: RequestContext):
    return await svc.migration(ctx.rt, ctx.node)


@route("/cluster/qemu/custom-cpu-models", "GET")
async def list_models(ctx: RequestContext):
    return await svc.list_models(ctx.rt, ctx.state, ctx.principal)


@route("/cluster/qemu/custom-cpu-models", "POST")
async def create_model(ctx: RequestContext):
    await svc.create_model(ctx.rt, ctx.params, _declared(ctx))


@route("/cluster/qemu/custom-cpu-models/{cputype}", "GET")
async def get_model(ctx: RequestContext):
    return await svc.get_model(ctx.rt, ctx.params["cputype"])


@route("/cluster/qemu/custom-cpu-models/{cputype}", "PUT")
async def update_model(ctx: RequestContext):
    await svc.update_model(ctx.rt, ctx.params["cputype"], ctx.params, _declared(ctx))


@route("/cluster/qemu/custom-cpu-models/{cputype}", "DELETE")
async def delete_model(ctx: RequestContext):
    await svc.delete_model(ctx.rt, ctx.params["cputype"])
