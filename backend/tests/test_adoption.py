"""Adoption: a guest takes over an existing NetBox VM only with the marker, in scope, opted in."""

import asyncio
from dataclasses import replace

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import GuestAddress, ProxmoxNode
from proxbox_backend.domain.plan import Plan, Update
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import SOURCE_FIELD
from proxbox_backend.stages import guests, ips, nodes
from proxbox_backend.stages.apply import apply_plan

from .test_planners import GUEST_PLACEMENT, NICS, PLACEMENT, guest

ADOPTING = replace(GUEST_PLACEMENT, adopt=True)
KEY = "cluster-7/qemu/101"


def operator_vm(id_=40, name="web-001", tags=("proxbox-adopt",), cluster_id=7, source=None):
    return {
        "id": id_,
        "name": name,
        "status": {"value": "planned"},
        "vcpus": 1.0,
        "memory": 512,
        "cluster": {"id": cluster_id},
        "device": None,
        "site": {"id": 3},
        "tenant": None,
        "custom_fields": {SOURCE_FIELD: source},
        "tags": [{"id": 9, "slug": slug, "name": slug} for slug in tags],
    }


def test_a_marked_vm_in_the_cluster_is_adopted_not_duplicated():
    plan = guests.plan([guest()], [operator_vm(tags=("proxbox-adopt", "backup"))], ADOPTING)
    assert plan.creates == []
    (update,) = plan.updates
    assert (update.key, update.id) == (KEY, 40)
    assert "adopted" in update.label
    assert update.changes["custom_fields"] == {SOURCE_FIELD: KEY}
    # The marker goes, the sync's tag comes, the operator's own tag stays.
    assert sorted(t["slug"] for t in update.changes["tags"]) == ["backup", "proxbox"]
    assert update.changes["status"] == "active"
    assert update.changes["memory"] == 2048
    assert update.changes["device"] == 11


def test_the_name_matches_case_insensitively_as_netbox_does():
    (update,) = guests.plan([guest()], [operator_vm(name="WEB-001")], ADOPTING).updates
    assert update.id == 40
    assert update.changes["name"] == "web-001"


@pytest.mark.parametrize(
    "vm, placement",
    [
        pytest.param(operator_vm(tags=()), ADOPTING, id="no marker"),
        pytest.param(operator_vm(tags=("backup",)), ADOPTING, id="another tag only"),
        pytest.param(operator_vm(), GUEST_PLACEMENT, id="adoption off"),
        pytest.param(operator_vm(cluster_id=8), ADOPTING, id="another cluster"),
        pytest.param(operator_vm(name="web-002"), ADOPTING, id="another name"),
        pytest.param(operator_vm(source="cluster-9/qemu/101"), ADOPTING, id="another sync's VM"),
        pytest.param(
            operator_vm(tags=("proxbox-adopt", "proxbox")), ADOPTING, id="already managed"
        ),
    ],
)
def test_never_adopted_without_the_marker_or_out_of_scope(vm, placement):
    plan = guests.plan([guest()], [vm], placement)
    # Today's behaviour: a new VM is planned and the existing one is left alone.
    assert [c.key for c in plan.creates] == [KEY]
    assert all(u.id != 40 for u in plan.updates)
    assert 40 not in plan.unchanged.values()
    assert plan.deletes == []


def test_one_marked_vm_is_adopted_by_one_guest_only():
    plan = guests.plan(
        [guest(), guest(vmid=102, name="web-001", node="pve2")], [operator_vm()], ADOPTING
    )
    assert [u.id for u in plan.updates] == [40]
    assert [c.key for c in plan.creates] == ["cluster-7/qemu/102"]


def test_a_managed_vm_keeps_precedence_over_a_marked_one():
    managed = {**operator_vm(id_=41, tags=("proxbox",), source=KEY)}
    plan = guests.plan([guest()], [operator_vm(name="web-001"), managed], ADOPTING)
    assert all(u.id == 41 for u in plan.updates)
    assert plan.creates == []


# -- the source custom field as the marker ------------------------------------------------


@pytest.mark.parametrize(
    "source", ["cluster-7/qemu/101", "cluster-7/qemu/101#1700000001"], ids=["key", "full key"]
)
def test_a_vm_naming_this_clusters_key_is_adopted_whatever_its_name(source):
    keyed = operator_vm(name="legacy-web", tags=("backup",), source=source)
    plan = guests.plan([guest(creation_id="1700000001")], [keyed], ADOPTING)
    assert plan.creates == [] and plan.deletes == []
    (update,) = plan.updates
    assert update.adopts and update.id == 40
    # The guest's full key replaces what the operator wrote.
    assert update.changes["custom_fields"] == {SOURCE_FIELD: f"{KEY}#1700000001"}
    assert update.changes["name"] == "web-001"
    assert sorted(t["slug"] for t in update.changes["tags"]) == ["backup", "proxbox"]


@pytest.mark.parametrize(
    "source",
    [
        "cluster-9/qemu/101",
        "cluster-70/qemu/101",
        "cluster-7/lxc/101",
        "cluster-7/qemu/102",
        "cluster-7/qemu/101#1600000000",
    ],
    ids=[
        "another cluster",
        "a cluster id sharing the prefix",
        "another kind",
        "another vmid",
        "an earlier guest of that vmid",
    ],
)
def test_a_key_naming_another_endpoint_or_guest_is_never_adopted(source):
    keyed = operator_vm(name="legacy-web", tags=("proxbox-adopt",), source=source)
    plan = guests.plan([guest(creation_id="1700000001")], [keyed], ADOPTING)
    assert [c.key for c in plan.creates] == [f"{KEY}#1700000001"]
    assert all(u.id != 40 for u in plan.updates) and plan.deletes == []


def test_an_unmatched_keyed_vm_is_left_alone_not_counted_gone():
    keyed = operator_vm(name="legacy-web", tags=(), source="cluster-7/qemu/555")
    placement = replace(ADOPTING, disappeared=guests.DELETE)
    plan = guests.plan([guest()], [keyed], placement)
    assert plan.deletes == [] and all(u.id != 40 for u in plan.updates)


def test_without_the_opt_in_a_keyed_vm_stays_what_it_was_today_the_syncs():
    keyed = operator_vm(name="web-001", tags=(), source=KEY)
    (update,) = guests.plan([guest()], [keyed], GUEST_PLACEMENT).updates
    assert update.id == 40 and not update.adopts


def test_the_policy_reads_the_opt_in_strictly():
    assert SyncPolicy.from_api({}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": False}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": "yes"}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": True}).adopt_existing is True


NODE_ADOPTING = replace(PLACEMENT, adopt=True)


def site_device(id_=60, name="pve1", tags=("proxbox-adopt",), site=3, cluster_id=None, source=None):
    return {
        "id": id_,
        "name": name,
        "custom_fields": {SOURCE_FIELD: source},
        "status": {"value": "planned"},
        "site": {"id": site},
        "tenant": None,
        "cluster": {"id": cluster_id} if cluster_id else None,
        "tags": [{"id": 9, "slug": slug, "name": slug} for slug in tags],
    }


def test_a_marked_device_at_the_endpoints_site_is_adopted_into_the_cluster():
    node = ProxmoxNode("pve1", True)
    plan = nodes.plan([node], [], NODE_ADOPTING, [site_device(tags=("proxbox-adopt", "rack"))])
    assert plan.creates == []
    (update,) = plan.updates
    assert (update.key, update.id) == ("pve1", 60)
    assert update.changes["cluster"] == 7 and update.changes["status"] == "active"
    assert sorted(t["slug"] for t in update.changes["tags"]) == ["proxbox", "rack"]


def test_a_device_naming_this_clusters_node_in_its_source_field_is_adopted_and_renamed():
    keyed = site_device(name="rack4-srv2", tags=(), source="cluster-7/node/pve1")
    (update,) = nodes.plan([ProxmoxNode("pve1", True)], [], NODE_ADOPTING, [keyed]).updates
    assert update.adopts and update.id == 60
    assert update.changes["name"] == "pve1" and update.changes["cluster"] == 7
    assert [t["slug"] for t in update.changes["tags"]] == ["proxbox"]


@pytest.mark.parametrize("protected", [[], ["name"]], ids=["unprotected", "name protected"])
def test_create_only_nodes_adopt_with_the_name_and_cluster_the_next_run_finds(protected):
    keyed = site_device(name="rack4-srv2", tags=(), source="cluster-7/node/pve1")
    node = ProxmoxNode("pve1", True)
    policy = SyncPolicy.from_api({"modes": {"nodes": "create_only"}, "protected_fields": protected})
    (adoption,) = policy.restrict(nodes.plan([node], [], NODE_ADOPTING, [keyed])).updates
    assert adoption.changes["name"] == "pve1" and adoption.changes["cluster"] == 7
    assert "status" not in adoption.changes  # create-only: no other field
    adopted = {**keyed, **adoption.changes, "cluster": {"id": 7}, "tags": adoption.changes["tags"]}
    again = nodes.plan([node], [adopted], NODE_ADOPTING, [adopted])
    assert again.creates == [] and not any(u.adopts for u in again.updates)


@pytest.mark.parametrize(
    "source",
    ["cluster-8/node/pve1", "cluster-7/node/pve2", "cluster-7/qemu/101", "cluster-7/node/"],
    ids=["another cluster", "another node", "a guest's key", "no node"],
)
def test_a_device_key_naming_anything_else_is_never_adopted_even_when_tagged(source):
    keyed = site_device(tags=("proxbox-adopt",), source=source)
    plan = nodes.plan([ProxmoxNode("pve1", True)], [], NODE_ADOPTING, [keyed])
    assert [c.key for c in plan.creates] == ["pve1"] and plan.updates == []


@pytest.mark.parametrize(
    "device, placement",
    [
        pytest.param(site_device(tags=()), NODE_ADOPTING, id="no marker"),
        pytest.param(site_device(), PLACEMENT, id="adoption off"),
        pytest.param(site_device(site=4), NODE_ADOPTING, id="another site"),
        pytest.param(site_device(cluster_id=8), NODE_ADOPTING, id="another cluster"),
        pytest.param(site_device(name="PVE1"), NODE_ADOPTING, id="not the exact name"),
        pytest.param(
            site_device(tags=("proxbox-adopt", "proxbox")), NODE_ADOPTING, id="already managed"
        ),
    ],
)
def test_a_device_is_never_adopted_without_the_marker_or_out_of_scope(device, placement):
    plan = nodes.plan([ProxmoxNode("pve1", True)], [], placement, [device])
    assert [c.key for c in plan.creates] == ["pve1"]
    assert plan.updates == []


# -- adoption under the other policy switches ---------------------------------------------

ADOPTION = {
    "custom_fields": {SOURCE_FIELD: KEY},
    "tags": [{"slug": "proxbox"}],
    "memory": 2048,
    "status": "active",
}


def adoption_plan() -> Plan:
    return Plan(
        "virtualization.virtualmachine",
        updates=[
            Update(KEY, "web-001 (adopted)", 40, dict(ADOPTION), adopts=True),
            Update("ours", "synced", 41, {"memory": 4096}),
        ],
    )


def test_create_only_adopts_with_the_ownership_marker_alone():
    restricted = SyncPolicy.from_api({"modes": {"guests": "create_only"}}).restrict(adoption_plan())
    (adoption,) = restricted.updates
    assert adoption.id == 40
    assert set(adoption.changes) == {"custom_fields", "tags"}
    assert restricted.unchanged == {"ours": 41}


def test_with_guests_off_an_adoption_is_dropped_and_its_vm_not_followed():
    restricted = SyncPolicy.from_api({"modes": {"guests": "off"}}).restrict(adoption_plan())
    assert restricted.updates == []
    assert restricted.unchanged == {"ours": 41}  # the operator's VM: no later stage touches it


def test_protected_fields_stay_but_the_marker_is_written():
    active = SyncPolicy.from_api({"protected_fields": ["status"], "modes": {"tags": "off"}})
    (_synced, adoption) = active.restrict(adoption_plan()).updates
    assert set(adoption.changes) == {"custom_fields", "tags", "memory"}


class FailingUpdates:
    """NetBox refusing every update of a bulk write."""

    async def bulk_update(self, path, rows):
        return BulkResult(failed={position: "refused" for position in range(len(rows))})


def test_a_failed_adoption_gives_later_stages_no_id():
    token = ACTIVE.set(SyncPolicy())
    try:
        tally = Tally()
        ids = asyncio.run(
            apply_plan(
                FailingUpdates(), "/api/virtualization/virtual-machines/", adoption_plan(), tally
            )
        )
    finally:
        ACTIVE.reset(token)
    # A failed update of a VM the sync owns still leaves it the sync's; an adoption does not.
    assert ids == {"ours": 41}
    assert tally.failed == 2


# -- IP addresses -------------------------------------------------------------------------

ADDRESS = "10.0.0.5/24"


def operator_ip(id_=70, address=ADDRESS, tags=("proxbox-adopt", "dns"), vrf=None, on=None):
    return {
        "id": id_,
        "address": address,
        "vrf": {"id": vrf} if vrf else None,
        "assigned_object_type": "dcim.interface" if on else None,
        "assigned_object_id": on,
        "tags": [{"id": 900 + n, "slug": slug} for n, slug in enumerate(tags)],
    }


def ip_plan(marked, vrf_id=None, address=ADDRESS):
    addressed = guest(nics=NICS, addresses=(GuestAddress("net0", address),))
    return ips.plan([(1, addressed)], {(1, "net0"): 50}, [], vrf_id, marked)


@pytest.mark.parametrize("vrf_id", [None, 5], ids=["global table", "the endpoint's VRF"])
def test_a_marked_address_is_moved_to_the_syncs_interface_not_duplicated(vrf_id):
    plan = ip_plan([operator_ip(vrf=vrf_id, on=99)], vrf_id)
    assert plan.creates == []
    (update,) = plan.updates
    assert update.adopts and (update.key, update.id) == ((50, ADDRESS), 70)
    assert update.changes["assigned_object_type"] == "virtualization.vminterface"
    assert update.changes["assigned_object_id"] == 50
    assert sorted(t["slug"] for t in update.changes["tags"]) == ["dns", "proxbox"]


def test_the_address_matches_as_netbox_spells_it():
    (update,) = ip_plan([operator_ip(address="fd00:0::5/64")], address="fd00::5/64").updates
    assert update.id == 70


@pytest.mark.parametrize(
    "marked, vrf_id",
    [
        pytest.param([operator_ip(tags=("dns",))], None, id="no marker"),
        pytest.param([operator_ip(tags=("proxbox-adopt", "proxbox"))], None, id="already managed"),
        pytest.param([operator_ip(vrf=6)], 5, id="another VRF"),
        pytest.param([operator_ip(vrf=5)], None, id="a VRF, the endpoint uses the global table"),
        pytest.param([operator_ip()], 5, id="the global table, the endpoint uses a VRF"),
        pytest.param([operator_ip(address="10.0.0.5/16")], None, id="another prefix length"),
        pytest.param([], None, id="adoption off (nothing looked up)"),
    ],
)
def test_an_address_is_never_adopted_without_the_marker_or_out_of_the_vrf(marked, vrf_id):
    plan = ip_plan(marked, vrf_id)
    # Today's behaviour: the sync creates it (NetBox refuses a duplicate, reported as such).
    assert [c.key for c in plan.creates] == [(50, ADDRESS)]
    assert plan.updates == []


def test_create_only_ips_still_adopt_with_the_assignment_and_marker():
    restricted = SyncPolicy.from_api({"modes": {"ips": "create_only"}}).restrict(
        ip_plan([operator_ip(on=99)])
    )
    (adoption,) = restricted.updates
    assert set(adoption.changes) == {"assigned_object_type", "assigned_object_id", "tags"}
