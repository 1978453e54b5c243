import django_tables2 as tables
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from netbox.context import current_request
from netbox.tables import NetBoxTable, columns
from tenancy.tables import TenancyColumnsMixin

from ..models import (
    ProxboxClusterSyncState,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxNodeTypeOverride,
)
from ..sync.health import SyncHealth, with_sync_health

__all__ = (
    "ProxboxClusterSyncStateTable",
    "ProxmoxClusterTable",
    "ProxmoxEndpointTable",
    "ProxmoxNodeTypeOverrideTable",
)


class ViewerAwareTable(NetBoxTable):
    """Remembers who is looking, so relation columns can apply the detail pages' view rule."""

    def configure(self, request):
        self.viewer = request.user
        super().configure(request)

    def may_view(self, obj) -> bool:
        viewer = getattr(self, "viewer", None)
        if viewer is None and (request := current_request.get()) is not None:
            viewer = request.user
        if viewer is None:
            return False
        cache = self.__dict__.setdefault("_visible", {})
        key = (type(obj), obj.pk)
        if key not in cache:
            cache[key] = type(obj).objects.restrict(viewer, "view").filter(pk=obj.pk).exists()
        return cache[key]


class VisibleRelationColumn(tables.Column):
    """A related object, named and linked only for viewers who may view it (else the placeholder)."""

    def render(self, value, table):
        if not table.may_view(value):
            return self.default
        return format_html('<a href="{}">{}</a>', value.get_absolute_url(), value)

    def value(self, value, table):
        return str(value) if value is not None and table.may_view(value) else ""


def sync_health(endpoint) -> SyncHealth:
    """The endpoint's sync health, from its annotations (or one query when the row came
    from a queryset without them)."""
    if not hasattr(endpoint, "health_last_status"):
        endpoint = with_sync_health(type(endpoint).objects.filter(pk=endpoint.pk)).get()
    return SyncHealth.of(endpoint)


class SyncHealthColumn(tables.Column):
    """The endpoint's sync state as a badge; failing ones say how often in a row."""

    def __init__(self, **kwargs):
        super().__init__(accessor=tables.A("pk"), orderable=False, **kwargs)

    def render(self, record):
        health = sync_health(record)
        repeated = f" ×{health.failures_in_a_row}" if health.failures_in_a_row > 1 else ""
        return format_html(
            '<span class="badge text-bg-{}" title="{}">{}{}</span>',
            health.color,
            health.last_error,
            health.label,
            repeated,
        )

    def value(self, record):
        return sync_health(record).state


class LiveLagColumn(tables.Column):
    """How far NetBox trailed Proxmox in the latest live-sync run."""

    def __init__(self, **kwargs):
        super().__init__(accessor=tables.A("pk"), orderable=False, **kwargs)

    def render(self, record):
        lag = sync_health(record).live_lag
        if lag is None:
            return self.default
        return f"{lag:.1f} s"

    def value(self, record):
        lag = sync_health(record).live_lag
        return "" if lag is None else lag


class ProxmoxEndpointTable(TenancyColumnsMixin, ViewerAwareTable):
    # No column exposes the token secret (tables drive CSV/YAML exports).
    name = tables.Column(linkify=True)
    mode = columns.ChoiceFieldColumn()
    enabled = columns.BooleanColumn()
    verify_tls = columns.BooleanColumn(verbose_name=_("Verify TLS"))
    site = tables.Column(linkify=True)
    node_device_type = tables.Column(linkify=True, verbose_name=_("Node device type"))
    netbox_cluster = VisibleRelationColumn(verbose_name=_("Native cluster"))
    sync_health = SyncHealthColumn(verbose_name=_("Sync health"))
    last_success = columns.DateTimeColumn(
        accessor="health_last_success", verbose_name=_("Last successful sync")
    )
    sync_failures = tables.Column(
        accessor="health_failures", verbose_name=_("Failed syncs in a row")
    )
    next_sync = columns.DateTimeColumn(accessor="health_next_run", verbose_name=_("Next sync"))
    watch_interval = tables.Column(verbose_name=_("Live sync (s)"))
    live_lag = LiveLagColumn(verbose_name=_("Live sync lag"))
    tags = columns.TagColumn(url_name="plugins:netbox_proxbox:proxmoxendpoint_list")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxEndpoint
        fields = (
            "pk",
            "id",
            "name",
            "host",
            "port",
            "verify_tls",
            "token_id",
            "enabled",
            "mode",
            "site",
            "tenant",
            "tenant_group",
            "node_device_type",
            "netbox_cluster",
            "sync_health",
            "last_success",
            "sync_failures",
            "next_sync",
            "watch_interval",
            "live_lag",
            "description",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = (
            "name",
            "host",
            "port",
            "mode",
            "enabled",
            "site",
            "netbox_cluster",
            "sync_health",
            "last_success",
        )


class ProxmoxClusterTable(ViewerAwareTable):
    # Written by the claim and the sync: the UI has no edit or delete views to link to.
    actions = columns.ActionsColumn(actions=())
    name = tables.Column(linkify=True)
    endpoint = VisibleRelationColumn(verbose_name=_("Endpoint"))
    mode = columns.ChoiceFieldColumn()
    netbox_cluster = VisibleRelationColumn(verbose_name=_("Native cluster"))
    quorate = columns.BooleanColumn()
    tags = columns.TagColumn(url_name="plugins:netbox_proxbox:proxmoxcluster_list")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxCluster
        fields = (
            "pk",
            "id",
            "name",
            "endpoint",
            "cluster_id",
            "mode",
            "netbox_cluster",
            "version",
            "quorate",
            "node_count",
            "last_seen",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = ("name", "endpoint", "cluster_id", "mode", "netbox_cluster", "last_seen")


class ProxboxClusterSyncStateTable(ViewerAwareTable):
    # Written by the claim and the sync: the UI has no edit or delete views to link to.
    actions = columns.ActionsColumn(actions=())
    id = tables.Column(linkify=True)
    cluster = VisibleRelationColumn(verbose_name=_("Native cluster"))
    proxmox_cluster = VisibleRelationColumn(verbose_name=_("Tracking record"))
    status = columns.ChoiceFieldColumn()
    tags = columns.TagColumn(url_name="plugins:netbox_proxbox:proxboxclustersyncstate_list")

    class Meta(NetBoxTable.Meta):
        model = ProxboxClusterSyncState
        fields = (
            "pk",
            "id",
            "cluster",
            "proxmox_cluster",
            "last_sync",
            "status",
            "objects_created",
            "objects_updated",
            "objects_deleted",
            "errors",
            "message",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = ("id", "cluster", "proxmox_cluster", "status", "last_sync", "errors")


class ProxmoxNodeTypeOverrideTable(ViewerAwareTable):
    id = tables.Column(linkify=True)
    endpoint = VisibleRelationColumn(verbose_name=_("Endpoint"))
    node = tables.Column(linkify=True)
    device_type = tables.Column(linkify=True, verbose_name=_("Device type"))
    tags = columns.TagColumn(url_name="plugins:netbox_proxbox:proxmoxnodetypeoverride_list")

    class Meta(NetBoxTable.Meta):
        model = ProxmoxNodeTypeOverride
        fields = (
            "pk",
            "id",
            "endpoint",
            "node",
            "device_type",
            "description",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = ("endpoint", "node", "device_type", "description")
