from django.utils.translation import gettext_lazy as _
from netbox.ui import attrs, panels


class ScriptProjectPanel(panels.ObjectAttributesPanel):
    name = attrs.TextAttr("name")
    key = attrs.TextAttr("key", style="font-monospace")
    storage_key = attrs.TextAttr("storage_key", label=_("Storage key"), style="font-monospace")
    activation_policy = attrs.ChoiceAttr("activation_policy")
    active_revision = attrs.RelatedObjectAttr("active_revision", linkify=True)
    enabled = attrs.BooleanAttr("enabled")
    description = attrs.TextAttr("description")


class ScriptFilePanel(panels.ObjectAttributesPanel):
    project = attrs.RelatedObjectAttr("project", linkify=True)
    path = attrs.TextAttr("path", style="font-monospace")
    enabled = attrs.BooleanAttr("enabled")
    description = attrs.TextAttr("description")


class ScriptFileDiscoveryPanel(panels.ObjectAttributesPanel):
    title = _("Discovery")
    discovery_status = attrs.ChoiceAttr("discovery_status", label=_("Status"))
    discovered_revision = attrs.RelatedObjectAttr(
        "discovered_revision", linkify=True, label=_("Revision")
    )
    discovered_at = attrs.DateTimeAttr("discovered_at", label=_("Discovered"))


class ScriptProjectRevisionPanel(panels.ObjectAttributesPanel):
    project = attrs.RelatedObjectAttr("project", linkify=True)
    status = attrs.ChoiceAttr("status")
    digest = attrs.TextAttr(
        "digest", label=_("Source digest"), style="font-monospace", copy_button=True
    )
    script_file_digest = attrs.TextAttr(
        "script_file_digest",
        label=_("Script File digest"),
        style="font-monospace",
        copy_button=True,
    )
    file_count = attrs.NumericAttr("file_count", label=_("Files"))
    total_size = attrs.NumericAttr("total_size", label=_("Total size (bytes)"))
    activated = attrs.DateTimeAttr("activated")


class PublishedScriptPanel(panels.ObjectAttributesPanel):
    project = attrs.RelatedObjectAttr("project", linkify=True)
    script = attrs.RelatedObjectAttr("script", linkify=True, label=_("NetBox script"))
    module_name = attrs.TextAttr("module_name", label=_("Module"), style="font-monospace")
    class_name = attrs.TextAttr("class_name", label=_("Class"), style="font-monospace")
    script_file_path = attrs.TextAttr(
        "script_file_path", label=_("Script File"), style="font-monospace"
    )
    revision = attrs.RelatedObjectAttr("revision", linkify=True, label=_("Serving revision"))
    enabled = attrs.BooleanAttr("enabled")
