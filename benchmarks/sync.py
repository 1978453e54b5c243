"""Sync backend benchmark: prints figures, asserts nothing.

Of 100 and 1,000 guests (3 nodes; per guest 2 interfaces, one of them VLAN-tagged,
1 IP address, 2 disks, 2 Proxmox tags, 1 snapshot, 1 vzdump backup; per node 4
network interfaces: 2 NICs in a bond, bridged, the bridge carrying the node's cluster
address, and 2 storages; one backup job; every tenth guest under HA, with PVE 9 HA
rules: per node a node-affinity rule, per two HA guests a resource-affinity rule, as
`sync_floor.ha_layout` lays them out; the SDN of `sync_floor.sdn_layout`: a VLAN and
an EVPN zone, 12 VNets, a subnet each with its gateway and a DHCP range), into a real NetBox: gunicorn serving
NetBox's WSGI app with both plugins (2 workers × 2 threads) on a `pbsync_` database
cloned from the migrated template, dropped afterwards.  gunicorn closes each connection
after its answer (`--netbox-keep-alive 0`, the default here): a kept-alive connection
stays with the worker that accepted it, and which worker accepts the client's 4
connections is chance, so with keep-alive one run may get both workers and the next
put 3 or 4 connections on one (seen here: one floor's workers used 188 and 247 CPU
seconds, the next one's 361 and 119, and it took 35 % longer).  A connection per request
lets each request go to the worker that accepts first.  Per size, in order:

* initial sync (a full run), the no-op resync as a full run (every guest read and
  planned against NetBox's whole state), the no-op resync as the incremental run it is
  after a full run (the change log read, no guest changed);
* change-only resync (incremental): 1 % of the guests (at least 2) changed in the fake
  Proxmox (memory; every other one paused, the others a new disk and a new address), so
  its inventory writes are those objects only;
* with `--latency-compare N`: the no-op resync again with N ms per Proxmox request,
  and its ratio to the no-op resync above;
* in fake mode, the floor (benchmarks/sync_floor.py): the objects the initial sync
  writes (node networks and addresses, VMs and their components, records) written
  straight to NetBox's REST API with plain httpx, in the backend's chunks (100) and
  concurrency (4), into a site and cluster of its own; the initial sync's wall time is
  printed as a ratio to it.  A floor write NetBox refuses ends the run (exit 1), no
  ratio;
* with `--rounds N`, N-1 more pairs of an initial sync (into an endpoint, site, cluster
  and addresses of its own) and a floor, the floor first in every other round; the
  ratio printed is the rounds' summed sync time over their summed floor time, with each
  round's beside it.  On a machine whose speed drifts over minutes (a shared host), one
  pair's ratio says little; alternating pairs weigh the drift on both sides.
  `--initial-only` leaves out the resync phases.

The phases keep their baseline in Redis (PROXBOX_REDIS_URL), as `proxbox-sync run` does.

Every sync runs in a spawned child process that loads the backend and the fake
Proxmox but not Django, so its peak RSS (VmHWM) is the backend's own; the child
answers the figures over multiprocessing's pipe.

The Proxmox side is a deterministic in-process fake (httpx.MockTransport) that answers
the reads the sync makes, with zero latency unless `--proxmox-latency-ms N`: an async
handler that sleeps N ms first, and at zero latency still suspends each request once,
as a network read does.  `--proxmox simulator` syncs a real simulator
process instead, seeded with the size's profile (100: `medium`, 1,000: `large`; one
size per run, no floor: the profile's guests are not the fake's shape).
Each size gets its own endpoint, site and address range.

Printed per size and phase: wall time, NetBox requests (total and per guest),
inventory writes (objects created/updated/deleted) and by type, Proxmox requests,
the child's peak RSS, and the CPU seconds each side used: the client (the backend's
child process, or the floor's httpx), NetBox (gunicorn's arbiter and workers, and each
worker's share: how gunicorn spread the client's connections) and PostgreSQL (every
`postgres` process, the machine's whole server); then a markdown table of them.
`--profile DIR` writes a cProfile file of each sync run's child into DIR.  `--prefixes`
switches the endpoints' opt-in guest network prefixes on (off by default, as the feature
is); the floor then writes the same prefixes.

    PROXBOX_DATABASE_URL=... PROXBOX_REDIS_URL=... uv run python benchmarks/sync.py \
        [--sizes 100,1000] [--proxmox fake|simulator] [--proxmox-latency-ms N] [--latency-compare N]
        [--rounds N] [--initial-only] [--profile DIR] [--prefixes]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import ipaddress
import json
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import sync_floor

ROOT = Path(__file__).resolve().parents[1]
NODES = ("pve1", "pve2", "pve3")
# A PVE 9 node's /nodes/{node}/status, the facts the floor writes (sync_floor.NODE_FACTS).
_FACTS = sync_floor.NODE_FACTS
NODE_STATUS = {
    "cpuinfo": {
        "model": _FACTS["proxbox_cpu_model"],
        "sockets": _FACTS["proxbox_cpu_sockets"],
        "cores": _FACTS["proxbox_cpu_cores"],
        "cpus": _FACTS["proxbox_cpu_threads"],
    },
    "memory": {"total": _FACTS["proxbox_memory_mb"] * 1024**2, "used": 0, "free": 0},
    "kversion": f"Linux {_FACTS['proxbox_kernel']} #1 SMP PREEMPT_DYNAMIC PMX",
    "current-kernel": {"sysname": "Linux", "release": _FACTS["proxbox_kernel"]},
    "pveversion": _FACTS["proxbox_pve_version"],
}


NODE_NETWORK = [
    {"iface": "eno1", "type": "eth", "active": 1},
    {"iface": "eno2", "type": "eth", "active": 1},
    {"iface": "bond0", "type": "bond", "active": 1, "slaves": "eno1 eno2", "mtu": 9000},
    {"iface": "vmbr0", "type": "bridge", "active": 1, "bridge_ports": "bond0"},
]


NODE_STORAGES = [
    {
        "storage": "local",
        "type": "dir",
        "content": "iso,vztmpl,backup",
        "shared": 0,
        "active": 1,
        "enabled": 1,
        "total": 100 * 1024**3,
        "used": 40 * 1024**3,
    },
    {
        "storage": "local-lvm",
        "type": "lvmthin",
        "content": "images,rootdir",
        "shared": 0,
        "active": 1,
        "enabled": 1,
        "total": 2048 * 1024**3,
        "used": 512 * 1024**3,
    },
]


# Rounds per size: SizeBench.network gives each size 8 address ranges per side.
MAX_ROUNDS = 8

# The simulator's seed profiles a size runs against in `--proxmox simulator` mode.
SIMULATOR_PROFILES = {100: "medium", 1000: "large"}


def guest_specs(guests: int, network: str, oui: str = "BC:24") -> dict[int, dict]:
    """vmid → what the guest is: the one description the fake Proxmox answers from, the
    change-only phase edits and the floor writes.  `oui`: the MACs' first octets (the
    floor's guests get MACs of their own)."""
    net = ipaddress.ip_network(network)
    specs = {}
    for index in range(guests):
        vmid = 100 + index
        tail = f"{vmid >> 16 & 0xFF:02X}:{vmid >> 8 & 0xFF:02X}:{vmid & 0xFF:02X}"
        address = f"{net.network_address + 10 + index}/{net.prefixlen}"
        specs[vmid] = {
            "vmid": vmid,
            "name": f"vm-{vmid}",
            "node": NODES[index % len(NODES)],
            "status": "running",
            "vcpus": 2,
            "memory_mb": 2048,
            "tags": [f"tier{index % 3}", f"team{index % 5}"],
            "nics": [
                {"name": "ens18", "mac": f"{oui}:12:{tail}", "vlan": None, "address": address},
                {
                    "name": "ens19",
                    "mac": f"{oui}:13:{tail}",
                    "vlan": 100 + index % 8,
                    "address": None,
                },
            ],
            "disks": [
                {"name": "scsi0", "size_mb": 32 * 1024},
                {"name": "scsi1", "size_mb": 8 * 1024},
            ],
        }
    return specs


def change_guests(specs: dict[int, dict], network: str) -> list[int]:
    """Change 1 % of the guests (at least 2), spread over the inventory, as operators do
    between two runs: each gets 1 GiB more memory; every other one is paused, the others
    get a third disk and an address on their second NIC.  Pausing takes a guest of its
    own because a guest that is not running has no agent to report an address.
    Returns the changed vmids."""
    net = ipaddress.ip_network(network)
    count = max(2, len(specs) // 100)
    vmids = sorted(specs)[:: len(specs) // count][:count]
    for position, vmid in enumerate(vmids):
        guest = specs[vmid]
        guest["memory_mb"] += 1024
        if position % 2 == 0:
            guest["status"] = "paused"
        else:
            guest["disks"].append({"name": "scsi2", "size_mb": 4 * 1024})
            second = net.network_address + net.num_addresses // 2 + vmid
            guest["nics"][1]["address"] = f"{second}/{net.prefixlen}"
    return vmids


def guest_config(guest: dict) -> dict:
    nics = {
        f"net{i}": f"virtio={nic['mac']},bridge=vmbr{i}"
        + (f",tag={nic['vlan']}" if nic["vlan"] else "")
        for i, nic in enumerate(guest["nics"])
    }
    disks = {
        d["name"]: f"local-lvm:vm-{guest['vmid']}-disk-{i},size={d['size_mb'] // 1024}G"
        for i, d in enumerate(guest["disks"])
    }
    return {
        "name": guest["name"],
        "cores": guest["vcpus"],
        "sockets": 1,
        "memory": str(guest["memory_mb"]),
        "agent": "1",
        **nics,
        "tags": ";".join(guest["tags"]),
        **disks,
        "smbios1": f"uuid=00000000-0000-0000-0000-{guest['vmid']:012d}",
    }


def agent_interfaces(guest: dict) -> list[dict]:
    loopback = {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}
    reported = [{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": [loopback]}]
    for nic in guest["nics"]:
        addresses = []
        if nic["address"]:
            address, prefix = nic["address"].split("/")
            addresses.append(
                {"ip-address-type": "ipv4", "ip-address": address, "prefix": int(prefix)}
            )
        reported.append(
            {"name": nic["name"], "hardware-address": nic["mac"].lower(), "ip-addresses": addresses}
        )
    return reported


def guest_resource(guest: dict) -> dict:
    return {
        "type": "qemu",
        "vmid": guest["vmid"],
        "node": guest["node"],
        "name": guest["name"],
        "status": guest["status"],
        "maxcpu": guest["vcpus"],
        "maxmem": guest["memory_mb"] * 1024**2,
    }


SNAPSHOTS = [
    {"name": "before-upgrade", "snaptime": 1_735_689_600, "description": "bench"},
    {"name": "current", "parent": "before-upgrade", "running": 1},
]


def guest_backup(vmid: int) -> dict:
    return {
        "volid": f"local:backup/vzdump-qemu-{vmid}-2025_01_01-02_00_00.vma.zst",
        "content": "backup",
        "ctime": 1_735_696_800,
        "size": 4 * 1024**3,
        "vmid": vmid,
        "format": "vma.zst",
        "verification": {"state": "ok"},
    }


def node_addresses(network: str) -> dict[str, str]:
    """Each node's bridge address: below the guests' (which start at .10), after the
    gateway's (.1)."""
    net = ipaddress.ip_network(network)
    return {n: f"{net.network_address + 2 + i}/{net.prefixlen}" for i, n in enumerate(NODES)}


def fake_proxmox(cluster: str, specs: dict[int, dict], network: str, latency_ms: float = 0):
    """A Proxmox answering /version, /cluster/status, /cluster/resources, node networks,
    DNS and storages, per-guest config, snapshot and agent reads (interfaces, OS and host
    name) for the guests of `specs`, spread over three nodes, and their HA resources and
    rules; each answer `latency_ms` late."""
    net = ipaddress.ip_network(network)
    node_cidrs = node_addresses(network)
    node_ips = {n: cidr.split("/")[0] for n, cidr in node_cidrs.items()}
    ha_guests, ha_rules = sync_floor.ha_layout(specs)
    sdn = sync_floor.sdn_layout(network)
    ha_resources = [{"sid": f"vm:{vmid}", "type": "vm", "state": "started"} for vmid in ha_guests]
    status = [{"type": "cluster", "name": cluster, "nodes": 3, "quorate": 1}] + [
        {"type": "node", "name": n, "online": 1, "nodeid": i + 1, "ip": node_ips[n]}
        for i, n in enumerate(NODES)
    ]

    def node_network(node: str) -> list[dict]:
        bridge = {
            **NODE_NETWORK[-1],
            "cidr": node_cidrs[node],
            "gateway": str(net.network_address + 1),
        }
        return [*NODE_NETWORK[:-1], bridge]

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        parts = path.strip("/").split("/")
        if path == "/version":
            data = {"version": "9.0.3", "release": "9.0"}
        elif path == "/cluster/status":
            data = status
        elif path == "/cluster/resources":
            data = [guest_resource(g) for g in specs.values()]
        elif len(parts) == 5 and parts[4] == "config":
            config = guest_config(specs[int(parts[3])])
            # Proxmox's digest: a SHA-1 of the whole config file, snapshot sections too.
            text = json.dumps({"config": config, "snapshots": SNAPSHOTS}, sort_keys=True)
            data = {**config, "digest": hashlib.sha1(text.encode()).hexdigest()}
        elif len(parts) == 3 and parts[2] == "network":
            data = node_network(parts[1])
        elif len(parts) == 3 and parts[2] == "status":
            data = NODE_STATUS
        elif parts[-1] == "get-osinfo":
            data = {"result": {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12"}}
        elif parts[-1] == "network-get-interfaces":
            data = {"result": agent_interfaces(specs[int(parts[3])])}
        elif parts[-1] == "get-host-name":
            data = {"result": {"host-name": specs[int(parts[3])]["name"]}}
        elif len(parts) == 3 and parts[2] == "dns":
            data = {"search": "bench.example", "dns1": str(net.network_address + 1)}
        elif len(parts) == 3 and parts[2] == "storage":
            data = NODE_STORAGES
        elif len(parts) == 5 and parts[2] == "storage" and parts[4] == "content":
            data = [guest_backup(vmid) for vmid, g in specs.items() if g["node"] == parts[1]]
        elif len(parts) == 5 and parts[4] == "snapshot":
            data = SNAPSHOTS
        elif path == "/cluster/sdn/zones":
            data = sdn["zones"]
        elif path == "/cluster/sdn/vnets":
            data = sdn["vnets"]
        elif len(parts) == 5 and parts[:2] == ["cluster", "sdn"] and parts[4] == "subnets":
            data = sdn["subnets"][parts[3]]
        elif path == "/cluster/options":
            data = {}  # no tag colours (answered 501, the backend retried it for seconds)
        elif path == "/cluster/backup":
            data = [{"id": "nightly", "schedule": "02:00", "storage": "local", "all": 1}]
        elif path == "/cluster/ha/resources":
            data = ha_resources
        elif path == "/cluster/ha/rules":  # PVE 9's, read from 9.x on
            data = ha_rules
        elif (
            path in ("/cluster/replication", "/cluster/ha/groups")
            or len(parts) == 3
            and parts[2] == "replication"
        ):
            data = []
        else:
            return httpx.Response(501, json={"data": None})
        return httpx.Response(200, json={"data": data})

    async def network_answer(request: httpx.Request) -> httpx.Response:
        # The backend's client is async: a sleeping handler stands for a Proxmox's round
        # trip without blocking the other requests in flight.  At zero latency it still
        # suspends the request once, as a socket read does: a handler that never suspends
        # runs every read the backend has in flight back to back in one turn of its event
        # loop (its semaphore is free again before the next read starts), and NetBox's
        # answers wait for the whole Proxmox read meanwhile.
        await asyncio.sleep(latency_ms / 1000)
        return answer(request)

    return httpx.MockTransport(network_answer)


# -- one sync phase, in a child process ----------------------------------------------------


def run_phase(spec: dict) -> dict:
    """One sync run in this spawned process, which loads the backend but not Django (nor
    NetBox's code), so that its peak RSS is the backend's own; the fake Proxmox lives here
    too.  `spec` and the answer are plain data (they cross a pipe)."""
    from proxbox_backend.baselines import RedisBaselines
    from proxbox_backend.clients.http import RetryPolicy
    from proxbox_backend.clients.proxmox import ProxmoxClient
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret
    from proxbox_backend.service import SyncService

    simulator = spec["simulator"]
    settings = Settings(
        netbox_url=spec["netbox_url"],
        netbox_token=Secret(spec["netbox_token"]),
        # The fake Proxmox's factory ignores the URL, but the fallback token is used only
        # where the backend fixes the target.
        proxmox_url=simulator["url"] if simulator else "https://pve.invalid:8006",
        proxmox_ca_bundle=simulator["ca_bundle"] if simulator else None,
        proxmox_token_id=simulator["token_id"] if simulator else "root@pam!bench",
        proxmox_token=Secret(simulator["token_secret"] if simulator else "bench"),
        retry=RetryPolicy(attempts=3, backoff=0.5),
        # 0: a full run whatever the baseline says (the "full" phases)
        full_sync_interval=0.0 if spec["full"] else 24 * 3600.0,
    )
    factory = None
    if simulator is None:
        specs = guest_specs(spec["size"], spec["network"], spec["oui"])
        if spec["changed"]:
            change_guests(specs, spec["network"])
        transport = fake_proxmox(spec["cluster"], specs, spec["network"], spec["latency_ms"])

        def factory(endpoint, credentials):
            return ProxmoxClient(
                "https://pve.invalid:8006",
                credentials,
                transport=transport,
                concurrency=settings.proxmox_concurrency,
            )

    # Phases are processes of their own: the baseline lives in Redis, as with `run`.
    baselines = RedisBaselines(spec["redis_url"])
    service = SyncService(settings, proxmox_factory=factory, baselines=baselines)
    started = time.perf_counter()
    spans: dict[str, list[float]] = {}

    def timeline(event: dict) -> None:
        # Stages may overlap: each one's span from its start to its end.
        if event.get("event") == "stage":
            span = spans.setdefault(event["stage"], [0.0, 0.0])
            span[0 if event["state"] == "started" else 1] = time.perf_counter() - started

    profiler = cProfile.Profile() if spec["profile"] else None
    cpu_started = time.process_time()
    if profiler:
        profiler.enable()
    report = asyncio.run(service.run(spec["endpoint_id"], timeline))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    if profiler:
        profiler.disable()
        profiler.dump_stats(spec["profile"])
    return {
        "wall": wall,
        "ok": report.ok,
        "error": report.error,
        "failures": [f.as_dict() for f in report.tally.failures[:3]],
        "netbox_requests": report.netbox_requests["total"],
        "netbox_writes": report.netbox_requests["writes"],
        "inventory_writes": report.tally.writes,
        "writes_by_type": {k: c.writes for k, c in report.tally.counters.items() if c.writes},
        "proxmox_requests": report.proxmox_requests.get("total", 0),
        "peak_rss_mib": peak_rss_mib(),
        "cpu": {"backend": cpu},
        "run_mode": report.run_mode.get("mode", ""),
        "stages": {name: (start, end) for name, (start, end) in spans.items()},
        "django_loaded": "django" in sys.modules,
    }


def peak_rss_mib() -> float:
    """This process's peak resident set since it exec'd Python.

    Not getrusage's ru_maxrss: Linux keeps that across exec, so a spawned child starts
    at the forking parent's peak (NetBox's Django, hundreds of MiB); VmHWM belongs to
    the address space, which exec replaced."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def phase_in_child(spec: dict) -> dict:
    """`run_phase` in a fresh spawned process (not forked: a fork would carry Django)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_phase, (spec,))


# -- the run --------------------------------------------------------------------------------


@dataclass
class Row:
    size: int
    phase: str
    figures: dict  # run_phase's answer, or the floor's in the same keys
    ratio: float | None = None


def phases(args) -> list[tuple[str, bool, float, bool]]:
    """(label, fake Proxmox changed, latency ms, full run) of each sync run, in order."""
    latency = args.proxmox_latency_ms
    runs = [("initial sync", False, latency, True)]
    if args.initial_only:
        return runs
    runs += [
        ("no-op resync, full run", False, latency, True),
        ("no-op resync", False, latency, False),
    ]
    if args.proxmox == "fake":
        runs.append(("change-only resync", True, latency, False))
        if args.latency_compare is not None:
            runs.append(
                (f"no-op resync, {args.latency_compare:g} ms", True, args.latency_compare, False)
            )
    return runs


def describe(row: Row) -> str:
    f = row.figures
    line = (
        f"{row.size:>6} guests  {row.phase:<24} {f['wall']:8.2f} s  "
        f"{f['netbox_requests']:>5} NetBox requests, {f['inventory_writes']} inventory writes"
    )
    if "peak_rss_mib" in f:
        line += (
            f", {f['proxmox_requests']} Proxmox requests, peak RSS {f['peak_rss_mib']:.0f} MiB,"
            f" {f['run_mode']} run (writes: {f['writes_by_type'] or 'none'})"
        )
    if "cpu" in f:
        line += ", CPU s: " + ", ".join(f"{who} {s:.1f}" for who, s in f["cpu"].items())
    return line


def stage_spans(spans: dict) -> str:
    """Each stage's span in the run (seconds from its start), in order of starting."""
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    return "stages: " + ", ".join(f"{name} {a:.1f}–{b:.1f}" for name, (a, b) in ordered)


def floor_row(size: int, floor) -> Row:
    return Row(
        size,
        "floor (plain REST)",
        {
            "wall": floor.seconds,
            "netbox_requests": floor.requests,
            "inventory_writes": floor.objects,
        },
    )


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| guests | phase | run | wall | NetBox requests | per guest | inventory writes "
        "| Proxmox requests | peak RSS (MiB) | CPU s: client, NetBox, PostgreSQL "
        "| ratio to floor |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        f = row.figures
        rss = f"{f['peak_rss_mib']:.0f}" if "peak_rss_mib" in f else "—"
        pve = f"{f['proxmox_requests']:,}" if "proxmox_requests" in f else "—"
        ratio = f"{row.ratio:.2f}×" if row.ratio is not None else ""
        cpu = f.get("cpu", {})
        # The sync's client is the backend; the floor's is plain httpx in this process.
        cpu = " / ".join(
            f"{seconds:.1f}" if seconds is not None else "—"
            for seconds in (
                cpu.get("backend", cpu.get("client")),
                cpu.get("netbox"),
                cpu.get("postgres"),
            )
        )
        lines.append(
            f"| {row.size:,} | {row.phase} | {f.get('run_mode', '—')} | {f['wall']:.2f} s "
            f"| {f['netbox_requests']:,} "
            f"| {f['netbox_requests'] / row.size:.3f} | {f['inventory_writes']:,} | {pve} "
            f"| {rss} | {cpu} | {ratio} |"
        )
    return "\n".join(lines)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--proxmox", choices=("fake", "simulator"), default="fake")
    parser.add_argument("--proxmox-latency-ms", type=float, default=0.0, metavar="N")
    parser.add_argument("--latency-compare", type=float, metavar="N")
    parser.add_argument(
        "--rounds", type=int, default=1, metavar="N", help="initial sync and floor pairs per size"
    )
    parser.add_argument(
        "--initial-only", action="store_true", help="no resync phases: initial syncs and floors"
    )
    parser.add_argument("--profile", metavar="DIR", help="a cProfile file per sync run into DIR")
    parser.add_argument(
        "--prefixes",
        action="store_true",
        help="switch the endpoints' opt-in prefixes_mode on (the floor writes the guest"
        " networks' prefixes too); off by default, as the feature is",
    )
    parser.add_argument(
        "--netbox-keep-alive",
        type=int,
        default=0,
        metavar="S",
        help="gunicorn's keep-alive seconds (default 0: a connection per request)",
    )
    parser.add_argument(
        "--netbox-access-log",
        metavar="FILE",
        help="gunicorn's access log: method, path, status, microseconds, worker pid",
    )
    args = parser.parse_args()
    if not 1 <= args.rounds <= MAX_ROUNDS:
        # Each round of a size takes address ranges and MAC prefixes of its own.
        parser.error(f"--rounds takes 1 to {MAX_ROUNDS}")
    if args.initial_only and args.latency_compare is not None:
        parser.error("--latency-compare compares resyncs: not with --initial-only")
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.proxmox == "simulator":
        if len(args.sizes) != 1 or args.sizes[0] not in SIMULATOR_PROFILES:
            # One simulator per run: simulators seeded alike share node addresses, which
            # NetBox keeps unique.
            parser.error(f"--proxmox simulator takes one size of {sorted(SIMULATOR_PROFILES)}")
        if args.proxmox_latency_ms or args.latency_compare is not None:
            parser.error("Proxmox latency is the fake's: --proxmox fake")
        if args.rounds > 1:
            parser.error("rounds pair initial syncs with floors: --proxmox fake")
    return args


def check_floor_mirrors_backend() -> None:
    """The floor's chunk and concurrency are the backend's; say so if they drift."""
    from proxbox_backend.clients.netbox import WRITE_CHUNK
    from proxbox_backend.config import Settings

    backend = (WRITE_CHUNK, Settings.__dataclass_fields__["netbox_concurrency"].default)
    if backend != (sync_floor.WRITE_CHUNK, sync_floor.CONCURRENCY):
        raise SystemExit(
            f"floor writes {sync_floor.WRITE_CHUNK}×{sync_floor.CONCURRENCY}, backend {backend}"
        )


def machine_speed() -> float:
    """Seconds this process takes for 10⁷ Python additions: the machine's speed on the
    day, so that wall times of runs on different days (on machines of one kind that
    are not equally fast) can be set side by side."""
    started = time.process_time()
    total = 0
    for number in range(10_000_000):
        total += number
    return time.process_time() - started


def main() -> int:
    args = parse_arguments()
    check_floor_mirrors_backend()
    print(f"machine: 10⁷ Python additions in {machine_speed():.2f} s", flush=True)
    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    sys.path.insert(0, str(ROOT / "e2e"))
    from sync_fixtures import NetBoxServer, Simulator, create_endpoint, create_site

    rows: list[Row] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="pbsync-bench-") as workdir:
        gunicorn_args = ["--keep-alive", str(args.netbox_keep_alive)]
        if args.netbox_access_log:
            gunicorn_args += [
                "--access-logfile",
                str(Path(args.netbox_access_log).resolve()),
                "--access-logformat",
                "%(m)s %(U)s %(s)s %(D)s %(p)s",
            ]
        netbox = NetBoxServer(Path(workdir), gunicorn_args=tuple(gunicorn_args))
        simulator = None
        try:
            netbox.start()
            for number, size in enumerate(args.sizes):
                bench = SizeBench(args, netbox, size, number)
                if args.proxmox == "simulator":
                    profile = SIMULATOR_PROFILES[size]
                    print(f"Proxmox: simulator, seed profile {profile!r}", flush=True)
                    simulator = Simulator(f"bench{size}", profile, 1, Path(workdir)).start()
                    site = create_site(netbox, bench.cluster(0))
                    endpoint = create_endpoint(netbox, bench.cluster(0), simulator, site=site)
                    if args.prefixes:
                        switch_prefixes_on(netbox, endpoint["id"])
                    bench.spec_base["simulator"] = {
                        "url": simulator.url,
                        "ca_bundle": simulator.ca_bundle,
                        "token_id": simulator.token_id,
                        "token_secret": simulator.token_secret,
                    }
                    size_rows = bench.phases(endpoint["id"])
                    print(
                        f"{size:>6} guests  no floor: it writes the fake's guests (--proxmox fake)"
                    )
                else:
                    print(f"Proxmox: fake, {args.proxmox_latency_ms:g} ms per request", flush=True)
                    size_rows = bench.rounds()
                failed |= any(not row.figures.get("ok", True) for row in size_rows)
                rows += size_rows
        except sync_floor.FloorFailed as exc:
            print(f"FLOOR FAILED, no ratio: {exc}", file=sys.stderr)
            return 1
        finally:
            if simulator is not None:
                simulator.stop()
            netbox.stop()

    print()
    print(markdown_table(rows))
    return 1 if failed else 0


def switch_prefixes_on(netbox, endpoint_id: int) -> None:
    """`--prefixes`: the endpoint's opt-in guest network prefixes, through REST."""
    with netbox.api() as api:
        response = api.patch(
            f"/plugins/proxbox/endpoints/proxmox/{endpoint_id}/", json={"prefixes_mode": "always"}
        )
    if response.status_code != 200:
        raise SystemExit(f"prefixes_mode not switched on: {response.text[:300]}")


class SizeBench:
    """One size's runs against one NetBox.  Round 1 is the initial sync followed by the
    resync phases on its endpoint, then the floor; each further round (`--rounds`) is
    another initial sync, into an endpoint, site and cluster of its own, and another
    floor, in alternating order (the floor first in round 2, the sync first in round 3,
    ...), so that a drift of the machine's speed over the run weighs on both alike.  The
    ratio is the rounds' summed sync time over their summed floor time."""

    def __init__(self, args, netbox, size: int, number: int):
        self.args = args
        self.netbox = netbox
        self.size = size
        self.number = number
        self.spec_base = {
            "netbox_url": netbox.url,
            "netbox_token": netbox.admin_token,
            "size": size,
            "simulator": None,
            "redis_url": os.environ["PROXBOX_REDIS_URL"],
        }

    def cluster(self, round_: int, prefix: str = "bench") -> str:
        """The round's name for the sync's endpoint, site and cluster (the floor's with
        prefix `floor`)."""
        return f"{prefix}-{self.size}" + (f"-r{round_ + 1}" if round_ else "")

    def network(self, round_: int, floor: bool) -> str:
        """Addresses of the round's own: NetBox keeps global addresses unique."""
        if floor:
            return f"10.{100 + 8 * self.number + round_}.0.0/16"
        if round_ == 0:
            return f"172.{16 + self.number}.0.0/16"
        return f"10.{200 + 8 * self.number + round_}.0.0/16"

    def spec(self, round_: int, endpoint_id: int) -> dict:
        return {
            **self.spec_base,
            "cluster": self.cluster(round_),
            "network": self.network(round_, floor=False),
            "oui": f"BC:{24 + 2 * round_}",
            "endpoint_id": endpoint_id,
        }

    def endpoint(self, round_: int) -> int:
        from sync_fixtures import create_endpoint_record, create_site

        cluster = self.cluster(round_)
        site = create_site(self.netbox, cluster)
        endpoint = create_endpoint_record(self.netbox, cluster, "127.0.0.1", 8006, site=site)
        if self.args.prefixes:
            switch_prefixes_on(self.netbox, endpoint["id"])
        return endpoint["id"]

    def sync(self, spec: dict, phase: str, changed: bool, latency: float, full: bool) -> Row:
        profile = None
        if self.args.profile:
            label = f"{spec['cluster']}-{phase}".replace(" ", "_").replace(",", "")
            profile = str(Path(self.args.profile).resolve() / f"{label}.prof")
        before = server_cpu(self.netbox.process.pid)
        figures = phase_in_child(
            {**spec, "changed": changed, "latency_ms": latency, "full": full, "profile": profile}
        )
        figures["cpu"].update(cpu_since(before, server_cpu(self.netbox.process.pid)))
        if figures["django_loaded"]:
            raise SystemExit("the sync's child process loaded Django: its RSS is not the backend's")
        if not figures["ok"]:
            print(f"{spec['cluster']} {phase} FAILED: {figures['error']} {figures['failures']}")
        row = Row(self.size, phase, figures)
        print(describe(row), flush=True)
        print(f"{'':>14}{stage_spans(figures['stages'])}", flush=True)
        return row

    def phases(self, endpoint_id: int) -> list[Row]:
        spec = self.spec(0, endpoint_id)
        return [self.sync(spec, *phase) for phase in phases(self.args)]

    def floor(self, round_: int) -> Row:
        network = self.network(round_, floor=True)
        before = server_cpu(self.netbox.process.pid)
        client_started = time.process_time()
        floor = asyncio.run(
            sync_floor.measure_floor(
                self.netbox.url,
                self.netbox.admin_token,
                self.cluster(round_, prefix="floor"),
                NODES,
                guest_specs(self.size, network, oui=f"BC:{25 + 2 * round_}"),
                node_addresses(network),
                sync_floor.sdn_layout(network),
                prefixes=self.args.prefixes,
            )
        )
        row = floor_row(self.size, floor)
        row.figures["cpu"] = {
            "client": time.process_time() - client_started,
            **cpu_since(before, server_cpu(self.netbox.process.pid)),
        }
        if round_:
            row.phase += f", round {round_ + 1}"
        print(describe(row), flush=True)
        steps = ", ".join(f"{step} {seconds:.1f}" for step, seconds in floor.steps.items())
        print(f"{'':>14}steps: {steps}", flush=True)
        return row

    def initial(self, round_: int) -> Row:
        label, changed, latency, full = phases(self.args)[0]
        spec = self.spec(round_, self.endpoint(round_))
        return self.sync(spec, f"{label}, round {round_ + 1}", changed, latency, full)

    def rounds(self) -> list[Row]:
        size_rows = self.phases(self.endpoint(0))
        pairs = [(size_rows[0], self.floor(0))]
        for round_ in range(1, self.args.rounds):
            if round_ % 2:
                floor = self.floor(round_)
                initial = self.initial(round_)
            else:
                initial = self.initial(round_)
                floor = self.floor(round_)
            pairs.append((initial, floor))
        return self.report(size_rows, pairs)

    def report(self, size_rows: list[Row], pairs: list[tuple[Row, Row]]) -> list[Row]:
        """The rows, each round's floor after its initial sync; prints the ratios."""
        size = self.size
        for initial, floor in pairs:
            if initial.figures["ok"]:
                initial.ratio = initial.figures["wall"] / floor.figures["wall"]
        if all(initial.figures["ok"] for initial, _ in pairs):
            synced = sum(initial.figures["wall"] for initial, _ in pairs)
            floored = sum(floor.figures["wall"] for _, floor in pairs)
            each = ", ".join(f"{initial.ratio:.2f}×" for initial, _ in pairs)
            print(
                f"{size:>6} guests  initial sync {synced / floored:.2f}× the floor "
                f"({synced:.1f} s / {floored:.1f} s over {len(pairs)} round(s): {each})",
                flush=True,
            )
        if self.args.latency_compare is not None:
            noop = next(row for row in size_rows if row.phase == "no-op resync")
            late = size_rows[-1]
            ratio = late.figures["wall"] / noop.figures["wall"]
            print(
                f"{size:>6} guests  no-op resync at {self.args.latency_compare:g} ms Proxmox "
                f"latency: {ratio:.2f}× the one at {self.args.proxmox_latency_ms:g} ms "
                "(target ≤ 2×)",
                flush=True,
            )
        return [
            size_rows[0],
            pairs[0][1],
            *size_rows[1:],
            *(row for pair in pairs[1:] for row in pair),
        ]


# -- CPU of the servers ---------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(netbox_pid: int) -> dict[str, float]:
    """CPU seconds NetBox's gunicorn (its arbiter and workers) and the PostgreSQL server
    (every `postgres` process) have used so far, exited children included: each live
    process's own time plus what it reaped (cutime, cstime)."""
    processes = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone between the listing and the read
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
        processes[int(entry.name)] = (int(fields[1]), comm, ticks / CLOCK_TICKS)
    netbox = {netbox_pid}
    while True:  # the arbiter's descendants
        grown = netbox | {pid for pid, (ppid, _, _) in processes.items() if ppid in netbox}
        if grown == netbox:
            break
        netbox = grown
    workers = sorted(pid for pid in netbox if processes.get(pid, (None,))[0] == netbox_pid)
    # Keyed by pid: a worker gunicorn replaced during a run has no "before" to subtract.
    return {
        "netbox": sum(processes[pid][2] for pid in netbox if pid in processes),
        "postgres": sum(cpu for _, comm, cpu in processes.values() if comm == "postgres"),
        # Each worker's share shows how gunicorn spread the client's connections.
        **{f"worker {pid}": processes[pid][2] for pid in workers},
    }


def cpu_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """A worker gunicorn replaced in between is left out."""
    return {server: after[server] - before[server] for server in after if server in before}


if __name__ == "__main__":
    sys.exit(main())
