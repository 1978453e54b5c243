"""Stage planners: desired state + current NetBox state → plan (pure, table-driven)."""

from datetime import date

import pytest

from proxbox_backend.domain.models import (
    ClusterIdentity,
    Guest,
    GuestAddress,
    GuestDisk,
    GuestNic,
    NodeInterface,
    Platform,
    ProxmoxNode,
)
from proxbox_backend.domain.policy import OFFLINE_THEN_DELETE
from proxbox_backend.domain.tags import UNCONFIRMED as UNCONFIRMED_TAG
from proxbox_backend.gateways.netbox import GONE_FIELD, SOURCE_FIELD
from proxbox_backend.stages import (
    cluster,
    disks,
    guests,
    interfaces,
    ips,
    node_interfaces,
    nodes,
    vlans,
)

# What NetBox answers for an object that carries the sync's `proxbox` tag.
MANAGED_TAGS = [{"id": 1, "name": "proxbox", "slug": "proxbox"}]

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
        "tags": MANAGED_TAGS,
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
        "tags": [{"slug": "proxbox"}],
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
        "tags": MANAGED_TAGS,
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


def gone_vm(since=None, **kw):
    found = vm(1, "cluster-7/qemu/101", **kw)
    found["custom_fields"] = {**found["custom_fields"], GONE_FIELD: since}
    return found


def offline_then_delete(days=30, today="2026-12-05"):
    return guests.GuestPlacement(
        7,
        3,
        None,
        {"pve1": 11},
        OFFLINE_THEN_DELETE,
        delete_after_days=days,
        today=date.fromisoformat(today),
    )


def test_a_guest_first_found_gone_goes_offline_with_the_date():
    plan = guests.plan([], [gone_vm()], offline_then_delete())
    assert {u.key: u.changes for u in plan.updates} == {
        "cluster-7/qemu/101": {"status": "offline", "custom_fields": {GONE_FIELD: "2026-12-05"}}
    }
    assert plan.deletes == []


@pytest.mark.parametrize(
    ("since", "deleted"),
    [("2026-11-06", False), ("2026-11-05", True), ("2025-01-01", True)],
)
def test_a_gone_vm_is_deleted_once_its_days_are_up(since, deleted):
    plan = guests.plan([], [gone_vm(since, status="offline")], offline_then_delete(days=30))
    assert [d.key for d in plan.deletes] == (["cluster-7/qemu/101"] if deleted else [])
    if not deleted:  # still counting: the date it went stays as it is
        assert plan.updates == [] and list(plan.unchanged) == ["cluster-7/qemu/101"]


def test_a_guest_that_came_back_loses_its_gone_date():
    plan = guests.plan([guest()], [gone_vm("2026-11-01")], offline_then_delete())
    assert {u.key: u.changes for u in plan.updates} == {
        "cluster-7/qemu/101": {"custom_fields": {GONE_FIELD: None}}
    }


def test_an_unreadable_gone_date_counts_from_today():
    plan = guests.plan([], [gone_vm("last week", status="offline")], offline_then_delete())
    assert plan.deletes == []
    assert plan.updates[0].changes == {"custom_fields": {GONE_FIELD: "2026-12-05"}}


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
        "tags": [{"slug": "proxbox"}],
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
        "tags": MANAGED_TAGS,
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
        "tags": [{"slug": "proxbox"}],
    }


def ip(id_, address, interface_id, assigned_type="virtualization.vminterface", tags=("proxbox",)):
    return {
        "id": id_,
        "address": address,
        "assigned_object_type": assigned_type,
        "assigned_object_id": interface_id,
        "tags": [{"id": 900 + n, "slug": slug} for n, slug in enumerate(tags)],
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
    reporting = guest(nics=NICS, addresses=tuple(addresses), addresses_reported=True)
    plan = ips.plan([(1, reporting)], {(1, "net0"): 50}, current)
    assert [c.key for c in plan.creates] == creates
    assert [d.key for d in plan.deletes] == deletes
    assert list(plan.unchanged) == unchanged
    assert plan.updates == []


UNCONFIRMED = UNCONFIRMED_TAG.slug


@pytest.mark.parametrize("status", ["stopped", "running"])
def test_unreported_addresses_are_kept_and_marked(status):
    """A stopped guest, or a running one whose agent is silent, reports nothing: its
    synced addresses stay (same ids), tagged unconfirmed next to the operator's tags."""
    silent = guest(status=status, nics=NICS, addresses=(), addresses_reported=False)
    current = [ip(1, "10.0.0.5/24", 50, tags=("dns-managed", "proxbox")), ip(2, "fd00::5/64", 50)]
    plan = ips.plan([(1, silent)], {(1, "net0"): 50}, current)
    assert plan.deletes == [] and plan.creates == []
    assert {u.id: u.changes for u in plan.updates} == {
        1: {"tags": [{"slug": "dns-managed"}, {"slug": "proxbox"}, {"slug": UNCONFIRMED}]},
        2: {"tags": [{"slug": "proxbox"}, {"slug": UNCONFIRMED}]},
    }
    assert ips.marks_unconfirmed(plan)


def test_kept_address_already_marked_is_unchanged():
    silent = guest(status="stopped", nics=NICS, addresses=(), addresses_reported=False)
    current = [ip(1, "10.0.0.5/24", 50, tags=(UNCONFIRMED, "proxbox"))]
    plan = ips.plan([(1, silent)], {(1, "net0"): 50}, current)
    assert plan.writes == 0 and plan.unchanged == {(50, "10.0.0.5/24"): 1}
    assert not ips.marks_unconfirmed(plan)


def test_stopped_guest_keeps_configured_and_learned_addresses_apart():
    """The cloud-init address is known from config (confirmed); the learned one is kept."""
    stopped = guest(
        status="stopped",
        nics=NICS,
        addresses=(GuestAddress("net0", "10.0.0.5/24"),),
        addresses_reported=False,
    )
    current = [ip(1, "10.0.0.5/24", 50), ip(2, "10.0.0.99/24", 50)]
    plan = ips.plan([(1, stopped)], {(1, "net0"): 50}, current)
    assert plan.unchanged == {(50, "10.0.0.5/24"): 1}
    assert [(u.id, u.changes) for u in plan.updates] == [
        (2, {"tags": [{"slug": "proxbox"}, {"slug": UNCONFIRMED}]})
    ]
    assert plan.deletes == []


def test_reported_again_address_loses_only_the_unconfirmed_tag():
    back = guest(
        nics=NICS, addresses=(GuestAddress("net0", "10.0.0.5/24"),), addresses_reported=True
    )
    current = [ip(1, "10.0.0.5/24", 50, tags=("dns-managed", UNCONFIRMED, "proxbox"))]
    plan = ips.plan([(1, back)], {(1, "net0"): 50}, current)
    assert [(u.id, u.changes) for u in plan.updates] == [
        (1, {"tags": [{"slug": "dns-managed"}, {"slug": "proxbox"}]})
    ]
    assert plan.deletes == [] and plan.creates == []
    assert not ips.marks_unconfirmed(plan)


def test_running_guest_that_reports_without_a_kept_address_deletes_it():
    back = guest(nics=NICS, addresses=(), addresses_reported=True)
    current = [ip(1, "10.0.0.5/24", 50, tags=(UNCONFIRMED,))]
    plan = ips.plan([(1, back)], {(1, "net0"): 50}, current)
    assert [d.id for d in plan.deletes] == [1] and plan.updates == []


def test_silence_of_one_guest_does_not_keep_another_guests_addresses():
    silent = guest(vmid=101, nics=NICS, addresses=(), addresses_reported=False)
    reporting = guest(vmid=102, name="web-002", nics=NICS, addresses=(), addresses_reported=True)
    current = [ip(1, "10.0.0.5/24", 50), ip(2, "10.0.0.6/24", 60)]
    plan = ips.plan([(1, silent), (2, reporting)], {(1, "net0"): 50, (2, "net0"): 60}, current)
    assert [u.id for u in plan.updates] == [1]
    assert [d.id for d in plan.deletes] == [2]


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
                    "tags": MANAGED_TAGS,
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
                    "tags": MANAGED_TAGS,
                },
                {
                    "id": 4,
                    "name": "scsi1",
                    "size": 512,
                    "description": "",
                    "virtual_machine": {"id": 1},
                    "tags": MANAGED_TAGS,
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
    current = {"id": 1, "status": cluster_status, "tags": MANAGED_TAGS}
    assert cluster.plan_metadata(identity, current) == changes


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


def test_sync_tags_fit_netbox_limits():
    tag = UNCONFIRMED_TAG
    assert len(tag.description) <= 200 and len(tag.name) <= 100 and len(tag.slug) <= 100


# -- tags ---------------------------------------------------------------------------------


def tagged(*slugs):
    return [{"id": 100 + n, "name": slug, "slug": slug} for n, slug in enumerate(slugs)]


def test_guest_tags_are_merged_with_the_operators():
    """Proxmox says prod and web; the VM also carries an operator tag and a Proxmox tag
    that was removed in Proxmox since: only that one goes."""
    g = guest(tags=("prod", "Web.Front"))
    current = {**vm(1, "cluster-7/qemu/101"), "tags": tagged("owner-team-a", "proxbox", "pve-old")}
    (update,) = guests.plan([g], [current], GUEST_PLACEMENT).updates
    assert update.changes == {
        "tags": [
            {"slug": "owner-team-a"},
            {"slug": "proxbox"},
            {"slug": "pve-prod"},
            {"slug": "pve-web_front"},
        ]
    }


def test_guest_tags_in_another_order_are_unchanged():
    g = guest(tags=("staging", "prod"))
    current = {
        **vm(1, "cluster-7/qemu/101"),
        "tags": tagged("pve-prod", "ops", "proxbox", "pve-staging"),
    }
    plan = guests.plan([g], [current], GUEST_PLACEMENT)
    assert plan.writes == 0 and list(plan.unchanged) == ["cluster-7/qemu/101"]


def test_new_vm_carries_proxbox_and_its_guest_tags():
    (create,) = guests.plan([guest(tags=("prod",))], [], GUEST_PLACEMENT).creates
    assert create.payload["tags"] == [{"slug": "proxbox"}, {"slug": "pve-prod"}]


def test_guest_tag_definitions_are_unique_and_fit_netbox():
    definitions = guests.guest_tag_definitions(
        [guest(tags=("prod", "a+b")), guest(vmid=102, tags=("prod", "x" * 150))]
    )
    assert [d.slug for d in definitions] == ["pve-prod", "pve-a_b", "pve-" + "x" * 96]
    assert [d.name for d in definitions][:2] == ["pve:prod", "pve:a+b"]
    assert all(len(d.slug) <= 100 and len(d.name) <= 100 for d in definitions)


@pytest.mark.parametrize(
    ("stage_plan", "current"),
    [
        (lambda c: nodes.plan([ProxmoxNode("pve1", True)], [c], PLACEMENT), device(11, "pve1")),
        (
            lambda c: interfaces.plan([(1, guest(nics=NICS[1:]))], [c]),
            iface(6, 1, "net1", enabled=False, description="e1000"),
        ),
        (
            lambda c: disks.plan([(1, guest(disks=(GuestDisk("scsi0", 1024, "d0"),)))], [c]),
            {
                "id": 3,
                "name": "scsi0",
                "size": 1024,
                "description": "d0",
                "virtual_machine": {"id": 1},
            },
        ),
        (
            lambda c: ips.plan(
                [
                    (
                        1,
                        guest(
                            nics=NICS,
                            addresses=(GuestAddress("net0", "10.0.0.5/24"),),
                            addresses_reported=True,
                        ),
                    )
                ],
                {(1, "net0"): 50},
                [c],
            ),
            ip(1, "10.0.0.5/24", 50),
        ),
    ],
)
def test_objects_synced_before_tagging_get_the_proxbox_tag_next_to_the_operators(
    stage_plan, current
):
    untagged = stage_plan({**current, "tags": tagged("ops")})
    assert [u.changes for u in untagged.updates] == [
        {"tags": [{"slug": "ops"}, {"slug": "proxbox"}]}
    ]
    settled = stage_plan({**current, "tags": tagged("proxbox", "ops")})
    assert settled.writes == 0


def test_cluster_gets_the_proxbox_tag():
    identity = ClusterIdentity("prod", "cluster", ("pve1",), True)
    current = {"id": 1, "status": {"value": "active"}, "tags": tagged("site-a")}
    assert cluster.plan_metadata(identity, current) == {
        "tags": [{"slug": "site-a"}, {"slug": "proxbox"}]
    }


# -- VLANs --------------------------------------------------------------------------------

VLAN_NICS = (
    GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0", vlan=10),
    GuestNic(
        "net1", "net1", "BC:24:11:00:00:02", True, "virtio on vmbr0", vlan=20, trunks=(30, 31)
    ),
    GuestNic("net2", "net2", "BC:24:11:00:00:03", True, "virtio on vmbr1"),
)


def test_vlans_wanted_from_tags_and_trunks_of_every_guest():
    assert vlans.wanted_vids([guest(nics=VLAN_NICS), guest(vmid=102, nics=NICS)]) == {
        10,
        20,
        30,
        31,
    }


def test_vlans_plan_creates_missing_vlans_in_the_group_and_tags_existing_ones():
    current = [
        {"id": 7, "vid": 10, "tags": MANAGED_TAGS},
        {"id": 8, "vid": 20, "tags": []},  # an operator made it in our group
        {"id": 9, "vid": 99, "tags": MANAGED_TAGS},  # no guest uses it now: kept
    ]
    plan = vlans.plan({10, 20, 30}, 5, current)
    assert [c.payload for c in plan.creates] == [
        {
            "vid": 30,
            "name": "VLAN 30",
            "group": 5,
            "status": "active",
            "tags": [{"slug": "proxbox"}],
        }
    ]
    assert [(u.id, u.changes) for u in plan.updates] == [(8, {"tags": [{"slug": "proxbox"}]})]
    assert plan.unchanged == {10: 7} and plan.deletes == []


def test_vlan_group_is_scoped_to_the_endpoints_cluster():
    payload = vlans.group_payload(7, "pve-a")
    assert (payload["slug"], payload["scope_type"], payload["scope_id"]) == (
        "proxbox-cluster-7",
        "virtualization.cluster",
        7,
    )


VLAN_IDS = {10: 100, 20: 200, 30: 300, 31: 310}


def test_interface_vlans_access_and_tagged():
    plan = interfaces.plan([(1, guest(nics=VLAN_NICS))], [], VLAN_IDS)
    payloads = {c.key[1]: c.payload for c in plan.creates}
    assert (payloads["net0"]["mode"], payloads["net0"]["untagged_vlan"]) == ("access", 100)
    assert payloads["net0"]["tagged_vlans"] == []
    assert payloads["net1"]["mode"] == "tagged"
    assert (payloads["net1"]["untagged_vlan"], payloads["net1"]["tagged_vlans"]) == (
        200,
        [300, 310],
    )
    # Without VLANs the create stays as it was: no 802.1Q fields at all.
    assert not {"mode", "untagged_vlan", "tagged_vlans"} & set(payloads["net2"])


def test_interface_vlans_in_netbox_order_are_unchanged_and_removed_tags_clear_the_mode():
    current = [
        {
            **iface(5, 1, "net1", "BC:24:11:00:00:02", description="virtio on vmbr0"),
            "mode": {"value": "tagged", "label": "Tagged"},
            "untagged_vlan": {"id": 200, "vid": 20},
            "tagged_vlans": [{"id": 310}, {"id": 300}],
        },
        {
            **iface(6, 1, "net2", "BC:24:11:00:00:03", description="virtio on vmbr1"),
            "mode": {"value": "access", "label": "Access"},
            "untagged_vlan": {"id": 100},
            "tagged_vlans": [],
        },
    ]
    plan = interfaces.plan([(1, guest(nics=VLAN_NICS[1:]))], current, VLAN_IDS)
    assert plan.unchanged == {(1, "net1"): 5}
    assert [(u.id, u.changes) for u in plan.updates] == [(6, {"mode": None, "untagged_vlan": None})]


def test_interface_whose_vlan_failed_keeps_its_vlan_fields():
    plan = interfaces.plan([(1, guest(nics=VLAN_NICS[:1]))], [], {})
    (create,) = plan.creates
    assert "mode" not in create.payload and "untagged_vlan" not in create.payload


# -- platforms ----------------------------------------------------------------------------

DEBIAN = Platform("debian-12", "Debian GNU/Linux 12")
LINUX = Platform("linux", "Linux")
WITH_PLATFORMS = guests.GuestPlacement(
    cluster_id=7,
    site_id=3,
    tenant_id=None,
    device_ids={"pve1": 11},
    platforms=frozenset({"debian-12", "linux"}),
)


@pytest.mark.parametrize(
    ("platform", "reported", "current", "change"),
    [
        # the agent's answer sets or replaces the platform
        (DEBIAN, True, None, {"platform": {"slug": "debian-12"}}),
        (DEBIAN, True, {"id": 4, "slug": "linux"}, {"platform": {"slug": "debian-12"}}),
        (DEBIAN, True, {"id": 5, "slug": "debian-12"}, {}),
        # the ostype hint only fills an empty platform: a stopped guest keeps the agent's
        (LINUX, False, None, {"platform": {"slug": "linux"}}),
        (LINUX, False, {"id": 5, "slug": "debian-12"}, {}),
        # a platform NetBox does not have (its create failed) is not written
        (Platform("bsd", "BSD"), True, None, {}),
        (None, False, {"id": 5, "slug": "debian-12"}, {}),
    ],
)
def test_vm_platform(platform, reported, current, change):
    g = guest(platform=platform, platform_reported=reported)
    vm_now = {**vm(1, "cluster-7/qemu/101"), "platform": current}
    plan = guests.plan([g], [vm_now], WITH_PLATFORMS)
    assert [u.changes for u in plan.updates] == ([change] if change else [])
    (create,) = guests.plan([g], [], WITH_PLATFORMS).creates
    expected = (
        {"slug": platform.slug} if platform and platform.slug in WITH_PLATFORMS.platforms else None
    )
    assert create.payload.get("platform") == expected


def test_guest_platforms_each_once():
    assert guests.guest_platforms(
        [guest(platform=DEBIAN), guest(vmid=2, platform=DEBIAN), guest(vmid=3)]
    ) == [DEBIAN]


# -- templates ----------------------------------------------------------------------------


def test_templates_are_skipped_unless_asked_for():
    vm_guest, template = guest(), guest(vmid=9000, name="tpl", template=True)
    assert guests.syncable([vm_guest, template]) == [vm_guest]
    assert guests.syncable([vm_guest, template], guests.SYNC_TEMPLATES) == [vm_guest, template]


def test_synced_template_carries_the_template_tag_and_needs_it():
    template = guest(vmid=9000, name="tpl", status="stopped", template=True)
    (create,) = guests.plan([template], [], GUEST_PLACEMENT).creates
    assert create.payload["tags"] == [{"slug": "proxbox"}, {"slug": "proxbox-template"}]
    assert "proxbox-template" in {t.slug for t in guests.guest_tag_definitions([template])}
    assert "proxbox-template" not in {t.slug for t in guests.guest_tag_definitions([guest()])}


def test_skipped_template_synced_before_counts_as_gone():
    # The run after switching to `skip`: the template's VM is no longer wanted.
    current = [vm(1, "cluster-7/qemu/9000", name="tpl", status="active")]
    template = guest(vmid=9000, name="tpl", template=True)
    plan = guests.plan(guests.syncable([template]), current, GUEST_PLACEMENT)
    assert [(u.id, u.changes) for u in plan.updates] == [(1, {"status": "offline"})]


# -- node interfaces ----------------------------------------------------------------------

NODE_IFACES = [
    NodeInterface("bond0", "lag", True, 9000, bridge="vmbr0"),
    NodeInterface("eno1", "other", True, lag="bond0"),
    NodeInterface("vmbr0", "bridge", True, description="mgmt"),
]


def dev_iface(id_, name, type_, device=11, tags=("proxbox",), **links):
    return {
        "id": id_,
        "name": name,
        "device": {"id": device},
        "type": {"value": type_},
        "enabled": True,
        "mtu": links.pop("mtu", None),
        "description": links.pop("description", ""),
        "tags": [{"slug": s} for s in tags],
        **{
            link: {"id": links[link]} if link in links else None
            for link in ("parent", "lag", "bridge")
        },
    }


def test_node_interfaces_first_sync_creates_then_links():
    plan = node_interfaces.plan({11: NODE_IFACES}, [])
    assert [c.payload for c in plan.creates][0] == {
        "device": 11,
        "name": "bond0",
        "type": "lag",
        "enabled": True,
        "mtu": 9000,
        "description": "",
        "tags": [{"slug": "proxbox"}],
    }
    ids = {(11, "bond0"): 1, (11, "eno1"): 2, (11, "vmbr0"): 3}
    links = node_interfaces.plan_links({11: NODE_IFACES}, [], ids)
    assert {u.id: u.changes for u in links.updates} == {1: {"bridge": 3}, 2: {"lag": 1}}


def test_node_interfaces_resync_is_unchanged_and_only_sync_interfaces_go():
    current = [
        dev_iface(1, "bond0", "lag", mtu=9000, bridge=3),
        dev_iface(2, "eno1", "other", lag=1),
        dev_iface(3, "vmbr0", "bridge", description="mgmt"),
        dev_iface(4, "eno9", "other"),  # synced before, gone from Proxmox
        dev_iface(5, "bmc", "1000base-t", tags=()),  # an operator's: stays
        dev_iface(6, "eth0", "other", device=99),  # another device: not looked at
    ]
    plan = node_interfaces.plan({11: NODE_IFACES}, current)
    assert plan.creates == [] and plan.updates == []
    assert [d.id for d in plan.deletes] == [4]
    ids = dict(plan.unchanged)
    assert node_interfaces.plan_links({11: NODE_IFACES}, current, ids).updates == []


def test_node_interface_leaving_its_bond_is_unlinked():
    current = [dev_iface(1, "bond0", "lag", mtu=9000), dev_iface(2, "eno1", "other", lag=1)]
    networks = {
        11: [NodeInterface("bond0", "lag", True, 9000), NodeInterface("eno1", "other", True)]
    }
    plan = node_interfaces.plan(networks, current)
    links = node_interfaces.plan_links(networks, current, dict(plan.unchanged))
    assert [(u.id, u.changes) for u in links.updates] == [(2, {"lag": None})]


def test_guest_tag_colour_from_the_cluster_tag_style():
    definitions = guests.guest_tag_definitions([guest(tags=("prod", "dev"))], {"prod": "ff0000"})
    assert {d.slug: d.color for d in definitions} == {"pve-prod": "ff0000", "pve-dev": "9e9e9e"}


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
    claim = ClaimResult(
        200,
        {"id": 9, "status": {"value": "active"}, "tags": [{"slug": "proxbox"}]},
        12,
        False,
        False,
    )
    tracking = {"id": 12, "quorate": True, "node_count": node_count, "last_seen": None}
    gateway = _RecordingGateway(claim, tracking)
    seen_at = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    tally = Tally()

    claimed = await cluster.claim(gateway, endpoint, identity, 1)
    changed = await cluster.refresh_tracking(gateway, claimed.claim, identity, seen_at=seen_at)
    cluster.count(tally, claimed.claim, claimed.metadata_changed or changed)

    expected = {"last_seen": "2026-12-01T09:30:00+00:00"}
    if node_count != 1:
        expected["node_count"] = 1
    assert gateway.tracking_patches == [(12, expected)]
    # Being seen is not an inventory change: an up-to-date cluster stays "unchanged".
    assert tally.of(cluster.OBJECT_TYPE).as_dict()[outcome] == 1
