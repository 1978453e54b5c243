"""The hyper-converged Ceph cluster: monitors, managers, OSDs and pools, and its status.

The seeded cluster runs a monitor and a manager on each of the first three
nodes and one OSD per node on the node's NVMe disk (``/dev/nvme0n1``, which
the node's disk list shows as that OSD's), with the ``.mgr`` pool PVE creates.
The first read stores that seed; every write after it changes the one state
row (``ceph/cluster``), so lists, status and health agree.  OSD and pool
changes run as PVE's worker tasks and take effect when the task ends.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from proxmox_simulator.domain import (
    ceph_fs,
    ceph_health,
    ceph_restart,
    ceph_service,
    disk_service,
    storage_service,
)
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as section_repo
from proxmox_simulator.tasks.service import enqueue

STATE_FILE, STATE_ID = "ceph/cluster", "state"
SEED_OSD_DEVICE = disk_service.SEED_OSD_DEVICE
OSD_SIZE = disk_service.TIB // 2
CEPH_VERSION = "19.2.1"
TASK_EXECUTOR = "ceph"
POOL_DEFAULTS = {"size": 3, "min_size": 2, "pg_num": 128, "crush_rule": 0}
LOG_KEEP = 500  # lines of the cluster log (/var/log/ceph/ceph.log) kept


def _seed(nodes, cluster_name: str | None) -> dict:
    servers = [n["node"] for n in nodes][:3]
    return {
        "fsid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"ceph.{cluster_name or 'pvesim'}")),
        "mons": {n["node"]: {"addr": f"{n['ip']}:6789"} for n in nodes if n["node"] in servers},
        "mgrs": {name: {} for name in servers},
        "mgr_active": servers[0] if servers else None,
        "osds": {
            str(disk_service.seed_osd_id(n)): {
                "host": n["node"],
                "dev": SEED_OSD_DEVICE,
                "in": 1,
                "up": 1,
            }
            for n in nodes
        },
        "pools": {".mgr": {"id": 1, "size": 3, "min_size": 2, "pg_num": 1, "application": "mgr"}},
        "next_pool_id": 2,
    }


async def load_state(conn, *, for_update: bool = False) -> tuple[dict, int]:
    row = await section_repo.section(conn, STATE_FILE, STATE_ID, for_update=for_update)
    if row is None:
        # First use: store the seed, so concurrent first writers agree on it.
        await section_repo.lock_file(conn, STATE_FILE)
        row = await section_repo.section(conn, STATE_FILE, STATE_ID, for_update=for_update)
    if row is None:
        cluster = await inventory.cluster(conn)
        state = _seed(await inventory.nodes(conn), cluster["name"] if cluster else None)
        await section_repo.insert(conn, STATE_FILE, STATE_ID, "ceph", state)
        row = await section_repo.section(conn, STATE_FILE, STATE_ID, for_update=for_update)
    return dict(row["options"]), row["version"]


async def save_state(conn, state: dict, version: int) -> None:
    if await section_repo.update(conn, STATE_FILE, STATE_ID, version, state) is None:
        raise PveError("ceph state changed concurrently, try again")


async def read_state(rt) -> dict:
    async with rt.pool.acquire() as conn, conn.transaction():
        state, _version = await load_state(conn)
    return state


# -- reads ------------------------------------------------------------------------------


async def require_ceph_node(rt, node: str) -> None:
    """Node-scoped reads run on that node in PVE: an unknown node fails its lookup."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)


async def status(rt) -> dict:
    """``ceph status`` as PVE passes it through (the fields its GUI reads)."""
    state = await read_state(rt)
    flags = {f["name"] for f in await ceph_service.list_flags(rt) if f["value"]}
    osds = state["osds"]
    total = OSD_SIZE * sum(1 for o in osds.values() if o["in"])
    used = sum(_pool_used(p) for p in state["pools"].values())
    return {
        "fsid": state["fsid"],
        "health": ceph_health.health(state, flags, rt.clock.now()),
        "quorum_names": sorted(state["mons"]),
        "monmap": {
            "num_mons": len(state["mons"]),
            "mons": [{"name": n, "addr": m["addr"]} for n, m in sorted(state["mons"].items())],
        },
        "mgrmap": {
            "available": state["mgr_active"] is not None,
            "active_name": state["mgr_active"] or "",
            "standbys": [{"name": n} for n in sorted(state["mgrs"]) if n != state["mgr_active"]],
        },
        "osdmap": {
            "num_osds": len(osds),
            "num_up_osds": sum(1 for o in osds.values() if o["up"]),
            "num_in_osds": sum(1 for o in osds.values() if o["in"]),
            "num_remapped_pgs": 0,
        },
        "pgmap": {
            "num_pools": len(state["pools"]),
            "num_pgs": sum(int(p["pg_num"]) for p in state["pools"].values()),
            "bytes_total": total,
            "bytes_used": used,
            "bytes_avail": max(0, total - used),
            "pgs_by_state": [{"state_name": "active+clean", "count": 1}],
        },
        "fsmap": ceph_fs.fsmap(state),
        "servicemap": {"services": {}},
    }


async def list_osds(rt) -> dict:
    """PVE's OSD tree: root ``default`` → hosts → OSDs, plus the OSD map flags."""
    state = await read_state(rt)
    flags = await ceph_service.osd_dump_flags(rt)
    hosts: dict[str, list] = {}
    for osdid, osd in sorted(state["osds"].items(), key=lambda item: int(item[0])):
        hosts.setdefault(osd["host"], []).append(
            {
                "id": int(osdid),
                "name": f"osd.{osdid}",
                "type": "osd",
                "host": osd["host"],
                "status": "up" if osd["up"] else "down",
                "in": int(osd["in"]),
                "crush_weight": round(OSD_SIZE / 2**40, 5),
                "device_class": osd.get("class", "nvme"),
                "osdtype": "bluestore",
                "blfsdev": osd["dev"],
                "total_space": OSD_SIZE,
                "bytes_used": 0,
                "percent_used": 0,
                "version": CEPH_VERSION,
                "leaf": 1,
            }
        )
    children = [
        {"id": -2 - i, "name": host, "type": "host", "children": osds, "leaf": 0}
        for i, (host, osds) in enumerate(sorted(hosts.items()))
    ]
    root = {"id": -1, "name": "default", "type": "root", "children": children, "leaf": 0}
    return {"root": {"leaf": 0, "children": [root]}, "flags": flags}


def _pool_used(pool: dict) -> int:
    return 0  # no guest writes data into the simulated pools


def _pool_entry(name: str, pool: dict) -> dict:
    return {
        "pool": pool["id"],
        "pool_name": name,
        "size": pool["size"],
        "min_size": pool["min_size"],
        "pg_num": pool["pg_num"],
        "pg_autoscale_mode": pool.get("pg_autoscale_mode", "on"),
        "crush_rule": pool.get("crush_rule", 0),
        "crush_rule_name": "replicated_rule",
        "type": "replicated",
        "bytes_used": _pool_used(pool),
        "percent_used": 0,
        "application_metadata": {pool.get("application", "rbd"): {}},
    }


async def list_pools(rt) -> list[dict]:
    state = await read_state(rt)
    return [_pool_entry(n, p) for n, p in sorted(state["pools"].items(), key=lambda i: i[1]["id"])]


async def pool_status(rt, name: str) -> dict:
    """``ceph osd pool get <name> all`` as PVE answers it (the crush rule by name)."""
    state = await read_state(rt)
    if name not in state["pools"]:
        raise PveError(f"pool '{name}' does not exist")
    pool = state["pools"][name]
    application = pool.get("application", "rbd")
    return {
        "id": pool["id"],
        "name": name,
        "size": pool["size"],
        "min_size": pool["min_size"],
        "pg_num": pool["pg_num"],
        "pgp_num": pool["pg_num"],
        "crush_rule": "replicated_rule",
        "pg_autoscale_mode": pool.get("pg_autoscale_mode", "on"),
        "application": application,
        "application_list": [application],
        "fast_read": 0,
        "hashpspool": 1,
        "nodeep-scrub": 0,
        "nodelete": 0,
        "nopgchange": 0,
        "noscrub": 0,
        "nosizechange": 0,
        "use_gmt_hitset": 1,
        "write_fadvise_dontneed": 0,
    }


async def list_monitors(rt) -> list[dict]:
    state = await read_state(rt)
    return [
        {
            "name": name,
            "host": name,
            "addr": mon["addr"],
            "state": "running",
            "rank": rank,
            "quorum": 1,
            "ceph_version_short": CEPH_VERSION,
            "ceph_version": f"ceph version {CEPH_VERSION} squid (stable)",
        }
        for rank, (name, mon) in enumerate(sorted(state["mons"].items()))
    ]


async def list_managers(rt) -> list[dict]:
    state = await read_state(rt)
    return [
        {
            "name": name,
            "host": name,
            "state": "active" if name == state["mgr_active"] else "standby",
            "ceph_version_short": CEPH_VERSION,
        }
        for name in sorted(state["mgrs"])
    ]


async def crush_rules(rt) -> list[dict]:
    # Every pool the simulator creates uses Ceph's default replicated rule.
    await read_state(rt)
    return [{"name": "replicated_rule"}]


async def crush_map(rt) -> str:
    """The decompiled CRUSH map: the default root, a bucket per host, its OSDs."""
    state = await read_state(rt)
    osds = sorted(state["osds"].items(), key=lambda item: int(item[0]))
    lines = ["# begin crush map", "", "# devices"]
    lines += [f"device {i} osd.{i} class {o.get('class', 'nvme')}" for i, o in osds]
    lines += ["", "# types", "type 0 osd", "type 1 host", "type 11 root", "", "# buckets"]
    hosts = sorted({o["host"] for _i, o in osds})
    weight = OSD_SIZE / 2**40
    for index, host in enumerate(hosts):
        mine = [i for i, o in osds if o["host"] == host]
        lines += [f"host {host} {{", f"\tid {-2 - index}", "\talg straw2", "\thash 0"]
        lines += [f"\titem osd.{i} weight {weight:.5f}" for i in mine]
        lines += ["}"]
    lines += ["root default {", "\tid -1", "\talg straw2", "\thash 0"]
    lines += [
        f"\titem {h} weight {weight * sum(1 for _i, o in osds if o['host'] == h):.5f}"
        for h in hosts
    ]
    lines += ["}", "", "# rules", "rule replicated_rule {", "\tid 0", "\ttype replicated"]
    lines += ["\tstep take default", "\tstep chooseleaf firstn 0 type host", "\tstep emit", "}"]
    return "\n".join([*lines, "", "# end crush map", ""])


async def ceph_conf(rt) -> str:
    """/etc/pve/ceph.conf as pveceph writes it, with the monitors of the state."""
    state = await read_state(rt)
    addresses = [m["addr"].rsplit(":", 1)[0] for _n, m in sorted(state["mons"].items())]
    networks = sorted({".".join(a.split(".")[:3]) + ".0/24" for a in addresses})
    conf = state.get("conf", {})
    public = conf.get("public_network") or ",".join(networks)
    cluster_net = conf.get("cluster_network") or public
    lines = [
        "[global]",
        "\tauth_client_required = cephx",
        "\tauth_cluster_required = cephx",
        "\tauth_service_required = cephx",
        f"\tcluster_network = {cluster_net}",
        f"\tfsid = {state['fsid']}",
        f"\tmon_host = {' '.join(addresses)}",
        *[f"\t{key} = {conf[key]}" for key in ("osd_pg_bits", "osd_pgp_bits") if key in conf],
        "\tosd_pool_default_min_size = 2",
        "\tosd_pool_default_size = 3",
        f"\tpublic_network = {public}",
        "",
        "[client]",
        "\tkeyring = /etc/pve/priv/$cluster.$name.keyring",
        "",
    ]
    if state.get("mds"):
        lines += ["[mds]", "\tkeyring = /var/lib/ceph/mds/ceph-$id/keyring", ""]
    for name, mds in sorted(state.get("mds", {}).items()):
        lines += [f"[mds.{name}]", f"\thost = {mds['host']}", "\tmds_standby_for_name = pve"]
        lines += ["\tmds_standby_replay = true"] if mds.get("standby_replay") else []
        lines += [""]
    for name, mon in sorted(state["mons"].items()):
        lines += [f"[mon.{name}]", f"\tpublic_addr = {mon['addr'].rsplit(':', 1)[0]}", ""]
    return "\n".join(lines)


async def scrub(rt, node: str, osdid: int) -> None:
    """``ceph osd [deep-]scrub``: Ceph queues it; there is no state to change here."""
    state = await read_state(rt)
    osd = state["osds"].get(str(osdid))
    if osd is None:
        raise PveError(f"osd.{osdid} does not exist")
    if not osd["up"]:
        raise PveError(f"osd.{osdid} is down")


# -- writes -----------------------------------------------------------------------------


async def set_osd_in(rt, osdid: int, value: bool) -> None:
    """``osd in`` / ``osd out`` answer at once (no worker), as in PVE."""
    async with rt.pool.acquire() as conn, conn.transaction():
        state, version = await load_state(conn, for_update=True)
        osd = state["osds"].get(str(osdid))
        if osd is None:
            raise PveError(f"osd.{osdid} does not exist")
        osd["in"] = int(value)
        await save_state(conn, state, version)


async def _task(rt, principal: Principal, node: str, task_type: str, task_id: str, payload: dict):
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=task_type,
            task_id=task_id,
            principal=principal,
            payload={"executor": TASK_EXECUTOR, "node": node, **payload},
        )


async def create_osd(rt, principal: Principal, node: str, params: dict) -> str:
    dev = str(params["dev"])
    async with rt.pool.acquire() as conn:
        disks = await disk_service.disks(conn, await require_node(conn, node))
    if dev not in disks:
        raise PveError(f"unable to get device info for '{dev}'")
    if disks[dev].get("used"):
        raise PveError(f"device '{dev}' is already in use")
    payload = {"op": "create-osd", "dev": dev, "class": params.get("crush-device-class")}
    return await _task(rt, principal, node, "cephcreateosd", dev.rsplit("/", 1)[-1], payload)


async def destroy_osd(rt, principal: Principal, node: str, osdid: int, cleanup: bool) -> str:
    state = await read_state(rt)
    osd = state["osds"].get(str(osdid))
    if osd is None:
        raise PveError(f"osd.{osdid} does not exist")
    if osd["host"] != node:
        raise PveError(f"OSD osd.{osdid} does not belong to node {node}!")
    if osd["in"]:
        raise PveError("osd is in use (in == 1)")
    if osd["up"]:
        raise PveError("osd is still running (up == 1)")
    payload = {"op": "destroy-osd", "osdid": osdid, "cleanup": cleanup}
    return await _task(rt, principal, node, "cephdestroyosd", str(osdid), payload)


SERVICE_TASKS = {"start": "srvstart", "stop": "srvstop", "restart": "srvrestart"}


async def set_service(rt, principal: Principal, node: str, service: str | None, action: str) -> str:
    """``start``/``stop``/``restart`` of a Ceph service (all of the node's when omitted).

    ``osd.<id>`` and ``mds.<id>`` go up (start, restart) or down (stop) when the task ends.
    """
    state = await read_state(rt)
    if service and service.startswith("osd."):
        osd = state["osds"].get(service.removeprefix("osd."))
        if osd is None or osd["host"] != node:
            raise PveError(f"{service} does not exist on node '{node}'")
    if service and service.startswith("mds."):
        mds = state.get("mds", {}).get(service.removeprefix("mds."))
        if mds is None or mds["host"] != node:
            raise PveError(f"{service} does not exist on node '{node}'")
    payload = {"op": "service", "service": service or "ceph", "running": action != "stop"}
    # PVE names the task after the service, ``ceph`` when none is given.
    return await _task(rt, principal, node, SERVICE_TASKS[action], service or "ceph", payload)


async def init(rt, node: str, params: dict) -> None:
    """``pveceph init`` on a configured cluster keeps fsid, auth and pool defaults (those are
    only written into a new ``[global]``); the networks and PG bits given are written."""
    if params.get("cluster-network") and not params.get("network"):
        raise ParameterError({"cluster-network": "missing property - 'network' is required"})
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        state, version = await load_state(conn, for_update=True)
        conf = state.setdefault("conf", {})
        if params.get("pg_bits"):
            conf["osd_pg_bits"] = conf["osd_pgp_bits"] = int(params["pg_bits"])
        if params.get("network"):
            conf["public_network"] = conf["cluster_network"] = params["network"]
        if params.get("cluster-network"):
            conf["cluster_network"] = params["cluster-network"]
        await save_state(conn, state, version)


async def _set_flags(rt) -> set[str]:
    return {f["name"] for f in await ceph_service.list_flags(rt) if f["value"]}


async def list_health_mutes(rt) -> list[dict]:
    state = await read_state(rt)
    return ceph_health.list_mutes(state, await _set_flags(rt), rt.clock.now())


async def set_health_mute(rt, code: str, params: dict) -> None:
    """``ceph health mute``/``unmute``: synchronous, as a monitor command."""
    async with rt.pool.acquire() as conn, conn.transaction():
        state, version = await load_state(conn, for_update=True)
        ceph_health.set_mute(
            state,
            code,
            bool(int(params["value"])),
            bool(int(params.get("sticky") or 0)),
            params.get("ttl"),
            rt.clock.now(),
        )
        await save_state(conn, state, version)


# The releases PVE offers to install are a table in pve-manager, not cluster state:
# the same on every node of a major.
CEPH_RELEASES = (
    {"release": "reef", "version": "18.2", "available": 1, "is-default": 0, "unsupported": 1},
    {"release": "squid", "version": "19.2", "available": 1, "is-default": 1, "unsupported": 0},
)


async def releases(rt, node: str) -> list[dict]:
    await require_ceph_node(rt, node)
    return [dict(r) for r in CEPH_RELEASES]


async def restart_bulk(rt, principal, node: str, params: dict, *, cluster_wide: bool) -> str:
    """A rolling restart of one daemon type: cluster-wide (``srvrestart cluster-<type>``)
    or of the node's OSDs (noout set around it unless told not to)."""
    kind = params["service-type"]
    if params.get("only-outdated") and kind != "osd":
        raise ParameterError({"only-outdated": "only supported with service-type=osd"})
    payload = {
        "op": "restart-bulk",
        "type": kind,
        "scope": "cluster" if cluster_wide else node,
        "dry_run": bool(int(params.get("dry-run") or 0)),
        "force": bool(int(params.get("force") or 0)),
        "only_outdated": bool(int(params.get("only-outdated") or 0)),
        "set_noout": bool(int(params.get("set-noout", 1))),
    }
    if cluster_wide:
        async with rt.pool.acquire() as conn:
            node = (await inventory.nodes(conn))[0]["node"]
    # The per-node task id is not in the sources read; it is named like the cluster one.
    task_id = f"cluster-{kind}" if cluster_wide else f"node-{kind}"
    return await _task(rt, principal, node, "srvrestart", task_id, payload)


async def list_mds(rt) -> list[dict]:
    return ceph_fs.list_mds(await read_state(rt))


async def list_fs(rt) -> list[dict]:
    return ceph_fs.list_fs(await read_state(rt))


async def create_mds(rt, principal, node: str, name: str | None, hot_standby: bool) -> str:
    mds_id = name or node
    ceph_fs.check_mds_id(mds_id)
    payload = {"op": "create-mds", "mdsid": mds_id, "hotstandby": hot_standby}
    return await _task(rt, principal, node, "cephcreatemds", f"mds.{mds_id}", payload)


async def destroy_mds(rt, principal, node: str, name: str) -> str:
    payload = {"op": "destroy-mds", "mdsid": name}
    return await _task(rt, principal, node, "cephdestroymds", f"mds.{name}", payload)


async def destroy_fs(rt, principal, node: str, name: str, remove_pools: bool) -> str:
    if name not in (await read_state(rt)).get("fs", {}):
        raise PveError(f"no such cephfs '{name}'")
    payload = {"op": "destroy-fs", "name": name, "remove_pools": remove_pools}
    return await _task(rt, principal, node, "cephdestroyfs", name, payload)


async def create_fs(rt, principal, node: str, params: dict) -> str:
    name = params.get("name") or ceph_fs.DEFAULT_FS
    if params.get("add-storage"):
        # Adding the storage needs an active MDS and the storage plugin of a live
        # cluster; the simulator does not pretend it did.
        raise PveError("add-storage is not supported by the simulator; add the storage afterwards")
    ceph_fs.check_create_fs(await read_state(rt), name)
    pg_num = int(params.get("pg_num") or ceph_fs.DEFAULT_FS_PG_NUM)
    payload = {"op": "create-fs", "name": name, "pg_num": pg_num}
    return await _task(rt, principal, node, "cephfscreate", name, payload)


# PVE's storage ids: a letter, then letters, digits and -_. , not ending in one of -_.
_STORAGE_ID = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)


async def create_pool(rt, principal: Principal, node: str, params: dict) -> str:
    name = str(params["name"])
    add_storages = bool(int(params.get("add_storages") or 0))
    if add_storages and not _STORAGE_ID.match(name):
        raise PveError("pool name contains characters which are illegal for storage naming")
    state = await read_state(rt)
    if name in state["pools"]:
        raise PveError(f"pool '{name}' already exists")
    # pveceph's defaults; the autoscaler only warns (Ceph's own default would be "on").
    pool = {
        "size": int(params.get("size") or POOL_DEFAULTS["size"]),
        "min_size": int(params.get("min_size") or POOL_DEFAULTS["min_size"]),
        "pg_num": int(params.get("pg_num") or POOL_DEFAULTS["pg_num"]),
        "application": params.get("application") or "rbd",
        "pg_autoscale_mode": params.get("pg_autoscale_mode") or "warn",
    }
    return await _task(
        rt,
        principal,
        node,
        "cephcreatepool",
        name,
        {"op": "create-pool", "name": name, "pool": pool, "add_storages": add_storages},
    )


async def destroy_pool(rt, principal: Principal, node: str, name: str, params: dict) -> str:
    state = await read_state(rt)
    if name not in state["pools"]:
        raise PveError(f"pool '{name}' does not exist")
    payload = {
        "op": "destroy-pool",
        "name": name,
        "force": bool(int(params.get("force") or 0)),
        "remove_storages": bool(int(params.get("remove_storages") or 0)),
    }
    return await _task(rt, principal, node, "cephdestroypool", name, payload)


async def update_pool(rt, principal: Principal, node: str, name: str, params: dict, *, as_task):
    state = await read_state(rt)
    if name not in state["pools"]:
        raise PveError(f"pool '{name}' does not exist")
    changes = {
        key: (int(params[key]) if key in ("size", "min_size", "pg_num") else params[key])
        for key in ("size", "min_size", "pg_num", "application", "pg_autoscale_mode")
        if params.get(key) not in (None, "")
    }
    payload = {"op": "set-pool", "name": name, "changes": changes}
    if as_task:
        return await _task(rt, principal, node, "cephsetpool", name, payload)
    async with rt.pool.acquire() as conn, conn.transaction():
        _lines, error = await apply(conn, {**payload, "node": node}, rt.clock.now())
    if error:
        raise PveError(error)
    return None


async def create_monitor(rt, principal: Principal, node: str, monid: str | None) -> str:
    monid = monid or node
    state = await read_state(rt)
    if monid in state["mons"]:
        raise PveError(f"monitor '{monid}' already exists")
    payload = {"op": "create-mon", "monid": monid}
    return await _task(rt, principal, node, "cephcreatemon", f"mon.{monid}", payload)


async def destroy_monitor(rt, principal: Principal, node: str, monid: str) -> str:
    state = await read_state(rt)
    if monid not in state["mons"]:
        raise PveError(f"no such monitor id '{monid}'")
    if len(state["mons"]) <= 1:
        raise PveError("can't remove last monitor")
    payload = {"op": "destroy-mon", "monid": monid}
    return await _task(rt, principal, node, "cephdestroymon", f"mon.{monid}", payload)


async def create_manager(rt, principal: Principal, node: str, mgrid: str | None) -> str:
    mgrid = mgrid or node
    state = await read_state(rt)
    if mgrid in state["mgrs"]:
        raise PveError(f"manager '{mgrid}' already exists")
    payload = {"op": "create-mgr", "mgrid": mgrid}
    return await _task(rt, principal, node, "cephcreatemgr", f"mgr.{mgrid}", payload)


async def destroy_manager(rt, principal: Principal, node: str, mgrid: str) -> str:
    state = await read_state(rt)
    if mgrid not in state["mgrs"]:
        raise PveError(f"manager '{mgrid}' does not exist")
    payload = {"op": "destroy-mgr", "mgrid": mgrid}
    return await _task(rt, principal, node, "cephdestroymgr", f"mgr.{mgrid}", payload)


def _cluster_log(state: dict, now: float, lines: list[str]) -> None:
    """Append the change to the cluster log (``ceph.log``), as the monitors record it."""
    log = state.setdefault("log", [])
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+0000")
    leader = min(state["mons"], default="")
    for line in lines:
        state["log_seq"] = state.get("log_seq", 0) + 1
        log.append(f"{stamp} mon.{leader} (mon.0) {state['log_seq']} : cluster [INF] {line}")
    del log[:-LOG_KEEP]


async def _release_pool_storages(conn, payload: dict) -> list[str]:
    """Before a pool goes: refuse while its storages hold guest disks (unless forced),
    and drop the pveceph-managed ones when asked."""
    pool, lines = payload["name"], []
    storages = await storage_service.ceph_pool_storages(conn, pool)
    if not payload.get("force"):
        for storage_id, storage in sorted(storages.items()):
            lines.append(f"checking storage '{storage_id}' for RBD images..")
            if storage["volumes"]:
                raise PveError(f"ceph pool '{pool}' still in use by storage '{storage_id}'")
    if payload.get("remove_storages"):
        for storage_id, storage in sorted(storages.items()):
            if storage["managed"]:  # external clusters are not pveceph's to remove
                await storage_service.remove_storage(conn, storage_id)
                lines.append(f"removed storage '{storage_id}'")
    return lines


def _set_pool(pool: dict, name: str, settings: dict) -> tuple[list[str], str | None]:
    """pveceph's set_pool: ``size`` first (Ceph resets ``min_size`` to its default for the
    new size), then the rest by name; a setting Ceph refuses is reported and skipped, and
    the task fails naming the settings it could not set."""
    keys = [*(["size"] if "size" in settings else []), *sorted(k for k in settings if k != "size")]
    lines, failed = [], []
    for key in keys:
        value = settings[key]
        lines.append(f"pool {name}: applying {key} = {value}")
        if key == "min_size" and not 1 <= int(value) <= int(pool["size"]):
            lines.append(
                "mon_command failed - pool min_size must be between 1 and size, "
                f"which is set to {pool['size']}"
            )
            failed.append(key)
            continue
        pool[key] = value
        if key == "size":
            pool["min_size"] = int(value) - int(value) // 2
    return lines, (f"Could not set: {', '.join(sorted(failed))}" if failed else None)


async def apply(conn, payload: dict, now: float) -> tuple[list[str], str | None]:
    """The worker's effect: the change a Ceph task makes, in its completing transaction.

    Returns the worker's lines and, when it did part of its work and then failed as
    PVE's does (a pool setting Ceph refused), the error the task ends with."""
    state, version = await load_state(conn, for_update=True)
    op, node = payload["op"], payload["node"]
    lines: list[str] = []
    error: str | None = None
    if op == "create-osd":
        osdid = next(i for i in range(len(state["osds"]) + 1) if str(i) not in state["osds"])
        state["osds"][str(osdid)] = {
            "host": node,
            "dev": payload["dev"],
            "in": 1,
            "up": 1,
            "class": payload.get("class") or "hdd",
            "created": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S +0000"),
        }
        await _mark_disk(conn, node, payload["dev"], {"used": "LVM", "osdid": osdid})
        lines.append(f"created OSD osd.{osdid} on {payload['dev']}")
    elif op == "destroy-osd":
        osd = state["osds"].pop(str(payload["osdid"]), None)
        if osd is None:
            raise PveError(f"osd.{payload['osdid']} does not exist")
        if payload.get("cleanup"):
            await _mark_disk(conn, node, osd["dev"], {"used": None, "osdid": None})
        lines.append(f"destroyed osd.{payload['osdid']}")
    elif op == "create-pool":
        if payload["name"] in state["pools"]:
            raise PveError(f"pool '{payload['name']}' already exists")
        settings = dict(payload["pool"])
        pool = state["pools"][payload["name"]] = {
            "id": state["next_pool_id"],
            "pg_num": settings["pg_num"],
            # ``osd pool create`` gives Ceph's defaults; set_pool then applies the rest.
            **{k: POOL_DEFAULTS[k] for k in ("size", "min_size")},
        }
        state["next_pool_id"] += 1
        lines.append(f"pool {payload['name']}: created")
        applied, error = _set_pool(pool, payload["name"], settings)
        lines += applied
        if payload.get("add_storages") and not error:  # PVE's worker died before it
            try:
                await storage_service.add_ceph_pool_storage(conn, payload["name"], payload["name"])
            except PveError as error:
                raise PveError(
                    f"adding PVE storage for ceph pool '{payload['name']}' failed: {error}"
                ) from error
    elif op == "destroy-pool":
        lines += await _release_pool_storages(conn, payload)
        if ceph_fs.pool_user(state, payload["name"]):
            raise PveError(f"mon_command failed - pool '{payload['name']}' is in use by CephFS")
        if state["pools"].pop(payload["name"], None) is None:
            raise PveError(f"pool '{payload['name']}' does not exist")
        lines.append(f"pool '{payload['name']}' removed")
    elif op == "set-pool":
        pool = state["pools"].get(payload["name"])
        if pool is None:
            raise PveError(f"pool '{payload['name']}' does not exist")
        applied, error = _set_pool(pool, payload["name"], payload["changes"])
        lines += applied
    elif op == "create-mon":
        if payload["monid"] in state["mons"]:
            raise PveError(f"monitor '{payload['monid']}' already exists")
        node_row = await inventory.node(conn, node)
        state["mons"][payload["monid"]] = {"addr": f"{node_row['ip']}:6789"}
        lines.append(f"created monitor mon.{payload['monid']}")
    elif op == "destroy-mon":
        if state["mons"].pop(payload["monid"], None) is None:
            raise PveError(f"no such monitor id '{payload['monid']}'")
        lines.append(f"removed monitor mon.{payload['monid']}")
    elif op == "create-mgr":
        state["mgrs"][payload["mgrid"]] = {}
        state["mgr_active"] = state["mgr_active"] or payload["mgrid"]
        lines.append(f"created manager mgr.{payload['mgrid']}")
    elif op == "destroy-mgr":
        state["mgrs"].pop(payload["mgrid"], None)
        if state["mgr_active"] == payload["mgrid"]:
            # A standby takes over, as Ceph fails over to one.
            state["mgr_active"] = min(state["mgrs"], default=None)
        lines.append(f"removed manager mgr.{payload['mgrid']}")
    elif op == "service":
        # OSDs and MDSs are modelled per daemon; other services (mon, mgr, the target) stay up.
        service = payload["service"]
        kind, _dot, daemon_id = service.partition(".")
        daemon = {"osd": state["osds"], "mds": state.get("mds", {})}.get(kind, {}).get(daemon_id)
        if daemon is not None:
            daemon["up"] = int(payload["running"])
        lines.append(f"{'started' if payload['running'] else 'stopped'} {service}")
    elif op == "create-mds":
        node_row = await inventory.node(conn, node)
        addr = f"{node_row['ip']}:{ceph_fs.MDS_PORT}"
        lines.append(
            ceph_fs.create_mds(state, payload["mdsid"], node, addr, bool(payload["hotstandby"]))
        )
    elif op == "destroy-mds":
        lines.append(ceph_fs.destroy_mds(state, payload["mdsid"]))
    elif op == "destroy-fs":
        lines += ceph_fs.destroy_fs(state, payload["name"], bool(payload["remove_pools"]))
    elif op == "restart-bulk":
        lines += await ceph_restart.restart_bulk(conn, state, payload, now, CEPH_VERSION)
    elif op == "create-fs":
        defaults = {k: POOL_DEFAULTS[k] for k in ("size", "min_size")}
        lines += ceph_fs.create_fs(state, payload["name"], defaults, int(payload["pg_num"]))
    _cluster_log(state, now, lines)
    await save_state(conn, state, version)
    return lines, error


async def _mark_disk(conn, node: str, dev: str, changes: dict) -> None:
    await disk_service.apply(conn, node, disk_service.Plan({dev: changes}, [], None, []))
