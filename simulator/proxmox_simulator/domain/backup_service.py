"""vzdump backups, their archives, retention (prune) and /cluster/backup jobs."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import ParameterError, PermissionDenied, PveError
from proxmox_simulator.domain.guest_placement import size_gib
from proxmox_simulator.domain.guest_service import lock_name, require_node
from proxmox_simulator.repositories import backups as backup_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as section_repo
from proxmox_simulator.tasks.service import enqueue

JOBS_FILE = "jobs.cfg"  # the realm-sync jobs' sections (realm_sync_service)

DEFAULT_STORAGE = "local"
# Compressed archives are about a third of the guest's allocated disk bytes.
_COMPRESSION_RATIO = {"0": 1.0, "gzip": 0.4, "lzo": 0.5, "zstd": 0.33}
_EXTENSION = {"0": "", "gzip": ".gz", "lzo": ".lzo", "zstd": ".zst"}
PRUNE_KEYS = (
    "keep-last",
    "keep-hourly",
    "keep-daily",
    "keep-weekly",
    "keep-monthly",
    "keep-yearly",
)
# strftime buckets that make two archives "the same hour/day/..." for retention.
_BUCKETS = {
    "keep-hourly": "%Y-%m-%d %H",
    "keep-daily": "%Y-%m-%d",
    "keep-weekly": "%G-%V",
    "keep-monthly": "%Y-%m",
    "keep-yearly": "%Y",
}
JOB_OPTIONS = frozenset(
    {
        "all",
        "bwlimit",
        "comment",
        "compress",
        "dow",
        "enabled",
        "exclude",
        "mailnotification",
        "mailto",
        "mode",
        "node",
        "notes-template",
        "notification-mode",
        "pool",
        "protected",
        "prune-backups",
        "remove",
        "repeat-missed",
        "schedule",
        "starttime",
        "storage",
        "vmid",
    }
)


def _compress(value) -> str:
    text = str(value if value is not None else "0")
    return "lzo" if text == "1" else text


def archive_name(kind: str, vmid: int, compress: str, epoch: float) -> tuple[str, str]:
    """(file name, format) as vzdump writes them, e.g. vzdump-qemu-100-2026_12_01-08_00_00.vma.zst."""
    stamp = time.strftime("%Y_%m_%d-%H_%M_%S", time.gmtime(epoch))
    base = "vma" if kind == rules.QEMU else "tar"
    fmt = base + _EXTENSION[compress]
    tag = "qemu" if kind == rules.QEMU else "lxc"
    return f"vzdump-{tag}-{vmid}-{stamp}.{fmt}", fmt


def pbs_snapshot_name(kind: str, vmid: int, epoch: float) -> tuple[str, str]:
    """(name under backup/, format) of a PBS snapshot: vm/100/2026-12-01T08:00:00Z."""
    btype = "vm" if kind == rules.QEMU else "ct"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    return f"{btype}/{vmid}/{stamp}", f"pbs-{btype}"


def archive_kind(fmt: str) -> str:
    """qemu or lxc: which guest type an archive of this format holds (vma*, pbs-vm: qemu)."""
    return rules.QEMU if fmt.startswith("vma") or fmt == "pbs-vm" else rules.LXC


def parse_prune(value: str | None) -> dict[str, int]:
    if not value:
        return {}
    out: dict[str, int] = {}
    for part in sections.split_list(str(value).replace(",", " ")):
        key, _, number = part.partition("=")
        if key == "keep-all":
            if number not in ("0", "1"):
                raise ParameterError({"prune-backups": f"invalid keep-all value '{number}'"})
            if number == "1":
                return {"keep-all": 1}
            continue
        if key not in PRUNE_KEYS or not (number.isascii() and number.isdigit()):
            raise ParameterError({"prune-backups": f"invalid retention option '{part}'"})
        out[key] = int(number)
    return out


def prune_marks(archives, retention: dict[str, int]) -> dict[str, str]:
    """volid → keep/remove/protected, newest first, by PVE's retention rules."""
    marks: dict[str, str] = {}
    for row in archives:
        if row["protected"]:
            marks[row["volid"]] = "protected"
    if not retention or retention.get("keep-all"):
        return {r["volid"]: marks.get(r["volid"], "keep") for r in archives}
    candidates = [r for r in archives if r["volid"] not in marks]
    for key in PRUNE_KEYS:
        wanted = retention.get(key)
        if not wanted:
            continue
        seen: set[str] = set()
        for row in candidates:
            bucket = (
                row["volid"]
                if key == "keep-last"
                else time.strftime(_BUCKETS[key], time.gmtime(row["ctime"]))
            )
            if len(seen) >= wanted:
                break
            if row["volid"] in marks:
                seen.add(bucket)  # an archive kept by an earlier rule still fills its bucket
                continue
            if bucket in seen:
                continue
            seen.add(bucket)
            marks[row["volid"]] = "keep"
    return {r["volid"]: marks.get(r["volid"], "remove") for r in archives}


async def _require_backup_storage(conn, storage_name: str, node: str):
    storage = await inventory.storage(conn, storage_name)
    if storage is None or (storage["nodes"] and node not in storage["nodes"]):
        raise PveError(f"storage '{storage_name}' does not exist")
    if "backup" not in storage["content"].split(","):
        raise PveError(f"storage '{storage_name}' does not support backups")
    return storage


async def _selected_guests(conn, node: str | None, params: dict) -> list:
    """The guests a vzdump/job selection names: vmid list, all (minus exclude) or pool."""
    if params.get("all"):
        # A stored job's list is read leniently: what is not a VMID excludes nothing.
        excluded = {
            int(v)
            for v in sections.split_list(params.get("exclude"))
            if v.isascii() and v.isdigit()
        }
        guests = [g for g in await guest_repo.list_all(conn) if g["vmid"] not in excluded]
    elif params.get("pool"):
        guests = list(await guest_repo.list_pool(conn, params["pool"]))
    else:
        vmids = [int(v) for v in sections.split_list(params.get("vmid"))]
        if not vmids:
            raise ParameterError({"vmid": "you need to specify a VMID, 'all' or a pool"})
        guests = []
        for vmid in vmids:
            row = await guest_repo.get(conn, vmid)
            if row is None:
                raise PveError(f"guest {vmid} does not exist")
            guests.append(row)
    guests = [g for g in guests if not g["template"] or params.get("vmid")]
    return [g for g in guests if node is None or g["node"] == node]


async def vzdump(rt, state: AccessState, principal: Principal, node: str, params: dict) -> str:
    """``POST /nodes/{node}/vzdump``: one task backing up the node's selected guests."""
    storage_name = params.get("storage") or DEFAULT_STORAGE
    compress = _compress(params.get("compress"))
    retention = parse_prune(params.get("prune-backups"))
    state.require(principal, f"/storage/{storage_name}", ["Datastore.AllocateSpace"])
    if retention:
        state.require(principal, f"/storage/{storage_name}", ["Datastore.Allocate"])
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        await _require_backup_storage(conn, storage_name, node)
        guests = await _selected_guests(conn, node, params)
        for guest in guests:
            state.require(principal, f"/vms/{guest['vmid']}", ["VM.Backup"])
        if not guests:
            # PVE answers "OK" instead of a UPID when nothing on this node is selected.
            return "OK"
        payload = {
            "guests": [{"vmid": g["vmid"], "kind": g["type"]} for g in guests],
            "storage": storage_name,
            "compress": compress,
            "mode": params.get("mode") or "snapshot",
            "notes": params.get("notes-template") or "",
            "protected": bool(params.get("protected")),
            "retention": retention,
            "remove": params.get("remove", 1) not in (0, "0"),
            "notify": _notification(rt, principal, params),
        }
        single = guests[0] if len(guests) == 1 else None
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="vzdump",
            task_id=str(single["vmid"]) if single else "",
            principal=principal,
            payload=payload,
            lock=lock_name(single["type"], single["vmid"]) if single else None,
        )


def _notification(rt, principal: Principal, params: dict) -> dict | None:
    """How the backup's end is told (vzdump's notification-mode): through the
    notification system (its metadata fields but the hostname, the worker's node), or
    None: by the legacy mail (``mailto`` in mode auto, or legacy-sendmail), or on a
    major without the notification system."""
    job_id = params.get("job-id")
    if job_id is not None and principal.auth_id != "root@pam":
        raise PermissionDenied("only root@pam may set 'job-id'")
    mode = params.get("notification-mode") or "auto"
    if mode == "auto":
        mode = "legacy-sendmail" if params.get("mailto") else "notification-system"
    if not rt.adapter.notification_system or mode != "notification-system":
        return None
    return {"type": "vzdump", **({"job-id": job_id} if job_id else {})}


def render_notes(template: str, guest, node: str, cluster_name: str | None) -> str:
    values = {
        "guestname": guest["name"],
        "node": node,
        "vmid": str(guest["vmid"]),
        "cluster": cluster_name or "",
    }
    for key, value in values.items():
        template = template.replace("{{" + key + "}}", value)
    return template.replace("\\n", "\n")


@dataclass(frozen=True)
class ArchiveWrite:
    volid: str
    size: int
    removed: tuple[str, ...]


async def write_archive(conn, *, node: str, guest, payload: dict, epoch: float) -> ArchiveWrite:
    """Store one guest's archive (space-checked) and apply retention on that storage."""
    storage_name = payload["storage"]
    storage = await _require_backup_storage(conn, storage_name, node)
    if storage["type"] == "pbs":
        # A PBS datastore chunks and zstd-compresses whatever vzdump's compress says.
        name, fmt = pbs_snapshot_name(guest["type"], guest["vmid"], epoch)
        ratio = _COMPRESSION_RATIO["zstd"]
    else:
        name, fmt = archive_name(guest["type"], guest["vmid"], payload["compress"], epoch)
        ratio = _COMPRESSION_RATIO[payload["compress"]]
    disk_bytes = int(await inventory.guest_disk_bytes(conn, guest["vmid"]))
    size = max(1, int(disk_bytes * ratio))
    scope = "" if storage["shared"] else node
    used = (await inventory.storage_used(conn)).get((storage_name, scope), 0)
    if used + size > storage["total"]:
        raise PveError(f"vzdump failed: no space left on storage '{storage_name}'")
    cluster = await inventory.cluster(conn)
    volid = f"{storage_name}:backup/{name}"
    if await inventory.volume(conn, volid) is not None:
        # vzdump names archives to the second; a second archive that second would overwrite.
        raise PveError(f"vzdump failed: archive '{volid}' already exists")
    await backup_repo.insert_archive(
        conn,
        volid=volid,
        storage_name=storage_name,
        node_name=None if storage["shared"] else node,
        vmid=guest["vmid"],
        fmt=fmt,
        size=size,
        ctime=int(epoch),
        notes=render_notes(payload["notes"], guest, node, cluster["name"] if cluster else None),
        protected=payload["protected"],
        config={k: v for k, v in guest["config"].items() if k not in ("lock", "parent")},
    )
    removed: list[str] = []
    if payload["retention"] and payload["remove"]:
        archives = await backup_repo.archives(conn, storage_name, guest["vmid"], node)
        for volid_, mark in prune_marks(archives, payload["retention"]).items():
            if mark == "remove":
                await backup_repo.delete_volume(conn, volid_)
                removed.append(volid_)
    return ArchiveWrite(volid, size, tuple(removed))


# -- prune -------------------------------------------------------------------


async def prune_preview(rt, node: str, storage_name: str, params: dict) -> list[dict]:
    """``GET .../prunebackups``: what a prune with these settings would do."""
    retention = parse_prune(params.get("prune-backups"))
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        await _require_backup_storage(conn, storage_name, node)
        rows = await _archives_by_guest(conn, storage_name, node, params)
    out = []
    for archives in rows.values():
        for row in archives:
            mark = prune_marks(archives, retention)[row["volid"]]
            out.append(
                {
                    "volid": row["volid"],
                    "ctime": row["ctime"],
                    "mark": mark,
                    "type": archive_kind(row["format"]),
                    "vmid": row["vmid"],
                }
            )
    return out


async def prune(rt, principal: Principal, node: str, storage_name: str, params: dict) -> str:
    """``DELETE .../prunebackups``: a task removing what retention does not keep."""
    retention = parse_prune(params.get("prune-backups"))
    if not retention:
        raise ParameterError({"prune-backups": "no retention options given"})
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        await _require_backup_storage(conn, storage_name, node)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="prunebackups",
            task_id=storage_name,
            principal=principal,
            payload={
                "storage": storage_name,
                "retention": retention,
                "vmid": params.get("vmid"),
                "type": params.get("type"),
            },
        )


async def _archives_by_guest(conn, storage_name: str, node: str, params: dict) -> dict:
    volumes = await inventory.volumes(
        conn, storage_name, node, "backup", int(params["vmid"]) if params.get("vmid") else None
    )
    kind = params.get("type")
    grouped: dict[int, list] = {}
    for row in sorted(volumes, key=lambda r: (-r["ctime"], r["volid"])):
        row_kind = archive_kind(row["format"])
        if kind and kind != row_kind:
            continue
        grouped.setdefault(row["vmid"], []).append(row)
    return grouped


async def apply_prune(conn, node: str, payload: dict) -> list[str]:
    grouped = await _archives_by_guest(conn, payload["storage"], node, payload)
    removed = []
    for archives in grouped.values():
        for volid, mark in prune_marks(archives, payload["retention"]).items():
            if mark == "remove":
                await backup_repo.delete_volume(conn, volid)
                removed.append(volid)
    return removed


# -- /cluster/backup jobs ---------------------------------------------------------


def _job_entry(row) -> dict:
    entry = {"id": row["id"], "type": "vzdump", **row["options"]}
    entry.setdefault("enabled", 1)
    return entry


async def list_jobs(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_job_entry(r) for r in await backup_repo.jobs(conn)]


async def _require_job(conn, job_id: str, *, for_update: bool = False):
    row = await backup_repo.job(conn, job_id, for_update=for_update)
    if row is None:
        raise PveError(f"Job '{job_id}' does not exist", status=404)
    return row


async def get_job(rt, job_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        return _job_entry(await _require_job(conn, job_id))


def _check_selection(options: dict) -> None:
    chosen = [k for k in ("vmid", "all", "pool") if options.get(k)]
    if not chosen:
        raise ParameterError({"vmid": "you need to specify a VMID, 'all' or a pool"})
    if len(chosen) > 1:
        raise ParameterError({chosen[1]: f"option conflicts with option '{chosen[0]}'"})
    if options.get("exclude") and not options.get("all"):
        raise ParameterError({"exclude": "option only valid together with option 'all'"})


async def _check_job_refs(conn, options: dict) -> None:
    storage = options.get("storage")
    if storage:
        row = await inventory.storage(conn, storage)
        if row is None:
            raise PveError(f"storage '{storage}' does not exist")
        if "backup" not in row["content"].split(","):
            raise PveError(f"storage '{storage}' does not support backups")
    if options.get("pool") and await inventory.pool(conn, options["pool"]) is None:
        raise PveError(f"pool '{options['pool']}' does not exist")
    if options.get("prune-backups"):
        parse_prune(options["prune-backups"])


async def create_job(rt, params: dict) -> None:
    job_id = params.get("id") or f"backup-{secrets.token_hex(4)}-{secrets.token_hex(2)}"
    options = {k: v for k, v in params.items() if k in JOB_OPTIONS}
    options.setdefault("schedule", "00:00")
    options.setdefault("enabled", 1)
    _check_selection(options)
    async with rt.pool.acquire() as conn, conn.transaction():
        await _check_job_refs(conn, options)
        # jobs.cfg holds the realm-sync jobs too: one ID space for both.
        taken = await section_repo.section(conn, JOBS_FILE, job_id) is not None
        if taken or not await backup_repo.insert_job(conn, job_id, options):
            raise PveError(f"Job '{job_id}' already exists")


async def update_job(rt, job_id: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        # jobs.cfg has no digest in PVE's API; the row lock orders concurrent writers.
        row = await _require_job(conn, job_id, for_update=True)
        options = sections.updated_options(row["options"], params, JOB_OPTIONS)
        _check_selection(options)
        await _check_job_refs(conn, options)
        sections.require_saved(await backup_repo.update_job(conn, job_id, row["version"], options))


async def delete_job(rt, job_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await backup_repo.delete_job(conn, job_id):
            raise PveError(f"Job '{job_id}' does not exist", status=404)


async def included_volumes(rt, job_id: str) -> dict:
    """``GET /cluster/backup/{id}/included_volumes``: guests and which disks vzdump takes."""
    async with rt.pool.acquire() as conn:
        row = await _require_job(conn, job_id)
        guests = await _selected_guests(conn, row["options"].get("node"), row["options"])
        children = []
        for guest in guests:
            volumes = []
            for key, value in sorted(guest["config"].items()):
                if not rules.is_disk_key(guest["type"], key) or "media=cdrom" in str(value):
                    continue
                included = "backup=0" not in str(value)
                volumes.append(
                    {
                        "id": key,
                        "name": str(value).split(",", 1)[0],
                        "included": 1 if included else 0,
                        "reason": "enabled" if included else "disabled",
                    }
                )
            children.append(
                {
                    "id": guest["vmid"],
                    "name": guest["name"],
                    "type": guest["type"],
                    "children": volumes,
                }
            )
    return {"children": children}


async def not_backed_up(rt) -> list[dict]:
    """Guests that no enabled backup job selects."""
    async with rt.pool.acquire() as conn:
        jobs = await backup_repo.jobs(conn)
        covered: set[int] = set()
        for job in jobs:
            if job["options"].get("enabled", 1) in (0, "0"):
                continue
            covered |= {
                g["vmid"]
                for g in await _selected_guests(conn, job["options"].get("node"), job["options"])
            }
        guests = await guest_repo.list_all(conn)
    return [
        {"vmid": g["vmid"], "name": g["name"], "type": g["type"]}
        for g in guests
        if g["vmid"] not in covered and not g["template"]
    ]


async def set_volume_annotations(rt, state, principal, node, storage_name, volume, params) -> None:
    """``PUT .../content/{volume}``: notes and protection of an archive."""
    volid = volume if ":" in volume else f"{storage_name}:{volume}"
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await inventory.volume(conn, volid)
        if row is None or row["storage"] != storage_name:
            raise PveError(f"volume '{volid}' does not exist")
        # PVE: VM.Backup on the owning guest for an archive, Datastore.Allocate otherwise.
        if row["content"] == "backup" and row["vmid"] is not None:
            state.require(principal, f"/vms/{row['vmid']}", ["VM.Backup"])
        else:
            state.require(principal, f"/storage/{storage_name}", ["Datastore.Allocate"])
        if "notes" in params and row["content"] != "backup":
            raise PveError("notes are only supported for backups")
        protected = params.get("protected")
        await backup_repo.set_annotations(
            conn, volid, params.get("notes"), None if protected is None else bool(protected)
        )


async def delete_volume(rt, state, principal, node, storage_name, volume) -> str:
    """``DELETE .../content/{volume}``: a task; protected or referenced volumes stay."""
    volid = volume if ":" in volume else f"{storage_name}:{volume}"
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await inventory.volume(conn, volid)
        if row is None or row["storage"] != storage_name:
            raise PveError(f"volume '{volid}' does not exist")
        if row["content"] == "backup" and row["vmid"] is not None:
            state.require(principal, f"/vms/{row['vmid']}", ["VM.Backup"])
        else:
            state.require(principal, f"/storage/{storage_name}", ["Datastore.Allocate"])
        if row["protected"]:
            raise PveError(f"volume '{volid}' is protected")
        if row["content"] in ("images", "rootdir") and row["vmid"] is not None:
            owner = await guest_repo.get(conn, row["vmid"])
            if owner is not None and any(
                str(v).split(",", 1)[0] == volid for v in owner["config"].values()
            ):
                raise PveError(
                    f"unable to delete '{volid}' - volume is still in use (referenced by VM {row['vmid']})"
                )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="imgdel",
            task_id="",  # PVE forks imgdel without an id
            principal=principal,
            payload={"volid": volid},
        )


# -- restore ------------------------------------------------------------------------


async def archive_for_restore(conn, node: str, volid: str, kind: str):
    """The archive a ``POST /nodes/{node}/{qemu,lxc}`` with ``archive`` restores from."""
    row = await inventory.volume(conn, volid)
    if row is None or row["content"] != "backup" or (row["node"] and row["node"] != node):
        raise PveError(f"volume '{volid}' does not exist")
    held = archive_kind(row["format"])
    if held != kind:
        noun = "VM" if kind == rules.QEMU else "container"
        raise PveError(f"unable to restore {noun} from a {held} archive '{volid}'")
    if row["guest_config"] is None:
        raise PveError(f"archive '{volid}' contains no guest configuration")
    return row


def restored_config(kind: str, archived: dict, storage: str | None) -> dict:
    """The archive's config with every disk turned into a new-volume request.

    The create task then allocates fresh volumes (on ``storage`` if given, else
    where the disk was) of the archived sizes, as qmrestore/pct restore do.
    """
    config = {}
    for key, value in archived.items():
        if not rules.is_disk_key(kind, key):
            config[key] = value
            continue
        first = "file" if kind == rules.QEMU else "volume"
        props = rules.parse_property_string(str(value), first)
        volume = props.pop(first, "")
        if props.get("media") == "cdrom" or ":" not in volume:
            config[key] = value
            continue
        size = props.pop("size", "")
        target = storage or volume.split(":", 1)[0]
        config[key] = rules.format_property_string(
            {first: f"{target}:{size_gib(size) or 1:g}", **props}, first
        )
    return config


async def extract_config(rt, node: str, volid: str) -> str:
    """``GET /nodes/{node}/vzdump/extractconfig``: the archived config file's text."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await inventory.volume(conn, volid)
    if row is None or row["content"] != "backup" or row["guest_config"] is None:
        raise PveError(f"volume '{volid}' does not exist")
    lines = [f"{key}: {value}" for key, value in sorted(row["guest_config"].items())]
    return "\n".join(lines) + "\n"


async def restored_guest_config(rt, kind: str, node: str, vmid: int, volid: str, storage) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        existing = await guest_repo.get(conn, vmid)
        if existing is not None:
            # PVE overwrites only with force=1 on a stopped guest; the simulator
            # does not emulate overwriting, so it refuses every restore onto one.
            raise PveError(
                f"unable to restore {rules.noun(kind)} {vmid} - {rules.noun(kind)} {vmid} already exists"
            )
        archive = await archive_for_restore(conn, node, volid, kind)
    return restored_config(kind, archive["guest_config"], storage)
