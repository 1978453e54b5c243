"""REST: each VM's data-protection compliance, read-only (GET list and detail), filtered as
the list view filters it. Computed from the stored inventory (`netbox_proxbox.compliance`)."""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from netbox.api.serializers import BaseModelSerializer
from rest_framework import permissions, serializers, viewsets
from rest_framework.settings import api_settings
from virtualization.api.serializers_.clusters import ClusterSerializer
from virtualization.models import VirtualMachine

from ..compliance import FACTS, RULES, failed_rules, may_view_compliance, with_compliance
from ..filtersets_compliance import ComplianceFilterSet

__all__ = ("ComplianceSerializer", "ComplianceViewSet")


class ComplianceEndpointSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="endpoint_id")
    name = serializers.CharField(source="endpoint_name")


class ComplianceSerializer(BaseModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="virtualization-api:virtualmachine-detail")
    endpoint = ComplianceEndpointSerializer(source="*", read_only=True)
    cluster = ClusterSerializer(nested=True, read_only=True)
    vmid = serializers.IntegerField(source="proxmox_vmid", allow_null=True, read_only=True)
    node = serializers.CharField(source="device.name", allow_null=True, read_only=True)
    compliant = serializers.BooleanField(read_only=True)
    failed_rules = serializers.SerializerMethodField()
    backup_job = serializers.BooleanField(read_only=True)
    last_backup_at = serializers.DateTimeField(allow_null=True, read_only=True)
    last_backup_verification = serializers.CharField(allow_null=True, read_only=True)
    snapshot_count = serializers.IntegerField(read_only=True)
    oldest_snapshot_at = serializers.DateTimeField(allow_null=True, read_only=True)
    replication_state = serializers.CharField(allow_null=True, read_only=True)
    replication_failures = serializers.IntegerField(read_only=True)
    ha_state = serializers.CharField(allow_null=True, read_only=True)

    class Meta:
        model = VirtualMachine
        fields = (
            "id",
            "url",
            "display",
            "name",
            "endpoint",
            "cluster",
            "vmid",
            "node",
            "compliant",
            "failed_rules",
            "backup_job",
            *FACTS,
        )
        read_only_fields = fields

    @extend_schema_field(
        serializers.ListField(
            child=serializers.ChoiceField(choices=[r.removeprefix("rule_") for r in RULES])
        )
    )
    def get_failed_rules(self, obj) -> list[str]:
        return failed_rules(obj)


def compliance_queryset(user):
    return with_compliance(
        VirtualMachine.objects.restrict(user, "view").select_related("cluster", "device")
    ).order_by("endpoint_name", "name", "pk")


class MayViewCompliance(permissions.BasePermission):
    """Beside NetBox's own check of the VM permission: the inventory compliance reads."""

    message = "Viewing compliance needs view permission on the endpoints and their inventory."

    def has_permission(self, request, view):
        return may_view_compliance(request.user)


@extend_schema_view(
    list=extend_schema(
        responses={
            200: ComplianceSerializer(many=True),
            400: OpenApiResponse(
                description="A filter's value is invalid (the body names the filter)."
            ),
        }
    )
)
class ComplianceViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = VirtualMachine.objects.all()  # the permission class reads its model
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, MayViewCompliance]
    serializer_class = ComplianceSerializer
    filterset_class = ComplianceFilterSet

    def get_queryset(self):
        return compliance_queryset(self.request.user)

    def get_view_name(self):
        return "Data-protection compliance"
