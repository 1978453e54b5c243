"""Cluster, node, storage and pool views (application service)."""

from __future__ import annotations

import hashlib
import re

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain import pbs_verification_service as pbs_verification
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.backup_service import archive_kind
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import GIB, require_node, require_pool, uptime
from proxmox_simulator.domain.storage_service import render_config
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,14}$")


def pve_release(version: str) -> dict:
    """``/version`` fields derived from the active contract's PVE version."""
    major_minor = ".".join(version.replace("-", ".").split(".")[:2])
    return {
        "version": version,
        "release": major_minor,
        "repoid": hashlib.sha1(version.encode()).hexdigest()[:16],
    }


def node_release(version: str, adapter) -> dict:
    """What a node reports about the release it runs.

    Every simulated node runs the active contract's release, so these follow a
    runtime hot-swap like ``/version`` does; the ``pve_version``/``kversion``
    columns of ``nodes`` only record what the seed (or join) wrote."""
    return {
        "pveversion": f"pve-manager/{version}/{pve_release(version)['repoid'][:8]}",
        "manager": version,
        "kversion": adapter.kversion,
        "kernel": adapter.kernel_release,
    }


def fingerprint(node: str) -> str:
    digest = hashlib.sha256(f"pvesim:{node}".encode()).digest()
    return ":".join(f"{b:02X}" for b in digest)


# -- cluster --------------------------------------------------------------------


async def cluster_status(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        cluster = await inventory.cluster(conn)
        nodes = await inventory.nodes(conn)
    entries = []
    offline = rt.faults.offline_nodes()
    standalone = cluster is None or cluster["name"] is None
    if not standalone:
        entries.append(
            {
                "type": "cluster",
                "id": "cluster",
                "name": cluster["name"],
                "nodes": len(nodes),
                "quorate": 1 if rt.faults.quorate() else 0,
                "version": cluster["config_version"],
            }
        )
    for index, node in enumerate(nodes):
        entries.append(
            {
                "type": "node",
                "id": f"node/{node['node']}",
                "name": node["node"],
                "ip": node["ip"],
                "local": 1 if index == 0 else 0,
                "nodeid": 0 if standalone else node["nodeid"],
                "online": 1 if node["online"] and node["node"] not in offline else 0,
                "level": "",
            }
        )
    return entries


async def rename_cluster(rt, name: str | None) -> dict:
    """Simulator-only operation: PVE cannot rename a cluster through its API."""
    if name is not None and not _CLUSTER_NAME.match(name):
        raise ParameterError({"clustername": "value does not match the regex pattern"})
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await inventory.set_cluster_name(conn, name)
    return {"name": row["name"], "config_version": row["config_version"]}


async def create_cluster(rt, principal: Principal, clustername: str) -> str:
    """``POST /cluster/config``: turn a standalone node into a one-node cluster."""
    if not _CLUSTER_NAME.match(clustername):
        raise ParameterError({"clustername": "value does not match the regex pattern"})
    async with rt.pool.acquire() as conn, conn.transaction():
        cluster = await inventory.cluster(conn)
        if cluster is not None and cluster["name"]:
            raise PveError("cluster config '/etc/pve/corosync.conf' already exists")
        nodes = await inventory.nodes(conn)
        return await enqueue(
            conn,
            rt.clock,
            node=nodes[0]["node"],
            task_type="clustercreate",
            task_id=clustername,
            principal=principal,
            payload={"clustername": clustername},
            lock="cluster-config",
        )


async def next_vmid(rt, requested: int | None) -> str:
    async with rt.pool.acquire() as conn:
        if requested is not None:
            if await guest_repo.exists(conn, requested):
                raise ParameterError({"vmid": f"VM {requested} already exists"})
            return str(requested)
        return str(await guest_repo.next_free_vmid(conn))


async def cluster_resources(
    rt, state: AccessState, principal: Principal, kind: str | None
) -> list[dict]:
    now = rt.clock.now()
    out: list[dict] = []
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        usage = await inventory.node_usage(conn)
        guests = await guest_repo.resource_rows(conn) if kind in (None, "vm") else []
        guests = rt.status_broadcast.view(guests, now)
        storages = await inventory.storages(conn) if kind in (None, "storage") else []
        used = await inventory.storage_used(conn) if storages else {}
        pools = await inventory.pools(conn) if kind in (None, "pool") else []
    if kind in (None, "node"):
        for node in nodes:
            if not state.has(principal, f"/nodes/{node['node']}", ["Sys.Audit"]):
                continue
            out.append(_node_entry(node, usage.get(node["node"]), now, rt.faults.offline_nodes()))
    for guest in guests:
        if not state.has(principal, f"/vms/{guest['vmid']}", ["VM.Audit"], pool=guest["pool"]):
            continue
        if not guest["broadcast"]:
            # Created since its node's last status broadcast: PVE knows it exists, no more.
            entry = {
                "id": f"{guest['type']}/{guest['vmid']}",
                "type": guest["type"],
                "vmid": guest["vmid"],
                "node": guest["node"],
                "status": "unknown",
            }
            if guest["pool"]:
                entry["pool"] = guest["pool"]
            if guest["tags"]:
                entry["tags"] = guest["tags"]
            out.append(entry)
            continue
        running = guest["status"] != rules.STOPPED
        entry = {
            "id": f"{guest['type']}/{guest['vmid']}",
            "type": guest["type"],
            "vmid": guest["vmid"],
            "name": guest["name"],
            "node": guest["node"],
            "status": "running" if running else "stopped",
            "maxcpu": guest["cpus"],
            "cpu": 0.0125 if running else 0,
            "maxmem": guest["maxmem"],
            "mem": guest["maxmem"] * 2 // 5 if running else 0,
            "maxdisk": guest["maxdisk"],
            "disk": 0,
            "uptime": uptime(guest, now),
            "template": 1 if guest["template"] else 0,
            "netin": 0,
            "netout": 0,
            "diskread": 0,
            "diskwrite": 0,
        }
        if guest["pool"]:
            entry["pool"] = guest["pool"]
        if guest["tags"]:
            entry["tags"] = guest["tags"]
        out.append(entry)
    for storage in storages:
        if not state.has(
            principal,
            f"/storage/{storage['storage']}",
            ["Datastore.Audit", "Datastore.AllocateSpace"],
            any_of=True,
        ):
            continue
        for node in nodes:
            if storage["nodes"] and node["node"] not in storage["nodes"]:
                continue
            disk = used.get((storage["storage"], "" if storage["shared"] else node["node"]), 0)
            out.append(
                {
                    "id": f"storage/{node['node']}/{storage['storage']}",
                    "type": "storage",
                    "storage": storage["storage"],
                    "node": node["node"],
                    "status": "available",
                    "plugintype": storage["type"],
                    "content": storage["content"],
                    "shared": 1 if storage["shared"] else 0,
                    "maxdisk": storage["total"],
                    "disk": disk,
                }
            )
    for pool in pools:
        if state.has(principal, f"/pool/{pool['poolid']}", ["Pool.Audit"]):
            out.append({"id": f"pool/{pool['poolid']}", "type": "pool", "pool": pool["poolid"]})
    return out


def _node_entry(node, usage, now: float, offline: set[str] = frozenset()) -> dict:
    guest_mem = int(usage["guest_mem"]) if usage else 0
    # A fault scenario can take a node down without touching the inventory.
    online = node["online"] and node["node"] not in offline
    return {
        "id": f"node/{node['node']}",
        "type": "node",
        "node": node["node"],
        "status": "online" if online else "offline",
        "maxcpu": node["cpus"],
        "cpu": 0.02 if online else 0,
        "maxmem": node["maxmem"],
        "mem": min(node["maxmem"], 2 * GIB + guest_mem) if online else 0,
        "maxdisk": node["maxdisk"],
        "disk": node["maxdisk"] // 10,
        "uptime": max(0, int(now) - node["boot_epoch"]) if online else 0,
        "level": "",
    }


# -- nodes ------------------------------------------------------------------


async def list_nodes(rt, state: AccessState, principal: Principal) -> list[dict]:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        usage = await inventory.node_usage(conn)
    out = []
    for node in nodes:
        entry = _node_entry(node, usage.get(node["node"]), now, rt.faults.offline_nodes())
        entry["ssl_fingerprint"] = fingerprint(node["node"])
        if not state.has(principal, f"/nodes/{node['node']}", ["Sys.Audit"]):
            # PVE lists every node but hides usage figures without Sys.Audit.
            entry = {
                k: entry[k] for k in ("id", "type", "node", "status", "level", "ssl_fingerprint")
            }
        out.append(entry)
    return out


async def node_status(rt, node_name: str) -> dict:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn:
        node = await require_node(conn, node_name)
        usage = (await inventory.node_usage(conn)).get(node_name)
    entry = _node_entry(node, usage, now)
    release = node_release(rt.contract.version, rt.adapter)
    return {
        "uptime": entry["uptime"],
        "cpu": entry["cpu"],
        "loadavg": ["0.12", "0.10", "0.08"],
        "wait": 0,
        "idle": 0,
        "memory": rt.adapter.node_memory(node["maxmem"], entry["mem"]),
        "swap": {"total": 8 * GIB, "used": 0, "free": 8 * GIB},
        "rootfs": {
            "total": node["maxdisk"],
            "used": entry["disk"],
            "free": node["maxdisk"] - entry["disk"],
            "avail": node["maxdisk"] - entry["disk"],
        },
        "ksm": {"shared": 0},
        "cpuinfo": {
            "cpus": node["cpus"],
            "cores": node["cpus"] // 2 or 1,
            "sockets": 1,
            "model": node["cpu_model"],
            "mhz": "2999.998",
            "hvm": "1",
            "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr",
            "user_hz": 100,
        },
        "kversion": release["kversion"],
        "pveversion": release["pveversion"],
        **rt.adapter.node_status_kernel(release["kversion"]),
    }


def node_network(node) -> list[dict]:
    """The node's /etc/network/interfaces: two NICs, the management bridge on
    the first, and a VLAN-aware guest bridge on the second (derived from the
    node's address, so every seeded node differs deterministically)."""
    octets = node["ip"].split(".")
    gateway = ".".join([*octets[:3], "1"])
    index = node["nodeid"]
    return [
        {
            "iface": "eno1",
            "type": "eth",
            "active": 1,
            "exists": 1,
            "method": "manual",
            "families": ["inet"],
            "priority": 3,
            "autostart": 1,
        },
        {
            "iface": "eno2",
            "type": "eth",
            "active": 1,
            "exists": 1,
            "method": "manual",
            "families": ["inet"],
            "priority": 4,
            "autostart": 1,
        },
        {
            "iface": "vmbr0",
            "type": "bridge",
            "active": 1,
            "autostart": 1,
            "method": "static",
            "families": ["inet"],
            "address": node["ip"],
            "netmask": "24",
            "cidr": f"{node['ip']}/24",
            "gateway": gateway,
            "bridge_ports": "eno1",
            "bridge_stp": "off",
            "bridge_fd": "0",
            "priority": 5,
        },
        {
            "iface": "vmbr1",
            "type": "bridge",
            "active": 1,
            "autostart": 1,
            "method": "static",
            "families": ["inet"],
            "address": f"10.250.{index}.1",
            "netmask": "24",
            "cidr": f"10.250.{index}.1/24",
            "bridge_ports": "eno2",
            "bridge_vlan_aware": 1,
            "bridge_vids": "2-4094",
            "priority": 6,
        },
    ]


# -- storage ----------------------------------------------------------------


async def storage_config(rt, state: AccessState, principal: Principal) -> list[dict]:
    async with rt.pool.acquire() as conn:
        storages = await inventory.storages(conn)
    out = []
    for storage in storages:
        if not state.has(
            principal,
            f"/storage/{storage['storage']}",
            ["Datastore.Audit", "Datastore.AllocateSpace"],
            any_of=True,
        ):
            continue
        out.append(render_config(storage))
    return out


async def node_storage(
    rt, state: AccessState, principal: Principal, node_name: str, params: dict
) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node_name)
        storages = await inventory.storages(conn)
        used = await inventory.storage_used(conn)
    content_filter = params.get("content")
    out = []
    for storage in storages:
        if storage["nodes"] and node_name not in storage["nodes"]:
            continue
        if params.get("storage") and params["storage"] != storage["storage"]:
            continue
        contents = storage["content"].split(",")
        if content_filter and not set(content_filter.split(",")) & set(contents):
            continue
        if not state.has(
            principal,
            f"/storage/{storage['storage']}",
            ["Datastore.Audit", "Datastore.AllocateSpace"],
            any_of=True,
        ):
            continue
        disk = used.get((storage["storage"], "" if storage["shared"] else node_name), 0)
        out.append(
            {
                "storage": storage["storage"],
                "type": storage["type"],
                "content": storage["content"],
                "active": 1,
                "enabled": 1 if storage["enabled"] else 0,
                "shared": 1 if storage["shared"] else 0,
                "total": storage["total"],
                "used": disk,
                "avail": storage["total"] - disk,
                "used_fraction": disk / storage["total"] if storage["total"] else 0,
            }
        )
    return out


async def storage_content(rt, node_name: str, storage_name: str, params: dict) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node_name)
        storage = await inventory.storage(conn, storage_name)
        if storage is None or (storage["nodes"] and node_name not in storage["nodes"]):
            raise PveError(f"storage '{storage_name}' does not exist")
        vmid = params.get("vmid")
        rows = await inventory.volumes(
            conn, storage_name, node_name, params.get("content"), int(vmid) if vmid else None
        )
    out = []
    for row in rows:
        entry = {
            "volid": row["volid"],
            "content": row["content"],
            "format": row["format"],
            "size": row["size"],
            "ctime": row["ctime"],
        }
        if row["vmid"] is not None:
            entry["vmid"] = row["vmid"]
        if row["content"] in ("images", "rootdir"):
            entry["used"] = row["size"] // 4
        if row["content"] == "backup":
            entry["subtype"] = archive_kind(row["format"])
            if row["notes"]:
                entry["notes"] = row["notes"]
            if row["protected"]:
                entry["protected"] = 1
            if verification := pbs_verification.listing_entry(row):
                entry["verification"] = verification
        out.append(entry)
    return out


async def volume_attributes(rt, node_name: str, storage_name: str, volume: str) -> dict:
    volid = volume if ":" in volume else f"{storage_name}:{volume}"
    async with rt.pool.acquire() as conn:
        await require_node(conn, node_name)
        row = await inventory.volume(conn, volid)
        storage = await inventory.storage(conn, storage_name)
    if row is None or row["storage"] != storage_name:
        raise PveError(f"volume '{volid}' does not exist")
    base = storage["path"] or f"/dev/{storage_name}"
    attributes = {
        "path": f"{base}/{volid.split(':', 1)[1]}",
        "size": row["size"],
        "used": row["size"] // 4,
        "format": row["format"],
    }
    if row["notes"]:
        attributes["notes"] = row["notes"]
    if row["protected"]:
        attributes["protected"] = 1
    return attributes


# -- pools ------------------------------------------------------------------


async def list_pools(rt, state: AccessState, principal: Principal) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await inventory.pools(conn)
    return [
        {"poolid": r["poolid"], "comment": r["comment"]}
        for r in rows
        if state.has(principal, f"/pool/{r['poolid']}", ["Pool.Audit"])
    ]


async def get_pool(rt, state: AccessState, principal: Principal, poolid: str) -> dict:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn:
        pool = await require_pool(conn, poolid)
        guests = await guest_repo.list_pool(conn, poolid)
        names = set(await inventory.pool_storages(conn, poolid))
        storages = [s for s in await inventory.storages(conn) if s["storage"] in names]
        nodes = await inventory.nodes(conn)
    members = []
    for guest in guests:
        running = guest["status"] != rules.STOPPED
        members.append(
            {
                "id": f"{guest['type']}/{guest['vmid']}",
                "type": guest["type"],
                "vmid": guest["vmid"],
                "name": guest["name"],
                "node": guest["node"],
                "status": "running" if running else "stopped",
                "maxmem": guest["maxmem"],
                "maxdisk": guest["maxdisk"],
                "maxcpu": guest["cpus"],
                "uptime": uptime(guest, now),
            }
        )
    # PVE lists a pool's storage once per node that has it, like /cluster/resources.
    for storage in storages:
        for node in nodes:
            if storage["nodes"] and node["node"] not in storage["nodes"]:
                continue
            members.append(
                {
                    "id": f"storage/{node['node']}/{storage['storage']}",
                    "type": "storage",
                    "storage": storage["storage"],
                    "node": node["node"],
                    "plugintype": storage["type"],
                    "content": storage["content"],
                    "shared": 1 if storage["shared"] else 0,
                    "status": "available",
                }
            )
    return {"comment": pool["comment"], "members": members}


async def create_pool(rt, poolid: str, comment: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if await inventory.pool(conn, poolid) is not None:
            raise PveError(f"pool '{poolid}' already exists")
        await inventory.insert_pool(conn, poolid, comment)


async def update_pool(rt, poolid: str, params: dict) -> None:
    remove = bool(params.get("delete"))
    listed = [v for v in re.split(r"[,;\s]+", str(params.get("vms") or "")) if v]
    if not all(v.isascii() and v.isdigit() for v in listed):
        raise ParameterError({"vms": "value does not look like a valid VM ID list"})
    vmids = [int(v) for v in listed]
    storages = [s for s in re.split(r"[,;\s]+", str(params.get("storage") or "")) if s]
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_pool(conn, poolid)
        if "comment" in params:
            await inventory.update_pool_comment(conn, poolid, params["comment"] or "")
        for vmid in vmids:
            guest = await guest_repo.get(conn, vmid, for_update=True)
            if guest is None:
                raise PveError(f"no such VM ID '{vmid}'")
            if remove:
                if guest["pool"] == poolid:
                    await guest_repo.set_pool(conn, vmid, None)
            elif guest["pool"] and guest["pool"] != poolid and not params.get("allow-move"):
                raise PveError(f"VM {vmid} belongs already to pool '{guest['pool']}'")
            else:
                await guest_repo.set_pool(conn, vmid, poolid)
        for storage in storages:
            if await inventory.storage(conn, storage) is None:
                raise PveError(f"no such storage '{storage}'")
            if remove:
                await inventory.remove_pool_storage(conn, poolid, storage)
            else:
                await inventory.add_pool_storage(conn, poolid, storage)


async def delete_pool(rt, poolid: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_pool(conn, poolid)
        if await inventory.pool_has_members(conn, poolid):
            raise PveError("pool is not empty")
        await inventory.delete_pool(conn, poolid)
