import copy

import django_filters
from dcim.models import Device, DeviceRole, DeviceType, Location, Platform, Site
from django.core.exceptions import ValidationError
from django.db import DataError, connection, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from ipam.models import VRF
from netbox.filtersets import NetBoxModelFilterSet
from tenancy.filtersets import TenancyFilterSet
from utilities.filtersets import register_filterset
from virtualization.models import Cluster, VirtualMachine

from .choices import (
    BackupVerificationChoices,
    EndpointModeChoices,
    HARuleAffinityChoices,
    HARuleTypeChoices,
    HAStateChoices,
    ReplicationStateChoices,
    SyncStatusChoices,
)
from .models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxNodeTypeOverride,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from .models.assignment import MATCHER_FIELDS, TEXT_MATCHERS

__all__ = (
    "ProxmoxAssignmentRuleFilterSet",
    "ProxboxClusterSyncStateFilterSet",
    "ProxmoxBackupFilterSet",
    "ProxmoxBackupJobFilterSet",
    "ProxmoxClusterFilterSet",
    "ProxmoxEndpointFilterSet",
    "ProxmoxHAGroupFilterSet",
    "ProxmoxHAResourceFilterSet",
    "ProxmoxHARuleFilterSet",
    "ProxmoxNodeTypeOverrideFilterSet",
    "ProxmoxReplicationJobFilterSet",
    "ProxmoxSnapshotFilterSet",
    "ProxmoxStorageFilterSet",
)


# Lookups whose value "null" is a real search term; django-filter maps "null" to None
# for every multi-value filter, and NetBox core answers `?name__ic=null` with a 500.
LOOKUPS_WITH_A_NULL_MEANING = {"exact", "iexact", "isnull"}


REGEX_LOOKUPS = {"regex", "iregex"}


def validate_postgresql_regex(pattern: str) -> None:
    """PostgreSQL compiles `__regex` patterns itself and fails the whole query on a bad one
    (NetBox core answers 500); asking it first turns that into a 400 naming the filter."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT '' ~ %s", [pattern])
    except (DataError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(
            _("Invalid regular expression: {error}").format(error=message)
        ) from None


class PluginFilterSet(NetBoxModelFilterSet):
    """NetBox's model filterset, with "null" read literally by text and range lookups and
    regular expressions checked before they reach the query."""

    @classmethod
    def get_filters(cls):
        filters = super().get_filters()
        for name, query_filter in filters.items():
            lookup = getattr(query_filter, "lookup_expr", "exact")
            if hasattr(query_filter, "null_value") and lookup not in LOOKUPS_WITH_A_NULL_MEANING:
                # A copy: inherited declared filters are shared with NetBox's own filtersets.
                filters[name] = copy.copy(query_filter)
                filters[name].null_value = None
            if lookup in REGEX_LOOKUPS:
                filters[name] = copy.copy(filters[name])
                validators = [*filters[name].extra.get("validators", ()), validate_postgresql_regex]
                filters[name].extra = {**filters[name].extra, "validators": validators}
        return filters


@register_filterset
class ProxmoxEndpointFilterSet(TenancyFilterSet, PluginFilterSet):
    mode = django_filters.MultipleChoiceFilter(choices=EndpointModeChoices)
    site_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Site.objects.all(), label=_("Site (ID)")
    )
    netbox_cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Cluster.objects.all(), label=_("Native cluster (ID)")
    )
    vrf_id = django_filters.ModelMultipleChoiceFilter(
        queryset=VRF.objects.all(), label=_("VRF (ID)")
    )
    vm_role_id = django_filters.ModelMultipleChoiceFilter(
        queryset=DeviceRole.objects.all(), label=_("Default VM role (ID)")
    )
    node_device_type_id = django_filters.ModelMultipleChoiceFilter(
        queryset=DeviceType.objects.all(), label=_("Node device type (ID)")
    )

    class Meta:
        model = ProxmoxEndpoint
        fields = (
            "id",
            "name",
            "host",
            "port",
            "verify_tls",
            "token_id",
            "enabled",
            "sync_descriptions",
            "watch_interval",
            "description",
        )

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(
            Q(name__icontains=value) | Q(host__icontains=value) | Q(description__icontains=value)
        )


@register_filterset
class ProxmoxAssignmentRuleFilterSet(TenancyFilterSet, PluginFilterSet):
    endpoint_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxEndpoint.objects.all(), label=_("Endpoint (ID)")
    )
    vm_role_id = django_filters.ModelMultipleChoiceFilter(
        queryset=DeviceRole.objects.all(), label=_("VM role (ID)")
    )
    platform_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Platform.objects.all(), label=_("Platform (ID)")
    )
    site_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Site.objects.all(), label=_("Site (ID)")
    )
    location_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Location.objects.all(), label=_("Location (ID)")
    )

    class Meta:
        model = ProxmoxAssignmentRule
        fields = ("id", "weight", "enabled", "description", *MATCHER_FIELDS)

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        query = Q()
        for field in ("description", *TEXT_MATCHERS):
            query |= Q(**{f"{field}__icontains": value})
        return queryset.filter(query)


@register_filterset
class ProxmoxNodeTypeOverrideFilterSet(PluginFilterSet):
    endpoint_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxEndpoint.objects.all(), label=_("Endpoint (ID)")
    )
    device_type_id = django_filters.ModelMultipleChoiceFilter(
        queryset=DeviceType.objects.all(), label=_("Device type (ID)")
    )

    class Meta:
        model = ProxmoxNodeTypeOverride
        fields = ("id", "node", "description")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(Q(node__icontains=value) | Q(description__icontains=value))


@register_filterset
class ProxmoxClusterFilterSet(PluginFilterSet):
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
class ProxboxClusterSyncStateFilterSet(PluginFilterSet):
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


#
# Inventory records
#


class InventoryFilterSet(PluginFilterSet):
    """Every inventory record is filtered by its native cluster (the backend reads that way)."""

    cluster_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Cluster.objects.all(), label=_("Cluster (ID)")
    )
    search_fields: tuple[str, ...] = ()

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        query = Q()
        for field in self.search_fields:
            query |= Q(**{f"{field}__icontains": value})
        return queryset.filter(query)


def _vm_filter():
    return django_filters.ModelMultipleChoiceFilter(
        queryset=VirtualMachine.objects.all(), label=_("Virtual machine (ID)")
    )


@register_filterset
class ProxmoxStorageFilterSet(InventoryFilterSet):
    device_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Device.objects.all(), label=_("Node device (ID)")
    )
    search_fields = ("name", "node", "storage_type")

    class Meta:
        model = ProxmoxStorage
        fields = ("id", "name", "node", "storage_type", "shared", "enabled")


@register_filterset
class ProxmoxBackupFilterSet(InventoryFilterSet):
    storage_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxStorage.objects.all(), label=_("Storage (ID)")
    )
    virtual_machine_id = _vm_filter()
    verification = django_filters.MultipleChoiceFilter(choices=BackupVerificationChoices)
    search_fields = ("volume", "notes")

    class Meta:
        model = ProxmoxBackup
        fields = ("id", "volume", "vmid", "backup_time", "format")


@register_filterset
class ProxmoxBackupJobFilterSet(InventoryFilterSet):
    search_fields = ("job_id", "schedule", "storage", "comment")

    class Meta:
        model = ProxmoxBackupJob
        fields = ("id", "job_id", "enabled", "schedule", "storage", "node", "mode")


@register_filterset
class ProxmoxSnapshotFilterSet(InventoryFilterSet):
    virtual_machine_id = _vm_filter()
    search_fields = ("name", "description")

    class Meta:
        model = ProxmoxSnapshot
        fields = ("id", "name", "parent", "vmstate", "snapshot_time")


@register_filterset
class ProxmoxReplicationJobFilterSet(InventoryFilterSet):
    virtual_machine_id = _vm_filter()
    target_device_id = django_filters.ModelMultipleChoiceFilter(
        queryset=Device.objects.all(), label=_("Target device (ID)")
    )
    state = django_filters.MultipleChoiceFilter(choices=ReplicationStateChoices)
    search_fields = ("job_id", "target", "error")

    class Meta:
        model = ProxmoxReplicationJob
        fields = ("id", "job_id", "vmid", "target", "enabled", "last_sync", "fail_count")


@register_filterset
class ProxmoxHAGroupFilterSet(InventoryFilterSet):
    search_fields = ("name", "nodes", "comment")

    class Meta:
        model = ProxmoxHAGroup
        fields = ("id", "name", "restricted", "nofailback")


@register_filterset
class ProxmoxHAResourceFilterSet(InventoryFilterSet):
    virtual_machine_id = _vm_filter()
    group_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ProxmoxHAGroup.objects.all(), label=_("Group (ID)")
    )
    rule_id = django_filters.ModelMultipleChoiceFilter(
        field_name="rules", queryset=ProxmoxHARule.objects.all(), label=_("Rule (ID)")
    )
    state = django_filters.MultipleChoiceFilter(choices=HAStateChoices)
    search_fields = ("sid", "comment")

    class Meta:
        model = ProxmoxHAResource
        fields = ("id", "sid", "vmid", "max_restart", "max_relocate")


@register_filterset
class ProxmoxHARuleFilterSet(InventoryFilterSet):
    rule_type = django_filters.MultipleChoiceFilter(choices=HARuleTypeChoices)
    affinity = django_filters.MultipleChoiceFilter(choices=HARuleAffinityChoices)
    resource_id = django_filters.ModelMultipleChoiceFilter(
        field_name="resources",
        queryset=ProxmoxHAResource.objects.all(),
        label=_("Resource (ID)"),
    )
    search_fields = ("name", "nodes", "comment", "errors")

    class Meta:
        model = ProxmoxHARule
        fields = ("id", "name", "strict", "enabled")
