"""Guest agent calls, cloud-init, feature checks, RRD, sendkey and monitor."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import guest_agent as agent
from proxmox_simulator.domain import guest_operations as ops
from proxmox_simulator.domain import migration_tunnel as tunnel
from proxmox_simulator.domain import remote_migration as remote
from proxmox_simulator.domain.guests import LXC, QEMU

_QEMU = "/nodes/{node}/qemu/{vmid}"
_AGENT = f"{_QEMU}/agent"


def _register_agent_read(name: str, call) -> None:
    @route(f"{_AGENT}/{name}", "GET")
    async def read(ctx: RequestContext):
        return await call(ctx.rt, ctx.node, ctx.vmid)


def _register_agent_post(name: str, call) -> None:
    @route(f"{_AGENT}/{name}", "POST")
    async def post(ctx: RequestContext):
        return await call(ctx.rt, ctx.node, ctx.vmid)


for _name, _call in (
    ("get-fsinfo", agent.fsinfo),
    ("get-users", agent.users),
    ("get-time", agent.guest_time),
    ("get-timezone", agent.timezone),
    ("get-vcpus", agent.vcpus),
    ("get-memory-blocks", agent.memory_blocks),
    ("get-memory-block-info", agent.memory_block_info),
):
    _register_agent_read(_name, _call)

_register_agent_post("fstrim", agent.fstrim)
for _action in ("freeze", "status", "thaw"):
    _register_agent_post(
        f"fsfreeze-{_action}",
        lambda rt, node, vmid, _a=_action: agent.fsfreeze(rt, node, vmid, _a),
    )
for _command in ("shutdown", "suspend-disk", "suspend-ram", "suspend-hybrid"):
    _register_agent_post(
        _command, lambda rt, node, vmid, _c=_command: agent.power(rt, node, vmid, _c)
    )


@route(_AGENT, "POST")
async def agent_command(ctx: RequestContext):
    return await agent.command(ctx.rt, ctx.node, ctx.vmid, ctx.params["command"])


@route(f"{_AGENT}/exec", "POST")
async def agent_exec(ctx: RequestContext):
    return await agent.execute(
        ctx.rt, ctx.node, ctx.vmid, ctx.params["command"], ctx.params.get("input-data")
    )


@route(f"{_AGENT}/exec-status", "GET")
async def agent_exec_status(ctx: RequestContext):
    return await agent.exec_status(ctx.rt, ctx.node, ctx.vmid, int(ctx.params["pid"]))


@route(f"{_AGENT}/file-read", "GET")
async def agent_file_read(ctx: RequestContext):
    return await agent.file_read(ctx.rt, ctx.node, ctx.vmid, ctx.params)


@route(f"{_AGENT}/file-write", "POST")
async def agent_file_write(ctx: RequestContext):
    await agent.file_write(
        ctx.rt,
        ctx.node,
        ctx.vmid,
        ctx.params["file"],
        ctx.params["content"],
        ctx.params.get("encode"),
    )


@route(f"{_AGENT}/set-user-password", "POST")
async def agent_set_password(ctx: RequestContext):
    return await agent.set_user_password(ctx.rt, ctx.node, ctx.vmid, ctx.params["username"])


@route(f"{_QEMU}/cloudinit", "GET")
async def cloudinit_pending(ctx: RequestContext):
    return await ops.cloudinit_pending(ctx.rt, ctx.node, ctx.vmid)


@route(f"{_QEMU}/cloudinit", "PUT")
async def cloudinit_regenerate(ctx: RequestContext):
    await ops.cloudinit_regenerate(ctx.rt, ctx.node, ctx.vmid)


@route(f"{_QEMU}/cloudinit/dump", "GET")
async def cloudinit_dump(ctx: RequestContext):
    return await ops.cloudinit_dump(ctx.rt, ctx.node, ctx.vmid, ctx.params["type"])


@route(f"{_QEMU}/sendkey", "PUT")
async def sendkey(ctx: RequestContext):
    await ops.sendkey(
        ctx.rt, ctx.node, ctx.vmid, ctx.params["key"], bool(ctx.params.get("skiplock"))
    )


@route(f"{_QEMU}/dbus-vmstate", "POST")
async def dbus_vmstate(ctx: RequestContext):
    await ops.dbus_vmstate(ctx.rt, ctx.node, ctx.vmid)


def _register_tunnel(kind: str) -> None:
    base = f"/nodes/{{node}}/{kind}/{{vmid}}"

    @route(f"{base}/mtunnel", "POST")
    async def mtunnel(ctx: RequestContext):
        return await tunnel.open_tunnel(
            ctx.rt, ctx.state, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params
        )

    @route(f"{base}/mtunnelwebsocket", "GET")
    async def mtunnelwebsocket(ctx: RequestContext):
        p = ctx.params
        return await tunnel.tunnel_websocket(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, p["socket"], p["ticket"]
        )

    @route(f"{base}/remote_migrate", "POST")
    async def remote_migrate(ctx: RequestContext):
        return await remote.remote_migrate(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params
        )


for _kind in (QEMU, LXC):
    _register_tunnel(_kind)


@route(f"{_QEMU}/monitor", "POST")
async def monitor(ctx: RequestContext):
    return await ops.monitor(ctx.rt, ctx.node, ctx.vmid, ctx.params["command"])


def _register_both(kind: str) -> None:
    guest = f"/nodes/{{node}}/{kind}/{{vmid}}"

    @route(f"{guest}/feature", "GET")
    async def feature(ctx: RequestContext):
        return await ops.feature(
            ctx.rt, kind, ctx.node, ctx.vmid, ctx.params["feature"], ctx.params.get("snapname")
        )

    @route(f"{guest}/rrddata", "GET")
    async def rrddata(ctx: RequestContext):
        return await ops.rrddata(
            ctx.rt, kind, ctx.node, ctx.vmid, ctx.params["timeframe"], ctx.params.get("cf")
        )

    @route(f"{guest}/rrd", "GET")
    async def rrd(ctx: RequestContext):
        return await ops.rrd(
            ctx.rt, kind, ctx.node, ctx.vmid, ctx.params["ds"], ctx.params["timeframe"]
        )


_register_both(QEMU)
_register_both(LXC)
