from .clusters import ProxboxClusterSyncState, ProxmoxCluster
from .endpoints import ProxmoxEndpoint
from .inventory import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxHAGroup,
    ProxmoxHAResource,
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
    "ProxmoxReplicationJob",
    "ProxmoxSnapshot",
    "ProxmoxStorage",
)
