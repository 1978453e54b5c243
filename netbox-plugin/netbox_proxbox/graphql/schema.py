import strawberry
import strawberry_django

from .types import (
    ProxboxClusterSyncStateType,
    ProxmoxAssignmentRuleType,
    ProxmoxClusterType,
    ProxmoxEndpointType,
    ProxmoxNodeTypeOverrideType,
)


@strawberry.type(name="Query")
class ProxboxQuery:
    proxmox_endpoint: ProxmoxEndpointType = strawberry_django.field()
    proxmox_endpoint_list: list[ProxmoxEndpointType] = strawberry_django.field()

    proxmox_assignment_rule: ProxmoxAssignmentRuleType = strawberry_django.field()
    proxmox_assignment_rule_list: list[ProxmoxAssignmentRuleType] = strawberry_django.field()
    proxmox_node_type_override: ProxmoxNodeTypeOverrideType = strawberry_django.field()
    proxmox_node_type_override_list: list[ProxmoxNodeTypeOverrideType] = strawberry_django.field()

    proxmox_cluster: ProxmoxClusterType = strawberry_django.field()
    proxmox_cluster_list: list[ProxmoxClusterType] = strawberry_django.field()

    proxbox_cluster_sync_state: ProxboxClusterSyncStateType = strawberry_django.field()
    proxbox_cluster_sync_state_list: list[ProxboxClusterSyncStateType] = strawberry_django.field()
