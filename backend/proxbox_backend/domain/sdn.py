"""Proxmox SDN (zones, VNets, subnets) and what the sync makes of it in NetBox.

What nodes run is the applied configuration (`running=1`): an edit waits in the files
until `PUT /cluster/sdn` applies it, and guests can only plug into an applied VNet.

| Proxmox | NetBox |
|---|---|
| zone of type `vlan` or `qinq` | VLAN group `SDN <zone>`, scoped to the endpoint's cluster |
| VNet in such a zone (`tag`: its VLAN id) | VLAN `<vnet>` with that VID in the zone's group |
| VNet in a `vxlan` / `evpn` zone (`tag`: its VNI) | L2VPN of type `vxlan` / `vxlan-evpn`, identifier the VNI |
| subnet | prefix in the endpoint's VRF (the guest addresses' VRF), linked to the VNet's VLAN |
| subnet `gateway` | IP address of role `anycast` (every node answers it), described as the gateway |
| subnet `dhcp-range` | IP range per range |
| guest NIC `bridge=<vnet>` | untagged VLAN of the interface / L2VPN termination |

A `simple` zone's VNets carry no VLAN or VNI: only their subnets are synced. A `qinq`
zone's VNets are its customer VLANs; the zone's service VLAN (its own `tag`) is not
written (NetBox's Q-in-Q roles would need an S-VLAN object per zone).

Every object written carries the `proxbox` tag and the `proxbox_sdn` custom field, its
source key `<cluster id>/<kind>/<Proxmox id>`: that key finds it again, and an object
whose key Proxmox no longer answers is deleted. Nothing without the key is touched.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from proxbox_backend.domain import tags
from proxbox_backend.domain.plan import Plan, diff, reconcile

FAMILY = "sdn"  # the policy's switch (`sdn_mode`)
KEY_FIELD = "proxbox_sdn"
VLAN_ZONES = frozenset({"vlan", "qinq"})
L2VPN_TYPES = {"vxlan": "vxlan", "evpn": "vxlan-evpn"}
MANAGED = {tags.PROXBOX.slug}
GATEWAY_ROLE = "anycast"

VLAN_GROUP, VLAN, L2VPN = "ipam.vlangroup", "ipam.vlan", "vpn.l2vpn"
PREFIX, IP_RANGE, IP_ADDRESS = "ipam.prefix", "ipam.iprange", "ipam.ipaddress"
TERMINATION = "vpn.l2vpntermination"
OBJECT_TYPES = (VLAN_GROUP, VLAN, L2VPN, PREFIX, IP_RANGE, IP_ADDRESS, TERMINATION)


class SdnError(ValueError):
    """An answer of Proxmox's SDN API the sync cannot read (the message says which)."""


@dataclass(frozen=True)
class Zone:
    name: str
    type: str


@dataclass(frozen=True)
class VNet:
    name: str
    zone: str
    tag: int | None = None
    alias: str = ""


@dataclass(frozen=True)
class Subnet:
    id: str  # <zone>-<network>-<mask>
    vnet: str
    cidr: str
    gateway: str | None = None
    snat: bool = False
    dhcp_ranges: tuple[tuple[str, str], ...] = ()


@dataclass
class Sdn:
    """The cluster's applied SDN. `answered`: Proxmox answered every list, so what it
    did not list is gone; otherwise (no SDN package, an error) the objects in NetBox
    stay as they are."""

    zones: list[Zone] = field(default_factory=list)
    vnets: list[VNet] = field(default_factory=list)
    subnets: list[Subnet] = field(default_factory=list)
    answered: bool = True

    def zone_type(self, vnet: VNet) -> str | None:
        return next((z.type for z in self.zones if z.name == vnet.zone), None)


def zones(entries: list[dict]) -> list[Zone]:
    return [Zone(str(e["zone"]), str(e.get("type") or "")) for e in entries or () if "zone" in e]


def vnets(entries: list[dict]) -> list[VNet]:
    out = []
    for e in entries or ():
        if "vnet" not in e or not e.get("zone"):
            continue
        tag = e.get("tag")
        out.append(
            VNet(
                str(e["vnet"]),
                str(e["zone"]),
                int(tag) if tag not in (None, "") else None,
                str(e.get("alias") or ""),
            )
        )
    return out


def dhcp_ranges(value: Any) -> tuple[tuple[str, str], ...]:
    """PVE answers a subnet's ranges as objects; its files (and older answers) hold
    `start-address=…,end-address=…` strings: both read alike."""
    items = [value] if isinstance(value, str | dict) else list(value or ())
    out = []
    for item in items:
        if isinstance(item, str):
            item = dict(p.split("=", 1) for p in item.split(",") if "=" in p)
        start, end = item.get("start-address"), item.get("end-address")
        if start and end:
            out.append((str(start), str(end)))
    return tuple(out)


def subnets(vnet: str, entries: list[dict]) -> list[Subnet]:
    out = []
    for e in entries or ():
        subnet_id = str(e.get("subnet") or e.get("id") or "")
        cidr = e.get("cidr")
        if not cidr and subnet_id.count("-") >= 2:
            _zone, network, mask = subnet_id.split("-", 2)
            cidr = f"{network}/{mask}"
        try:
            network = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            raise SdnError(f"subnet {subnet_id!r} of VNet {vnet!r}: no CIDR ({cidr!r})") from None
        out.append(
            Subnet(
                subnet_id,
                str(e.get("vnet") or vnet),
                str(network),
                str(e["gateway"]) if e.get("gateway") else None,
                str(e.get("snat") or "0") in ("1", "true", "True"),
                dhcp_ranges(e.get("dhcp-range")),
            )
        )
    return out


# -- source keys -------------------------------------------------------------------------


def key(cluster_id: int, kind: str, name: str) -> str:
    return f"{cluster_id}/{kind}/{name}"


def key_prefix(cluster_id: int) -> str:
    return f"{cluster_id}/"


def key_of(obj: dict) -> str | None:
    return (obj.get("custom_fields") or {}).get(KEY_FIELD)


def _nested(value: Any) -> Any:
    if isinstance(value, dict):
        for name in ("id", "value"):
            if name in value:
                return value[name]
    return value


def _marked(payload: dict, source: str) -> dict:
    return {**payload, "custom_fields": {KEY_FIELD: source}}


# -- desired objects ----------------------------------------------------------------------


def vlan_group_payload(cluster_id: int, zone: Zone) -> dict:
    return {
        "name": f"SDN {zone.name}",
        "slug": f"proxbox-sdn-{cluster_id}-{zone.name}",
        "scope_type": "virtualization.cluster",
        "scope_id": cluster_id,
        "description": f"Proxmox SDN {zone.type} zone {zone.name}, kept by the Proxbox sync.",
    }


def desired_vlan_groups(cluster_id: int, sdn: Sdn) -> dict[str, dict]:
    return {
        key(cluster_id, "zone", z.name): vlan_group_payload(cluster_id, z)
        for z in sdn.zones
        if z.type in VLAN_ZONES
    }


def desired_vlans(cluster_id: int, sdn: Sdn, group_ids: dict[str, int]) -> dict[str, dict]:
    out = {}
    for v in sdn.vnets:
        group = group_ids.get(key(cluster_id, "zone", v.zone))
        if sdn.zone_type(v) not in VLAN_ZONES or v.tag is None or group is None:
            continue
        out[key(cluster_id, "vnet", v.name)] = {
            "vid": v.tag,
            "name": v.name,
            "group": group,
            "status": "active",
            "description": v.alias or f"Proxmox SDN VNet {v.name} (zone {v.zone})",
        }
    return out


def desired_l2vpns(cluster_id: int, endpoint_name: str, sdn: Sdn) -> dict[str, dict]:
    out = {}
    for v in sdn.vnets:
        kind = L2VPN_TYPES.get(sdn.zone_type(v) or "")
        if kind is None or v.tag is None:
            continue
        out[key(cluster_id, "vnet", v.name)] = {
            # L2VPN names and slugs are unique in all of NetBox: the endpoint tells
            # two clusters' VNets of one name apart.
            "name": f"{v.name} ({endpoint_name})"[:100],
            "slug": f"proxbox-sdn-{cluster_id}-{v.name}",
            "type": kind,
            "identifier": v.tag,
            "description": v.alias or f"Proxmox SDN VNet {v.name} (zone {v.zone})",
        }
    return out


def desired_prefixes(
    cluster_id: int, sdn: Sdn, vrf_id: int | None, vlan_ids: dict[str, int]
) -> dict[str, dict]:
    return {
        key(cluster_id, "subnet", s.id): {
            "prefix": s.cidr,
            "vrf": vrf_id,
            "vlan": vlan_ids.get(key(cluster_id, "vnet", s.vnet)),
            "status": "active",
            "description": f"Proxmox SDN subnet of VNet {s.vnet}" + (" (SNAT)" if s.snat else ""),
        }
        for s in sdn.subnets
    }


def desired_gateways(cluster_id: int, sdn: Sdn, vrf_id: int | None) -> dict[str, dict]:
    out = {}
    for s in sdn.subnets:
        if not s.gateway:
            continue
        length = ipaddress.ip_network(s.cidr).prefixlen
        out[key(cluster_id, "gateway", s.id)] = {
            "address": f"{s.gateway}/{length}",
            "vrf": vrf_id,
            "status": "active",
            "role": GATEWAY_ROLE,
            "description": f"Gateway of Proxmox SDN VNet {s.vnet} ({s.cidr})",
        }
    return out


def desired_ranges(cluster_id: int, sdn: Sdn, vrf_id: int | None) -> dict[str, dict]:
    out = {}
    for s in sdn.subnets:
        length = ipaddress.ip_network(s.cidr).prefixlen
        for start, end in s.dhcp_ranges:
            out[key(cluster_id, "dhcp", f"{s.id}/{start}-{end}")] = {
                "start_address": f"{start}/{length}",
                "end_address": f"{end}/{length}",
                "vrf": vrf_id,
                "status": "active",
                "description": f"DHCP range of Proxmox SDN VNet {s.vnet} ({s.cidr})",
            }
    return out


# -- the planner ------------------------------------------------------------------------------


_ADDRESSES = frozenset({"address", "start_address", "end_address", "prefix"})


def _compared(name: str, value: Any) -> Any:
    """A field as the planner compares it: nested objects by id, choices by value,
    addresses and prefixes in one spelling (NetBox compresses IPv6)."""
    if name in _ADDRESSES and value:
        return str(ipaddress.ip_interface(value))
    return _nested(value)


def plan(object_type: str, desired: dict[str, dict], current: list[dict], answered: bool) -> Plan:
    """Desired objects (source key → fields) against the ones carrying a key of this
    cluster → creates, updates of differing fields, deletes of keys Proxmox no longer
    lists (only when it `answered`: else they stay)."""

    def changes(fields: dict, found: dict) -> dict:
        now = {name: _compared(name, found.get(name)) for name in fields}
        wanted = {name: _compared(name, value) for name, value in fields.items()}
        return tags.with_sync_tags(diff(wanted, now), found, MANAGED)

    return reconcile(
        Plan(object_type, family=FAMILY),
        desired,
        {key_of(obj): obj for obj in current if key_of(obj)},
        label=lambda source: f"{object_type.split('.')[1]} {source.split('/', 2)[2]}",
        payload=lambda source, fields: tags.with_sync_tags(_marked(fields, source), None, MANAGED),
        changes=changes,
        gone=lambda _source, _obj: answered,
    )


# -- guest interfaces on a VNet -------------------------------------------------------------


@dataclass(frozen=True)
class VNetLinks:
    """What a guest NIC plugged into a VNet (`bridge=<vnet>`) links to: its VLAN (an
    untagged access VLAN) or its L2VPN (a termination)."""

    vlans: dict[str, int] = field(default_factory=dict)  # VNet → NetBox VLAN id
    l2vpns: dict[str, int] = field(default_factory=dict)  # VNet → NetBox L2VPN id


def links(cluster_id: int, sdn: Sdn, vlan_ids: dict, l2vpn_ids: dict) -> VNetLinks:
    def ids(found: dict) -> dict[str, int]:
        return {
            v.name: found[key(cluster_id, "vnet", v.name)]
            for v in sdn.vnets
            if key(cluster_id, "vnet", v.name) in found
        }

    return VNetLinks(ids(vlan_ids), ids(l2vpn_ids))


def plan_terminations(
    wanted: dict[int, int], current: list[dict], known_interfaces: set[int]
) -> Plan:
    """`wanted`: VM interface id → L2VPN id. `current`: terminations of the cluster's
    L2VPNs. A termination of an interface this run does not know (an excluded or
    unreadable guest's) stays; one of an interface no longer on that VNet goes."""
    interface_type = "virtualization.vminterface"
    return reconcile(
        Plan(TERMINATION, family=FAMILY),
        {interface: {"l2vpn": l2vpn} for interface, l2vpn in sorted(wanted.items())},
        {
            t["assigned_object_id"]: t
            for t in current
            if t.get("assigned_object_type") == interface_type
        },
        label=lambda interface: f"termination of interface {interface}",
        payload=lambda interface, fields: tags.with_sync_tags(
            {**fields, "assigned_object_type": interface_type, "assigned_object_id": interface},
            None,
            MANAGED,
        ),
        changes=lambda fields, found: tags.with_sync_tags(
            diff(fields, {"l2vpn": _nested(found.get("l2vpn"))}), found, MANAGED
        ),
        gone=lambda interface, t: (
            interface in known_interfaces and tags.PROXBOX.slug in tags.tag_slugs(t)
        ),
    )
