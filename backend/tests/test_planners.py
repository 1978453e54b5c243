"""Stage planners: desired state + current NetBox state → plan (pure, table-driven)."""

import pytest

from proxbox_backend.domain.models import (
    ClusterIdentity,
    Guest,
    GuestAddress,
    GuestDisk,
    GuestNic,
    ProxmoxNode,
)
from proxbox_backend.gateways.netbox import SOURCE_FIELD
from proxbox_backend.stages import cluster, disks, guests, interfaces, ips, nodes

PLACEMENT = nodes.NodePlacement(
    cluster_id=7, site_id=3, tenant_id=None, role_id=1, device_type_id=2
)


def device(id_, name, status="active", site=3, tenant=None, cluster_id=7):
    return {
        "id": id_,
        "name": name,
        "status": {"value": status},
        "site": {"id": site} if site else None,
        "tenant": {"id": tenant} if tenant else None,
        "cluster": {"id": cluster_id},
    }


@pytest.mark.parametrize(
    ("proxmox", "current", "creates", "updates", "unchanged"),
    [
        ([ProxmoxNode("pve1", True)], [], ["pve1"], {}, []),
        ([ProxmoxNode("pve1", True)], [device(11, "pve1")], [], {}, ["pve1"]),
        (
            [ProxmoxNode("pve1", False)],
            [device(11, "pve1")],
            [],
            {"pve1": {"status": "offline"}},
            [],
        ),
        ([ProxmoxNode("pve1", True)], [device(11, "pve1", site=4)], [], {"pve1": {"site": 3}}, []),
        # A device in the cluster that Proxmox no longer lists is hardware: left alone.
        ([], [device(11, "old")], [], {}, []),
    ],
)
def test_nodes_plan(proxmox, current, creates, updates, unchanged):
    plan = nodes.plan(proxmox, current, PLACEMENT)
    assert [c.key for c in plan.creates] == creates
    assert {u.key: u.changes for u in plan.updates} == updates
    assert list(plan.unchanged) == unchanged
    assert plan.deletes == []


def test_nodes_create_payload_sets_role_and_type_once():
    (create,) = nodes.plan([ProxmoxNode("pve1", True)], [], PLACEMENT).creates
    assert create.payload == {
        "name": "pve1",
        "role": 1,
        "device_type": 2,
        "status": "active",
        "site": 3,
        "tenant": None,
        "cluster": 7,
    }


def test_nodes_without_site_fail_with_a_reason():
    placement = nodes.NodePlacement(7, None, None, 1, 2)
    plan = nodes.plan([ProxmoxNode("pve1", True)], [], placement)
    assert plan.creates == [] and "site" in plan.failures[0].reason


def guest(vmid=101, name="web-001", status="running", node="pve1", **kw):
    return Guest(
        kind=kw.pop("kind", "qemu"),
        vmid=vmid,
        name=name,
        node=node,
        status=status,
        vcpus=kw.pop("vcpus", 2.0),
        memory_mb=kw.pop("memory_mb", 2048),
        **kw,
    )


GUEST_PLACEMENT = guests.GuestPlacement(
    cluster_id=7, site_id=3, tenant_id=None, device_ids={"pve1": 11, "pve2": 12}
)


def vm(
    id_, key, name="web-001", status="active", vcpus=2.0, memory=2048, device_id=11, cluster_id=7
):
    return {
        "id": id_,
        "name": name,
        "status": {"value": status},
        "vcpus": vcpus,
        "memory": memory,
        "disk": None,
        "cluster": {"id": cluster_id},
        "device": {"id": device_id} if device_id else None,
        "site": {"id": 3},
        "tenant": None,
        "custom_fields": {SOURCE_FIELD: key},
    }


@pytest.mark.parametrize(
    ("proxmox", "current", "policy", "creates", "updates", "deletes", "unchanged"),
    [
        # first sync
        ([guest()], [], "offline", ["cluster-7/qemu/101"], {}, [], []),
        # no change: nothing to write
        ([guest()], [vm(1, "cluster-7/qemu/101")], "offline", [], {}, [], ["cluster-7/qemu/101"]),
        # stopped, resized and migrated
        (
            [guest(status="stopped", vcpus=4.0, node="pve2")],
            [vm(1, "cluster-7/qemu/101")],
            "offline",
            [],
            {"cluster-7/qemu/101": {"status": "offline", "vcpus": 4.0, "device": 12}},
            [],
            [],
        ),
        # renamed in Proxmox: same object, new name
        (
            [guest(name="web-new")],
            [vm(1, "cluster-7/qemu/101")],
            "offline",
            [],
            {"cluster-7/qemu/101": {"name": "web-new"}},
            [],
            [],
        ),
        # gone from Proxmox, each policy
        (
            [],
            [vm(1, "cluster-7/qemu/101")],
            "offline",
            [],
            {"cluster-7/qemu/101": {"status": "offline"}},
            [],
            [],
        ),
        (
            [],
            [vm(1, "cluster-7/qemu/101", status="offline")],
            "offline",
            [],
            {},
            [],
            ["cluster-7/qemu/101"],
        ),
        ([], [vm(1, "cluster-7/qemu/101")], "delete", [], {}, ["cluster-7/qemu/101"], []),
        ([], [vm(1, "cluster-7/qemu/101")], "keep", [], {}, [], ["cluster-7/qemu/101"]),
        # another cluster's guest with the same name and VMID, or a hand-made VM: not ours
        (
            [guest()],
            [vm(1, "cluster-8/qemu/101"), {**vm(2, None), "custom_fields": {}}],
            "delete",
            ["cluster-7/qemu/101"],
            {},
            [],
            [],
        ),
        # VMID reused by a new guest: a new object, the old one follows the policy
        (
            [guest(creation_id="uuid:new")],
            [vm(1, "cluster-7/qemu/101#uuid:old")],
            "delete",
            ["cluster-7/qemu/101#uuid:new"],
            {},
            ["cluster-7/qemu/101#uuid:old"],
            [],
        ),
        # VMID reused under the same name, offline policy: the old record steps aside
        (
            [guest(creation_id="uuid:new")],
            [vm(1, "cluster-7/qemu/101#uuid:old")],
            "offline",
            ["cluster-7/qemu/101#uuid:new"],
            {
                "cluster-7/qemu/101#uuid:old": {
                    "status": "offline",
                    "name": "web-001 (gone qemu/101)",
                }
            },
            [],
            [],
        ),
        # same VMID, one QEMU and one LXC key space
        (
            [guest(kind="lxc")],
            [vm(1, "cluster-7/qemu/101")],
            "delete",
            ["cluster-7/lxc/101"],
            {},
            ["cluster-7/qemu/101"],
            [],
        ),
    ],
)
def test_guests_plan(proxmox, current, policy, creates, updates, deletes, unchanged):
    placement = guests.GuestPlacement(7, 3, None, {"pve1": 11, "pve2": 12}, policy)
    plan = guests.plan(proxmox, current, placement)
    assert [c.key for c in plan.creates] == creates
    assert {u.key: u.changes for u in plan.updates} == updates
    assert [d.key for d in plan.deletes] == deletes
    assert list(plan.unchanged) == unchanged


def test_guest_create_payload_carries_source_key_and_disk_total():
    g = guest(disks=(GuestDisk("scsi0", 1024, "v0"), GuestDisk("scsi1", 2048, "v1")))
    (create,) = guests.plan([g], [], GUEST_PLACEMENT).creates
    assert create.payload == {
        "name": "web-001",
        "status": "active",
        "vcpus": 2.0,
        "memory": 2048,
        "cluster": 7,
        "site": 3,
        "tenant": None,
        "device": 11,
        "disk": 3072,
        "custom_fields": {SOURCE_FIELD: "cluster-7/qemu/101"},
    }


def test_guest_on_a_node_without_device_keeps_its_host_field():
    g = guest(node="pve9")
    plan = guests.plan([g], [vm(1, "cluster-7/qemu/101", device_id=11)], GUEST_PLACEMENT)
    assert plan.updates == [] and list(plan.unchanged) == ["cluster-7/qemu/101"]


def test_unreadable_guest_is_not_treated_as_gone():
    placement = guests.GuestPlacement(7, 3, None, {}, "delete")
    plan = guests.plan([], [vm(1, "cluster-7/qemu/101")], placement, {("qemu", 101)})
    assert plan.deletes == []


NICS = (
    GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0"),
    GuestNic("net1", "net1", None, False, "e1000"),
)


def iface(id_, vm_id, name, mac=None, enabled=True, description=""):
    return {
        "id": id_,
        "name": name,
        "virtual_machine": {"id": vm_id},
        "enabled": enabled,
        "description": description,
        "primary_mac_address": {"id": 1, "mac_address": mac} if mac else None,
    }


@pytest.mark.parametrize(
    ("current", "creates", "updates", "deletes"),
    [
        ([], [(1, "net0"), (1, "net1")], {}, []),
        (
            [
                iface(5, 1, "net0", "BC:24:11:00:00:01", description="virtio on vmbr0"),
                iface(6, 1, "net1", enabled=False, description="e1000"),
            ],
            [],
            {},
            [],
        ),
        # NetBox may store MACs in another case: still the same MAC
        (
            [
                iface(5, 1, "net0", "bc:24:11:00:00:01", description="virtio on vmbr0"),
                iface(6, 1, "net1", enabled=False, description="e1000"),
            ],
            [],
            {},
            [],
        ),
        (
            [
                iface(5, 1, "net0", "BC:24:11:00:00:99", description="virtio on vmbr0"),
                iface(6, 1, "net1", description="e1000"),
                iface(7, 1, "net2"),
                iface(8, 2, "eth0"),
            ],
            [],
            {(1, "net0"): {"mac_address": "BC:24:11:00:00:01"}, (1, "net1"): {"enabled": False}},
            [(1, "net2")],
        ),
    ],
)
def test_interfaces_plan(current, creates, updates, deletes):
    plan = interfaces.plan([(1, guest(nics=NICS))], current)
    assert [c.key for c in plan.creates] == creates
    assert {u.key: u.changes for u in plan.updates} == updates
    # VM 2 is not one of this run's guests: its interfaces are not looked at.
    assert [d.key for d in plan.deletes] == deletes


def test_interface_create_payload_uses_mac_shortcut():
    plan = interfaces.plan([(1, guest(nics=NICS[:1]))], [])
    assert plan.creates[0].payload == {
        "virtual_machine": 1,
        "name": "net0",
        "enabled": True,
        "description": "virtio on vmbr0",
        "mac_address": "BC:24:11:00:00:01",
    }


def ip(id_, address, interface_id, assigned_type="virtualization.vminterface"):
    return {
        "id": id_,
        "address": address,
        "assigned_object_type": assigned_type,
        "assigned_object_id": interface_id,
    }


@pytest.mark.parametrize(
    ("addresses", "current", "creates", "deletes", "unchanged"),
    [
        ([GuestAddress("net0", "10.0.0.5/24")], [], [(50, "10.0.0.5/24")], [], []),
        (
            [GuestAddress("net0", "10.0.0.5/24")],
            [ip(1, "10.0.0.5/24", 50)],
            [],
            [],
            [(50, "10.0.0.5/24")],
        ),
        # IPv6 spelled differently by NetBox is the same address
        (
            [GuestAddress("net0", "fd00::5/64")],
            [ip(1, "fd00:0::5/64", 50)],
            [],
            [],
            [(50, "fd00::5/64")],
        ),
        # changed address: the old one goes, the new one comes; foreign IPs stay
        (
            [GuestAddress("net0", "10.0.0.6/24")],
            [
                ip(1, "10.0.0.5/24", 50),
                ip(2, "10.9.9.9/24", 99),
                ip(3, "10.0.0.8/24", 50, "dcim.interface"),
            ],
            [(50, "10.0.0.6/24")],
            [(50, "10.0.0.5/24")],
            [],
        ),
        # an address on an interface that failed is skipped
        ([GuestAddress("net1", "10.0.0.7/24")], [], [], [], []),
    ],
)
def test_ips_plan(addresses, current, creates, deletes, unchanged):
    plan = ips.plan([(1, guest(nics=NICS, addresses=tuple(addresses)))], {(1, "net0"): 50}, current)
    assert [c.key for c in plan.creates] == creates
    assert [d.key for d in plan.deletes] == deletes
    assert list(plan.unchanged) == unchanged


@pytest.mark.parametrize(
    ("current", "creates", "updates", "deletes"),
    [
        ([], [(1, "scsi0")], {}, []),
        (
            [
                {
                    "id": 3,
                    "name": "scsi0",
                    "size": 1024,
                    "description": "local-lvm:d0",
                    "virtual_machine": {"id": 1},
                }
            ],
            [],
            {},
            [],
        ),
        (
            [
                {
                    "id": 3,
                    "name": "scsi0",
                    "size": 512,
                    "description": "local-lvm:d0",
                    "virtual_machine": {"id": 1},
                },
                {
                    "id": 4,
                    "name": "scsi1",
                    "size": 512,
                    "description": "",
                    "virtual_machine": {"id": 1},
                },
            ],
            [],
            {(1, "scsi0"): {"size": 1024}},
            [(1, "scsi1")],
        ),
    ],
)
def test_disks_plan(current, creates, updates, deletes):
    plan = disks.plan([(1, guest(disks=(GuestDisk("scsi0", 1024, "local-lvm:d0"),)))], current)
    assert [c.key for c in plan.creates] == creates
    assert {u.key: u.changes for u in plan.updates} == updates
    assert [d.key for d in plan.deletes] == deletes


IDENTITY = ClusterIdentity("prod", "cluster", ("pve1",), True)


@pytest.mark.parametrize(
    ("cluster_status", "quorate", "changes"),
    [
        ({"value": "active"}, True, {}),
        ({"value": "active"}, False, {"status": "offline"}),
        ({"value": "offline"}, True, {"status": "active"}),
    ],
)
def test_cluster_metadata_plan(cluster_status, quorate, changes):
    identity = ClusterIdentity("prod", "cluster", ("pve1",), quorate)
    assert cluster.plan_metadata(identity, {"id": 1, "status": cluster_status}) == changes


@pytest.mark.parametrize(
    ("created", "changed", "metadata", "outcome"),
    [
        (True, False, True, "created"),
        (False, True, False, "updated"),
        (False, False, True, "updated"),
        (False, False, False, "unchanged"),
    ],
)
def test_cluster_counter_precedence(created, changed, metadata, outcome):
    from proxbox_backend.domain.counters import Tally
    from proxbox_backend.gateways.netbox import ClaimResult

    tally = Tally()
    cluster.count(tally, ClaimResult(200, {"id": 1}, 1, created, changed), metadata)
    counters = tally.of(cluster.OBJECT_TYPE).as_dict()
    assert counters[outcome] == 1 and sum(counters.values()) == 1


class _RecordingGateway:
    """The NetBox calls the cluster stage makes, answered from fixed records."""

    def __init__(self, claim, tracking: dict):
        self._claim, self._tracking, self.tracking_patches = claim, tracking, []

    async def claim(self, endpoint, body):
        return self._claim

    async def update_cluster(self, cluster_id, changes):
        raise AssertionError(f"the cluster is up to date, yet patched with {changes}")

    async def tracking_record(self, tracking_id):
        return self._tracking

    async def update_tracking_record(self, tracking_id, changes):
        self.tracking_patches.append((tracking_id, changes))
        return {**self._tracking, **changes}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("node_count", "outcome"), [(1, "unchanged"), (4, "updated")], ids=["current", "stale"]
)
async def test_cluster_stage_records_when_proxmox_was_last_seen(node_count, outcome):
    import datetime as dt

    from proxbox_backend.domain.counters import Tally
    from proxbox_backend.domain.endpoint import Endpoint
    from proxbox_backend.gateways.netbox import ClaimResult

    identity = ClusterIdentity("prod", "cluster", ("pve1",), True)
    endpoint = Endpoint(3, "pve", "h", 8006, True, True, "cluster", None, None, None, None)
    claim = ClaimResult(200, {"id": 9, "status": {"value": "active"}}, 12, False, False)
    tracking = {"id": 12, "quorate": True, "node_count": node_count, "last_seen": None}
    gateway = _RecordingGateway(claim, tracking)
    seen_at = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    tally = Tally()

    await cluster.apply(gateway, endpoint, identity, 1, tally, seen_at=seen_at)

    expected = {"last_seen": "2026-12-01T09:30:00+00:00"}
    if node_count != 1:
        expected["node_count"] = 1
    assert gateway.tracking_patches == [(12, expected)]
    # Being seen is not an inventory change: an up-to-date cluster stays "unchanged".
    assert tally.of(cluster.OBJECT_TYPE).as_dict()[outcome] == 1
