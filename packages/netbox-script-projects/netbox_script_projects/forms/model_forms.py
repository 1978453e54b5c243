from django import forms
from django.utils.translation import gettext_lazy as _
from netbox.forms import NetBoxModelForm, PrimaryModelForm
from utilities.exceptions import AbortRequest
from utilities.forms.fields import DynamicModelChoiceField, SlugField
from utilities.forms.rendering import FieldSet

from ..models import PublishedScript, ScriptFile, ScriptProject
from ..storage.errors import ProjectBusy

__all__ = (
    "PublishedScriptForm",
    "ScriptFileForm",
    "ScriptProjectForm",
    "ScriptProjectUploadForm",
)


class ScriptProjectForm(PrimaryModelForm):
    key = SlugField(slug_source="name", label=_("Key"))

    fieldsets = (
        FieldSet(
            "name",
            "key",
            "activation_policy",
            "enabled",
            "description",
            "tags",
            name=_("Script Project"),
        ),
        FieldSet("data_source", "data_source_path", name=_("Data Source mirror")),
    )

    class Meta:
        model = ScriptProject
        fields = (
            "name",
            "key",
            "activation_policy",
            "enabled",
            "data_source",
            "data_source_path",
            "description",
            "owner",
            "comments",
            "tags",
        )


class ScriptFileForm(NetBoxModelForm):
    project = DynamicModelChoiceField(label=_("Project"), queryset=ScriptProject.objects.all())

    fieldsets = (
        FieldSet("project", "path", "enabled", "description", "tags", name=_("Script File")),
    )

    class Meta:
        model = ScriptFile
        fields = ("project", "path", "enabled", "description", "tags")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # A declaration never moves between projects.
            self.fields["project"].disabled = True

    def save(self, *args, **kwargs):
        # NetBox's edit view shows an AbortRequest as a form error (not a 500).
        try:
            return super().save(*args, **kwargs)
        except ProjectBusy as exc:
            raise AbortRequest(str(exc)) from exc


class ScriptProjectUploadForm(forms.Form):
    file = forms.FileField(
        label=_("Source"),
        help_text=_("A single .py file, or a zip, tar or tar.gz archive of the project tree"),
        allow_empty_file=True,
    )


class PublishedScriptForm(forms.ModelForm):
    """The administrator's switch of a published Script (nothing else is editable)."""

    fieldsets = (FieldSet("enabled", name=_("Published script")),)

    class Meta:
        model = PublishedScript
        fields = ("enabled",)

    def save(self, *args, **kwargs):
        try:
            return super().save(*args, **kwargs)
        except ProjectBusy as exc:
            raise AbortRequest(str(exc)) from exc
