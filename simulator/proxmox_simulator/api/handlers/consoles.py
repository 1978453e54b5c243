"""Consoles: vncproxy / termproxy / spiceproxy of guests, a node's shells, and vncwebsocket."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import console_service as svc
from proxmox_simulator.domain.guests import LXC, QEMU

_NODE = "/nodes/{node}"


def _pam_only(ctx: RequestContext) -> bool:
    # Up to 7.x a node's shell was for realm 'pam' only; each major's schema says so.
    description = str((ctx.endpoint.permissions or {}).get("description", ""))
    return "Restricted to users on realm 'pam'" in description


def _register_guest(kind: str) -> None:
    guest = f"{_NODE}/{kind}/{{vmid}}"

    @route(f"{guest}/vncproxy", "POST")
    async def vncproxy(ctx: RequestContext):
        return await svc.open_guest_console(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params, terminal=False
        )

    @route(f"{guest}/termproxy", "POST")
    async def termproxy(ctx: RequestContext):
        return await svc.open_guest_console(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params, terminal=True
        )

    @route(f"{guest}/vncwebsocket", "GET")
    async def vncwebsocket(ctx: RequestContext):
        return await svc.guest_websocket(
            ctx.rt,
            ctx.principal,
            kind,
            ctx.node,
            ctx.vmid,
            ctx.params["vncticket"],
            ctx.params["port"],
        )

    @route(f"{guest}/spiceproxy", "POST")
    async def spiceproxy(ctx: RequestContext):
        return await svc.guest_spice(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params.get("proxy")
        )


_register_guest(QEMU)
_register_guest(LXC)


@route(f"{_NODE}/vncshell", "POST")
async def vncshell(ctx: RequestContext):
    return await svc.open_node_shell(
        ctx.rt, ctx.principal, ctx.node, ctx.params, pam_only=_pam_only(ctx), terminal=False
    )


@route(f"{_NODE}/termproxy", "POST")
async def node_termproxy(ctx: RequestContext):
    return await svc.open_node_shell(
        ctx.rt, ctx.principal, ctx.node, ctx.params, pam_only=_pam_only(ctx), terminal=True
    )


@route(f"{_NODE}/vncwebsocket", "GET")
async def node_vncwebsocket(ctx: RequestContext):
    return await svc.node_websocket(
        ctx.rt,
        ctx.principal,
        ctx.node,
        ctx.params["vncticket"],
        ctx.params["port"],
        pam_only=_pam_only(ctx),
    )


@route(f"{_NODE}/spiceshell", "POST")
async def spiceshell(ctx: RequestContext):
    return await svc.node_spice(
        ctx.rt, ctx.principal, ctx.node, ctx.params, pam_only=_pam_only(ctx)
    )
