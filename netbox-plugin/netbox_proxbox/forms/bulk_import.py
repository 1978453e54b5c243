from dcim.models import DeviceType, Site
from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelImportForm
from tenancy.models import Tenant
from utilities.forms.fields import CSVChoiceField, CSVModelChoiceField

from ..choices import EndpointModeChoices
from ..models import ProxmoxEndpoint, ProxmoxNodeTypeOverride
from ..models.endpoints import validate_token_secret

__all__ = ("ProxmoxEndpointImportForm", "ProxmoxNodeTypeOverrideImportForm")


class ProxmoxEndpointImportForm(NetBoxModelImportForm):
    mode = CSVChoiceField(
        label=_("Mode"),
        choices=EndpointModeChoices,
        required=False,
        help_text=_("cluster (default) or standalone"),
    )
    site = CSVModelChoiceField(
        label=_("Site"),
        queryset=Site.objects.all(),
        required=False,
        to_field_name="name",
        help_text=_("Name of the site"),
    )
    tenant = CSVModelChoiceField(
        label=_("Tenant"),
        queryset=Tenant.objects.all(),
        required=False,
        to_field_name="name",
        help_text=_("Name of the tenant"),
    )
    token_secret = forms.CharField(
        label=_("API token secret"),
        required=False,
        strip=False,
        validators=[validate_token_secret],
        help_text=_(
            "Encrypted on import and never shown again. Empty or absent keeps the stored one."
        ),
    )

    class Meta:
        model = ProxmoxEndpoint
        fields = (
            "name",
            "host",
            "port",
            "verify_tls",
            "token_id",
            "token_secret",
            "enabled",
            "mode",
            "site",
            "tenant",
            "description",
            "comments",
            "tags",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Columns with a model default may be left out or empty, as in the REST API.
        if "port" in self.fields:
            self.fields["port"].required = False

    def clean(self):
        super().clean()
        for name in ("port", "mode"):
            if name in self.cleaned_data and self.cleaned_data[name] in (None, ""):
                self.cleaned_data[name] = getattr(self.instance, name)
        if self.cleaned_data.get("token_secret"):
            self.instance.token_secret = self.cleaned_data["token_secret"]
        return self.cleaned_data


class ProxmoxNodeTypeOverrideImportForm(NetBoxModelImportForm):
    endpoint = CSVModelChoiceField(
        label=_("Endpoint"),
        queryset=ProxmoxEndpoint.objects.all(),
        to_field_name="name",
        help_text=_("Name of the Proxmox endpoint"),
    )
    device_type = CSVModelChoiceField(
        label=_("Device type"),
        queryset=DeviceType.objects.all(),
        to_field_name="slug",
        help_text=_("Slug of the device type"),
    )

    class Meta:
        model = ProxmoxNodeTypeOverride
        fields = ("endpoint", "node", "device_type", "description", "tags")
