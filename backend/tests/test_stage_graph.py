"""The stage graph's ordering rules, as a run meets them.

NetBox's PATCH of a VM saves its whole row from what it read first; writes that make
NetBox change VM rows themselves (disks, interface creates and deletes, address
deletes) and the primaries must not overlap the guests stage's VM updates, the others
may. Nothing in the stages says so: the scheduler derives it from their declarations,
so each rule is also shown to break when its declaration is removed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from proxbox_backend.clients.http import RetryPolicy, TransportError
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.config import Settings
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Guest, GuestAddress, GuestDisk, GuestNic
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.pipeline import (
    BEGIN,
    CREATE,
    END,
    EVERY,
    Effect,
    GraphError,
    Scheduler,
    Stage,
    check,
    describe,
    waits_for,
)
from proxbox_backend.report import RunReport
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import GRAPH, disks, guests, interfaces, ips, vlans
from proxbox_backend.stages.context import StageRun

CLUSTER = 7
VM = 1
NIC = GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0")
NEW_NIC = GuestNic("net1", "net1", "BC:24:11:00:00:02", True, "virtio on vmbr1")
ADDRESS = GuestAddress("net0", "10.0.0.5/24")
DISK = GuestDisk("scsi0", 32768, "local-lvm:vm-101-disk-0")


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


def the_vm() -> dict:
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
        "primary_ip4": None,
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

    def __init__(self, interfaces=(INTERFACE,), addresses=(), refuse_vms=False):
        self.refuse_vms = refuse_vms
        self.events: list[str] = []
        self.release = asyncio.Event()
        self.held = False
        self.current = {
            "/api/virtualization/virtual-machines/": [the_vm()],
            "/api/virtualization/interfaces/": list(interfaces),
            "/api/ipam/ip-addresses/": list(addresses),
            "/api/virtualization/virtual-disks/": [],
        }
        client = NetBoxClient(
            "http://netbox.test",
            Secret("t" * 40),
            retry=RetryPolicy(attempts=1),
            transport=httpx.MockTransport(self.answer),
        )
        self.gateway = NetBoxGateway(client)

    async def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET":
            return httpx.Response(200, json={"results": self.current[path], "next": None})
        write = f"{request.method} {path.split('/')[-2]}"
        self.events.append(f"{write} sent")
        if write == "PATCH virtual-machines" and self.refuse_vms:
            raise httpx.ConnectError("NetBox went away")
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

    def answered_before_the_vms(self, write: str) -> bool:
        vms = self.events.index("PATCH virtual-machines answered")
        return self.events.index(f"{write} sent") < vms


@pytest.fixture(autouse=True)
def default_policy():
    token = ACTIVE.set(SyncPolicy())
    yield
    ACTIVE.reset(token)


def earlier_stages(the_guest: Guest) -> Stage:
    """What the stages before the guests stage give: one guest on node pve1 (device 3)."""

    async def give(_run, _gate) -> dict:
        return {
            "guests.selected": guests.Selected([the_guest], set()),
            "guests.scope": None,
            "nodes.devices": {"pve1": 3},
            "node_interfaces.ids": {},
            "node_interfaces.devices": frozenset(),
            "guests.platforms": frozenset(),
            "sdn.links": None,  # SDN switched off
        }

    outputs = (
        "guests.selected",
        "guests.scope",
        "nodes.devices",
        "node_interfaces.ids",
        "node_interfaces.devices",
        "guests.platforms",
        "sdn.links",
    )
    return Stage("earlier", give, gives=outputs)


VM_STAGES = (guests.STAGE, disks.STAGE, vlans.STAGE, interfaces.STAGE, ips.STAGE)


def start(netbox: HeldVmUpdates, the_guest: Guest, stages=VM_STAGES) -> asyncio.Future:
    endpoint = Endpoint.from_api({"id": 5, "name": "pve", "host": "pve.test"})
    settings = Settings(netbox_url="http://netbox.test", netbox_token=Secret("t" * 40))
    report = RunReport()
    run = StageRun(
        settings, endpoint, netbox.gateway, None, report, None, None, SyncPolicy(), None,
        CLUSTER, [], None,
    )  # fmt: skip
    graph = (earlier_stages(the_guest), *stages)
    return asyncio.ensure_future(Scheduler(graph, run, report_events(report)).execute())


def report_events(report: RunReport):
    report.events = []
    return report.events.append


async def vms_in_flight(netbox: HeldVmUpdates) -> None:
    async with asyncio.timeout(5):
        while not netbox.sent("PATCH virtual-machines"):
            await asyncio.sleep(0.01)


BESIDE = [
    ({"addresses": (ADDRESS,)}, {}, "POST ip-addresses"),
    (
        {"nics": (GuestNic("net0", "net0", NIC.mac, False, "virtio on vmbr0"),)},
        {},
        "PATCH interfaces",
    ),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("changed", "netbox_has", "write"), BESIDE)
async def test_writes_that_touch_no_vm_row_go_beside_the_vms_updates(changed, netbox_has, write):
    netbox = HeldVmUpdates(**netbox_has)
    running = start(netbox, guest(**changed))
    await vms_in_flight(netbox)
    async with asyncio.timeout(5):
        while not netbox.sent(write) or f"{write} answered" not in netbox.events:
            await asyncio.sleep(0.01)
    netbox.release.set()
    await asyncio.wait_for(running, timeout=5)
    assert netbox.answered_before_the_vms(write)


# (what changes, what NetBox has, the write that must wait, the declaration whose rule it
# is, that declaration without the rule)
WAITING = {
    "a disk sets its VM's disk total": (
        {"disks": (DISK,)},
        {},
        "POST virtual-disks",
        disks.STAGE,
        dataclasses.replace(disks.STAGE, effects=()),
    ),
    "an interface created counts on its VM": (
        {"nics": (NIC, NEW_NIC)},
        {},
        "POST interfaces",
        interfaces.STAGE,
        dataclasses.replace(
            interfaces.STAGE,
            effects=tuple(e for e in interfaces.STAGE.effects if e.touches != guests.OBJECT_TYPE),
        ),
    ),
    "an address deleted clears the primary it was": (
        {},
        {"addresses": (OLD_ADDRESS,)},
        "DELETE ip-addresses",
        ips.STAGE,
        dataclasses.replace(ips.STAGE, effects=()),
    ),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("rule", WAITING)
async def test_writes_that_change_vm_rows_wait_for_the_vms_updates(rule):
    changed, netbox_has, write, _, _ = WAITING[rule]
    netbox = HeldVmUpdates(**netbox_has)
    running = start(netbox, guest(**changed))
    await vms_in_flight(netbox)
    # Its reads and planning are done long before this: only the VMs' answer holds it.
    await asyncio.sleep(0.2)
    assert not netbox.sent(write)
    netbox.release.set()
    await asyncio.wait_for(running, timeout=5)
    assert not netbox.answered_before_the_vms(write)


@pytest.mark.asyncio
@pytest.mark.parametrize("rule", WAITING)
async def test_without_its_declaration_the_write_races_the_vms(rule):
    changed, netbox_has, write, declared, undeclared = WAITING[rule]
    stages = tuple(undeclared if stage is declared else stage for stage in VM_STAGES)
    netbox = HeldVmUpdates(**netbox_has)
    running = start(netbox, guest(**changed), stages)
    await vms_in_flight(netbox)
    async with asyncio.timeout(5):
        while not netbox.sent(write):
            await asyncio.sleep(0.01)
    netbox.release.set()
    await asyncio.wait_for(running, timeout=5)
    assert netbox.answered_before_the_vms(write)


@pytest.mark.asyncio
async def test_the_primaries_wait_for_the_vms_updates_and_are_declared():
    netbox = HeldVmUpdates()
    running = start(netbox, guest(addresses=(ADDRESS,)))
    await vms_in_flight(netbox)
    await asyncio.sleep(0.2)
    assert netbox.events.count("PATCH virtual-machines sent") == 1
    netbox.release.set()
    await asyncio.wait_for(running, timeout=5)
    answered = netbox.events.index("PATCH virtual-machines answered")
    assert netbox.events.index("PATCH virtual-machines sent", answered) > answered
    # A stage writing what it does not declare is refused, so the rule cannot go missing.
    writes = {k: v for k, v in ips.STAGE.writes.items() if k != guests.OBJECT_TYPE}
    undeclared = dataclasses.replace(ips.STAGE, writes=writes)
    netbox = HeldVmUpdates()
    netbox.release.set()
    stages = (*VM_STAGES[:-1], undeclared)
    with pytest.raises(GraphError, match="virtualmachine"):
        await asyncio.wait_for(start(netbox, guest(addresses=(ADDRESS,)), stages), timeout=5)


@pytest.mark.asyncio
async def test_a_plan_creating_a_vm_is_written_before_its_components_need_it():
    netbox = HeldVmUpdates()
    netbox.release.set()
    new_guest = guest(vmid=102, name="web-002", disks=(DISK,))
    await asyncio.wait_for(start(netbox, new_guest), timeout=5)
    created = netbox.events.index("POST virtual-machines answered")
    assert netbox.events.index("POST virtual-disks sent") > created


@pytest.mark.asyncio
async def test_a_failed_vm_write_fails_the_run_and_cancels_the_stages_waiting_for_it():
    netbox = HeldVmUpdates(refuse_vms=True)
    with pytest.raises(TransportError):
        await asyncio.wait_for(start(netbox, guest(disks=(DISK,))), timeout=30)
    assert not netbox.sent("POST virtual-disks")


# -- the rules as data -------------------------------------------------------------------

RULES = {
    # stage: (earlier stages its read waits for, earlier stages its writes may wait for)
    "inventory": ([], []),
    "nodes": ([], []),
    "node interfaces": ([], ["nodes"]),  # the device's interface count vs its PATCH
    "node addresses": ([], ["nodes", "node interfaces"]),
    "guest selection": ([], []),
    "guest tags": ([], []),
    "guests": ([], []),
    "disks": ([], ["guests"]),  # the VM's disk total and count vs its PATCH
    "vlans": ([], []),
    # the VLANs of the guests' tags and of the VNets (one type, saved whole on update);
    # the node addresses beside the gateways' (one type)
    "sdn": (["node addresses", "vlans"], ["node addresses", "vlans"]),
    # the VM's interface count; the MAC address rows a node interface's save saves too
    "interfaces": ([], ["node interfaces", "guests"]),
    "sdn links": (["sdn"], ["sdn"]),  # an L2VPN's deletion takes its terminations
    # the node addresses' reads and writes; the VMs' primaries and the cleared ones; the
    # SDN gateways' addresses
    "ips": (
        ["node addresses", "sdn"],
        ["node addresses", "guests", "disks", "sdn", "interfaces"],
    ),
    # the addresses it counts and the SDN subnets' prefixes that cover a network are
    # written (and the custom fields the guests stage makes); its prefixes beside the SDN's
    "prefixes": (["node addresses", "guests", "sdn", "ips"], ["sdn"]),
    "records": ([], []),
}  # fmt: skip


@pytest.mark.parametrize("name", RULES)
def test_each_stage_waits_for_what_its_declarations_say(name):
    stage = next(s for s in GRAPH if s.name == name)
    rules = waits_for(GRAPH, stage)
    assert (rules["read"], rules["write"]) == RULES[name]


def test_a_graph_taking_what_no_earlier_stage_gives_is_refused():
    again = next(s for s in GRAPH if s.name == "interfaces")
    with pytest.raises(GraphError, match="interfaces.ids"):
        check(tuple(s for s in GRAPH if s.name != "interfaces"))
    with pytest.raises(GraphError, match="given by"):
        check((*GRAPH, again))


# -- a stage added -----------------------------------------------------------------------


async def note_disk_labels(run: StageRun, gate) -> None:
    """A dummy stage, as a new stage module would have it: it relabels each owned VM's
    disks (one write, which NetBox answers by re-summing the VM's disk total)."""
    owned = gate.take("guests.owned").owned
    plan = disks.plan(owned, [])
    await gate.settle(plan)
    await run.netbox.client.bulk_create(disks.VIRTUAL_DISKS, [c.payload for c in plan.creates])


DUMMY = Stage(
    "disk labels",
    note_disk_labels,
    takes=("guests.owned",),
    writes={disks.OBJECT_TYPE: frozenset({CREATE})},
    effects=(Effect(disks.OBJECT_TYPE, EVERY, guests.OBJECT_TYPE, False, "the VM's disk total"),),
)


@pytest.mark.asyncio
async def test_a_stage_added_by_its_module_and_registration_is_ordered_by_its_declaration():
    registered = (*GRAPH, DUMMY)  # the registration: one line in stages.GRAPH
    check(registered)
    assert waits_for(registered, DUMMY)["write"] == ["guests", "disks", "ips"]
    netbox = HeldVmUpdates()
    running = start(netbox, guest(disks=(DISK,)), (*VM_STAGES, DUMMY))
    await vms_in_flight(netbox)
    await asyncio.sleep(0.2)
    assert not netbox.sent("POST virtual-disks")
    netbox.release.set()
    await asyncio.wait_for(running, timeout=5)
    assert netbox.events.count("POST virtual-disks sent") == 2
    assert not netbox.answered_before_the_vms("POST virtual-disks")


def test_the_readme_draws_the_graph_the_stages_declare():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    assert readme[start:end] == describe(GRAPH), (
        "regenerate it: uv run python -m proxbox_backend.pipeline"
    )
