import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import NetBoxTable, columns

from ..models import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)

__all__ = (
    "ProxmoxBackupJobTable",
    "ProxmoxBackupTable",
    "ProxmoxHAGroupTable",
    "ProxmoxHAResourceTable",
    "ProxmoxHARuleTable",
    "ProxmoxReplicationJobTable",
    "ProxmoxSnapshotTable",
    "ProxmoxStorageTable",
)

TRAILER = ("tags", "created", "last_updated")


def _tags(model: str):
    return columns.TagColumn(url_name=f"plugins:netbox_proxbox:{model}_list")


class InventoryTable(NetBoxTable):
    # The sync writes these records: the UI has no edit or delete views to link to.
    actions = columns.ActionsColumn(actions=())


class ProxmoxStorageTable(InventoryTable):
    name = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    device = tables.Column(linkify=True, verbose_name=_("Node device"))
    shared = columns.BooleanColumn()
    enabled = columns.BooleanColumn()
    capacity = tables.Column(verbose_name=_("Capacity (bytes)"))
    used = tables.Column(verbose_name=_("Used (bytes)"))
    tags = _tags("proxmoxstorage")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxStorage
        fields = (
            "pk",
            "id",
            "name",
            "cluster",
            "node",
            "device",
            "storage_type",
            "content",
            "shared",
            "enabled",
            "capacity",
            "used",
            *TRAILER,
        )
        default_columns = ("name", "cluster", "node", "storage_type", "shared", "capacity", "used")


class ProxmoxBackupTable(InventoryTable):
    volume = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    storage = tables.Column(linkify=True)
    virtual_machine = tables.Column(linkify=True)
    verification = columns.ChoiceFieldColumn()
    tags = _tags("proxmoxbackup")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxBackup
        fields = (
            "pk",
            "id",
            "volume",
            "cluster",
            "storage",
            "vmid",
            "virtual_machine",
            "backup_time",
            "size",
            "format",
            "verification",
            "notes",
            *TRAILER,
        )
        default_columns = (
            "volume",
            "storage",
            "virtual_machine",
            "backup_time",
            "size",
            "verification",
        )


class ProxmoxBackupJobTable(InventoryTable):
    job_id = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    enabled = columns.BooleanColumn()
    tags = _tags("proxmoxbackupjob")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxBackupJob
        fields = (
            "pk",
            "id",
            "job_id",
            "cluster",
            "enabled",
            "schedule",
            "selection",
            "storage",
            "node",
            "mode",
            "retention",
            "comment",
            *TRAILER,
        )
        default_columns = ("job_id", "cluster", "enabled", "schedule", "selection", "storage")


class ProxmoxSnapshotTable(InventoryTable):
    name = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    virtual_machine = tables.Column(linkify=True)
    vmstate = columns.BooleanColumn(verbose_name=_("RAM included"))
    tags = _tags("proxmoxsnapshot")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxSnapshot
        fields = (
            "pk",
            "id",
            "name",
            "cluster",
            "virtual_machine",
            "parent",
            "snapshot_time",
            "vmstate",
            "description",
            *TRAILER,
        )
        default_columns = ("name", "virtual_machine", "parent", "snapshot_time", "vmstate")


class ProxmoxReplicationJobTable(InventoryTable):
    job_id = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    virtual_machine = tables.Column(linkify=True)
    target_device = tables.Column(linkify=True)
    enabled = columns.BooleanColumn()
    state = columns.ChoiceFieldColumn()
    tags = _tags("proxmoxreplicationjob")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxReplicationJob
        fields = (
            "pk",
            "id",
            "job_id",
            "cluster",
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
            *TRAILER,
        )
        default_columns = (
            "job_id",
            "virtual_machine",
            "target",
            "schedule",
            "last_sync",
            "state",
        )


class ProxmoxHAGroupTable(InventoryTable):
    name = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    restricted = columns.BooleanColumn()
    nofailback = columns.BooleanColumn()
    tags = _tags("proxmoxhagroup")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxHAGroup
        fields = (
            "pk",
            "id",
            "name",
            "cluster",
            "nodes",
            "restricted",
            "nofailback",
            "comment",
            *TRAILER,
        )
        default_columns = ("name", "cluster", "nodes", "restricted", "nofailback")


class ProxmoxHAResourceTable(InventoryTable):
    sid = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    virtual_machine = tables.Column(linkify=True)
    group = tables.Column(linkify=True)
    state = columns.ChoiceFieldColumn()
    tags = _tags("proxmoxharesource")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxHAResource
        fields = (
            "pk",
            "id",
            "sid",
            "cluster",
            "vmid",
            "virtual_machine",
            "state",
            "group",
            "max_restart",
            "max_relocate",
            "comment",
            *TRAILER,
        )
        default_columns = ("sid", "virtual_machine", "state", "group")


class ProxmoxHARuleTable(InventoryTable):
    name = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True)
    rule_type = columns.ChoiceFieldColumn(verbose_name=_("Type"))
    affinity = columns.ChoiceFieldColumn()
    strict = columns.BooleanColumn()
    enabled = columns.BooleanColumn()
    resources = columns.ManyToManyColumn(linkify_item=True, verbose_name=_("Resources"))
    tags = _tags("proxmoxharule")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxHARule
        fields = (
            "pk",
            "id",
            "name",
            "cluster",
            "rule_type",
            "affinity",
            "nodes",
            "strict",
            "enabled",
            "errors",
            "resources",
            "comment",
            *TRAILER,
        )
        default_columns = (
            "name",
            "rule_type",
            "affinity",
            "nodes",
            "strict",
            "enabled",
            "resources",
        )
