"""Detail-page panels of the inventory records (NetBox's declarative UI layouts)."""

from django.utils.translation import gettext_lazy as _
from extras.ui.panels import CustomFieldsPanel, TagsPanel
from netbox.ui import attrs, layout, panels


class ProxmoxStoragePanel(panels.ObjectAttributesPanel):
    name = attrs.TextAttr("name", label=_("Storage"))
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    node = attrs.TextAttr("node")
    device = attrs.RelatedObjectAttr("device", linkify=True, label=_("Node device"))
    storage_type = attrs.TextAttr("storage_type", label=_("Type"))
    content = attrs.TextAttr("content")
    shared = attrs.BooleanAttr("shared")
    enabled = attrs.BooleanAttr("enabled")
    capacity = attrs.NumericAttr("capacity", label=_("Capacity (bytes)"))
    used = attrs.NumericAttr("used", label=_("Used (bytes)"))


class ProxmoxBackupPanel(panels.ObjectAttributesPanel):
    volume = attrs.TextAttr("volume", style="font-monospace", copy_button=True)
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    storage = attrs.RelatedObjectAttr("storage", linkify=True)
    vmid = attrs.TextAttr("vmid", label=_("VMID"))
    virtual_machine = attrs.RelatedObjectAttr("virtual_machine", linkify=True)
    backup_time = attrs.DateTimeAttr("backup_time", label=_("Time"))
    size = attrs.NumericAttr("size", label=_("Size (bytes)"))
    format = attrs.TextAttr("format")
    verification = attrs.ChoiceAttr("verification")
    notes = attrs.TextAttr("notes")


class ProxmoxBackupJobPanel(panels.ObjectAttributesPanel):
    job_id = attrs.TextAttr("job_id", label=_("Job ID"))
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    enabled = attrs.BooleanAttr("enabled")
    schedule = attrs.TextAttr("schedule", style="font-monospace")
    selection = attrs.TextAttr("selection")
    storage = attrs.TextAttr("storage")
    node = attrs.TextAttr("node")
    mode = attrs.TextAttr("mode")
    retention = attrs.TextAttr("retention")
    comment = attrs.TextAttr("comment")


class ProxmoxSnapshotPanel(panels.ObjectAttributesPanel):
    name = attrs.TextAttr("name")
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    virtual_machine = attrs.RelatedObjectAttr("virtual_machine", linkify=True)
    parent = attrs.TextAttr("parent")
    snapshot_time = attrs.DateTimeAttr("snapshot_time", label=_("Time"))
    vmstate = attrs.BooleanAttr("vmstate", label=_("RAM included"))
    description = attrs.TextAttr("description")


class ProxmoxReplicationJobPanel(panels.ObjectAttributesPanel):
    job_id = attrs.TextAttr("job_id", label=_("Job ID"))
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    vmid = attrs.TextAttr("vmid", label=_("VMID"))
    virtual_machine = attrs.RelatedObjectAttr("virtual_machine", linkify=True)
    target = attrs.TextAttr("target", label=_("Target node"))
    target_device = attrs.RelatedObjectAttr("target_device", linkify=True)
    schedule = attrs.TextAttr("schedule", style="font-monospace")
    enabled = attrs.BooleanAttr("enabled")
    last_sync = attrs.DateTimeAttr("last_sync")
    state = attrs.ChoiceAttr("state")
    fail_count = attrs.NumericAttr("fail_count", label=_("Failures"))
    error = attrs.TextAttr("error")


class ProxmoxHAGroupPanel(panels.ObjectAttributesPanel):
    name = attrs.TextAttr("name")
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    nodes = attrs.TextAttr("nodes", label=_("Node preferences"), style="font-monospace")
    restricted = attrs.BooleanAttr("restricted")
    nofailback = attrs.BooleanAttr("nofailback", label=_("No failback"))
    comment = attrs.TextAttr("comment")


class ProxmoxHAResourcePanel(panels.ObjectAttributesPanel):
    sid = attrs.TextAttr("sid", label=_("Resource"))
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    vmid = attrs.TextAttr("vmid", label=_("VMID"))
    virtual_machine = attrs.RelatedObjectAttr("virtual_machine", linkify=True)
    state = attrs.ChoiceAttr("state", label=_("Requested state"))
    group = attrs.RelatedObjectAttr("group", linkify=True)
    max_restart = attrs.NumericAttr("max_restart")
    max_relocate = attrs.NumericAttr("max_relocate")
    comment = attrs.TextAttr("comment")


def record_layout(panel: panels.ObjectAttributesPanel, *below: panels.Panel) -> layout.SimpleLayout:
    """Every inventory record's page: its attributes (and related records) left, tags and
    custom fields right."""
    return layout.SimpleLayout(
        left_panels=[panel, *below],
        right_panels=[TagsPanel(), CustomFieldsPanel()],
    )


def related(model: str, field: str) -> panels.ObjectsTablePanel:
    """A table of the `model` records whose `field` is the object shown."""
    return panels.ObjectsTablePanel(model, filters={f"{field}_id": lambda ctx: ctx["object"].pk})


LAYOUTS = {
    "proxmoxstorage": record_layout(
        ProxmoxStoragePanel(), related("netbox_proxbox.proxmoxbackup", "storage")
    ),
    "proxmoxbackup": record_layout(ProxmoxBackupPanel()),
    "proxmoxbackupjob": record_layout(ProxmoxBackupJobPanel()),
    "proxmoxsnapshot": record_layout(ProxmoxSnapshotPanel()),
    "proxmoxreplicationjob": record_layout(ProxmoxReplicationJobPanel()),
    "proxmoxhagroup": record_layout(
        ProxmoxHAGroupPanel(), related("netbox_proxbox.proxmoxharesource", "group")
    ),
    "proxmoxharesource": record_layout(ProxmoxHAResourcePanel()),
}
