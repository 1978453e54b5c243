"""Files brought onto a storage: ``POST …/upload`` and ``POST …/download-url``.

Both follow pve-storage's API (PVE/API2/Storage/Status.pm): only file-based
storages take them, the content type must be configured on the storage, the
file name is normalized and its extension checked, and the file appears in the
storage's content when the task (``imgcopy`` / ``download``) ends.

The simulator has no network: a download fetches only URLs on a loopback host
(a test server on 127.0.0.1); any other URL fails the task the way PVE's wget
fails when the host cannot be reached.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import ipaddress
import lzma
import re
import struct
from urllib.parse import urlsplit

import httpx

from proxmox_simulator.domain import guest_import
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.storage_service import node_storage, reserve
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

_SAFE = re.compile(r"[^a-zA-Z0-9\-.+=_]")
_ISO = re.compile(r"^[^/]+\.(?:iso|img)$", re.I)
_VZTMPL = re.compile(r"^[^/]+\.tar\.(gz|xz|zst|bz2)$", re.I)
_IMPORT = re.compile(r"^[a-zA-Z0-9\-.+=_]+\.(ova|ovf|qcow2|raw|vmdk)$")
# Where each content type lives below a directory storage's path.
_SUBDIRS = {"iso": "template/iso", "vztmpl": "template/cache", "import": "import"}
_FOLDERS = {"iso": "iso", "vztmpl": "vztmpl", "import": "import"}
_FILE_TYPES = frozenset({"dir", "nfs", "cifs", "btrfs", "glusterfs", "cephfs"})
_DECOMPRESSORS = {"gz": gzip.decompress, "bz2": bz2.decompress, "xz": lzma.decompress}
FETCH_TIMEOUT = 30.0


def normalize_filename(name: str) -> str:
    """PVE's normalize_content_filename: no directories, unsafe characters become ``_``."""
    name = re.split(r"[/\\]", name.rstrip("\n"))[-1]
    return _SAFE.sub("_", name)


def _target(content: str, filename: str) -> tuple[str, str]:
    """(volume name below the storage, format) of ``filename`` as ``content``."""
    if content == "iso":
        if not _ISO.match(filename):
            raise ParameterError({"filename": "wrong file extension"})
        return f"iso/{filename}", "iso"
    if content == "vztmpl":
        match = _VZTMPL.match(filename)
        if not match:
            raise ParameterError({"filename": "wrong file extension"})
        return f"vztmpl/{filename}", f"t{match.group(1).lower()}"
    if content == "import":
        match = _IMPORT.match(filename)
        if not match:
            raise ParameterError({"filename": "invalid filename or wrong extension"})
        return f"import/{filename}", match.group(1)
    raise ParameterError({"content": f"upload content type '{content}' not allowed"})


def _file_path(storage, content: str, volname: str) -> str:
    base = storage["path"] or f"/mnt/pve/{storage['storage']}"
    return f"{base}/{_SUBDIRS[content]}/{volname.split('/', 1)[1]}"


async def add_file(conn, payload: dict, content: str, fmt: str, size: int, now: int) -> None:
    """A file a task brought onto a storage (payload: volid, storage, node) becomes a volume."""
    await inventory.insert_volume(
        conn,
        volid=payload["volid"],
        storage_name=payload["storage"],
        node_name=payload["node"],
        vmid=None,
        content=content,
        fmt=fmt,
        size=size,
        ctime=now,
    )


def vztmpl_path(storage, filename: str) -> str:
    """Where a container template named ``filename`` lives on a directory storage."""
    return _file_path(storage, "vztmpl", f"vztmpl/{filename}")


def _file_based(storage) -> bool:
    return bool(storage["path"]) or storage["type"] in _FILE_TYPES


def image_virtual_size(fmt: str, data: bytes) -> int | None:
    """The disk size a qcow2 image declares (what ``qemu-img info`` reports as
    virtual size), or None when it is not a readable qcow2 header: raw, vmdk and
    ova images are then sized by the file."""
    if fmt != "qcow2" or len(data) < 32 or data[:4] != b"QFI\xfb":
        return None
    version = struct.unpack_from(">I", data, 4)[0]
    size = struct.unpack_from(">Q", data, 24)[0]
    return size if version in (2, 3) and size > 0 else None


def _digest(algorithm: str | None, data: bytes) -> str | None:
    return hashlib.new(algorithm, data).hexdigest() if algorithm else None


async def upload(
    rt, principal: Principal, node: str, storage_name: str, params: dict, files: dict
) -> str:
    """``POST …/upload``: the multipart file becomes a volume when its ``imgcopy`` ends."""
    async with rt.pool.acquire() as conn, conn.transaction():
        storage = await node_storage(conn, node, storage_name)
        if not _file_based(storage):
            raise PveError(f"can't upload to storage type '{storage['type']}'")
        content = params["content"]
        tmpfilename = params.get("tmpfilename")
        if not tmpfilename:
            raise PveError("missing temporary file name")
        data = files.get(tmpfilename)
        if data is None:
            raise PveError(f"temporary file '{tmpfilename}' does not exist")
        filename = normalize_filename(params["filename"])
        volname, fmt = _target(content, filename)
        if content not in storage["content"].split(","):
            raise PveError(f"storage '{storage_name}' does not support '{content}' content")
        volid = f"{storage_name}:{volname}"
        existing = await inventory.volume(conn, volid)
        await reserve(conn, storage, node, len(data) - (existing["size"] if existing else 0))
        algorithm = params.get("checksum-algorithm")
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="imgcopy",
            task_id="",
            principal=principal,
            payload={
                "executor": "upload",
                "volid": volid,
                "storage": storage_name,
                "node": None if storage["shared"] else node,
                "content": content,
                "format": fmt,
                "size": len(data),
                "virtual_size": image_virtual_size(fmt, data),
                "kept": guest_import.kept_contents(fmt, data) if content == "import" else None,
                "tmpfilename": tmpfilename,
                "dest": _file_path(storage, content, volname),
                "target_node": node,
                "checksum": params.get("checksum"),
                "algorithm": algorithm,
                "digest": _digest(algorithm, data),
            },
        )


async def finish_upload(conn, now: int, payload: dict) -> list[str]:
    """The task's work: verify the checksum, then the file replaces any of its name."""
    lines = [f"starting file import from: {payload['tmpfilename']}"]
    if payload.get("algorithm"):
        if payload["digest"].lower() != payload["checksum"].lower():
            raise PveError(
                f"checksum mismatch: got '{payload['digest']}' != expect '{payload['checksum']}'"
            )
        lines.append("calculating checksum...OK, checksum verified")
    await inventory.delete_volume(conn, payload["volid"])  # PVE overwrites the file
    await add_file(conn, payload, payload["content"], payload["format"], payload["size"], now)
    await inventory.set_virtual_size(conn, payload["volid"], payload.get("virtual_size"))
    await inventory.set_guest_config(conn, payload["volid"], payload.get("kept"))
    return [
        *lines,
        f"target node: {payload['target_node']}",
        f"target file: {payload['dest']}",
        f"file size is: {payload['size']}",
        f"command: cp -- {payload['tmpfilename']} {payload['dest']}",
        "finished file import successfully",
    ]


# -- download-url ----------------------------------------------------------------------


async def download_url(rt, principal: Principal, node: str, storage_name: str, params: dict) -> str:
    content, url = params["content"], params["url"]
    if not re.match(r"^https?://", url):
        raise ParameterError({"url": "value does not match the regex pattern"})
    async with rt.pool.acquire() as conn, conn.transaction():
        storage = await node_storage(conn, node, storage_name)
        if not _file_based(storage):
            raise PveError(
                f"can't upload to storage type '{storage['type']}', not a file based storage!"
            )
        if content not in storage["content"].split(","):
            raise PveError(
                f"storage '{storage_name}' is not configured for content-type '{content}'"
            )
        filename = normalize_filename(params["filename"])
        try:
            volname, fmt = _target(content, filename)
        except ParameterError as exc:
            if "content" in exc.errors:
                raise ParameterError(
                    {"content": f"upload content-type '{content}' is not allowed"}
                ) from None
            raise
        used = (await inventory.storage_used(conn)).get(
            (storage_name, "" if storage["shared"] else node), 0
        )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="download",
            # PVE's encode_text: the worker ID must not carry ':' or the like.
            task_id=re.sub(r"[^a-zA-Z0-9_.\-]", lambda m: f"\\x{ord(m[0]):02x}", filename),
            principal=principal,
            payload={
                "volid": f"{storage_name}:{volname}",
                "storage": storage_name,
                "node": None if storage["shared"] else node,
                "content": content,
                "format": fmt,
                "url": url,
                "dest": _file_path(storage, content, volname),
                "free": storage["total"] - used,
                "checksum": params.get("checksum"),
                "algorithm": params.get("checksum-algorithm"),
                "compression": params.get("compression"),
                "verify": bool(params.get("verify-certificates", True)),
            },
        )


def reachable(url: str) -> bool:
    """Only loopback hosts: the simulator never reaches beyond the machine it runs on."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def fetch(payload: dict, pid: int, log) -> bytes:
    """What wget would fetch; failures carry PVE's run_command wording and wget's codes."""
    url, dest = payload["url"], payload["dest"]
    command = f"wget --progress=dot:giga -O {dest}.tmp.{pid} {url}"
    if not payload["verify"]:
        command += " --no-check-certificate"
    if not reachable(url):
        await log(f"{urlsplit(url).hostname}: the simulator has no network beyond loopback")
        raise PveError(f"download failed: command '{command}' failed: exit code 4")
    try:
        async with httpx.AsyncClient(
            verify=payload["verify"], timeout=FETCH_TIMEOUT, follow_redirects=True
        ) as client:
            response = await client.get(url)
    except httpx.HTTPError as exc:
        await log(f"{exc.__class__.__name__}: {exc}")
        raise PveError(f"download failed: command '{command}' failed: exit code 4") from None
    if response.status_code >= 400:
        await log(f"ERROR {response.status_code}: {response.reason_phrase}.")
        raise PveError(f"download failed: command '{command}' failed: exit code 8")
    return response.content


_DISPOSITION = (re.compile(r'filename="([^"]*)"'), re.compile(r"filename=([^;]*)"))
_URL_FILE = re.compile(r"^[^?]+/([^?/]*)(?:\?.*)?$")


async def url_metadata(rt, node: str, url: str, verify: bool) -> dict:
    """``GET /nodes/{node}/query-url-metadata``: PVE sends a HEAD request and reports the
    file name (Content-Disposition, else the URL's last path segment), size and type."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    parts = urlsplit(url)
    if not reachable(url):
        port = parts.port or (443 if parts.scheme == "https" else 80)
        raise PveError(
            f"invalid server response: '500 Can't connect to {parts.hostname}:{port}"
            " (the simulator has no network beyond loopback)'"
        )
    try:
        async with httpx.AsyncClient(verify=verify, timeout=FETCH_TIMEOUT) as client:
            response = await client.head(url, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise PveError(f"invalid server response: '500 {exc}'") from None
    if response.status_code != 200:
        raise PveError(
            f"invalid server response: '{response.status_code} {response.reason_phrase}'"
        )
    out: dict = {}
    disposition = response.headers.get("content-disposition") or ""
    found = next((m for rx in _DISPOSITION if (m := rx.search(disposition))), None)
    if found is None:
        found = _URL_FILE.match(url)
    if found and found.group(1):
        out["filename"] = found.group(1)
    size = response.headers.get("content-length")
    if size and size.isdigit() and int(size):
        out["size"] = int(size)
    mimetype = response.headers.get("content-type")
    if mimetype:
        out["mimetype"] = mimetype.split(";", 1)[0]
    return out


async def finish_download(conn, now: int, payload: dict, data: bytes) -> list[str]:
    lines = []
    if payload.get("algorithm"):
        got = _digest(payload["algorithm"], data)
        if got.lower() != str(payload["checksum"]).lower():
            raise PveError(f"checksum mismatch: got '{got}' != expect '{payload['checksum']}'")
        lines.append("calculating checksum...OK, checksum verified")
    compression = payload.get("compression")
    if compression:
        if payload["content"] != "iso":
            raise PveError(f"decompression not supported for {payload['content']}")
        decompress = _DECOMPRESSORS.get(compression)
        if decompress is None:
            raise PveError("no decompression method found")
        data = decompress(data)
    if await inventory.volume(conn, payload["volid"]) is not None:
        raise PveError(f"refusing to override existing file '{payload['dest']}'")
    if len(data) > payload["free"]:
        raise PveError(f"not enough space on storage '{payload['storage']}'")
    await add_file(conn, payload, payload["content"], payload["format"], len(data), now)
    virtual_size = image_virtual_size(payload["format"], data)
    await inventory.set_virtual_size(conn, payload["volid"], virtual_size)
    if payload["content"] == "import":
        kept = guest_import.kept_contents(payload["format"], data)
        await inventory.set_guest_config(conn, payload["volid"], kept)
    return [*lines, f"download of '{payload['url']}' to '{payload['dest']}' finished"]


# -- appliance templates (pveam) -------------------------------------------------------


async def appliance_index(rt, node: str) -> list[dict]:
    """``GET …/aplinfo``: PVE lists the appliance index ``pveam update`` downloaded
    from download.proxmox.com. A node without network never fetched one, so its
    list is empty, as on a fresh PVE node that cannot reach the internet."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return []


async def appliance_download(rt, node: str, template: str) -> str:
    """``POST …/aplinfo``: PVE looks the template up in that index first; with no
    index every template is unknown (download-url from a reachable URL works)."""
    await appliance_index(rt, node)
    raise ParameterError({"template": "no such template"})
