"""Directory indexes (``[{"subdir": ...}]``) derived from the contract's tree.

PVE's index methods list the literal child paths below them; the contract
already declares exactly those children, so the index is computed from it.
Parent resources named in the path (node, guest) must exist, as in PVE.
"""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import resource_store


def _is_bespoke(path: str, method: str) -> bool:
    from proxmox_simulator.api.handlers.registry import REGISTRY

    return REGISTRY.get(path, method) is not None


def index_field(contract: Contract, endpoint: Endpoint) -> str | None:
    """The entry field of a directory index (``subdir``, ``name``, ``id``...), if it is one.

    An index links its entries as ``{field}``, declares no other entry property,
    and sits above literal children only (a ``{param}`` child means a collection).
    """
    if endpoint.method != "GET" or endpoint.returns.get("type") != "array":
        return None
    hrefs = [str(link.get("href", "")) for link in endpoint.returns.get("links") or []]
    if len(hrefs) != 1 or not (hrefs[0].startswith("{") and hrefs[0].endswith("}")):
        return None
    field = hrefs[0][1:-1]
    if "/" in field:
        return None
    declared = set((endpoint.returns.get("items") or {}).get("properties") or {})
    if field == "subdir":
        return field
    if not declared <= {field} or not children(contract, endpoint.path):
        return None
    prefix = endpoint.path.rstrip("/") + "/"
    depth = endpoint.path.count("/") + (0 if endpoint.path == "/" else 1)
    for child in contract.paths:
        if child.startswith(prefix) and child.count("/") == depth and child.endswith("}"):
            return None
    return field


def is_directory_index(contract: Contract, endpoint: Endpoint) -> bool:
    return index_field(contract, endpoint) is not None


def children(contract: Contract, path: str) -> list[str]:
    depth = path.count("/") + (0 if path == "/" else 1)
    prefix = path.rstrip("/") + "/"
    names = set()
    for child in contract.paths:
        if child.startswith(prefix) and child.count("/") == depth:
            last = child.rsplit("/", 1)[1]
            if not last.startswith("{"):
                names.add(last)
    return sorted(names)


async def _require_bespoke_parents(ctx: RequestContext) -> None:
    """Items a bespoke handler owns (an SDN vnet) exist when their own read answers."""
    from dataclasses import replace

    from proxmox_simulator.api.handlers.registry import REGISTRY

    segments = ctx.endpoint.path.split("/")
    for i in range(2, len(segments)):
        if not segments[i].startswith("{"):
            continue
        template = "/".join(segments[: i + 1])
        item = ctx.rt.contract.endpoint(template, "GET")
        read = REGISTRY.get(template, "GET")
        if item is None or read is None or template.endswith(("/{node}", "/{vmid}")):
            continue
        await read(replace(ctx, endpoint=item))


async def directory_index(ctx: RequestContext):
    path = ctx.endpoint.path
    async with ctx.rt.pool.acquire() as conn:
        # Nodes, guests and store items named in the path, checked as for any method.
        await resource_store.require_parents(
            conn, ctx.rt.contract, ctx.endpoint, ctx.params, _is_bespoke, including_last=True
        )
    await _require_bespoke_parents(ctx)
    field = index_field(ctx.rt.contract, ctx.endpoint)
    return [{field: name} for name in children(ctx.rt.contract, path)]
