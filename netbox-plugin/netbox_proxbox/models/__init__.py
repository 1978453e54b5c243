from .clusters import ProxboxClusterSyncState, ProxmoxCluster
from .endpoints import ProxmoxEndpoint
from .node_types import ProxmoxNodeTypeOverride
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

__all__ = (
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
