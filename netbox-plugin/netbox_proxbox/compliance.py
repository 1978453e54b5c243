"""Data-protection compliance of the VMs in Proxmox endpoints' clusters.

One queryset over `virtualization.VirtualMachine`, annotated in the database from the
stored inventory (backup jobs, backups, snapshots, replication jobs, HA resources) and the
endpoint's thresholds: no Python loop over VMs, no Proxmox call. The list view, REST, the
VM tab and the dashboard widget all read it.

Backup-job coverage follows Proxmox's own evaluation of a vzdump job's selection
(pve-manager `PVE::VZDump::get_included_guests`): a job naming a pool selects the pool's
guests; else one naming VMIDs selects those; else one for all guests selects every guest
but the excluded VMIDs; a job restricted to a node selects only the guests on that node.
A disabled job backs nothing up, so it covers nothing.
"""

from __future__ import annotations

from contextlib import contextmanager

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    F,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.utils.translation import gettext_lazy as _

from .models import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxHAResource,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
)

__all__ = (
    "FACTS",
    "INVENTORY_PERMISSIONS",
    "RULES",
    "compliance_counts",
    "endpoint_counts",
    "failed_rules",
    "may_view_compliance",
    "with_compliance",
    "without_jit",
)

# What compliance shows is read from these: a user who may view the VMs but not the
# endpoints or the inventory they derive from learns nothing of it through compliance.
INVENTORY_PERMISSIONS = (
    "netbox_proxbox.view_proxmoxendpoint",
    "netbox_proxbox.view_proxmoxbackup",
    "netbox_proxbox.view_proxmoxbackupjob",
    "netbox_proxbox.view_proxmoxsnapshot",
    "netbox_proxbox.view_proxmoxreplicationjob",
    "netbox_proxbox.view_proxmoxharesource",
)
VM_PERMISSION = "virtualization.view_virtualmachine"

SOURCE_FIELD = "proxbox_source"  # `cluster-<id>/<kind>/<vmid>[#<creation id>]`
ENDPOINT = "cluster__proxmox_endpoint"

# The data-protection facts `with_compliance` annotates on each VM (what every view shows).
FACTS = (
    "last_backup_at",
    "last_backup_verification",
    "snapshot_count",
    "oldest_snapshot_at",
    "replication_state",
    "replication_failures",
    "ha_state",
)

# Each rule: the annotation that is true when the VM breaks it, and what it means.
RULES = {
    "rule_no_backup_job": _("No enabled backup job selects it"),
    "rule_backup_stale": _("No backup, or the newest is older than allowed"),
    "rule_backup_unverified": _("The newest backup failed verification, or is unverified"),
    "rule_snapshots": _("More snapshots than allowed, or one older than allowed"),
    "rule_replication_failing": _("A replication job keeps failing"),
    "rule_ha_missing": _("Not an HA resource requested to be started"),
}


class _SplitPart(Func):
    function = "split_part"
    output_field = CharField()


class _AnyOf(Func):
    """`value = ANY(array)`: the value is in the array."""

    arg_joiner = " = ANY("
    template = "(%(expressions)s))"
    output_field = BooleanField()


class _Ago(Func):
    """The database's now minus a number of hours or days (the row's threshold)."""

    template = "(STATEMENT_TIMESTAMP() - make_interval(%(unit)s => %(expressions)s))"
    output_field = DateTimeField()

    def __init__(self, expression, unit: str):
        assert unit in ("hours", "days")
        super().__init__(expression, unit=unit)


def _threshold(name: str):
    return F(f"{ENDPOINT}__{name}")


def _covering_jobs():
    """The enabled backup jobs of the VM's cluster whose selection includes it."""
    vmid = OuterRef("proxmox_vmid")
    return ProxmoxBackupJob.objects.filter(
        Q(node="") | Q(node=OuterRef("device__name")),
        cluster=OuterRef("cluster"),
        enabled=True,
    ).filter(
        Q(~Q(pool=""), _AnyOf(vmid, F("pool_vmids")))
        | Q(Q(pool=""), _AnyOf(vmid, F("vmids")))
        | Q(Q(pool="", vmids=[], select_all=True), ~_AnyOf(vmid, F("exclude")))
    )


def _newest_backup(field: str):
    return Subquery(
        ProxmoxBackup.objects.filter(virtual_machine=OuterRef("pk"), backup_time__isnull=False)
        .order_by("-backup_time", "-pk")
        .values(field)[:1]
    )


def _per_vm(model, aggregate, **filters):
    return Subquery(
        model.objects.filter(virtual_machine=OuterRef("pk"), **filters)
        .order_by()
        .values("virtual_machine")
        .annotate(value=aggregate)
        .values("value")
    )


def with_compliance(queryset):
    """The VMs of `queryset` that belong to a Proxmox endpoint's cluster, each annotated
    with its data-protection state, one boolean per rule (`RULES`) and `compliant`."""
    source = KeyTextTransform(SOURCE_FIELD, "custom_field_data")
    replication = ProxmoxReplicationJob.objects.filter(virtual_machine=OuterRef("pk"), enabled=True)
    queryset = (
        queryset.filter(cluster__proxmox_endpoint__isnull=False)
        .annotate(
            endpoint_id=F(f"{ENDPOINT}__id"),
            endpoint_name=F(f"{ENDPOINT}__name"),
            _vmid_text=_SplitPart(_SplitPart(source, Value("#"), Value(1)), Value("/"), Value(3)),
        )
        .annotate(
            proxmox_vmid=Case(
                When(_vmid_text__regex=r"^[0-9]{1,9}$", then=Cast("_vmid_text", IntegerField())),
                default=None,
                output_field=IntegerField(),
            ),
            last_backup_at=_newest_backup("backup_time"),
            last_backup_verification=_newest_backup("verification"),
            snapshot_count=Coalesce(_per_vm(ProxmoxSnapshot, Count("pk")), 0),
            oldest_snapshot_at=_per_vm(ProxmoxSnapshot, Min("snapshot_time")),
            replication_failures=Coalesce(
                _per_vm(ProxmoxReplicationJob, Max("fail_count"), enabled=True), 0
            ),
            replication_state=Subquery(
                replication.order_by(
                    Case(When(state="error", then=0), default=1), "-fail_count", "job_id"
                ).values("state")[:1]
            ),
            ha_state=Subquery(
                ProxmoxHAResource.objects.filter(virtual_machine=OuterRef("pk"))
                .order_by("sid")
                .values("state")[:1]
            ),
        )
        .annotate(backup_job=Exists(_covering_jobs()))
    )
    rules = {
        "rule_no_backup_job": Q(backup_job=False),
        "rule_backup_stale": Q(last_backup_at__isnull=True)
        | Q(last_backup_at__lt=_Ago(_threshold("backup_max_age_hours"), "hours")),
        "rule_backup_unverified": Q(last_backup_verification="failed")
        | Q(
            Q(**{f"{ENDPOINT}__backup_require_verified": True}),
            ~Q(last_backup_verification="ok"),
            last_backup_at__isnull=False,
        ),
        "rule_snapshots": Q(
            Q(**{f"{ENDPOINT}__snapshot_max_count__isnull": False}),
            snapshot_count__gt=_threshold("snapshot_max_count"),
        )
        | Q(
            Q(**{f"{ENDPOINT}__snapshot_max_age_days__isnull": False}),
            oldest_snapshot_at__lt=_Ago(_threshold("snapshot_max_age_days"), "days"),
        ),
        "rule_replication_failing": Q(
            replication_failures__gt=_threshold("replication_max_failures")
        ),
        "rule_ha_missing": Q(
            Q(**{f"{ENDPOINT}__ha_required": True}),
            Q(ha_state__isnull=True) | ~Q(ha_state="started"),
        ),
    }
    assert set(rules) == set(RULES)
    queryset = queryset.annotate(
        **{
            name: Case(When(condition, then=True), default=False, output_field=BooleanField())
            for name, condition in rules.items()
        }
    )
    out_of_policy = Q()
    for name in RULES:
        out_of_policy |= Q(**{name: True})
    return queryset.annotate(
        compliant=Case(When(out_of_policy, then=False), default=True, output_field=BooleanField())
    )


@contextmanager
def without_jit():
    """Queries over every VM run without PostgreSQL's JIT compilation: the planner's cost
    of the correlated subqueries (one per fact and row) crosses `jit_above_cost`, and
    compiling them took ~1 s of a ~1.1 s query over 10,000 VMs whose execution took
    ~0.1 s (`benchmarks/compliance.py --explain`). `SET LOCAL`: this transaction only."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
        yield


def may_view_compliance(user) -> bool:
    """Whether `user` may see compliance at all (which VMs: NetBox's VM permissions)."""
    return user.has_perms((VM_PERMISSION, *INVENTORY_PERMISSIONS))


def failed_rules(vm) -> list[str]:
    """The rules an annotated VM breaks, in `RULES` order."""
    return [name.removeprefix("rule_") for name in RULES if getattr(vm, name)]


def compliance_counts(queryset) -> dict:
    """VMs in all, out of policy and per rule, in one query."""
    annotated = with_compliance(queryset)
    with without_jit():
        return annotated.aggregate(
            total=Count("pk"),
            out_of_policy=Count("pk", filter=Q(compliant=False)),
            **{name.removeprefix("rule_"): Count("pk", filter=Q(**{name: True})) for name in RULES},
        )


def endpoint_counts(queryset) -> list[dict]:
    """Per endpoint: its name and id, its VMs and how many are out of policy."""
    with without_jit():
        return list(
            with_compliance(queryset)
            .order_by()
            .values("endpoint_id", "endpoint_name")
            .annotate(total=Count("pk"), out_of_policy=Count("pk", filter=Q(compliant=False)))
            .order_by("endpoint_name")
        )
