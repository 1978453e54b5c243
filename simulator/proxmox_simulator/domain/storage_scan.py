"""Scans of remote storage servers: ``GET /nodes/{node}/scan/{nfs,cifs,glusterfs,iscsi,pbs}``.

PVE asks the server itself (``showmount``, ``smbclient -L``, ``iscsiadm`` discovery,
the backup server's API).  The simulator's remote servers are the ones its storage
configuration points at, and they offer exactly what those storages use: an NFS
server exports the storages' ``export`` paths (to every client, ``*``), a GlusterFS
server (``server`` or ``server2``) its ``volume``s as ``/<volume>`` (PVE has no gluster
listing either: it runs the same ``showmount`` and keeps the one-component paths as
volume names), a CIFS server
its ``share``s, an iSCSI portal its ``target``s and a backup server the ``datastore``s
of the storages holding those credentials (and, where set, that certificate
fingerprint).  A name no storage uses does not resolve; an address no storage uses
answers nothing, and the scan fails as PVE's command or connection does.
"""

from __future__ import annotations

import ipaddress
import re

from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import inventory

ISCSI_PORT, PBS_PORT = 3260, 8007


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


async def _storages(rt, node: str, *kinds: str) -> list[dict]:
    """The configured storages of ``kinds``, as the scanning node (which must exist) sees them."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        rows = await inventory.storages(conn)
    return [{"storage": r["storage"], **r["options"]} for r in rows if r["type"] in kinds]


def _resolve(server: str, known: list[dict], field: str = "server") -> None:
    """PVE resolves the name first; only names the configuration uses exist here."""
    if not _is_address(server) and all(s.get(field) != server for s in known):
        raise PveError(f"unable to resolve address for server '{server}'")


async def _showmount(rt, node: str, server: str) -> list[str]:
    """The paths ``showmount --exports`` lists for ``server``: its NFS exports and gluster volumes."""
    storages = await _storages(rt, node, "nfs", "glusterfs")
    gluster_names = [{"server": s.get("server2")} for s in storages if s.get("server2")]
    _resolve(server, storages + gluster_names)
    exports = {s["export"] for s in storages if s.get("server") == server and s.get("export")}
    exports |= {
        f"/{s['volume']}"
        for s in storages
        if s.get("volume") and server in (s.get("server"), s.get("server2"))
    }
    if not exports:
        raise PveError(
            f"command '/sbin/showmount --no-headers --exports {server}' failed: exit code 1"
        )
    return sorted(exports)


async def scan_nfs(rt, node: str, server: str) -> list[dict]:
    return [{"path": path, "options": "*"} for path in await _showmount(rt, node, server)]


async def scan_glusterfs(rt, node: str, server: str) -> list[dict]:
    paths = await _showmount(rt, node, server)
    return [{"volname": p[1:]} for p in paths if re.fullmatch(r"/[^\s/]+", p)]


async def scan_cifs(rt, node: str, server: str, username, password, domain) -> list[dict]:
    storages = await _storages(rt, node, "cifs")
    _resolve(server, storages)
    on_server = [s for s in storages if s.get("server") == server]
    if not on_server:
        raise PveError(f"Connection to {server} failed (Error NT_STATUS_CONNECTION_REFUSED)")

    def admits(storage: dict) -> bool:
        if not storage.get("username"):
            return True  # a guest share
        return (
            storage["username"] == username
            and storage.get("password") == password
            and (storage.get("domain") or None) == (domain or None)
        )

    shares = sorted({s["share"] for s in on_server if s.get("share") and admits(s)})
    if not shares:
        raise PveError("session setup failed: NT_STATUS_LOGON_FAILURE")
    return [{"share": share, "description": ""} for share in shares]


def _portal(text: str, default_port: int) -> tuple[str, int]:
    host, _, port = str(text).rpartition(":") if text.count(":") == 1 else (text, "", "")
    return (host, int(port)) if port.isdigit() else (str(text), default_port)


async def scan_iscsi(rt, node: str, portal: str) -> list[dict]:
    storages = await _storages(rt, node, "iscsi", "iscsidirect", "zfs")
    host, port = _portal(portal, ISCSI_PORT)
    known_hosts = [{"server": _portal(s.get("portal", ""), ISCSI_PORT)[0]} for s in storages]
    if not _is_address(host) and all(k["server"] != host for k in known_hosts):
        raise ParameterError({"portal": f"unable to resolve portal address '{portal}'"})
    targets = sorted(
        {
            s["target"]
            for s in storages
            if s.get("target") and _portal(s.get("portal", ""), ISCSI_PORT) == (host, port)
        }
    )
    if not targets:
        raise PveError(
            "command '/usr/bin/iscsiadm --mode discovery --type sendtargets "
            f"--portal {host}:{port}' failed: exit code 4"
        )
    return [{"target": target, "portal": f"{host}:{port}"} for target in targets]


async def scan_pbs(rt, node: str, params: dict) -> list[dict]:
    server, port = params["server"], int(params.get("port") or PBS_PORT)
    storages = [
        s
        for s in await _storages(rt, node, "pbs")
        if s.get("server") == server and int(s.get("port") or PBS_PORT) == port
    ]
    failed = "error fetching datastores - "
    if not storages:
        raise PveError(f"{failed}500 Can't connect to {server}:{port} (Connection refused)")
    fingerprint = str(params.get("fingerprint") or "").upper()
    if any(s.get("fingerprint") and s["fingerprint"].upper() != fingerprint for s in storages):
        raise PveError(f"{failed}500 Can't connect to {server}:{port} (certificate verify failed)")
    username = params["username"]
    stores = sorted(
        {
            s["datastore"]
            for s in storages
            if (s.get("username") or "root@pam") == username
            and s.get("password") == params["password"]
        }
    )
    if not stores:
        raise PveError(f"{failed}401 Unauthorized")
    return [{"store": store} for store in stores]
