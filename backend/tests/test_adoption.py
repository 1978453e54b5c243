"""Adoption: a guest takes over an existing NetBox VM only with the marker, in scope, opted in."""

import asyncio
from dataclasses import replace

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import ProxmoxNode
from proxbox_backend.domain.plan import Plan, Update
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.gateways.netbox import SOURCE_FIELD
from proxbox_backend.stages import guests, nodes
from proxbox_backend.stages.apply import apply_plan

from .test_planners import GUEST_PLACEMENT, PLACEMENT, guest

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


def test_the_policy_reads_the_opt_in_strictly():
    assert SyncPolicy.from_api({}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": False}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": "yes"}).adopt_existing is False
    assert SyncPolicy.from_api({"adopt_existing": True}).adopt_existing is True


NODE_ADOPTING = replace(PLACEMENT, adopt=True)


def site_device(id_=60, name="pve1", tags=("proxbox-adopt",), site=3, cluster_id=None):
    return {
        "id": id_,
        "name": name,
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
