"""REST representations. The token secret is write-only; server-owned relations are read-only."""

from __future__ import annotations

from dcim.api.serializers_.devicetypes import DeviceTypeSerializer
from dcim.api.serializers_.platforms import PlatformSerializer
from dcim.api.serializers_.roles import DeviceRoleSerializer
from dcim.api.serializers_.sites import LocationSerializer, SiteSerializer
from dcim.models import Site
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from ipam.api.serializers_.vrfs import VRFSerializer
from netbox.api.fields import ChoiceField
from netbox.api.serializers import NetBoxModelSerializer
from rest_framework import serializers
from tenancy.api.serializers_.tenants import TenantSerializer
from tenancy.models import Tenant
from virtualization.api.serializers_.clusters import ClusterSerializer
from virtualization.models import ClusterType

from ..choices import (
    EndpointModeChoices,
    ProtectedFieldChoices,
    RemovedGuestChoices,
    SyncModeChoices,
    SyncStatusChoices,
)
from ..models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxNodeTypeOverride,
)
from ..models.assignment import RULE_FIELDS
from ..models.compliance import COMPLIANCE_FIELDS
from ..models.endpoints import validate_token_secret
from ..ownership.permissions import visible
from ..sync.schedules import next_scheduled_sync, schedule_state
from .payloads import NulFreePayloadMixin
from .visibility import VisibleReferencesMixin

__all__ = (
    "EndpointCredentialsSerializer",
    "ProxboxClusterSyncStateSerializer",
    "ProxmoxAssignmentRuleSerializer",
    "ProxmoxClusterSerializer",
    "ProxmoxEndpointSerializer",
    "ProxmoxNodeTypeOverrideSerializer",
    "SyncClusterRequestSerializer",
    "SyncClusterResponseSerializer",
    "SyncTargetSerializer",
)


class ViewerOnlyNestedMixin:
    """A nested related object, represented only for callers who may view it (else null).

    The same rule as the detail pages: a record never names or links a related object the
    caller cannot see. Writes still resolve by ID (VisibleReferencesMixin checks those).
    """

    def to_representation(self, instance):
        request = self.context.get("request")
        if request is None:
            return None
        model = type(instance)
        cache = self.context.setdefault("_viewable_related", {})
        key = (model._meta.label, instance.pk)
        if key not in cache:
            cache[key] = visible(request.user, model, instance.pk)
        return super().to_representation(instance) if cache[key] else None


class VisibleNativeClusterSerializer(ViewerOnlyNestedMixin, ClusterSerializer):
    pass


class ProxmoxEndpointSerializer(NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer):
    visible_references = ("site", "tenant", "vrf", "vm_role", "node_device_type")

    mode = ChoiceField(choices=EndpointModeChoices, required=False)
    site = SiteSerializer(nested=True, required=False, allow_null=True)
    tenant = TenantSerializer(nested=True, required=False, allow_null=True)
    netbox_cluster = VisibleNativeClusterSerializer(nested=True, read_only=True, allow_null=True)
    token_secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        validators=[validate_token_secret],
        style={"input_type": "password"},
        help_text=_("Write-only. Omit to keep the stored secret; an empty string removes it."),
    )
    has_token_secret = serializers.BooleanField(read_only=True)
    vrf = VRFSerializer(nested=True, required=False, allow_null=True)
    vm_role = DeviceRoleSerializer(nested=True, required=False, allow_null=True)
    node_device_type = DeviceTypeSerializer(nested=True, required=False, allow_null=True)
    node_device_types = serializers.SerializerMethodField(
        help_text=_(
            "Node name → device type ID of the endpoint's node type overrides (edited as "
            "node type overrides)"
        )
    )
    next_sync = serializers.SerializerMethodField(
        help_text=_("When the schedule runs next (null: no schedule in place)")
    )
    schedule_note = serializers.SerializerMethodField(
        help_text=_("Why a configured schedule does not run (null: it runs or none is set)")
    )

    # Unset ("" stored, null answered and accepted, as the schema documents): the
    # backend's own setting applies.
    removed_guests = ChoiceField(
        choices=RemovedGuestChoices, required=False, allow_blank=True, allow_null=True
    )
    guests_mode = ChoiceField(choices=SyncModeChoices, required=False)
    nodes_mode = ChoiceField(choices=SyncModeChoices, required=False)
    interfaces_mode = ChoiceField(choices=SyncModeChoices, required=False)
    ips_mode = ChoiceField(choices=SyncModeChoices, required=False)
    disks_mode = ChoiceField(choices=SyncModeChoices, required=False)
    vlans_mode = ChoiceField(choices=SyncModeChoices, required=False)
    tags_mode = ChoiceField(choices=SyncModeChoices, required=False)
    records_mode = ChoiceField(choices=SyncModeChoices, required=False)
    sdn_mode = ChoiceField(choices=SyncModeChoices, required=False)
    prefixes_mode = ChoiceField(choices=SyncModeChoices, required=False)
    protected_fields = serializers.ListField(
        child=serializers.ChoiceField(choices=ProtectedFieldChoices), required=False
    )
    sync_policy = serializers.SerializerMethodField(
        help_text=_("The policy as the sync backend applies it (VMID ranges parsed)")
    )

    def validate_removed_guests(self, value):
        return value or ""

    @extend_schema_field(serializers.JSONField())
    def get_sync_policy(self, obj):
        try:
            return obj.policy()
        except ValueError:
            # Only rows written around validation (raw SQL) get here; the backend refuses.
            return None

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_node_device_types(self, obj):
        return obj.node_device_types() if obj.pk else {}

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_next_sync(self, obj):
        when = next_scheduled_sync(obj) if obj.pk else None
        return serializers.DateTimeField().to_representation(when) if when else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_schedule_note(self, obj):
        return schedule_state(obj)

    class Meta:
        model = ProxmoxEndpoint
        fields = (
            "id",
            "url",
            "display_url",
            "display",
            "name",
            "host",
            "port",
            "verify_tls",
            "token_id",
            "token_secret",
            "has_token_secret",
            "enabled",
            "mode",
            "site",
            "tenant",
            "netbox_cluster",
            "vrf",
            "vm_role",
            "node_device_type",
            "node_device_types",
            "sync_descriptions",
            "sync_interval",
            "next_sync",
            "schedule_note",
            "watch_interval",
            "removed_guests",
            "removed_guests_days",
            "sync_templates",
            "guests_mode",
            "nodes_mode",
            "interfaces_mode",
            "ips_mode",
            "disks_mode",
            "vlans_mode",
            "tags_mode",
            "records_mode",
            "sdn_mode",
            "prefixes_mode",
            "protected_fields",
            "keep_operator_objects",
            "adopt_existing",
            "exclude_vmids",
            "exclude_names",
            "exclude_tags",
            "exclude_nodes",
            "exclude_pools",
            # data-protection compliance thresholds
            *COMPLIANCE_FIELDS,
            "sync_policy",
            "description",
            "comments",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("description", "display", "host", "id", "name", "url")


class VisibleEndpointSerializer(ViewerOnlyNestedMixin, ProxmoxEndpointSerializer):
    pass


class ProxmoxAssignmentRuleSerializer(
    NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer
):
    visible_references = ("endpoint", "tenant", "vm_role", "platform", "site", "location")

    endpoint = VisibleEndpointSerializer(nested=True)
    tenant = TenantSerializer(nested=True, required=False, allow_null=True)
    vm_role = DeviceRoleSerializer(nested=True, required=False, allow_null=True)
    platform = PlatformSerializer(nested=True, required=False, allow_null=True)
    site = SiteSerializer(nested=True, required=False, allow_null=True)
    location = LocationSerializer(nested=True, required=False, allow_null=True)
    rule = serializers.SerializerMethodField(
        help_text=_("The rule as the sync backend applies it (related objects by id)")
    )

    @extend_schema_field(serializers.JSONField())
    def get_rule(self, obj):
        return obj.as_rule()

    class Meta:
        model = ProxmoxAssignmentRule
        fields = (
            "id",
            "url",
            "display_url",
            "display",
            *RULE_FIELDS,
            "rule",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("description", "display", "id", "url", "weight")


class ProxmoxNodeTypeOverrideSerializer(
    NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer
):
    visible_references = ("endpoint", "device_type")

    endpoint = VisibleEndpointSerializer(nested=True)
    device_type = DeviceTypeSerializer(nested=True)

    class Meta:
        model = ProxmoxNodeTypeOverride
        fields = (
            "id",
            "url",
            "display_url",
            "display",
            "endpoint",
            "node",
            "device_type",
            "description",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("description", "display", "id", "node", "url")


class ProxmoxClusterSerializer(NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer):
    visible_references = ("endpoint", "netbox_cluster")

    endpoint = VisibleEndpointSerializer(nested=True)
    mode = ChoiceField(choices=EndpointModeChoices, required=False)
    netbox_cluster = VisibleNativeClusterSerializer(nested=True, required=False, allow_null=True)

    class Meta:
        model = ProxmoxCluster
        fields = (
            "id",
            "url",
            "display_url",
            "display",
            "endpoint",
            "name",
            "cluster_id",
            "mode",
            "netbox_cluster",
            "version",
            "quorate",
            "node_count",
            "last_seen",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("cluster_id", "display", "id", "name", "url")


class VisibleTrackingSerializer(ViewerOnlyNestedMixin, ProxmoxClusterSerializer):
    pass


class ProxboxClusterSyncStateSerializer(
    NulFreePayloadMixin, VisibleReferencesMixin, NetBoxModelSerializer
):
    visible_references = ("cluster", "proxmox_cluster")

    cluster = VisibleNativeClusterSerializer(nested=True)
    proxmox_cluster = VisibleTrackingSerializer(nested=True, required=False, allow_null=True)
    status = ChoiceField(choices=SyncStatusChoices, required=False)

    class Meta:
        model = ProxboxClusterSyncState
        fields = (
            "id",
            "url",
            "display_url",
            "display",
            "cluster",
            "proxmox_cluster",
            "last_sync",
            "status",
            "objects_created",
            "objects_updated",
            "objects_deleted",
            "errors",
            "message",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("display", "id", "last_sync", "status", "url")


class VisiblePrimaryKeyField(serializers.PrimaryKeyRelatedField):
    """A primary key resolved only among the objects the caller may view."""

    def get_queryset(self):
        queryset = super().get_queryset()
        request = self.context.get("request")
        return queryset.restrict(request.user, "view") if request is not None else queryset.none()


class SyncClusterRequestSerializer(serializers.Serializer):
    """Body of POST …/endpoints/proxmox/{pk}/sync-cluster/.

    Omitting site or tenant preserves the native cluster's placement; null clears it.
    """

    name = serializers.CharField(max_length=100, trim_whitespace=True)
    mode = serializers.ChoiceField(choices=EndpointModeChoices.values())
    cluster_id = serializers.CharField(
        max_length=100, required=False, allow_blank=True, allow_null=True, default=""
    )
    cluster_type = VisiblePrimaryKeyField(queryset=ClusterType.objects.all())
    site = VisiblePrimaryKeyField(queryset=Site.objects.all(), required=False, allow_null=True)
    tenant = VisiblePrimaryKeyField(queryset=Tenant.objects.all(), required=False, allow_null=True)


class SyncClusterResponseSerializer(serializers.Serializer):
    """Documents the response of the sync-cluster action."""

    cluster = ClusterSerializer(read_only=True)
    proxmox_cluster = serializers.IntegerField(read_only=True)
    created = serializers.BooleanField(read_only=True)
    changed = serializers.BooleanField(read_only=True)


class SyncPreviewSerializer(serializers.Serializer):
    """Documents the preview action: the sync backend's dry-run report (nothing written).

    `plan.object_types` maps each NetBox object type to its `creates` (placeholder, label,
    payload), `updates` (id, label, changes: {field: {old, new}}) and `deletes` (id, label).
    """

    ok = serializers.BooleanField(read_only=True)
    status = serializers.CharField(read_only=True)
    dry_run = serializers.BooleanField(read_only=True)
    error = serializers.CharField(read_only=True, allow_null=True)
    counters = serializers.DictField(read_only=True)
    failures = serializers.ListField(child=serializers.DictField(), read_only=True)
    warnings = serializers.ListField(child=serializers.CharField(), read_only=True)
    plan = serializers.DictField(read_only=True)


class EndpointCredentialsSerializer(serializers.Serializer):
    """Documents GET …/endpoints/proxmox/{pk}/credentials/ (holders of reveal_credentials only)."""

    token_id = serializers.CharField(read_only=True)
    token_secret = serializers.CharField(read_only=True)


class SyncTargetSerializer(serializers.Serializer):
    """Optional body of the sync action: one VM or one node device instead of everything."""

    virtual_machine = serializers.IntegerField(required=False, min_value=1)
    device = serializers.IntegerField(required=False, min_value=1)

    def validate(self, data):
        if "virtual_machine" in data and "device" in data:
            raise serializers.ValidationError(
                {"device": [_("Give a virtual machine or a device, not both.")]}
            )
        return data

    def target_object(self):
        """The named VM or device (unsaved stand-in by ID; visibility is checked later)."""
        from dcim.models import Device
        from virtualization.models import VirtualMachine

        from ..sync.service import SyncNotFound

        for field, model in (("virtual_machine", VirtualMachine), ("device", Device)):
            if field in self.validated_data:
                obj = model.objects.filter(pk=self.validated_data[field]).first()
                if obj is None:
                    raise SyncNotFound(
                        f"No {field.replace('_', ' ')} with ID {self.validated_data[field]}."
                    )
                return obj
        return None


# NetBox finds a model's serializer in this module (`get_serializer_for_model`).
class LiveRunSerializer(NulFreePayloadMixin, serializers.Serializer):
    """A finished run the backend's live-sync watcher started (body of `live-runs`)."""

    # The backend's run id (`GET /runs/{id}` on the backend).
    backend_run = serializers.RegexField(r"^[0-9a-f]{32}$", max_length=32)
    started = serializers.DateTimeField()
    completed = serializers.DateTimeField()
    report = serializers.JSONField()
    # What the watcher saw change: {"watch": {"guests", "nodes", "reasons"}, "waited_s"}.
    trigger = serializers.JSONField(required=False, default=dict)

    MAX_BYTES = 1_000_000  # a report of a large failing run; more is refused, not cut

    def validate_report(self, value):
        if not isinstance(value, dict) or not isinstance(value.get("ok"), bool):
            raise serializers.ValidationError(_("A run report: an object with a boolean 'ok'."))
        return self._bounded(value)

    def validate_trigger(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("An object."))
        return self._bounded(value)

    def _bounded(self, value):
        import json

        if len(json.dumps(value)) > self.MAX_BYTES:
            raise serializers.ValidationError(
                _("At most {limit} bytes of JSON.").format(limit=self.MAX_BYTES)
            )
        return value

    def validate(self, data):
        if data["completed"] < data["started"]:
            raise serializers.ValidationError(
                {"completed": [_("A run completes after it started.")]}
            )
        return data


from .serializers_inventory import *  # noqa: E402, F403
