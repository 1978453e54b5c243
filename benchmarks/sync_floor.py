"""The sync benchmark's floor: the inventory a sync writes, written straight to NetBox.

Plain httpx against NetBox's REST API, none of the backend's code: the objects the
initial sync creates for the fake Proxmox, sent the way the backend sends them: bulk
requests of `WRITE_CHUNK` objects, at most `CONCURRENCY` in flight.  Per node a device
with its hardware facts (custom fields), its network (2 NICs, a bond of them, a bridge over the bond; then the bond's members and
the bridge port linked), the bridge's address and the device's primary address, and 2
storages; a VLAN group with the guests' VLANs; per guest a VM, 2 interfaces with their
MACs (the tagged one in access mode), guest OS names and node bridge (custom fields), 1 IP
address with the guest's DNS name, 2 virtual disks, the VM's primary address, a snapshot
and a backup; one backup job; the HA inventory of `ha_layout` (an HA resource per tenth
guest, PVE 9 HA rules listing them); the SDN of `sdn_layout` (a VLAN group, VLANs,
L2VPNs, prefixes, gateway addresses, DHCP ranges); with `prefixes` (the benchmark's
`--prefixes`, which switches the endpoint's opt-in `prefixes_mode` on) the guest networks'
prefixes (`guest_prefixes`).  Whatever the sync takes beyond this is the backend's own cost
(reads, planning, the claim, the sidecar records).

The prerequisites (site, cluster, device type and role, tags) are created before the
clock starts, into a site and cluster of the floor's own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from dataclasses import dataclass

import httpx

# The backend's bulk chunk (clients/netbox.py WRITE_CHUNK) and its default NetBox
# concurrency (Settings.netbox_concurrency, the client's semaphore and connection pool).
WRITE_CHUNK = 100
CONCURRENCY = 4


# A node's hardware as the fake Proxmox's /nodes/{node}/status reports it
# (benchmarks/sync.py), as the sync writes it: custom fields of the node's device.
NODE_FACTS = {
    "proxbox_cpu_model": "AMD EPYC 7313P 16-Core Processor",
    "proxbox_cpu_sockets": 1,
    "proxbox_cpu_cores": 16,
    "proxbox_cpu_threads": 32,
    "proxbox_memory_mb": 262144,
    "proxbox_kernel": "6.14.8-2-pve",
    "proxbox_pve_version": "pve-manager/9.0.3/0123abcd",
}


class FloorFailed(RuntimeError):
    """A floor write NetBox refused: no floor, so no ratio."""


@dataclass(frozen=True)
class Floor:
    seconds: float
    objects: int
    requests: int
    steps: dict  # "<method> <path>" → seconds its bulk writes took


class FloorWriter:
    def __init__(self, client: httpx.AsyncClient):
        self.client = client
        self.slots = asyncio.Semaphore(CONCURRENCY)
        self.objects = 0
        self.requests = 0
        self.steps: dict[str, float] = {}

    async def send(self, method: str, path: str, json) -> list | dict:
        try:
            async with self.slots:
                response = await self.client.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise FloorFailed(f"floor {method} {path}: {exc!r}") from exc
        self.requests += 1
        if not response.is_success:
            raise FloorFailed(
                f"floor {method} {path} → {response.status_code}: {response.text[:300]}"
            )
        return response.json()

    async def bulk(self, method: str, path: str, items: list[dict]) -> list[dict]:
        """Every item written, chunk by chunk concurrently; NetBox's answers in input order."""
        chunks = [items[i : i + WRITE_CHUNK] for i in range(0, len(items), WRITE_CHUNK)]
        started = time.perf_counter()
        answers = await asyncio.gather(*(self.send(method, path, chunk) for chunk in chunks))
        step = f"{method} {path.removeprefix('/plugins/proxbox/inventory')}"
        self.steps[step] = self.steps.get(step, 0.0) + time.perf_counter() - started
        self.objects += len(items)
        return [obj for answer in answers for obj in answer]

    async def get_or_create(self, path: str, lookup: dict, extra: dict | None = None) -> int:
        """A prerequisite's id (not timed, not counted)."""
        response = await self.client.get(path, params=lookup)
        if response.is_success and response.json()["results"]:
            return response.json()["results"][0]["id"]
        return (await self.send("POST", path, {**lookup, **(extra or {})}))["id"]


async def prerequisites(
    writer: FloorWriter, name: str, tag_names: set[str], prefixes: bool = False
) -> dict:
    slug = name.lower()
    site = await writer.get_or_create("/dcim/sites/", {"name": name, "slug": slug})
    manufacturer = await writer.get_or_create("/dcim/manufacturers/", {"name": name, "slug": slug})
    device_type = await writer.get_or_create(
        "/dcim/device-types/", {"model": name, "slug": slug}, {"manufacturer": manufacturer}
    )
    role = await writer.get_or_create("/dcim/device-roles/", {"name": name, "slug": slug})
    cluster_type = await writer.get_or_create(
        "/virtualization/cluster-types/", {"name": name, "slug": slug}
    )
    cluster = await writer.get_or_create(
        "/virtualization/clusters/", {"name": name}, {"type": cluster_type, "site": site}
    )
    # The custom fields the sync ensures (their definitions are its business).
    await writer.get_or_create(
        "/extras/custom-fields/",
        {"name": "proxbox_sdn"},
        {
            "type": "text",
            "object_types": [
                "ipam.vlangroup",
                "ipam.vlan",
                "vpn.l2vpn",
                "ipam.prefix",
                "ipam.iprange",
                "ipam.ipaddress",
            ],
        },
    )
    await writer.get_or_create(
        "/extras/custom-fields/",
        {"name": "proxbox_guest_interface"},
        {"type": "text", "object_types": ["virtualization.vminterface"]},
    )
    await writer.get_or_create(
        "/extras/custom-fields/",
        {"name": "proxbox_bridge"},
        {
            "type": "object",
            "related_object_type": "dcim.interface",
            "object_types": ["virtualization.vminterface"],
        },
    )
    if prefixes:
        await writer.get_or_create(
            "/extras/custom-fields/",
            {"name": "proxbox_prefix"},
            {"type": "text", "object_types": ["ipam.prefix"]},
        )
    for name_, value in NODE_FACTS.items():
        await writer.get_or_create(
            "/extras/custom-fields/",
            {"name": name_},
            {
                "type": "integer" if isinstance(value, int) else "text",
                "object_types": ["dcim.device"],
            },
        )
    tags = {}
    for tag in sorted(tag_names):
        tags[tag] = await writer.get_or_create(
            "/extras/tags/", {"name": f"{slug}-{tag}", "slug": f"{slug}-{tag}"}
        )
    writer.requests = 0  # the clock and the counts start at the inventory
    return {
        "site": site,
        "device_type": device_type,
        "role": role,
        "cluster": cluster,
        "tags": tags,
    }


# A node's network as benchmarks/sync.py's fake Proxmox lists it, in NetBox's terms.
NODE_INTERFACES = (
    {"name": "eno1", "type": "other"},
    {"name": "eno2", "type": "other"},
    {"name": "bond0", "type": "lag", "mtu": 9000},
    {"name": "vmbr0", "type": "bridge"},
)
NODE_LINKS = {"eno1": ("lag", "bond0"), "eno2": ("lag", "bond0"), "bond0": ("bridge", "vmbr0")}
INVENTORY = "/plugins/proxbox/inventory"


def ha_layout(inventory: dict) -> tuple[list[int], list[dict]]:
    """The benchmark's HA inventory, which benchmarks/sync.py's fake Proxmox answers and
    the floor writes: every tenth guest under HA; per node a node-affinity rule that pins
    the node's HA guests to it; each two HA guests in turn kept apart by a negative
    resource-affinity rule.  `inventory`: vmid → guest (`guest_specs`).  Returns the HA
    guests' vmids and the rules as PVE 9 lists them (`/cluster/ha/rules`)."""
    ha = sorted(inventory)[::10]
    rules = []
    for node in sorted({inventory[vmid]["node"] for vmid in ha}):
        members = [vmid for vmid in ha if inventory[vmid]["node"] == node]
        rules.append(
            {
                "rule": f"prefer-{node}",
                "type": "node-affinity",
                "affinity": "positive",
                "nodes": f"{node}:2",
                "resources": ",".join(f"vm:{vmid}" for vmid in members),
            }
        )
    for first, second in zip(ha[0::2], ha[1::2], strict=False):
        rules.append(
            {
                "rule": f"apart-{first}-{second}",
                "type": "resource-affinity",
                "affinity": "negative",
                "resources": f"vm:{first},vm:{second}",
            }
        )
    for order, rule in enumerate(rules, start=1):
        rule["order"] = order
    return ha, rules


def sdn_layout(network: str) -> dict:
    """The benchmark's SDN, which benchmarks/sync.py's fake Proxmox answers (as PVE lists
    its applied config) and the floor writes: a VLAN zone with 8 VNets and an EVPN zone
    with 4, each VNet a /24 subnet with a gateway and a DHCP range, taken from the top of
    `network` (the guests' addresses are at its bottom and middle)."""
    net = ipaddress.ip_network(network)
    zones = [
        {"zone": "benchv", "type": "vlan", "bridge": "vmbr0"},
        {"zone": "benche", "type": "evpn", "controller": "benchc"},
    ]
    vnets = [{"vnet": f"vv{i}", "zone": "benchv", "tag": 300 + i} for i in range(8)]
    vnets += [{"vnet": f"ve{i}", "zone": "benche", "tag": 20000 + i} for i in range(4)]
    blocks = list(net.subnets(new_prefix=24))[-len(vnets) :]
    subnets = {}
    for vnet, block in zip(vnets, blocks, strict=True):
        base = block.network_address
        subnets[vnet["vnet"]] = [
            {
                "subnet": f"{vnet['zone']}-{base}-24",
                "id": f"{vnet['zone']}-{base}-24",
                "type": "subnet",
                "vnet": vnet["vnet"],
                "zone": vnet["zone"],
                "cidr": str(block),
                "network": str(base),
                "mask": "24",
                "gateway": str(base + 1),
                "dhcp-range": [{"start-address": str(base + 100), "end-address": str(base + 200)}],
            }
        ]
    return {"zones": zones, "vnets": vnets, "subnets": subnets}


async def write_sdn(writer: FloorWriter, name: str, sdn: dict, base: dict) -> None:
    """What the sync's `sdn` stage writes for `sdn_layout`: a VLAN group per VLAN zone,
    a VLAN per VLAN VNet, an L2VPN per EVPN VNet, and per subnet its prefix, gateway
    address and DHCP range; each with the proxbox tag and its source key."""
    tag = [base["tags"]["proxbox"]]

    def marked(source: str) -> dict:
        return {"tags": tag, "custom_fields": {"proxbox_sdn": f"{name}/{source}"}}

    group = await writer.send(
        "POST",
        "/ipam/vlan-groups/",
        [
            {
                "name": "SDN benchv",
                "slug": f"{name.lower()}-sdn-benchv",
                "scope_type": "virtualization.cluster",
                "scope_id": base["cluster"],
                **marked("zone/benchv"),
            }
        ],
    )
    writer.objects += 1
    vlan_vnets = [v for v in sdn["vnets"] if v["zone"] == "benchv"]
    evpn_vnets = [v for v in sdn["vnets"] if v["zone"] == "benche"]
    vlans, _ = await asyncio.gather(
        writer.bulk(
            "POST",
            "/ipam/vlans/",
            [
                {"vid": v["tag"], "name": v["vnet"], "group": group[0]["id"], "status": "active",
                 **marked(f"vnet/{v['vnet']}")}
                for v in vlan_vnets
            ],
        ),
        writer.bulk(
            "POST",
            "/vpn/l2vpns/",
            [
                {"name": f"{v['vnet']} ({name})", "slug": f"{name.lower()}-{v['vnet']}",
                 "type": "vxlan-evpn", "identifier": v["tag"], **marked(f"vnet/{v['vnet']}")}
                for v in evpn_vnets
            ],
        ),
    )  # fmt: skip
    vlan_ids = {v["name"]: v["id"] for v in vlans}
    subnets = [s for found in sdn["subnets"].values() for s in found]
    await asyncio.gather(
        writer.bulk(
            "POST",
            "/ipam/prefixes/",
            [
                {"prefix": s["cidr"], "vlan": vlan_ids.get(s["vnet"]), "status": "active",
                 **marked(f"subnet/{s['subnet']}")}
                for s in subnets
            ],
        ),
        writer.bulk(
            "POST",
            "/ipam/ip-addresses/",
            [
                {"address": f"{s['gateway']}/{s['mask']}", "status": "active", "role": "anycast",
                 **marked(f"gateway/{s['subnet']}")}
                for s in subnets
            ],
        ),
        writer.bulk(
            "POST",
            "/ipam/ip-ranges/",
            [
                {"start_address": f"{r['start-address']}/{s['mask']}",
                 "end_address": f"{r['end-address']}/{s['mask']}", "status": "active",
                 **marked(f"dhcp/{s['subnet']}")}
                for s in subnets
                for r in s["dhcp-range"]
            ],
        ),
    )  # fmt: skip


async def write_nodes(
    writer: FloorWriter, nodes, device_ids: dict, addresses: dict, tag: int
) -> dict[tuple[int, str], int]:
    """Each node's interfaces, then their links; the bridge's address, then the device's
    primary address. Returns (device id, interface name) → interface id."""
    created = await writer.bulk(
        "POST",
        "/dcim/interfaces/",
        [
            {"device": device_ids[node], "enabled": True, "tags": [tag], **interface}
            for node in nodes
            for interface in NODE_INTERFACES
        ],
    )
    ids = {(i["device"]["id"], i["name"]): i["id"] for i in created}
    await writer.bulk(
        "PATCH",
        "/dcim/interfaces/",
        [
            {"id": ids[(device_ids[node], name)], link: ids[(device_ids[node], target)]}
            for node in nodes
            for name, (link, target) in NODE_LINKS.items()
        ],
    )
    ips = await writer.bulk(
        "POST",
        "/ipam/ip-addresses/",
        [
            {
                "address": addresses[node],
                "status": "active",
                "assigned_object_type": "dcim.interface",
                "assigned_object_id": ids[(device_ids[node], "vmbr0")],
                "tags": [tag],
            }
            for node in nodes
        ],
    )
    await writer.bulk(
        "PATCH",
        "/dcim/devices/",
        [
            {"id": device_ids[node], "primary_ip4": ip["id"]}
            for node, ip in zip(nodes, ips, strict=True)
        ],
    )
    return ids


async def write_records(
    writer: FloorWriter, nodes, device_ids: dict, guests: list, vms: list, base: dict
) -> None:
    """The plugin's records: 2 storages per node, one backup job, per guest a backup (on
    its node's `local`) and a snapshot; the HA resources, then the HA rules listing them."""
    cluster, tag = base["cluster"], base["tags"]["proxbox"]
    storages = await writer.bulk(
        "POST",
        f"{INVENTORY}/storages/",
        [
            {
                "cluster": cluster,
                "name": storage,
                "node": node,
                "device": device_ids[node],
                "storage_type": kind,
                "content": content,
                "shared": False,
                "enabled": True,
                "capacity": capacity,
                "used": capacity // 4,
                "tags": [tag],
            }
            for node in nodes
            for storage, kind, content, capacity in (
                ("local", "dir", "iso,vztmpl,backup", 100 * 1024**3),
                ("local-lvm", "lvmthin", "images,rootdir", 2048 * 1024**3),
            )
        ],
    )
    local = {s["node"]: s["id"] for s in storages if s["name"] == "local"}
    await writer.bulk(
        "POST",
        f"{INVENTORY}/backup-jobs/",
        [
            {
                "cluster": cluster,
                "job_id": "nightly",
                "enabled": True,
                "schedule": "02:00",
                "selection": "all",
                "storage": "local",
                "tags": [tag],
            }
        ],
    )
    await writer.bulk(
        "POST",
        f"{INVENTORY}/backups/",
        [
            {
                "cluster": cluster,
                "storage": local[g["node"]],
                "volume": f"local:backup/vzdump-qemu-{g['vmid']}-2025_01_01-02_00_00.vma.zst",
                "vmid": g["vmid"],
                "virtual_machine": vm["id"],
                "backup_time": "2025-01-01T02:00:00Z",
                "size": 4 * 1024**3,
                "format": "vma.zst",
                "verification": "ok",
                "tags": [tag],
            }
            for g, vm in zip(guests, vms, strict=True)
        ],
    )
    await writer.bulk(
        "POST",
        f"{INVENTORY}/snapshots/",
        [
            {
                "cluster": cluster,
                "virtual_machine": vm["id"],
                "name": "before-upgrade",
                "snapshot_time": "2025-01-01T00:00:00Z",
                "vmstate": False,
                "description": "bench",
                "tags": [tag],
            }
            for vm in vms
        ],
    )
    vm_ids = {g["vmid"]: vm["id"] for g, vm in zip(guests, vms, strict=True)}
    ha, rules = ha_layout({g["vmid"]: g for g in guests})
    resources = await writer.bulk(
        "POST",
        f"{INVENTORY}/ha-resources/",
        [
            {
                "cluster": cluster,
                "sid": f"vm:{vmid}",
                "vmid": vmid,
                "virtual_machine": vm_ids[vmid],
                "state": "started",
                "tags": [tag],
            }
            for vmid in ha
        ],
    )
    resource_ids = {r["sid"]: r["id"] for r in resources}
    await writer.bulk(
        "POST",
        f"{INVENTORY}/ha-rules/",
        [
            {
                "cluster": cluster,
                "name": rule["rule"],
                "rule_type": rule["type"],
                "affinity": rule["affinity"],
                "nodes": rule.get("nodes", ""),
                "strict": False,
                "enabled": True,
                "resources": sorted(resource_ids[sid] for sid in rule["resources"].split(",")),
                "tags": [tag],
            }
            for rule in rules
        ],
    )


def guest_prefixes(inventory: dict, sdn: dict) -> list[str]:
    """The networks of the guests' addresses (each address with its own prefix length)
    that no SDN subnet equals or contains: the prefixes the sync's `prefixes` stage makes
    (host routes and link-local addresses name none)."""
    subnets = [ipaddress.ip_network(s["cidr"]) for found in sdn["subnets"].values() for s in found]
    networks = set()
    for guest in inventory.values():
        for nic in guest["nics"]:
            if not nic["address"]:
                continue
            interface = ipaddress.ip_interface(nic["address"])
            network = interface.network
            if network.prefixlen == network.max_prefixlen or interface.ip.is_link_local:
                continue
            if not any(network.subnet_of(s) for s in subnets if s.version == network.version):
                networks.add(network)
    return [str(n) for n in sorted(networks)]


async def write_prefixes(writer: FloorWriter, name: str, networks: list[str], base: dict) -> None:
    """What the sync's `prefixes` stage writes: a prefix per guest network, scoped to the
    site, with the proxbox tag and its source key (the benchmark's endpoints have no VRF)."""
    await writer.bulk(
        "POST",
        "/ipam/prefixes/",
        [
            {"prefix": n, "scope_type": "dcim.site", "scope_id": base["site"], "status": "active",
             "tags": [base["tags"]["proxbox"]], "custom_fields": {"proxbox_prefix": f"{name}/{n}"}}
            for n in networks
        ],
    )  # fmt: skip


async def write_inventory(
    writer: FloorWriter,
    name: str,
    nodes,
    inventory: dict,
    base: dict,
    node_addresses: dict,
    sdn: dict,
    prefixes: bool = False,
) -> None:
    tags = base["tags"]
    group = await writer.send("POST", "/ipam/vlan-groups/", {"name": name, "slug": name.lower()})
    writer.objects += 1
    vids = sorted({nic["vlan"] for g in inventory.values() for nic in g["nics"] if nic["vlan"]})
    vlans = await writer.bulk(
        "POST", "/ipam/vlans/", [{"vid": v, "name": f"vlan{v}", "group": group["id"]} for v in vids]
    )
    vlan_ids = {v["vid"]: v["id"] for v in vlans}
    devices = await writer.bulk(
        "POST",
        "/dcim/devices/",
        [
            {
                "name": f"{name}-{node}",
                "role": base["role"],
                "device_type": base["device_type"],
                "site": base["site"],
                "cluster": base["cluster"],
                "status": "active",
                "tags": [tags["proxbox"]],
                "custom_fields": NODE_FACTS,
            }
            for node in nodes
        ],
    )
    device_ids = {node: d["id"] for node, d in zip(nodes, devices, strict=True)}
    node_interfaces = await write_nodes(writer, nodes, device_ids, node_addresses, tags["proxbox"])
    guests = list(inventory.values())
    vms = await writer.bulk(
        "POST",
        "/virtualization/virtual-machines/",
        [
            {
                "name": f"{name}-{g['name']}",
                "status": "active",
                "vcpus": g["vcpus"],
                "memory": g["memory_mb"],
                "disk": sum(d["size_mb"] for d in g["disks"]),
                "site": base["site"],
                "cluster": base["cluster"],
                "device": device_ids[g["node"]],
                "tags": [tags[t] for t in ("proxbox", *g["tags"])],
                "custom_fields": {"proxbox_source": f"{name}/qemu/{g['vmid']}"},
            }
            for g in guests
        ],
    )
    # The fake's guests plug NIC n into bridge vmbrn; its nodes have vmbr0 only.
    nics = [
        (vm["id"], g, index, nic)
        for vm, g in zip(vms, guests, strict=True)
        for index, nic in enumerate(g["nics"])
    ]
    interfaces = await writer.bulk(
        "POST",
        "/virtualization/interfaces/",
        [
            {
                "virtual_machine": vm_id,
                "name": f"net{index}",
                "enabled": True,
                "mac_address": nic["mac"],
                "tags": [tags["proxbox"]],
                **(
                    {"mode": "access", "untagged_vlan": vlan_ids[nic["vlan"]]}
                    if nic["vlan"]
                    else {}
                ),
                "custom_fields": {
                    "proxbox_guest_interface": nic["name"],
                    **(
                        {"proxbox_bridge": bridge}
                        if (bridge := node_interfaces.get((device_ids[g["node"]], f"vmbr{index}")))
                        else {}
                    ),
                },
            }
            for vm_id, g, index, nic in nics
        ],
    )
    addressed = [
        (interface["id"], nic["address"], vm_id, g["name"])
        for interface, (vm_id, g, _index, nic) in zip(interfaces, nics, strict=True)
        if nic["address"]
    ]
    ips = await writer.bulk(
        "POST",
        "/ipam/ip-addresses/",
        [
            {
                "address": address,
                "status": "active",
                # The guest's host name (its agent's), on its primary address.
                "dns_name": host_name,
                "assigned_object_type": "virtualization.vminterface",
                "assigned_object_id": interface_id,
                "tags": [tags["proxbox"]],
            }
            for interface_id, address, _vm, host_name in addressed
        ],
    )
    await writer.bulk(
        "POST",
        "/virtualization/virtual-disks/",
        [
            {
                "virtual_machine": vm["id"],
                "name": d["name"],
                "size": d["size_mb"],
                "tags": [tags["proxbox"]],
            }
            for vm, g in zip(vms, guests, strict=True)
            for d in g["disks"]
        ],
    )
    await writer.bulk(
        "PATCH",
        "/virtualization/virtual-machines/",
        [
            {"id": vm_id, "primary_ip4": ip["id"]}
            for (_i, _a, vm_id, _name), ip in zip(addressed, ips, strict=True)
        ],
    )
    await write_records(writer, nodes, device_ids, guests, vms, base)
    await write_sdn(writer, name, sdn, base)
    if prefixes:
        await write_prefixes(writer, name, guest_prefixes(inventory, sdn), base)


async def measure_floor(
    url: str,
    token: str,
    name: str,
    nodes,
    inventory: dict,
    node_addresses: dict,
    sdn: dict,
    prefixes: bool = False,
) -> Floor:
    """`inventory`: vmid → {name, node, vcpus, memory_mb, tags, nics: [{name, mac, vlan,
    address}], disks: [{name, size_mb}]} (benchmarks/sync.py's `guest_specs`);
    `node_addresses`: node → its bridge's address; `sdn`: `sdn_layout`; `prefixes`: the
    guest networks' prefixes too (the endpoint's `prefixes_mode` on)."""
    scheme = "Bearer" if token.startswith("nbt_") else "Token"
    async with httpx.AsyncClient(
        base_url=f"{url}/api",
        headers={"Authorization": f"{scheme} {token}", "Accept": "application/json"},
        timeout=300,
        limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY),
    ) as client:
        writer = FloorWriter(client)
        tag_names = {"proxbox", *(t for g in inventory.values() for t in g["tags"])}
        base = await prerequisites(writer, name, tag_names, prefixes)
        started = time.perf_counter()
        await write_inventory(writer, name, nodes, inventory, base, node_addresses, sdn, prefixes)
        return Floor(time.perf_counter() - started, writer.objects, writer.requests, writer.steps)
