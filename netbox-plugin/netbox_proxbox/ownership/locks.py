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
    """Row locks held by one transaction, taken strictly in rank order."""

    held_rank: int = 0
    endpoint: object | None = None
    cluster: object | None = None
    tracking: list = field(default_factory=list)
    sidecar: object | None = None

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
    ) -> InventoryLocks:
        """Lock the requested rows (SELECT … FOR UPDATE) in the fixed order and keep fresh copies.

        A requested row that no longer exists is recorded as None (the caller
        decides whether a concurrent deletion is a conflict).
        """
        Cluster = apps.get_model("virtualization", "Cluster")
        ProxmoxEndpoint = apps.get_model("netbox_proxbox", "ProxmoxEndpoint")
        ProxmoxCluster = apps.get_model("netbox_proxbox", "ProxmoxCluster")
        ProxboxClusterSyncState = apps.get_model("netbox_proxbox", "ProxboxClusterSyncState")

        if not transaction.get_connection().in_atomic_block:
            raise LockOrderError("inventory locks are only meaningful inside a transaction")
        if endpoint_id is not None:
            self._enter(RANK_ENDPOINT)
            self.endpoint = (
                ProxmoxEndpoint.objects.select_for_update(of=("self",))
                .filter(pk=endpoint_id)
                .first()
            )
        if cluster_id is not None:
            self._enter(RANK_CLUSTER)
            self.cluster = (
                Cluster.objects.select_for_update(of=("self",)).filter(pk=cluster_id).first()
            )
        if tracking_ids is not None:
            self._enter(RANK_TRACKING)
            self.tracking = list(
                ProxmoxCluster.objects.select_for_update(of=("self",))
                .filter(pk__in=sorted(set(tracking_ids)))
                .order_by("pk")
            )
        if sidecar_cluster_id is not None:
            self._enter(RANK_SIDECAR)
            self.sidecar = (
                ProxboxClusterSyncState.objects.select_for_update(of=("self",))
                .filter(cluster_id=sidecar_cluster_id)
                .first()
            )
        return self
