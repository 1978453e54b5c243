"""Disk operations on existing guests (resize)."""

from __future__ import annotations

import re

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import GIB, load_guest, lock_name
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

_SIZE = re.compile(r"^(?P<plus>\+)?(?P<number>\d+(?:\.\d+)?)(?P<unit>[KMGT]?)$")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> tuple[bool, int]:
    """``+10G`` → (True, bytes to add); ``50G`` → (False, new size in bytes)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ParameterError({"size": "value does not match the regex pattern"})
    return bool(match["plus"]), int(float(match["number"]) * _UNITS[match["unit"]])


def format_size(size: int) -> str:
    if size % GIB == 0:
        return f"{size // GIB}G"
    return f"{size // (1024**2)}M"


def disk_volume(kind: str, config: dict, disk: str) -> tuple[dict, str]:
    if disk not in config or not rules.is_disk_key(kind, disk):
        raise PveError(f"disk '{disk}' does not exist")
    props = rules.parse_property_string(config[disk], "file" if kind == rules.QEMU else "volume")
    volid = props.get("file") or props.get("volume") or ""
    if props.get("media") == "cdrom":
        raise PveError("you can't resize a cdrom")
    return props, volid


def new_size(current: int, request: str) -> int:
    relative, amount = parse_size(request)
    target = current + amount if relative else amount
    if target < current:
        raise PveError("shrinking disks is not supported")
    return target


async def resize(
    rt, principal: Principal, kind: str, node: str, vmid: int, params: dict, *, as_task: bool
) -> str | None:
    """Grow a disk: as a task where the contract returns its UPID, else inside the call."""
    disk = params["disk"]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        _props, volid = disk_volume(kind, row["config"], disk)
        volume = await inventory.volume(conn, volid)
        if volume is None:
            raise PveError(f"volume '{volid}' does not exist")
        new_size(volume["size"], params["size"])  # refuse shrinking before queueing
        if not as_task:
            locked = await guest_repo.get(conn, vmid, for_update=True)
            await resize_in_place(conn, kind, locked, disk, params["size"])
            return None
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="resize",
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind, "disk": disk, "size": params["size"]},
            lock=lock_name(kind, vmid),
        )


async def resize_in_place(conn, kind: str, row, disk: str, request: str) -> None:
    """Grow the disk and store the guest's new config (the resize's whole effect)."""
    config = dict(row["config"])
    config[disk] = await apply_resize(conn, kind, row, disk, request)
    await guest_repo.update_config(
        conn,
        vmid=row["vmid"],
        expected_version=row["version"],
        config=config,
        name=row["name"],
        maxmem=row["maxmem"],
        maxdisk=await inventory.guest_disk_bytes(conn, row["vmid"]),
        cpus=row["cpus"],
        interfaces=row["interfaces"],
        pool=row["pool"],
    )


async def apply_resize(conn, kind: str, row, disk: str, request: str) -> str:
    """The task's effect: grow the volume and rewrite the disk's ``size=``."""
    props, volid = disk_volume(kind, row["config"], disk)
    volume = await inventory.volume(conn, volid)
    target = new_size(volume["size"], request)
    await inventory.set_volume_size(conn, volid, target)
    props["size"] = format_size(target)
    first = "file" if "file" in props else "volume"
    return rules.format_property_string(props, first)
