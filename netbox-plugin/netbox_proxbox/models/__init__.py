from .clusters import ProxboxClusterSyncState, ProxmoxCluster
from .endpoints import ProxmoxEndpoint

__all__ = ("ProxboxClusterSyncState", "ProxmoxCluster", "ProxmoxEndpoint")
