"""Ceph reads that describe the daemons rather than change them: service metadata, an
OSD's metadata and logical volume, the config database, ``ceph.conf`` values, the
cluster log, the "is it safe to stop/destroy" check and the pre-7.0 disk list.

All of them are derived from the one cluster state of ``ceph_cluster_service``,
so a created OSD, monitor or MDS shows up here as soon as its task ends.
"""

from __future__ import annotations

import re
import uuid

from proxmox_simulator.domain import ceph_cluster_service as cluster
from proxmox_simulator.domain import ceph_health, disk_service
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import inventory

CEPH_RELEASE = "squid"
CEPH_BUILD = "c3e8a5e2f6c41d2b8f2a1f5b7d0e9c4a3b2d1e0f"
VERSION_LONG = f"ceph version {cluster.CEPH_VERSION} ({CEPH_BUILD}) {CEPH_RELEASE} (stable)"
# OSDs of the seed predate the simulation; their volumes carry this creation time.
SEED_CREATED = "2025-01-01 00:00:00 +0000"
DAEMON_MEMORY_KB = {"mon": 512 * 1024, "mgr": 384 * 1024, "mds": 256 * 1024, "osd": 1562500}
LOG_DEFAULT_LIMIT = 50


def _versions() -> dict:
    return {
        "ceph_release": CEPH_RELEASE,
        "ceph_version": VERSION_LONG,
        "ceph_version_short": cluster.CEPH_VERSION,
    }


def _daemon(kind: str, name: str, host: str, addr: str) -> dict:
    return {
        "name": name,
        "hostname": host,
        "addr": addr,
        **_versions(),
        "mem_total_kb": DAEMON_MEMORY_KB[kind],
        "mem_swap_kb": 0,
    }


def _osd_ip(nodes: dict, osd: dict) -> str:
    return nodes[osd["host"]]["ip"] if osd["host"] in nodes else "127.0.0.1"


def _osd_metadata(osdid: str, osd: dict, ip: str) -> dict:
    dev = osd["dev"].removeprefix("/dev/")
    return {
        "id": int(osdid),
        "hostname": osd["host"],
        "front_addr": f"[v2:{ip}:6802/0,v1:{ip}:6803/0]",
        "back_addr": f"[v2:{ip}:6804/0,v1:{ip}:6805/0]",
        "hb_front_addr": f"[v2:{ip}:6808/0,v1:{ip}:6809/0]",
        "hb_back_addr": f"[v2:{ip}:6806/0,v1:{ip}:6807/0]",
        "devices": dev,
        "osd_data": f"/var/lib/ceph/osd/ceph-{osdid}",
        "osd_objectstore": "bluestore",
        **_versions(),
        "mem_total_kb": DAEMON_MEMORY_KB["osd"],
        "mem_swap_kb": 0,
    }


async def _nodes(rt) -> dict[str, dict]:
    async with rt.pool.acquire() as conn:
        return {n["node"]: n for n in await inventory.nodes(conn)}


async def metadata(rt, scope: str) -> dict:
    """``/cluster/ceph/metadata``: the installed versions per node, and (scope ``all``) the
    metadata of every monitor, manager, MDS (keyed ``<id>@<host>``) and OSD."""
    nodes = await _nodes(rt)
    parts = cluster.CEPH_VERSION.split(".")
    out: dict = {
        "node": {
            name: {
                "version": {"str": cluster.CEPH_VERSION, "parts": parts},
                "buildcommit": CEPH_BUILD,
            }
            for name in sorted(nodes)
        }
    }
    if scope == "versions":
        return out
    state = await cluster.read_state(rt)
    out["mon"] = {
        f"{name}@{name}": _daemon(
            "mon", name, name, f"[v2:{mon['addr'].rsplit(':', 1)[0]}:3300/0,v1:{mon['addr']}/0]"
        )
        for name, mon in sorted(state["mons"].items())
    }
    out["mgr"] = {
        f"{name}@{name}": _daemon(
            "mgr", name, name, f"{nodes[name]['ip']}:0/0" if name in nodes else ""
        )
        for name in sorted(state["mgrs"])
    }
    out["mds"] = {
        f"{name}@{mds['host']}": _daemon("mds", name, mds["host"], mds["addr"])
        for name, mds in sorted(state.get("mds", {}).items())
    }
    out["osd"] = [
        _osd_metadata(i, osd, _osd_ip(nodes, osd))
        for i, osd in sorted(state["osds"].items(), key=lambda item: int(item[0]))
    ]
    return out


def _node_osd(state: dict, node: str, osdid: int) -> dict | None:
    osd = state["osds"].get(str(osdid))
    return osd if osd is not None and osd["host"] == node else None


async def osd_metadata(rt, node: str, osdid: int) -> dict:
    """``…/osd/{osdid}/metadata``: PVE refuses an OSD that runs on another host."""
    await cluster.require_ceph_node(rt, node)
    state = await cluster.read_state(rt)
    osd = _node_osd(state, node, osdid)
    if osd is None:
        raise PveError(f"OSD '{osdid}' does not exists on host '{node}'")
    ip = _osd_ip(await _nodes(rt), osd)
    meta = _osd_metadata(str(osdid), osd, ip)
    size = cluster.OSD_SIZE
    return {
        "osd": {
            **{k: meta[k] for k in ("hostname", "id", "osd_data", "osd_objectstore")},
            **{k: meta[k] for k in ("front_addr", "back_addr", "hb_front_addr", "hb_back_addr")},
            "version": f"{cluster.CEPH_VERSION} ({CEPH_RELEASE})",
            # A stopped OSD has no process: systemd reports no PID and no memory.
            "pid": 4000 + osdid if osd["up"] else None,
            "mem_usage": DAEMON_MEMORY_KB["osd"] * 1024 if osd["up"] else 0,
        },
        "devices": [
            {
                "device": "block",
                "dev_node": f"/dev/dm-{osdid}",
                "physical_device": meta["devices"],
                "size": size,
                "support_discard": 1,
                "type": osd.get("class", "nvme"),
            }
        ],
    }


async def osd_lv_info(rt, node: str, osdid: int, kind: str) -> dict:
    """``ceph-volume lvm list`` of the OSD: every OSD here has only its ``block`` volume."""
    await cluster.require_ceph_node(rt, node)
    state = await cluster.read_state(rt)
    osd = _node_osd(state, node, osdid)
    if osd is None:
        raise PveError(
            f"OSD '{osdid}' not found in 'ceph-volume lvm list' on node '{node}'.\n"
            "Maybe it was created before LVM became the default?"
        )
    if kind != "block":
        raise PveError(f"volume type '{kind}' not found for OSD {osdid}")
    lv_uuid = uuid.uuid5(uuid.NAMESPACE_OID, f"{state['fsid']}/osd.{osdid}/{osd['dev']}")
    vg = f"ceph-{uuid.uuid5(uuid.NAMESPACE_OID, f'{state["fsid"]}/vg/{osd["host"]}{osd["dev"]}')}"
    lv = f"osd-block-{lv_uuid}"
    return {
        "creation_time": osd.get("created", SEED_CREATED),
        "lv_name": lv,
        "lv_path": f"/dev/{vg}/{lv}",
        "lv_size": cluster.OSD_SIZE,
        "lv_uuid": str(lv_uuid),
        "vg_name": vg,
    }


async def config_db(rt, node: str) -> list[dict]:
    """``ceph config dump``. PVE writes no option into the config database except when it
    creates a cluster's monitors: it turns insecure global-id reclaim off for them."""
    await cluster.require_ceph_node(rt, node)
    state = await cluster.read_state(rt)
    if not state["mons"]:
        return []
    return [
        {
            "section": "mon",
            "name": "auth_allow_insecure_global_id_reclaim",
            "value": "false",
            "level": "advanced",
            "can_update_at_runtime": 1,
            "mask": "",
        }
    ]


def _parse_conf(text: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif current is not None and "=" in line:
            key, _eq, value = line.partition("=")
            current[key.strip()] = value.strip()
    return sections


def _norm(name: str) -> str:
    return re.sub(r"[ _]+", "-", name.strip())


async def config_values(rt, node: str, keys: str) -> dict:
    """``cfg/value``: the asked ``section:key`` pairs of ceph.conf that are set, section and
    key spelled with hyphens (``mon_host`` and ``mon host`` are the same key)."""
    await cluster.require_ceph_node(rt, node)
    conf = {
        _norm(section): {_norm(k): v for k, v in options.items()}
        for section, options in _parse_conf(await cluster.ceph_conf(rt)).items()
    }
    out: dict = {}
    for pair in re.split(r"[;, ]", keys):
        section, _colon, key = pair.partition(":")
        section, key = _norm(section), _norm(key)
        if key in conf.get(section, {}):
            out.setdefault(section, {})[key] = conf[section][key]
    return out


async def cluster_log(rt, node: str, start: int | None, limit: int | None) -> tuple[list, int]:
    """``/var/log/ceph/ceph.log`` read the way PVE reads log files: numbered from 1,
    ``limit`` lines (50 by default) from ``start``, and "no content" when empty."""
    await cluster.require_ceph_node(rt, node)
    lines = (await cluster.read_state(rt)).get("log", [])
    start = start or 0
    limit = limit or LOG_DEFAULT_LIMIT
    window = [{"n": n, "t": t} for n, t in enumerate(lines, 1)][start : start + limit]
    if not lines:
        window = [{"n": 0, "t": "no content"}]
    return window, len(lines)


async def cmd_safety(rt, node: str, service: str, daemon_id: str, action: str) -> dict:
    """Whether stopping or destroying a daemon keeps the cluster available, as Ceph's
    ``ok-to-stop`` / ``safe-to-destroy`` / ``ok-to-rm`` answer it for the state."""
    await cluster.require_ceph_node(rt, node)
    safe, status = ceph_health.safety(await cluster.read_state(rt), service, daemon_id, action)
    return {"safe": int(safe), "status": status}


async def osd_disks(rt, node: str, kind: str | None) -> list[dict]:
    """Pre-7.0 ``ceph/disks``: the node's disks with ``dev`` set; ``unused`` keeps the
    unused ones, ``journal_disks`` the GPT disks carrying no OSD."""
    await cluster.require_ceph_node(rt, node)
    out = []
    for disk in await disk_service.list_disks(rt, node, {}):
        if kind == "unused" and disk.get("used"):
            continue
        if kind == "journal_disks" and (disk["osdid"] >= 0 or not disk["gpt"]):
            continue
        out.append({**disk, "dev": disk["devpath"]})
    return out
