from dcim.models import DeviceRole, Site
from django import forms
from django.utils.translation import gettext_lazy as _
from ipam.models import VRF
from netbox.context import current_request
from netbox.forms import NetBoxModelForm
from tenancy.forms import TenancyForm
from utilities.forms.fields import CommentField, DynamicModelChoiceField
from utilities.forms.rendering import FieldSet
from virtualization.models import Cluster

from ..choices import ProtectedFieldChoices
from ..models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint
from ..models.endpoints import validate_token_secret
from ..models.policy import OBJECT_MODE_FIELDS
from ..ownership.permissions import visible

POLICY_FORM_FIELDS = (
    "removed_guests",
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

__all__ = ("ProxboxClusterSyncStateForm", "ProxmoxClusterForm", "ProxmoxEndpointForm")


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
        FieldSet("site", "tenant_group", "tenant", name=_("Placement")),
        FieldSet("sync_interval", name=_("Schedule")),
        FieldSet(
            "removed_guests",
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
            "sync_descriptions",
            "sync_interval",
            *POLICY_FORM_FIELDS,
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


class ProxmoxClusterForm(NetBoxModelForm):
    """Ordinary tracking edits: metadata, or clearing an obsolete native-cluster link."""

    endpoint = DynamicModelChoiceField(label=_("Endpoint"), queryset=ProxmoxEndpoint.objects.all())
    netbox_cluster = DynamicModelChoiceField(
        label=_("Native cluster"),
        queryset=Cluster.objects.all(),
        required=False,
        help_text=_("Can only be kept or cleared here; the sync-cluster action sets it."),
    )

    fieldsets = (
        FieldSet(
            "endpoint",
            "name",
            "cluster_id",
            "mode",
            "netbox_cluster",
            "netbox_cluster_kept",
            "tags",
            name=_("Tracking record"),
        ),
        FieldSet("version", "quorate", "node_count", "last_seen", name=_("Reflection")),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        link = self.instance.netbox_cluster_id
        request = current_request.get()
        if link is None or request is None or visible(request.user, Cluster, link):
            return
        # The choice field would render empty for this viewer and saving would clear the link;
        # without the field the save leaves it alone (a link is cleared only by who sees it).
        del self.fields["netbox_cluster"]
        self.fields["netbox_cluster_kept"] = forms.CharField(
            label=_("Native cluster"),
            required=False,
            disabled=True,
            initial=_("Linked to a native cluster you may not view (kept)"),
        )

    class Meta:
        model = ProxmoxCluster
        fields = (
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
        )


class ProxboxClusterSyncStateForm(NetBoxModelForm):
    cluster = DynamicModelChoiceField(label=_("Native cluster"), queryset=Cluster.objects.all())

    fieldsets = (
        FieldSet("cluster", "tags", name=_("Sync state")),
        FieldSet(
            "last_sync",
            "status",
            "objects_created",
            "objects_updated",
            "objects_deleted",
            "errors",
            "message",
            name=_("Reflection"),
        ),
    )

    class Meta:
        model = ProxboxClusterSyncState
        fields = (
            "cluster",
            "last_sync",
            "status",
            "objects_created",
            "objects_updated",
            "objects_deleted",
            "errors",
            "message",
            "tags",
        )
