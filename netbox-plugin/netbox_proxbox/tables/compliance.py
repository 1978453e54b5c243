import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import NetBoxTable, columns
from virtualization.models import VirtualMachine

from ..compliance import FACTS, RULES, failed_rules

__all__ = ("ComplianceTable",)


class RulesColumn(tables.Column):
    """The rules a VM breaks, by name (one comma-separated cell in an export)."""

    def __init__(self, **kwargs):
        super().__init__(accessor="pk", orderable=False, **kwargs)

    def render(self, record):
        return ", ".join(failed_rules(record)) or "—"

    def value(self, record, value):
        return ",".join(failed_rules(record))


class ComplianceTable(NetBoxTable):
    name = tables.Column(linkify=True, verbose_name=_("Virtual machine"))
    endpoint_name = tables.Column(verbose_name=_("Endpoint"), orderable=True)
    cluster = tables.Column(linkify=True)
    proxmox_vmid = tables.Column(verbose_name=_("VMID"))
    device = tables.Column(linkify=True, verbose_name=_("Node"))
    compliant = columns.BooleanColumn(verbose_name=_("Compliant"))
    failed_rules = RulesColumn(verbose_name=_("Rules broken"))
    backup_job = columns.BooleanColumn(verbose_name=_("Backup job"))
    last_backup_at = columns.DateTimeColumn(verbose_name=_("Last backup"))
    last_backup_verification = tables.Column(verbose_name=_("Verification"))
    snapshot_count = tables.Column(verbose_name=_("Snapshots"))
    oldest_snapshot_at = columns.DateTimeColumn(verbose_name=_("Oldest snapshot"))
    replication_state = tables.Column(verbose_name=_("Replication"))
    replication_failures = tables.Column(verbose_name=_("Replication failures"))
    ha_state = tables.Column(verbose_name=_("HA state"))
    actions = columns.ActionsColumn(actions=())

    class Meta(NetBoxTable.Meta):
        model = VirtualMachine
        fields = (
            "pk",
            "id",
            "name",
            "endpoint_name",
            "cluster",
            "proxmox_vmid",
            "device",
            "compliant",
            "failed_rules",
            "backup_job",
            *FACTS,
            *RULES,
        )
        default_columns = (
            "name",
            "endpoint_name",
            "proxmox_vmid",
            "compliant",
            "failed_rules",
            "backup_job",
            "last_backup_at",
            "last_backup_verification",
            "snapshot_count",
            "oldest_snapshot_at",
            "replication_state",
            "ha_state",
        )


for _rule, _label in RULES.items():
    ComplianceTable.base_columns[_rule] = columns.BooleanColumn(verbose_name=_label)
