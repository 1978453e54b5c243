from dcim.models import DeviceRole, DeviceType, Site
from django import forms
from django.utils.translation import gettext_lazy as _
from ipam.models import VRF
from netbox.forms import NetBoxModelForm
from tenancy.forms import TenancyForm
from utilities.forms.fields import CommentField, DynamicModelChoiceField
from utilities.forms.rendering import FieldSet

from ..choices import ProtectedFieldChoices
from ..models import ProxmoxEndpoint, ProxmoxNodeTypeOverride
from ..models.compliance import COMPLIANCE_FIELDS
from ..models.endpoints import validate_token_secret
from ..models.policy import OBJECT_MODE_FIELDS

POLICY_FORM_FIELDS = (
    "removed_guests",
    "removed_guests_days",
    "sync_templates",
    "keep_operator_objects",
    "adopt_existing",
    "protected_fields",
    *OBJECT_MODE_FIELDS,
    "exclude_vmids",
    "exclude_names",
    "exclude_tags",
    "exclude_nodes",
    "exclude_pools",
)

# Tracking records and sync states are server-owned: read-only in the UI, so no forms.
__all__ = ("ProxmoxEndpointForm", "ProxmoxNodeTypeOverrideForm")


class ProxmoxEndpointForm(TenancyForm, NetBoxModelForm):
    site = DynamicModelChoiceField(label=_("Site"), queryset=Site.objects.all(), required=False)
    token_secret = forms.CharField(
        label=_("API token secret"),
        required=False,
        strip=False,
        validators=[validate_token_secret],
        widget=forms.PasswordInput(render_value=False),
        help_text=_("Write-only. Leave empty to keep the stored secret."),
    )
    vrf = DynamicModelChoiceField(label=_("VRF"), queryset=VRF.objects.all(), required=False)
    vm_role = DynamicModelChoiceField(
        label=_("Default VM role"),
        queryset=DeviceRole.objects.all(),
        required=False,
        query_params={"vm_role": "True"},
    )
    node_device_type = DynamicModelChoiceField(
        label=_("Node device type"),
        queryset=DeviceType.objects.all(),
        required=False,
        help_text=ProxmoxEndpoint._meta.get_field("node_device_type").help_text,
    )
    # NetBox's own multiple-choice select: its form renderer styles every non-checkbox
    # input as a text box, which left CheckboxSelectMultiple as blank boxes.
    protected_fields = forms.MultipleChoiceField(
        label=_("Protected fields"),
        choices=ProtectedFieldChoices,
        required=False,
        help_text=_("Fields a sync never overwrites once the object exists"),
    )
    # Empty is a setting of its own (the backend's), not an unknown answer.
    sync_templates = forms.NullBooleanField(
        label=_("Sync templates"),
        required=False,
        widget=forms.Select(
            choices=(
                ("", _("The backend's setting (skip unless configured)")),
                ("True", _("Yes")),
                ("False", _("No")),
            )
        ),
        help_text=_("Sync Proxmox templates as VMs (tagged proxbox-template)"),
    )
    comments = CommentField()

    fieldsets = (
        FieldSet(
            "name",
            "host",
            "port",
            "verify_tls",
            "mode",
            "enabled",
            "description",
            "tags",
            name=_("Endpoint"),
        ),
        FieldSet("token_id", "token_secret", name=_("API token")),
        FieldSet("site", "tenant_group", "tenant", "node_device_type", name=_("Placement")),
        FieldSet("sync_interval", "watch_interval", name=_("Schedule")),
        FieldSet(
            "removed_guests",
            "removed_guests_days",
            "sync_templates",
            "keep_operator_objects",
            "adopt_existing",
            "protected_fields",
            "vrf",
            "vm_role",
            "sync_descriptions",
            name=_("Sync policy"),
        ),
        FieldSet(*OBJECT_MODE_FIELDS, name=_("What the sync writes")),
        FieldSet(
            "exclude_vmids",
            "exclude_names",
            "exclude_tags",
            "exclude_nodes",
            "exclude_pools",
            name=_("Exclusions"),
        ),
        FieldSet(*COMPLIANCE_FIELDS, name=_("Data-protection compliance")),
    )

    class Meta:
        model = ProxmoxEndpoint
        fields = (
            "name",
            "host",
            "port",
            "verify_tls",
            "token_id",
            "enabled",
            "mode",
            "site",
            "tenant",
            "vrf",
            "vm_role",
            "node_device_type",
            "sync_descriptions",
            "sync_interval",
            "watch_interval",
            *POLICY_FORM_FIELDS,
            *COMPLIANCE_FIELDS,
            "description",
            "comments",
            "tags",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A form posted without them (scripts, older clients) keeps the defaults.
        for name in OBJECT_MODE_FIELDS:
            self.fields[name].required = False

    def clean(self):
        super().clean()
        for name in OBJECT_MODE_FIELDS:
            if not self.cleaned_data.get(name):
                self.cleaned_data[name] = ProxmoxEndpoint._meta.get_field(name).default
        if self.cleaned_data.get("token_secret"):
            self.instance.token_secret = self.cleaned_data["token_secret"]
        return self.cleaned_data


class ProxmoxNodeTypeOverrideForm(NetBoxModelForm):
    endpoint = DynamicModelChoiceField(label=_("Endpoint"), queryset=ProxmoxEndpoint.objects.all())
    device_type = DynamicModelChoiceField(label=_("Device type"), queryset=DeviceType.objects.all())

    fieldsets = (
        FieldSet("endpoint", "node", "device_type", "description", "tags", name=_("Override")),
    )

    class Meta:
        model = ProxmoxNodeTypeOverride
        fields = ("endpoint", "node", "device_type", "description", "tags")
