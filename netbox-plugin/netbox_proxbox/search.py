from netbox.search import SearchIndex

from .models import ProxmoxAssignmentRule, ProxmoxCluster, ProxmoxEndpoint, ProxmoxStorage


class ProxmoxEndpointIndex(SearchIndex):
    model = ProxmoxEndpoint
    fields = (("name", 100), ("host", 110), ("description", 500), ("comments", 5000))
    display_attrs = ("host", "mode", "site", "tenant")


class ProxmoxClusterIndex(SearchIndex):
    model = ProxmoxCluster
    fields = (("name", 100), ("cluster_id", 120))
    display_attrs = ("endpoint", "mode")


class ProxmoxStorageIndex(SearchIndex):
    model = ProxmoxStorage
    fields = (("name", 100), ("node", 110), ("storage_type", 300))
    display_attrs = ("cluster", "node", "storage_type")


class ProxmoxAssignmentRuleIndex(SearchIndex):
    model = ProxmoxAssignmentRule
    fields = (
        ("description", 500),
        ("name_pattern", 300),
        ("proxmox_tag", 300),
        ("pool", 300),
        ("node", 300),
    )
    display_attrs = ("endpoint", "tenant", "vm_role", "platform", "site")


indexes = [
    ProxmoxAssignmentRuleIndex,
    ProxmoxEndpointIndex,
    ProxmoxClusterIndex,
    ProxmoxStorageIndex,
]
