"""OCI images for containers (9.x): ``GET /nodes/{node}/query-oci-repo-tags`` and
``POST /nodes/{node}/storage/{storage}/oci-registry-pull``.

PVE runs skopeo against the registry (``list-tags`` / ``copy docker://… oci-archive:…``)
and stores the pulled image as a ``.tar`` container template. The simulator speaks
the OCI distribution API itself, to registries on loopback only (plain HTTP there:
a test registry on 127.0.0.1); any other registry cannot be reached and the call
fails as skopeo does when it cannot connect.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from urllib.parse import urlsplit

import httpx

from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.storage_service import node_storage
from proxmox_simulator.domain.storage_transfer import (
    FETCH_TIMEOUT,
    add_file,
    normalize_filename,
    reachable,
    vztmpl_path,
)
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

PULL_TASK = "ociregistrypull"
DEFAULT_REGISTRY = "docker.io"
_DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
_ACCEPT = ", ".join((*_MANIFEST_TYPES, *_INDEX_TYPES))
# An image is bounded: the simulator keeps only its size, but fetches all of it.
MAX_IMAGE_BYTES = 256 * 1024 * 1024


def split_reference(reference: str) -> tuple[str, str, str | None]:
    """(registry, repository, tag) the way container tools read a reference: the first
    component is a registry when it has a dot or port or is localhost."""
    name, tag = reference, None
    last = reference.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = reference.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DEFAULT_REGISTRY, name
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository, tag


def _endpoint(registry: str) -> str:
    host = _DOCKER_HUB_ENDPOINT if registry == DEFAULT_REGISTRY else registry
    scheme = "http" if reachable(f"http://{host}") else "https"
    return f"{scheme}://{host}"


class _Registry:
    """One skopeo-like session against a registry; errors in skopeo's wording."""

    def __init__(self, registry: str, repository: str, reference_text: str) -> None:
        self.registry, self.repository, self.text = registry, repository, reference_text
        self.base = _endpoint(registry)

    async def get(self, client: httpx.AsyncClient, path: str, accept: str | None = None):
        url = f"{self.base}/v2/{path}"
        host = urlsplit(url).hostname
        if not reachable(url):
            raise PveError(
                f'pinging container registry {self.registry}: Get "{self.base}/v2/": '
                f"dial tcp: lookup {host}: no such host"
            )
        try:
            response = await client.get(url, headers={"Accept": accept} if accept else {})
        except httpx.HTTPError as exc:
            raise PveError(
                f'pinging container registry {self.registry}: Get "{self.base}/v2/": {exc}'
            ) from None
        if response.status_code == 404:
            raise PveError(f"reading manifest {self.text}: manifest unknown")
        if response.status_code >= 400:
            raise PveError(
                f"fetching {path}: received unexpected HTTP status: "
                f"{response.status_code} {response.reason_phrase}"
            )
        return response


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=True)


async def repo_tags(rt, node: str, reference: str) -> list[str]:
    """``GET /nodes/{node}/query-oci-repo-tags``: ``skopeo list-tags docker://<reference>``."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    registry, repository, _tag = split_reference(reference)
    session = _Registry(registry, repository, f"docker://{reference}")
    try:
        async with _client() as client:
            response = await session.get(client, f"{repository}/tags/list")
    except PveError as exc:
        raise PveError(f"Error listing repository tags: {exc.message}") from None
    try:
        tags = response.json().get("tags") or []
    except ValueError:
        raise PveError("Error listing repository tags: invalid tags list") from None
    return [str(t) for t in tags]


# -- pulling ---------------------------------------------------------------------------


async def pull(rt, principal: Principal, node: str, storage_name: str, params: dict) -> str:
    """``POST …/oci-registry-pull``: an ``ociregistrypull`` task storing a vztmpl ``.tar``."""
    reference = params["reference"]
    async with rt.pool.acquire() as conn, conn.transaction():
        storage = await node_storage(conn, node, storage_name)
        if not storage["enabled"]:
            raise PveError(f"storage '{storage_name}' is disabled")
        if not storage["path"]:
            raise PveError(
                f"can't upload to storage type '{storage['type']}', not a file based storage!"
            )
        if "vztmpl" not in storage["content"].split(","):
            raise PveError(f"storage '{storage_name}' is not configured for content-type 'vztmpl'")
        filename = normalize_filename(params.get("filename") or reference) + ".tar"
        volid = f"{storage_name}:vztmpl/{filename}"
        if await inventory.volume(conn, volid) is not None:
            raise PveError(f"refusing to override existing file '{filename}'")
        dest = vztmpl_path(storage, filename)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=PULL_TASK,
            task_id=re.sub(r"[^a-zA-Z0-9_.\-]", lambda m: f"\\x{ord(m[0]):02x}", filename),
            principal=principal,
            payload={
                "reference": reference,
                "volid": volid,
                "storage": storage_name,
                "node": None if storage["shared"] else node,
                "dest": dest,
            },
        )


def pull_command(payload: dict, pid: int) -> str:
    tmp = f"{payload['dest']}.tmp.{pid}"
    return f"skopeo copy docker://{payload['reference']} oci-archive:{tmp}"


async def fetch_image(payload: dict, log) -> bytes:
    """The image as an OCI archive (oci-layout, index.json, blobs/sha256/…), digests checked."""
    registry, repository, tag = split_reference(payload["reference"])
    session = _Registry(registry, repository, f"docker://{payload['reference']}")
    blobs: dict[str, bytes] = {}
    async with _client() as client:
        response = await session.get(client, f"{repository}/manifests/{tag}", _ACCEPT)
        manifest = response.content
        kind = response.headers.get("content-type", "").split(";")[0]
        document = _json(manifest)
        if kind in _INDEX_TYPES or document.get("manifests"):
            chosen = _platform(document)
            response = await session.get(
                client, f"{repository}/manifests/{chosen['digest']}", _ACCEPT
            )
            manifest = _checked(response.content, chosen["digest"])
            kind = chosen.get("mediaType") or _MANIFEST_TYPES[0]
            document = _json(manifest)
        await log("Getting image source signatures")
        total = 0
        for descriptor in [document.get("config") or {}, *(document.get("layers") or [])]:
            digest = descriptor.get("digest", "")
            if not digest.startswith("sha256:"):
                raise PveError(f"invalid digest '{digest}' in manifest")
            await log(f"Copying blob {digest.split(':', 1)[1][:12]}")
            data = (await session.get(client, f"{repository}/blobs/{digest}")).content
            blobs[digest] = _checked(data, digest)
            total += len(data)
            if total > MAX_IMAGE_BYTES:
                raise PveError("image exceeds the simulator's size limit")
    await log("Writing manifest to image destination")
    return _oci_archive(manifest, kind or _MANIFEST_TYPES[0], blobs)


def _json(data: bytes) -> dict:
    try:
        document = json.loads(data)
    except ValueError:
        raise PveError("invalid manifest: not JSON") from None
    if not isinstance(document, dict):
        raise PveError("invalid manifest: not an object")
    return document


def _platform(index: dict) -> dict:
    """skopeo's choice from an index: the linux/amd64 image (the node's platform)."""
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os") == "linux" and platform.get("architecture") == "amd64":
            return entry
    raise PveError("choosing an image from manifest list: no image found for linux/amd64")


def _checked(data: bytes, digest: str) -> bytes:
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != digest:
        raise PveError(f"Digest did not match, expected {digest}, got {got}")
    return data


def _oci_archive(manifest: bytes, media_type: str, blobs: dict[str, bytes]) -> bytes:
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": media_type, "digest": digest, "size": len(manifest)}],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        f"blobs/sha256/{digest.split(':', 1)[1]}": manifest,
        **{f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()},
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def finish_pull(conn, now: int, payload: dict, data: bytes) -> list[str]:
    if await inventory.volume(conn, payload["volid"]) is not None:
        raise PveError(f"refusing to override existing file '{payload['volid'].split('/', 1)[1]}'")
    await add_file(conn, payload, "vztmpl", "tar", len(data), now)
    return [f"stored {payload['dest']} ({len(data)} bytes)"]
