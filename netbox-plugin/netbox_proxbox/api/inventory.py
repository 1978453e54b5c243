"""REST views of the inventory records, written by the sync backend (bulk POST/PATCH/DELETE
by id) and read by anyone allowed to view them."""

from __future__ import annotations

from netbox.api.viewsets import NetBoxModelViewSet

from .. import filtersets
from ..models import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from .serializers import (  # (which loads serializers_inventory after its own classes)
    ProxmoxBackupJobSerializer,
    ProxmoxBackupSerializer,
    ProxmoxHAGroupSerializer,
    ProxmoxHAResourceSerializer,
    ProxmoxHARuleSerializer,
    ProxmoxReplicationJobSerializer,
    ProxmoxSnapshotSerializer,
    ProxmoxStorageSerializer,
)
from .views import ConcurrencyConflictsAs409


class ProxmoxStorageViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxStorage.objects.select_related("cluster", "device")
    serializer_class = ProxmoxStorageSerializer
    filterset_class = filtersets.ProxmoxStorageFilterSet


class ProxmoxBackupViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxBackup.objects.select_related("cluster", "storage", "virtual_machine")
    serializer_class = ProxmoxBackupSerializer
    filterset_class = filtersets.ProxmoxBackupFilterSet


class ProxmoxBackupJobViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxBackupJob.objects.select_related("cluster")
    serializer_class = ProxmoxBackupJobSerializer
    filterset_class = filtersets.ProxmoxBackupJobFilterSet


class ProxmoxSnapshotViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxSnapshot.objects.select_related("cluster", "virtual_machine")
    serializer_class = ProxmoxSnapshotSerializer
    filterset_class = filtersets.ProxmoxSnapshotFilterSet


class ProxmoxReplicationJobViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxReplicationJob.objects.select_related(
        "cluster", "virtual_machine", "target_device"
    )
    serializer_class = ProxmoxReplicationJobSerializer
    filterset_class = filtersets.ProxmoxReplicationJobFilterSet


class ProxmoxHAGroupViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxHAGroup.objects.select_related("cluster")
    serializer_class = ProxmoxHAGroupSerializer
    filterset_class = filtersets.ProxmoxHAGroupFilterSet


class ProxmoxHAResourceViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxHAResource.objects.select_related("cluster", "virtual_machine", "group")
    serializer_class = ProxmoxHAResourceSerializer
    filterset_class = filtersets.ProxmoxHAResourceFilterSet


class ProxmoxHARuleViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxHARule.objects.select_related("cluster").prefetch_related("resources")
    serializer_class = ProxmoxHARuleSerializer
    filterset_class = filtersets.ProxmoxHARuleFilterSet


# REST path → viewset (stable public paths; see README).
ROUTES = (
    ("storages", ProxmoxStorageViewSet),
    ("backups", ProxmoxBackupViewSet),
    ("backup-jobs", ProxmoxBackupJobViewSet),
    ("snapshots", ProxmoxSnapshotViewSet),
    ("replication-jobs", ProxmoxReplicationJobViewSet),
    ("ha-groups", ProxmoxHAGroupViewSet),
    ("ha-resources", ProxmoxHAResourceViewSet),
    ("ha-rules", ProxmoxHARuleViewSet),
)
