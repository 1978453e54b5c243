"""Deterministic seed profiles: from one standalone node to 10,000 guests.

The same (profile, seed) always produces the same names, VMIDs, MACs, IPs,
disks and guest-agent interface data, so tests and benchmarks can assert
against them.  Seeding replaces the inventory (nodes, storage, guests, pools,
tasks) and keeps access control (users, tokens, ACLs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import asyncpg

from proxmox_simulator.domain import guests as rules

GIB = 1024**3
MIB = 1024**2
BOOT_EPOCH = 1_735_689_600  # 2025-01-01T00:00:00Z, so uptimes are stable across runs


@dataclass(frozen=True)
class Profile:
    name: str
    nodes: int
    guests: int
    cluster: str | None
    pools: int
    description: str
    lxc_share: float = 0.2
    # What a demo's first sync should show beyond plain guests: VLAN-tagged NICs, a
    # snapshot chain, a replication job and an HA group + resource.
    showcase: bool = False


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("standalone", 1, 4, None, 0, "one node without a cluster"),
        Profile("single", 1, 4, "pvesim", 1, "a one-node cluster"),
        Profile("small", 3, 12, "pvesim", 2, "three nodes, a dozen guests", showcase=True),
        # The smallest cluster with the showcase: what a test repeated per major syncs.
        Profile("pair", 2, 5, "pvesim", 1, "two nodes, five guests", showcase=True),
        # Long enough to disturb a sync midway, a third of `medium`'s NetBox work.
        Profile("compact", 3, 30, "pvesim", 3, "three nodes, 30 guests"),
        Profile("medium", 3, 100, "pvesim", 3, "three nodes, 100 guests"),
        Profile("large", 4, 1000, "pvesim", 4, "four nodes, 1,000 guests"),
        Profile("xlarge", 16, 10000, "pvesim", 8, "sixteen nodes, 10,000 guests"),
        # The benchmark's worst case: one node listing 1,000 QEMU guests.
        Profile("bench-1k", 1, 1000, "pvesim", 0, "one node, 1,000 QEMU guests", lxc_share=0.0),
    )
}

_ROLES = ("web", "db", "app", "cache", "mq", "ci", "proxy", "mon")
_OSTYPES = ("l26", "l26", "l26", "win11")
_TAGS = ("prod", "staging", "dev", "backup")


def node_names(profile: Profile) -> list[str]:
    return (
        ["pve"]
        if profile.nodes == 1 and profile.cluster is None
        else [f"pve{i + 1}" for i in range(profile.nodes)]
    )


def plan(profile: Profile, seed: int) -> dict:
    """Everything the seed inserts, as plain data (no database needed)."""
    rng = random.Random(f"{profile.name}:{seed}")
    names = node_names(profile)
    nodes = [
        {
            "node": name,
            "nodeid": i + 1,
            "ip": f"192.168.100.{11 + i}",
            "cpus": rng.choice((16, 32, 64)),
            "maxmem": rng.choice((128, 256, 512)) * GIB,
            "maxdisk": 100 * GIB,
            "cpu_model": "AMD EPYC 7543P 32-Core Processor",
        }
        for i, name in enumerate(names)
    ]
    storages = [
        {
            "storage": "local",
            "type": "dir",
            "content": "iso,vztmpl,backup",
            "shared": False,
            "path": "/var/lib/vz",
            "total": 100 * GIB,
        },
        {
            "storage": "local-lvm",
            "type": "lvmthin",
            "content": "images,rootdir",
            "shared": False,
            "path": None,
            "total": 2048 * GIB,
        },
    ]
    if profile.cluster:
        storages.append(
            {
                "storage": "shared-nfs",
                "type": "nfs",
                "content": "images,rootdir,iso,backup",
                "shared": True,
                "path": "/mnt/pve/shared-nfs",
                "total": 8192 * GIB,
            }
        )
    pools = [f"pool{i + 1}" for i in range(profile.pools)]
    guests, volumes = [], []
    vmid = 100
    for index in range(profile.guests):
        vmid += 1 if rng.random() < 0.9 else rng.randint(2, 5)
        node_index = index % len(names)
        node = names[node_index]
        kind = rules.LXC if rng.random() < profile.lxc_share else rules.QEMU
        role = rng.choice(_ROLES)
        name = f"{role}-{index + 1:05d}" if profile.guests > 999 else f"{role}-{index + 1:03d}"
        memory = rng.choice((1024, 2048, 4096, 8192))
        cores = rng.choice((1, 2, 4))
        disk_gib = rng.choice((8, 16, 32, 64))
        storage = "shared-nfs" if profile.cluster and rng.random() < 0.3 else "local-lvm"
        ip = f"10.{node_index}.{(index // 250) % 256}.{index % 250 + 2}"
        gateway = f"10.{node_index}.{(index // 250) % 256}.1"
        mac = rules.mac_for(vmid, 0)
        volid = f"{storage}:vm-{vmid}-disk-0"
        tags = ";".join(sorted(rng.sample(_TAGS, rng.randint(0, 2))))
        if kind == rules.QEMU:
            config = {
                "name": name,
                "memory": str(memory),
                "cores": cores,
                "sockets": 1,
                "ostype": rng.choice(_OSTYPES),
                "scsihw": "virtio-scsi-single",
                "scsi0": f"{volid},iothread=1,size={disk_gib}G",
                "net0": f"virtio={mac},bridge=vmbr0,firewall=1",
                "ipconfig0": f"ip={ip}/24,gw={gateway}",
                "agent": "1" if rng.random() < 0.85 else "0",
                "boot": "order=scsi0;net0",
                "vmgenid": f"{rng.getrandbits(128):032x}",
                "smbios1": f"uuid={rng.getrandbits(128):032x}",
            }
        else:
            config = {
                "hostname": name,
                "memory": memory,
                "cores": cores,
                "swap": 512,
                "ostype": "debian",
                "arch": "amd64",
                "rootfs": f"{volid},size={disk_gib}G",
                "net0": f"name=eth0,bridge=vmbr0,hwaddr={mac},ip={ip}/24,gw={gateway}",
                "unprivileged": 1,
            }
        if tags:
            config["tags"] = tags
        running = rng.random() < 0.7
        guests.append(
            {
                "vmid": vmid,
                "type": kind,
                "node": node,
                "name": name,
                "status": rules.RUNNING if running else rules.STOPPED,
                "pool": pools[index % len(pools)] if pools and rng.random() < 0.5 else None,
                "config": config,
                "interfaces": rules.guest_interfaces(kind, config),
                "started_at": BOOT_EPOCH + rng.randint(60, 86400) if running else None,
                "maxmem": memory * MIB,
                "maxdisk": disk_gib * GIB,
                "cpus": cores,
            }
        )
        volumes.append(
            {
                "volid": volid,
                "storage": storage,
                "node": None if storage == "shared-nfs" else node,
                "vmid": vmid,
                "content": "images" if kind == rules.QEMU else "rootdir",
                "format": "raw",
                "size": disk_gib * GIB,
                "ctime": BOOT_EPOCH,
            }
        )
        if index % 5 == 0:
            # A nightly vzdump archive for every fifth guest, on its node's local storage.
            kind_tag, ext = ("qemu", "vma.zst") if kind == rules.QEMU else ("lxc", "tar.zst")
            volumes.append(
                {
                    "volid": f"local:backup/vzdump-{kind_tag}-{vmid}-2025_01_01-02_00_00.{ext}",
                    "storage": "local",
                    "node": node,
                    "vmid": vmid,
                    "content": "backup",
                    "format": ext,
                    "size": disk_gib * GIB // 3,
                    "ctime": BOOT_EPOCH + 7200,
                }
            )
    for node in names:
        volumes.append(
            {
                "volid": "local:iso/debian-12.9.0-amd64-netinst.iso",
                "storage": "local",
                "node": node,
                "vmid": None,
                "content": "iso",
                "format": "iso",
                "size": 663_748_608,
                "ctime": BOOT_EPOCH,
            }
        )
        volumes.append(
            {
                "volid": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                "storage": "local",
                "node": node,
                "vmid": None,
                "content": "vztmpl",
                "format": "tzst",
                "size": 126_322_688,
                "ctime": BOOT_EPOCH,
            }
        )
    # Volume IDs on non-shared storage repeat per node; keep the first (PK is global).
    unique_volumes = list({v["volid"]: v for v in reversed(volumes)}.values())[::-1]
    return {
        "cluster": profile.cluster,
        "nodes": nodes,
        "storages": storages,
        "pools": pools,
        "guests": guests,
        "volumes": unique_volumes,
        **(_showcase(guests, names) if profile.showcase else _NO_SHOWCASE),
    }


_NO_SHOWCASE = {"replication_jobs": [], "ha_groups": [], "ha_resources": [], "snapshots": []}
# Access VLANs of the showcase's tagged NICs (every fourth guest, from the second).
SHOWCASE_VLANS = (10, 20, 30)


def _tag_vlans(guests: list[dict]) -> None:
    for index, guest in enumerate(guests[1::4]):
        config = guest["config"]
        config["net0"] += f",tag={SHOWCASE_VLANS[index % len(SHOWCASE_VLANS)]}"
        guest["interfaces"] = rules.guest_interfaces(guest["type"], config)


def _showcase(guests: list[dict], names: list[str]) -> dict:
    """VLAN tags on every fourth guest's NIC; and the last running QEMU guest of the first
    node replicated to the second node, HA-managed in a group preferring its own node, with
    a chain of two snapshots (the last guest, so tests that act on the first seeded guests
    do not meet an HA-managed one)."""
    _tag_vlans(guests)
    candidates = [
        g
        for g in guests
        if g["type"] == rules.QEMU and g["node"] == names[0] and g["status"] == rules.RUNNING
    ]
    if len(names) < 2 or not candidates:
        return _NO_SHOWCASE
    protected = candidates[-1]
    vmid = protected["vmid"]
    group = f"prefer-{names[0]}"
    return {
        "snapshots": _snapshot_chain(protected),
        "replication_jobs": [
            {
                "id": f"{vmid}-0",
                "vmid": vmid,
                "jobnum": 0,
                "target": names[1],
                "options": {"schedule": "*/15", "comment": "seeded"},
            }
        ],
        "ha_groups": [{"group_id": group, "options": {"nodes": f"{names[0]}:2,{names[1]}:1"}}],
        "ha_resources": [
            {
                "sid": f"vm:{vmid}",
                "type": "vm",
                "vmid": vmid,
                "options": {"group": group, "state": "started"},
            }
        ],
    }


def _snapshot_chain(guest: dict) -> list[dict]:
    """`before-upgrade` ← `after-upgrade` (current), as `qm snapshot` twice would leave them."""
    state = {k: v for k, v in guest["config"].items() if k != "parent"}
    chain = [
        {"name": "before-upgrade", "parent": None, "snaptime": BOOT_EPOCH + 3600},
        {"name": "after-upgrade", "parent": "before-upgrade", "snaptime": BOOT_EPOCH + 7200},
    ]
    guest["config"]["parent"] = chain[-1]["name"]
    return [
        {**snap, "vmid": guest["vmid"], "description": "seeded", "vmstate": False, "config": state}
        for snap in chain
    ]


_WIPE = """
TRUNCATE task_log, task_events, resource_locks, tasks, guest_snapshots, volumes, guests,
         pool_storages, pools, storages, node_network, node_settings, nodes, cluster,
         backup_jobs, ha_resources, ha_groups, firewall_configs,
         guest_agent_state, guest_agent_exec, guest_files, replication_jobs, section_configs,
         idempotency_claims
"""


async def apply(conn: asyncpg.Connection, profile: Profile, seed: int, pve_version: str) -> dict:
    data = plan(profile, seed)
    kversion = "Linux 6.8.12-8-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-8 (2025-01-24T12:32Z)"
    async with conn.transaction():
        await conn.execute(_WIPE)
        await conn.execute("INSERT INTO cluster (id, name) VALUES (1, $1)", data["cluster"])
        await conn.copy_records_to_table(
            "nodes",
            columns=[
                "node",
                "nodeid",
                "ip",
                "online",
                "cpus",
                "maxmem",
                "maxdisk",
                "cpu_model",
                "pve_version",
                "kversion",
                "boot_epoch",
            ],
            records=[
                (
                    n["node"],
                    n["nodeid"],
                    n["ip"],
                    True,
                    n["cpus"],
                    n["maxmem"],
                    n["maxdisk"],
                    n["cpu_model"],
                    f"pve-manager/{pve_version}/simulated",
                    kversion,
                    BOOT_EPOCH,
                )
                for n in data["nodes"]
            ],
        )
        await conn.executemany(
            "INSERT INTO storages (storage, type, content, shared, path, total) VALUES ($1,$2,$3,$4,$5,$6)",
            [
                (s["storage"], s["type"], s["content"], s["shared"], s["path"], s["total"])
                for s in data["storages"]
            ],
        )
        await conn.executemany(
            "INSERT INTO pools (poolid, comment) VALUES ($1, $2)",
            [(p, f"seeded pool {p}") for p in data["pools"]],
        )
        await conn.executemany(
            """INSERT INTO guests (vmid, type, node, name, status, pool, config, interfaces,
                                   started_at, maxmem, maxdisk, cpus)
               VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)""",
            [
                (
                    g["vmid"],
                    g["type"],
                    g["node"],
                    g["name"],
                    g["status"],
                    g["pool"],
                    g["config"],
                    g["interfaces"],
                    g["started_at"],
                    g["maxmem"],
                    g["maxdisk"],
                    g["cpus"],
                )
                for g in data["guests"]
            ],
        )
        await conn.copy_records_to_table(
            "volumes",
            columns=["volid", "storage", "node", "vmid", "content", "format", "size", "ctime"],
            records=[
                (
                    v["volid"],
                    v["storage"],
                    v["node"],
                    v["vmid"],
                    v["content"],
                    v["format"],
                    v["size"],
                    v["ctime"],
                )
                for v in data["volumes"]
            ],
        )
        await conn.executemany(
            "INSERT INTO replication_jobs (id, vmid, jobnum, target, options) VALUES ($1,$2,$3,$4,$5)",
            [
                (j["id"], j["vmid"], j["jobnum"], j["target"], j["options"])
                for j in data["replication_jobs"]
            ],
        )
        await conn.executemany(
            "INSERT INTO ha_groups (group_id, options) VALUES ($1, $2)",
            [(g["group_id"], g["options"]) for g in data["ha_groups"]],
        )
        await conn.executemany(
            "INSERT INTO ha_resources (sid, type, vmid, options) VALUES ($1,$2,$3,$4)",
            [(r["sid"], r["type"], r["vmid"], r["options"]) for r in data["ha_resources"]],
        )
        await conn.executemany(
            """INSERT INTO guest_snapshots (vmid, name, parent, description, snaptime, vmstate,
                                            config) VALUES ($1,$2,$3,$4,$5,$6,$7)""",
            [
                (
                    s["vmid"],
                    s["name"],
                    s["parent"],
                    s["description"],
                    s["snaptime"],
                    s["vmstate"],
                    s["config"],
                )
                for s in data["snapshots"]
            ],
        )
        await conn.execute("ANALYZE guests")
    return {
        "profile": profile.name,
        "seed": seed,
        "cluster": data["cluster"],
        "nodes": len(data["nodes"]),
        "guests": len(data["guests"]),
        "volumes": len(data["volumes"]),
        "replication_jobs": len(data["replication_jobs"]),
        "ha_resources": len(data["ha_resources"]),
        "snapshots": len(data["snapshots"]),
    }
