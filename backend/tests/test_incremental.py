"""Incremental runs: the baseline's digests, what the change log means, which guests a run
syncs, and the change-log reads (a fake gateway records them)."""

import asyncio
import dataclasses
import datetime as dt
import json
import subprocess
import sys
import time

import pytest

from proxbox_backend.baselines import MemoryBaselines, baseline_key
from proxbox_backend.domain import baseline as bl
from proxbox_backend.domain import records as records_domain
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Guest, GuestDisk
from proxbox_backend.domain.policy import SyncPolicy
from proxbox_backend.gateways.netbox import ChangeLogUnreadable, Prerequisites
from proxbox_backend.incremental import (
    OVERLAP,
    RECORD_TYPES,
    History,
    Incremental,
    read_history,
    records_digest,
)
from proxbox_backend.stages import records as records_stage


def a_guest(vmid: int = 100, **changes) -> Guest:
    fields = {
        "kind": "qemu",
        "vmid": vmid,
        "name": f"vm-{vmid}",
        "node": "pve1",
        "status": "running",
        "vcpus": 2.0,
        "memory_mb": 2048,
        "disks": (GuestDisk("scsi0", 8192, "local-lvm:vm-100-disk-0"),),
        "tags": ("prod",),
    }
    return Guest(**{**fields, **changes})


def a_baseline(**changes) -> bl.Baseline:
    fields = {
        "cluster_id": 7,
        "context": "ctx",
        "prerequisites": (1, 2, 3),
        "nodes": "nodes",
        "device_ids": {"pve1": 3},
        "guests": {
            "qemu/100": bl.GuestEntry(bl.digest(a_guest(100)), 1000),
            "qemu/101": bl.GuestEntry(bl.digest(a_guest(101)), 1001),
            "qemu/102": bl.GuestEntry(bl.digest(a_guest(102)), 1002),
        },
        "records": "rec",
        "started_change": (500, "2026-12-03T06:00:00.000000+00:00"),
        "ended_change": (640, "2026-12-03T06:10:00.000000+00:00"),
        "user_id": 2,
        "full_at": time.time(),
        "snapshots": {100: ("cfg-100", "snaps-100"), 101: ("cfg-101", "snaps-101")},
    }
    return bl.Baseline(**{**fields, **changes})


# -- digests and the stored form ------------------------------------------------------------


def test_a_guests_digest_follows_what_the_sync_writes():
    assert bl.digest(a_guest()) == bl.digest(a_guest())
    assert bl.digest(a_guest(memory_mb=4096)) != bl.digest(a_guest())
    assert bl.digest(a_guest(tags=("prod", "web"))) != bl.digest(a_guest())


def test_digests_do_not_depend_on_the_process_hash_seed():
    """Sets (a policy's protected fields) are ordered by hash: two processes must agree."""
    code = (
        "from proxbox_backend.domain import baseline as bl;"
        "from proxbox_backend.domain.policy import SyncPolicy;"
        "print(bl.digest(SyncPolicy(protected_fields=frozenset("
        "['status','memory','vcpus','description','tags','platform']))))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(digests) == 1, digests


def test_the_baseline_round_trips_and_anything_else_is_no_baseline():
    baseline = a_baseline()
    assert bl.Baseline.from_json(baseline.to_json()) == baseline
    assert bl.Baseline.from_json(None) is None
    assert bl.Baseline.from_json("not json") is None
    other_format = {**json.loads(baseline.to_json()), "format": bl.FORMAT + 1}
    assert bl.Baseline.from_json(json.dumps(other_format)) is None
    assert bl.Baseline.from_json(json.dumps({"format": bl.FORMAT})) is None


def test_baselines_are_kept_per_netbox_and_endpoint():
    store = MemoryBaselines()
    key, baseline = baseline_key("http://netbox-a/", 1), a_baseline()
    asyncio.run(store.save(key, baseline))
    assert asyncio.run(store.load(key)) == baseline
    assert asyncio.run(store.load(baseline_key("http://netbox-b", 1))) is None
    assert asyncio.run(store.load(baseline_key("http://netbox-a", 2))) is None
    assert baseline_key("http://netbox-a/", 1) == baseline_key("http://netbox-a", 1)


# -- the change log's meaning ---------------------------------------------------------------

INTERFACE_TYPE = 81  # what NetBox numbers virtualization.vminterface in this example


def change(object_type, object_id=1, action="update", before=None, after=None):
    return bl.Change(1, action, object_type, object_id, before, after)


@pytest.mark.parametrize(
    ("entry", "vm_ids", "records", "full"),
    [
        (change(bl.VM, 1001), {1001}, False, None),
        (change(bl.VM_INTERFACE, 5, after={"virtual_machine": 1002}), {1002}, False, None),
        # moved between VMs: both are re-planned
        (
            change(
                bl.VM_INTERFACE, 5, before={"virtual_machine": 1000}, after={"virtual_machine": 1}
            ),
            {1000, 1},
            False,
            None,
        ),
        (
            change(bl.VIRTUAL_DISK, 9, "delete", before={"virtual_machine": 1001}),
            {1001},
            False,
            None,
        ),
        # an address on a VM interface (the change log stores the type by its id)
        (
            change(
                bl.IP_ADDRESS,
                4,
                after={"assigned_object_type": INTERFACE_TYPE, "assigned_object_id": 5},
            ),
            {1002},
            False,
            None,
        ),
        # unassigned: the interface it had is in the data from before
        (
            change(
                bl.IP_ADDRESS,
                4,
                before={"assigned_object_type": INTERFACE_TYPE, "assigned_object_id": 5},
                after={"assigned_object_type": None, "assigned_object_id": None},
            ),
            {1002},
            False,
            None,
        ),
        # a device interface with the same id is not a VM interface
        (
            change(bl.IP_ADDRESS, 4, after={"assigned_object_type": 3, "assigned_object_id": 5}),
            set(),
            False,
            None,
        ),
        (change("netbox_proxbox.proxmoxstorage", 3), set(), True, None),
        (change("extras.tag", 2, "create"), set(), False, None),
        (change("extras.tag", 2), set(), False, "extras.tag 2 was updated in NetBox"),
        (
            change("dcim.platform", 2, "delete"),
            set(),
            False,
            "dcim.platform 2 was deleted in NetBox",
        ),
        (change("virtualization.cluster", 8), set(), False, None),  # another cluster
        (
            change("virtualization.cluster", 7),
            set(),
            False,
            "virtualization.cluster 7 was updated in NetBox",
        ),
        (change("dcim.rack", 1), set(), False, None),
    ],
)
def test_what_a_change_means_for_the_next_run(entry, vm_ids, records, full):
    interface_vms = {5: 1002}
    assert bl.interfaces_to_resolve([entry], INTERFACE_TYPE) <= {5}
    drift = bl.drift([entry], RECORD_TYPES, interface_vms, a_baseline(), INTERFACE_TYPE)
    assert drift.full_reason == full
    if full is None:
        assert (set(drift.vm_ids), drift.records) == (vm_ids, records)


def test_the_change_log_entry_as_netbox_serves_it():
    entry = bl.Change.from_api(
        {
            "id": 12,
            "action": {"value": "delete", "label": "Deleted"},
            "changed_object_type": "virtualization.virtualdisk",
            "changed_object_id": 9,
            "prechange_data": {"virtual_machine": 1001},
            "postchange_data": None,
        }
    )
    assert (entry.id, entry.action, entry.object_type, entry.object_id) == (
        12,
        "delete",
        "virtualization.virtualdisk",
        9,
    )
    assert entry.values("virtual_machine") == {1001}


# -- which guests a run syncs ---------------------------------------------------------------


def test_only_changed_new_gone_and_drifted_guests_are_synced():
    baseline = a_baseline()
    digests = {
        "qemu/100": bl.digest(a_guest(100)),  # unchanged
        "qemu/101": bl.digest(a_guest(101, memory_mb=1)),  # changed in Proxmox
        "qemu/103": bl.digest(a_guest(103)),  # new
    }
    scope = bl.scope(baseline, digests, set(), bl.Drift())
    assert scope.dirty == {"qemu/101", "qemu/103"} and scope.new == {"qemu/103"}
    assert scope.gone == {"qemu/102"}
    assert scope.vm_ids == {1001, 1002}


def test_an_unreadable_guest_is_not_gone_and_a_drifted_one_is_synced():
    baseline = a_baseline()
    digests = {ref: entry.digest for ref, entry in baseline.guests.items() if ref != "qemu/102"}
    drift = bl.Drift(vm_ids=frozenset({1000, 4242}))
    scope = bl.scope(baseline, digests, {"qemu/102"}, drift)
    assert scope.dirty == {"qemu/100"} and scope.gone == set()
    # a VM the baseline does not know (a stopped run's) is read, its key decides
    assert scope.vm_ids == {1000, 4242}


def test_the_next_baseline_keeps_clean_guests_and_replaces_the_rest():
    baseline = a_baseline()
    scope = bl.Scope(dirty={"qemu/101", "qemu/103"}, gone={"qemu/102"})
    synced = {"qemu/101": bl.GuestEntry("d1", 1001), "qemu/103": bl.GuestEntry("d3", 1003)}
    assert bl.next_guests(baseline, synced, scope) == {
        "qemu/100": baseline.guests["qemu/100"],
        **synced,
    }
    assert bl.next_guests(baseline, synced, None) == synced  # a full run


# -- the change-log reads -------------------------------------------------------------------


class ChangeLog:
    """A NetBox gateway's change-log reads over a list of entries."""

    def __init__(self, entries, newest=(700, "2026-12-03T07:00:00+00:00"), unreadable=False):
        self.entries, self.newest, self.unreadable = entries, newest, unreadable
        self.reads: list[dict] = []

    async def newest_change(self):
        if self.unreadable:
            raise ChangeLogUnreadable("the NetBox token may not read the change log")
        return self.newest

    async def changes(self, **filters):
        if self.unreadable:
            raise ChangeLogUnreadable("the NetBox token may not read the change log")
        self.reads.append(filters)
        found = [
            e
            for e in self.entries
            if e["id"] >= filters.get("id__gte", 0)
            and e["id"] <= filters.get("id__lte", float("inf"))
            and e["user"] != filters.get("user_id__n")
        ]
        return found

    async def object_type_id(self, label):
        return INTERFACE_TYPE

    async def interface_vms(self, ids):
        return {5: 1002}


def history(log, baseline=None, interval=3600.0):
    store = MemoryBaselines()
    if baseline is not None:
        asyncio.run(store.save("k", baseline))
    return asyncio.run(read_history(log, store, "k", interval))


def entry(id, user, object_type=bl.VM, object_id=1000, **data):
    return {
        "id": id,
        "time": "2026-12-03T06:10:00.000000+00:00" if id == 640 else f"2026-12-03T06:{id % 60:02}",
        "user": user,
        "action": "update",
        "changed_object_type": object_type,
        "changed_object_id": object_id,
        "prechange_data": data or None,
        "postchange_data": data or None,
    }


def test_history_reads_others_since_the_baseline_began_and_anyone_since_it_ended():
    log = ChangeLog(
        [
            entry(520, 9, object_id=1000),  # an operator, while the baseline's run wrote
            entry(600, 2, object_id=1001),  # the baseline's run itself: not drift
            entry(640, 2, "netbox_proxbox.proxboxclustersyncstate", 1),  # it ended here
            entry(650, 2, object_id=1002),  # the sync's user after the run: drift
        ]
    )
    found = history(log, a_baseline())
    assert found.reason is None
    assert set(found.drift.vm_ids) == {1000, 1002}
    # The newest entry since the baseline is where this run starts: one read for both.
    assert found.started == (650, entry(650, 2)["time"])
    later, others = log.reads
    assert later == {"id__gte": 640}
    started = "2026-12-03T06:00:00.000000+00:00"
    assert others["user_id__n"] == 2 and others["id__lte"] == 640
    assert others["time_after"] == (dt.datetime.fromisoformat(started) - OVERLAP).isoformat()


def test_a_full_run_still_knows_where_it_starts_in_the_change_log():
    # The entry that ended the baseline's run is gone: the newest entry is read apart.
    found = history(ChangeLog([entry(650, 9)]), a_baseline())
    assert found.reason == "the change log does not reach the baseline"
    assert found.started == (700, "2026-12-03T07:00:00+00:00")
    assert history(ChangeLog([]), None).started == (700, "2026-12-03T07:00:00+00:00")


def test_an_address_change_is_placed_on_its_vm():
    log = ChangeLog(
        [
            entry(640, 2, "netbox_proxbox.proxboxclustersyncstate", 1),
            entry(
                660, 9, bl.IP_ADDRESS, 4, assigned_object_type=INTERFACE_TYPE, assigned_object_id=5
            ),
        ]
    )
    assert set(history(log, a_baseline()).drift.vm_ids) == {1002}


@pytest.mark.parametrize(
    ("log", "baseline", "interval", "reason"),
    [
        (ChangeLog([]), None, 3600.0, "no baseline of an earlier successful run"),
        (
            ChangeLog([], unreadable=True),
            a_baseline(),
            3600.0,
            "the NetBox token may not read the change log",
        ),
        (ChangeLog([]), a_baseline(), 0.0, "incremental runs are off (interval 0)"),
        (ChangeLog([]), a_baseline(full_at=time.time() - 7200), 3600.0, "periodic full run"),
        # the entry that ended the baseline's run is gone: pruned, or NetBox restored
        (
            ChangeLog([entry(650, 9)]),
            a_baseline(),
            3600.0,
            "the change log does not reach the baseline",
        ),
        # an entry of that id, but not that one: another NetBox, or one restored and
        # written to since
        (
            ChangeLog([{**entry(640, 2), "time": "2026-12-03T06:59:00+00:00"}]),
            a_baseline(),
            3600.0,
            "the change log does not reach the baseline",
        ),
        (
            ChangeLog([], newest=None),
            a_baseline(),
            3600.0,
            "the change log does not reach the baseline",
        ),
    ],
)
def test_when_a_run_is_a_full_one(log, baseline, interval, reason):
    assert history(log, baseline, interval).reason == reason


# -- the run's decision ---------------------------------------------------------------------


class Gateway:
    """What `Incremental` touches of a NetBox gateway outside the change log."""

    class client:  # stands in for the NetBoxClient attribute
        base_url = "http://netbox.test/api"

    scope = None


ENDPOINT = Endpoint(3, "pve", "h", 8006, True, True, "cluster", None, None, None, None)


def decided(policy=None, context="ctx", cluster_id=7, guests=None, devices=None):
    endpoint = ENDPOINT
    if policy is not None:
        endpoint = dataclasses.replace(endpoint, policy=policy)
    gateway = Gateway()
    run = Incremental(MemoryBaselines(), gateway, endpoint)
    run.history = History(a_baseline(), (700, "t"))
    guests = guests or [a_guest(100), a_guest(101, memory_mb=1), a_guest(103)]
    run.check(context, cluster_id)
    synced = run.decide("nodes", devices or {"pve1": 3}, guests, set())
    return run, gateway, synced


def test_an_incremental_run_syncs_and_reads_the_dirty_guests_only():
    run, gateway, synced = decided()
    assert [g.vmid for g in synced] == [101, 103]
    assert gateway.scope.vm_ids == {1001, 1002}  # changed, gone
    assert gateway.scope.source_keys == {"cluster-7/qemu/103"}  # the new one
    assert run.clean_vms() == {100: 1000}
    assert run.summary() == {
        "mode": "incremental",
        "guests_synced": 2,
        "guests_unchanged": 1,
        "guests_gone": 1,
    }


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"policy": SyncPolicy(adopt_existing=True)}, "adoption is on (adopt_existing)"),
        ({"context": "other"}, "the endpoint, its policy, placement or the release changed"),
        ({"cluster_id": 8}, "the endpoint's cluster changed"),
        ({"devices": {"pve1": 4}}, "the nodes' devices changed"),
    ],
)
def test_what_the_baseline_cannot_vouch_for_is_a_full_run(changes, reason):
    run, gateway, synced = decided(**changes)
    assert len(synced) == 3 and gateway.scope is None
    assert run.summary() == {"mode": "full", "reason": reason}


@pytest.mark.parametrize(
    ("entry", "nodes"),
    [
        (change(bl.DEVICE, 3), True),  # a node's device (the baseline's pve1)
        (change(bl.DEVICE, 99), False),  # someone else's
        (change(bl.DEVICE_INTERFACE, 12, after={"device": 3}), True),
        (change(bl.DEVICE_INTERFACE, 12, "delete", before={"device": 99}), False),
        # an address on a device interface: the node stages read them again
        (
            change(bl.IP_ADDRESS, 4, after={"assigned_object_type": 3, "assigned_object_id": 7}),
            True,
        ),
        (
            change(
                bl.IP_ADDRESS,
                4,
                after={"assigned_object_type": INTERFACE_TYPE, "assigned_object_id": 5},
            ),
            False,
        ),
    ],
)
def test_which_changes_send_the_run_through_the_node_stages(entry, nodes):
    drift = bl.drift([entry], RECORD_TYPES, {5: 1002}, a_baseline(), INTERFACE_TYPE)
    assert drift.nodes is nodes


def test_snapshots_are_known_while_the_config_digest_stays_the_baselines():
    run, _gateway, _synced = decided()
    # 100 as the baseline saw it, 101's config file changed, 103 is new, 102 gone.
    configs = {100: "cfg-100", 101: "cfg-101 after a snapshot", 103: "cfg-103"}
    assert run.snapshots_known(configs) == {100: "snaps-100"}
    # Someone changed inventory records in NetBox: every guest's snapshots are compared.
    run.history = History(a_baseline(), (700, "t"), bl.Drift(records=True))
    run.known_snapshots = {}
    assert run.snapshots_known(configs) == {}
    run.history = History(a_baseline(), (700, "t"), reason="periodic full run")
    assert run.snapshots_known(configs) == {}


def snapshot(vmid: int, name: str, description: str = "") -> records_domain.Snapshot:
    return records_domain.Snapshot(vmid, name, "", "2026-12-01T10:00:00Z", False, description)


def test_known_snapshots_left_unread_digest_the_records_as_read_ones_do():
    """The records' digest of a run that read every snapshot list equals that of a run
    that left the known ones unread, and each run leaves the next one what it knows."""
    links = records_stage.Links({"pve1": 3}, {100: 1000, 101: 1001})
    configs = {100: "cfg-100", 101: "cfg-101"}
    both = records_domain.Records(
        snapshots=[snapshot(100, "a"), snapshot(101, "b")], snapshot_vmids={100, 101}
    )
    full = Incremental(MemoryBaselines(), Gateway(), ENDPOINT)
    full.history = History(None, (700, "t"), reason="no baseline of an earlier successful run")
    assert full.snapshots_known(configs) == {}
    read_all = records_digest(both, links, full.snapshot_digests(both))
    saved = full.snapshots
    assert set(saved) == {100, 101} and saved[100][0] == "cfg-100"

    later = Incremental(MemoryBaselines(), Gateway(), ENDPOINT)
    later.history = History(a_baseline(snapshots=saved), (800, "t"))
    assert later.snapshots_known(configs) == {100: saved[100][1], 101: saved[101][1]}
    nothing_read = records_domain.Records()
    assert records_digest(nothing_read, links, later.snapshot_digests(nothing_read)) == read_all
    assert later.snapshots == saved

    # A snapshot described anew changes its guest's config digest: read, and it shows.
    described = records_domain.Records(
        snapshots=[snapshot(101, "b", "before upgrade")], snapshot_vmids={101}
    )
    again = Incremental(MemoryBaselines(), Gateway(), ENDPOINT)
    again.history = History(a_baseline(snapshots=saved), (800, "t"))
    assert again.snapshots_known({**configs, 101: "cfg-101 described"}) == {100: saved[100][1]}
    assert records_digest(described, links, again.snapshot_digests(described)) != read_all
    assert again.snapshots[101] == ("cfg-101 described", bl.digest(described.snapshots))


def test_unchanged_nodes_and_prerequisites_are_not_read_again():
    run, _gateway, _synced = decided()
    assert run.unchanged_devices("nodes") == {"pve1": 3}
    assert run.unchanged_devices("other nodes") is None
    assert run.prerequisites() == Prerequisites(1, 2, 3)
    run.history = History(a_baseline(), (700, "t"), bl.Drift(nodes=True))
    assert run.unchanged_devices("nodes") is None
    run.history = History(a_baseline(), (700, "t"), reason="periodic full run")
    assert run.prerequisites() is None and run.unchanged_devices("nodes") is None
