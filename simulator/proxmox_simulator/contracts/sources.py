"""Source adapters: where raw contract artifacts come from.

Network access happens only here and only on an explicit ``import --url``.
The fetcher enforces HTTPS, an official-host allowlist, redirect, size and
time limits, and a bounded number of retries.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from proxmox_simulator.contracts.parser import (
    ContractParseError,
    ParseResult,
    parse_apidoc_js,
    parse_json_document,
)

OFFICIAL_HOSTS = frozenset({"pve.proxmox.com"})
MAX_ARTIFACT_BYTES = 32 * 1024 * 1024
MAX_REDIRECTS = 3
FETCH_TIMEOUT_SECONDS = 30.0
FETCH_ATTEMPTS = 2
# fakepve's data file was derived from the official 9.2.12 viewer (see its docs).
FAKEPVE_SCHEMA_VERSION = "9.2.12"

_VERSION_IN_NAME = re.compile(r"pve-(\d+\.\d+(?:[.-]\d+)?)")


class SourceRefused(ValueError):
    """An import source failed a trust check (scheme, host, size, redirect)."""


@dataclass(frozen=True)
class RawArtifact:
    data: bytes
    source_kind: str  # file | url | package
    location: str
    filename: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def guess_version(name: str) -> str | None:
    match = _VERSION_IN_NAME.search(name)
    return match.group(1) if match else None


def read_file(path: Path) -> RawArtifact:
    return RawArtifact(path.read_bytes(), "file", str(path.resolve()), path.name)


def fakepve_data_path() -> Path:
    """The installed fakepve package's schema file; loaded in place, never copied."""
    return Path(str(resources.files("fakepve") / "data" / "pve-api.json.gz"))


def read_fakepve() -> RawArtifact:
    path = fakepve_data_path()
    return RawArtifact(path.read_bytes(), "package", f"fakepve:{path.name}", path.name)


def _gunzip(data: bytes, max_bytes: int) -> bytes:
    """Decompress, refusing to grow past `max_bytes` (a small gzip can expand to gigabytes)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise ContractParseError(f"invalid gzip data: {exc}") from exc
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise SourceRefused(f"the artifact decompresses to more than {max_bytes} bytes")
    return out


def parse_artifact(
    artifact: RawArtifact, version: str, max_bytes: int = MAX_ARTIFACT_BYTES
) -> ParseResult:
    data = artifact.data
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, max_bytes)
    text = data.decode("utf-8")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            return parse_json_document(json.loads(text), version)
        except json.JSONDecodeError as exc:
            raise ContractParseError(f"invalid JSON: {exc}") from exc
    return parse_apidoc_js(text, version)


def check_url(url: str, allowed_hosts: frozenset[str] = OFFICIAL_HOSTS) -> None:
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise SourceRefused(f"refusing {url!r}: only https:// URLs are imported")
    host = (parts.hostname or "").lower()
    if host not in allowed_hosts:
        raise SourceRefused(
            f"refusing {url!r}: host {host!r} is not in the allowlist {sorted(allowed_hosts)}"
        )
    if parts.username or parts.password:
        raise SourceRefused(f"refusing {url!r}: credentials in URLs are not accepted")


def fetch_url(
    url: str,
    *,
    allowed_hosts: frozenset[str] = OFFICIAL_HOSTS,
    max_bytes: int = MAX_ARTIFACT_BYTES,
    max_redirects: int = MAX_REDIRECTS,
    timeout: float = FETCH_TIMEOUT_SECONDS,
    attempts: int = FETCH_ATTEMPTS,
    transport: httpx.BaseTransport | None = None,
) -> RawArtifact:
    """Download one artifact; every redirect hop is re-checked against the allowlist."""
    check_url(url, allowed_hosts)
    last_error: Exception | None = None
    for _attempt in range(max(1, attempts)):
        try:
            return _fetch_once(url, allowed_hosts, max_bytes, max_redirects, timeout, transport)
        except SourceRefused:
            raise
        except httpx.TransportError as exc:  # retry only transient transport failures
            last_error = exc
    raise SourceRefused(f"download of {url!r} failed after {attempts} attempts: {last_error}")


def _fetch_once(url, allowed_hosts, max_bytes, max_redirects, timeout, transport) -> RawArtifact:
    current = url
    with httpx.Client(
        follow_redirects=False, timeout=timeout, transport=transport, verify=True
    ) as client:
        for _hop in range(max_redirects + 1):
            with client.stream("GET", current) as response:
                if response.is_redirect:
                    target = str(response.next_request.url) if response.next_request else ""
                    check_url(target, allowed_hosts)
                    current = target
                    continue
                if response.status_code != 200:
                    raise SourceRefused(f"{current!r} answered HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                if declared and int(declared) > max_bytes:
                    raise SourceRefused(f"{current!r} is {declared} bytes, over {max_bytes}")
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise SourceRefused(f"{current!r} exceeded the {max_bytes}-byte limit")
                    chunks.append(chunk)
                name = urlsplit(current).path.rsplit("/", 1)[-1] or "apidoc.js"
                return RawArtifact(b"".join(chunks), "url", current, name)
    raise SourceRefused(f"{url!r} redirected more than {max_redirects} times")
