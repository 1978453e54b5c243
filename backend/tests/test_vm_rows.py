"""A run's VM updates and its component writes: which may go to NetBox beside them.

NetBox's PATCH of a VM saves its whole row from what it read first; writes that update VM
rows themselves (disks, interface creates and deletes, address deletes, primaries) must
not overlap it, the others may (`stages.vm_rows`)."""

import asyncio
import json

import httpx
import pytest

from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest, GuestAddress, GuestDisk, GuestNic
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import disks, guests, interfaces, ips, primary_ips
from proxbox_backend.stages.vm_rows import VmRowWrites

CLUSTER = 7
VM = 1
NIC = GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0")
NEW_NIC = GuestNic("net1", "net1", "BC:24:11:00:00:02", True, "virtio on vmbr1")
ADDRESS = GuestAddress("net0", "10.0.0.5/24")
DISK = GuestDisk("scsi0", 32768, "local-lvm:vm-101-disk-0")
PLACEMENT = guests.GuestPlacement(CLUSTER, None, None, {"pve1": 3})


def guest(**fields) -> Guest:
    base = {
        "kind": "qemu",
        "vmid": 101,
        "name": "web-001",
        "node": "pve1",
        "status": "running",
        "vcpus": 2.0,
        "memory_mb": 4096,  # NetBox has 2048: the VM is updated
        "nics": (NIC,),
        "addresses": (),
        "disks": (),
        "addresses_reported": True,
    }
    return Guest(**{**base, **fields})


def the_vm(primary_ip4=None) -> dict:
    key = guests.source_key(guests.cluster_source(CLUSTER), guest())
    return {
        "id": VM,
        "name": "web-001",
        "status": {"value": "active"},
        "vcpus": 2.0,
        "memory": 2048,
        "cluster": {"id": CLUSTER},
        "device": {"id": 3},
        "site": None,
        "tenant": None,
        "custom_fields": {"proxbox_source": key},
        "tags": [{"slug": "proxbox"}],
        "primary_ip4": primary_ip4,
        "primary_ip6": None,
    }


INTERFACE = {
    "id": 50,
    "name": "net0",
    "virtual_machine": {"id": VM},
    "enabled": True,
    "description": "virtio on vmbr0",
    "primary_mac_address": {"mac_address": "BC:24:11:00:00:01"},
    "mode": None,
    "untagged_vlan": None,
    "tagged_vlans": [],
    "tags": [{"slug": "proxbox"}],
}
OLD_ADDRESS = {
    "id": 500,
    "address": "10.0.0.9/24",
    "status": {"value": "active"},
    "vrf": None,
    "assigned_object_type": "virtualization.vminterface",
    "assigned_object_id": 50,
    "tags": [{"slug": "proxbox"}],
}


class HeldVmUpdates:
    """A NetBox that holds its answer to the first PATCH of VMs until `release` is set,
    and records each write as it is sent and answered."""

    def __init__(self, interfaces=(INTERFACE,), addresses=(), vm=None):
        self.events: list[str] = []
        self.release = asyncio.Event()
        self.held = False
        self.current = {
            "/api/virtualization/virtual-machines/": [vm or the_vm()],
            "/api/virtualization/interfaces/": list(interfaces),
            "/api/ipam/ip-addresses/": list(addresses),
            "/api/virtualization/virtual-disks/": [],
        }
        client = NetBoxClient(
            "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(self.answer)
        )
        self.gateway = NetBoxGateway(client)

    async def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET":
            return httpx.Response(200, json={"results": self.current[path], "next": None})
        write = f"{request.method} {path.split('/')[-2]}"
        self.events.append(f"{write} sent")
        items = json.loads(request.content)
        if write == "PATCH virtual-machines" and not self.held:
            self.held = True
            await self.release.wait()
        self.events.append(f"{write} answered")
        if request.method == "DELETE":
            return httpx.Response(204)
        status = 201 if request.method == "POST" else 200
        return httpx.Response(status, json=[{"id": 900 + n, **i} for n, i in enumerate(items)])

    def sent(self, write: str) -> bool:
        return f"{write} sent" in self.events


@pytest.fixture(autouse=True)
def default_policy():
    token = ACTIVE.set(SyncPolicy())
    yield
    ACTIVE.reset(token)


async def vm_updated_in_flight(netbox: HeldVmUpdates, the_guest: Guest):
    tally = Tally()
    applying = guests.apply(netbox.gateway, [the_guest], PLACEMENT, tally)
    ids, outcomes = await asyncio.wait_for(applying, timeout=5)
    assert list(ids.values()) == [VM]
    # The stage is done: it has sent the VM's PATCH and left its answer in flight.
    async with asyncio.timeout(5):
        while not netbox.sent("PATCH virtual-machines"):
            await asyncio.sleep(0.01)
    assert netbox.events == ["PATCH virtual-machines sent"]
    return [(VM, the_guest)], outcomes, tally


def address_writes(netbox, owned, outcomes, tally):
    return ips.apply(netbox.gateway, owned, {(VM, "net0"): 50}, {VM}, tally, vm_rows=outcomes.rows)


def interface_writes(netbox, owned, outcomes, tally):
    return interfaces.apply(netbox.gateway, CLUSTER, owned, {VM}, tally, {}, outcomes.rows)


def disk_create(netbox, owned, outcomes, tally):
    return disks.apply(netbox.gateway, owned, {VM}, tally, outcomes.rows)


def primary(netbox, owned, outcomes, tally):
    return primary_ips.apply(
        netbox.gateway,
        owned,
        {(VM, "net0"): 50},
        {(50, ADDRESS.address): 501},
        set(),
        outcomes,
        tally,
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("stage", "changed", "netbox_has", "write"),
    [
        (address_writes, {"addresses": (ADDRESS,)}, {}, "POST ip-addresses"),
        (
            interface_writes,
            {"nics": (GuestNic("net0", "net0", NIC.mac, False, "virtio on vmbr0"),)},
            {},
            "PATCH interfaces",
        ),
    ],
)
async def test_writes_that_touch_no_vm_row_go_beside_the_vms_updates(
    stage, changed, netbox_has, write
):
    netbox = HeldVmUpdates(**netbox_has)
    owned, outcomes, tally = await vm_updated_in_flight(netbox, guest(**changed))
    await asyncio.wait_for(stage(netbox, owned, outcomes, tally), timeout=5)
    assert netbox.events == ["PATCH virtual-machines sent", f"{write} sent", f"{write} answered"]
    netbox.release.set()
    await outcomes.rows.settled()
    assert netbox.events[-1] == "PATCH virtual-machines answered"
    assert tally.of(guests.OBJECT_TYPE).updated == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("stage", "changed", "netbox_has", "write"),
    [
        (disk_create, {"disks": (DISK,)}, {}, "POST virtual-disks"),
        (interface_writes, {"nics": (NIC, NEW_NIC)}, {}, "POST interfaces"),
        (address_writes, {}, {"addresses": (OLD_ADDRESS,)}, "DELETE ip-addresses"),
        (primary, {"addresses": (ADDRESS,)}, {}, "PATCH virtual-machines"),
    ],
)
async def test_writes_that_change_vm_rows_wait_for_the_vms_updates(
    stage, changed, netbox_has, write
):
    netbox = HeldVmUpdates(**netbox_has)
    owned, outcomes, tally = await vm_updated_in_flight(netbox, guest(**changed))
    waiting = asyncio.ensure_future(stage(netbox, owned, outcomes, tally))
    # Its reads and planning are done long before this: only the VMs' answer holds it.
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert netbox.events == ["PATCH virtual-machines sent"]
    netbox.release.set()
    await asyncio.wait_for(waiting, timeout=5)
    answered = netbox.events.index("PATCH virtual-machines answered")
    assert netbox.events.index(f"{write} sent", answered) > answered


@pytest.mark.asyncio
async def test_a_plan_creating_a_vm_is_written_before_the_stage_returns():
    netbox = HeldVmUpdates()
    new_guest = guest(vmid=102, name="web-002")
    netbox.release.set()
    ids, outcomes = await guests.apply(netbox.gateway, [guest(), new_guest], PLACEMENT, Tally())
    assert netbox.events == [
        "PATCH virtual-machines sent",
        "PATCH virtual-machines answered",
        "POST virtual-machines sent",
        "POST virtual-machines answered",
    ]
    assert sorted(ids.values()) == [VM, 900]
    await asyncio.wait_for(outcomes.rows.settled(), timeout=1)  # nothing left in flight


@pytest.mark.asyncio
async def test_a_failed_vm_write_is_raised_to_every_stage_that_waits_for_it():
    async def refused():
        await asyncio.sleep(0)
        raise httpx.ConnectError("NetBox went away")

    rows = VmRowWrites(refused())
    waiting = [asyncio.ensure_future(rows.settled()) for _ in range(2)]
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [httpx.ConnectError] * 2
    await rows.abandon()  # collected once more, without raising


@pytest.mark.asyncio
async def test_writes_left_in_flight_are_cancelled_when_the_run_gives_up():
    release = asyncio.Event()
    rows = VmRowWrites(release.wait())
    await asyncio.wait_for(rows.abandon(), timeout=5)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(rows.settled(), timeout=5)
