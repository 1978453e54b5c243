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


@receiver(pre_delete, sender=Cluster)
def release_native_cluster(sender, instance, **kwargs):
    with concurrency_conflicts_as_retry(_("Deleting the native cluster")):
        locks = InventoryLocks()
        # Endpoint before native cluster, like every writer: the owner read without a lock is
        # only a guess, so it is reloaded once its row is locked and again under the cluster
        # lock. Whichever endpoint a claim made the owner meanwhile would have to be locked
        # after the cluster (the reverse order, a deadlock): refuse instead.
        owner = _owner_of(instance.pk)
        if owner is not None:
            locks.acquire(endpoint_id=owner)
            if _owner_of(instance.pk) != owner:
                raise ConcurrentInventoryChange(_("The native cluster changed owner meanwhile."))
        locks.acquire(cluster_id=instance.pk)
        if _owner_of(instance.pk) != owner:
            raise ConcurrentInventoryChange(_("The native cluster changed owner meanwhile."))
        if owner is not None:
            ProxmoxEndpoint.objects.filter(pk=owner).update(netbox_cluster=None)
        ProxmoxCluster.objects.filter(netbox_cluster_id=instance.pk).update(netbox_cluster=None)
        late = ProxboxClusterSyncState.objects.filter(cluster_id=instance.pk).exclude(
            pk__in=_not_collected(ProxboxClusterSyncState)
        )
        if late.exists():
            late.delete()


@receiver(pre_delete, sender=ProxmoxEndpoint)
def release_endpoint(sender, instance, **kwargs):
    with concurrency_conflicts_as_retry(_("Deleting the endpoint")):
        InventoryLocks().acquire(endpoint_id=instance.pk)
        ProxboxClusterSyncState.objects.filter(proxmox_cluster__endpoint_id=instance.pk).update(
            proxmox_cluster=None
        )
        late = ProxmoxCluster.objects.filter(endpoint_id=instance.pk).exclude(
            pk__in=_not_collected(ProxmoxCluster)
        )
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
