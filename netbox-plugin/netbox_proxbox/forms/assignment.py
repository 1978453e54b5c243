"""Forms of the assignment rules: add/edit, filter, bulk edit and bulk import."""

from dcim.models import DeviceRole, Location, Platform, Site
from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import (
    NetBoxModelBulkEditForm,
    NetBoxModelFilterSetForm,
    NetBoxModelForm,
    NetBoxModelImportForm,
)
from tenancy.forms import TenancyFilterForm, TenancyForm
from tenancy.models import Tenant
from utilities.forms import BOOLEAN_WITH_BLANK_CHOICES
from utilities.forms.fields import (
    CSVModelChoiceField,
    DynamicModelChoiceField,
    DynamicModelMultipleChoiceField,
    TagFilterField,
)
from utilities.forms.rendering import FieldSet
from utilities.forms.widgets import BulkEditNullBooleanSelect

from ..models import ProxmoxAssignmentRule, ProxmoxEndpoint
from ..models.assignment import MATCHER_FIELDS, RULE_FIELDS

__all__ = (
    "ProxmoxAssignmentRuleBulkEditForm",
    "ProxmoxAssignmentRuleFilterForm",
    "ProxmoxAssignmentRuleForm",
    "ProxmoxAssignmentRuleImportForm",
)


def _vm_role(required=False):
    return DynamicModelChoiceField(
        label=_("VM role"),
        queryset=DeviceRole.objects.filter(vm_role=True),
        required=required,
        query_params={"vm_role": "True"},
    )


class ProxmoxAssignmentRuleForm(TenancyForm, NetBoxModelForm):
    endpoint = DynamicModelChoiceField(label=_("Endpoint"), queryset=ProxmoxEndpoint.objects.all())
    vm_role = _vm_role()
    platform = DynamicModelChoiceField(
        label=_("Platform"), queryset=Platform.objects.all(), required=False
    )
    site = DynamicModelChoiceField(label=_("Site"), queryset=Site.objects.all(), required=False)
    location = DynamicModelChoiceField(
        label=_("Location"),
        queryset=Location.objects.all(),
        required=False,
        query_params={"site_id": "$site"},
    )

    fieldsets = (
        FieldSet("endpoint", "weight", "enabled", "description", "tags", name=_("Rule")),
        FieldSet(*MATCHER_FIELDS, name=_("Matches guests (all that are set)")),
        FieldSet(
            "tenant_group", "tenant", "vm_role", "platform", "site", "location", name=_("Assigns")
        ),
    )

    class Meta:
        model = ProxmoxAssignmentRule
        fields = (*RULE_FIELDS, "tags")


class ProxmoxAssignmentRuleFilterForm(TenancyFilterForm, NetBoxModelFilterSetForm):
    model = ProxmoxAssignmentRule
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("endpoint_id", "enabled", name=_("Rule")),
        FieldSet("vm_role_id", "platform_id", "site_id", name=_("Assigns")),
        FieldSet("tenant_group_id", "tenant_id", name=_("Tenant")),
    )
    endpoint_id = DynamicModelMultipleChoiceField(
        queryset=ProxmoxEndpoint.objects.all(), required=False, label=_("Endpoint")
    )
    enabled = forms.NullBooleanField(
        required=False, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )
    vm_role_id = DynamicModelMultipleChoiceField(
        queryset=DeviceRole.objects.filter(vm_role=True), required=False, label=_("VM role")
    )
    platform_id = DynamicModelMultipleChoiceField(
        queryset=Platform.objects.all(), required=False, label=_("Platform")
    )
    site_id = DynamicModelMultipleChoiceField(
        queryset=Site.objects.all(), required=False, label=_("Site")
    )
    tag = TagFilterField(model)


class ProxmoxAssignmentRuleBulkEditForm(NetBoxModelBulkEditForm):
    """Each edited rule goes through the model's clean(), so a bulk edit cannot make one
    invalid (a location outside its site, no assignment left)."""

    model = ProxmoxAssignmentRule
    enabled = forms.NullBooleanField(
        required=False, widget=BulkEditNullBooleanSelect, label=_("Enabled")
    )
    description = forms.CharField(max_length=200, required=False)
    tenant = DynamicModelChoiceField(queryset=Tenant.objects.all(), required=False)
    vm_role = _vm_role()
    platform = DynamicModelChoiceField(queryset=Platform.objects.all(), required=False)
    site = DynamicModelChoiceField(queryset=Site.objects.all(), required=False)
    location = DynamicModelChoiceField(
        queryset=Location.objects.all(), required=False, query_params={"site_id": "$site"}
    )

    fieldsets = (
        FieldSet("enabled", "description", name=_("Rule")),
        FieldSet("tenant", "vm_role", "platform", "site", "location", name=_("Assigns")),
    )
    nullable_fields = ("description", "tenant", "vm_role", "platform", "site", "location")


def _by_name(label, queryset, help_text):
    return CSVModelChoiceField(
        label=label, queryset=queryset, required=False, to_field_name="name", help_text=help_text
    )


class ProxmoxAssignmentRuleImportForm(NetBoxModelImportForm):
    endpoint = CSVModelChoiceField(
        label=_("Endpoint"),
        queryset=ProxmoxEndpoint.objects.all(),
        to_field_name="name",
        help_text=_("Name of the endpoint"),
    )
    tenant = _by_name(_("Tenant"), Tenant.objects.all(), _("Name of the tenant"))
    vm_role = _by_name(
        _("VM role"), DeviceRole.objects.filter(vm_role=True), _("Name of a VM role")
    )
    platform = _by_name(_("Platform"), Platform.objects.all(), _("Name of the platform"))
    site = _by_name(_("Site"), Site.objects.all(), _("Name of the site"))
    location = _by_name(
        _("Location"), Location.objects.all(), _("Name of the location (in the site)")
    )

    class Meta:
        model = ProxmoxAssignmentRule
        fields = (*RULE_FIELDS, "tags")

    def __init__(self, data=None, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        # Location names are unique per site only: look the name up in the row's site.
        if data and data.get("site"):
            self.fields["location"].queryset = Location.objects.filter(site__name=data["site"])
