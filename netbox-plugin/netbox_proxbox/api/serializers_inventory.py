"""REST representations of the inventory records (storages, backups, backup jobs,
snapshots, replication, HA). References to native objects and to the HA resources a rule
lists must be visible to the writer, as everywhere in this plugin."""

from __future__ import annotations

from dcim.api.serializers_.devices import DeviceSerializer
from django.utils.translation import gettext as _
from netbox.api.fields import ChoiceField, SerializedPKRelatedField
from netbox.api.serializers import NetBoxModelSerializer
from rest_framework import serializers
from virtualization.api.serializers_.clusters import ClusterSerializer
from virtualization.api.serializers_.virtualmachines import VirtualMachineSerializer

from ..choices import (
    BackupVerificationChoices,
    HARuleAffinityChoices,
    HARuleTypeChoices,
    HAStateChoices,
    ReplicationStateChoices,
)
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
from .payloads import NulFreePayloadMixin
from .visibility import VisibleReferencesMixin

__all__ = (
    "ProxmoxBackupJobSerializer",
    "ProxmoxBackupSerializer",
    "ProxmoxHAGroupSerializer",
    "ProxmoxHAResourceSerializer",
    "ProxmoxHARuleSerializer",
    "ProxmoxReplicationJobSerializer",
    "ProxmoxSnapshotSerializer",
    "ProxmoxStorageSerializer",
)

COMMON = ("id", "url", "display_url", "display", "cluster")
TRAILER = ("tags", "custom_fields", "created", "last_updated")


class InventorySerializer(NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer):
    visible_references = ("cluster", "virtual_machine", "device", "target_device")

    cluster = ClusterSerializer(nested=True)


class ProxmoxStorageSerializer(InventorySerializer):
    device = DeviceSerializer(nested=True, required=False, allow_null=True)

    class Meta:
        model = ProxmoxStorage
        fields = (
            *COMMON,
            "name",
            "node",
            "device",
            "storage_type",
            "content",
            "shared",
            "enabled",
            "capacity",
            "used",
            *TRAILER,
        )
        brief_fields = ("display", "id", "name", "node", "url")


class ProxmoxBackupSerializer(InventorySerializer):
    storage = ProxmoxStorageSerializer(nested=True)
    virtual_machine = VirtualMachineSerializer(nested=True, required=False, allow_null=True)
    verification = ChoiceField(choices=BackupVerificationChoices, required=False)

    class Meta:
        model = ProxmoxBackup
        fields = (
            *COMMON,
            "storage",
            "volume",
            "vmid",
            "virtual_machine",
            "backup_time",
            "size",
            "format",
            "verification",
            "notes",
            *TRAILER,
        )
        brief_fields = ("display", "id", "url", "volume")


class ProxmoxBackupJobSerializer(InventorySerializer):
    class Meta:
        model = ProxmoxBackupJob
        fields = (
            *COMMON,
            "job_id",
            "enabled",
            "schedule",
            "selection",
            "select_all",
            "vmids",
            "exclude",
            "pool",
            "pool_vmids",
            "storage",
            "node",
            "mode",
            "retention",
            "comment",
            *TRAILER,
        )
        brief_fields = ("display", "id", "job_id", "url")


class ProxmoxSnapshotSerializer(InventorySerializer):
    virtual_machine = VirtualMachineSerializer(nested=True)

    class Meta:
        model = ProxmoxSnapshot
        fields = (
            *COMMON,
            "virtual_machine",
            "name",
            "parent",
            "snapshot_time",
            "vmstate",
            "description",
            *TRAILER,
        )
        brief_fields = ("display", "id", "name", "url")


class ProxmoxReplicationJobSerializer(InventorySerializer):
    virtual_machine = VirtualMachineSerializer(nested=True, required=False, allow_null=True)
    target_device = DeviceSerializer(nested=True, required=False, allow_null=True)
    state = ChoiceField(choices=ReplicationStateChoices, required=False)

    class Meta:
        model = ProxmoxReplicationJob
        fields = (
            *COMMON,
            "job_id",
            "vmid",
            "virtual_machine",
            "target",
            "target_device",
            "schedule",
            "enabled",
            "last_sync",
            "state",
            "fail_count",
            "error",
            *TRAILER,
        )
        brief_fields = ("display", "id", "job_id", "url")


class ProxmoxHAGroupSerializer(InventorySerializer):
    class Meta:
        model = ProxmoxHAGroup
        fields = (
            *COMMON,
            "name",
            "nodes",
            "restricted",
            "nofailback",
            "comment",
            *TRAILER,
        )
        brief_fields = ("display", "id", "name", "url")


class ProxmoxHAResourceSerializer(InventorySerializer):
    virtual_machine = VirtualMachineSerializer(nested=True, required=False, allow_null=True)
    group = ProxmoxHAGroupSerializer(nested=True, required=False, allow_null=True)
    state = ChoiceField(choices=HAStateChoices, required=False)

    class Meta:
        model = ProxmoxHAResource
        fields = (
            *COMMON,
            "sid",
            "vmid",
            "virtual_machine",
            "state",
            "group",
            "max_restart",
            "max_relocate",
            "comment",
            *TRAILER,
        )
        brief_fields = ("display", "id", "sid", "url")


class ProxmoxHARuleSerializer(InventorySerializer):
    visible_references = (*InventorySerializer.visible_references, "resources")

    rule_type = ChoiceField(choices=HARuleTypeChoices)
    affinity = ChoiceField(choices=HARuleAffinityChoices, required=False)
    resources = SerializedPKRelatedField(
        queryset=ProxmoxHAResource.objects.all(),
        serializer=ProxmoxHAResourceSerializer,
        nested=True,
        required=False,
        many=True,
    )

    class Meta:
        model = ProxmoxHARule
        fields = (
            *COMMON,
            "name",
            "rule_type",
            "affinity",
            "nodes",
            "strict",
            "enabled",
            "errors",
            "comment",
            "resources",
            *TRAILER,
        )
        brief_fields = ("display", "id", "name", "url")

    def validate(self, data):
        """A rule lists HA resources of its own cluster only."""
        data = super().validate(data)
        if self.nested:
            return data
        cluster = data.get("cluster") or getattr(self.instance, "cluster", None)
        foreign = [r.sid for r in data.get("resources") or () if r.cluster_id != cluster.pk]
        if foreign:
            raise serializers.ValidationError(
                {
                    "resources": [
                        _("HA resources of another cluster: {sids}").format(
                            sids=", ".join(sorted(foreign))
                        )
                    ]
                }
            )
        return data
