import django_filters
from dcim.models import Site
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from netbox.filtersets import NetBoxModelFilterSet
from tenancy.filtersets import TenancyFilterSet
from utilities.filtersets import register_filterset
from virtualization.models import Cluster

from .choices import EndpointModeChoices, SyncStatusChoices
from .models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

__all__ = (
    "ProxboxClusterSyncStateFilterSet",
    "ProxmoxClusterFilterSet",
    "ProxmoxEndpointFilterSet",
)


@register_filterset
class ProxmoxEndpointFilterSet(TenancyFilterSet, NetBoxModelFilterSet):
    mode = django_filters.MultipleChoiceFilter(choices=EndpointModeChoices)
    site_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Site.objects.all(), label=_("Site (ID)")
    )
    netbox_cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Cluster.objects.all(), label=_("Native cluster (ID)")
    )

    class Meta:
        model = ProxmoxEndpoint
        fields = ("id", "name", "host", "port", "verify_tls", "token_id", "enabled", "description")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(
            Q(name__icontains=value) | Q(host__icontains=value) | Q(description__icontains=value)
        )


@register_filterset
class ProxmoxClusterFilterSet(NetBoxModelFilterSet):
    endpoint_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxEndpoint.objects.all(), label=_("Endpoint (ID)")
    )
    netbox_cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Cluster.objects.all(), label=_("Native cluster (ID)")
    )
    mode = django_filters.MultipleChoiceFilter(choices=EndpointModeChoices)
    linked = django_filters.BooleanFilter(
        field_name="netbox_cluster", lookup_expr="isnull", exclude=True, label=_("Linked")
    )

    class Meta:
        model = ProxmoxCluster
        fields = ("id", "name", "cluster_id", "version", "quorate", "node_count", "last_seen")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(Q(name__icontains=value) | Q(cluster_id__icontains=value))


@register_filterset
class ProxboxClusterSyncStateFilterSet(NetBoxModelFilterSet):
    cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Cluster.objects.all(), label=_("Native cluster (ID)")
    )
    proxmox_cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxCluster.objects.all(), label=_("Tracking record (ID)")
    )
    status = django_filters.MultipleChoiceFilter(choices=SyncStatusChoices)

    class Meta:
        model = ProxboxClusterSyncState
        fields = (
            "id",
            "last_sync",
            "objects_created",
            "objects_updated",
            "objects_deleted",
            "errors",
        )

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(Q(cluster__name__icontains=value) | Q(message__icontains=value))
