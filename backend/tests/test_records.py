"""Storage and data-protection records: Proxmox parsing and the records planner (pure)."""

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.domain import records as parse
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.policy import ACTIVE, SyncPolicy
from proxbox_backend.stages import records

MANAGED = [{"id": 1, "name": "proxbox", "slug": "proxbox"}]
CLUSTER = 7
LINKS = records.Links(devices={"pve1": 11, "pve2": 12}, vms={101: 501, 102: 502})


# -- parsing ----------------------------------------------------------------------------------


def test_shared_storage_is_the_clusters_and_local_storage_the_nodes():
    entries = [
        {
            "storage": "local",
            "type": "dir",
            "content": "vztmpl,iso,backup",
            "shared": 0,
            "active": 1,
            "enabled": 1,
            "total": 100,
            "used": 40,
        },
        {"storage": "nfs", "type": "nfs", "content": "images", "shared": 1, "active": 0},
    ]
    local, nfs = parse.storages("pve1", entries)
    assert (local.node, local.content, local.capacity, local.used) == (
        "pve1",
        "backup,iso,vztmpl",
        100,
        40,
    )
    assert (nfs.node, nfs.shared, nfs.enabled, nfs.capacity) == ("", True, False, None)
    assert parse.holds_backups(local) and not parse.holds_backups(nfs)


def test_backup_volumes_with_verification_and_time_as_netbox_renders_it():
    storage = parse.storages("pve1", [{"storage": "local", "content": "backup"}])[0]
    entries = [
        {
            "volid": "local:backup/a.vma.zst",
            "content": "backup",
            "ctime": 1735696800,
            "size": 5,
            "vmid": 101,
            "format": "vma.zst",
            "verification": {"state": "ok"},
        },
        {
            "volid": "local:backup/b.tar.zst",
            "ctime": 0,
            "vmid": "102",
            "verification": {"state": "weird"},
        },
        {"volid": "local:iso/x.iso", "content": "iso"},
    ]
    a, b = parse.backups(storage, entries)
    assert (a.time, a.verification, a.vmid, a.node) == ("2025-01-01T02:00:00Z", "ok", 101, "pve1")
    assert (b.time, b.verification, b.vmid) == (None, "none", 102)


@pytest.mark.parametrize(
    ("entry", "selection"),
    [
        ({"all": 1}, "all"),
        ({"all": 1, "exclude": "101,102"}, "all except 101,102"),
        ({"pool": "prod"}, "pool prod"),
        ({"vmid": "101,103"}, "101,103"),
    ],
)
def test_backup_job_selection(entry, selection):
    (job,) = parse.backup_jobs([{"id": "backup-1", "schedule": "02:00", **entry}])
    assert job.selection == selection


@pytest.mark.parametrize(
    ("entry", "structure"),
    [
        ({"all": 1}, (True, (), (), "", ())),
        ({"all": 1, "exclude": "102, 0101,x"}, (True, (), (101, 102), "", ())),
        # vzdump: an exclude list without a pool means all guests but those.
        ({"exclude": "102"}, (True, (), (102,), "", ())),
        ({"vmid": "103,101 101"}, (False, (101, 103), (), "", ())),
        ({"pool": "prod"}, (False, (), (), "prod", (101, 105))),
        ({"pool": "prod", "exclude": "101"}, (False, (), (101,), "prod", (101, 105))),
        ({"pool": "empty"}, (False, (), (), "empty", ())),
    ],
)
def test_backup_job_selection_structure(entry, structure):
    pools = {"prod": {105, 101}, "test": {200}}
    (job,) = parse.backup_jobs([{"id": "backup-1", "schedule": "02:00", **entry}], pools)
    assert (job.select_all, job.vmids, job.exclude, job.pool, job.pool_vmids) == structure


def test_backup_job_retention_schedule_and_legacy_start_time():
    new, old = parse.backup_jobs(
        [
            {
                "id": "j1",
                "schedule": "sat 02:00",
                "prune-backups": "keep-weekly=4,keep-daily=7",
                "enabled": 0,
                "storage": "local",
                "mode": "snapshot",
            },
            {"id": "j2", "starttime": "03:30", "dow": "sun", "maxfiles": 2},
        ]
    )
    assert (new.retention, new.enabled, new.schedule) == (
        "keep-daily=7,keep-weekly=4",
        False,
        "sat 02:00",
    )
    assert (old.schedule, old.retention, old.enabled) == ("sun 03:30", "2", True)


def test_snapshots_skip_the_current_pseudo_entry():
    entries = [
        {"name": "before-upgrade", "snaptime": 1735696800, "vmstate": 1, "description": "x\n"},
        {"name": "later", "parent": "before-upgrade"},
        {"name": "current", "parent": "later", "running": 1},
    ]
    first, later = parse.snapshots(101, entries)
    assert (first.vmstate, first.time, first.description) == (True, "2025-01-01T02:00:00Z", "x")
    assert (later.parent, later.vmstate, later.time) == ("before-upgrade", False, None)


@pytest.mark.parametrize(
    ("job", "status", "state"),
    [
        ({}, {"last_sync": 1735696800}, "ok"),
        ({}, {"last_sync": 0}, "unknown"),
        ({}, {"fail_count": 2, "error": "no space"}, "error"),
        ({"disable": 1}, {"fail_count": 2}, "disabled"),
        ({}, {"pid": 4242, "last_sync": 1735696800}, "syncing"),
    ],
)
def test_replication_state_from_the_source_nodes_status(job, status, state):
    jobs = [{"id": "101-0", "guest": 101, "target": "pve2", **job}]
    (result,) = parse.replication(jobs, [{"id": "101-0", **status}])
    assert result.state == state
    assert (result.vmid, result.target, result.schedule) == (101, "pve2", "*/15")


def test_ha_groups_and_resources():
    (group,) = parse.ha_groups([{"group": "prefer-1", "nodes": "pve1:2, pve2", "restricted": 1}])
    assert (group.nodes, group.restricted, group.nofailback) == ("pve1:2,pve2", True, False)
    vm, ct, bare = parse.ha_resources(
        [
            {"sid": "vm:101", "state": "enabled", "group": "prefer-1", "max_restart": 2},
            {"sid": "ct:102", "state": "stopped"},
            {"sid": "103"},
        ]
    )
    assert (vm.vmid, vm.state, vm.group, vm.max_restart) == (101, "started", "prefer-1", 2)
    assert (ct.vmid, ct.state, ct.group) == (102, "stopped", None)
    assert (bare.vmid, bare.state) == (103, "started")


def test_pve9_rules_of_both_types_are_recorded_with_their_members():
    """Every rule PVE 9 lists is a rule record, applied or not; a node-affinity rule is
    not also an HA group, and a resource keeps the `group` it names (if any)."""
    rules = [
        {"rule": "prefer-1", "type": "node-affinity", "nodes": "pve2, pve1:2", "order": 1,
         "resources": "vm:101,ct:102", "strict": 1, "comment": "web", "affinity": "positive",
         "digest": "d" * 40},
        {"rule": "off", "type": "node-affinity", "nodes": "pve2", "resources": "vm:105",
         "disable": 1},
        {"rule": "apart", "type": "resource-affinity", "affinity": "negative",
         "resources": "vm:103, vm:101"},
        {"rule": "broken", "type": "resource-affinity", "affinity": "positive",
         "resources": "vm:106",
         "errors": {"resources": ["rule is ineffective as there are less than two resources"]}},
        {"rule": "future", "type": "location", "resources": "vm:101"},
    ]  # fmt: skip
    prefer, off, apart, broken = parse.ha_rules(rules)
    assert prefer == parse.HARule(
        name="prefer-1",
        type="node-affinity",
        affinity="positive",
        nodes="pve2,pve1:2",
        strict=True,
        enabled=True,
        errors="",
        comment="web",
        resources=("ct:102", "vm:101"),
    )
    assert (off.enabled, off.strict, off.resources) == (False, False, ("vm:105",))
    assert (apart.type, apart.affinity, apart.nodes, apart.resources) == (
        "resource-affinity", "negative", "", ("vm:101", "vm:103")
    )  # fmt: skip
    assert broken.errors == ("resources: rule is ineffective as there are less than two resources")
    vm, ct = parse.ha_resources([{"sid": "vm:101", "group": "legacy"}, {"sid": "ct:102"}])
    assert (vm.group, ct.group) == ("legacy", None)


class _HAProxmox:
    """Answers the cluster-wide lists of `proxmox_records.read` as a PVE 9 cluster does;
    `refused`: the HA list paths that answer 403."""

    def __init__(self, groups, refused=()):
        self.groups, self.refused = groups, refused

    async def get(self, path, **_params):
        from proxbox_backend.clients.proxmox import ProxmoxError

        if path in self.refused:
            raise ProxmoxError(403, "GET", path, "Permission check failed")
        if path == "/cluster/ha/groups":
            if isinstance(self.groups, Exception):
                raise self.groups
            return self.groups
        if path == "/cluster/ha/rules":
            return [{"rule": "web", "type": "node-affinity", "nodes": "pve2",
                     "resources": "vm:101"}]  # fmt: skip
        if path == "/cluster/ha/resources":
            return [{"sid": "vm:101"}, {"sid": "vm:102", "group": "db"}]
        return []


def _read_ha(groups, release="9.2.12", refused=()):
    from proxbox_backend.clients.proxmox import ProxmoxError
    from proxbox_backend.domain.capabilities import Capabilities
    from proxbox_backend.gateways import proxmox_records

    if groups == "migrated":
        groups = ProxmoxError(
            500, "GET", "/cluster/ha/groups",
            "cannot index groups: ha groups have been migrated to rules",
        )  # fmt: skip
    client = _HAProxmox(groups, refused)
    return asyncio.run(proxmox_records.read(client, [], [], Capabilities(release)))


def test_pve9_reads_rules_and_the_groups_not_yet_migrated():
    """Mid-upgrade: the groups not yet turned into rules stay groups, beside the rules."""
    found = _read_ha([{"group": "db", "nodes": "pve3"}])
    assert [g.name for g in found.ha_groups] == ["db"]
    assert [(r.name, r.resources) for r in found.ha_rules] == [("web", ("vm:101",))]
    assert [(r.vmid, r.group) for r in found.ha_resources] == [(101, None), (102, "db")]
    assert {parse.HA_GROUPS, parse.HA_RULES} <= found.lists and not found.warnings


def test_pve9_groups_answering_migrated_to_rules_is_no_warning():
    """Once every group is a rule, PVE 9 refuses to list groups: none left, none warned
    about, and the list counts as read (the groups recorded before are removed)."""
    found = _read_ha("migrated")
    assert found.ha_groups == [] and [r.name for r in found.ha_rules] == ["web"]
    assert parse.HA_GROUPS in found.lists and not found.warnings


def test_pve9_groups_unreadable_keeps_every_recorded_group():
    """Any other failure: warned, and the HA group list counts as not read (none removed);
    the rules are read all the same."""
    found = _read_ha([], refused={"/cluster/ha/groups"})
    assert parse.HA_GROUPS not in found.lists and parse.HA_RULES in found.lists
    assert found.warnings == [
        "ha-groups unreadable: Proxmox GET /cluster/ha/groups → 403 Permission check failed"
    ]


def test_pve9_rules_unreadable_warn_as_rules_not_as_groups():
    found = _read_ha([], refused={"/cluster/ha/rules"})
    assert parse.HA_RULES not in found.lists and parse.HA_GROUPS in found.lists
    assert found.warnings == [
        "ha-rules unreadable: Proxmox GET /cluster/ha/rules → 403 Permission check failed"
    ]


def test_up_to_pve8_no_rules_are_asked_for_and_none_is_removed():
    """PVE 8 has no `/cluster/ha/rules` (it would answer 501): not even asked."""
    found = _read_ha([{"group": "db", "nodes": "pve3"}], "8.4.5", refused={"/cluster/ha/rules"})
    assert [g.name for g in found.ha_groups] == ["db"] and found.ha_rules == []
    assert parse.HA_RULES not in found.lists and parse.HA_GROUPS in found.lists
    assert not found.warnings


# -- planning ---------------------------------------------------------------------------------


def storage_record(id_, name, node, **fields):
    base = {
        "id": id_,
        "name": name,
        "node": node,
        "device": {"id": LINKS.devices[node]} if node else None,
        "storage_type": "dir",
        "content": "backup",
        "shared": not node,
        "enabled": True,
        "capacity": 100,
        "used": 40,
        "tags": MANAGED,
    }
    return {**base, **fields}


def inventory(**parts) -> parse.Records:
    found = parse.Records(**parts)
    found.storage_nodes = {"pve1", "pve2"}
    return found


LOCAL = parse.Storage("local", "pve1", "dir", "backup", False, True, 100, 40)


def storage_plan(current, found=None):
    found = found or inventory(storages=[LOCAL])
    return records.plan(
        records.STORAGES,
        CLUSTER,
        records.desired_storages(found, LINKS),
        current,
        lambda obj: obj.get("node") in found.storage_nodes,
    )


def test_new_record_is_created_in_the_cluster_with_the_proxbox_tag_and_its_device():
    shaped = storage_plan([])
    (create,) = shaped.creates
    assert create.payload["cluster"] == CLUSTER
    assert create.payload["device"] == 11
    assert create.payload["tags"] == [{"slug": "proxbox"}]


def test_equal_record_is_unchanged_and_only_differing_fields_are_written():
    assert storage_plan([storage_record(3, "local", "pve1")]).unchanged == {("local", "pve1"): 3}
    shaped = storage_plan([storage_record(3, "local", "pve1", used=10, tags=[])])
    (update,) = shaped.updates
    assert update.changes == {"used": 40, "tags": [{"slug": "proxbox"}]}


def test_operator_tags_on_records_stay():
    mine = [*MANAGED, {"id": 9, "slug": "audited"}]
    assert storage_plan([storage_record(3, "local", "pve1", tags=mine)]).writes == 0


def test_record_gone_from_a_read_source_is_deleted_and_an_unread_one_kept():
    found = inventory(storages=[LOCAL])
    found.storage_nodes = {"pve1"}  # pve2 did not answer
    shaped = storage_plan(
        [
            storage_record(3, "local", "pve1"),
            storage_record(4, "old", "pve1"),
            storage_record(5, "local", "pve2"),
        ],
        found,
    )
    assert [d.id for d in shaped.deletes] == [4]
    assert shaped.unchanged == {("local", "pve1"): 3, ("local", "pve2"): 5}


def test_choices_nested_objects_and_datetimes_compare_normalized():
    backup = parse.Backup(
        "local", "pve1", "local:backup/a", 101, "2025-01-01T02:00:00Z", 5, "vma", "ok", ""
    )
    desired = records.desired_backups(inventory(backups=[backup]), LINKS, {("local", "pve1"): 3})
    current = [
        {
            "id": 8,
            "storage": {"id": 3, "name": "local"},
            "volume": "local:backup/a",
            "vmid": 101,
            "virtual_machine": {"id": 501},
            "backup_time": "2025-01-01T02:00:00+00:00",
            "size": 5,
            "format": "vma",
            "verification": {"value": "ok", "label": "Verified"},
            "notes": "",
            "tags": MANAGED,
        }
    ]
    shaped = records.plan(records.BACKUPS, CLUSTER, desired, current, lambda obj: True)
    assert shaped.unchanged == {(3, "local:backup/a"): 8}


def test_snapshots_need_their_vm_and_unknown_vms_are_left_out():
    found = inventory(
        snapshots=[
            parse.Snapshot(101, "s1", "", None, False, ""),
            parse.Snapshot(999, "s1", "", None, False, ""),
        ]
    )
    assert set(records.desired_snapshots(found, LINKS)) == {(501, "s1")}


def test_ha_resources_refer_to_their_group_by_id_and_replication_to_the_target_device():
    found = inventory(
        ha_resources=[parse.HAResource("vm:101", 101, "started", "g1", None, None, "")],
        replication=[parse.Replication("101-0", 101, "pve2", "*/15", True, None, "unknown", 0, "")],
    )
    (resource,) = records.desired_ha_resources(found, LINKS, {("g1",): 4}).values()
    assert (resource["group"], resource["virtual_machine"]) == (4, 501)
    (job,) = records.desired_replication(found, LINKS).values()
    assert (job["target_device"], job["virtual_machine"]) == (12, 501)


RULE = parse.HARule(
    "apart", "resource-affinity", "negative", "", False, True, "", "", ("vm:101", "vm:102")
)


def rule_record(**fields):
    base = {
        "id": 6,
        "name": "apart",
        "rule_type": {"value": "resource-affinity", "label": "Resource affinity"},
        "affinity": {"value": "negative", "label": "Negative"},
        "nodes": "",
        "strict": False,
        "enabled": True,
        "errors": "",
        "comment": "",
        "resources": [{"id": 32, "sid": "vm:102"}, {"id": 31, "sid": "vm:101"}],
        "tags": MANAGED,
    }
    return {**base, **fields}


def rule_plan(current, resource_ids):
    desired = records.desired_ha_rules(inventory(ha_rules=[RULE]), resource_ids)
    return records.plan(records.HA_RULES, CLUSTER, desired, current, lambda obj: True)


def test_ha_rules_list_their_members_by_id_compared_as_a_set():
    both = {("vm:101",): 31, ("vm:102",): 32}
    (create,) = rule_plan([], both).creates
    assert create.payload["resources"] == [31, 32]
    assert (create.payload["rule_type"], create.payload["affinity"]) == (
        "resource-affinity", "negative"
    )  # fmt: skip
    # NetBox lists the members in its own order: the same set is no change.
    assert rule_plan([rule_record()], both).unchanged == {("apart",): 6}
    # A member without a record (its list did not answer) is left out until it has one.
    (update,) = rule_plan([rule_record()], {("vm:101",): 31}).updates
    assert update.changes == {"resources": [31]}


def test_ha_rules_are_written_after_the_ha_resources_they_list():
    client = RecordsNetBox({})
    found = inventory(
        ha_resources=[parse.HAResource("vm:101", 101, "started", None, None, None, "")],
        ha_rules=[RULE],
    )
    found.lists |= {"ha-resources", parse.HA_RULES}
    asyncio.run(records.apply(SimpleNamespace(client=client), CLUSTER, found, LINKS, Tally()))
    (resources, rules) = [(path, payloads) for _op, path, payloads in client.writes]
    assert resources[0] == records.HA_RESOURCES.path and rules[0] == records.HA_RULES.path
    assert rules[1][0]["resources"] == [900]  # the resource created just before


def test_a_list_that_did_not_answer_deletes_nothing():
    current = [{"id": 2, "job_id": "backup-1", "tags": MANAGED}]
    silent = inventory()
    shaped = records.plan(
        records.BACKUP_JOBS, CLUSTER, {}, current, records._listed(silent, "backup-jobs")
    )
    assert shaped.deletes == [] and shaped.unchanged == {("backup-1",): 2}
    silent.lists.add("backup-jobs")
    shaped = records.plan(
        records.BACKUP_JOBS, CLUSTER, {}, current, records._listed(silent, "backup-jobs")
    )
    assert [d.id for d in shaped.deletes] == [2]


# -- the endpoint's records_mode --------------------------------------------------------------


class RecordsNetBox:
    """NetBox's current records per list path; records the bulk writes the stage sends."""

    def __init__(self, current: dict[str, list[dict]]):
        self.current = current
        self.writes: list[tuple[str, str, list]] = []
        self.reads: list[str] = []

    async def list(self, path, params=None):
        self.reads.append(path)
        return self.current.get(path, [])

    async def bulk_create(self, path, payloads):
        self.writes.append(("create", path, payloads))
        return BulkResult(succeeded={i: {"id": 900 + i} for i in range(len(payloads))})

    async def bulk_update(self, path, changes):
        self.writes.append(("update", path, changes))
        return BulkResult(succeeded={i: c for i, c in enumerate(changes)})

    async def bulk_delete(self, path, ids):
        self.writes.append(("delete", path, ids))
        return BulkResult(succeeded={i: {"id": id_} for i, id_ in enumerate(ids)})


def sync_records(mode: str | None) -> list[tuple[str, str, list]]:
    """One records stage: `local` changed (update), `old` gone (delete), `nfs` and a backup
    job new (creates), under the endpoint's records_mode."""
    client = RecordsNetBox(
        {
            records.STORAGES.path: [
                storage_record(3, "local", "pve1", used=10),
                storage_record(4, "old", "pve2"),
            ]
        }
    )
    found = inventory(
        storages=[LOCAL, parse.Storage("nfs", "", "nfs", "images", True, True, 5, 1)],
        backup_jobs=[
            parse.BackupJob("backup-1", True, "daily", "all", "local", "", "snapshot", "", "")
        ],
    )
    found.lists.add("backup-jobs")
    token = ACTIVE.set(SyncPolicy.from_api({"modes": {"records": mode}} if mode else None))
    try:
        asyncio.run(records.apply(SimpleNamespace(client=client), CLUSTER, found, LINKS, Tally()))
    finally:
        ACTIVE.reset(token)
    return client.writes


def test_records_mode_always_creates_updates_and_deletes():
    writes = sync_records("always")
    assert writes == sync_records(None)  # always is the default
    kinds = [(op, path) for op, path, _ in writes]
    assert kinds == [
        ("delete", records.STORAGES.path),
        ("update", records.STORAGES.path),
        ("create", records.STORAGES.path),
        ("create", records.BACKUP_JOBS.path),
    ]
    assert writes[0][2] == [4] and writes[1][2] == [{"id": 3, "used": 40}]


def test_records_mode_create_only_creates_and_neither_updates_nor_deletes():
    writes = sync_records("create_only")
    assert [(op, path) for op, path, _ in writes] == [
        ("create", records.STORAGES.path),
        ("create", records.BACKUP_JOBS.path),
    ]
    assert [p["name"] for p in writes[0][2]] == ["nfs"]


def test_records_mode_off_writes_no_record():
    assert sync_records("off") == []


def test_every_record_type_is_switched_by_records_mode():
    off = SyncPolicy.from_api({"modes": {"records": "off"}})
    assert {kind.object_type: off.mode(kind.object_type) for kind in records.TYPES} == {
        kind.object_type: "off" for kind in records.TYPES
    }


def test_every_type_is_read_once_up_front_and_again_after_a_deletion_in_the_stage():
    """NetBox may cascade a deletion (a storage's backups, an HA group's resources): the
    types planned after one are read again, never planned from the early answer."""

    def reads(current_storages) -> Counter:
        client = RecordsNetBox({records.STORAGES.path: current_storages})
        found = inventory(storages=[LOCAL])
        asyncio.run(records.apply(SimpleNamespace(client=client), CLUSTER, found, LINKS, Tally()))
        return Counter(client.reads)

    quiet = reads([storage_record(3, "local", "pve1", used=40)])
    assert quiet == Counter({kind.path: 1 for kind in records.TYPES})
    after_deletion = reads(
        [storage_record(3, "local", "pve1", used=40), storage_record(4, "old", "pve1")]
    )
    assert after_deletion == Counter(
        {kind.path: 1 if kind is records.STORAGES else 2 for kind in records.TYPES}
    )
