"""A node's physical disks and what is built on them: GPT, ZFS pools, LVM
volume groups and thin pools, directories — optionally added as storage.

Every node has a system disk (``/dev/sda``, used by LVM ``pve``) and three
empty 1 TiB disks.  Operations are tasks; the request checks the plan and
the task applies the same plan, so a disk taken in between fails the task.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import GIB, require_node
from proxmox_simulator.repositories import section_configs as repo
from proxmox_simulator.repositories import storage_config as storage_repo
from proxmox_simulator.tasks.service import enqueue

TIB = 1024 * GIB
_EMPTY = ("/dev/sdb", "/dev/sdc", "/dev/sdd")
# Each node's NVMe disk carries its seeded Ceph OSD (see ceph_cluster_service).
SEED_OSD_DEVICE = "/dev/nvme0n1"
KINDS = {"zfs": "ZFS", "lvm": "LVM", "lvmthin": "LVM-Thin", "directory": "Directory"}
_TASK = {
    "zfs": "zfscreate",
    "lvm": "lvmcreate",
    "lvmthin": "lvmthincreate",
    "directory": "dircreate",
    "initgpt": "diskinit",
    "wipedisk": "wipedisk",
}
_STORAGE = {
    "zfs": ("zfspool", "images,rootdir"),
    "lvm": ("lvm", "images,rootdir"),
    "lvmthin": ("lvmthin", "images,rootdir"),
    "directory": ("dir", "images,rootdir,iso,vztmpl,backup,snippets"),
}
_MIN_DEVICES = {"single": 1, "mirror": 2, "raid10": 4, "raidz": 3, "raidz2": 4, "raidz3": 5}


def seed_osd_id(node_row) -> int:
    """The seeded OSD of a node is numbered after it (pve1 → osd.0)."""
    return int(node_row["nodeid"]) - 1


def _disks_file(node: str) -> str:
    return f"disks/{node}"


def _serial(node: str, devpath: str) -> str:
    return "SIM" + hashlib.sha1(f"{node}{devpath}".encode()).hexdigest()[:12].upper()


async def disks(conn, node_row) -> dict[str, dict]:
    """devpath → disk state (seeded defaults overlaid by what was done to it)."""
    node = node_row["node"]
    out = {
        "/dev/sda": {"size": node_row["maxdisk"], "gpt": 1, "used": "LVM", "model": "SIMDISK SYS"},
        **{d: {"size": TIB, "gpt": 0, "used": None, "model": "SIMDISK DATA"} for d in _EMPTY},
        SEED_OSD_DEVICE: {
            "size": TIB // 2,
            "gpt": 1,
            "used": "LVM",
            "model": "SIMDISK NVME",
            "osdid": seed_osd_id(node_row),
        },
    }
    for row in await repo.sections(conn, _disks_file(node)):
        out[row["id"]] = {**out.get(row["id"], {}), **row["options"]}
    return out


async def _objects(conn, node: str, kind: str) -> dict[str, dict]:
    found = {r["id"]: r["options"] for r in await repo.sections(conn, f"disk-{kind}/{node}")}
    if kind == "lvm":
        found.setdefault("pve", {"devices": ["/dev/sda"], "size": None})
    if kind == "lvmthin":
        found.setdefault("data", {"devices": ["/dev/sda"], "vg": "pve", "size": None})
    return found


async def list_disks(rt, node: str, params: dict) -> list[dict]:
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        state = await disks(conn, node_row)
    out = []
    for devpath, disk in sorted(state.items()):
        used = disk.get("used")
        if params.get("type") == "unused" and used:
            continue
        entry = {
            "devpath": devpath,
            "size": disk["size"] or node_row["maxdisk"],
            "gpt": disk.get("gpt", 0),
            "mounted": 1 if used == "Directory" else 0,
            "osdid": disk["osdid"] if disk.get("osdid") is not None else -1,
            "osdid-list": [disk["osdid"]] if disk.get("osdid") is not None else [],
            "type": "hdd",
            "vendor": "SIM",
            "model": disk["model"],
            "serial": _serial(node, devpath),
            "wwn": "0x5000c500" + hashlib.sha1(devpath.encode()).hexdigest()[:8],
            "rpm": 7200,
            "wearout": "N/A",
            "by_id_link": f"/dev/disk/by-id/ata-{disk['model'].replace(' ', '_')}_{_serial(node, devpath)}",
        }
        if not params.get("skipsmart"):
            entry["health"] = "PASSED"
        if used:
            entry["used"] = used
        out.append(entry)
    return out


async def smart(rt, node: str, disk: str, healthonly: bool) -> dict:
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        state = await disks(conn, node_row)
    if disk not in state:
        raise PveError(f"no such disk '{disk}'")
    if healthonly:
        return {"health": "PASSED"}
    attributes = [
        {
            "id": " 5",
            "name": "Reallocated_Sector_Ct",
            "value": 100,
            "worst": 100,
            "threshold": 10,
            "fail": "-",
            "flags": "PO--CK",
            "raw": "0",
            "normalized": 100,
        },
        {
            "id": "194",
            "name": "Temperature_Celsius",
            "value": 64,
            "worst": 55,
            "threshold": 0,
            "fail": "-",
            "flags": "-O---K",
            "raw": "36",
            "normalized": 64,
        },
    ]
    return {"health": "PASSED", "type": "ata", "attributes": attributes}


@dataclass
class Plan:
    disk_updates: dict[str, dict]
    objects: list[tuple[str, str, dict]]  # (kind, name, options) to create
    storage: dict | None
    removals: list[tuple[str, str]]  # (kind, name)
    storage_removal: str | None = None


def _require_unused(state: dict, devices: list[str]) -> None:
    for device in devices:
        if device not in state:
            raise PveError(f"no such disk '{device}'")
        if state[device].get("used"):
            raise PveError(f"disk '{device}' is already in use ({state[device]['used']})")


async def plan(conn, node: str, op: str, params: dict) -> Plan:
    node_row = await require_node(conn, node)
    state = await disks(conn, node_row)
    if op == "initgpt":
        _require_unused(state, [params["disk"]])
        return Plan({params["disk"]: {"gpt": 1}}, [], None, [])
    if op == "wipedisk":
        device = params["disk"]
        if device not in state:
            raise PveError(f"no such disk '{device}'")
        if state[device].get("used"):
            raise PveError(
                f"disk '{device}' is in use ({state[device]['used']}); remove that first"
            )
        return Plan({device: {"gpt": 0, "used": None}}, [], None, [])
    if op in KINDS:
        name = params["name"]
        devices = sections.split_list(params.get("devices") or params.get("device"))
        _require_unused(state, devices)
        if op == "zfs":
            level = params["raidlevel"]
            if len(devices) < _MIN_DEVICES.get(level, 1):
                raise ParameterError(
                    {"devices": f"{level} needs at least {_MIN_DEVICES[level]} devices"}
                )
        elif len(devices) != 1:
            raise ParameterError({"device": "exactly one device is required"})
        if name in await _objects(conn, node, op):
            raise PveError(f"{KINDS[op]} '{name}' already exists on node '{node}'")
        size = sum(state[d]["size"] for d in devices)
        if op == "zfs" and params["raidlevel"] == "mirror":
            size //= len(devices)
        options = {"devices": devices, "size": size}
        if op == "zfs":
            options["raidlevel"] = params["raidlevel"]
        if op == "directory":
            options["filesystem"] = params.get("filesystem") or "ext4"
        storage = None
        if params.get("add_storage"):
            kind, content = _STORAGE[op]
            storage = {
                "storage": name,
                "type": kind,
                "content": content,
                "shared": False,
                "path": f"/mnt/pve/{name}" if op == "directory" else None,
                "nodes": [node],
                "total": size,
                "enabled": True,
                "options": {"pool": name}
                if op == "zfs"
                else {"vgname": name}
                if op == "lvm"
                else {"vgname": f"{name}", "thinpool": name}
                if op == "lvmthin"
                else {},
            }
        return Plan(
            {d: {"used": KINDS[op], "gpt": 1} for d in devices}, [(op, name, options)], storage, []
        )
    raise ParameterError({"op": f"unknown disk operation '{op}'"})


async def plan_removal(conn, node: str, kind: str, name: str, params: dict) -> Plan:
    await require_node(conn, node)
    objects = await _objects(conn, node, kind)
    if name not in objects or objects[name].get("size") is None:
        raise PveError(
            f"{KINDS[kind]} '{name}' does not exist on node '{node}' (or is the system's)"
        )
    devices = objects[name]["devices"]
    updates = {
        d: {"used": None} if params.get("cleanup-disks") else {"used": "partitions"}
        for d in devices
    }
    return Plan(updates, [], None, [(kind, name)], name if params.get("cleanup-config") else None)


async def apply(conn, node: str, result: Plan) -> list[str]:
    lines = []
    for device, changes in result.disk_updates.items():
        row = await repo.section(conn, _disks_file(node), device, for_update=True)
        options = {**(row["options"] if row else {}), **changes}
        if row is None:
            await repo.insert(conn, _disks_file(node), device, "disk", options)
        else:
            sections.require_saved(
                await repo.update(conn, _disks_file(node), device, row["version"], options)
            )
        lines.append(f"{device}: {', '.join(f'{k}={v}' for k, v in changes.items())}")
    for kind, name, options in result.objects:
        if not await repo.insert(conn, f"disk-{kind}/{node}", name, kind, options):
            raise PveError(f"{KINDS[kind]} '{name}' already exists on node '{node}'")
        lines.append(f"created {KINDS[kind]} '{name}' on {', '.join(options['devices'])}")
    for kind, name in result.removals:
        await repo.delete(conn, f"disk-{kind}/{node}", name)
        lines.append(f"removed {KINDS[kind]} '{name}'")
    if result.storage:
        if not await storage_repo.insert(conn, **result.storage):
            raise PveError(f"storage ID '{result.storage['storage']}' already defined")
        lines.append(f"added storage '{result.storage['storage']}'")
    if result.storage_removal:
        if await storage_repo.guest_volume_count(conn, result.storage_removal):
            raise PveError(f"storage '{result.storage_removal}' still holds guest volumes")
        await storage_repo.delete(conn, result.storage_removal)
    return lines


async def start(
    rt, principal, node: str, op: str, params: dict, *, removal: tuple[str, str] | None = None
) -> str:
    """Check the plan now and queue the task that applies it."""
    async with rt.pool.acquire() as conn, conn.transaction():
        if removal:
            await plan_removal(conn, node, removal[0], removal[1], params)
            task_type = {
                "zfs": "zfsremove",
                "lvm": "lvmremove",
                "lvmthin": "lvmthinremove",
                "directory": "dirremove",
            }[removal[0]]
        else:
            await plan(conn, node, op, params)
            task_type = _TASK.get(op, op)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=task_type,
            # PVE names the worker after the disk's last path component (``sdb``):
            # a ``/`` would end the UPID's path segment.
            task_id=str(params.get("name") or params.get("disk") or "").rsplit("/", 1)[-1],
            principal=principal,
            payload={
                "node": node,
                "op": op,
                "params": params,
                "removal": list(removal) if removal else None,
            },
            lock=f"disks-{node}",
        )


async def list_objects(rt, node: str, kind: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        objects = await _objects(conn, node, kind)
    out = []
    for name, options in sorted(objects.items()):
        size = options.get("size") or node_row["maxdisk"]
        if kind == "zfs":
            out.append(
                {
                    "name": name,
                    "size": size,
                    "alloc": 0,
                    "free": size,
                    "frag": 0,
                    "dedup": 1.0,
                    "health": "ONLINE",
                }
            )
        elif kind == "lvmthin":
            out.append(
                {
                    "lv": name,
                    "vg": options.get("vg", name),
                    "lv_size": size,
                    "used": 0,
                    "metadata_size": size // 100,
                    "metadata_used": 0,
                }
            )
        elif kind == "directory":
            out.append(
                {
                    "path": f"/mnt/pve/{name}",
                    "device": f"{options['devices'][0]}1",
                    "type": options.get("filesystem", "ext4"),
                    "options": "defaults",
                    "unitfile": f"/etc/systemd/system/mnt-pve-{name}.mount",
                }
            )
        else:
            out.append(
                {
                    "name": name,
                    "size": size,
                    "free": size // 8 if name == "pve" else size,
                    "leaf": 0,
                    "children": [
                        {"name": d, "size": size, "free": size, "leaf": 1}
                        for d in options["devices"]
                    ],
                }
            )
    if kind == "lvm":
        return {"leaf": 0, "children": out}
    return out


async def zfs_detail(rt, node: str, name: str) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        objects = await _objects(conn, node, "zfs")
    if name not in objects:
        raise PveError(f"zpool '{name}' does not exist")
    devices = objects[name]["devices"]
    leaves = [
        {
            "name": d.rsplit("/", 1)[-1],
            "state": "ONLINE",
            "read": 0,
            "write": 0,
            "cksum": 0,
            "msg": "",
            "leaf": 1,
        }
        for d in devices
    ]
    return {
        "name": name,
        "state": "ONLINE",
        "errors": "No known data errors",
        "children": [
            {
                "name": name,
                "state": "ONLINE",
                "read": 0,
                "write": 0,
                "cksum": 0,
                "msg": "",
                "children": leaves,
            }
        ],
    }


# -- local storage scans --------------------------------------------------------------


async def scan(rt, node: str, kind: str, vg: str | None = None) -> list[dict]:
    """``GET /nodes/{node}/scan/{lvm,lvmthin,zfs}``: what exists on the node's disks."""
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        if kind == "lvm":
            vgs = await _objects(conn, node, "lvm")
            out = []
            for name, options in sorted(vgs.items()):
                size = options.get("size") or node_row["maxdisk"]
                out.append({"vg": name, "size": size, "free": size // 8 if name == "pve" else size})
            return out
        if kind == "lvmthin":
            pools = await _objects(conn, node, "lvmthin")
            return [{"lv": name} for name, o in sorted(pools.items()) if o.get("vg", name) == vg]
        pools = await _objects(conn, node, "zfs")
        return [{"pool": name} for name in sorted(pools)]
