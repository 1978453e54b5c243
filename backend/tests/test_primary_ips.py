"""Primary addresses: which synced address becomes a VM's primary, and how it is counted."""

import httpx
import pytest

from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest, GuestAddress, GuestNic
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import primary_ips

NICS = (
    GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0"),
    GuestNic("net1", "net1", "BC:24:11:00:00:02", True, "virtio on vmbr1"),
)
ADDRESSES = (
    GuestAddress("net0", "fd00::5/64"),
    GuestAddress("net0", "10.0.0.5/24"),
    GuestAddress("net1", "192.168.1.5/24"),
)
# VM 1: net0 → interface 50, net1 → interface 51; address ids as the ips stage returns them.
INTERFACES = {(1, "net0"): 50, (1, "net1"): 51}
IPS = {(50, "fd00::5/64"): 500, (50, "10.0.0.5/24"): 501, (51, "192.168.1.5/24"): 502}


def guest(addresses=ADDRESSES) -> Guest:
    return Guest(
        kind="qemu",
        vmid=101,
        name="web-001",
        node="pve1",
        status="running",
        vcpus=2.0,
        memory_mb=2048,
        nics=NICS,
        addresses=addresses,
    )


def primaries(ip4=None, ip6=None):
    return {1: {"primary_ip4": ip4, "primary_ip6": ip6}}


@pytest.mark.parametrize(
    ("current", "removed", "interfaces", "addresses", "changes"),
    [
        # empty slots: the first address of each family, in Proxmox's order
        (primaries(), set(), INTERFACES, ADDRESSES, {"primary_ip4": 501, "primary_ip6": 500}),
        # a primary that is set is kept, whoever chose it (here: not a synced address)
        (primaries(ip4=900, ip6=500), set(), INTERFACES, ADDRESSES, {}),
        # the guest lost its primary address (the run deleted it): the next one takes over
        (primaries(ip4=501, ip6=500), {501}, INTERFACES, ADDRESSES[::2], {"primary_ip4": 502}),
        # net0's interface failed: its addresses cannot be primary
        (primaries(), set(), {(1, "net1"): 51}, ADDRESSES, {"primary_ip4": 502}),
        # nothing to choose from: nothing written (NetBox cleared the deleted primary itself)
        (primaries(ip4=501, ip6=500), {500}, INTERFACES, ADDRESSES[1:], {}),
    ],
)
def test_primary_ips_plan(current, removed, interfaces, addresses, changes):
    ips = {key: ip_id for key, ip_id in IPS.items() if ip_id not in removed}
    plan = primary_ips.plan([(1, guest(addresses))], interfaces, ips, current, removed)
    assert {u.id: u.changes for u in plan.updates} == ({1: changes} if changes else {})
    assert plan.creates == [] and plan.deletes == [] and plan.unchanged == {}


def test_a_guest_without_addresses_gets_no_primary():
    plan = primary_ips.plan([(1, guest(addresses=()))], INTERFACES, IPS, primaries(), set())
    assert plan.updates == []


def netbox_answering(failures: dict[int, str]) -> tuple[NetBoxGateway, list]:
    """A NetBox whose bulk PATCH of VMs fails for the ids in `failures`."""
    requests = []

    def answer(request: httpx.Request) -> httpx.Response:
        import json

        items = json.loads(request.content)
        requests.append((request.method, request.url.path, items))
        bad = [item for item in items if item["id"] in failures]
        if bad:
            return httpx.Response(400, json=[{"primary_ip4": [failures[i["id"]]]} for i in bad])
        return httpx.Response(200, json=[{**item, "name": f"vm{item['id']}"} for item in items])

    client = NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(answer)
    )
    return NetBoxGateway(client), requests


@pytest.mark.asyncio
async def test_a_primary_update_counts_the_vm_once():
    netbox, requests = netbox_answering({})
    owned = [(1, guest()), (2, guest()), (3, guest())]
    interfaces = {(vm, "net0"): 50 + vm * 10 for vm in (1, 2, 3)}
    ips = {(50 + vm * 10, "10.0.0.5/24"): 500 + vm for vm in (1, 2, 3)}
    outcomes = primary_ips.VmOutcomes(
        existing=frozenset({1, 2}),  # 3 was created in this run
        unchanged=frozenset({1}),  # 2 was updated by the guests stage
        primaries={1: {}, 2: {}, 3: {}},
    )
    tally = Tally()
    tally.add(primary_ips.OBJECT_TYPE, "unchanged")  # 1
    tally.add(primary_ips.OBJECT_TYPE, "updated")  # 2
    tally.add(primary_ips.OBJECT_TYPE, "created")  # 3
    await primary_ips.apply(netbox, owned, interfaces, ips, set(), outcomes, tally)
    assert len(requests) == 1 and requests[0][0] == "PATCH"
    assert {item["id"]: item["primary_ip4"] for item in requests[0][2]} == {1: 501, 2: 502, 3: 503}
    vms = tally.of(primary_ips.OBJECT_TYPE)
    assert (vms.created, vms.updated, vms.unchanged, vms.failed) == (1, 2, 0, 0)
    await netbox.client.aclose()


@pytest.mark.asyncio
async def test_a_refused_primary_is_a_reported_failure():
    netbox, _ = netbox_answering({1: "IP is not assigned to this VM"})
    outcomes = primary_ips.VmOutcomes(frozenset({1}), frozenset({1}), {1: {}})
    tally = Tally()
    tally.add(primary_ips.OBJECT_TYPE, "unchanged")
    await primary_ips.apply(netbox, [(1, guest())], INTERFACES, IPS, set(), outcomes, tally)
    vms = tally.of(primary_ips.OBJECT_TYPE)
    assert (vms.unchanged, vms.updated, vms.failed) == (1, 0, 1)
    assert "not assigned" in tally.failures[0].reason
    await netbox.client.aclose()


@pytest.mark.parametrize(
    ("switches", "written"),
    [
        ({}, {1: 501, 3: 503}),
        ({"protected_fields": ["primary_ip"]}, {3: 503}),
        ({"modes": {"guests": "create_only"}}, {3: 503}),
        ({"modes": {"guests": "off"}}, {3: 503}),
    ],
    ids=["always", "primary protected", "guests create-only", "guests off"],
)
@pytest.mark.asyncio
async def test_the_endpoints_switches_hold_back_primaries_of_existing_vms_only(switches, written):
    """An operator's VM whose primary they cleared keeps it cleared when the switches say
    so; a VM this run created gets its primary as part of its creation."""
    netbox, requests = netbox_answering({})
    owned = [(1, guest()), (3, guest())]
    interfaces = {(vm, "net0"): 50 + vm * 10 for vm in (1, 3)}
    ips = {(50 + vm * 10, "10.0.0.5/24"): 500 + vm for vm in (1, 3)}
    outcomes = primary_ips.VmOutcomes(frozenset({1}), frozenset({1}), {1: {}, 3: {}})
    token = ACTIVE.set(SyncPolicy.from_api(switches))
    try:
        await primary_ips.apply(netbox, owned, interfaces, ips, set(), outcomes, Tally())
    finally:
        ACTIVE.reset(token)
        await netbox.client.aclose()
    assert {item["id"]: item["primary_ip4"] for _, _, items in requests for item in items} == (
        written
    )
