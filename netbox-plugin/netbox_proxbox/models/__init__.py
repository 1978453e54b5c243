from .assignment import ProxmoxAssignmentRule
from .clusters import ProxboxClusterSyncState, ProxmoxCluster
from .endpoints import ProxmoxEndpoint
from .inventory import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from .node_types import ProxmoxNodeTypeOverride

__all__ = (
    "ProxmoxAssignmentRule",
    "ProxboxClusterSyncState",
    "ProxmoxBackup",
    "ProxmoxBackupJob",
    "ProxmoxCluster",
    "ProxmoxEndpoint",
    "ProxmoxHAGroup",
    "ProxmoxHAResource",
    "ProxmoxHARule",
    "ProxmoxNodeTypeOverride",
    "ProxmoxReplicationJob",
    "ProxmoxSnapshot",
    "ProxmoxStorage",
)
