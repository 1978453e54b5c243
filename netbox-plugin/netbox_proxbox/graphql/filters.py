from typing import Annotated

import strawberry
import strawberry_django
from netbox.graphql.filters import NetBoxModelFilter, register_filter
from strawberry.scalars import ID
from strawberry_django import StrFilterLookup

from .. import models

__all__ = (
    "ProxmoxAssignmentRuleFilter",
    "ProxboxClusterSyncStateFilter",
    "ProxmoxClusterFilter",
    "ProxmoxEndpointFilter",
    "ProxmoxNodeTypeOverrideFilter",
)


@register_filter(models.ProxmoxEndpoint, lookups=True)
class ProxmoxEndpointFilter(NetBoxModelFilter):
    name: StrFilterLookup | None = strawberry_django.filter_field()
    host: StrFilterLookup | None = strawberry_django.filter_field()
    token_id: StrFilterLookup | None = strawberry_django.filter_field()
    enabled: bool | None = strawberry_django.filter_field()
    mode: StrFilterLookup | None = strawberry_django.filter_field()
    site_id: ID | None = strawberry_django.filter_field()
    tenant_id: ID | None = strawberry_django.filter_field()
    netbox_cluster_id: ID | None = strawberry_django.filter_field()
    node_device_type_id: ID | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxNodeTypeOverride, lookups=True)
class ProxmoxNodeTypeOverrideFilter(NetBoxModelFilter):
    endpoint: (
        Annotated["ProxmoxEndpointFilter", strawberry.lazy("netbox_proxbox.graphql.filters")] | None
    ) = strawberry_django.filter_field()
    endpoint_id: ID | None = strawberry_django.filter_field()
    node: StrFilterLookup | None = strawberry_django.filter_field()
    device_type_id: ID | None = strawberry_django.filter_field()
    description: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxCluster, lookups=True)
class ProxmoxClusterFilter(NetBoxModelFilter):
    endpoint: (
        Annotated["ProxmoxEndpointFilter", strawberry.lazy("netbox_proxbox.graphql.filters")] | None
    ) = strawberry_django.filter_field()
    endpoint_id: ID | None = strawberry_django.filter_field()
    name: StrFilterLookup | None = strawberry_django.filter_field()
    cluster_id: StrFilterLookup | None = strawberry_django.filter_field()
    mode: StrFilterLookup | None = strawberry_django.filter_field()
    netbox_cluster_id: ID | None = strawberry_django.filter_field()


@register_filter(models.ProxboxClusterSyncState, lookups=True)
class ProxboxClusterSyncStateFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    proxmox_cluster_id: ID | None = strawberry_django.filter_field()
    status: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxAssignmentRule, lookups=True)
class ProxmoxAssignmentRuleFilter(NetBoxModelFilter):
    endpoint: (
        Annotated["ProxmoxEndpointFilter", strawberry.lazy("netbox_proxbox.graphql.filters")] | None
    ) = strawberry_django.filter_field()
    endpoint_id: ID | None = strawberry_django.filter_field()
    enabled: bool | None = strawberry_django.filter_field()
    description: StrFilterLookup | None = strawberry_django.filter_field()
    name_pattern: StrFilterLookup | None = strawberry_django.filter_field()
    proxmox_tag: StrFilterLookup | None = strawberry_django.filter_field()
    pool: StrFilterLookup | None = strawberry_django.filter_field()
    node: StrFilterLookup | None = strawberry_django.filter_field()
    tenant_id: ID | None = strawberry_django.filter_field()
    vm_role_id: ID | None = strawberry_django.filter_field()
    platform_id: ID | None = strawberry_django.filter_field()
    site_id: ID | None = strawberry_django.filter_field()
    location_id: ID | None = strawberry_django.filter_field()
