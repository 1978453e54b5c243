"""GraphQL of the inventory records: types, filters and the query fields."""

from typing import TYPE_CHECKING, Annotated

import strawberry
import strawberry_django
from netbox.graphql.filters import NetBoxModelFilter, register_filter
from netbox.graphql.types import NetBoxObjectType, register_type
from strawberry.scalars import ID
from strawberry_django import StrFilterLookup

from .. import models

if TYPE_CHECKING:
    from dcim.graphql.types import DeviceType
    from virtualization.graphql.types import ClusterType, VirtualMachineType

Cluster = Annotated["ClusterType", strawberry.lazy("virtualization.graphql.types")]
VirtualMachine = Annotated["VirtualMachineType", strawberry.lazy("virtualization.graphql.types")]
Device = Annotated["DeviceType", strawberry.lazy("dcim.graphql.types")]


@register_filter(models.ProxmoxStorage, lookups=True)
class ProxmoxStorageFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    name: StrFilterLookup | None = strawberry_django.filter_field()
    node: StrFilterLookup | None = strawberry_django.filter_field()
    storage_type: StrFilterLookup | None = strawberry_django.filter_field()
    shared: bool | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxBackup, lookups=True)
class ProxmoxBackupFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    storage_id: ID | None = strawberry_django.filter_field()
    virtual_machine_id: ID | None = strawberry_django.filter_field()
    volume: StrFilterLookup | None = strawberry_django.filter_field()
    verification: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxBackupJob, lookups=True)
class ProxmoxBackupJobFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    job_id: StrFilterLookup | None = strawberry_django.filter_field()
    enabled: bool | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxSnapshot, lookups=True)
class ProxmoxSnapshotFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    virtual_machine_id: ID | None = strawberry_django.filter_field()
    name: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxReplicationJob, lookups=True)
class ProxmoxReplicationJobFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    virtual_machine_id: ID | None = strawberry_django.filter_field()
    job_id: StrFilterLookup | None = strawberry_django.filter_field()
    state: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxHAGroup, lookups=True)
class ProxmoxHAGroupFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    name: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxHAResource, lookups=True)
class ProxmoxHAResourceFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    virtual_machine_id: ID | None = strawberry_django.filter_field()
    group_id: ID | None = strawberry_django.filter_field()
    sid: StrFilterLookup | None = strawberry_django.filter_field()
    state: StrFilterLookup | None = strawberry_django.filter_field()


@register_filter(models.ProxmoxHARule, lookups=True)
class ProxmoxHARuleFilter(NetBoxModelFilter):
    cluster_id: ID | None = strawberry_django.filter_field()
    name: StrFilterLookup | None = strawberry_django.filter_field()
    rule_type: StrFilterLookup | None = strawberry_django.filter_field()
    affinity: StrFilterLookup | None = strawberry_django.filter_field()
    enabled: bool | None = strawberry_django.filter_field()


@register_type(
    models.ProxmoxStorage, fields="__all__", filters=ProxmoxStorageFilter, pagination=True
)
class ProxmoxStorageType(NetBoxObjectType):
    cluster: Cluster
    device: Device | None
    backups: list[
        Annotated["ProxmoxBackupType", strawberry.lazy("netbox_proxbox.graphql.inventory")]
    ]


@register_type(models.ProxmoxBackup, fields="__all__", filters=ProxmoxBackupFilter, pagination=True)
class ProxmoxBackupType(NetBoxObjectType):
    cluster: Cluster
    storage: Annotated["ProxmoxStorageType", strawberry.lazy("netbox_proxbox.graphql.inventory")]
    virtual_machine: VirtualMachine | None


@register_type(
    models.ProxmoxBackupJob, fields="__all__", filters=ProxmoxBackupJobFilter, pagination=True
)
class ProxmoxBackupJobType(NetBoxObjectType):
    cluster: Cluster


@register_type(
    models.ProxmoxSnapshot, fields="__all__", filters=ProxmoxSnapshotFilter, pagination=True
)
class ProxmoxSnapshotType(NetBoxObjectType):
    cluster: Cluster
    virtual_machine: VirtualMachine


@register_type(
    models.ProxmoxReplicationJob,
    fields="__all__",
    filters=ProxmoxReplicationJobFilter,
    pagination=True,
)
class ProxmoxReplicationJobType(NetBoxObjectType):
    cluster: Cluster
    virtual_machine: VirtualMachine | None
    target_device: Device | None


@register_type(
    models.ProxmoxHAGroup, fields="__all__", filters=ProxmoxHAGroupFilter, pagination=True
)
class ProxmoxHAGroupType(NetBoxObjectType):
    cluster: Cluster
    resources: list[
        Annotated["ProxmoxHAResourceType", strawberry.lazy("netbox_proxbox.graphql.inventory")]
    ]


@register_type(
    models.ProxmoxHAResource, fields="__all__", filters=ProxmoxHAResourceFilter, pagination=True
)
class ProxmoxHAResourceType(NetBoxObjectType):
    cluster: Cluster
    virtual_machine: VirtualMachine | None
    group: (
        Annotated["ProxmoxHAGroupType", strawberry.lazy("netbox_proxbox.graphql.inventory")] | None
    )
    rules: list[Annotated["ProxmoxHARuleType", strawberry.lazy("netbox_proxbox.graphql.inventory")]]


@register_type(models.ProxmoxHARule, fields="__all__", filters=ProxmoxHARuleFilter, pagination=True)
class ProxmoxHARuleType(NetBoxObjectType):
    cluster: Cluster
    resources: list[
        Annotated["ProxmoxHAResourceType", strawberry.lazy("netbox_proxbox.graphql.inventory")]
    ]


@strawberry.type(name="Query")
class InventoryQuery:
    proxmox_storage: ProxmoxStorageType = strawberry_django.field()
    proxmox_storage_list: list[ProxmoxStorageType] = strawberry_django.field()

    proxmox_backup: ProxmoxBackupType = strawberry_django.field()
    proxmox_backup_list: list[ProxmoxBackupType] = strawberry_django.field()

    proxmox_backup_job: ProxmoxBackupJobType = strawberry_django.field()
    proxmox_backup_job_list: list[ProxmoxBackupJobType] = strawberry_django.field()

    proxmox_snapshot: ProxmoxSnapshotType = strawberry_django.field()
    proxmox_snapshot_list: list[ProxmoxSnapshotType] = strawberry_django.field()

    proxmox_replication_job: ProxmoxReplicationJobType = strawberry_django.field()
    proxmox_replication_job_list: list[ProxmoxReplicationJobType] = strawberry_django.field()

    proxmox_ha_group: ProxmoxHAGroupType = strawberry_django.field()
    proxmox_ha_group_list: list[ProxmoxHAGroupType] = strawberry_django.field()

    proxmox_ha_resource: ProxmoxHAResourceType = strawberry_django.field()
    proxmox_ha_resource_list: list[ProxmoxHAResourceType] = strawberry_django.field()

    proxmox_ha_rule: ProxmoxHARuleType = strawberry_django.field()
    proxmox_ha_rule_list: list[ProxmoxHARuleType] = strawberry_django.field()
