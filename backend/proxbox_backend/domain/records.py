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
# PVE 9's HA rule types (`/cluster/ha/rules`).
NODE_AFFINITY, RESOURCE_AFFINITY = "node-affinity", "resource-affinity"
_RULE_TYPES = (NODE_AFFINITY, RESOURCE_AFFINITY)
# The cluster-wide HA lists, as `Records.lists` names them: HA groups (up to PVE 8, and on
# 9 the ones its HA manager has not yet turned into rules) and PVE 9's HA rules.
HA_GROUPS, HA_RULES = "ha-groups", "ha-rules"
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
    # The selection as Proxmox evaluates it (`selected`): a pool, else a VMID list, else
    # all guests but `exclude`; `node` restricts any of them.
    select_all: bool = False
    vmids: tuple[int, ...] = ()
    exclude: tuple[int, ...] = ()
    pool: str = ""
    pool_vmids: tuple[int, ...] = ()  # the pool's guests as this run read them


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


@dataclass(frozen=True)
class HARule:
    """A PVE 9 HA rule: node affinity (its resources on these nodes, by priority; only
    those when `strict`) or resource affinity (its resources together, `positive`, or
    apart, `negative`)."""

    name: str
    type: str
    affinity: str
    nodes: str  # node-affinity only: `node[:priority]` as Proxmox writes it
    strict: bool
    enabled: bool
    errors: str  # why HA's feasibility check sets the rule aside; "" when it applies it
    comment: str
    resources: tuple[str, ...]  # the HA resources (`vm:100`) it lists, sorted


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
    ha_rules: list[HARule] = field(default_factory=list)
    # Nodes whose storage list answered; (storage, node) pairs whose backups were listed;
    # VMIDs whose snapshots were listed; cluster-wide lists that answered
    # ("backup-jobs", "replication", HA_GROUPS, HA_RULES, "ha-resources").
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


def _vmid_list(value) -> tuple[int, ...]:
    """A job's VMID list as Proxmox reads it: comma/space separated, what is not a
    VMID (or is 0) ignored, leading zeros dropped, sorted without repeats."""
    found = set()
    for part in str(value or "").replace(";", ",").replace(" ", ",").split(","):
        part = part.strip()
        if part.isascii() and part.isdigit() and int(part):
            found.add(int(part))
    return tuple(sorted(found))


def backup_jobs(entries: list[dict], pools: dict[str, set[int]] | None = None) -> list[BackupJob]:
    """`/cluster/backup`: the scheduled vzdump jobs; `pools` maps a pool to its guests'
    VMIDs (`/cluster/resources`), resolving a pool selection as Proxmox does at run time.

    Like vzdump, `exclude` without a pool means all guests but those."""
    pools = pools or {}
    result = []
    for entry in entries:
        if not entry.get("id"):
            continue
        schedule = entry.get("schedule")
        if not schedule and entry.get("starttime"):
            # Jobs from before PVE 7 name a time and weekdays instead of a calendar event.
            schedule = f"{entry.get('dow') or 'mon..sun'} {entry['starttime']}"
        pool = str(entry.get("pool") or "")
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
                select_all=_flag(entry.get("all")) or bool(entry.get("exclude") and not pool),
                vmids=_vmid_list(entry.get("vmid")),
                exclude=_vmid_list(entry.get("exclude")),
                pool=pool,
                pool_vmids=tuple(sorted(pools.get(pool, ()))) if pool else (),
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


def ha_rules(entries: list[dict]) -> list[HARule]:
    """`/cluster/ha/rules` (PVE 9 on): every rule as Proxmox lists it, applied or not.

    A node-affinity rule is what an HA group was up to 8.x (PVE 9 turns each group into
    one, `ha-group-<name>`), yet it is recorded as a rule only, not also as an HA group:
    it is one Proxmox object (two records would be two to keep in step), its members are
    its own list (not the resources' `group`), and a group's `nofailback` has no place in
    it (PVE 9 moved failback to the resources). The groups PVE 9 has not yet turned into
    rules stay groups (`ha_groups`). `errors` (what HA's feasibility check found, option
    → messages) becomes one line: HA sets such a rule aside until it is fixed."""
    result = []
    for entry in entries:
        kind = entry.get("type")
        if not entry.get("rule") or kind not in _RULE_TYPES:
            continue
        node_affinity = kind == NODE_AFFINITY
        result.append(
            HARule(
                name=str(entry["rule"]),
                type=kind,
                # node-affinity knows `positive` only (its default); resource-affinity
                # requires one.
                affinity=str(entry.get("affinity") or "positive"),
                nodes=_node_list(entry.get("nodes")) if node_affinity else "",
                strict=node_affinity and _flag(entry.get("strict")),
                enabled=not _flag(entry.get("disable")),
                errors=_rule_errors(entry.get("errors")),
                comment=str(entry.get("comment") or "")[:500],
                resources=_sids(entry.get("resources")),
            )
        )
    return result


def _sids(value) -> tuple[str, ...]:
    return tuple(sorted({sid.strip() for sid in str(value or "").split(",")} - {""}))


def _rule_errors(errors) -> str:
    if not isinstance(errors, dict):
        return str(errors or "")[:1000]
    messages = []
    for option, found in sorted(errors.items()):
        for message in found if isinstance(found, list) else [found]:
            messages.append(f"{option}: {message}")
    return "; ".join(messages)[:1000]


def ha_vmid(sid: str) -> int | None:
    kind, _, number = sid.partition(":")
    if not number:
        return _int(kind)
    return _int(number) if kind in _HA_KINDS else None


def ha_resources(entries: list[dict]) -> list[HAResource]:
    """`/cluster/ha/resources`: the requested state and group of every HA-managed guest
    (on PVE 9 a `group` only while its HA manager has not yet turned it into a rule; the
    rules list their resources themselves)."""
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
                group=str(entry["group"]) if entry.get("group") else None,
                max_restart=_int(entry.get("max_restart")),
                max_relocate=_int(entry.get("max_relocate")),
                comment=str(entry.get("comment") or "")[:500],
            )
        )
    return result


__all__ = [
    "Backup",
    "BackupJob",
    "HAGroup",
    "HAResource",
    "HARule",
    "Records",
    "Replication",
    "Snapshot",
    "Storage",
    "backup_jobs",
    "backups",
    "ha_groups",
    "ha_resources",
    "ha_rules",
    "holds_backups",
    "replication",
    "snapshots",
    "storages",
    "timestamp",
]
