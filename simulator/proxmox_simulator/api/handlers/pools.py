"""The 8.x-style pool endpoints: ``PUT``/``DELETE /pools`` with ``poolid`` as a parameter.

They do what ``PUT``/``DELETE /pools/{poolid}`` do (see cluster.py); 7.x and
older contracts do not declare them, so they are never routed there.
"""

from __future__ import annotations

from proxmox_simulator.api.handlers.cluster import require_vm_allocate
from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import inventory_service as svc


@route("/pools", "PUT")
async def update_pool(ctx: RequestContext):
    require_vm_allocate(ctx)
    await svc.update_pool(ctx.rt, ctx.params["poolid"], ctx.params)


@route("/pools", "DELETE")
async def delete_pool(ctx: RequestContext):
    await svc.delete_pool(ctx.rt, ctx.params["poolid"])
