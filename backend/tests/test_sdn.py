"""The SDN family's mapping: Proxmox's answers → the desired NetBox objects → plans,
the interfaces' link to a VNet, the policy switch, and a cluster without SDN."""

from __future__ import annotations

import asyncio

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.clients.proxmox import ProxmoxError
from proxbox_backend.domain import sdn
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import GuestNic
from proxbox_backend.domain.policy import SyncPolicy
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.stages import interfaces
from proxbox_backend.stages import sdn as sdn_stage

CLUSTER = 7
ZONES = [
    {"zone": "lan", "type": "vlan", "bridge": "vmbr0"},
    {"zone": "ovl", "type": "vxlan", "peers": "10.0.0.1"},
    {"zone": "fab", "type": "evpn", "controller": "ctl"},
    {"zone": "plain", "type": "simple"},
]
VNETS = [
    {"vnet": "web", "zone": "lan", "tag": 110, "alias": "web tier"},
    {"vnet": "tun", "zone": "ovl", "tag": 5000},
    {"vnet": "ev", "zone": "fab", "tag": 6000},
    {"vnet": "loc", "zone": "plain"},
]
SUBNETS = {
    "web": [
        {
            "subnet": "lan-10.1.0.0-24",
            "cidr": "10.1.0.0/24",
            "vnet": "web",
            "gateway": "10.1.0.1",
            "snat": 1,
            "dhcp-range": [
                {"start-address": "10.1.0.100", "end-address": "10.1.0.150"},
                {"start-address": "10.1.0.200", "end-address": "10.1.0.210"},
            ],
        }
    ],
    # The files' spelling, without the fields PVE derives from the ID.
    "tun": [{"subnet": "ovl-fd00:5::-64", "dhcp-range": ["start-address=fd00:5::10,end-address=fd00:5::20"]}],
    "ev": [],
    "loc": [{"subnet": "plain-192.168.9.0-24", "cidr": "192.168.9.0/24", "dhcp-range": []}],
}  # fmt: skip


class FakeProxmox:
    """Answers `/cluster/sdn/...` like PVE; `fail`: path → ProxmoxError to raise."""

    def __init__(self, fail=None):
        self.fail = fail or {}
        self.asked = []

    async def get(self, path, **params):
        self.asked.append((path, params))
        if path in self.fail:
            raise self.fail[path]
        if path == "/cluster/sdn/zones":
            return ZONES
        if path == "/cluster/sdn/vnets":
            return VNETS
        return SUBNETS[path.split("/")[4]]


def read(fake) -> tuple[sdn.Sdn, list[str]]:
    warnings: list[str] = []
    found = asyncio.run(ProxmoxGateway(fake).sdn(warnings))
    return found, warnings


def test_the_applied_sdn_is_read_and_parsed():
    fake = FakeProxmox()
    found, warnings = read(fake)
    assert warnings == [] and found.answered
    assert all(params == {"running": 1} for _path, params in fake.asked)
    assert [(z.name, z.type) for z in found.zones] == [
        ("lan", "vlan"), ("ovl", "vxlan"), ("fab", "evpn"), ("plain", "simple")
    ]  # fmt: skip
    assert found.vnets[0] == sdn.VNet("web", "lan", 110, "web tier")
    assert found.vnets[3].tag is None
    web, tun, loc = found.subnets
    assert (web.cidr, web.gateway, web.snat) == ("10.1.0.0/24", "10.1.0.1", True)
    assert web.dhcp_ranges == (("10.1.0.100", "10.1.0.150"), ("10.1.0.200", "10.1.0.210"))
    assert (tun.cidr, tun.gateway, tun.dhcp_ranges) == (
        "fd00:5::/64", None, (("fd00:5::10", "fd00:5::20"),)
    )  # fmt: skip
    assert loc.vnet == "loc" and loc.dhcp_ranges == ()


@pytest.mark.parametrize("status", [404, 501])
def test_a_cluster_without_sdn_has_none_and_keeps_what_netbox_has(status):
    path = "/cluster/sdn/zones"
    fake = FakeProxmox({path: ProxmoxError(status, "GET", path, "Method not implemented")})
    found, warnings = read(fake)
    assert (found.answered, found.zones, warnings) == (False, [], [])
    # What it answered nothing for stays: no delete without an answer.
    current = [{"id": 4, "custom_fields": {sdn.KEY_FIELD: f"{CLUSTER}/vnet/web"}, "tags": []}]
    kept = sdn.plan(sdn.VLAN, {}, current, found.answered)
    assert kept.deletes == [] and kept.unchanged == {f"{CLUSTER}/vnet/web": 4}


def test_an_sdn_read_failure_is_a_warning_and_keeps_what_netbox_has():
    path = "/cluster/sdn/vnets/web/subnets"
    fake = FakeProxmox({path: ProxmoxError(500, "GET", path, "boom")})
    found, warnings = read(fake)
    assert not found.answered and len(warnings) == 1 and "SDN unreadable" in warnings[0]


def desired(found: sdn.Sdn, vrf=3):
    groups = sdn.desired_vlan_groups(CLUSTER, found)
    group_ids = {k: 100 + n for n, k in enumerate(groups)}
    vlans = sdn.desired_vlans(CLUSTER, found, group_ids)
    vlan_ids = {k: 200 + n for n, k in enumerate(vlans)}
    return (
        groups,
        vlans,
        sdn.desired_l2vpns(CLUSTER, "pve-a", found),
        sdn.desired_prefixes(CLUSTER, found, vrf, vlan_ids),
        sdn.desired_gateways(CLUSTER, found, vrf),
        sdn.desired_ranges(CLUSTER, found, vrf),
    )


def test_each_proxmox_object_maps_to_its_netbox_object():
    found, _ = read(FakeProxmox())
    groups, vlans, l2vpns, prefixes, gateways, ranges = desired(found)
    # Only the VLAN zone has a VLAN group, scoped to the endpoint's cluster.
    assert groups == {
        "7/zone/lan": {
            "name": "SDN lan",
            "slug": "proxbox-sdn-7-lan",
            "scope_type": "virtualization.cluster",
            "scope_id": CLUSTER,
            "description": "Proxmox SDN vlan zone lan, kept by the Proxbox sync.",
        }
    }
    assert vlans == {
        "7/vnet/web": {"vid": 110, "name": "web", "group": 100, "status": "active",
                       "description": "web tier"}
    }  # fmt: skip
    assert {k: (v["type"], v["identifier"], v["name"]) for k, v in l2vpns.items()} == {
        "7/vnet/tun": ("vxlan", 5000, "tun (pve-a)"),
        "7/vnet/ev": ("vxlan-evpn", 6000, "ev (pve-a)"),
    }
    assert prefixes["7/subnet/lan-10.1.0.0-24"] == {
        "prefix": "10.1.0.0/24",
        "vrf": 3,
        "vlan": 200,
        "status": "active",
        "description": "Proxmox SDN subnet of VNet web (SNAT)",
    }
    assert prefixes["7/subnet/plain-192.168.9.0-24"]["vlan"] is None
    assert set(gateways) == {"7/gateway/lan-10.1.0.0-24"}
    gateway = gateways["7/gateway/lan-10.1.0.0-24"]
    assert (gateway["address"], gateway["vrf"], gateway["role"]) == ("10.1.0.1/24", 3, "anycast")
    assert "Gateway" in gateway["description"]
    assert {(r["start_address"], r["end_address"]) for r in ranges.values()} == {
        ("10.1.0.100/24", "10.1.0.150/24"),
        ("10.1.0.200/24", "10.1.0.210/24"),
        ("fd00:5::10/64", "fd00:5::20/64"),
    }


def as_netbox(source: str, fields: dict, object_id: int) -> dict:
    """An object as NetBox answers it: nested objects, choices, compressed addresses."""
    shown = {
        name: {"id": value} if name in ("vrf", "vlan", "group") and value else value
        for name, value in fields.items()
    }
    for name in ("status", "role", "type"):
        if name in shown:
            shown[name] = {"value": shown[name], "label": shown[name].title()}
    return {
        **shown,
        "id": object_id,
        "tags": [{"slug": "proxbox"}],
        "custom_fields": {sdn.KEY_FIELD: source},
    }


def test_plans_create_marked_objects_then_leave_them_and_delete_what_proxmox_dropped():
    found, _ = read(FakeProxmox())
    *_, prefixes, gateways, ranges = desired(found)
    first = sdn.plan(sdn.PREFIX, prefixes, [], True)
    assert first.family == "sdn" and not first.deletes
    created = {c.key: c.payload for c in first.creates}
    assert created["7/subnet/lan-10.1.0.0-24"]["custom_fields"] == {
        sdn.KEY_FIELD: "7/subnet/lan-10.1.0.0-24"
    }
    assert created["7/subnet/lan-10.1.0.0-24"]["tags"] == [{"slug": "proxbox"}]

    # What NetBox holds now matches: nothing to write, IPv6 spelled either way.
    current = [as_netbox(k, v, n) for n, (k, v) in enumerate(ranges.items())]
    again = sdn.plan(sdn.IP_RANGE, ranges, current, True)
    assert (again.creates, again.updates, again.deletes) == ([], [], [])
    gateway_now = [as_netbox(k, v, 9) for k, v in gateways.items()]
    assert sdn.plan(sdn.IP_ADDRESS, gateways, gateway_now, True).unchanged

    # A changed gateway is updated; a subnet gone from Proxmox is deleted.
    moved = {k: {**v, "address": "10.1.0.254/24"} for k, v in gateways.items()}
    update = sdn.plan(sdn.IP_ADDRESS, moved, gateway_now, True).updates
    assert [u.changes for u in update] == [{"address": "10.1.0.254/24"}]
    gone = sdn.plan(sdn.IP_ADDRESS, {}, gateway_now, True)
    assert [d.id for d in gone.deletes] == [9]


def test_a_nic_on_a_vlan_vnet_is_an_access_port_of_its_vlan():
    nic = GuestNic("net0", "net0", "BC:24:11:00:00:01", True, bridge="web")
    assert interfaces.vlan_fields(nic, {}, {"web": 200}) == {
        "mode": "access",
        "untagged_vlan": 200,
        "tagged_vlans": [],
    }
    # SDN off or another bridge: the guest config's VLANs alone.
    assert interfaces.vlan_fields(nic, {}, None) == interfaces.NO_VLANS
    tagged = GuestNic("net0", "net0", None, True, vlan=30, bridge="web")
    assert interfaces.vlan_fields(tagged, {30: 9}, {"web": 200})["untagged_vlan"] == 9


def test_terminations_follow_the_nics_on_vxlan_vnets():
    current = [
        {"id": 1, "l2vpn": {"id": 50}, "assigned_object_type": "virtualization.vminterface",
         "assigned_object_id": 11, "tags": [{"slug": "proxbox"}]},
        {"id": 2, "l2vpn": {"id": 50}, "assigned_object_type": "virtualization.vminterface",
         "assigned_object_id": 12, "tags": [{"slug": "proxbox"}]},
        # An excluded guest's interface, unknown this run: it stays.
        {"id": 3, "l2vpn": {"id": 50}, "assigned_object_type": "virtualization.vminterface",
         "assigned_object_id": 13, "tags": [{"slug": "proxbox"}]},
        # The operator's own termination of a known interface: it stays too.
        {"id": 4, "l2vpn": {"id": 51}, "assigned_object_type": "virtualization.vminterface",
         "assigned_object_id": 14, "tags": []},
    ]  # fmt: skip
    the_plan = sdn.plan_terminations({11: 50, 12: 51, 15: 51}, current, {11, 12, 14, 15})
    assert the_plan.unchanged == {11: 1, 13: 3, 14: 4}
    assert [(u.key, u.changes) for u in the_plan.updates] == [(12, {"l2vpn": 51})]
    assert [c.payload["assigned_object_id"] for c in the_plan.creates] == [15]
    assert the_plan.deletes == []
    moved_off = sdn.plan_terminations({}, current[:1], {11})
    assert [d.id for d in moved_off.deletes] == [1]


def test_sdn_mode_governs_every_sdn_plan_whatever_its_object_type():
    found, _ = read(FakeProxmox())
    _, vlans, *_ = desired(found)
    current = [as_netbox("7/vnet/old", {"vid": 9, "name": "old"}, 5)]
    the_plan = sdn.plan(sdn.VLAN, vlans, current, True)
    off = SyncPolicy(modes={"sdn": "off"}).restrict(the_plan)
    assert (off.creates, off.deletes, off.unchanged) == ([], [], {"7/vnet/old": 5})
    # `vlans_mode` is the guest tags' VLANs' switch, not the VNets'.
    assert SyncPolicy(modes={"vlans": "off"}).restrict(the_plan).creates
    create_only = SyncPolicy(modes={"sdn": "create_only"}).restrict(the_plan)
    assert len(create_only.creates) == 1 and create_only.deletes == []


class RecordingNetBox:
    """A gateway whose client records each bulk write in order (a NetBox answering
    every one) and marks when the stage hands its VNet links on."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.client = self

    async def bulk_create(self, path, payloads):
        self.events.append(("create", path))
        return BulkResult(succeeded={i: {"id": 900 + i} for i in range(len(payloads))})

    async def bulk_update(self, path, changes):
        self.events.append(("update", path))
        return BulkResult(succeeded={i: c for i, c in enumerate(changes)})

    async def bulk_delete(self, path, ids):
        self.events.append(("delete", path))
        return BulkResult(succeeded={i: {"id": id_} for i, id_ in enumerate(ids)})


def apply_sdn(found: sdn.Sdn, current: dict[str, list[dict]]) -> tuple[list, sdn.VNetLinks]:
    netbox = RecordingNetBox()
    state = sdn_stage.SdnState(found, [], True, current)
    links = asyncio.run(
        sdn_stage.apply(
            netbox, CLUSTER, "pve-a", 3, state, Tally(),
            linked=lambda _links: netbox.events.append(("linked", "")),
        )
    )  # fmt: skip
    return netbox.events, links


def test_the_links_are_handed_on_before_the_subnets_unless_a_vnet_goes():
    found, _ = read(FakeProxmox())
    events, links = apply_sdn(found, {})
    assert links.vlans == {"web": 900} and set(links.l2vpns) == {"tun", "ev"}
    order = [path for _op, path in events]
    # Parents first: the group, then its VLANs and the L2VPNs, then the subnets' objects.
    assert order.index("/ipam/vlan-groups/") < order.index("/ipam/vlans/")
    assert order.index("") < order.index("/ipam/prefixes/")

    # A VLAN that goes: its prefix first, then the VLAN; the links are not handed on
    # early (the stage gives them once it is done).
    gone = as_netbox("7/vnet/old", {"vid": 9, "name": "old"}, 5)
    old_prefix = as_netbox("7/subnet/lan-10.9.0.0-24", {"prefix": "10.9.0.0/24"}, 6)
    events, links = apply_sdn(found, {sdn.VLAN: [gone], sdn.PREFIX: [old_prefix]})
    assert events.index(("delete", "/ipam/prefixes/")) < events.index(("delete", "/ipam/vlans/"))
    assert ("linked", "") not in events and links.vlans == {"web": 900}


def test_a_targeted_sync_creates_the_sdn_its_guest_needs_and_leaves_the_rest_to_full_runs():
    from proxbox_backend.domain.policy import Target

    found, _ = read(FakeProxmox())
    _, vlans, *_ = desired(found)
    current = [as_netbox("7/vnet/old", {"vid": 9, "name": "old"}, 5)]
    target = SyncPolicy().targeting(Target.parse(guest="qemu/100"))
    restricted = target.restrict(sdn.plan(sdn.VLAN, vlans, current, True))
    assert [c.key for c in restricted.creates] == ["7/vnet/web"]
    assert restricted.deletes == [] and restricted.unchanged == {"7/vnet/old": 5}
    # The guest's own terminations are its business (its interfaces alone are known).
    terminations = sdn.plan_terminations({11: 50}, [], {11})
    assert target.restrict(terminations).creates == terminations.creates
