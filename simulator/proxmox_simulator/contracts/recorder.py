"""Record how a real PVE endpoint answers, as a sanitized observation set.

The recorder only reads: it calls the declared GET methods (and the entries the
server's own directory indexes list), with path parameters taken from the
collections above them (a node from ``/nodes``, a VMID from ``…/qemu``), and
never a method that needs any other required parameter. Network access is
opt-in and bounded: HTTPS only, hosts on an explicit allowlist, no redirects,
a size limit per answer and in total, a per-request timeout, a time budget and
a request budget. Whatever it keeps is sanitized first (``Sanitizer``).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.contracts.observations import Observation, ObservationSet, infer_schema
from proxmox_simulator.contracts.sources import SourceRefused

RECORDER_VERSION = "1"
# Keys whose values are credentials or key material: never kept, whatever they look like.
_SECRET_KEY = re.compile(
    r"(pass|secret|token|ticket|csrf|key|cookie|cert|pem|fingerprint|serial|ssh|"
    r"private|auth|signature|hash|shadow|digest|sid)",
    re.I,
)
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
_IPV6 = re.compile(r"\b(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}\b")
_MAC = re.compile(r"\b(?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}\b")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_USERID = re.compile(r"\b([\w.+-]+)@(pam|pve|[a-z][\w-]*)\b(!\w[\w-]*)?")
# Values that name a collection's entries; what a path parameter is bound from.
_ENTRY_FIELDS = {"vmid": ("vmid",), "node": ("node",), "volume": ("volid",)}


class RecorderLimit(RuntimeError):
    """A size limit was reached."""


@dataclass
class Limits:
    max_requests: int = 300
    max_bytes: int = 1024 * 1024  # one answer
    max_total_bytes: int = 32 * 1024 * 1024
    timeout: float = 10.0  # one request
    time_budget: float = 120.0  # the whole recording


class Sanitizer:
    """Replaces identities with stable stand-ins and drops secrets.

    Node names, the cluster name, user IDs, e-mail addresses, IP and MAC
    addresses become ``node1``, ``cluster1``, ``user1@pam``, ``user1@example.invalid``,
    ``192.0.2.1`` / ``2001:db8::1``, ``02:00:00:00:00:01`` — the same stand-in for
    the same value throughout one recording, so relationships survive.
    """

    def __init__(self) -> None:
        self._maps: dict[str, dict[str, str]] = {}
        self._names: dict[str, str] = {}  # node and cluster names, replaced inside any string

    def _stand_in(self, kind: str, value: str, template: str) -> str:
        table = self._maps.setdefault(kind, {})
        if value not in table:
            table[value] = template.format(n=len(table) + 1)
        return table[value]

    def name(self, kind: str, value: str) -> str:
        replacement = self._stand_in(kind, value, kind + "{n}")
        if len(value) >= 3:
            self._names[value] = replacement
        return replacement

    def text(self, value: str) -> str:
        out = _MAC.sub(
            lambda m: self._stand_in("mac", m.group(0).lower(), "02:00:00:00:00:{n:02x}"), value
        )
        out = _EMAIL.sub(
            lambda m: self._stand_in("email", m.group(0), "user{n}@example.invalid"), out
        )
        out = _USERID.sub(self._userid, out)
        out = _IPV4.sub(self._ipv4, out)
        out = _IPV6.sub(self._ipv6, out)
        for original in sorted(self._names, key=len, reverse=True):
            out = out.replace(original, self._names[original])
        return out

    def _userid(self, match: re.Match) -> str:
        user, realm, token = match.group(1), match.group(2), match.group(3) or ""
        if user == "root" and realm == "pam":
            stand_in = "root"
        else:
            stand_in = self._stand_in("user", f"{user}@{realm}", "user{n}")
        if token:
            token = self._stand_in("token", token, "!token{n}")
        return f"{stand_in}@{realm}{token}"

    def _ipv4(self, match: re.Match) -> str:
        try:
            address = ipaddress.IPv4Address(match.group(0))
        except ValueError:
            return match.group(0)
        if address.is_loopback or address.is_unspecified or address.is_multicast:
            return match.group(0)
        n = int(self._stand_in("ipv4", str(address), "{n}"))
        return f"192.0.2.{n % 254 + 1}" if n < 254 else f"198.51.100.{n % 254 + 1}"

    def _ipv6(self, match: re.Match) -> str:
        try:
            address = ipaddress.IPv6Address(match.group(0))
        except ValueError:
            return match.group(0)
        if address.is_loopback or address.is_unspecified:
            return match.group(0)
        return self._stand_in("ipv6", str(address), "2001:db8::{n:x}")

    def value(self, value: Any, key: str = "") -> Any:
        if key and _SECRET_KEY.search(key) and isinstance(value, str | int | float):
            return "***" if isinstance(value, str) else 0
        if isinstance(value, dict):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key) for v in value[:3]]
        if isinstance(value, str):
            return self.text(value)
        return value

    def path(self, concrete: str) -> str:
        return self.text(concrete)


@dataclass
class Credentials:
    token: str | None = None  # "user@realm!id=secret"
    username: str | None = None
    password: str | None = None


@dataclass
class Recording:
    observations: list[Observation] = field(default_factory=list)
    requests: int = 0
    bytes: int = 0
    truncated: str | None = None  # which limit ended the recording early
    skipped: int = 0  # declared GETs needing parameters the recorder does not invent


def check_target(url: str, allowed_hosts: frozenset[str]) -> str:
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise SourceRefused(f"refusing {url!r}: the recorder talks HTTPS only")
    host = (parts.hostname or "").lower()
    if not allowed_hosts or host not in allowed_hosts:
        raise SourceRefused(
            f"refusing {url!r}: host {host!r} is not in the allowlist "
            f"{sorted(allowed_hosts) or '(empty: pass --allow-host)'}"
        )
    if parts.username or parts.password:
        raise SourceRefused(f"refusing {url!r}: credentials in URLs are not accepted")
    return f"https://{parts.netloc}"


class Recorder:
    def __init__(
        self,
        base_url: str,
        contract: Contract,
        credentials: Credentials,
        *,
        allowed_hosts: frozenset[str],
        limits: Limits | None = None,
        verify: bool | ssl.SSLContext = True,
        prefixes: tuple[str, ...] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.origin = check_target(base_url, allowed_hosts)
        self.contract = contract
        self.credentials = credentials
        self.limits = limits or Limits()
        self.prefixes = prefixes
        self.sanitizer = Sanitizer()
        self.recording = Recording()
        self._client = httpx.Client(
            base_url=self.origin + "/api2/json",
            follow_redirects=False,
            timeout=self.limits.timeout,
            verify=verify,
            transport=transport,
        )
        self._answers: dict[str, tuple[int, Any, str]] = {}
        self._bindings: dict[str, dict[str, str] | None] = {}
        self._deadline = 0.0

    # -- HTTP -----------------------------------------------------------------------

    def _login(self) -> None:
        if self.credentials.token:
            self._client.headers["Authorization"] = f"PVEAPIToken={self.credentials.token}"
            return
        response = self._client.post(
            "/access/ticket",
            data={"username": self.credentials.username, "password": self.credentials.password},
        )
        if response.status_code != 200:
            raise SourceRefused(f"login refused: HTTP {response.status_code}")
        ticket = response.json()["data"]["ticket"]
        self._client.cookies.set("PVEAuthCookie", ticket)

    def _get(self, concrete: str) -> tuple[int, Any, str]:
        if concrete in self._answers:
            return self._answers[concrete]
        if time.monotonic() > self._deadline:
            raise RecorderLimit(f"time budget of {self.limits.time_budget}s")
        if self.recording.requests >= self.limits.max_requests:
            raise RecorderLimit(f"request budget of {self.limits.max_requests}")
        self.recording.requests += 1
        with self._client.stream("GET", concrete) as response:
            if response.is_redirect:
                raise SourceRefused(f"{concrete} redirected; the recorder follows no redirects")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > self.limits.max_bytes:
                    raise RecorderLimit(f"{concrete}: answer over {self.limits.max_bytes} bytes")
            self.recording.bytes += len(body)
            if self.recording.bytes > self.limits.max_total_bytes:
                raise RecorderLimit(f"total size limit of {self.limits.max_total_bytes} bytes")
            try:
                data = httpx.Response(200, content=bytes(body)).json().get("data")
            except ValueError:
                data = None
            answer = (response.status_code, data, response.reason_phrase)
        self._answers[concrete] = answer
        return answer

    # -- path parameters --------------------------------------------------------------

    def _concrete(self, template: str, binding: dict[str, str]) -> str:
        return re.sub(r"\{([^}]+)\}", lambda m: quote(binding[m.group(1)], safe=""), template)

    def _binding(self, template: str) -> dict[str, str] | None:
        """Values for the template's parameters, from the collections above it."""
        if template in self._bindings:
            return self._bindings[template]
        segments = template.strip("/").split("/")
        last = max((i for i, s in enumerate(segments) if s.startswith("{")), default=None)
        if last is None:
            result: dict[str, str] | None = {}
        else:
            name = segments[last][1:-1]
            collection = "/" + "/".join(segments[:last])
            parent = self._binding(collection)
            result = None
            if parent is not None:
                status, data, _ = self._get(self._concrete(collection, parent))
                value = _first_entry(data, name) if status == 200 else None
                if value is not None:
                    result = {**parent, name: value}
        self._bindings[template] = result
        return result

    # -- recording ----------------------------------------------------------------------

    def _wanted(self, path: str) -> bool:
        """No filter: everything. ``P``: that template. ``P*``: templates starting with P."""
        if not self.prefixes:
            return True
        return any(path.startswith(p[:-1]) if p.endswith("*") else path == p for p in self.prefixes)

    def _observe(self, template: str, binding: dict[str, str], undeclared: bool = False):
        status, data, reason = self._get(self._concrete(template, binding))
        present = status != 501
        observation = Observation(
            path=template,
            method="GET",
            status=status,
            present=present,
            permitted=status != 403,
            returns=infer_schema(data) if status == 200 else None,
            sample=self.sanitizer.value(data) if status == 200 else None,
            undeclared=undeclared,
            message="" if status == 200 else self.sanitizer.text(reason)[:200],
        )
        self.recording.observations.append(observation)
        return observation, data

    def record(self) -> ObservationSet:
        self._deadline = time.monotonic() + self.limits.time_budget
        self._login()
        status, version_data, _ = self._get("/version")
        if status != 200 or not isinstance(version_data, dict):
            raise SourceRefused(f"GET /version answered HTTP {status}; is this a PVE API?")
        version = str(version_data.get("version", "")) or self.contract.version
        major = int(version.split(".", 1)[0])
        declared_paths = set(self.contract.paths)
        try:
            self._learn_identities()
            for endpoint in sorted(self.contract.endpoints, key=lambda e: e.path):
                if endpoint.method != "GET" or not self._wanted(endpoint.path):
                    continue
                in_path = set(endpoint.path_params)
                if any(not p.optional and p.name not in in_path for p in endpoint.parameters):
                    self.recording.skipped += 1
                    continue
                binding = self._binding(endpoint.path)
                if binding is None:
                    self.recording.skipped += 1
                    continue
                observation, data = self._observe(endpoint.path, binding)
                if observation.status == 200:
                    self._follow_index(endpoint.path, binding, data, declared_paths)
        except RecorderLimit as exc:
            self.recording.truncated = str(exc)
        finally:
            self._client.close()
        return ObservationSet(
            major=major,
            version=self.sanitizer.text(version),
            observations=tuple(self.recording.observations),
        )

    def _learn_identities(self) -> None:
        """Node and cluster names first, so every later string is sanitized with them."""
        status, nodes, _ = self._get("/nodes")
        for entry in nodes if status == 200 and isinstance(nodes, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("node"), str):
                self.sanitizer.name("node", entry["node"])
        status, members, _ = self._get("/cluster/status")
        for entry in members if status == 200 and isinstance(members, list) else []:
            if isinstance(entry, dict) and entry.get("type") == "cluster" and entry.get("name"):
                self.sanitizer.name("cluster", str(entry["name"]))

    def _follow_index(self, template, binding, data, declared_paths) -> None:
        """Children a directory index lists that no declared path names: observed-only."""
        if not isinstance(data, list):
            return
        for entry in data:
            # An index entry names one child and nothing else ({"subdir": x} or {"name": x}).
            if not isinstance(entry, dict) or len(entry) != 1:
                continue
            child = entry.get("subdir", entry.get("name"))
            if not isinstance(child, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", child):
                continue
            path = template.rstrip("/") + "/" + child
            if path in declared_paths:
                continue
            self._observe(path, binding, undeclared=True)

    def provenance(self) -> dict:
        return {
            "recorder": RECORDER_VERSION,
            # The observed host is the operator's own; only its sanitized form is kept.
            "target": self.sanitizer.text(urlsplit(self.origin).netloc),
            "declared_contract": {
                "version": self.contract.version,
                "sha256": self.contract.sha256(),
            },
            "prefixes": list(self.prefixes),
            "limits": {
                "max_requests": self.limits.max_requests,
                "max_bytes": self.limits.max_bytes,
                "max_total_bytes": self.limits.max_total_bytes,
                "timeout": self.limits.timeout,
                "time_budget": self.limits.time_budget,
            },
            "requests": self.recording.requests,
            "bytes": self.recording.bytes,
            "skipped": self.recording.skipped,
            "truncated": self.recording.truncated,
            "sanitized": ["secrets", "node", "cluster", "user", "email", "ipv4", "ipv6", "mac"],
        }


def _first_entry(data: Any, name: str) -> str | None:
    if not isinstance(data, list):
        return None
    fields = _ENTRY_FIELDS.get(name, (name,))
    for entry in data:
        if isinstance(entry, dict):
            for f in fields:
                if entry.get(f) not in (None, ""):
                    return str(entry[f])
    return None
