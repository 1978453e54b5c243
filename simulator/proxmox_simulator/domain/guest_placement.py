"""Moving and copying guests: migrate, clone, convert to template.

Same split as guest_service: PVE's immediate refusals happen here before a
task exists; the state change commits with the task (tasks/executors.py).
"""

from __future__ import annotations

import re

from proxmox_simulator.domain import cloudinit
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import (
    GIB,
    MIB,
    allocate_disk,
    insert_creating_guest,
    load_guest,
    lock_name,
    require_node,
    require_pool,
)
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue


async def migrate(rt, principal: Principal, kind: str, node: str, vmid: int, params: dict) -> str:
    target = params["target"]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        if target == node:
            raise PveError("target is local node.")
        await require_node(conn, target)
        running = row["status"] != rules.STOPPED
        # ``restart`` for QEMU only comes from the HA manager's relocate (the
        # API's QEMU migrate declares no such parameter).
        if running and kind == rules.QEMU and not (params.get("online") or params.get("restart")):
            raise PveError("can't migrate running VM without --online")
        if running and kind == rules.LXC and not params.get("restart"):
            raise PveError("CT is running - use restart mode or stop it first")
        if row["config"].get("lock"):
            raise PveError(f"{rules.noun(kind)} is locked ({row['config']['lock']})")
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmigrate" if kind == rules.QEMU else "vzmigrate",
            task_id=str(vmid),
            principal=principal,
            payload={
                "vmid": vmid,
                "kind": kind,
                "source": node,
                "target": target,
                "restart": bool(running and params.get("restart")),
            },
            lock=lock_name(kind, vmid),
        )


async def clone(rt, principal: Principal, kind: str, node: str, vmid: int, params: dict) -> str:
    newid = int(params["newid"])
    target = params.get("target") or node
    async with rt.pool.acquire() as conn, conn.transaction():
        source = await load_guest(conn, kind, node, vmid)
        await require_node(conn, target)
        storage = params.get("storage")
        # PVE: a template is cloned linked unless full=1; anything else only in full.
        full = params.get("full")
        full = not source["template"] if full is None else bool(full)
        if not full:
            if not source["template"]:
                raise PveError("Linked clone feature is only available for templates")
            if storage:
                raise ParameterError({"storage": "storage is only allowed for full clones"})
            if target != node:
                raise PveError("Linked clone feature for a different target node is not supported")
        if storage and await inventory.storage(conn, storage) is None:
            raise ParameterError({"storage": f"storage '{storage}' does not exist"})
        pool = params.get("pool")
        if pool:
            await require_pool(conn, pool)
        # The copy starts as the source's config without identity (MACs, disks)
        # and is never a template itself; CD-ROM drives are copied as they are.
        config = {
            k: v
            for k, v in source["config"].items()
            if (not rules.is_disk_key(kind, k) or _is_plain_cdrom(vmid, v))
            and k not in ("lock", "parent", "vmgenid", "smbios1", "template")
        }
        ci_drives = {
            k: v
            for k, v in source["config"].items()
            if kind == rules.QEMU and rules.is_disk_key(kind, k) and cloudinit.is_drive(vmid, v)
        }
        name_key = "name" if kind == rules.QEMU else "hostname"
        name = params.get("name") or params.get("hostname") or f"Copy-of-{source['name'] or vmid}"
        config[name_key] = name
        if params.get("description") is not None:
            config["description"] = params["description"]
        config = _without_macs(kind, config)
        config = rules.ensure_macs(kind, newid, config)
        await insert_creating_guest(
            conn,
            kind=kind,
            vmid=newid,
            node=target,
            name=name,
            pool=pool,
            config=config,
            maxmem=source["maxmem"],
            cpus=source["cpus"],
        )
        disks = {
            k: v
            for k, v in source["config"].items()
            if rules.is_disk_key(kind, k) and "media=cdrom" not in str(v)
        }
        if not full:
            await _require_linkable(conn, kind, disks)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmclone" if kind == rules.QEMU else "vzclone",
            task_id=str(vmid),
            principal=principal,
            payload={
                "vmid": newid,
                "source": vmid,
                "kind": kind,
                "target": target,
                "disks": disks,
                "cloudinit": ci_drives,
                "storage": storage,
                "linked": not full,
            },
            lock=lock_name(kind, newid),
        )


def _is_plain_cdrom(vmid: int, value) -> bool:
    return "media=cdrom" in str(value) and not cloudinit.is_drive(vmid, value)


# Storages whose volumes can be linked-cloned (PVE's volume_has_feature 'clone');
# on file storages only qcow2 images can.
LINKABLE_TYPES = frozenset({"lvmthin", "zfspool", "rbd", "zfs", "btrfs"})


async def _require_linkable(conn, kind: str, disks: dict) -> None:
    first = "file" if kind == rules.QEMU else "volume"
    for key, value in sorted(disks.items()):
        volid = rules.parse_property_string(str(value), first).get(first, "")
        storage = await inventory.storage(conn, volid.partition(":")[0])
        linkable = storage is not None and (
            storage["type"] in LINKABLE_TYPES or volid.endswith(".qcow2")
        )
        # The storages' 'clone' feature exists only for base volumes: a guest
        # flagged a template at create keeps its vm-N-disk-M volumes.
        if not linkable or not _is_base_volume(volid):
            raise PveError(f"Linked clone feature is not supported for drive '{key}'")


def _is_base_volume(volid: str) -> bool:
    """``store:base-N-disk-M`` or a dir storage's ``store:N/base-N-disk-M.qcow2``."""
    return volid.partition(":")[2].rpartition("/")[2].startswith("base-")


async def clone_cloudinit(
    conn, clock, node: str, newid: int, drives: dict, storage: str | None, config: dict
) -> list[str]:
    """A clone always gets its own, new cloud-init volume (never linked)."""
    lines = []
    for key, value in sorted(drives.items()):
        props = rules.parse_property_string(str(value), "file")
        target = storage or props.pop("file").partition(":")[0]
        props.pop("file", None)
        props.pop("media", None)
        config[key] = rules.format_property_string({"file": f"{target}:cloudinit", **props}, "file")
        config[key] = await cloudinit.allocate(conn, clock, node, newid, config, key)
        lines.append(f"{key}: successfully created disk '{config[key]}'")
    return lines


async def remove_unfinished(conn, vmid: int) -> bool:
    """Drop a guest whose create/clone failed before it existed (still locked ``create``).

    The volumes the failed task allocated were rolled back with its effect; volumes
    that already carried the VMID are not the task's and stay.
    """
    row = await guest_repo.get(conn, vmid, for_update=True)
    if row is None or row["config"].get("lock") != "create":
        return False
    await guest_repo.delete(conn, vmid)
    return True


def _without_macs(kind: str, config: dict) -> dict:
    out = dict(config)
    for key, value in config.items():
        if not rules.NET_KEY.match(key):
            continue
        props = rules.parse_property_string(value, "model" if kind == rules.QEMU else None)
        if kind == rules.QEMU:
            model = next((k for k in props if k in rules.NIC_MODELS), props.get("model", "virtio"))
            rest = {k: v for k, v in props.items() if k not in ("model", model, "macaddr")}
            out[key] = rules.format_property_string({"model": model, **rest}, "model")
        else:
            props.pop("hwaddr", None)
            out[key] = rules.format_property_string(props)
    return out


async def copy_disks(
    conn, clock, kind: str, node: str, newid: int, disks: dict, storage: str | None
) -> dict:
    """Allocate one new volume per source disk (a full clone) and return the config entries."""
    entries = {}
    for key, value in sorted(disks.items()):
        props = rules.parse_property_string(value, "file" if kind == rules.QEMU else "volume")
        volid = props.pop("file", None) or props.pop("volume", None) or ""
        size_text = props.pop("size", "0G")
        gib = size_gib(size_text)
        request = rules.DiskRequest(key, storage or volid.split(":", 1)[0], gib, props)
        entries[key] = await allocate_disk(conn, clock, kind, node, newid, request)
    return entries


async def link_disks(conn, clock, kind: str, node: str, newid: int, disks: dict) -> dict:
    """A linked clone: each new volume is a thin child of the template's base volume."""
    entries = {}
    for index, (key, value) in enumerate(sorted(disks.items())):
        props = rules.parse_property_string(value, "file" if kind == rules.QEMU else "volume")
        base = props.pop("file", None) or props.pop("volume", None) or ""
        storage_name, _, base_name = base.partition(":")
        source = await inventory.volume(conn, base)
        if source is None:
            raise PveError(f"base volume '{base}' does not exist")
        volid = f"{storage_name}:{base_name}/vm-{newid}-disk-{index}"
        await inventory.insert_volume(
            conn,
            volid=volid,
            storage_name=storage_name,
            node_name=source["node"],
            vmid=newid,
            content=source["content"],
            fmt=source["format"],
            size=source["size"],
            ctime=int(clock.now()),
        )
        first = "file" if kind == rules.QEMU else "volume"
        entries[key] = rules.format_property_string({first: volid, **props}, first)
    return entries


def size_gib(text: str) -> float:
    if text.endswith("T"):
        return float(text[:-1]) * 1024
    if text.endswith("G"):
        return float(text[:-1])
    if text.endswith("M"):
        return float(text[:-1]) * MIB / GIB
    return float(text or 0) / GIB


async def template(
    rt, principal: Principal, kind: str, node: str, vmid: int, *, as_task: bool
) -> str | None:
    """Convert to a template: as a task where the contract returns its UPID, else in the call."""
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        if row["status"] != rules.STOPPED:
            raise PveError(f"you can't convert a running {rules.noun(kind)} to a template")
        if row["template"]:
            raise PveError(f"{rules.noun(kind)} {vmid} is already a template")
        if not as_task:
            await convert_to_template(conn, kind, vmid)
            return None
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmtemplate",
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind},
            lock=lock_name(kind, vmid),
        )


async def migrate_preconditions(rt, kind: str, node: str, vmid: int, target: str | None) -> dict:
    """``GET .../migrate``: where the guest may go and what ties it to its node.

    A node is allowed when every storage holding the guest's disks is available
    there (shared, or configured for that node); disks on non-shared storage
    are reported as local disks (they are copied by a migration).
    """
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
        if target is not None:
            await require_node(conn, target)
        storages = {s["storage"]: s for s in await inventory.storages(conn)}
        volumes = await inventory.guest_volumes(conn, vmid)
        nodes = [n["node"] for n in await inventory.nodes(conn) if n["node"] != node]
    used = {v["volid"].split(":", 1)[0] for v in volumes}
    allowed, not_allowed = [], {}
    for candidate in nodes:
        missing = sorted(
            s
            for s in used
            if s in storages
            and storages[s]["nodes"] is not None
            and candidate not in storages[s]["nodes"]
        )
        if missing:
            not_allowed[candidate] = {"unavailable_storages": missing}
        else:
            allowed.append(candidate)
    running = row["status"] != rules.STOPPED
    answer = {"running": 1 if running else 0, "allowed_nodes": allowed}
    if not_allowed:
        answer["not_allowed_nodes"] = not_allowed
    if kind == rules.QEMU:
        answer["local_disks"] = [
            {"volid": v["volid"], "size": v["size"], "cdrom": 0, "is_unused": 0}
            for v in volumes
            if not storages.get(v["volid"].split(":", 1)[0], {"shared": True})["shared"]
        ]
        local, mapped = _passthrough(row["config"] or {})
        answer["local_resources"] = local
        answer.update(rt.adapter.qemu_migrate_extras(mapped))
    return answer


_PASSTHROUGH = re.compile(r"^(?:hostpci|usb)\d+$")


def _passthrough(config: dict) -> tuple[list[str], list[str]]:
    """A guest's host devices: (pinned to this node, through a cluster resource mapping).
    A SPICE USB port is no host device."""
    local, mapped = [], []
    for key in sorted(config):
        if not _PASSTHROUGH.match(key):
            continue
        options = rules.parse_property_string(config[key], "host")
        if options.get("host") == "spice":
            continue
        (mapped if "mapping" in options else local).append(key)
    return local, mapped


def _base_name(volid: str, vmid: int) -> str:
    storage, _, volname = volid.partition(":")
    return f"{storage}:{volname.replace(f'vm-{vmid}-disk-', f'base-{vmid}-disk-', 1)}"


async def convert_to_template(conn, kind: str, vmid: int) -> list[str]:
    """PVE's template_create: each disk becomes a read-only base volume
    (``vm-N-disk-M`` → ``base-N-disk-M``); CD-ROM and cloud-init drives stay."""
    row = await guest_repo.get(conn, vmid, for_update=True)
    if row["status"] != rules.STOPPED:
        raise PveError(f"you can't convert a running {rules.noun(kind)} to a template")
    config = dict(row["config"])
    first = "file" if kind == rules.QEMU else "volume"
    lines = []
    for key in sorted(config):
        value = str(config[key])
        if not rules.is_disk_key(kind, key) or "media=cdrom" in value:
            continue
        props = rules.parse_property_string(value, first)
        volid = props.get(first, "")
        base = _base_name(volid, vmid)
        if base == volid or await inventory.volume(conn, volid) is None:
            continue
        await inventory.rename_volume(conn, volid, base)
        props[first] = base
        config[key] = rules.format_property_string(props, first)
        lines.append(f"  renamed {volid} to {base}")
    if lines:
        await guest_repo.save_config(conn, row, config)
    await guest_repo.set_template(conn, vmid)
    return lines
