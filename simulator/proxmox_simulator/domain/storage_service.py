"""storage.cfg management, per-node storage status, volume allocation and downloads."""

from __future__ import annotations

import re

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import GIB, require_node
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import storage_config as storage_repo
from proxmox_simulator.tasks.service import enqueue

TIB = 1024 * GIB
# Content each plugin can hold, its default content, whether it is shared by
# nature, what a section must name, and the capacity the simulator gives it.
PLUGINS: dict[str, dict] = {
    "dir": {
        "content": "images,rootdir,vztmpl,iso,backup,snippets,import",
        "default": "images,rootdir",
        "required": ("path",),
        "capacity": 1 * TIB,
    },
    "btrfs": {
        "content": "images,rootdir,vztmpl,iso,backup,snippets,import",
        "default": "images,rootdir",
        "required": ("path",),
        "capacity": 1 * TIB,
    },
    "nfs": {
        "content": "images,rootdir,vztmpl,iso,backup,snippets,import",
        "default": "images",
        "required": ("server", "export"),
        "shared": True,
        "capacity": 4 * TIB,
    },
    "cifs": {
        "content": "images,rootdir,vztmpl,iso,backup,snippets,import",
        "default": "images",
        "required": ("server", "share"),
        "shared": True,
        "capacity": 4 * TIB,
    },
    "cephfs": {
        "content": "vztmpl,iso,backup,snippets,import",
        "default": "backup",
        "required": (),
        "shared": True,
        "capacity": 8 * TIB,
    },
    "pbs": {
        "content": "backup",
        "default": "backup",
        "required": ("server", "datastore"),
        "shared": True,
        "capacity": 8 * TIB,
    },
    "lvm": {
        "content": "images,rootdir",
        "default": "images,rootdir",
        "required": ("vgname",),
        "capacity": 2 * TIB,
    },
    "lvmthin": {
        "content": "images,rootdir",
        "default": "images,rootdir",
        "required": ("vgname", "thinpool"),
        "capacity": 2 * TIB,
    },
    "zfspool": {
        "content": "images,rootdir",
        "default": "images,rootdir",
        "required": ("pool",),
        "capacity": 2 * TIB,
    },
    "rbd": {
        "content": "images,rootdir",
        "default": "images",
        "required": (),
        "shared": True,
        "capacity": 8 * TIB,
    },
    "iscsi": {
        "content": "images",
        "default": "images",
        "required": ("portal", "target"),
        "shared": True,
        "capacity": 2 * TIB,
    },
    "iscsidirect": {
        "content": "images",
        "default": "images",
        "required": ("portal", "target"),
        "shared": True,
        "capacity": 2 * TIB,
    },
    "zfs": {
        "content": "images",
        "default": "images",
        "required": ("portal", "target", "pool"),
        "shared": True,
        "capacity": 2 * TIB,
    },
    "glusterfs": {
        "content": "images,vztmpl,iso,backup,snippets",
        "default": "images",
        "required": ("server", "volume"),
        "shared": True,
        "capacity": 4 * TIB,
    },
    "esxi": {
        "content": "import",
        "default": "import",
        "required": ("server", "username", "password"),
        "capacity": 1 * TIB,
    },
}
# Options kept in their own columns; everything else declared goes to ``options``.
_COLUMNS = frozenset({"storage", "type", "content", "shared", "path", "nodes", "disable"})
# Secrets PVE keeps outside storage.cfg and never returns.
_SECRETS = frozenset({"password", "encryption-key", "keyring", "master-pubkey"})
_NOT_OPTIONS = frozenset({"digest", "delete"})
_DISK_NAME = re.compile(r"^(?:vm|base)-(\d+)-[A-Za-z0-9_.+-]+$")


def _plugin(kind: str) -> dict:
    plugin = PLUGINS.get(kind)
    if plugin is None:
        raise ParameterError({"type": f"storage type '{kind}' is not supported by the simulator"})
    return plugin


def _content(kind: str, value: str | None) -> str:
    plugin = _plugin(kind)
    if value is None:
        return plugin["default"]
    wanted = sections.split_list(value)
    supported = plugin["content"].split(",")
    for item in wanted:
        if item not in supported:
            raise ParameterError(
                {"content": f"storage type '{kind}' does not support content type '{item}'"}
            )
    if "none" in wanted:
        return ""
    return ",".join(wanted)


async def _check_nodes(conn, spec) -> list[str] | None:
    names = sections.split_list(spec)
    if not names:
        return None
    known = {n["node"] for n in await inventory.nodes(conn)}
    for name in names:
        if name not in known:
            raise ParameterError({"nodes": f"no such node '{name}'"})
    return names


def _digest(row) -> str:
    return sections.digest("storage", row["storage"], row["version"])


def render_config(row) -> dict:
    entry = {
        "storage": row["storage"],
        "type": row["type"],
        "content": row["content"],
        **{k: v for k, v in row["options"].items() if k not in _SECRETS},
        "digest": _digest(row),
    }
    if row["shared"]:
        entry["shared"] = 1
    if row["path"]:
        entry["path"] = row["path"]
    if row["nodes"]:
        entry["nodes"] = ",".join(row["nodes"])
    if not row["enabled"]:
        entry["disable"] = 1
    return entry


async def get_storage(rt, state: AccessState, principal: Principal, storage_name: str) -> dict:
    state.require(principal, f"/storage/{storage_name}", ["Datastore.Allocate"])
    async with rt.pool.acquire() as conn:
        row = await inventory.storage(conn, storage_name)
    if row is None:
        raise PveError(f"storage '{storage_name}' does not exist")
    return render_config(row)


async def create_storage(rt, params: dict, declared: set[str]) -> dict:
    kind = params["type"]
    plugin = _plugin(kind)
    for key in plugin["required"]:
        if not params.get(key):
            raise ParameterError({key: "property is missing and it is not optional"})
    content = _content(kind, params.get("content"))
    options = {
        k: v for k, v in params.items() if k in declared and k not in _COLUMNS | _NOT_OPTIONS
    }
    shared = bool(params.get("shared", plugin.get("shared", False)))
    async with rt.pool.acquire() as conn, conn.transaction():
        nodes = await _check_nodes(conn, params.get("nodes"))
        created = await storage_repo.insert(
            conn,
            storage=params["storage"],
            type=kind,
            content=content,
            shared=shared,
            path=params.get("path"),
            nodes=nodes,
            total=plugin["capacity"],
            enabled=not params.get("disable"),
            options=options,
        )
        if not created:
            raise PveError(f"storage ID '{params['storage']}' already defined")
    return {"storage": params["storage"], "type": kind}


async def update_storage(rt, storage_name: str, params: dict, declared: set[str]) -> dict:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await storage_repo.lock(conn, storage_name)
        if row is None:
            raise PveError(f"storage '{storage_name}' does not exist")
        sections.check_digest(params.get("digest"), _digest(row))
        settable = frozenset(declared) - _NOT_OPTIONS - {"storage"}
        current = {
            **row["options"],
            "content": row["content"],
            **({"shared": 1} if row["shared"] else {}),
            **({"path": row["path"]} if row["path"] else {}),
            **({"nodes": ",".join(row["nodes"])} if row["nodes"] else {}),
            **({} if row["enabled"] else {"disable": 1}),
        }
        merged = sections.updated_options(current, params, settable)
        content = _content(row["type"], merged.get("content", _plugin(row["type"])["default"]))
        nodes = await _check_nodes(conn, merged.get("nodes"))
        sections.require_saved(
            await storage_repo.update(
                conn,
                storage_name,
                row["version"],
                content=content,
                shared=bool(merged.get("shared")),
                path=merged.get("path") or row["path"],
                nodes=nodes,
                enabled=not merged.get("disable"),
                options={k: v for k, v in merged.items() if k not in _COLUMNS},
            )
        )
    return {"storage": storage_name, "type": row["type"]}


async def delete_storage(rt, storage_name: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await storage_repo.lock(conn, storage_name)
        if row is None:
            raise PveError(f"storage '{storage_name}' does not exist")
        # PVE only drops the section; here volumes live in the storage's rows,
        # so removing a storage that still holds guest disks would orphan guests.
        if await storage_repo.guest_volume_count(conn, storage_name):
            raise PveError(f"storage '{storage_name}' still holds guest volumes")
        await storage_repo.delete(conn, storage_name)


async def add_ceph_pool_storage(conn, storage_id: str, pool: str) -> None:
    """pveceph's ``add_storages``: an RBD storage of the cluster's own Ceph for VM and CT
    disks on the pool (no ``monhost``: pveceph manages it)."""
    created = await storage_repo.insert(
        conn,
        storage=storage_id,
        type="rbd",
        content=_content("rbd", "rootdir,images"),
        shared=True,
        path=None,
        nodes=None,
        total=_plugin("rbd")["capacity"],
        enabled=True,
        options={"pool": pool, "krbd": 0},
    )
    if not created:
        raise PveError(f"storage ID '{storage_id}' already defined")


async def ceph_pool_storages(conn, pool: str) -> dict[str, dict]:
    """RBD storages on the pool (an RBD storage without ``pool`` uses ``rbd``), with
    whether pveceph manages them and how many guest volumes they hold."""
    out = {}
    for row in await inventory.storages(conn):
        if row["type"] != "rbd" or (row["options"] or {}).get("pool", "rbd") != pool:
            continue
        out[row["storage"]] = {
            "managed": not (row["options"] or {}).get("monhost"),
            "volumes": await storage_repo.guest_volume_count(conn, row["storage"]),
        }
    return out


async def remove_storage(conn, storage_name: str) -> None:
    await storage_repo.delete(conn, storage_name)


async def node_storage(conn, node: str, storage_name: str):
    await require_node(conn, node)
    storage = await inventory.storage(conn, storage_name)
    if storage is None or (storage["nodes"] and node not in storage["nodes"]):
        raise PveError(f"storage '{storage_name}' does not exist")
    return storage


async def identity(rt, node: str, storage_name: str) -> dict:
    """``GET .../identity`` (9.x): which storage.cfg entry, of which plugin type, this is."""
    async with rt.pool.acquire() as conn:
        storage = await node_storage(conn, node, storage_name)
    return {"id": storage["storage"], "type": storage["type"]}


async def status(rt, node: str, storage_name: str) -> dict:
    async with rt.pool.acquire() as conn:
        storage = await node_storage(conn, node, storage_name)
        used = (await inventory.storage_used(conn)).get(
            (storage_name, "" if storage["shared"] else node), 0
        )
    enabled = storage["enabled"]
    return {
        "type": storage["type"],
        "content": storage["content"],
        "shared": 1 if storage["shared"] else 0,
        "enabled": 1 if enabled else 0,
        "active": 1 if enabled else 0,
        "total": storage["total"] if enabled else 0,
        "used": used if enabled else 0,
        "avail": storage["total"] - used if enabled else 0,
    }


def _size_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", str(text).strip())
    if not match:
        raise ParameterError({"size": "unable to parse size (expected <number>[KMGT])"})
    factor = {"": 1024, "K": 1024, "M": 1024**2, "G": GIB, "T": TIB}[match.group(2)]
    return int(float(match.group(1)) * factor)


async def reserve(conn, storage, node: str, size: int) -> None:
    used = (await inventory.storage_used(conn)).get(
        (storage["storage"], "" if storage["shared"] else node), 0
    )
    if used + size > storage["total"]:
        raise PveError(f"not enough space on storage '{storage['storage']}'")


async def allocate(rt, node: str, storage_name: str, params: dict) -> str:
    """``POST .../content``: allocate a disk image for a guest; answers its volid."""
    vmid = int(params["vmid"])
    filename = params["filename"]
    match = _DISK_NAME.match(filename.rsplit(".", 1)[0] if "." in filename else filename)
    if not match or int(match.group(1)) != vmid:
        raise ParameterError({"filename": f"name '{filename}' does not match vm-{vmid}-*"})
    fmt = params.get("format") or (filename.rsplit(".", 1)[1] if "." in filename else "raw")
    size = _size_bytes(params["size"])
    async with rt.pool.acquire() as conn, conn.transaction():
        storage = await node_storage(conn, node, storage_name)
        if "images" not in storage["content"].split(","):
            raise PveError(f"storage '{storage_name}' does not support disk images")
        volid = f"{storage_name}:{filename}"
        if await inventory.volume(conn, volid) is not None:
            raise PveError(f"volume '{volid}' already exists")
        await reserve(conn, storage, node, size)
        await inventory.insert_volume(
            conn,
            volid=volid,
            storage_name=storage_name,
            node_name=None if storage["shared"] else node,
            vmid=vmid,
            content="images",
            fmt=fmt,
            size=size,
            ctime=int(rt.clock.now()),
        )
    return volid


# Folder of each non-image content type in a volume name (``local:iso/x.iso``).
_CONTENT_FOLDERS = {
    "iso": "iso",
    "vztmpl": "vztmpl",
    "backup": "dump",
    "snippets": "snippets",
    "import": "import",
}


def _real_volume_id(field: str, storage_name: str | None, volume: str) -> str:
    """PVE's rule: a full volume ID must name the path's storage; a bare name gets it."""
    if ":" in volume:
        sid = volume.split(":", 1)[0]
        if storage_name and sid != storage_name:
            raise ParameterError({field: f"storage ID mismatch ({sid} != {storage_name})"})
        return volume
    if not storage_name:
        raise ParameterError({field: "no storage specified"})
    return f"{storage_name}:{volume}"


def _copy_target_name(source, name: str) -> tuple[int | None, str]:
    """The copy's owner VMID and format from its name, which must fit the source's content."""
    content = source["content"]
    if content in ("images", "rootdir"):
        base = name.rsplit("/", 1)[-1]
        stem, dot, ext = base.rpartition(".")
        match = _DISK_NAME.match(stem if dot else base)
        if not match:
            raise ParameterError({"target": f"unable to parse volume name '{name}'"})
        return int(match.group(1)), (ext if dot else source["format"])
    folder = _CONTENT_FOLDERS.get(content)
    prefix, slash, filename = name.partition("/")
    if not slash or prefix != folder or "/" in filename or filename.startswith("."):
        raise ParameterError(
            {"target": f"a copy of a '{content}' volume must be named '{folder}/<file>'"}
        )
    return source["vmid"], source["format"]


async def copy_volume(rt, state: AccessState, principal: Principal, node: str, params) -> str:
    """``POST …/content/{volume}``: copy a volume (an ``imgcopy`` task; space-checked)."""
    storage_name = params.get("storage")
    source_id = _real_volume_id("volume", storage_name, params["volume"])
    target_id = _real_volume_id("target", storage_name, params["target"])
    target_node = params.get("target_node") or node
    async with rt.pool.acquire() as conn, conn.transaction():
        source_storage = await node_storage(conn, node, source_id.split(":", 1)[0])
        source = await inventory.volume(conn, source_id)
        if source is None or (source["node"] is not None and source["node"] != node):
            raise PveError(f"volume '{source_id}' does not exist")
        target_storage = await node_storage(conn, target_node, target_id.split(":", 1)[0])
        if source["content"] not in target_storage["content"].split(","):
            raise PveError(
                f"storage '{target_storage['storage']}' does not support content type "
                f"'{source['content']}'"
            )
        if target_storage["storage"] == source_storage["storage"] and target_id == source_id:
            raise ParameterError({"target": "source and target volume are the same"})
        if await inventory.volume(conn, target_id) is not None:
            raise PveError(f"volume '{target_id}' already exists")
        vmid, fmt = _copy_target_name(source, target_id.split(":", 1)[1])
        await reserve(conn, target_storage, target_node, source["size"])
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="imgcopy",
            task_id="",
            principal=principal,
            payload={
                "source": source_id,
                "volid": target_id,
                "storage": target_storage["storage"],
                "node": None if target_storage["shared"] else target_node,
                "vmid": vmid,
                "format": fmt,
            },
        )


async def finish_copy(conn, now: int, payload: dict) -> str:
    """The copy appears when its task completes; space and the name are checked again."""
    source = await inventory.volume(conn, payload["source"])
    if source is None:
        raise PveError(f"volume '{payload['source']}' does not exist")
    if await inventory.volume(conn, payload["volid"]) is not None:
        raise PveError(f"volume '{payload['volid']}' already exists")
    storage = await inventory.storage(conn, payload["storage"])
    if storage is None:
        raise PveError(f"storage '{payload['storage']}' does not exist")
    await reserve(conn, storage, payload["node"] or "", source["size"])
    await inventory.copy_volume(
        conn,
        source["volid"],
        volid=payload["volid"],
        storage_name=payload["storage"],
        node_name=payload["node"],
        vmid=payload["vmid"],
        fmt=payload["format"],
        ctime=now,
    )
    return f"copied {source['volid']} to {payload['volid']} ({source['size']} bytes)"
