from dcim.models import Site
from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelBulkEditForm
from tenancy.models import Tenant
from utilities.forms import add_blank_choice
from utilities.forms.fields import DynamicModelChoiceField
from utilities.forms.rendering import FieldSet
from utilities.forms.widgets import BulkEditNullBooleanSelect

from ..choices import EndpointModeChoices
from ..models import ProxmoxEndpoint

__all__ = ("ProxmoxEndpointBulkEditForm",)


class ProxmoxEndpointBulkEditForm(NetBoxModelBulkEditForm):
    """Bulk edits go through ProxmoxEndpoint.save(), which keeps the native-cluster relation."""

    model = ProxmoxEndpoint
    enabled = forms.NullBooleanField(
        required=False, widget=BulkEditNullBooleanSelect, label=_("Enabled")
    )
    verify_tls = forms.NullBooleanField(
        required=False, widget=BulkEditNullBooleanSelect, label=_("Verify TLS")
    )
    mode = forms.ChoiceField(choices=add_blank_choice(EndpointModeChoices), required=False)
    site = DynamicModelChoiceField(queryset=Site.objects.all(), required=False)
    tenant = DynamicModelChoiceField(queryset=Tenant.objects.all(), required=False)
    description = forms.CharField(max_length=200, required=False)

    fieldsets = (FieldSet("enabled", "verify_tls", "mode", "site", "tenant", "description"),)
    nullable_fields = ("site", "tenant", "description")
