"""Node addresses: /nodes/{n}/network CIDRs → addresses on the device interfaces, and the
device's primary IP (parsing, planners, and the stage against a NetBox that records)."""

import json

import httpx
import pytest

from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain import proxmox_config as parse
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import NodeInterface
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import node_addresses
from proxbox_backend.stages.primary_ips import VmOutcomes

PROXBOX = [{"slug": "proxbox"}]

# Device 11: vmbr0 carries the cluster address (and a v6 one), vmbr1 a guest network,
# vmbr9 the default gateways.
NETWORK = [
    NodeInterface("vmbr0", "bridge", True, addresses=("192.168.100.11/24", "fd00::11/64")),
    NodeInterface("vmbr1", "bridge", True, addresses=("10.250.1.1/24",)),
    NodeInterface(
        "vmbr9",
        "bridge",
        True,
        addresses=("172.16.0.11/24", "2001:db8::11/64"),
        gateways=frozenset({4, 6}),
    ),
]
INTERFACES = {(11, "vmbr0"): 100, (11, "vmbr1"): 101, (11, "vmbr9"): 109}


def address(id_, cidr, interface, tags=PROXBOX, vrf=None, kind="dcim.interface"):
    return {
        "id": id_,
        "address": cidr,
        "status": {"value": "active"},
        "vrf": {"id": vrf} if vrf else None,
        "assigned_object_type": kind,
        "assigned_object_id": interface,
        "tags": list(tags),
    }


def synced(vrf=None):
    """NetBox after a first sync of NETWORK."""
    return [
        address(1, "192.168.100.11/24", 100, vrf=vrf),
        address(2, "fd00::11/64", 100, vrf=vrf),
        address(3, "10.250.1.1/24", 101, vrf=vrf),
        address(4, "172.16.0.11/24", 109, vrf=vrf),
        address(5, "2001:db8::11/64", 109, vrf=vrf),
    ]


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "addresses", "gateways"),
    [
        # current majors: cidr / cidr6 (with address/netmask alongside)
        (
            {
                "cidr": "192.168.100.11/24",
                "address": "192.168.100.11",
                "netmask": "24",
                "cidr6": "FD00:0::11/64",
                "gateway": "192.168.100.1",
            },
            ("192.168.100.11/24", "fd00::11/64"),
            {4},
        ),
        # older majors: address + netmask only, the v4 mask possibly dotted
        (
            {
                "address": "10.0.0.5",
                "netmask": "255.255.255.0",
                "address6": "fd00::5",
                "netmask6": 64,
                "gateway6": "fd00::1",
            },
            ("10.0.0.5/24", "fd00::5/64"),
            {6},
        ),
        # nothing configured, or nonsense: no address
        ({"method": "manual"}, (), set()),
        ({"cidr": "not-an-ip", "address6": "fd00::9"}, (), set()),
    ],
)
def test_node_interface_addresses_from_the_network_entry(entry, addresses, gateways):
    [interface] = parse.node_interfaces([{"iface": "vmbr0", "type": "bridge", **entry}])
    assert interface.addresses == addresses
    assert interface.gateways == gateways


# -- the address planner -------------------------------------------------------------------


def test_first_sync_creates_v4_and_v6_addresses_tagged_on_their_interfaces():
    plan = node_addresses.plan({11: NETWORK}, INTERFACES, [])
    assert [c.payload for c in plan.creates][:2] == [
        {
            "address": "192.168.100.11/24",
            "status": "active",
            "vrf": None,
            "assigned_object_type": "dcim.interface",
            "assigned_object_id": 100,
            "tags": PROXBOX,
        },
        {
            "address": "fd00::11/64",
            "status": "active",
            "vrf": None,
            "assigned_object_type": "dcim.interface",
            "assigned_object_id": 100,
            "tags": PROXBOX,
        },
    ]
    assert [c.key for c in plan.creates] == [
        (100, "192.168.100.11/24"),
        (100, "fd00::11/64"),
        (101, "10.250.1.1/24"),
        (109, "172.16.0.11/24"),
        (109, "2001:db8::11/64"),
    ]


def test_addresses_live_in_the_endpoints_vrf_and_move_there():
    plan = node_addresses.plan({11: NETWORK}, INTERFACES, [], vrf_id=8)
    assert {c.payload["vrf"] for c in plan.creates} == {8}
    moved = node_addresses.plan({11: NETWORK}, INTERFACES, synced(), vrf_id=8)
    assert {u.id: u.changes for u in moved.updates} == {i: {"vrf": 8} for i in range(1, 6)}
    assert node_addresses.plan({11: NETWORK}, INTERFACES, synced(vrf=8), vrf_id=8).writes == 0


def test_resync_is_unchanged():
    plan = node_addresses.plan({11: NETWORK}, INTERFACES, synced())
    assert plan.writes == 0
    assert sorted(plan.unchanged.values()) == [1, 2, 3, 4, 5]


def test_a_removed_address_goes_only_if_the_sync_tagged_it():
    current = [
        *synced(),
        address(6, "10.250.1.2/24", 101),  # synced before, gone from Proxmox
        address(7, "10.250.1.3/24", 101, tags=()),  # the operator's: stays
        address(8, "10.9.9.9/24", 999),  # another device's interface: not looked at
        address(9, "10.250.1.4/24", 101, kind="virtualization.vminterface"),  # not this one
    ]
    plan = node_addresses.plan({11: NETWORK}, INTERFACES, current)
    assert [d.id for d in plan.deletes] == [6]
    assert plan.creates == [] and plan.updates == []
    assert 7 not in plan.unchanged.values()


def test_an_operators_address_that_proxmox_lists_becomes_the_syncs():
    current = [address(1, "192.168.100.11/24", 100, tags=())]
    plan = node_addresses.plan({11: NETWORK[:1]}, INTERFACES, current)
    assert [(u.id, u.changes) for u in plan.updates] == [(1, {"tags": PROXBOX})]


def test_an_unreadable_network_keeps_the_nodes_addresses():
    # Device 12's network was not read: it is not in the networks at all.
    current = [*synced(), address(20, "192.168.100.12/24", 200)]
    plan = node_addresses.plan({11: NETWORK}, {**INTERFACES, (12, "vmbr0"): 200}, current)
    assert plan.deletes == [] and 20 not in plan.unchanged.values()


def test_an_interface_whose_create_failed_gets_no_address():
    plan = node_addresses.plan({11: NETWORK}, {(11, "vmbr0"): 100}, [])
    assert {c.key[0] for c in plan.creates} == {100}


# -- the primary planner -------------------------------------------------------------------

IP_IDS = {(a["assigned_object_id"], a["address"]): a["id"] for a in synced()}


def primaries(plan):
    return {u.id: u.changes for u in plan.updates}


@pytest.mark.parametrize(
    ("cluster_ip", "current", "removed", "network", "changes"),
    [
        # the cluster address's interface: that address, and its v6 one
        ("192.168.100.11", {}, set(), NETWORK, {"primary_ip4": 1, "primary_ip6": 2}),
        # no cluster address known: the gateway interface's
        (None, {}, set(), NETWORK, {"primary_ip4": 4, "primary_ip6": 5}),
        # the cluster address is on no interface: the gateway interface's
        ("192.0.2.1", {}, set(), NETWORK, {"primary_ip4": 4, "primary_ip6": 5}),
        # the cluster interface has no v6: v6 from the v6 gateway's interface
        (
            "10.250.1.1",
            {},
            set(),
            NETWORK,
            {"primary_ip4": 3, "primary_ip6": 5},
        ),
        # a primary that is set is kept, whoever chose it
        ("192.168.100.11", {"primary_ip4": 900, "primary_ip6": 2}, set(), NETWORK, {}),
        # one this run deleted is replaced
        (
            "192.168.100.11",
            {"primary_ip4": 900, "primary_ip6": 2},
            {900},
            NETWORK,
            {"primary_ip4": 1},
        ),
        # nothing to choose from: nothing written
        (None, {}, set(), NETWORK[:2], {}),
    ],
)
def test_primary_ip_choice(cluster_ip, current, removed, network, changes):
    plan = node_addresses.plan_primaries(
        {11: network}, {11: cluster_ip}, INTERFACES, IP_IDS, {11: current}, removed
    )
    assert primaries(plan) == ({11: changes} if changes else {})
    assert plan.object_type == "dcim.device"


# -- the stage, against a NetBox that records what it is sent ------------------------------


class RecordingNetBox:
    def __init__(self, current: list[dict]):
        self.current, self.writes, self.next_id = current, [], 100

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET":
            wanted = set(request.url.params.get_list("device_id"))
            results = (
                [a for a in self.current if "11" in wanted]
                if path.endswith("/ip-addresses/")
                else []
            )
            return httpx.Response(200, json={"results": results, "next": None})
        items = json.loads(request.content)
        self.writes.append((request.method, path, items))
        if request.method == "POST":
            out = []
            for item in items:
                self.next_id += 1
                out.append({**item, "id": self.next_id})
            return httpx.Response(201, json=out)
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json=items)


async def run_stage(current, policy=None, outcomes=None, tally=None):
    recorder = RecordingNetBox(current)
    client = NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(recorder.answer)
    )
    outcomes = outcomes or VmOutcomes(frozenset({11}), frozenset({11}), {11: {}})
    tally = tally or Tally()
    token = ACTIVE.set(policy or SyncPolicy())
    try:
        await node_addresses.apply(
            NetBoxGateway(client),
            {11: NETWORK},
            {11: "192.168.100.11"},
            INTERFACES,
            outcomes,
            tally,
            vrf_id=None,
        )
    finally:
        ACTIVE.reset(token)
        await client.aclose()
    return recorder.writes, tally


@pytest.mark.asyncio
async def test_stage_creates_addresses_then_sets_the_primary_counting_the_device_once():
    tally = Tally()
    tally.add("dcim.device", "unchanged")
    writes, tally = await run_stage([], tally=tally)
    assert [(method, path) for method, path, _ in writes] == [
        ("POST", "/api/ipam/ip-addresses/"),
        ("PATCH", "/api/dcim/devices/"),
    ]
    assert len(writes[0][2]) == 5
    assert writes[1][2] == [{"id": 11, "primary_ip4": 101, "primary_ip6": 102}]
    devices = tally.of("dcim.device")
    assert (devices.updated, devices.unchanged) == (1, 0)
    assert tally.of("ipam.ipaddress").created == 5


@pytest.mark.asyncio
async def test_stage_resync_writes_nothing():
    outcomes = VmOutcomes(
        frozenset({11}), frozenset({11}), {11: {"primary_ip4": 1, "primary_ip6": 2}}
    )
    writes, tally = await run_stage(synced(), outcomes=outcomes)
    assert writes == []
    assert tally.of("ipam.ipaddress").unchanged == 5


@pytest.mark.parametrize(
    ("policy", "methods"),
    [
        # addresses switched off: none written, and the primary from those that exist
        (SyncPolicy(modes={"ips": "off"}), [("PATCH", "/api/dcim/devices/")]),
        # the primary protected: the addresses, never the device
        (
            SyncPolicy(protected_fields=frozenset({"primary_ip"})),
            [("DELETE", "/api/ipam/ip-addresses/")],
        ),
        # nodes create-only: an existing device is not updated
        (SyncPolicy(modes={"nodes": "create_only"}), [("DELETE", "/api/ipam/ip-addresses/")]),
    ],
)
@pytest.mark.asyncio
async def test_stage_respects_the_endpoints_switches(policy, methods):
    # A synced address gone from Proxmox, and no primary yet.
    current = [*synced(), address(6, "10.250.1.2/24", 101)]
    writes, _ = await run_stage(current, policy=policy)
    assert [(method, path) for method, path, _ in writes] == methods
