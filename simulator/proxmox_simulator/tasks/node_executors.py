"""Task executors for node-level storage and system work: downloads, network reload."""

from __future__ import annotations

from proxmox_simulator.domain import (
    acme_account_service,
    bulk_guest_service,
    ceph_cluster_service,
    ceph_service,
    console_service,
    disk_service,
    migration_tunnel,
    node_power_service,
    node_system_service,
    notification_service,
    notify,
    oci_registry,
    realm_sync_service,
    remote_migration,
    replication_service,
    sdn_service,
    storage_service,
    storage_transfer,
)
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.worker import TaskContext


async def download(ctx: TaskContext) -> None:
    """``download-url``: fetch (loopback only), verify, and the file appears with the task."""
    payload = ctx.payload
    await ctx.log(f"downloading {payload['url']} to {payload['dest']}")
    async with ctx.worker.pool.acquire() as conn:
        if await inventory.volume(conn, payload["volid"]) is not None:
            raise PveError(f"refusing to override existing file '{payload['dest']}'")
    data = await storage_transfer.fetch(payload, ctx.row["pid"], ctx.log)
    await ctx.sleep(1.0)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(
            await storage_transfer.finish_download(conn, int(ctx.clock.now()), payload, data)
        )

    await ctx.complete(effect, lines=lines)


async def oci_registry_pull(ctx: TaskContext) -> None:
    """``ociregistrypull``: skopeo copies the image (loopback registries only) into a .tar."""
    payload = ctx.payload
    command = oci_registry.pull_command(payload, ctx.row["pid"])
    try:
        data = await oci_registry.fetch_image(payload, ctx.log)
    except PveError as exc:
        await ctx.log(f"Error: {exc.message}")
        raise PveError(f"command '{command}' failed: exit code 1") from None
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await oci_registry.finish_pull(conn, int(ctx.clock.now()), payload, data))

    await ctx.complete(effect, lines=lines)


async def upload(ctx: TaskContext) -> None:
    """``upload``'s ``imgcopy``: the uploaded file is checked and copied into place."""
    await ctx.sleep(1.0)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await storage_transfer.finish_upload(conn, int(ctx.clock.now()), ctx.payload))

    await ctx.complete(effect, lines=lines)


async def console_proxy(ctx: TaskContext) -> None:
    """A console proxy holds its port until PVE's connect timeout; no viewer ever connects
    to the simulator (it streams no display), so the proxy then ends as PVE's does."""
    await ctx.log(
        f"starting {ctx.payload.get('console', 'vncproxy')} on port {ctx.payload['console_port']}"
    )
    await ctx.sleep(console_service.CONNECT_TIMEOUT)
    await ctx.complete(lines=["connection timed out, no client connected"])


async def incoming_migration_tunnel(ctx: TaskContext) -> None:
    """``qmtunnel``/``vzmtunnel``: listens for the source's tunnel connection for PVE's five minutes.
    Nothing can connect to the simulator's socket, so it then cleans up as PVE does."""
    await ctx.log("mtunnel started")
    await ctx.sleep(migration_tunnel.ACCEPT_TIMEOUT)

    async def effect(conn) -> None:
        kind = ctx.payload.get("kind", rules.QEMU)
        await migration_tunnel.give_up(conn, kind, int(ctx.payload["vmid"]))

    await ctx.complete(
        effect,
        lines=[
            "Failed to accept tunnel connection - got timeout",
            "Removing tunnel socket..",
            "Removing temporary VM config..",
        ],
        failure=["Exiting mtunnel"],
    )


async def remote_migrate(ctx: TaskContext) -> None:
    """``qmigrate``/``vzmigrate`` to another cluster: reserve the guest there and open its
    tunnel (see remote_migration); the source is unlocked whatever happens."""
    p = ctx.payload
    kind, vmid = p["kind"], int(p["vmid"])
    await ctx.log(
        f"starting migration of {rules.noun(kind)} {vmid} to node '{p['target_node']}' ({p['host']})"
    )
    async with ctx.worker.pool.acquire() as conn:
        row = await guest_repo.get(conn, vmid)
    error = "config vanished" if row is None else None
    if row is not None:
        try:
            await remote_migration.open_remote_tunnel(p, row["config"], ctx.log)
        except PveError as exc:
            error = exc.message

    async def unlock(conn) -> None:
        current = await guest_repo.get(conn, vmid, for_update=True)
        if current is not None and current["config"].get("lock") == "migrate":
            await guest_repo.save_config(
                conn, current, {k: v for k, v in current["config"].items() if k != "lock"}
            )

    await ctx.complete(
        unlock,
        lines=[*(f"ERROR: {line}" for line in error.splitlines()), "ERROR: migration aborted"],
        failure=["migration aborted"],
    )


async def service_action(ctx: TaskContext) -> None:
    """srvstart/srvstop/srvrestart/srvreload; reloading ``networking`` applies interfaces.new."""
    await ctx.sleep(1.0)
    payload = ctx.payload
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(
            await node_system_service.apply_service_action(
                conn,
                payload["node"],
                payload.get("service", "networking"),
                payload.get("action", "reload"),
            )
        )

    await ctx.complete(effect, lines=lines)


async def replicate(ctx: TaskContext) -> None:
    """A replication run; a volume without the replicate feature fails the task.

    The job's run record (last try, fail count, error, log) commits on its own,
    as PVE's replication state file is written whatever the outcome.
    """
    await ctx.sleep(1.0)
    async with ctx.worker.pool.acquire() as conn, conn.transaction():
        log, error = await replication_service.run_job(
            conn, ctx.payload["id"], int(ctx.clock.now())
        )
    await ctx.log(*log)
    if error:
        if ctx.payload.get("notify"):
            await _notify_replication(ctx, log, error)
        raise PveError(error)
    await ctx.complete()


async def _notify_replication(ctx: TaskContext, log: list[str], error: str) -> None:
    """pvesr's notification of a failed run (PVE 8.1+): severity error, fields
    type=replication, job-id and hostname (the node the guest is on)."""
    job_id, node = ctx.payload["id"], ctx.row["node"]
    note = notify.Notification(
        severity="error",
        title=f"Replication Job: {job_id} failed",
        message="\n".join([f"Replication job '{job_id}' failed: {error}", "", *log]),
        timestamp=int(ctx.clock.now()),
        fields={"type": "replication", "job-id": job_id, "hostname": node},
    )
    await notification_service.send(ctx.worker.pool, note)


async def set_ceph_flags(ctx: TaskContext) -> None:
    await ctx.sleep(0.5)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await ceph_service.apply_flags(conn, ctx.payload["flags"]))

    await ctx.complete(effect, lines=lines)


async def ceph_task(ctx: TaskContext) -> None:
    """OSD, pool and service changes of the Ceph cluster, applied when the worker ends."""
    await ctx.sleep(1.0)
    lines: list[str] = []
    failure: list[str] = []

    async def effect(conn) -> None:
        applied, error = await ceph_cluster_service.apply(conn, ctx.payload, ctx.clock.now())
        lines.extend(applied)
        failure.extend([error] if error else [])

    await ctx.complete(effect, lines=lines, failure=failure)


async def apply_sdn(ctx: TaskContext) -> None:
    await ctx.sleep(1.0)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await sdn_service.make_running(conn, ctx.clock.now()))

    await ctx.complete(effect, lines=lines)


async def disk_operation(ctx: TaskContext) -> None:
    """Apply the disk plan the request checked; it is re-planned against the current state."""
    await ctx.sleep(2.0)
    payload = ctx.payload
    lines: list[str] = []

    async def effect(conn) -> None:
        if payload.get("removal"):
            kind, name = payload["removal"]
            plan = await disk_service.plan_removal(
                conn, payload["node"], kind, name, payload["params"]
            )
        else:
            plan = await disk_service.plan(conn, payload["node"], payload["op"], payload["params"])
        lines.extend(await disk_service.apply(conn, payload["node"], plan))

    await ctx.complete(effect, lines=lines)


async def apt_update(ctx: TaskContext) -> None:
    await ctx.sleep(3.0)
    await ctx.complete(
        lines=[
            "starting apt-get update",
            "simulated node: no repository is contacted",
            "Reading package lists...",
            "All packages are up to date.",
        ]
    )


async def stop_all(ctx: TaskContext) -> None:
    """``stopall`` (also pve-guests stopping before a node reboot or shutdown)."""
    await ctx.sleep(3.0)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await node_power_service.stop_guests(conn, ctx.payload))
        lines.extend(await node_power_service.finish_power(conn, ctx.clock, ctx.payload))

    await ctx.complete(effect, lines=lines)


async def start_all(ctx: TaskContext) -> None:
    await ctx.sleep(1.5)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.extend(await node_power_service.start_guests(conn, int(ctx.clock.now()), ctx.payload))

    await ctx.complete(effect, lines=lines)


async def copy_volume(ctx: TaskContext) -> None:
    await ctx.log(f"copying {ctx.payload['source']} to {ctx.payload['volid']}")
    await ctx.sleep(2.0)
    lines: list[str] = []

    async def effect(conn) -> None:
        lines.append(await storage_service.finish_copy(conn, int(ctx.clock.now()), ctx.payload))

    await ctx.complete(effect, lines=lines)


async def bulk_guests(ctx: TaskContext) -> None:
    """bulk-start/-shutdown/-suspend/-migrate and migrateall: one guest task per guest."""
    rt = bulk_guest_service.TaskRuntime(ctx.worker.pool, ctx.clock)
    principal = Principal(ctx.row["userid"], ctx.row["tokenid"])
    sink = bulk_guest_service.Sink(ctx.log, ctx.warn, ctx.sleep)
    error = await bulk_guest_service.run(rt, principal, ctx.payload, sink)
    await ctx.complete(failure=[error] if error else [])


async def acme_register(ctx: TaskContext) -> None:
    """``acmeregister``: the account key is made, the CA is never reached."""
    lines, error = acme_account_service.register_lines(ctx.payload)
    await ctx.log(*lines)
    await ctx.sleep(1.0)
    await ctx.fail(error)


async def acme_order(ctx: TaskContext) -> None:
    """``acmenewcert``/``acmerenew``/``acmerevoke``: PVE's worker stops at the missing
    account file before it would contact the CA."""
    await ctx.sleep(0.5)
    await ctx.fail(acme_account_service.order_error(ctx.payload))


async def realm_sync(ctx: TaskContext) -> None:
    """``auth-realm-sync``/``-test``: PVE's worker fails at the directory server."""
    lines, error = realm_sync_service.sync_lines(ctx.payload)
    await ctx.log(*lines)
    await ctx.sleep(0.5)
    await ctx.fail(error)
