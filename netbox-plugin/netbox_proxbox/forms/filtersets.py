from dcim.models import DeviceType, Site
from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelFilterSetForm
from tenancy.forms import TenancyFilterForm
from utilities.forms import BOOLEAN_WITH_BLANK_CHOICES
from utilities.forms.fields import DynamicModelMultipleChoiceField, TagFilterField
from utilities.forms.rendering import FieldSet
from virtualization.models import Cluster

from ..choices import EndpointModeChoices, SyncStatusChoices
from ..models import (
    ProxboxClusterSyncState,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxNodeTypeOverride,
)

__all__ = (
    "ProxboxClusterSyncStateFilterForm",
    "ProxmoxClusterFilterForm",
    "ProxmoxEndpointFilterForm",
    "ProxmoxNodeTypeOverrideFilterForm",
)


class ProxmoxEndpointFilterForm(TenancyFilterForm, NetBoxModelFilterSetForm):
    model = ProxmoxEndpoint
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("mode", "enabled", "site_id", name=_("Attributes")),
        FieldSet("tenant_group_id", "tenant_id", name=_("Tenant")),
    )
    mode = forms.MultipleChoiceField(choices=EndpointModeChoices, required=False)
    enabled = forms.NullBooleanField(
        required=False, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )
    site_id = DynamicModelMultipleChoiceField(
        queryset=Site.objects.all(), required=False, label=_("Site")
    )
    tag = TagFilterField(model)


class ProxmoxClusterFilterForm(NetBoxModelFilterSetForm):
    model = ProxmoxCluster
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("endpoint_id", "netbox_cluster_id", "mode", "linked", name=_("Attributes")),
    )
    endpoint_id = DynamicModelMultipleChoiceField(
        queryset=ProxmoxEndpoint.objects.all(), required=False, label=_("Endpoint")
    )
    netbox_cluster_id = DynamicModelMultipleChoiceField(
        queryset=Cluster.objects.all(), required=False, label=_("Native cluster")
    )
    mode = forms.MultipleChoiceField(choices=EndpointModeChoices, required=False)
    linked = forms.NullBooleanField(
        required=False, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )
    tag = TagFilterField(model)


class ProxboxClusterSyncStateFilterForm(NetBoxModelFilterSetForm):
    model = ProxboxClusterSyncState
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("cluster_id", "status", name=_("Attributes")),
    )
    cluster_id = DynamicModelMultipleChoiceField(
        queryset=Cluster.objects.all(), required=False, label=_("Native cluster")
    )
    status = forms.MultipleChoiceField(choices=SyncStatusChoices, required=False)
    tag = TagFilterField(model)


class ProxmoxNodeTypeOverrideFilterForm(NetBoxModelFilterSetForm):
    model = ProxmoxNodeTypeOverride
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("endpoint_id", "node", "device_type_id", name=_("Attributes")),
    )
    endpoint_id = DynamicModelMultipleChoiceField(
        queryset=ProxmoxEndpoint.objects.all(), required=False, label=_("Endpoint")
    )
    node = forms.CharField(required=False, label=_("Node"))
    device_type_id = DynamicModelMultipleChoiceField(
        queryset=DeviceType.objects.all(), required=False, label=_("Device type")
    )
    tag = TagFilterField(model)
