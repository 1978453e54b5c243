"""What each task type does once a worker holds its lease.

Each executor logs like the PVE worker would, spends simulated time, then
commits its state change together with the task's completion.
"""

from __future__ import annotations

from proxmox_simulator.domain import (
    bulk_guest_service,
    ceph_cluster_service,
    cloudinit,
    console_service,
    file_restore,
    hibernation,
    migration_tunnel,
    node_system_service,
    oci_registry,
    realm_sync_service,
    remote_migration,
    resource_store,
)
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_disks import apply_move, resize_in_place, store_disk_config
from proxmox_simulator.domain.guest_placement import (
    clone_cloudinit,
    convert_to_template,
    copy_disks,
    link_disks,
    remove_unfinished,
)
from proxmox_simulator.domain.guest_service import allocate_disk, guest_sizing
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import firewall as firewall_repo
from proxmox_simulator.repositories import guest_agent as agent_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import ha as ha_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import resources as resources_repo
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks import backup_executors, node_executors
from proxmox_simulator.tasks.worker import Executor, TaskContext


async def _locked_guest(conn, ctx: TaskContext):
    vmid = ctx.payload["vmid"]
    row = await guest_repo.get(conn, vmid, for_update=True)
    if row is None:
        raise PveError(
            f"Configuration file for {rules.noun(ctx.payload['kind'])} {vmid} does not exist"
        )
    return row


async def _plug_nics(ctx: TaskContext, kind: str, vmid: int) -> None:
    """Starting a guest plugs each NIC into its bridge; PVE's start fails on a
    bridge the node does not have (the config write itself never checks)."""
    async with ctx.worker.pool.acquire() as conn:
        row = await guest_repo.get(conn, vmid)
        if row is None:
            return
        known = await node_system_service.guest_bridges(conn, row["node"])
    for _key, bridge in rules.bridges(kind, row["config"]):
        if bridge not in known:
            await ctx.log(f"bridge '{bridge}' does not exist")
            if kind == rules.QEMU:
                raise PveError("start failed: QEMU exited with code 1")
            raise PveError(f"startup for container '{vmid}' failed")


async def create_guest(ctx: TaskContext) -> None:
    vmid, kind = ctx.payload["vmid"], ctx.payload["kind"]
    await ctx.sleep(rules.DURATIONS["create"])
    if ctx.payload.get("start"):
        await _plug_nics(ctx, kind, vmid)
    lines: list[str] = []

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        config = dict(row["config"])
        for request in rules.new_disk_requests(kind, config):
            value = await allocate_disk(conn, ctx.clock, kind, row["node"], vmid, request)
            config[request.key] = value
            source = request.options.get("import-from")
            if source:
                lines.append(f"  imported {source} to {value.split(',', 1)[0]}")
            else:
                lines.append(f"  allocated {value.split(',', 1)[0]} ({request.size_gib:g} GiB)")
        if kind == rules.QEMU:
            created = await cloudinit.allocate_requested(conn, ctx.clock, row["node"], vmid, config)
            if created:
                lines.extend(created)
                await agent_repo.set_cloudinit(conn, vmid, cloudinit.values(config))
        config.pop("lock", None)
        maxdisk = await inventory.guest_disk_bytes(conn, vmid)
        await guest_repo.update_config(
            conn,
            vmid=vmid,
            expected_version=row["version"],
            config=config,
            name=row["name"],
            maxmem=row["maxmem"],
            maxdisk=maxdisk,
            cpus=row["cpus"],
            interfaces=rules.guest_interfaces(kind, config),
            pool=row["pool"],
        )
        if ctx.payload.get("start"):
            await guest_repo.set_status(conn, vmid, rules.RUNNING, int(ctx.clock.now()))
            lines.append(f"{rules.noun(kind)} {vmid} started")

    await ctx.complete(effect, lines=lines)


async def power(ctx: TaskContext) -> None:
    vmid, kind, action = ctx.payload["vmid"], ctx.payload["kind"], ctx.payload["action"]
    await ctx.sleep(rules.DURATIONS[action])
    if action == "start":
        await _plug_nics(ctx, kind, vmid)
    lines: list[str] = []

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        if ctx.payload.get("todisk"):
            if row["status"] == rules.STOPPED:
                raise PveError(f"VM {vmid} not running")
            lines.extend(
                await hibernation.hibernate(conn, ctx.clock.now(), row, ctx.payload["statestorage"])
            )
            return
        if action == "start" and hibernation.is_hibernated(row["config"]):
            lines.extend(await hibernation.resume_from_disk(conn, row))
            row = await _locked_guest(conn, ctx)
        changes = rules.check_transition(kind, vmid, row["status"], action)
        target = rules.TRANSITIONS[action].target
        if changes or action == "reboot":
            started = row["started_at"]
            if target == rules.RUNNING and (row["status"] != rules.PAUSED or action == "reset"):
                started = int(ctx.clock.now())
            if target == rules.STOPPED:
                started = None
            await guest_repo.set_status(conn, vmid, target, started)
        if action == "start" and kind == rules.QEMU and cloudinit.has_drive(vmid, row["config"]):
            # PVE regenerates the cloud-init drive from the config at every start.
            await agent_repo.set_cloudinit(conn, vmid, cloudinit.values(row["config"]))

    await ctx.complete(effect, lines=lines)


async def destroy(ctx: TaskContext) -> None:
    vmid, kind = ctx.payload["vmid"], ctx.payload["kind"]
    await ctx.sleep(rules.DURATIONS["destroy"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        rules.require_stopped_for_destroy(kind, vmid, row["status"])
        for volume in await inventory.guest_volumes(conn, vmid):
            # A template's base volume stays while a linked clone is based on it.
            if await inventory.linked_child(conn, volume["volid"]) is not None:
                volname = volume["volid"].split(":", 1)[1]
                raise PveError(f"base volume '{volname}' is still in use by linked cloned")
        for volume in await inventory.guest_volumes(conn, vmid):
            # Logged inside the effect's transaction: rolled back with it if the lease is lost.
            await task_repo.append_log(
                conn,
                ctx.row["upid"],
                [f'  Logical volume "{volume["volid"]}" successfully removed.'],
            )
        await inventory.delete_guest_volumes(conn, vmid)
        if ctx.payload.get("purge"):
            await access_repo.delete_path_acl(conn, f"/vms/{vmid}")
            await ha_repo.delete_resource(conn, f"{'vm' if kind == rules.QEMU else 'ct'}:{vmid}")
        # PVE removes the guest's firewall file with the guest.
        await firewall_repo.delete(conn, f"vm/{vmid}")
        # What the resource store keeps for the guest goes with it too.
        await resources_repo.delete_scope(conn, {"vmid": str(vmid)})
        await guest_repo.delete(conn, vmid)

    await ctx.complete(effect)


async def config_update(ctx: TaskContext) -> None:
    changed = ", ".join(ctx.payload.get("changed", [])) or "none"
    await ctx.sleep(rules.DURATIONS["config"])
    await ctx.complete(lines=[f"update VM {ctx.payload['vmid']}: {changed}"])


async def snapshot(ctx: TaskContext) -> None:
    vmid, name = ctx.payload["vmid"], ctx.payload["snapname"]
    await ctx.sleep(rules.DURATIONS["snapshot"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        config = dict(row["config"])
        parent = config.pop("parent", None)
        await guest_repo.insert_snapshot(
            conn,
            vmid=vmid,
            name=name,
            parent=parent,
            description=ctx.payload.get("description") or "",
            snaptime=int(ctx.clock.now()),
            vmstate=ctx.payload.get("vmstate", False),
            config=config,
        )
        await _set_parent(conn, row, name)

    await ctx.complete(effect, lines=[f"snapshotting '{name}'"])


async def _set_parent(conn, row, parent: str | None) -> None:
    config = dict(row["config"])
    if parent:
        config["parent"] = parent
    else:
        config.pop("parent", None)
    await guest_repo.save_config(conn, row, config)


async def delete_snapshot(ctx: TaskContext) -> None:
    vmid, name = ctx.payload["vmid"], ctx.payload["snapname"]
    await ctx.sleep(rules.DURATIONS["delsnapshot"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        snap = await guest_repo.snapshot(conn, vmid, name)
        if snap is None:
            raise PveError(f"snapshot '{name}' does not exist")
        await guest_repo.delete_snapshot(conn, vmid, name, snap["parent"])
        if row["config"].get("parent") == name:
            await _set_parent(conn, row, snap["parent"])

    await ctx.complete(effect)


async def rollback(ctx: TaskContext) -> None:
    vmid, name, kind = ctx.payload["vmid"], ctx.payload["snapname"], ctx.payload["kind"]
    await ctx.sleep(rules.DURATIONS["rollback"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        snap = await guest_repo.snapshot(conn, vmid, name)
        if snap is None:
            raise PveError(f"snapshot '{name}' does not exist")
        config = {**snap["config"], "parent": name}
        # Memory, cores, sockets and disk sizes come back with the config, and
        # so must every figure derived from them.
        maxmem, maxdisk, cpus = guest_sizing(kind, config)
        await guest_repo.update_config(
            conn,
            vmid=vmid,
            expected_version=row["version"],
            config=config,
            name=str(config.get("name") or config.get("hostname") or row["name"]),
            maxmem=maxmem,
            maxdisk=maxdisk,
            cpus=cpus,
            interfaces=rules.guest_interfaces(kind, config),
            pool=row["pool"],
        )
        status = rules.RUNNING if snap["vmstate"] else rules.STOPPED
        await guest_repo.set_status(
            conn, vmid, status, int(ctx.clock.now()) if status == rules.RUNNING else None
        )

    await ctx.complete(effect)


async def migrate(ctx: TaskContext) -> None:
    vmid, target = ctx.payload["vmid"], ctx.payload["target"]
    await ctx.sleep(rules.DURATIONS["migrate"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        if row["node"] != ctx.payload["source"]:
            raise PveError(f"{rules.noun(ctx.payload['kind'])} {vmid} moved away during migration")
        await guest_repo.move(conn, vmid, target)
        await inventory.move_local_volumes(conn, vmid, target)
        if ctx.payload.get("restart") and row["status"] != rules.STOPPED:
            # Restart mode: shut down here, started again on the target.
            await guest_repo.set_status(conn, vmid, rules.RUNNING, int(ctx.clock.now()))

    who = f"{rules.noun(ctx.payload['kind'])} {vmid}"
    lines = [f"starting migration of {who} to node '{target}'", "migration finished successfully"]
    if ctx.payload.get("restart"):
        lines = [f"shutdown {who} (restart mode)", *lines, f"start {who} on node '{target}'"]
    await ctx.complete(effect, lines=lines)


async def clone(ctx: TaskContext) -> None:
    newid, kind = ctx.payload["vmid"], ctx.payload["kind"]
    await ctx.sleep(rules.DURATIONS["clone"])
    linked = ctx.payload.get("linked", False)
    lines = [
        f"create {'linked' if linked else 'full'} clone of drive(s) from "
        f"{rules.noun(kind)} {ctx.payload['source']}"
    ]

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        config = dict(row["config"])
        if linked:
            disks = await link_disks(
                conn, ctx.clock, kind, row["node"], newid, ctx.payload["disks"]
            )
        else:
            disks = await copy_disks(
                conn,
                ctx.clock,
                kind,
                row["node"],
                newid,
                ctx.payload["disks"],
                ctx.payload["storage"],
            )
        config.update(disks)
        lines.extend(
            await clone_cloudinit(
                conn,
                ctx.clock,
                row["node"],
                newid,
                ctx.payload.get("cloudinit", {}),
                ctx.payload["storage"],
                config,
            )
        )
        config.pop("lock", None)
        await guest_repo.update_config(
            conn,
            vmid=newid,
            expected_version=row["version"],
            config=config,
            name=row["name"],
            maxmem=row["maxmem"],
            maxdisk=await inventory.guest_disk_bytes(conn, newid),
            cpus=row["cpus"],
            interfaces=rules.guest_interfaces(kind, config),
            pool=row["pool"],
        )

    try:
        await ctx.complete(effect, lines=lines)
    except PveError as exc:
        # PVE removes the half-created guest and its new volumes when a clone fails.
        async with ctx.worker.pool.acquire() as conn, conn.transaction():
            await remove_unfinished(conn, newid)
        raise PveError(f"clone failed: {exc.message}") from exc


async def resize_disk(ctx: TaskContext) -> None:
    kind, disk = ctx.payload["kind"], ctx.payload["disk"]
    await ctx.sleep(rules.DURATIONS["resize"])

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        await resize_in_place(conn, kind, row, disk, ctx.payload["size"])

    await ctx.complete(effect, lines=[f"resizing {disk} ({ctx.payload['size']})"])


async def move_disk(ctx: TaskContext) -> None:
    await ctx.sleep(rules.DURATIONS["move"])
    lines: list[str] = []

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        config, moved = await apply_move(conn, ctx.clock, row, ctx.payload)
        lines.extend(moved)
        await store_disk_config(conn, row, config)

    await ctx.complete(effect, lines=lines)


async def make_template(ctx: TaskContext) -> None:
    await ctx.sleep(rules.DURATIONS["template"])

    lines: list[str] = []

    async def effect(conn) -> None:
        row = await _locked_guest(conn, ctx)
        lines.extend(await convert_to_template(conn, ctx.payload["kind"], row["vmid"]))

    await ctx.complete(effect, lines=lines)


async def create_cluster(ctx: TaskContext) -> None:
    await ctx.sleep(1.0)

    async def effect(conn) -> None:
        current = await inventory.cluster(conn)
        if current is not None and current["name"]:
            raise PveError("cluster config '/etc/pve/corosync.conf' already exists")
        await inventory.set_cluster_name(conn, ctx.payload["clustername"])

    await ctx.complete(
        effect, lines=[f"Writing corosync config for '{ctx.payload['clustername']}'"]
    )


async def join_cluster(ctx: TaskContext) -> None:
    """The joining node's worker: its first step is the peer's API, never reachable here."""
    hostname = ctx.payload["hostname"]
    await ctx.log(f"Establishing API connection with host '{hostname}'")
    await ctx.sleep(1.0)
    raise PveError(
        f"unable to connect to '{hostname}': the simulator makes no outgoing connections"
    )


async def store_write(ctx: TaskContext) -> None:
    """A resource-store write that PVE runs as a worker: applied when the task completes."""
    await ctx.sleep(1.0)

    async def effect(conn) -> None:
        await resource_store.apply(conn, ctx.clock.now(), ctx.payload)

    await ctx.complete(effect)


def executors() -> dict[str, Executor]:
    table: dict[str, Executor] = {
        "qmcreate": create_guest,
        "vzcreate": create_guest,
        # A restore allocates the archive's disks like a create (see backup_service).
        "qmrestore": create_guest,
        "vzrestore": create_guest,
        "qmdestroy": destroy,
        "vzdestroy": destroy,
        "qmconfig": config_update,
        "clustercreate": create_cluster,
        "clusterjoin": join_cluster,
        "qmigrate": migrate,
        "vzmigrate": migrate,
        "qmclone": clone,
        "vzclone": clone,
        "qmtemplate": make_template,
        "resize": resize_disk,
        # Store tasks carry PVE-like types derived from their path; the payload
        # names this executor (see TaskWorker._execute).
        resource_store.STORE_EXECUTOR: store_write,
        "qmmove": move_disk,
        "move_volume": move_disk,
        "vzdump": backup_executors.vzdump,
        "prunebackups": backup_executors.prune_backups,
        "imgdel": backup_executors.delete_volume,
        file_restore.DOWNLOAD_TASK: backup_executors.pbs_download,
        "download": node_executors.download,
        oci_registry.PULL_TASK: node_executors.oci_registry_pull,
        "upload": node_executors.upload,
        "srvreload": node_executors.service_action,
        "aptupdate": node_executors.apt_update,
        "srvstart": node_executors.service_action,
        "srvstop": node_executors.service_action,
        "srvrestart": node_executors.service_action,
        "replicate": node_executors.replicate,
        "stopall": node_executors.stop_all,
        "imgcopy": node_executors.copy_volume,
        "startall": node_executors.start_all,
        "migrateall": node_executors.bulk_guests,
        "suspendall": node_executors.bulk_guests,
        "acmeregister": node_executors.acme_register,
        realm_sync_service.SYNC_TASK: node_executors.realm_sync,
        realm_sync_service.DRY_RUN_TASK: node_executors.realm_sync,
        "acmenewcert": node_executors.acme_order,
        "acmerenew": node_executors.acme_order,
        "acmerevoke": node_executors.acme_order,
        **{f"bulk-{a}": node_executors.bulk_guests for a in bulk_guest_service.ACTIONS},
        "reloadnetworkall": node_executors.apply_sdn,
        "cephsetflags": node_executors.set_ceph_flags,
        # Ceph tasks carry PVE's types (cephcreateosd, ...); the payload names this executor.
        ceph_cluster_service.TASK_EXECUTOR: node_executors.ceph_task,
        console_service.GUEST_PROXY_TASK: node_executors.console_proxy,
        console_service.NODE_SHELL_TASK: node_executors.console_proxy,
        remote_migration.EXECUTOR: node_executors.remote_migrate,
        **dict.fromkeys(
            migration_tunnel.TASK_TYPES.values(), node_executors.incoming_migration_tunnel
        ),
    }
    for disk_task in (
        "diskinit",
        "wipedisk",
        "zfscreate",
        "lvmcreate",
        "lvmthincreate",
        "dircreate",
        "zfsremove",
        "lvmremove",
        "lvmthinremove",
        "dirremove",
    ):
        table[disk_task] = node_executors.disk_operation
    for transition in rules.TRANSITIONS.values():
        table[transition.task_type_qemu] = power
        table[transition.task_type_lxc] = power
    for prefix in ("qm", "vz"):
        table[f"{prefix}snapshot"] = snapshot
        table[f"{prefix}delsnapshot"] = delete_snapshot
        table[f"{prefix}rollback"] = rollback
    return table
