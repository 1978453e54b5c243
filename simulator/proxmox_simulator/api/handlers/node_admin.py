"""A node's administration calls: its logs, guest network counters, report, batched
execution, wake-on-LAN and vzdump defaults."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.api.render import WithTotal
from proxmox_simulator.domain import node_log_service


@route("/nodes/{node}/syslog", "GET")
async def syslog(ctx: RequestContext):
    lines, total = await node_log_service.syslog(ctx.rt, ctx.node, ctx.params)
    return WithTotal(lines, total)


@route("/nodes/{node}/journal", "GET")
async def journal(ctx: RequestContext):
    return await node_log_service.journal(ctx.rt, ctx.node, ctx.params)
