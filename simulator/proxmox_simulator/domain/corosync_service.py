"""Read views of the corosync configuration: member nodes, join information,
totem settings, the join API version; a standalone node has no corosync.conf."""

from __future__ import annotations

import hashlib

from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.inventory_service import fingerprint
from proxmox_simulator.repositories import inventory

JOIN_API_VERSION = 1


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


async def config_nodes(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        _cluster, nodes = await _members(conn)
    return [
        {
            "node": n["node"],
            "name": n["node"],
            "nodeid": str(n["nodeid"]),
            "quorum_votes": "1",
            "ring0_addr": n["ip"],
        }
        for n in nodes
    ]


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
    nodelist = [
        {
            "name": n["node"],
            "nodeid": n["nodeid"],
            "pve_addr": n["ip"],
            "pve_fp": fingerprint(n["node"]),
            "quorum_votes": 1,
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
