"""/nodes/{node}/qemu and /nodes/{node}/lxc: one implementation, two guest kinds."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.api.render import RawJSON
from proxmox_simulator.api.validation import defaults
from proxmox_simulator.domain import backup_service as backup
from proxmox_simulator.domain import guest_agent as agent
from proxmox_simulator.domain import guest_disks as disks
from proxmox_simulator.domain import guest_placement as placement
from proxmox_simulator.domain import guest_service as svc
from proxmox_simulator.domain.guests import LXC, QEMU
from proxmox_simulator.domain.resource_shapes import returns_task


def _register(kind: str) -> None:
    base = f"/nodes/{{node}}/{kind}"
    guest = f"{base}/{{vmid}}"

    @route(base, "GET")
    async def list_guests(ctx: RequestContext):
        return RawJSON(await svc.list_json(ctx.rt, ctx.state, ctx.principal, kind, ctx.node))

    @route(base, "POST")
    async def create_guest(ctx: RequestContext):
        # qemu: "archive"; lxc: "restore=1" with the archive as "ostemplate".
        archive = ctx.params.get("archive") or (
            ctx.params.get("ostemplate") if ctx.params.get("restore") else None
        )
        restored = None
        if archive:
            restored = await backup.restored_guest_config(
                ctx.rt, kind, ctx.node, int(ctx.params["vmid"]), archive, ctx.params.get("storage")
            )
        return await svc.create(
            ctx.rt,
            ctx.state,
            ctx.principal,
            kind,
            ctx.node,
            ctx.params,
            defaults(ctx.endpoint),
            restored=restored,
        )

    @route(f"{guest}/config", "GET")
    async def get_config(ctx: RequestContext):
        if ctx.params.get("snapshot"):  # "config as of snapshot X"
            return await svc.snapshot_config(
                ctx.rt, kind, ctx.node, ctx.vmid, ctx.params["snapshot"]
            )
        return await svc.get_config(ctx.rt, kind, ctx.node, ctx.vmid)

    @route(f"{guest}/config", "PUT")
    async def put_config(ctx: RequestContext):
        return await svc.update_config(
            ctx.rt,
            ctx.state,
            ctx.principal,
            kind,
            ctx.node,
            ctx.vmid,
            ctx.params,
            defaults(ctx.endpoint),
            as_task=False,
        )

    if kind == QEMU:

        @route(f"{guest}/config", "POST")
        async def post_config(ctx: RequestContext):
            return await svc.update_config(
                ctx.rt,
                ctx.state,
                ctx.principal,
                kind,
                ctx.node,
                ctx.vmid,
                ctx.params,
                defaults(ctx.endpoint),
                as_task=True,
            )

        @route(f"{guest}/agent/network-get-interfaces", "GET")
        async def agent_interfaces(ctx: RequestContext):
            return await agent.network_interfaces(ctx.rt, ctx.node, ctx.vmid)

        @route(f"{guest}/agent/get-osinfo", "GET")
        async def agent_osinfo(ctx: RequestContext):
            return await agent.os_info(ctx.rt, ctx.node, ctx.vmid)

        @route(f"{guest}/agent/get-host-name", "GET")
        async def agent_host_name(ctx: RequestContext):
            return await agent.host_name(ctx.rt, ctx.node, ctx.vmid)

        @route(f"{guest}/agent/info", "GET")
        async def agent_info(ctx: RequestContext):
            return await agent.info(ctx.rt, ctx.node, ctx.vmid)

        @route(f"{guest}/agent/ping", "POST")
        async def agent_ping(ctx: RequestContext):
            return await agent.ping(ctx.rt, ctx.node, ctx.vmid)

    else:

        @route(f"{guest}/interfaces", "GET")
        async def lxc_interfaces(ctx: RequestContext):
            return await svc.lxc_interfaces(ctx.rt, ctx.node, ctx.vmid)

    @route(guest, "DELETE")
    async def destroy(ctx: RequestContext):
        return await svc.destroy(ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params)

    @route(f"{guest}/status/current", "GET")
    async def current(ctx: RequestContext):
        return await svc.current_status(ctx.rt, kind, ctx.node, ctx.vmid)

    @route(f"{guest}/resize", "PUT")
    async def resize(ctx: RequestContext):
        return await disks.resize(
            ctx.rt,
            ctx.principal,
            kind,
            ctx.node,
            ctx.vmid,
            ctx.params,
            as_task=returns_task(ctx.endpoint),
        )

    @route(f"{guest}/move_disk" if kind == QEMU else f"{guest}/move_volume", "POST")
    async def move(ctx: RequestContext):
        return await disks.move(ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params)

    if kind == QEMU:

        @route(f"{guest}/unlink", "PUT")
        async def unlink(ctx: RequestContext):
            await disks.unlink(
                ctx.rt,
                kind,
                ctx.node,
                ctx.vmid,
                ctx.params["idlist"],
                bool(ctx.params.get("force")),
            )

    @route(f"{guest}/pending", "GET")
    async def pending(ctx: RequestContext):
        # Changes apply immediately in the simulator, so nothing is ever pending:
        # every key is reported with its current value, as PVE does.
        config = await svc.get_config(ctx.rt, kind, ctx.node, ctx.vmid)
        return [{"key": k, "value": v} for k, v in sorted(config.items())]

    @route(f"{guest}/migrate", "GET")
    async def migrate_preconditions(ctx: RequestContext):
        return await placement.migrate_preconditions(
            ctx.rt, kind, ctx.node, ctx.vmid, ctx.params.get("target")
        )

    @route(f"{guest}/migrate", "POST")
    async def migrate(ctx: RequestContext):
        return await placement.migrate(ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params)

    @route(f"{guest}/clone", "POST")
    async def clone(ctx: RequestContext):
        return await placement.clone(ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, ctx.params)

    @route(f"{guest}/template", "POST")
    async def template(ctx: RequestContext):
        return await placement.template(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, as_task=returns_task(ctx.endpoint)
        )

    for action in ("start", "stop", "shutdown", "reboot", "suspend", "resume"):
        _register_power(guest, kind, action)
    if kind == QEMU:
        _register_power(guest, kind, "reset")

    @route(f"{guest}/snapshot", "GET")
    async def list_snapshots(ctx: RequestContext):
        return await svc.list_snapshots(ctx.rt, kind, ctx.node, ctx.vmid)

    @route(f"{guest}/snapshot", "POST")
    async def create_snapshot(ctx: RequestContext):
        return await svc.snapshot_task(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, "snapshot", ctx.params
        )

    @route(f"{guest}/snapshot/{{snapname}}", "DELETE")
    async def delete_snapshot(ctx: RequestContext):
        return await svc.snapshot_task(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, "delsnapshot", ctx.params
        )

    @route(f"{guest}/snapshot/{{snapname}}/rollback", "POST")
    async def rollback(ctx: RequestContext):
        return await svc.snapshot_task(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, "rollback", ctx.params
        )

    @route(f"{guest}/snapshot/{{snapname}}/config", "GET")
    async def snapshot_config(ctx: RequestContext):
        return await svc.snapshot_config(ctx.rt, kind, ctx.node, ctx.vmid, ctx.params["snapname"])

    @route(f"{guest}/snapshot/{{snapname}}/config", "PUT")
    async def update_snapshot(ctx: RequestContext):
        await svc.update_snapshot(
            ctx.rt,
            kind,
            ctx.node,
            ctx.vmid,
            ctx.params["snapname"],
            ctx.params.get("description") or "",
        )


def _register_power(guest: str, kind: str, action: str) -> None:
    @route(f"{guest}/status/{action}", "POST")
    async def power(ctx: RequestContext):
        return await svc.power(
            ctx.rt, ctx.principal, kind, ctx.node, ctx.vmid, action, ctx.params, ctx.state
        )


_register(QEMU)
_register(LXC)
