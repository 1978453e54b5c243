"""The endpoint's sync policy applied to plans and guests (pure), and in apply_plan."""

import asyncio

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update
from proxbox_backend.domain.policy import ACTIVE, PolicyError, SyncPolicy, Target
from proxbox_backend.stages.apply import apply_plan


def vm_plan() -> Plan:
    return Plan(
        "virtualization.virtualmachine",
        creates=[Create("k1", "new", {"name": "new", "tags": [{"slug": "proxbox"}]})],
        updates=[
            Update("k2", "renamed", 2, {"name": "b", "status": "active"}),
            Update("k3", "renamed only", 3, {"name": "c"}),
            Update("k5", "primary", 5, {"primary_ip4": 9, "tags": [{"slug": "x"}]}),
        ],
        deletes=[Delete("k4", "gone", 4)],
    )


def policy(**data) -> SyncPolicy:
    return SyncPolicy.from_api(data)


def test_default_policy_lets_everything_through():
    assert SyncPolicy().restrict(vm_plan()) == vm_plan()
    assert SyncPolicy.from_api(None) == SyncPolicy()


def test_off_writes_nothing_but_keeps_the_ids_for_later_stages():
    plan = policy(modes={"guests": "off"}).restrict(vm_plan())
    assert (plan.creates, plan.updates, plan.deletes) == ([], [], [])
    assert plan.unchanged == {"k2": 2, "k3": 3, "k5": 5, "k4": 4}


def test_create_only_creates_and_neither_updates_nor_deletes():
    plan = policy(modes={"guests": "create_only"}).restrict(vm_plan())
    assert [c.key for c in plan.creates] == ["k1"]
    assert (plan.updates, plan.deletes) == ([], [])


def test_other_object_types_keep_their_own_mode():
    plan = policy(modes={"disks": "off"}).restrict(vm_plan())
    assert plan == vm_plan()


def test_protected_fields_are_taken_out_of_updates_only():
    plan = policy(protected_fields=["name", "primary_ip"]).restrict(vm_plan())
    assert plan.creates == vm_plan().creates
    assert [(u.key, u.changes) for u in plan.updates] == [
        ("k2", {"status": "active"}),
        ("k5", {"tags": [{"slug": "x"}]}),
    ]
    assert plan.unchanged == {"k3": 3}
    assert [d.key for d in plan.deletes] == ["k4"]


def test_tags_mode_off_keeps_tags_out_of_creates_and_updates():
    plan = policy(modes={"tags": "off"}).restrict(vm_plan())
    assert "tags" not in plan.creates[0].payload
    assert [u.changes for u in plan.updates if u.key == "k5"] == [{"primary_ip4": 9}]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"modes": {"guests": "sometimes"}}, "guests mode 'sometimes'"),
        ({"protected_fields": ["colour"]}, "unknown protected field(s) ['colour']"),
    ],
)
def test_a_policy_the_backend_cannot_apply_is_refused_naming_it(data, message):
    with pytest.raises(PolicyError) as refused:
        SyncPolicy.from_api(data)
    assert message in str(refused.value)


def guest(vmid=100, name="web", node="pve1", tags=(), pool=None) -> Guest:
    return Guest("qemu", vmid, name, node, "running", 1.0, 512, tags=tags, pool=pool)


def test_exclusion_filters():
    p = policy(
        exclude={
            "vmids": [[900, 999]],
            "names": ["test-*"],
            "tags": ["nosync"],
            "nodes": ["pve3"],
            "pools": ["lab"],
        }
    )
    assert p.excludes(guest()) is None
    assert p.excludes(guest(vmid=950)) == "VMID 950 excluded"
    assert p.excludes(guest(vmid=1000)) is None
    assert p.excludes(guest(name="test-db")) == "name 'test-db' excluded"
    assert p.excludes(guest(name="Test-db")) is None  # patterns are case-sensitive
    assert p.excludes(guest(tags=("a", "nosync"))) == "tag excluded"
    assert p.excludes(guest(node="pve3")) == "node 'pve3' excluded"
    assert p.excludes(guest(pool="lab")) == "pool 'lab' excluded"


class RecordingNetBox:
    """Answers the marker lookup and records the bulk writes apply_plan sends."""

    def __init__(self, marked: set[int]):
        self.marked = marked
        self.deleted: list[int] = []
        self.lookups: list[dict] = []

    async def list_by_ids(self, path, key, ids, params=None):
        self.lookups.append({"path": path, key: sorted(ids), **(params or {})})
        return [{"id": i} for i in ids if i in self.marked]

    async def bulk_delete(self, path, ids):
        self.deleted.extend(ids)
        return BulkResult(succeeded={position: {"id": i} for position, i in enumerate(ids)})


def disk_plan() -> Plan:
    return Plan(
        "virtualization.virtualdisk",
        deletes=[Delete("d1", "synced disk", 11), Delete("d2", "operator's disk", 12)],
    )


def run_apply(netbox, plan, active: SyncPolicy):
    token = ACTIVE.set(active)
    try:
        tally = Tally()
        ids = asyncio.run(apply_plan(netbox, "/api/virtualization/virtual-disks/", plan, tally))
        return ids, tally
    finally:
        ACTIVE.reset(token)


def test_components_without_the_proxbox_tag_are_never_deleted_by_default():
    netbox = RecordingNetBox(marked={11})
    ids, tally = run_apply(netbox, disk_plan(), SyncPolicy())
    assert netbox.deleted == [11]
    assert netbox.lookups[0]["tag"] == "proxbox"
    assert ids == {"d2": 12}
    assert tally.counters["virtualization.virtualdisk"].deleted == 1


def test_switching_keep_operator_objects_off_deletes_them_too():
    netbox = RecordingNetBox(marked={11})
    run_apply(netbox, disk_plan(), policy(keep_operator_objects=False))
    assert netbox.deleted == [11, 12]
    assert netbox.lookups == []


def test_a_target_names_one_guest_or_one_node():
    assert Target.parse() is None
    assert Target.parse(guest="lxc/105").guest == ("lxc", 105)
    assert Target.parse(node="pve2").node == "pve2"
    for bad in ({"guest": "vm/100"}, {"guest": "qemu/7"}, {"guest": "qemu/100", "node": "pve1"}):
        with pytest.raises(PolicyError):
            Target.parse(**bad)


def test_a_targeted_sync_leaves_every_other_guest_and_the_nodes_alone():
    target = SyncPolicy().targeting(Target.parse(guest="qemu/100"))
    assert target.excludes(guest(vmid=100)) is None
    assert target.excludes(guest(vmid=101)) == "not the target of this sync"
    plan = Plan(
        "virtualization.virtualmachine",
        creates=[Create("cluster-7/qemu/101", "other", {})],
        updates=[
            Update("cluster-7/qemu/100#abc", "target", 1, {"status": "active"}),
            Update("cluster-7/qemu/102", "gone", 2, {"status": "offline"}),
        ],
        deletes=[Delete("cluster-7/lxc/100", "a container with the same VMID", 3)],
    )
    restricted = target.restrict(plan)
    assert [u.key for u in restricted.updates] == ["cluster-7/qemu/100#abc"]
    assert (restricted.creates, restricted.deletes) == ([], [])
    assert restricted.unchanged == {"cluster-7/qemu/102": 2, "cluster-7/lxc/100": 3}
    devices = Plan("dcim.device", updates=[Update("pve1", "pve1", 5, {"status": "offline"})])
    assert target.restrict(devices).updates == []


def test_a_node_target_covers_its_guests_and_its_own_device_only():
    policy_ = SyncPolicy().targeting(Target.parse(node="pve1"))
    assert policy_.excludes(guest(node="pve1")) is None
    assert policy_.excludes(guest(node="pve2")) == "not the target of this sync"
    inventory = [guest(vmid=100, node="pve1"), guest(vmid=101, node="pve2")]
    policy_ = SyncPolicy(target=policy_.target.with_inventory(inventory))
    devices = Plan(
        "dcim.device",
        updates=[Update("pve1", "pve1", 5, {"status": "active"}), Update("pve2", "pve2", 6, {})],
    )
    assert [u.key for u in policy_.restrict(devices).updates] == ["pve1"]
    vms = Plan(
        "virtualization.virtualmachine",
        updates=[
            Update("cluster-7/qemu/100", "a", 1, {"x": 1}),
            Update("cluster-7/qemu/101", "b", 2, {"x": 1}),
        ],
    )
    assert [u.key for u in policy_.restrict(vms).updates] == ["cluster-7/qemu/100"]


def test_a_node_target_refreshes_its_own_interfaces_and_primary_ips_only():
    target = Target.parse(node="pve1").with_device({"pve1": 5, "pve2": 6})
    policy_ = SyncPolicy(target=target)
    interfaces = Plan(
        "dcim.interface",
        creates=[Create((5, "vmbr1"), "new", {}), Create((6, "vmbr1"), "other's", {})],
        updates=[
            Update((5, "vmbr0"), "mine", 50, {"mtu": 9000}),
            Update((6, "vmbr0"), "x", 60, {}),
        ],
        deletes=[Delete((6, "eth9"), "other's gone", 61)],
    )
    kept = policy_.restrict(interfaces)
    assert [c.key for c in kept.creates] == [(5, "vmbr1")]
    assert [u.key for u in kept.updates] == [(5, "vmbr0")]
    assert kept.deletes == [] and kept.unchanged == {(6, "vmbr0"): 60, (6, "eth9"): 61}
    primaries = Plan(
        "dcim.device",
        updates=[Update(5, "p", 5, {"primary_ip4": 1}), Update(6, "q", 6, {"primary_ip4": 2})],
    )
    assert [u.key for u in policy_.restrict(primaries).updates] == [5]
    # A guest target touches no node's interfaces.
    guest_only = SyncPolicy(target=Target.parse(guest="qemu/100"))
    assert guest_only.restrict(interfaces).creates == []


def test_the_sync_route_takes_one_target_a_guest_or_a_node():
    from fastapi.testclient import TestClient

    from proxbox_backend import api
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret

    asked = []

    class RecordingService:
        async def endpoint_exists(self, endpoint_id):
            return True

        async def run(self, endpoint_id, emit=None, target=None):
            asked.append(target)

    settings = Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40))
    app = api.create_app(settings, service=RecordingService(), api_token="t" * 32)
    headers = {"Authorization": "Bearer " + "t" * 32}
    with TestClient(app) as client:
        # One endpoint each: a second run of one endpoint is refused while the first is active.
        for endpoint_id, ref in enumerate(("qemu/100", "lxc/105", "node/pve2", None), start=1):
            params = {"target": ref} if ref else None
            answer = client.post(f"/sync/{endpoint_id}", params=params, headers=headers)
            assert answer.status_code == 202, ref
        answer = client.post("/sync/9", params={"taget": "qemu/100"}, headers=headers)
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["query", "taget"]
        for bad in ("qemu/1", "node/", "vm/100", "qemu/100&node=pve1", "pve1"):
            answer = client.post("/sync/7", params={"target": bad}, headers=headers)
            assert answer.status_code == 422, bad
            assert answer.json()["detail"][0]["loc"] == ["query", "target"]
    assert [(t.guest, t.node) if t else None for t in asked] == [
        (("qemu", 100), None),
        (("lxc", 105), None),
        (None, "pve2"),
        None,
    ]


class OrderedNetBox:
    """Bulk writes that answer only when the test says: which write was sent before which
    answer came back."""

    def __init__(self):
        self.events: list[str] = []
        self.release = asyncio.Event()

    async def _write(self, name: str, rows) -> BulkResult:
        self.events.append(f"{name} sent")
        if name == "update":
            # The update's answer waits until the create was sent (or for ever).
            await asyncio.wait_for(self.release.wait(), timeout=1)
        else:
            self.release.set()
        self.events.append(f"{name} answered")
        return BulkResult(succeeded={i: {"id": 100 + i} for i in range(len(rows))})

    async def bulk_update(self, path, rows):
        return await self._write("update", rows)

    async def bulk_create(self, path, rows):
        return await self._write("create", rows)


def address_plan(update_changes: dict) -> Plan:
    return Plan(
        "ipam.ipaddress",
        creates=[Create("new", "10.0.0.9/24", {"address": "10.0.0.9/24"})],
        updates=[Update("kept", "10.0.0.5/24", 5, update_changes)],
    )


@pytest.mark.parametrize("follow", [True, False])
def test_updates_that_free_nothing_are_written_with_the_creates(follow):
    netbox = OrderedNetBox()
    plan = address_plan({"tags": [{"slug": "proxbox"}]})
    token = ACTIVE.set(SyncPolicy())
    try:
        tally = Tally()
        run = apply_plan(
            netbox, "/api/ipam/ip-addresses/", plan, tally, creates_follow_updates=follow
        )
        if follow:
            # The create waits for the update's answer, which waits for the create: stuck.
            with pytest.raises(TimeoutError):
                asyncio.run(run)
            assert netbox.events == ["update sent"]
            return
        ids = asyncio.run(run)
    finally:
        ACTIVE.reset(token)
    assert netbox.events[:2] == ["update sent", "create sent"]
    assert ids == {"kept": 5, "new": 100}
    assert (tally.of("ipam.ipaddress").updated, tally.of("ipam.ipaddress").created) == (1, 1)


def test_only_address_updates_that_may_free_an_address_hold_the_creates_back():
    from proxbox_backend.stages.ips import frees_addresses

    assert not frees_addresses(address_plan({"tags": [{"slug": "proxbox-unconfirmed"}]}))
    assert frees_addresses(address_plan({"vrf": 3}))
    adopting = address_plan({"assigned_object_id": 7})
    adopting.updates[0] = Update("kept", "adopted", 5, {"assigned_object_id": 7}, adopts=True)
    assert frees_addresses(adopting)


@pytest.mark.parametrize("days", [None, 0, -3, "30"])
def test_offline_then_delete_needs_a_number_of_days(days):
    with pytest.raises(PolicyError, match="removed_guests_days"):
        SyncPolicy.from_api({"removed_guests": "offline-then-delete", "removed_guests_days": days})


def test_offline_then_delete_reads_its_days():
    policy = SyncPolicy.from_api(
        {"removed_guests": "offline-then-delete", "removed_guests_days": 30}
    )
    assert (policy.removed_guests, policy.removed_guests_days) == ("offline-then-delete", 30)
