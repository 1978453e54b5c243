"""Storage and data-protection inventory as the planners see it (pure parsing).

Proxmox answers → records keyed as the plugin keys them (unique per cluster). Which
parts could be read is remembered: a record whose source could not be read this run is
kept, never deleted for want of an answer.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

# Proxmox's HA `sid` prefixes (`vm:100`, `ct:101`; a bare number means vm).
_HA_KINDS = ("vm", "ct")
NODE_AFFINITY = "node-affinity"
# The list saying where HA places resources: HA groups, or PVE 9's node-affinity rules.
HA_PLACEMENT = "ha-groups"
# `enabled` is the pre-7.x spelling of `started`.
_REQUESTED_STATES = {
    "started": "started",
    "enabled": "started",
    "stopped": "stopped",
    "disabled": "disabled",
    "ignored": "ignored",
}
_VERIFICATION = {"ok": "ok", "failed": "failed"}


@dataclass(frozen=True)
class Storage:
    name: str
    node: str  # "" for shared storage (one record for the cluster)
    type: str
    content: str
    shared: bool
    enabled: bool
    capacity: int | None
    used: int | None


@dataclass(frozen=True)
class Backup:
    storage: str
    node: str  # the Storage.node it lives on
    volume: str
    vmid: int | None
    time: str | None
    size: int | None
    format: str
    verification: str
    notes: str


@dataclass(frozen=True)
class BackupJob:
    job_id: str
    enabled: bool
    schedule: str
    selection: str
    storage: str
    node: str
    mode: str
    retention: str
    comment: str


@dataclass(frozen=True)
class Snapshot:
    vmid: int
    name: str
    parent: str
    time: str | None
    vmstate: bool
    description: str


@dataclass(frozen=True)
class Replication:
    job_id: str
    vmid: int
    target: str
    schedule: str
    enabled: bool
    last_sync: str | None
    state: str
    fail_count: int
    error: str


@dataclass(frozen=True)
class HAGroup:
    name: str
    nodes: str
    restricted: bool
    nofailback: bool
    comment: str


@dataclass(frozen=True)
class HAResource:
    sid: str
    vmid: int | None
    state: str
    group: str | None
    max_restart: int | None
    max_relocate: int | None
    comment: str


@dataclass
class Records:
    """What was read, and from where: a source missing from `read` could not answer."""

    storages: list[Storage] = field(default_factory=list)
    backups: list[Backup] = field(default_factory=list)
    backup_jobs: list[BackupJob] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    replication: list[Replication] = field(default_factory=list)
    ha_groups: list[HAGroup] = field(default_factory=list)
    ha_resources: list[HAResource] = field(default_factory=list)
    # Nodes whose storage list answered; (storage, node) pairs whose backups were listed;
    # VMIDs whose snapshots were listed; cluster-wide lists that answered
    # ("backup-jobs", "replication", HA_PLACEMENT, "ha-resources").
    storage_nodes: set[str] = field(default_factory=set)
    backup_sources: set[tuple[str, str]] = field(default_factory=set)
    snapshot_vmids: set[int] = field(default_factory=set)
    lists: set[str] = field(default_factory=set)
    # Lists that did not answer after the client's retries: each is a failed read.
    warnings: list[str] = field(default_factory=list)


def timestamp(epoch) -> str | None:
    """NetBox's own rendering of a datetime (UTC, seconds), so equal times compare equal."""
    try:
        value = int(float(epoch))
    except (TypeError, ValueError):
        return None
    if value <= 0:
        return None
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _flag(value, default: bool = False) -> bool:
    if value is None or value == "":
        return default
    return str(value).lower() in ("1", "yes", "on", "true")


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def storages(node: str, entries: list[dict]) -> list[Storage]:
    """`/nodes/{node}/storage`: what the node sees; a shared storage is the cluster's."""
    result = []
    for entry in entries:
        name = entry.get("storage")
        if not name:
            continue
        shared = _flag(entry.get("shared"))
        enabled = _flag(entry.get("enabled"), True) and _flag(entry.get("active"), True)
        result.append(
            Storage(
                name=str(name),
                node="" if shared else node,
                type=str(entry.get("type") or ""),
                content=",".join(
                    sorted(p for p in str(entry.get("content") or "").split(",") if p)
                ),
                shared=shared,
                enabled=enabled,
                capacity=_int(entry.get("total")),
                used=_int(entry.get("used")),
            )
        )
    return result


def holds_backups(storage: Storage) -> bool:
    return "backup" in storage.content.split(",") and storage.enabled


def backups(storage: Storage, entries: list[dict]) -> list[Backup]:
    """`/nodes/{node}/storage/{storage}/content?content=backup`."""
    result = []
    for entry in entries:
        volume = entry.get("volid")
        if not volume or entry.get("content", "backup") != "backup":
            continue
        verification = entry.get("verification")
        state = verification.get("state") if isinstance(verification, dict) else None
        result.append(
            Backup(
                storage=storage.name,
                node=storage.node,
                volume=str(volume),
                vmid=_int(entry.get("vmid")),
                time=timestamp(entry.get("ctime")),
                size=_int(entry.get("size")),
                format=str(entry.get("format") or ""),
                verification=_VERIFICATION.get(str(state), "none"),
                notes=str(entry.get("notes") or ""),
            )
        )
    return result


def _selection(entry: dict) -> str:
    if _flag(entry.get("all")):
        exclude = str(entry.get("exclude") or "").strip()
        return f"all except {exclude}" if exclude else "all"
    if entry.get("pool"):
        return f"pool {entry['pool']}"
    return str(entry.get("vmid") or "")


def _retention(value) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return ",".join(sorted(p for p in str(value or "").split(",") if p))


def backup_jobs(entries: list[dict]) -> list[BackupJob]:
    """`/cluster/backup`: the scheduled vzdump jobs."""
    result = []
    for entry in entries:
        if not entry.get("id"):
            continue
        schedule = entry.get("schedule")
        if not schedule and entry.get("starttime"):
            # Jobs from before PVE 7 name a time and weekdays instead of a calendar event.
            schedule = f"{entry.get('dow') or 'mon..sun'} {entry['starttime']}"
        result.append(
            BackupJob(
                job_id=str(entry["id"]),
                enabled=_flag(entry.get("enabled"), True),
                schedule=str(schedule or ""),
                selection=_selection(entry)[:500],
                storage=str(entry.get("storage") or ""),
                node=str(entry.get("node") or ""),
                mode=str(entry.get("mode") or ""),
                retention=_retention(entry.get("prune-backups") or entry.get("maxfiles") or ""),
                comment=str(entry.get("comment") or "")[:500],
            )
        )
    return result


def snapshots(vmid: int, entries: list[dict]) -> list[Snapshot]:
    """`/nodes/{node}/{qemu|lxc}/{vmid}/snapshot`, without the `current` pseudo entry."""
    return [
        Snapshot(
            vmid=vmid,
            name=str(entry["name"]),
            parent=str(entry.get("parent") or ""),
            time=timestamp(entry.get("snaptime")),
            vmstate=_flag(entry.get("vmstate")),
            description=str(entry.get("description") or "").strip()[:500],
        )
        for entry in entries
        if entry.get("name") and entry["name"] != "current"
    ]


def replication(jobs: list[dict], statuses: list[dict]) -> list[Replication]:
    """`/cluster/replication` (the jobs) with each source node's `/nodes/{node}/replication`
    (last sync, failures)."""
    status_of = {s.get("id"): s for s in statuses}
    result = []
    for job in jobs:
        job_id, vmid = job.get("id"), _int(job.get("guest"))
        if not job_id or vmid is None:
            continue
        status = status_of.get(job_id, {})
        enabled = not _flag(job.get("disable"))
        fail_count = _int(status.get("fail_count")) or 0
        error = str(status.get("error") or "")
        last_sync = timestamp(status.get("last_sync"))
        if not enabled:
            state = "disabled"
        elif fail_count or error:
            state = "error"
        elif status.get("pid"):
            state = "syncing"
        elif last_sync:
            state = "ok"
        else:
            state = "unknown"
        result.append(
            Replication(
                job_id=str(job_id),
                vmid=vmid,
                target=str(job.get("target") or ""),
                schedule=str(job.get("schedule") or "*/15"),
                enabled=enabled,
                last_sync=last_sync,
                state=state,
                fail_count=fail_count,
                error=error[:500],
            )
        )
    return result


def ha_groups(entries: list[dict]) -> list[HAGroup]:
    """`/cluster/ha/groups`: node preferences as Proxmox writes them (`pve1:2,pve2`)."""
    return [
        HAGroup(
            name=str(entry["group"]),
            nodes=_node_list(entry.get("nodes")),
            restricted=_flag(entry.get("restricted")),
            nofailback=_flag(entry.get("nofailback")),
            comment=str(entry.get("comment") or "")[:500],
        )
        for entry in entries
        if entry.get("group")
    ]


def _node_list(value) -> str:
    return ",".join(p.strip() for p in str(value or "").split(",") if p.strip())[:500]


def _placing(entry: dict) -> bool:
    """A node-affinity rule HA applies (enabled, not set aside as infeasible) that keeps
    its resources on its nodes (`affinity` positive, the default) as a group did."""
    return (
        entry.get("type") == NODE_AFFINITY
        and (entry.get("affinity") or "positive") == "positive"
        and bool(entry.get("rule"))
        and not _flag(entry.get("disable"))
        and not entry.get("errors")
    )


def ha_rule_groups(entries: list[dict], legacy: list[HAGroup] = ()) -> list[HAGroup]:
    """`/cluster/ha/rules` (PVE 9 on): a node-affinity rule is what an HA group was up to
    8.x (PVE 9 turns each group into one): the nodes its resources may run on, by
    priority, only those when `strict`. Each rule HA applies is recorded as the cluster's
    HA group of that name; failback moved to the resources, so none is recorded here.
    Resource-affinity rules (resources kept together or apart) have no record.
    `legacy`: HA groups the HA manager has not yet turned into rules (the cluster still
    finishing its upgrade to 9); a rule of the same name wins."""
    rules = [
        HAGroup(
            name=str(entry["rule"]),
            nodes=_node_list(entry.get("nodes")),
            restricted=_flag(entry.get("strict")),
            nofailback=False,
            comment=str(entry.get("comment") or "")[:500],
        )
        for entry in entries
        if _placing(entry)
    ]
    named = {group.name for group in rules}
    return rules + [group for group in legacy if group.name not in named]


def ha_rule_placement(entries: list[dict]) -> dict[str, str]:
    """HA resource (`vm:100`) → the node-affinity rule placing it (PVE allows one)."""
    return {
        sid.strip(): str(entry["rule"])
        for entry in entries
        if _placing(entry)
        for sid in str(entry.get("resources") or "").split(",")
        if sid.strip()
    }


def ha_vmid(sid: str) -> int | None:
    kind, _, number = sid.partition(":")
    if not number:
        return _int(kind)
    return _int(number) if kind in _HA_KINDS else None


def ha_resources(entries: list[dict], placement: dict[str, str] | None = None) -> list[HAResource]:
    """`/cluster/ha/resources`: the requested state and group of every HA-managed guest.
    `placement` (from PVE 9's rules, `ha_rule_placement`): a resource's group is the rule
    placing it; one no rule places keeps the `group` it had before the upgrade (if any)."""
    result = []
    for entry in entries:
        sid = str(entry.get("sid") or "")
        if not sid:
            continue
        state = str(entry.get("state") or "started")
        result.append(
            HAResource(
                sid=sid,
                vmid=ha_vmid(sid),
                state=_REQUESTED_STATES.get(state, "started"),
                group=_group_of(sid, entry, placement),
                max_restart=_int(entry.get("max_restart")),
                max_relocate=_int(entry.get("max_relocate")),
                comment=str(entry.get("comment") or "")[:500],
            )
        )
    return result


def _group_of(sid: str, entry: dict, placement: dict[str, str] | None) -> str | None:
    if placement and sid in placement:
        return placement[sid]
    return str(entry["group"]) if entry.get("group") else None


__all__ = [
    "Backup",
    "BackupJob",
    "HAGroup",
    "HAResource",
    "Records",
    "Replication",
    "Snapshot",
    "Storage",
    "backup_jobs",
    "backups",
    "ha_groups",
    "ha_resources",
    "ha_rule_groups",
    "ha_rule_placement",
    "holds_backups",
    "replication",
    "snapshots",
    "storages",
    "timestamp",
]
