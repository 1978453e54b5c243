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

from django.db.models.signals import post_delete, pre_delete
from django.dispatch import receiver
from virtualization.models import Cluster

from .models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint
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


@receiver(pre_delete, sender=Cluster)
def release_native_cluster(sender, instance, **kwargs):
    owner = (
        ProxmoxEndpoint.objects.filter(netbox_cluster_id=instance.pk)
        .values_list("pk", flat=True)
        .first()
    )
    InventoryLocks().acquire(endpoint_id=owner, cluster_id=instance.pk)
    ProxmoxEndpoint.objects.filter(netbox_cluster_id=instance.pk).update(netbox_cluster=None)
    ProxmoxCluster.objects.filter(netbox_cluster_id=instance.pk).update(netbox_cluster=None)
    late = ProxboxClusterSyncState.objects.filter(cluster_id=instance.pk).exclude(
        pk__in=_not_collected(ProxboxClusterSyncState)
    )
    if late.exists():
        late.delete()


@receiver(pre_delete, sender=ProxmoxEndpoint)
def release_endpoint(sender, instance, **kwargs):
    InventoryLocks().acquire(endpoint_id=instance.pk)
    ProxboxClusterSyncState.objects.filter(proxmox_cluster__endpoint_id=instance.pk).update(
        proxmox_cluster=None
    )
    late = ProxmoxCluster.objects.filter(endpoint_id=instance.pk).exclude(
        pk__in=_not_collected(ProxmoxCluster)
    )
    if late.exists():
        late.delete()
