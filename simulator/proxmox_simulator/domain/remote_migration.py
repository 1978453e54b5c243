"""Migrating a guest to another cluster: ``POST /nodes/{node}/{qemu,lxc}/{vmid}/remote_migrate``
(7.x+), the source side of qemu-server's and pve-container's remote migration.

The request is checked as PVE checks it (config, lock, HA, running state, the storage and
bridge maps) and PVE's API client really connects to ``target-endpoint`` before the task
exists: a pinned certificate fingerprint, the ``PVEAPIToken`` as the Authorization header,
and ``/cluster/status`` for the endpoint's local node.  The simulator reaches nothing
beyond loopback (``storage_transfer.reachable``), so any other host fails as a refused
connection.  A loopback endpoint is a simulator: the task (``qmigrate``/``vzmigrate``, the
source locked ``migrate`` meanwhile) asks it for a migration tunnel (``mtunnel``) with the
mapped storages and bridges, then upgrades ``mtunnelwebsocket`` to a websocket.  No
simulator tunnels a guest's state, so that upgrade is refused and the migration aborts
as PVE's does when its tunnel cannot be established: the source is unlocked and kept,
and the target's tunnel task gives up and removes its reservation.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import ssl

import httpx

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import load_guest, lock_name
from proxmox_simulator.domain.property_strings import NAMED_FORMATS, split
from proxmox_simulator.domain.storage_transfer import reachable
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import ha as ha_repo
from proxmox_simulator.repositories import replication as replication_repo
from proxmox_simulator.tasks.service import enqueue

EXECUTOR = "remote-migrate"
DEFAULT_PORT = 8006
CONNECT_TIMEOUT = 10.0
TASK_TYPES = {rules.QEMU: "qmigrate", rules.LXC: "vzmigrate"}


def parse_idmap(text: str | None, param: str, what: str) -> dict:
    """PVE's parse_idmap: ``src:dst`` pairs, at most one default ``dst``, or ``1`` (identity)."""
    idmap: dict = {"identity": False, "default": None, "entries": {}}
    try:
        for entry in (e for e in (text or "").replace(";", ",").split(",") if e.strip()):
            entry = entry.strip()
            if entry == "1":
                idmap["identity"] = True
                continue
            source, sep, target = entry.partition(":")
            if sep:
                if source in idmap["entries"]:
                    raise ValueError(f"duplicate mapping for source '{source}'")
                idmap["entries"][source] = target
            else:
                if idmap["default"]:
                    raise ValueError("default target ID can only be provided once")
                idmap["default"] = source
        if idmap["identity"] and (idmap["default"] or idmap["entries"]):
            raise ValueError("identity mapping cannot be combined with other mappings")
    except ValueError as exc:
        raise ParameterError({param: f"failed to parse {what}: {exc}"}) from None
    return idmap


def mapped(idmap: dict, source: str) -> str:
    if idmap["identity"]:
        return source
    return idmap["entries"].get(source) or idmap["default"] or source


def _fingerprint(der: bytes) -> str:
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


class RemoteClient:
    """PVE's API client towards ``target-endpoint``: the certificate must carry the pinned
    fingerprint (no other trust: the simulator's certificates are its own CA's)."""

    def __init__(self, host: str, port: int, apitoken: str, fingerprint: str | None) -> None:
        self.host, self.port, self.apitoken = host, port, apitoken
        self.fingerprint = (fingerprint or "").upper() or None
        netloc = f"[{host}]" if ":" in host else host
        self.base = f"https://{netloc}:{port}/api2/json"

    def _refused(self, reason: str = "Connection refused") -> PveError:
        return PveError(f"Can't connect to {self.host}:{self.port} ({reason})")

    async def verify(self) -> None:
        if not reachable(self.base):
            raise self._refused()
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise self._refused(
                "Connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc)
            ) from None
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        seen = _fingerprint(der)
        if seen != self.fingerprint:
            raise PveError(f"fingerprint '{seen}' not verified, abort!")

    async def call(self, method: str, path: str, data: dict | None = None, headers=None):
        await self.verify()
        # the certificate was checked against the pin on a connection of its own just now
        async with httpx.AsyncClient(verify=False, timeout=60) as client:
            try:
                response = await client.request(
                    method,
                    self.base + path,
                    data=data if method != "GET" else None,
                    params=data if method == "GET" else None,
                    headers={"Authorization": self.apitoken, **(headers or {})},
                )
            except httpx.HTTPError as exc:
                raise self._refused(str(exc) or exc.__class__.__name__) from None
        return response

    async def get_data(self, method: str, path: str, data: dict | None = None):
        response = await self.call(method, path, data)
        if response.status_code != 200:
            # the client's exception: the status message and the parameter errors, if any
            try:
                errors = response.json().get("errors") or {}
            except ValueError:
                errors = {}
            details = "".join(f"\n{key}: {value}" for key, value in sorted(errors.items()))
            raise PveError(response.reason_phrase + details)
        return response.json()["data"]


def client_for(payload: dict) -> RemoteClient:
    return RemoteClient(
        payload["host"], payload["port"], payload["apitoken"], payload.get("fingerprint")
    )


async def remote_migrate(
    rt, principal: Principal, kind: str, node: str, vmid: int, params: dict
) -> str:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
        sid = f"{'vm' if kind == rules.QEMU else 'ct'}:{vmid}"
        ha_managed = await ha_repo.resource(conn, sid) is not None
        replicated = any(job["vmid"] == vmid for job in await replication_repo.jobs(conn))
    if row["config"].get("lock"):
        raise PveError(f"{rules.noun(kind)} is locked ({row['config']['lock']})")
    running = row["status"] != rules.STOPPED
    if kind == rules.LXC:
        if running and not (params.get("online") or params.get("restart")):
            raise PveError("can't migrate running container without --online or --restart")
        if ha_managed:
            raise ParameterError({"vmid": "cannot migrate HA-managed CT to remote cluster"})
    elif ha_managed:
        raise ParameterError({"vmid": "cannot remote-migrate VM that is configured for HA"})

    remote = split(NAMED_FORMATS["proxmox-remote"], params["target-endpoint"])
    endpoint = {
        "host": remote["host"],
        "port": int(remote.get("port") or DEFAULT_PORT),
        "apitoken": remote["apitoken"],
        "fingerprint": remote.get("fingerprint"),
    }
    client = client_for(endpoint)
    await client.verify()
    if kind == rules.QEMU:
        if replicated:
            raise PveError("cannot remote-migrate replicated VM")
        if running and not params.get("online"):
            raise PveError("can't migrate running VM without --online")
    storagemap = parse_idmap(params.get("target-storage"), "target-storage", "storage map")
    bridgemap = parse_idmap(params.get("target-bridge"), "target-bridge", "bridge map")
    if storagemap["identity"]:
        raise PveError("remote migration requires explicit storage mapping!")
    status = await client.get_data("GET", "/cluster/status")
    target_node = next(
        (e["name"] for e in status if e.get("type") == "node" and e.get("local")), None
    )
    if target_node is None:
        raise PveError("couldn't determine endpoint's node name")

    async with rt.pool.acquire() as conn, conn.transaction():
        row = await guest_repo.get(conn, vmid, for_update=True)
        if row is None or row["node"] != node:
            raise PveError(f"{rules.noun(kind)} {vmid} moved away")
        if row["config"].get("lock"):
            raise PveError(f"{rules.noun(kind)} is locked ({row['config']['lock']})")
        await guest_repo.save_config(conn, row, {**row["config"], "lock": "migrate"})
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=TASK_TYPES[kind],
            task_id=str(vmid),
            principal=principal,
            payload={
                "executor": EXECUTOR,
                "kind": kind,
                "vmid": vmid,
                "target_vmid": int(params.get("target-vmid") or vmid),
                "target_node": target_node,
                **endpoint,
                "storagemap": storagemap,
                "bridgemap": bridgemap,
                "delete": bool(params.get("delete")),
            },
            lock=lock_name(kind, vmid),
        )


async def open_remote_tunnel(payload: dict, config: dict, log) -> None:
    """What the migration does on the target: reserve the guest and connect its tunnel.
    Raises PveError as soon as a step fails (the websocket upgrade always does)."""
    kind, client = payload["kind"], client_for(payload)
    storages = sorted(
        {
            mapped(payload["storagemap"], volid.split(":", 1)[0])
            for _key, volid in rules.disk_volumes(kind, config)
            if ":" in volid
        }
    )
    bridges = sorted({mapped(payload["bridgemap"], b) for _k, b in rules.bridges(kind, config)})
    base = f"/nodes/{payload['target_node']}/{kind}/{payload['target_vmid']}"
    await log(f"Establishing API connection with remote at '{payload['host']}'")
    try:
        tunnel = await client.get_data(
            "POST",
            f"{base}/mtunnel",
            {"storages": ",".join(storages), "bridges": ",".join(bridges)},
        )
    except PveError as exc:
        raise PveError(f"failed to start remote tunnel - {exc.message}") from None
    await log(f"remote: started migration tunnel worker '{tunnel['upid']}'")
    key = base64.b64encode(os.urandom(16)).decode()
    response = await client.call(
        "GET",
        f"{base}/mtunnelwebsocket",
        {"socket": tunnel["socket"], "ticket": tunnel["ticket"]},
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": key,
        },
    )
    if response.status_code != 101:
        raise PveError(
            "failed to connect websocket tunnel - "
            f"{response.status_code} {response.reason_phrase}: no websocket upgrade"
        )
