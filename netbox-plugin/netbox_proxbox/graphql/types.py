from typing import TYPE_CHECKING, Annotated

import strawberry
from netbox.graphql.types import NetBoxObjectType, register_type

from .. import models
from .filters import (
    ProxboxClusterSyncStateFilter,
    ProxmoxAssignmentRuleFilter,
    ProxmoxClusterFilter,
    ProxmoxEndpointFilter,
    ProxmoxNodeTypeOverrideFilter,
)

if TYPE_CHECKING:
    from dcim.graphql.types import (
        DeviceRoleType,
        DeviceTypeType,
        LocationType,
        PlatformType,
        SiteType,
    )
    from tenancy.graphql.types import TenantType
    from virtualization.graphql.types import ClusterType

__all__ = (
    "ProxboxClusterSyncStateType",
    "ProxmoxAssignmentRuleType",
    "ProxmoxClusterType",
    "ProxmoxEndpointType",
    "ProxmoxNodeTypeOverrideType",
)


# The ciphertext never leaves the database through GraphQL either.
@register_type(
    models.ProxmoxEndpoint,
    exclude=["token_secret_ciphertext"],
    filters=ProxmoxEndpointFilter,
    pagination=True,
)
class ProxmoxEndpointType(NetBoxObjectType):
    site: Annotated["SiteType", strawberry.lazy("dcim.graphql.types")] | None
    tenant: Annotated["TenantType", strawberry.lazy("tenancy.graphql.types")] | None
    netbox_cluster: Annotated["ClusterType", strawberry.lazy("virtualization.graphql.types")] | None
    node_device_type: Annotated["DeviceTypeType", strawberry.lazy("dcim.graphql.types")] | None
    tracked_clusters: list[
        Annotated["ProxmoxClusterType", strawberry.lazy("netbox_proxbox.graphql.types")]
    ]
    assignment_rules: list[
        Annotated["ProxmoxAssignmentRuleType", strawberry.lazy("netbox_proxbox.graphql.types")]
    ]
    node_type_overrides: list[
        Annotated["ProxmoxNodeTypeOverrideType", strawberry.lazy("netbox_proxbox.graphql.types")]
    ]


@register_type(
    models.ProxmoxNodeTypeOverride,
    fields="__all__",
    filters=ProxmoxNodeTypeOverrideFilter,
    pagination=True,
)
class ProxmoxNodeTypeOverrideType(NetBoxObjectType):
    # Nullable for the same reason as ProxmoxClusterType.endpoint.
    endpoint: (
        Annotated["ProxmoxEndpointType", strawberry.lazy("netbox_proxbox.graphql.types")] | None
    )
    device_type: Annotated["DeviceTypeType", strawberry.lazy("dcim.graphql.types")]


@register_type(
    models.ProxmoxCluster, fields="__all__", filters=ProxmoxClusterFilter, pagination=True
)
class ProxmoxClusterType(NetBoxObjectType):
    # Nullable although the column is not: a caller who may not view the related row gets
    # null for it instead of an error that voids the whole answer.
    endpoint: (
        Annotated["ProxmoxEndpointType", strawberry.lazy("netbox_proxbox.graphql.types")] | None
    )
    netbox_cluster: Annotated["ClusterType", strawberry.lazy("virtualization.graphql.types")] | None


@register_type(
    models.ProxboxClusterSyncState,
    fields="__all__",
    filters=ProxboxClusterSyncStateFilter,
    pagination=True,
)
class ProxboxClusterSyncStateType(NetBoxObjectType):
    # Nullable for the same reason as ProxmoxClusterType.endpoint.
    cluster: Annotated["ClusterType", strawberry.lazy("virtualization.graphql.types")] | None
    proxmox_cluster: (
        Annotated["ProxmoxClusterType", strawberry.lazy("netbox_proxbox.graphql.types")] | None
    )


@register_type(
    models.ProxmoxAssignmentRule,
    fields="__all__",
    filters=ProxmoxAssignmentRuleFilter,
    pagination=True,
)
class ProxmoxAssignmentRuleType(NetBoxObjectType):
    # Nullable for the same reason as ProxmoxClusterType.endpoint.
    endpoint: (
        Annotated["ProxmoxEndpointType", strawberry.lazy("netbox_proxbox.graphql.types")] | None
    )
    tenant: Annotated["TenantType", strawberry.lazy("tenancy.graphql.types")] | None
    vm_role: Annotated["DeviceRoleType", strawberry.lazy("dcim.graphql.types")] | None
    platform: Annotated["PlatformType", strawberry.lazy("dcim.graphql.types")] | None
    site: Annotated["SiteType", strawberry.lazy("dcim.graphql.types")] | None
    location: Annotated["LocationType", strawberry.lazy("dcim.graphql.types")] | None
