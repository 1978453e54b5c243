"""Directory indexes (``[{"subdir": ...}]``) derived from the contract's tree.

PVE's index methods list the literal child paths below them; the contract
already declares exactly those children, so the index is computed from it.
Parent resources named in the path (node, guest) must exist, as in PVE.
"""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import guest_service
from proxmox_simulator.domain.guests import LXC, QEMU


def is_directory_index(endpoint: Endpoint) -> bool:
    links = endpoint.returns.get("links") or []
    return endpoint.method == "GET" and any(link.get("href") == "{subdir}" for link in links)


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


async def directory_index(ctx: RequestContext):
    path = ctx.endpoint.path
    async with ctx.rt.pool.acquire() as conn:
        if "node" in ctx.params:
            await guest_service.require_node(conn, ctx.params["node"])
        if "vmid" in ctx.params and "/qemu/" in path:
            await guest_service.load_guest(conn, QEMU, ctx.params["node"], int(ctx.params["vmid"]))
        elif "vmid" in ctx.params and "/lxc/" in path:
            await guest_service.load_guest(conn, LXC, ctx.params["node"], int(ctx.params["vmid"]))
    return [{"subdir": name} for name in children(ctx.rt.contract, path)]
