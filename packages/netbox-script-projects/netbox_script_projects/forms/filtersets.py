from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelFilterSetForm, PrimaryModelFilterSetForm
from utilities.forms import BOOLEAN_WITH_BLANK_CHOICES
from utilities.forms.fields import DynamicModelMultipleChoiceField, TagFilterField
from utilities.forms.rendering import FieldSet

from ..choices import ActivationPolicyChoices, ScriptFileDiscoveryChoices
from ..models import ScriptFile, ScriptProject

__all__ = ("ScriptFileFilterForm", "ScriptProjectFilterForm")


class ScriptProjectFilterForm(PrimaryModelFilterSetForm):
    model = ScriptProject
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("activation_policy", "enabled", name=_("Attributes")),
    )
    activation_policy = forms.MultipleChoiceField(
        label=_("Activation policy"), choices=ActivationPolicyChoices, required=False
    )
    enabled = forms.NullBooleanField(
        label=_("Enabled"), required=False, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )
    tag = TagFilterField(model)


class ScriptFileFilterForm(NetBoxModelFilterSetForm):
    model = ScriptFile
    fieldsets = (
        FieldSet("q", "filter_id", "tag"),
        FieldSet("project_id", "enabled", "discovery_status", name=_("Attributes")),
    )
    project_id = DynamicModelMultipleChoiceField(
        queryset=ScriptProject.objects.all(), required=False, label=_("Project")
    )
    enabled = forms.NullBooleanField(
        label=_("Enabled"), required=False, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )
    discovery_status = forms.MultipleChoiceField(
        label=_("Discovery status"), choices=ScriptFileDiscoveryChoices, required=False
    )
    tag = TagFilterField(model)
