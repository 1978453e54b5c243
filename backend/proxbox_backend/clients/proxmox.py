"""Async Proxmox VE API client: API token or ticket login (with CSRF for writes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from proxbox_backend.clients.http import ResilientTransport, RetryPolicy, connection_limits
from proxbox_backend.clients.tls import verify_setting
from proxbox_backend.secrets import Secret

WRITE_METHODS = frozenset({"POST", "PUT", "DELETE"})


@dataclass(frozen=True)
class ProxmoxCredentials:
    """Either an API token (`user@realm!id` + secret) or a user and password for a ticket."""

    token_id: str | None = None
    token_secret: Secret | None = None
    username: str | None = None
    password: Secret | None = None

    def __post_init__(self):
        if not (self.token_id and self.token_secret) and not (self.username and self.password):
            raise ValueError(
                "Proxmox credentials need token_id and token_secret, or username and password"
            )
        if self.token_id and "!" not in self.token_id:
            raise ValueError("token_id must look like user@realm!tokenid")
        # Such a secret can never make a valid Authorization header: refused here, before
        # the client would send (and retry) requests that cannot succeed.
        # (A password may contain spaces: it travels in a form body, not a header.)
        token = self.token_secret.reveal() if self.token_secret else ""
        password = self.password.reveal() if self.password else ""
        if any(char.isspace() for char in token) or not (token + password).isprintable():
            raise ValueError(
                "the Proxmox secret contains whitespace or control characters "
                "(a pasted line break?); enter it again"
            )

    @property
    def uses_token(self) -> bool:
        return bool(self.token_id and self.token_secret)


class ProxmoxError(Exception):
    """PVE answered with an error; `reason` is PVE's message (the HTTP reason phrase)."""

    def __init__(self, status: int, method: str, path: str, reason: str, errors: Any = None):
        self.status, self.method, self.path, self.reason, self.errors = (
            status,
            method,
            path,
            reason,
            errors,
        )
        detail = f" {errors}" if errors else ""
        super().__init__(f"Proxmox {method} {path} → {status} {reason}{detail}")


class ProxmoxClient:
    def __init__(
        self,
        base_url: str,
        credentials: ProxmoxCredentials,
        *,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        concurrency: int = 8,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep=None,
    ):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/api2/json"):
            self.base_url += "/api2/json"
        self.credentials = credentials
        headers = {"Accept": "application/json"}
        if credentials.uses_token:
            headers["Authorization"] = (
                f"PVEAPIToken={credentials.token_id}={credentials.token_secret.reveal()}"
            )
        client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            verify=verify_setting(verify_tls, ca_bundle),
            transport=transport,
            limits=connection_limits(concurrency),
        )
        extra = {"sleep": sleep} if sleep is not None else {}
        self.transport = ResilientTransport(
            client,
            retry=retry,
            concurrency=concurrency,
            name="proxmox",
            tls_hint="Give the endpoint's CA bundle (--proxmox-ca-bundle or "
            "PROXBOX_PROXMOX_CA_BUNDLE); only for a lab: the endpoint's verify_tls off "
            "or --proxmox-insecure.",
            **extra,
        )
        self._csrf: str | None = None

    def __repr__(self) -> str:
        who = self.credentials.token_id or self.credentials.username
        return f"ProxmoxClient({self.base_url!r}, as {who!r})"

    @property
    def stats(self):
        return self.transport.stats

    async def login(self) -> None:
        """Ticket login; a token client needs none."""
        if self.credentials.uses_token:
            return
        response = await self.transport.request(
            "POST",
            "/access/ticket",
            data={
                "username": self.credentials.username,
                "password": self.credentials.password.reveal(),
            },
        )
        data = self._unwrap("POST", "/access/ticket", response)
        self.transport.client.cookies.set("PVEAuthCookie", data["ticket"])
        self._csrf = data["CSRFPreventionToken"]

    async def request(self, method: str, path: str, **kwargs) -> Any:
        method = method.upper()
        if method in WRITE_METHODS and self._csrf:
            kwargs.setdefault("headers", {})["CSRFPreventionToken"] = self._csrf
        response = await self.transport.request(method, path, **kwargs)
        return self._unwrap(method, path, response)

    async def get(self, path: str, **params) -> Any:
        return await self.request("GET", path, params=params or None)

    @staticmethod
    def _unwrap(method: str, path: str, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success:
            return body.get("data") if isinstance(body, dict) else body
        errors = body.get("errors") if isinstance(body, dict) else None
        raise ProxmoxError(response.status_code, method, path, response.reason_phrase, errors)

    # -- the reads the sync needs -------------------------------------------------------

    async def version(self) -> dict:
        return await self.get("/version")

    async def cluster_status(self) -> list[dict]:
        return await self.get("/cluster/status")

    async def nodes(self) -> list[dict]:
        return await self.get("/nodes")

    async def cluster_options(self) -> dict:
        return await self.get("/cluster/options") or {}

    async def node_network(self, node: str) -> list[dict]:
        return await self.get(f"/nodes/{quote(node)}/network") or []

    async def guests(self) -> list[dict]:
        """Every QEMU VM and LXC container of the cluster in one request."""
        return await self.get("/cluster/resources", type="vm")

    async def resources(self) -> list[dict]:
        """Every resource of the cluster in one answer (guests, nodes, storages, pools)."""
        return await self.get("/cluster/resources") or []

    async def cluster_tasks(self) -> list[dict]:
        """The cluster's recent tasks: per node, its running tasks and its newest
        finished ones (PVE keeps 25 per node, newest first)."""
        return await self.get("/cluster/tasks") or []

    async def guest_config(self, node: str, kind: str, vmid: int) -> dict:
        return await self.get(f"/nodes/{quote(node)}/{kind}/{int(vmid)}/config")

    async def qemu_agent_interfaces(self, node: str, vmid: int) -> list[dict]:
        data = await self.get(f"/nodes/{quote(node)}/qemu/{int(vmid)}/agent/network-get-interfaces")
        return (data or {}).get("result") or []

    async def qemu_agent_osinfo(self, node: str, vmid: int) -> dict:
        data = await self.get(f"/nodes/{quote(node)}/qemu/{int(vmid)}/agent/get-osinfo")
        return (data or {}).get("result") or {}

    async def qemu_agent_host_name(self, node: str, vmid: int) -> str | None:
        data = await self.get(f"/nodes/{quote(node)}/qemu/{int(vmid)}/agent/get-host-name")
        result = (data or {}).get("result")
        name = result.get("host-name") if isinstance(result, dict) else None
        return str(name) if name else None

    async def node_status(self, node: str) -> dict:
        return await self.get(f"/nodes/{quote(node)}/status") or {}

    async def node_dns(self, node: str) -> dict:
        return await self.get(f"/nodes/{quote(node)}/dns") or {}

    async def lxc_interfaces(self, node: str, vmid: int) -> list[dict]:
        return await self.get(f"/nodes/{quote(node)}/lxc/{int(vmid)}/interfaces") or []

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> ProxmoxClient:
        await self.login()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
