from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelImportForm, PrimaryModelImportForm
from utilities.forms.fields import CSVChoiceField, CSVModelChoiceField

from ..choices import ActivationPolicyChoices
from ..models import ScriptFile, ScriptProject

__all__ = ("ScriptFileImportForm", "ScriptProjectImportForm")


class ScriptProjectImportForm(PrimaryModelImportForm):
    activation_policy = CSVChoiceField(
        label=_("Activation policy"), choices=ActivationPolicyChoices, required=False
    )

    class Meta:
        model = ScriptProject
        fields = (
            "name",
            "key",
            "activation_policy",
            "enabled",
            "description",
            "owner",
            "comments",
            "tags",
        )


class ScriptFileImportForm(NetBoxModelImportForm):
    project = CSVModelChoiceField(
        label=_("Project"),
        queryset=ScriptProject.objects.all(),
        to_field_name="key",
        help_text=_("Project key"),
    )

    class Meta:
        model = ScriptFile
        fields = ("project", "path", "enabled", "description", "tags")
