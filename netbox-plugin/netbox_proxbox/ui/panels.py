"""Detail-page panels and layouts (NetBox's declarative UI) of every Proxbox model."""

from django.utils.translation import gettext_lazy as _
from extras.ui.panels import CustomFieldsPanel, TagsPanel
from netbox.ui import attrs, layout, panels

from ..sync.jobs import SyncEndpointJob, counters_summary
from .attrs import (
    AnchoredBooleanAttr,
    AnchoredChoiceAttr,
    HostAttr,
    NextSyncAttr,
    SyncOutcomeAttr,
    SyncScheduleAttr,
    TokenSecretAttr,
    ViewableObjectAttr,
    WatchAttr,
)

RECENT_SYNC_JOBS = 5

#
# Endpoints, tracking records, sync states
#


class ProxmoxEndpointPanel(panels.ObjectAttributesPanel):
    title = _("Proxmox endpoint")
    name = attrs.TextAttr("name")
    host = HostAttr("host")
    verify_tls = attrs.BooleanAttr("verify_tls", label=_("Verify TLS"))
    mode = attrs.ChoiceAttr("mode")
    enabled = attrs.BooleanAttr("enabled")
    token_id = attrs.TextAttr("token_id", label=_("API token ID"))
    token_secret = TokenSecretAttr("token_secret_ciphertext", label=_("API token secret"))
    site = attrs.RelatedObjectAttr("site", linkify=True)
    tenant = attrs.RelatedObjectAttr("tenant", linkify=True)
    node_device_type = attrs.RelatedObjectAttr(
        "node_device_type", linkify=True, label=_("Node device type")
    )
    netbox_cluster = ViewableObjectAttr(
        "netbox_cluster", linkify=True, label=_("Native cluster"), dom_id="native-cluster"
    )
    sync_state = ViewableObjectAttr(
        "netbox_cluster.proxbox_sync_state",
        linkify=True,
        label=_("Cluster sync state"),
        dom_id="cluster-sync-state",
    )
    sync_outcome = SyncOutcomeAttr(
        "netbox_cluster.proxbox_sync_state", label=_("Last sync"), dom_id="sync-outcome"
    )
    sync_schedule = SyncScheduleAttr("sync_interval", dom_id="sync-schedule")
    next_sync = NextSyncAttr("sync_interval", label=_("Next scheduled sync"), dom_id="next-sync")
    live_sync = WatchAttr("watch_interval", label=_("Live sync"), dom_id="live-sync")
    adopt_existing = AnchoredBooleanAttr(
        "adopt_existing", label=_("Adopt existing objects"), dom_id="adopt-existing"
    )
    removed_guests = AnchoredChoiceAttr(
        "removed_guests", label=_("Removed guests"), dom_id="removed-guests"
    )
    removed_guests_days = attrs.NumericAttr(
        "removed_guests_days", label=_("Removed guests deleted after (days)")
    )
    description = attrs.TextAttr("description")


def _mode(kind: str, label) -> AnchoredChoiceAttr:
    return AnchoredChoiceAttr(f"{kind}_mode", label=label, dom_id=f"{kind}-mode")


class SyncModesPanel(panels.ObjectAttributesPanel):
    """What the sync writes per object type (always / create-only / off)."""

    title = _("What the sync writes")
    guests_mode = _mode("guests", _("Guests"))
    nodes_mode = _mode("nodes", _("Nodes"))
    interfaces_mode = _mode("interfaces", _("Interfaces"))
    ips_mode = _mode("ips", _("IP addresses"))
    disks_mode = _mode("disks", _("Disks"))
    vlans_mode = _mode("vlans", _("VLANs"))
    tags_mode = _mode("tags", _("Tags"))
    records_mode = _mode("records", _("Storage and data-protection records"))
    sdn_mode = _mode("sdn", _("SDN"))
    prefixes_mode = _mode("prefixes", _("Guest network prefixes"))


class RecentSyncsPanel(panels.ObjectPanel):
    """The endpoint's latest sync Jobs with their counters, for viewers of Jobs."""

    template_name = "netbox_proxbox/panels/recent_syncs.html"
    title = _("Recent syncs")

    def get_context(self, context):
        ctx = super().get_context(context)
        jobs = (
            SyncEndpointJob.get_jobs(ctx["object"])
            .restrict(ctx["request"].user, "view")
            .defer("log_entries")
            .order_by("-created")[:RECENT_SYNC_JOBS]
        )
        return {**ctx, "recent_syncs": [(job, counters_summary(job.data)) for job in jobs]}

    def should_render(self, context):
        return context["request"].user.has_perm("core.view_job")


class ProxmoxClusterPanel(panels.ObjectAttributesPanel):
    title = _("Tracking record")
    endpoint = ViewableObjectAttr("endpoint", linkify=True)
    name = attrs.TextAttr("name", label=_("Source name"))
    cluster_id = attrs.TextAttr("cluster_id", label=_("Source identity"))
    mode = attrs.ChoiceAttr("mode")
    netbox_cluster = ViewableObjectAttr("netbox_cluster", linkify=True, label=_("Native cluster"))


class ReflectionPanel(panels.ObjectAttributesPanel):
    title = _("Reflection")
    version = attrs.TextAttr("version")
    quorate = attrs.BooleanAttr("quorate")
    node_count = attrs.NumericAttr("node_count")
    last_seen = attrs.DateTimeAttr("last_seen")


class ProxboxClusterSyncStatePanel(panels.ObjectAttributesPanel):
    title = _("Cluster sync state")
    cluster = ViewableObjectAttr("cluster", linkify=True, label=_("Native cluster"))
    proxmox_cluster = ViewableObjectAttr(
        "proxmox_cluster", linkify=True, label=_("Tracking record")
    )
    status = attrs.ChoiceAttr("status")
    last_sync = attrs.DateTimeAttr("last_sync")


class SyncCountersPanel(panels.ObjectAttributesPanel):
    title = _("Counters")
    objects_created = attrs.NumericAttr("objects_created")
    objects_updated = attrs.NumericAttr("objects_updated")
    objects_deleted = attrs.NumericAttr("objects_deleted")
    errors = attrs.NumericAttr("errors")
    message = attrs.TextAttr("message")


ENDPOINT_LAYOUT = layout.SimpleLayout(
    left_panels=[ProxmoxEndpointPanel(), SyncModesPanel(), CustomFieldsPanel(), TagsPanel()],
    right_panels=[
        panels.ObjectsTablePanel(
            "netbox_proxbox.proxmoxcluster",
            title=_("Tracking records"),
            filters={"endpoint_id": lambda ctx: ctx["object"].pk},
            include_columns=["name", "cluster_id", "netbox_cluster", "last_seen"],
            exclude_columns=["endpoint"],
        ),
        panels.ObjectsTablePanel(
            "netbox_proxbox.proxmoxassignmentrule",
            title=_("Assignment rules"),
            filters={"endpoint_id": lambda ctx: ctx["object"].pk},
            exclude_columns=["endpoint"],
        ),
        panels.ObjectsTablePanel(
            "netbox_proxbox.proxmoxnodetypeoverride",
            title=_("Node type overrides"),
            filters={"endpoint_id": lambda ctx: ctx["object"].pk},
            include_columns=["node", "device_type", "description"],
            exclude_columns=["endpoint"],
        ),
        RecentSyncsPanel(),
        panels.CommentsPanel(),
    ],
)


class ProxmoxAssignmentRulePanel(panels.ObjectAttributesPanel):
    title = _("Assignment rule")
    endpoint = ViewableObjectAttr("endpoint", linkify=True)
    weight = attrs.NumericAttr("weight", label=_("Order"))
    enabled = attrs.BooleanAttr("enabled")
    description = attrs.TextAttr("description")


class AssignmentMatchersPanel(panels.ObjectAttributesPanel):
    title = _("Matches guests (all that are set)")
    name_pattern = attrs.TextAttr("name_pattern", style="font-monospace")
    proxmox_tag = attrs.TextAttr("proxmox_tag", label=_("Proxmox tag"))
    pool = attrs.TextAttr("pool")
    node = attrs.TextAttr("node")
    vmid_min = attrs.NumericAttr("vmid_min", label=_("Lowest VMID"))
    vmid_max = attrs.NumericAttr("vmid_max", label=_("Highest VMID"))


class AssignmentsPanel(panels.ObjectAttributesPanel):
    title = _("Assigns")
    tenant = attrs.RelatedObjectAttr("tenant", linkify=True, grouped_by="group")
    vm_role = attrs.RelatedObjectAttr("vm_role", linkify=True, label=_("VM role"))
    platform = attrs.RelatedObjectAttr("platform", linkify=True)
    site = attrs.RelatedObjectAttr("site", linkify=True)
    location = attrs.RelatedObjectAttr("location", linkify=True)


ASSIGNMENT_RULE_LAYOUT = layout.SimpleLayout(
    left_panels=[ProxmoxAssignmentRulePanel(), AssignmentMatchersPanel(), TagsPanel()],
    right_panels=[AssignmentsPanel(), CustomFieldsPanel()],
)


class ProxmoxNodeTypeOverridePanel(panels.ObjectAttributesPanel):
    title = _("Node type override")
    endpoint = ViewableObjectAttr("endpoint", linkify=True)
    node = attrs.TextAttr("node")
    device_type = attrs.RelatedObjectAttr("device_type", linkify=True)
    description = attrs.TextAttr("description")


NODE_TYPE_OVERRIDE_LAYOUT = layout.SimpleLayout(
    left_panels=[ProxmoxNodeTypeOverridePanel(), TagsPanel()],
    right_panels=[CustomFieldsPanel()],
)

PROXMOX_CLUSTER_LAYOUT = layout.SimpleLayout(
    left_panels=[ProxmoxClusterPanel(), TagsPanel()],
    right_panels=[ReflectionPanel(), CustomFieldsPanel()],
)

SYNC_STATE_LAYOUT = layout.SimpleLayout(
    left_panels=[ProxboxClusterSyncStatePanel(), TagsPanel()],
    right_panels=[SyncCountersPanel(), CustomFieldsPanel()],
)

#
# Inventory records
#


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


class ProxmoxHARulePanel(panels.ObjectAttributesPanel):
    name = attrs.TextAttr("name", label=_("Rule"))
    cluster = attrs.RelatedObjectAttr("cluster", linkify=True)
    rule_type = attrs.ChoiceAttr("rule_type", label=_("Type"))
    affinity = attrs.ChoiceAttr("affinity")
    nodes = attrs.TextAttr("nodes", label=_("Node preferences"), style="font-monospace")
    strict = attrs.BooleanAttr("strict")
    enabled = attrs.BooleanAttr("enabled")
    errors = attrs.TextAttr("errors")
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
    "proxmoxharesource": record_layout(
        ProxmoxHAResourcePanel(), related("netbox_proxbox.proxmoxharule", "resource")
    ),
    # A rule's members: the HA resources it lists.
    "proxmoxharule": record_layout(
        ProxmoxHARulePanel(), related("netbox_proxbox.proxmoxharesource", "rule")
    ),
}
