"""Stage `records`: storages, backups, backup jobs, snapshots, replication and HA → the
plugin's typed inventory records of the cluster.

One pure planner for all eight types: desired records (keyed by their natural key)
against the cluster's current records → creates, updates of the differing fields, and
deletes of records Proxmox no longer lists, except where the source could not be read
this run (those are kept as they are). Storages and HA groups go first: backups and HA
resources refer to them by id; HA rules come after the HA resources they list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxbox_backend.background import abandon
from proxbox_backend.domain import records as rec
from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.plan import Plan, diff, reconcile
from proxbox_backend.gateways.netbox import PLUGIN, NetBoxGateway
from proxbox_backend.pipeline import EVERY, Gate, Settle, Stage, nothing_to_settle
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun

MANAGED = {tags.PROXBOX.slug}
INVENTORY = f"{PLUGIN}/inventory"


@dataclass(frozen=True)
class RecordType:
    model: str  # the plugin's model name
    path: str  # REST list path
    key: tuple[str, ...]  # natural key within the cluster, in NetBox's field names
    fields: tuple[str, ...]  # everything else the sync writes and compares

    @property
    def object_type(self) -> str:
        return f"netbox_proxbox.{self.model}"

    @property
    def read_fields(self) -> str:
        return ",".join(("id", *self.key, *self.fields, "tags"))


STORAGES = RecordType(
    "proxmoxstorage",
    f"{INVENTORY}/storages/",
    ("name", "node"),
    ("device", "storage_type", "content", "shared", "enabled", "capacity", "used"),
)
BACKUPS = RecordType(
    "proxmoxbackup",
    f"{INVENTORY}/backups/",
    ("storage", "volume"),
    ("vmid", "virtual_machine", "backup_time", "size", "format", "verification", "notes"),
)
BACKUP_JOBS = RecordType(
    "proxmoxbackupjob",
    f"{INVENTORY}/backup-jobs/",
    ("job_id",),
    (
        "enabled",
        "schedule",
        "selection",
        "select_all",
        "vmids",
        "exclude",
        "pool",
        "pool_vmids",
        "storage",
        "node",
        "mode",
        "retention",
        "comment",
    ),
)
SNAPSHOTS = RecordType(
    "proxmoxsnapshot",
    f"{INVENTORY}/snapshots/",
    ("virtual_machine", "name"),
    ("parent", "snapshot_time", "vmstate", "description"),
)
REPLICATION = RecordType(
    "proxmoxreplicationjob",
    f"{INVENTORY}/replication-jobs/",
    ("job_id",),
    (
        "vmid",
        "virtual_machine",
        "target",
        "target_device",
        "schedule",
        "enabled",
        "last_sync",
        "state",
        "fail_count",
        "error",
    ),
)
HA_GROUPS = RecordType(
    "proxmoxhagroup",
    f"{INVENTORY}/ha-groups/",
    ("name",),
    ("nodes", "restricted", "nofailback", "comment"),
)
HA_RESOURCES = RecordType(
    "proxmoxharesource",
    f"{INVENTORY}/ha-resources/",
    ("sid",),
    ("vmid", "virtual_machine", "state", "group", "max_restart", "max_relocate", "comment"),
)
HA_RULES = RecordType(
    "proxmoxharule",
    f"{INVENTORY}/ha-rules/",
    ("name",),
    ("rule_type", "affinity", "nodes", "strict", "enabled", "errors", "comment", "resources"),
)
TYPES = (
    STORAGES,
    BACKUPS,
    BACKUP_JOBS,
    SNAPSHOTS,
    REPLICATION,
    HA_GROUPS,
    HA_RESOURCES,
    HA_RULES,
)


def normalized(value: Any) -> Any:
    """A current field as the planner compares it: nested objects by id, choices by value,
    a many-to-many relation as its sorted ids."""
    if isinstance(value, list):
        return sorted(normalized(v) for v in value)
    if isinstance(value, dict):
        if "id" in value:
            return value["id"]
        if "value" in value:
            return value["value"]
    if isinstance(value, str) and value.endswith("+00:00"):
        return value[: -len("+00:00")] + "Z"
    return value


def current_key(kind: RecordType, obj: dict) -> tuple:
    return tuple(normalized(obj.get(f)) for f in kind.key)


# key → every field of the record (key fields included)
Desired = dict[tuple, dict]


def plan(
    kind: RecordType,
    cluster_id: int,
    desired: Desired,
    current: list[dict],
    was_read: Callable[[dict], bool],
) -> Plan:
    """`was_read(current record)` says whether its source answered this run: only then
    may its absence from `desired` delete it."""

    def changes(fields: dict, found: dict) -> dict:
        now = {f: normalized(found.get(f)) for f in kind.fields}
        return tags.with_sync_tags(diff({f: fields[f] for f in kind.fields}, now), found, MANAGED)

    return reconcile(
        Plan(kind.object_type),
        desired,
        {current_key(kind, obj): obj for obj in current},
        label=lambda key: f"{kind.model} {'/'.join(str(k) for k in key)}",
        payload=lambda _key, fields: tags.with_sync_tags(
            {"cluster": cluster_id, **fields}, None, MANAGED
        ),
        changes=changes,
        gone=lambda _key, obj: was_read(obj),
    )


@dataclass(frozen=True)
class Links:
    """Native objects the records point at: node name → device, VMID → virtual machine."""

    devices: dict[str, int]
    vms: dict[int, int]

    def vm(self, vmid: int | None) -> int | None:
        return self.vms.get(vmid) if vmid is not None else None


def desired_storages(records: rec.Records, links: Links) -> Desired:
    return {
        (s.name, s.node): {
            "name": s.name,
            "node": s.node,
            "device": links.devices.get(s.node) if s.node else None,
            "storage_type": s.type,
            "content": s.content,
            "shared": s.shared,
            "enabled": s.enabled,
            "capacity": s.capacity,
            "used": s.used,
        }
        for s in records.storages
    }


def desired_backups(records: rec.Records, links: Links, storage_ids: dict) -> Desired:
    result = {}
    for b in records.backups:
        storage_id = storage_ids.get((b.storage, b.node))
        if storage_id is None:
            continue  # its storage could not be written
        result[(storage_id, b.volume)] = {
            "storage": storage_id,
            "volume": b.volume,
            "vmid": b.vmid,
            "virtual_machine": links.vm(b.vmid),
            "backup_time": b.time,
            "size": b.size,
            "format": b.format,
            "verification": b.verification,
            "notes": b.notes,
        }
    return result


def desired_backup_jobs(records: rec.Records) -> Desired:
    return {
        (j.job_id,): {
            "job_id": j.job_id,
            "enabled": j.enabled,
            "schedule": j.schedule,
            "selection": j.selection,
            "select_all": j.select_all,
            "vmids": list(j.vmids),
            "exclude": list(j.exclude),
            "pool": j.pool,
            "pool_vmids": list(j.pool_vmids),
            "storage": j.storage,
            "node": j.node,
            "mode": j.mode,
            "retention": j.retention,
            "comment": j.comment,
        }
        for j in records.backup_jobs
    }


def desired_snapshots(records: rec.Records, links: Links) -> Desired:
    result = {}
    for s in records.snapshots:
        vm_id = links.vm(s.vmid)
        if vm_id is None:
            continue  # a snapshot belongs to a VM: none, no record
        result[(vm_id, s.name)] = {
            "virtual_machine": vm_id,
            "name": s.name,
            "parent": s.parent,
            "snapshot_time": s.time,
            "vmstate": s.vmstate,
            "description": s.description,
        }
    return result


def desired_replication(records: rec.Records, links: Links) -> Desired:
    return {
        (r.job_id,): {
            "job_id": r.job_id,
            "vmid": r.vmid,
            "virtual_machine": links.vm(r.vmid),
            "target": r.target,
            "target_device": links.devices.get(r.target),
            "schedule": r.schedule,
            "enabled": r.enabled,
            "last_sync": r.last_sync,
            "state": r.state,
            "fail_count": r.fail_count,
            "error": r.error,
        }
        for r in records.replication
    }


def desired_ha_groups(records: rec.Records) -> Desired:
    return {
        (g.name,): {
            "name": g.name,
            "nodes": g.nodes,
            "restricted": g.restricted,
            "nofailback": g.nofailback,
            "comment": g.comment,
        }
        for g in records.ha_groups
    }


def desired_ha_resources(records: rec.Records, links: Links, group_ids: dict) -> Desired:
    return {
        (r.sid,): {
            "sid": r.sid,
            "vmid": r.vmid,
            "virtual_machine": links.vm(r.vmid),
            "state": r.state,
            "group": group_ids.get((r.group,)) if r.group else None,
            "max_restart": r.max_restart,
            "max_relocate": r.max_relocate,
            "comment": r.comment,
        }
        for r in records.ha_resources
    }


def desired_ha_rules(records: rec.Records, resource_ids: dict) -> Desired:
    """A rule's members are the HA resource records of the sids it lists; one without a
    record (its list did not answer this run) is left out until it has one."""
    return {
        (r.name,): {
            "name": r.name,
            "rule_type": r.type,
            "affinity": r.affinity,
            "nodes": r.nodes,
            "strict": r.strict,
            "enabled": r.enabled,
            "errors": r.errors,
            "comment": r.comment,
            "resources": sorted(
                resource_ids[(sid,)] for sid in r.resources if (sid,) in resource_ids
            ),
        }
        for r in records.ha_rules
    }


def _listed(records: rec.Records, name: str) -> Callable[[dict], bool]:
    answered = name in records.lists
    return lambda _obj: answered


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    records: rec.Records,
    links: Links,
    tally: Tally,
    *,
    first_sync: bool = False,
    settle: Settle = nothing_to_settle,
) -> None:
    """Plan and write every type in dependency order. A cluster created in this run has
    no records yet, so nothing is read for it.

    Every type's current records are read at once, up front; a type planned after a
    deletion in this stage is read again, since NetBox may have cascaded it (a storage's
    backups, an HA group's resources)."""

    async def read(kind: RecordType) -> list[dict]:
        if first_sync:
            return []
        return await netbox.client.list(
            kind.path, {"cluster_id": cluster_id, "fields": kind.read_fields}
        )

    def deletions() -> int:
        return sum(tally.count(kind.object_type, "deleted") for kind in TYPES)

    early = {kind.path: asyncio.ensure_future(read(kind)) for kind in TYPES}
    untouched = deletions()

    async def current(kind: RecordType) -> list[dict]:
        answer = early.pop(kind.path)
        if deletions() == untouched:
            return await answer
        await abandon(answer)
        return await read(kind)

    async def run(kind: RecordType, desired: Desired, was_read) -> dict:
        shaped = plan(kind, cluster_id, desired, await current(kind), was_read)
        await settle(shaped)
        return await apply_plan(netbox.client, kind.path, shaped, tally)

    try:
        await _apply_in_order(run, records, links)
    finally:
        await abandon(*early.values())


async def _apply_in_order(run, records: rec.Records, links: Links) -> None:
    """Each type after the ones its records refer to."""
    storage_ids = await run(
        STORAGES,
        desired_storages(records, links),
        # A shared storage is read when any node answered; a local one with its node.
        lambda obj: (
            (obj.get("node") or "") in records.storage_nodes
            or (not obj.get("node") and bool(records.storage_nodes))
        ),
    )
    storage_sources = {sid: key for key, sid in storage_ids.items()}
    await run(
        BACKUPS,
        desired_backups(records, links, storage_ids),
        lambda obj: storage_sources.get(normalized(obj.get("storage"))) in records.backup_sources,
    )
    await run(BACKUP_JOBS, desired_backup_jobs(records), _listed(records, "backup-jobs"))
    listed_vms = {links.vm(vmid) for vmid in records.snapshot_vmids} - {None}
    await run(
        SNAPSHOTS,
        desired_snapshots(records, links),
        lambda obj: normalized(obj.get("virtual_machine")) in listed_vms,
    )
    await run(REPLICATION, desired_replication(records, links), _listed(records, "replication"))
    group_ids = await run(HA_GROUPS, desired_ha_groups(records), _listed(records, rec.HA_GROUPS))
    resource_ids = await run(
        HA_RESOURCES,
        desired_ha_resources(records, links, group_ids),
        _listed(records, "ha-resources"),
    )
    await run(HA_RULES, desired_ha_rules(records, resource_ids), _listed(records, rec.HA_RULES))


# -- the stage -----------------------------------------------------------------------------


async def read_records(run: StageRun, gate: Gate) -> rec.Records:
    """The cluster's records from Proxmox (a snapshot list per guest), read while the
    stages before this one run. A guest that does not end up owned has its snapshots read
    but linked to no VM, so they make no record; one whose snapshots the baseline knows
    has them left unread, and its records as they are."""
    from proxbox_backend.gateways import proxmox_records

    return await proxmox_records.read(
        run.proxmox.client,
        run.nodes,
        run.guests,
        gate.take("inventory").identity.capabilities,
        run.known_snapshots,
    )


async def sync_records(run: StageRun, gate: Gate) -> None:
    """Storages, backups, jobs, snapshots, replication and HA of the cluster."""
    from proxbox_backend.incremental import records_digest

    records = gate.current
    run.report.read_failures.extend(records.warnings)
    vms = {g.vmid: vm_id for vm_id, g in gate.take("guests.owned").owned}
    if run.incremental is not None:
        vms = {**run.incremental.clean_vms(), **vms}
    links = Links(gate.take("nodes.devices"), vms)
    if run.incremental is not None:
        # Only a run that keeps a baseline needs the records' digest.
        run.records_digest = records_digest(
            records, links, run.incremental.snapshot_digests(records)
        )
        if run.incremental.records_unchanged(run.records_digest):
            gate.skipped()
            return
    gate.started(len(TYPES))
    await apply(
        run.netbox,
        run.cluster_id,
        records,
        links,
        run.tally,
        first_sync=bool(run.report.cluster.get("created")),
        settle=gate.settle,
    )
    gate.finished(len(TYPES))


STAGE = Stage(
    "records",
    sync_records,
    read=read_records,
    starts_with=("inventory",),
    takes=("guests.owned", "nodes.devices"),
    reads=frozenset(kind.object_type for kind in TYPES),
    writes={kind.object_type: EVERY for kind in TYPES},
    policy=STORAGES.object_type,
    events="records",
)
