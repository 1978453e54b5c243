"""Single-file restore from PBS snapshots: ``GET .../file-restore/{list,download}``.

A PBS snapshot's manifest holds one archive per backed-up disk (QEMU:
``drive-<key>.img.fidx``; LXC: ``root.pxar.didx``) next to blobs
(``qemu-server.conf.blob``/``pct.conf.blob``, ``index.json.blob``). The files
inside are derived from the guest configuration the archive recorded and its
backup time, so two reads of one snapshot always show the same tree.
proxmox-file-restore lists only the ``.pxar.didx``/``.img.fidx`` archives at
``/``; a VM image is browsed as ``<image>/part/<n>/...``.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
import tarfile
import time
import zipfile
from dataclasses import dataclass

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.backup_service import archive_kind
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_placement import size_gib
from proxmox_simulator.domain.guest_service import GIB
from proxmox_simulator.domain.property_strings import STORAGE_ID
from proxmox_simulator.domain.storage_service import node_storage
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

PBS_VOLNAME = r"backup/[^\s_]+/[^\s_]+/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"
DOWNLOAD_TASK = "pbs-download"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK = 128 * 1024


@dataclass(frozen=True)
class Download:
    """Bytes a download endpoint streams back instead of a JSON envelope."""

    data: bytes
    content_type: str = "application/octet-stream"


# -- the snapshot's contents ---------------------------------------------------------


def _hostname(kind: str, config: dict, vmid: int) -> str:
    name = config.get("hostname") if kind == rules.LXC else config.get("name")
    return str(name or f"{'CT' if kind == rules.LXC else 'VM'}{vmid}")


def _interfaces(config: dict) -> bytes:
    lines = ["auto lo", "iface lo inet loopback", ""]
    for key in sorted(k for k in config if k.startswith("net")):
        props = rules.parse_property_string(str(config[key]), "name")
        name = props.get("name") or f"eth{key[3:]}"
        ip = props.get("ip") or "manual"
        method = ip if ip in ("dhcp", "manual") else "static"
        lines.append(f"auto {name}")
        lines.append(f"iface {name} inet {method}")
        if method == "static":
            lines.append(f"\taddress {ip}")
            if props.get("gw"):
                lines.append(f"\tgateway {props['gw']}")
        lines.append("")
    return "\n".join(lines).encode()


def _filesystem(kind: str, config: dict, vmid: int) -> dict:
    """A guest root filesystem as nested dicts (directories) and bytes (files)."""
    host = _hostname(kind, config, vmid)
    ostype = str(config.get("ostype") or ("debian" if kind == rules.LXC else "l26"))
    etc = {
        "hostname": f"{host}\n".encode(),
        "hosts": f"127.0.0.1\tlocalhost\n127.0.1.1\t{host}\n".encode(),
        "os-release": f'ID={ostype}\nPRETTY_NAME="{ostype}"\n'.encode(),
        "network": {"interfaces": _interfaces(config)},
    }
    return {"etc": etc, "root": {}, "var": {"log": {}}}


def _disk_bytes(kind: str, value: str) -> int | None:
    first = "file" if kind == rules.QEMU else "volume"
    props = rules.parse_property_string(str(value), first)
    if props.get("media") == "cdrom" or props.get("backup") in ("0", 0):
        return None
    return int((size_gib(props.get("size", "")) or 0) * GIB)


def archives(kind: str, config: dict, vmid: int) -> dict[str, tuple[int, dict | None]]:
    """Archive file name → (size, filesystem tree or None for a disk without one)."""
    if kind == rules.LXC:
        size = _disk_bytes(kind, config.get("rootfs", "")) or 0
        return {"root.pxar.didx": (size, _filesystem(kind, config, vmid))}
    disks = sorted(k for k in config if rules.is_disk_key(kind, k))
    boot = str(config.get("boot") or "")
    order = [d for d in boot.partition("order=")[2].split(";") if d in disks]
    root_disk = (
        order[0]
        if order
        else next((d for d in disks if not d.startswith(("efidisk", "tpmstate"))), None)
    )
    out: dict[str, tuple[int, dict | None]] = {}
    for key in disks:
        size = _disk_bytes(kind, config[key])
        if size is None:
            continue
        if key.startswith(("efidisk", "tpmstate")):
            tree = None  # no partition table to browse
        else:
            # The boot disk holds the guest's system; data disks an empty filesystem.
            fs = _filesystem(kind, config, vmid) if key == root_disk else {}
            tree = {"part": {"1": fs}}
        out[f"drive-{key}.img.fidx"] = (size, tree)
    return out


# -- paths ---------------------------------------------------------------------------


def _decode(filepath: str) -> bytes:
    try:
        return base64.b64decode(filepath, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PveError(f"Failed base64-decoding path '{filepath}' - {exc}") from None


def _encode(path: str) -> str:
    return base64.b64encode(path.encode()).decode()


def _split(raw: bytes) -> tuple[str, list[str]]:
    """(archive name, components inside it), as proxmox-file-restore parses a path."""
    text = raw.decode("utf-8", "replace").lstrip("/")
    archive, _, rest = text.partition("/")
    if not archive.endswith((".pxar.didx", ".img.fidx")):
        raise PveError(f"'{archive}' is not supported for file-restore")
    return archive, [c for c in rest.split("/") if c]


def _lookup(snapshot: dict, archive: str, parts: list[str]):
    if archive not in snapshot:
        raise PveError(f"manifest does not contain file '{archive}'")
    node = snapshot[archive][1]
    if node is None and archive.endswith(".img.fidx"):
        node = {}
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            where = "/".join([archive, *parts[: depth + 1]])
            raise PveError(f"no such file or directory '/{where}'")
        node = node[part]
    return node


def _entry(path: str, name: str, node, mtime: int, *, virtual: bool) -> dict:
    entry = {"filepath": _encode(path), "text": name}
    if isinstance(node, bytes):
        entry.update({"type": "f", "leaf": 1, "size": len(node), "mtime": mtime})
    else:
        entry.update({"type": "v" if virtual else "d", "leaf": 0})
    return entry


# -- the volume ----------------------------------------------------------------------


def _volid(storage_name: str, volume: str) -> str:
    sid, sep, _ = volume.partition(":")
    if sep and STORAGE_ID.match(sid):
        if sid != storage_name:
            raise ParameterError({"volume": f"storage ID mismatch ({sid} != {storage_name})."})
        return volume
    if volume.startswith("backup/"):
        return f"{storage_name}:{volume}"
    return f"{storage_name}:backup/{volume}"


async def _snapshot(rt, state: AccessState, principal: Principal, node: str, params: dict):
    storage_name = params["storage"]
    volid = _volid(storage_name, params["volume"])
    async with rt.pool.acquire() as conn:
        storage = await node_storage(conn, node, storage_name)
        row = await inventory.volume(conn, volid)
    volname = volid.partition(":")[2]
    # PVE: Datastore.Allocate on the storage, or AllocateSpace there plus VM.Backup on the guest.
    if not state.has(principal, f"/storage/{storage_name}", ["Datastore.Allocate"]):
        if storage["type"] == "pbs" and not _is_pbs_volname(volname):
            raise PveError(f"unable to parse PBS volume name '{volname}'")
        state.require(principal, f"/storage/{storage_name}", ["Datastore.AllocateSpace"])
        owner = row["vmid"] if row is not None else _owner(volname)
        if owner is not None:
            state.require(principal, f"/vms/{owner}", ["VM.Backup"])
    if storage["type"] != "pbs":
        raise ParameterError({"storage": "Only PBS storages supported for file-restore."})
    if not _is_pbs_volname(volname):
        raise PveError(f"unable to parse PBS volume name '{volname}'")
    if row is None or row["storage"] != storage_name or row["content"] != "backup":
        snap = volname.removeprefix("backup/")
        raise PveError(f"unable to open snapshot '{snap}' - snapshot does not exist", status=400)
    kind = archive_kind(row["format"])
    return row, archives(kind, row["guest_config"] or {}, row["vmid"])


def _is_pbs_volname(volname: str) -> bool:
    return re.fullmatch(PBS_VOLNAME, volname) is not None


def _owner(volname: str) -> int | None:
    parts = volname.split("/")
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None


async def list_files(rt, state: AccessState, principal: Principal, node: str, params) -> list:
    row, snapshot = await _snapshot(rt, state, principal, node, params)
    filepath = params.get("filepath") or "/"
    mtime = int(row["ctime"])
    if filepath == "/":
        out = []
        for name, (size, _tree) in snapshot.items():
            entry = {"filepath": _encode(f"/{name}"), "text": name, "size": size, "leaf": 0}
            entry["type"] = "d" if name.endswith(".pxar.didx") else "v"
            out.append(entry)
        return out
    archive, parts = _split(_decode(filepath))
    found = _lookup(snapshot, archive, parts)
    if isinstance(found, bytes):
        raise PveError(f"'/{'/'.join([archive, *parts])}' is not a directory")
    base = "/" + "/".join([archive, *parts])
    # Below a VM image, "part" and the partition numbers are the driver's virtual layers.
    virtual_depth = archive.endswith(".img.fidx") and len(parts) == 0
    partitions = archive.endswith(".img.fidx") and parts == ["part"]
    out = []
    for name in sorted(found):
        child = found[name]
        entry = _entry(f"{base}/{name}", name, child, mtime, virtual=virtual_depth)
        if partitions:
            entry["size"] = snapshot[archive][0]
        out.append(entry)
    return out


async def download(rt, state: AccessState, principal: Principal, node: str, params) -> Download:
    row, snapshot = await _snapshot(rt, state, principal, node, params)
    filepath = params["filepath"]
    raw = _decode(filepath)
    if raw.strip(b"/") == b"":
        raise PveError(f"cannot extract '{filepath}'")
    archive, parts = _split(raw)
    found = _lookup(snapshot, archive, parts)
    await _log_download(rt, principal, node, raw)
    if isinstance(found, bytes):
        return Download(found)
    name = parts[-1] if parts else archive
    mtime = int(row["ctime"])
    if params.get("tar"):
        return Download(zstd_frame(_tar(name, found, mtime)))
    return Download(_zip(name, found, mtime), "application/zip")


async def _log_download(rt, principal: Principal, node: str, raw: bytes) -> None:
    """PVE streams the extraction from a ``pbs-download`` worker task (without an ID)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=DOWNLOAD_TASK,
            task_id="",
            principal=principal,
            payload={"file": raw.decode("utf-8", "replace")},
        )


# -- archives ------------------------------------------------------------------------


def _walk(prefix: str, tree: dict):
    yield prefix, None
    for name in sorted(tree):
        child = tree[name]
        path = f"{prefix}/{name}"
        if isinstance(child, bytes):
            yield path, child
        else:
            yield from _walk(path, child)


def _zip(name: str, tree: dict, mtime: int) -> bytes:
    stamp = time.gmtime(max(mtime, 315532800))[:6]  # zip dates start in 1980
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in _walk(name, tree):
            info = zipfile.ZipInfo(path + ("/" if data is None else ""), stamp)
            archive.writestr(info, data or b"")
    return buf.getvalue()


def _tar(name: str, tree: dict, mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, data in _walk(name, tree):
            info = tarfile.TarInfo(path)
            info.mtime = mtime
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zstd_frame(data: bytes) -> bytes:
    """A valid zstd frame of stored (raw) blocks: any zstd decoder reads it back."""
    # Frame header: 8-byte content size, single segment, no checksum, no dictionary.
    out = [_ZSTD_MAGIC, b"\xe0", struct.pack("<Q", len(data))]
    blocks = [data[i : i + _ZSTD_BLOCK] for i in range(0, len(data), _ZSTD_BLOCK)] or [b""]
    for index, block in enumerate(blocks):
        last = 1 if index == len(blocks) - 1 else 0
        out.append(struct.pack("<I", (len(block) << 3) | last)[:3])  # block type 0: raw
        out.append(block)
    return b"".join(out)
