"""Task executors for vzdump, prune and volume removal."""

from __future__ import annotations

from proxmox_simulator.domain import backup_service, notification_service, notify
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import backups as backup_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.worker import TaskContext

# Simulated seconds per guest archive (snapshot mode; stop mode also stops and starts).
_BACKUP_SECONDS = 5.0


async def vzdump(ctx: TaskContext) -> None:
    payload = ctx.payload
    node = ctx.row["node"]
    guests = payload["guests"]
    await ctx.log(
        f"INFO: starting new backup job: vzdump {' '.join(str(g['vmid']) for g in guests)}"
        f" --storage {payload['storage']} --mode {payload['mode']}"
        + (f" --compress {payload['compress']}" if payload["compress"] != "0" else "")
    )
    await ctx.sleep(_BACKUP_SECONDS * len(guests))
    upid = ctx.row["upid"]
    written: list[tuple[dict, backup_service.ArchiveWrite]] = []

    async def effect(conn) -> None:
        # All archives commit with the task: a lost lease leaves no half-written job.
        for index, wanted in enumerate(guests):
            guest = await guest_repo.get(conn, wanted["vmid"], for_update=True)
            if guest is None or guest["node"] != node:
                raise PveError(f"guest {wanted['vmid']} is no longer on node '{node}'")
            epoch = ctx.row["starttime"] + index * _BACKUP_SECONDS
            noun = "VM" if guest["type"] == rules.QEMU else "CT"
            result = await backup_service.write_archive(
                conn, node=node, guest=guest, payload=payload, epoch=epoch
            )
            written.append((dict(guest), result))
            lines = [
                f"INFO: Starting Backup of VM {guest['vmid']} ({guest['type']})",
                f"INFO: {noun} Name: {guest['name']}",
                f"INFO: creating vzdump archive '{result.volid}'",
                f"INFO: archive file size: {result.size}",
            ]
            lines += [f"INFO: removing backup '{volid}'" for volid in result.removed]
            lines.append(f"INFO: Finished Backup of VM {guest['vmid']} (00:00:05)")
            await task_repo.append_log(conn, upid, lines)

    try:
        await ctx.complete(effect, lines=["INFO: Backup job finished successfully"])
    except PveError as exc:
        # The effect rolled back: no archive of this job exists.
        await _notify_backup(ctx, [], exc.message)
        raise
    await _notify_backup(ctx, written, None)


async def _notify_backup(ctx: TaskContext, written: list, error: str | None) -> None:
    """vzdump's notification at the job's end (PVE 8.1+): severity error when the job
    failed, fields type=vzdump, hostname (the node) and job-id when a job started it."""
    fields = ctx.payload.get("notify")
    if fields is None:
        return
    node = ctx.row["node"]
    status = "backup failed" if error else "backup successful"
    rows = [
        f"{guest['vmid']:<6} {guest['name']:<20} ok     00:00:05  {result.size:>14}  "
        f"{result.volid.split('/')[-1]}"
        for guest, result in written
    ]
    if error:
        rows += [
            f"{g['vmid']:<6} {'':<20} err    00:00:00  {0:>14}  -" for g in ctx.payload["guests"]
        ]
    total = sum(result.size for _guest, result in written)
    message = "\n".join(
        [
            *([f"Error: {error}", ""] if error else []),
            "Details",
            "=======",
            f"{'VMID':<6} {'Name':<20} Status Time      {'Size':>14}  Filename",
            *rows,
            "",
            "Summary",
            "=======",
            f"Total running time: {int(_BACKUP_SECONDS * len(written))}s",
            f"Total size: {total}",
        ]
    )
    note = notify.Notification(
        severity="error" if error else "info",
        title=f"vzdump backup status ({node}): {status}",
        message=message,
        timestamp=int(ctx.clock.now()),
        fields={**fields, "hostname": node},
    )
    await notification_service.send(ctx.worker.pool, note)


async def prune_backups(ctx: TaskContext) -> None:
    await ctx.sleep(0.5)
    removed: list[str] = []

    async def effect(conn) -> None:
        for volid in await backup_service.apply_prune(conn, ctx.row["node"], ctx.payload):
            removed.append(f"removed '{volid}'")

    # The effect fills ``removed`` before complete() writes the final lines.
    await ctx.complete(effect, lines=removed)


async def delete_volume(ctx: TaskContext) -> None:
    await ctx.sleep(0.5)
    volid = ctx.payload["volid"]

    async def effect(conn) -> None:
        await backup_repo.delete_volume(conn, volid)

    await ctx.complete(effect, lines=[f"Removed volume '{volid}'"])


async def pbs_download(ctx: TaskContext) -> None:
    """The worker of a file-restore download: the bytes went out with the response."""
    await ctx.complete(lines=[f"Starting download of file: {ctx.payload['file']}"])
