"""Sync backend benchmark: prints figures, asserts nothing.

Initial sync and no-op resync of 100 and 1,000 guests (3 nodes; per guest 2
interfaces, one of them VLAN-tagged, 1 IP address, 2 disks, 2 Proxmox tags, 1 snapshot,
1 vzdump backup; per node 4 network interfaces: 2 NICs in a bond, bridged, the bridge
carrying the node's cluster address, and 2 storages; one backup job) into a real NetBox: gunicorn serving NetBox's
WSGI app with both plugins (2 workers × 2 threads) on a `pbsync_` database cloned
from the migrated template, dropped afterwards.

The Proxmox side is a deterministic in-process fake (httpx.MockTransport) that
answers the reads the sync makes, with zero latency: the figures are the
backend's and NetBox's cost, not a Proxmox server's (benchmarks/simulator.py
measures the simulator).  Each size gets its own endpoint, site and address range.

Printed per size and phase: wall time, NetBox requests (total and per guest),
NetBox HTTP writes (claim + sidecar included) and inventory writes (objects
created/updated/deleted), Proxmox requests.

    PROXBOX_DATABASE_URL=... PROXBOX_REDIS_URL=... uv run python benchmarks/sync.py [--sizes 100,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
NODES = ("pve1", "pve2", "pve3")


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


def fake_proxmox(cluster: str, guests: int, network: str):
    """A Proxmox answering /version, /cluster/status, /cluster/resources, node networks
    and per-guest config and agent reads (interfaces and OS), for `guests` QEMU VMs spread over three nodes."""
    net = ipaddress.ip_network(network)
    inventory = {}
    for index in range(guests):
        vmid = 100 + index
        node = NODES[index % len(NODES)]
        mac0 = f"BC:24:12:{vmid >> 16 & 0xFF:02X}:{vmid >> 8 & 0xFF:02X}:{vmid & 0xFF:02X}"
        mac1 = f"BC:24:13:{vmid >> 16 & 0xFF:02X}:{vmid >> 8 & 0xFF:02X}:{vmid & 0xFF:02X}"
        address = net.network_address + 10 + index
        inventory[vmid] = {
            "resource": {
                "type": "qemu",
                "vmid": vmid,
                "node": node,
                "name": f"vm-{vmid}",
                "status": "running",
                "maxcpu": 2,
                "maxmem": 2048 * 1024**2,
            },
            "config": {
                "name": f"vm-{vmid}",
                "cores": 2,
                "sockets": 1,
                "memory": "2048",
                "agent": "1",
                "net0": f"virtio={mac0},bridge=vmbr0",
                "net1": f"virtio={mac1},bridge=vmbr1,tag={100 + index % 8}",
                "tags": f"tier{index % 3};team{index % 5}",
                "scsi0": f"local-lvm:vm-{vmid}-disk-0,size=32G",
                "scsi1": f"local-lvm:vm-{vmid}-disk-1,size=8G",
                "smbios1": f"uuid=00000000-0000-0000-0000-{vmid:012d}",
            },
            "agent": [
                {
                    "name": "lo",
                    "hardware-address": "00:00:00:00:00:00",
                    "ip-addresses": [
                        {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}
                    ],
                },
                {
                    "name": "ens18",
                    "hardware-address": mac0.lower(),
                    "ip-addresses": [
                        {
                            "ip-address-type": "ipv4",
                            "ip-address": str(address),
                            "prefix": net.prefixlen,
                        }
                    ],
                },
                {"name": "ens19", "hardware-address": mac1.lower(), "ip-addresses": []},
            ],
            "snapshots": [
                {"name": "before-upgrade", "snaptime": 1_735_689_600, "description": "bench"},
                {"name": "current", "parent": "before-upgrade", "running": 1},
            ],
            "backup": {
                "volid": f"local:backup/vzdump-qemu-{vmid}-2025_01_01-02_00_00.vma.zst",
                "content": "backup",
                "ctime": 1_735_696_800,
                "size": 4 * 1024**3,
                "vmid": vmid,
                "format": "vma.zst",
                "verification": {"state": "ok"},
            },
        }
    # Node addresses below the guests' (which start at .10), the gateway first.
    node_ips = {n: str(net.network_address + 2 + i) for i, n in enumerate(NODES)}
    status = [{"type": "cluster", "name": cluster, "nodes": 3, "quorate": 1}] + [
        {"type": "node", "name": n, "online": 1, "nodeid": i + 1, "ip": node_ips[n]}
        for i, n in enumerate(NODES)
    ]

    def node_network(node: str) -> list[dict]:
        bridge = {
            **NODE_NETWORK[-1],
            "cidr": f"{node_ips[node]}/{net.prefixlen}",
            "gateway": str(net.network_address + 1),
        }
        return [*NODE_NETWORK[:-1], bridge]

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        parts = path.strip("/").split("/")
        if path == "/version":
            data = {"version": "9.0.3", "release": "9.0"}
        elif path == "/cluster/status":
            data = status
        elif path == "/cluster/resources":
            data = [g["resource"] for g in inventory.values()]
        elif len(parts) == 5 and parts[4] == "config":
            data = inventory[int(parts[3])]["config"]
        elif len(parts) == 3 and parts[2] == "network":
            data = node_network(parts[1])
        elif parts[-1] == "get-osinfo":
            data = {"result": {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12"}}
        elif parts[-1] == "network-get-interfaces":
            data = {"result": inventory[int(parts[3])]["agent"]}
        elif len(parts) == 3 and parts[2] == "storage":
            data = NODE_STORAGES
        elif len(parts) == 5 and parts[2] == "storage" and parts[4] == "content":
            data = [g["backup"] for g in inventory.values() if g["resource"]["node"] == parts[1]]
        elif len(parts) == 5 and parts[4] == "snapshot":
            data = inventory[int(parts[3])]["snapshots"]
        elif path == "/cluster/backup":
            data = [{"id": "nightly", "schedule": "02:00", "storage": "local", "all": 1}]
        elif (
            path in ("/cluster/replication", "/cluster/ha/groups", "/cluster/ha/resources")
            or len(parts) == 3
            and parts[2] == "replication"
        ):
            data = []
        else:
            return httpx.Response(501, json={"data": None})
        return httpx.Response(200, json={"data": data})

    return httpx.MockTransport(handler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    sys.path.insert(0, str(ROOT / "e2e"))
    from sync_fixtures import NetBoxServer, create_endpoint_record, create_site

    from proxbox_backend.clients.http import RetryPolicy
    from proxbox_backend.clients.proxmox import ProxmoxClient
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret
    from proxbox_backend.service import SyncService

    rows = []
    with tempfile.TemporaryDirectory(prefix="pbsync-bench-") as workdir:
        netbox = NetBoxServer(Path(workdir))
        try:
            netbox.start()
            for number, size in enumerate(sizes):
                cluster = f"bench-{size}"
                site = create_site(netbox, cluster)
                endpoint = create_endpoint_record(netbox, cluster, "127.0.0.1", 8006, site=site)
                transport = fake_proxmox(cluster, size, f"172.{16 + number}.0.0/16")

                def factory(endpoint, credentials, transport=transport):
                    return ProxmoxClient(
                        "https://pve.invalid:8006", credentials, transport=transport, concurrency=16
                    )

                settings = Settings(
                    netbox_url=netbox.url,
                    netbox_token=Secret(netbox.admin_token),
                    proxmox_token_id="root@pam!bench",
                    proxmox_token=Secret("bench"),
                    retry=RetryPolicy(attempts=3, backoff=0.5),
                )
                for phase in ("initial sync", "no-op resync"):
                    service = SyncService(settings, proxmox_factory=factory)
                    started = time.perf_counter()
                    report = asyncio.run(service.run(endpoint["id"]))
                    wall = time.perf_counter() - started
                    if not report.ok:
                        print(
                            f"{cluster} {phase} FAILED: {report.error} "
                            f"{[f.as_dict() for f in report.tally.failures[:3]]}"
                        )
                    nb = report.netbox_requests
                    rows.append(
                        (
                            size,
                            phase,
                            wall,
                            nb["total"],
                            nb["total"] / size,
                            nb["writes"],
                            report.tally.writes,
                            report.proxmox_requests["total"],
                        )
                    )
                    print(
                        f"{size:>6} guests  {phase:<13} {wall:8.2f} s  "
                        f"{nb['total']:>5} NetBox requests ({nb['total'] / size:.3f}/guest), "
                        f"{nb['writes']} HTTP writes, {report.tally.writes} inventory writes, "
                        f"{report.proxmox_requests['total']} Proxmox requests",
                        flush=True,
                    )
        finally:
            netbox.stop()

    print()
    print(
        "| guests | phase | wall time | NetBox requests | per guest | NetBox HTTP writes "
        "| inventory writes | Proxmox requests |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for size, phase, wall, total, per, writes, inventory, pve in rows:
        print(
            f"| {size} | {phase} | {wall:.2f} s | {total} | {per:.3f} | {writes} "
            f"| {inventory} | {pve} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
