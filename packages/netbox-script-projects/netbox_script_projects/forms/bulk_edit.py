from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelBulkEditForm, PrimaryModelBulkEditForm
from utilities.forms import add_blank_choice
from utilities.forms.fields import CommentField
from utilities.forms.rendering import FieldSet
from utilities.forms.widgets import BulkEditNullBooleanSelect

from ..choices import ActivationPolicyChoices
from ..models import ScriptFile, ScriptProject

__all__ = ("ScriptFileBulkEditForm", "ScriptProjectBulkEditForm")


class ScriptProjectBulkEditForm(PrimaryModelBulkEditForm):
    activation_policy = forms.ChoiceField(
        label=_("Activation policy"),
        choices=add_blank_choice(ActivationPolicyChoices),
        required=False,
    )
    enabled = forms.NullBooleanField(
        label=_("Enabled"), required=False, widget=BulkEditNullBooleanSelect()
    )
    description = forms.CharField(label=_("Description"), max_length=200, required=False)
    comments = CommentField()

    model = ScriptProject
    fieldsets = (FieldSet("activation_policy", "enabled", "description"),)
    nullable_fields = ("description", "comments")


class ScriptFileBulkEditForm(NetBoxModelBulkEditForm):
    enabled = forms.NullBooleanField(
        label=_("Enabled"), required=False, widget=BulkEditNullBooleanSelect()
    )
    description = forms.CharField(label=_("Description"), max_length=200, required=False)

    model = ScriptFile
    fieldsets = (FieldSet("enabled", "description"),)
    nullable_fields = ("description",)
