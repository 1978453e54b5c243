"""REST representation of the assignment rules (validated by the model's clean())."""

from __future__ import annotations

from dcim.api.serializers_.platforms import PlatformSerializer
from dcim.api.serializers_.roles import DeviceRoleSerializer
from dcim.api.serializers_.sites import LocationSerializer, SiteSerializer
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from netbox.api.serializers import NetBoxModelSerializer
from rest_framework import serializers
from tenancy.api.serializers_.tenants import TenantSerializer

from ..models import ProxmoxAssignmentRule
from .payloads import NulFreePayloadMixin
from .serializers import VisibleEndpointSerializer
from .visibility import VisibleReferencesMixin

__all__ = ("ProxmoxAssignmentRuleSerializer",)


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
            "endpoint",
            "weight",
            "enabled",
            "description",
            "name_pattern",
            "proxmox_tag",
            "pool",
            "node",
            "vmid_min",
            "vmid_max",
            "tenant",
            "vm_role",
            "platform",
            "site",
            "location",
            "rule",
            "tags",
            "custom_fields",
            "created",
            "last_updated",
        )
        brief_fields = ("description", "display", "id", "url", "weight")
