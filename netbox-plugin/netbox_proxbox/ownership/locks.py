"""The one lock order every ownership writer follows.

Writers that touch endpoint ownership take row locks in this order, inside a
transaction: endpoint → native cluster → tracking rows → typed sidecar.
Writers that only need a suffix (a sidecar metadata writer takes native
cluster → sidecar) skip the leading ranks but never go backwards, so no two
writers can wait on each other in a cycle. `InventoryLocks.acquire` is the
single place that issues the locks; it refuses out-of-order requests instead
of silently risking a deadlock.

The models' own save() paths take these locks, so this module must not import
`netbox_proxbox.models`: it finds the locked models through Django's app registry,
which is complete before any lock can be taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.apps import apps
from django.db import transaction

RANK_ENDPOINT = 1
RANK_CLUSTER = 2
RANK_TRACKING = 3
RANK_SIDECAR = 4


class LockOrderError(RuntimeError):
    """A writer asked for a lock that ranks before one it already holds (a programming error)."""


@dataclass
class InventoryLocks:
    """Row locks held by one transaction, taken strictly in rank order.

    Within a rank several rows are locked in primary-key order (a deletion locks every
    endpoint with tracking evidence for its cluster, every cluster whose sync state links
    its tracking rows, ...), so two writers locking overlapping sets cannot cross either.
    """

    held_rank: int = 0
    endpoints: list = field(default_factory=list)
    clusters: list = field(default_factory=list)
    tracking: list = field(default_factory=list)
    sidecars: list = field(default_factory=list)

    @property
    def endpoint(self):
        return self.endpoints[0] if self.endpoints else None

    @property
    def cluster(self):
        return self.clusters[0] if self.clusters else None

    @property
    def sidecar(self):
        return self.sidecars[0] if self.sidecars else None

    def _enter(self, rank: int) -> None:
        if rank <= self.held_rank:
            raise LockOrderError(f"lock rank {rank} requested while holding rank {self.held_rank}")
        self.held_rank = rank

    def acquire(
        self,
        *,
        endpoint_id: int | None = None,
        cluster_id: int | None = None,
        tracking_ids: Iterable[int] | None = None,
        sidecar_cluster_id: int | None = None,
        endpoint_ids: Iterable[int] | None = None,
        cluster_ids: Iterable[int] | None = None,
        sidecar_cluster_ids: Iterable[int] | None = None,
    ) -> InventoryLocks:
        """Lock the requested rows (SELECT … FOR UPDATE) in the fixed order and keep fresh copies.

        A requested row that no longer exists is left out (with a single id: recorded as
        None); the caller decides whether a concurrent deletion is a conflict.
        """
        Cluster = apps.get_model("virtualization", "Cluster")
        ProxmoxEndpoint = apps.get_model("netbox_proxbox", "ProxmoxEndpoint")
        ProxmoxCluster = apps.get_model("netbox_proxbox", "ProxmoxCluster")
        ProxboxClusterSyncState = apps.get_model("netbox_proxbox", "ProxboxClusterSyncState")

        if not transaction.get_connection().in_atomic_block:
            raise LockOrderError("inventory locks are only meaningful inside a transaction")
        endpoints = _ids(endpoint_id, endpoint_ids)
        clusters = _ids(cluster_id, cluster_ids)
        sidecars = _ids(sidecar_cluster_id, sidecar_cluster_ids)
        if endpoints is not None:
            self._enter(RANK_ENDPOINT)
            self.endpoints = _locked(ProxmoxEndpoint.objects, "pk", endpoints)
        if clusters is not None:
            self._enter(RANK_CLUSTER)
            self.clusters = _locked(Cluster.objects, "pk", clusters)
        if tracking_ids is not None:
            self._enter(RANK_TRACKING)
            self.tracking = _locked(ProxmoxCluster.objects, "pk", tracking_ids)
        if sidecars is not None:
            self._enter(RANK_SIDECAR)
            self.sidecars = _locked(ProxboxClusterSyncState.objects, "cluster_id", sidecars)
        return self


def _ids(single: int | None, many: Iterable[int] | None) -> list[int] | None:
    if single is None and many is None:
        return None
    ids = set(many or ())
    if single is not None:
        ids.add(single)
    return sorted(ids)


def _locked(manager, key: str, ids: list[int]) -> list:
    if not ids:
        return []
    return list(manager.select_for_update(of=("self",)).filter(**{f"{key}__in": ids}).order_by(key))
