"""Disk operations on existing guests: resize, move to another storage, unlink."""

from __future__ import annotations

import re

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import GIB, allocate_disk, load_guest, lock_name
from proxmox_simulator.repositories import backups as backup_repo
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
    await store_disk_config(conn, row, config)


async def store_disk_config(conn, row, config: dict) -> None:
    """The guest's config after a disk change, with its disk total recomputed."""
    await guest_repo.save_config(
        conn, row, config, maxdisk=await inventory.guest_disk_bytes(conn, row["vmid"])
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


# -- move and unlink ---------------------------------------------------------------


def _next_unused(config: dict) -> str:
    index = 0
    while f"unused{index}" in config:
        index += 1
    return f"unused{index}"


def _movable(kind: str, config: dict, disk: str) -> tuple[dict, str]:
    if disk not in config or not (rules.is_disk_key(kind, disk) or disk.startswith("unused")):
        raise PveError(f"disk '{disk}' does not exist")
    first = "file" if kind == rules.QEMU else "volume"
    props = rules.parse_property_string(config[disk], first)
    if props.get("media") == "cdrom":
        raise PveError("you can't move a cdrom")
    return props, props.get(first) or ""


async def move(rt, principal: Principal, kind: str, node: str, vmid: int, params: dict) -> str:
    """``move_disk`` (QEMU) / ``move_volume`` (LXC): copy a disk to another storage."""
    disk = params.get("disk") or params.get("volume")
    target_vmid = params.get("target-vmid")
    if target_vmid is not None and int(target_vmid) != vmid:
        raise PveError("reassigning a disk to another guest is not supported by the simulator")
    storage_name = params.get("storage")
    if not storage_name:
        raise ParameterError({"storage": "property is missing and it is not optional"})
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        if row["config"].get("lock"):
            raise PveError(f"{rules.noun(kind)} is locked ({row['config']['lock']})")
        if kind == rules.LXC and row["status"] != rules.STOPPED:
            raise PveError("cannot move volumes of a running container")
        _props, volid = _movable(kind, row["config"], disk)
        if volid.split(":", 1)[0] == storage_name:
            raise PveError(f"unable to move disk '{disk}' to the storage it is on")
        storage = await inventory.storage(conn, storage_name)
        wanted = "images" if kind == rules.QEMU else "rootdir"
        if storage is None or (storage["nodes"] and node not in storage["nodes"]):
            raise PveError(f"storage '{storage_name}' does not exist")
        if wanted not in storage["content"].split(","):
            raise PveError(f"storage '{storage_name}' does not support {wanted}")
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmmove" if kind == rules.QEMU else "move_volume",
            task_id=str(vmid),
            principal=principal,
            payload={
                "vmid": vmid,
                "kind": kind,
                "disk": disk,
                "storage": storage_name,
                "delete": bool(params.get("delete")),
            },
            lock=lock_name(kind, vmid),
        )


async def apply_move(conn, clock, row, payload: dict) -> tuple[dict, list[str]]:
    """The task's effect: a new volume on the target, the old one freed or kept unused."""
    kind, disk, vmid = payload["kind"], payload["disk"], row["vmid"]
    config = dict(row["config"])
    props, volid = _movable(kind, config, disk)
    first = "file" if kind == rules.QEMU else "volume"
    volume = await inventory.volume(conn, volid)
    if volume is None:
        raise PveError(f"volume '{volid}' does not exist")
    options = {k: v for k, v in props.items() if k not in (first, "size")}
    request = rules.DiskRequest(disk, payload["storage"], volume["size"] / GIB, options)
    config[disk] = await allocate_disk(conn, clock, kind, row["node"], vmid, request)
    lines = [f"moving disk '{volid}' to '{config[disk].split(',', 1)[0]}'"]
    if payload["delete"]:
        await backup_repo.delete_volume(conn, volid)
        lines.append(f"removing old volume '{volid}'")
    else:
        config[_next_unused(config)] = volid
    return config, lines


async def unlink(rt, kind: str, node: str, vmid: int, idlist: str, force: bool) -> None:
    """``PUT .../unlink``: detach disks (they become unusedN) or, with force, free them."""
    keys = [k for k in idlist.replace(";", ",").split(",") if k]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid, for_update=True)
        config = dict(row["config"])
        if config.get("lock"):
            raise PveError(f"{rules.noun(kind)} is locked ({config['lock']})")
        for key in keys:
            if key not in config:
                continue
            _props, volid = _movable(kind, config, key)
            if row["status"] != rules.STOPPED and not key.startswith("unused"):
                raise PveError(f"cannot unlink '{key}' of a running {rules.noun(kind)}")
            del config[key]
            if force or key.startswith("unused"):
                await backup_repo.delete_volume(conn, volid)
            else:
                config[_next_unused(config)] = volid
        await store_disk_config(conn, row, config)
