"""HTTP adapter of the contract-driven resource store: the request plane's
fallback for declared methods no bespoke handler owns (bespoke handlers win)."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import REGISTRY, RequestContext
from proxmox_simulator.domain import resource_store


def _is_bespoke(path: str, method: str) -> bool:
    return REGISTRY.get(path, method) is not None


async def resource_store_handler(ctx: RequestContext):
    request = resource_store.StoreRequest(ctx.rt.contract, ctx.endpoint, ctx.params, ctx.principal)
    return await resource_store.execute(ctx.rt, request, _is_bespoke)
