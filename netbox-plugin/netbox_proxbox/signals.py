"""Deletion semantics under concurrency.

Django collects an object's dependants before sending pre_delete, so a claim that
commits in between (a new tracking row, link or sidecar) would otherwise leave a
dangling reference and fail the deletion at commit. The handlers below take the
ownership locks in the standard order, then sweep what was added after collection.

- Deleting a native cluster keeps its endpoint: the relation and the tracking links
  are cleared; the typed sidecar goes with the cluster.
- Deleting an endpoint keeps its native cluster; its tracking rows go with it and the
  sidecar's ownership link is cleared.
"""

from __future__ import annotations

from contextvars import ContextVar

from core.signals import handle_deleted_object
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver
from django.utils.translation import gettext as _
from virtualization.models import Cluster

from .models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint
from .ownership.errors import ConcurrentInventoryChange, concurrency_conflicts_as_retry
from .ownership.locks import InventoryLocks

# Rows already collected for deletion in this context (thread or task): sweeping
# them again would log a second deletion.
_collected: ContextVar[frozenset] = ContextVar(
    "proxbox_collected_for_deletion", default=frozenset()
)


@receiver(pre_delete, sender=ProxmoxCluster)
@receiver(pre_delete, sender=ProxboxClusterSyncState)
def remember_collected(sender, instance, **kwargs):
    _collected.set(_collected.get() | {(sender, instance.pk)})


@receiver(post_delete, sender=ProxmoxCluster)
@receiver(post_delete, sender=ProxboxClusterSyncState)
def forget_collected(sender, instance, **kwargs):
    _collected.set(_collected.get() - {(sender, instance.pk)})


def _not_collected(model) -> list[int]:
    return [pk for (sender, pk) in _collected.get() if sender is model]


def _owner_of(cluster_pk) -> int | None:
    return (
        ProxmoxEndpoint.objects.filter(netbox_cluster_id=cluster_pk)
        .values_list("pk", flat=True)
        .first()
    )


def _endpoints_of(cluster_pk) -> set[int]:
    """The owner and every endpoint whose tracking rows link the native cluster."""
    owner = _owner_of(cluster_pk)
    evidence = set(
        ProxmoxCluster.objects.filter(netbox_cluster_id=cluster_pk).values_list(
            "endpoint_id", flat=True
        )
    )
    return evidence | ({owner} if owner is not None else set())


def release_native_cluster(sender, instance, **kwargs):
    with concurrency_conflicts_as_retry(_("Deleting the native cluster")):
        # Endpoint before native cluster, like every writer: the endpoints read without a
        # lock are only a guess, so they are read again under the cluster lock. A claim that
        # made another endpoint the owner (or linked its tracking) meanwhile would need that
        # endpoint locked after the cluster (the reverse order, a deadlock): refuse instead.
        owner = _owner_of(instance.pk)
        endpoints = _endpoints_of(instance.pk)
        locks = InventoryLocks().acquire(endpoint_ids=endpoints, cluster_id=instance.pk)
        if _owner_of(instance.pk) != owner or not _endpoints_of(instance.pk) <= endpoints:
            raise ConcurrentInventoryChange(_("The native cluster changed owner meanwhile."))
        linked = ProxmoxCluster.objects.filter(netbox_cluster_id=instance.pk)
        locks.acquire(
            tracking_ids=linked.values_list("pk", flat=True), sidecar_cluster_id=instance.pk
        )
        if owner is not None:
            ProxmoxEndpoint.objects.filter(pk=owner).update(netbox_cluster=None)
        # Saved one by one (under the locks already held) so that each keeps its change record.
        for tracking in locks.tracking:
            tracking.snapshot()
            tracking.netbox_cluster = None
            tracking.save()
        late = ProxboxClusterSyncState.objects.filter(cluster_id=instance.pk).exclude(
            pk__in=_not_collected(ProxboxClusterSyncState)
        )
        if late.exists():
            late.delete()


# NetBox's own pre_delete handler records the deletion and, inside a request, saves every
# tracking row that links the cluster to clear the link. Each of those saves locks its
# endpoint; after the first one holds the cluster, a second endpoint would be locked after
# the cluster. So the plugin's handler runs first and takes all locks in order (and clears
# the links itself, leaving NetBox's handler nothing to save).
pre_delete.disconnect(handle_deleted_object)
pre_delete.connect(release_native_cluster, sender=Cluster, dispatch_uid="proxbox-release-cluster")
pre_delete.connect(handle_deleted_object)


@receiver(pre_delete, sender=ProxmoxEndpoint)
def release_endpoint(sender, instance, **kwargs):
    with concurrency_conflicts_as_retry(_("Deleting the endpoint")):
        # Endpoint, native clusters, tracking rows, sidecars: the sync states that link this
        # endpoint's tracking rows are only changed by writers holding this endpoint's lock,
        # so the set read after taking it stays put.
        locks = InventoryLocks().acquire(endpoint_id=instance.pk)
        tracking = ProxmoxCluster.objects.filter(endpoint_id=instance.pk)
        clusters = set(
            ProxboxClusterSyncState.objects.filter(
                proxmox_cluster__endpoint_id=instance.pk
            ).values_list("cluster_id", flat=True)
        )
        locks.acquire(
            cluster_ids=clusters,
            tracking_ids=tracking.values_list("pk", flat=True),
            sidecar_cluster_ids=clusters,
        )
        ProxboxClusterSyncState.objects.filter(proxmox_cluster__endpoint_id=instance.pk).update(
            proxmox_cluster=None
        )
        late = tracking.exclude(pk__in=_not_collected(ProxmoxCluster))
        if late.exists():
            late.delete()


@receiver(post_save, sender=ProxmoxEndpoint)
def keep_sync_schedule(sender, instance, raw=False, **kwargs):
    """An endpoint's interval or enabled flag changed: its recurring Job follows on commit."""
    if raw:
        return
    from .sync.schedules import ensure_schedule, recurring_jobs

    pk = instance.pk

    def follow():
        endpoint = ProxmoxEndpoint.objects.filter(pk=pk).first()
        # Most endpoints have no schedule: skip the schedule lock for them.
        if endpoint is not None and (endpoint.sync_interval or recurring_jobs(endpoint).exists()):
            ensure_schedule(endpoint)

    transaction.on_commit(follow)
