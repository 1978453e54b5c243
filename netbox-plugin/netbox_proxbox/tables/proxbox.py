import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import NetBoxTable, columns
from tenancy.tables import TenancyColumnsMixin

from ..models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

__all__ = ("ProxboxClusterSyncStateTable", "ProxmoxClusterTable", "ProxmoxEndpointTable")


class ProxmoxEndpointTable(TenancyColumnsMixin, NetBoxTable):
    # No column exposes the token secret (tables drive CSV/YAML exports).
    name = tables.Column(linkify=True)
    mode = columns.ChoiceFieldColumn()
    enabled = columns.BooleanColumn()
    verify_tls = columns.BooleanColumn(verbose_name=_("Verify TLS"))
    site = tables.Column(linkify=True)
    netbox_cluster = tables.Column(linkify=True, verbose_name=_("Native cluster"))
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
            "netbox_cluster",
            "description",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = ("name", "host", "port", "mode", "enabled", "site", "netbox_cluster")


class ProxmoxClusterTable(NetBoxTable):
    name = tables.Column(linkify=True)
    endpoint = tables.Column(linkify=True)
    mode = columns.ChoiceFieldColumn()
    netbox_cluster = tables.Column(linkify=True, verbose_name=_("Native cluster"))
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


class ProxboxClusterSyncStateTable(NetBoxTable):
    id = tables.Column(linkify=True)
    cluster = tables.Column(linkify=True, verbose_name=_("Native cluster"))
    proxmox_cluster = tables.Column(linkify=True, verbose_name=_("Tracking record"))
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
