"""The corosync configuration: member nodes, join information, totem settings,
the join API version, adding and removing members, and joining this node to
another cluster; a standalone node has no corosync.conf.

Per-member corosync settings other than the node's address (votes, extra
links) are kept in the node's ``corosync`` setting.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re

from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.inventory_service import fingerprint
from proxmox_simulator.repositories import firewall as firewall_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import node_system as node_repo
from proxmox_simulator.repositories import resources as resources_repo
from proxmox_simulator.tasks.service import enqueue

JOIN_API_VERSION = 1
# The oldest joining node's API version this cluster still accepts (PVE's JOIN_API_AGE).
JOIN_API_AGE = 1
_SETTING = "corosync"
_LINK = re.compile(r"^link(\d+)$")


def local_node(nodes) -> str:
    """The node this API runs on: the first member (lowest node ID), whatever
    the names of members added later."""
    return min(nodes, key=lambda n: n["nodeid"])["node"]


async def _members(conn):
    cluster = await inventory.cluster(conn)
    if cluster is None or not cluster["name"]:
        raise PveError("unable to read file '/etc/pve/corosync.conf' - No such file or directory")
    return cluster, await inventory.nodes(conn)


def _totem(cluster) -> dict:
    return {
        "cluster_name": cluster["name"],
        "config_version": str(cluster["config_version"]),
        "interface": {"0": {"linknumber": "0"}},
        "ip_version": "ipv4-6",
        "link_mode": "passive",
        "secauth": "on",
        "version": "2",
    }


def _entry(node, extra: dict) -> dict:
    entry = {
        "node": node["node"],
        "name": node["node"],
        "nodeid": str(node["nodeid"]),
        "quorum_votes": str(extra.get("quorum_votes", 1)),
        "ring0_addr": node["ip"],
    }
    for number, address in sorted(extra.get("links", {}).items()):
        entry[f"ring{number}_addr"] = address
    return entry


async def _nodelist(conn) -> list[dict]:
    _cluster, nodes = await _members(conn)
    extras = await node_repo.settings_by_node(conn, _SETTING)
    return [_entry(n, extras.get(n["node"], {})) for n in nodes]


async def config_nodes(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return await _nodelist(conn)


async def totem(rt) -> dict:
    async with rt.pool.acquire() as conn:
        cluster, _nodes = await _members(conn)
    return _totem(cluster)


async def join_info(rt, preferred: str | None) -> dict:
    async with rt.pool.acquire() as conn:
        cluster, nodes = await _members(conn)
    names = [n["node"] for n in nodes]
    if preferred and preferred not in names:
        raise PveError(f"no node '{preferred}' in the cluster")
    async with rt.pool.acquire() as conn:
        members = {e["node"]: e for e in await _nodelist(conn)}
    nodelist = [
        {
            "name": n["node"],
            "nodeid": n["nodeid"],
            "pve_addr": n["ip"],
            "pve_fp": fingerprint(n["node"]),
            "quorum_votes": int(members[n["node"]]["quorum_votes"]),
            "ring0_addr": n["ip"],
        }
        for n in nodes
    ]
    digest = hashlib.sha1(f"{cluster['name']}:{cluster['config_version']}".encode()).hexdigest()
    return {
        "config_digest": digest,
        "nodelist": nodelist,
        "preferred_node": preferred or names[0],
        "totem": _totem(cluster),
    }


async def qdevice(rt) -> dict:
    async with rt.pool.acquire() as conn:
        await _members(conn)
    return {}  # no QDevice is configured in a simulated cluster


# -- membership changes -----------------------------------------------------------


def _links(params: dict) -> dict[int, str]:
    """``linkN`` property strings → {N: address}; the address is the default key."""
    links = {}
    for name, value in params.items():
        match = _LINK.match(name)
        if not match or value is None:
            continue
        address = None
        for part in str(value).split(","):
            key, sep, val = part.partition("=")
            if not sep:
                address = key
            elif key == "address":
                address = val
        if not address:
            raise ParameterError({name: "missing link address"})
        links[int(match.group(1))] = address
    return links


def corosync_conf(cluster, members: list[dict]) -> str:
    """corosync.conf as PVE writes it, from the member list and totem settings."""
    lines = ["logging {", "  debug: off", "  to_syslog: yes", "}", "", "nodelist {"]
    for member in members:
        lines.append("  node {")
        lines.append(f"    name: {member['name']}")
        lines.append(f"    nodeid: {member['nodeid']}")
        lines.append(f"    quorum_votes: {member['quorum_votes']}")
        for key in sorted(k for k in member if k.startswith("ring")):
            lines.append(f"    {key}: {member[key]}")
        lines.append("  }")
    lines += ["}", "", "quorum {", "  provider: corosync_votequorum", "}", "", "totem {"]
    totem = _totem(cluster)
    for key in ("cluster_name", "config_version"):
        lines.append(f"  {key}: {totem[key]}")
    lines += ["  interface {", "    linknumber: 0", "  }"]
    for key in ("ip_version", "link_mode", "secauth", "version"):
        lines.append(f"  {key}: {totem[key]}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def authkey(cluster_name: str) -> str:
    """The cluster's corosync authkey (128 bytes, stable per cluster name), base64."""
    key = b"".join(
        hashlib.sha256(f"pvesim-authkey:{cluster_name}:{i}".encode()).digest() for i in range(4)
    )
    return base64.b64encode(key).decode()


async def add_node(rt, node: str, params: dict) -> dict:
    """``POST /cluster/config/nodes/{node}``: what a cluster member does for a joining node.

    The new member is modelled on the local node's hardware and is online once
    added: the joining side (outside the simulation) finishes its part at once.
    """
    apiversion = params.get("apiversion")
    if apiversion is not None and int(apiversion) < JOIN_API_AGE:
        raise PveError(
            f"unsupported old API version on joining node ({apiversion}, cluster node has "
            f"{JOIN_API_VERSION}), please upgrade before joining"
        )
    links = _links(params)
    address = links.pop(0, None) or params.get("new_node_ip")
    if not address:
        raise ParameterError(
            {"link0": "no IP address given for the new node (link0 or new_node_ip)"}
        )
    force = bool(int(params.get("force") or 0))
    async with rt.pool.acquire() as conn, conn.transaction():
        cluster, nodes = await _members(conn)
        by_name = {n["node"]: n for n in nodes}
        requested_id = params.get("nodeid")
        for other in nodes:
            if other["node"] == node:
                continue
            if requested_id is not None and other["nodeid"] == int(requested_id):
                raise PveError(f"Node ID {requested_id} already used by '{other['node']}'")
            if other["ip"] == address:
                raise PveError(f"corosync: address '{address}' already used by '{other['node']}'")
        if node in by_name:
            if not force:
                raise PveError(f"Node '{node}' already exists in the cluster")
            await _require_no_guests(conn, node)
            await inventory.delete_node(conn, node)
        used = {n["nodeid"] for n in nodes if n["node"] != node}
        nodeid = (
            int(requested_id)
            if requested_id is not None
            else next(i for i in range(1, len(used) + 2) if i not in used)
        )
        await inventory.insert_node(
            conn,
            node=node,
            nodeid=nodeid,
            ip=address,
            like=next(n for n in nodes if n["node"] == local_node(nodes)),
            boot_epoch=int(rt.clock.now()),
        )
        votes = params.get("votes")
        extra = {"links": {str(n): a for n, a in links.items()}}
        if votes is not None:
            extra["quorum_votes"] = int(votes)
        await node_repo.put_setting(conn, node, _SETTING, extra)
        await inventory.bump_config_version(conn)
        cluster = await inventory.cluster(conn)
        members = await _nodelist(conn)
    warnings = []
    if votes is not None and int(votes) == 0:
        warnings.append(f"node '{node}' has no quorum votes")
    return {
        "corosync_authkey": authkey(cluster["name"]),
        "corosync_conf": corosync_conf(cluster, members),
        "warnings": warnings,
    }


async def _require_no_guests(conn, node: str) -> None:
    hosted = [g["vmid"] for g in await guest_repo.list_all(conn, node)]
    if hosted:
        listed = ", ".join(map(str, hosted[:10]))
        raise PveError(f"node '{node}' still hosts guests ({listed}); move or remove them first")


async def delete_node(rt, node: str) -> None:
    """``DELETE /cluster/config/nodes/{node}`` (``pvecm delnode``)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        _cluster, nodes = await _members(conn)
        match = next((n for n in nodes if node in (n["node"], n["ip"])), None)
        if match is None:
            raise PveError(f"Node/IP: {node} is not a known host of the cluster.")
        if match["node"] == local_node(nodes):
            raise PveError("Cannot delete myself from cluster!")
        # PVE leaves /etc/pve/nodes/<node> behind, so its guests would still be
        # listed; the simulator keeps guests on member nodes only.
        await _require_no_guests(conn, match["node"])
        await firewall_repo.delete(conn, f"node/{match['node']}")
        await resources_repo.delete_scope(conn, {"node": match["node"]})
        await inventory.delete_node(conn, match["node"])
        await inventory.bump_config_version(conn)


def _joinable_errors(cluster, guests: int) -> list[str]:
    errors = []
    if cluster is not None and cluster["name"]:
        errors += [
            "authentication key '/etc/corosync/authkey' already exists",
            "cluster config '/etc/pve/corosync.conf' already exists",
            "corosync is already running, is this node already in a cluster?!",
        ]
    if guests:
        errors.append("this host already contains virtual guests")
    return errors


async def join(rt, principal: Principal, params: dict) -> str:
    """``POST /cluster/config/join``: join this (standalone) node to another cluster.

    The checks PVE makes before its worker starts are made here; the worker
    then has to reach the peer's API, which the simulator never does (nothing
    leaves the machine), so the join task fails honestly.
    """
    hostname = params["hostname"]
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9.-]+", hostname):
            raise ParameterError({"hostname": "invalid hostname or IP address"}) from None
    _links(params)
    force = bool(int(params.get("force") or 0))
    async with rt.pool.acquire() as conn, conn.transaction():
        cluster = await inventory.cluster(conn)
        nodes = await inventory.nodes(conn)
        errors = _joinable_errors(cluster, len(await guest_repo.list_all(conn, None)))
        if errors and not force:
            # PVE's lines, on one line: a reason phrase cannot carry newlines.
            listed = " ".join(f"* {e}" for e in errors)
            raise PveError(
                f"detected the following error(s): {listed} Check if node may join a cluster failed!"
            )
        return await enqueue(
            conn,
            rt.clock,
            node=local_node(nodes),
            task_type="clusterjoin",
            task_id="",
            principal=principal,
            payload={"hostname": hostname, "fingerprint": params["fingerprint"]},
            lock="cluster-config",
        )
