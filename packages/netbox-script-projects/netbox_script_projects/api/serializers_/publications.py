from extras.api.serializers import ScriptSerializer
from netbox.api.serializers import BaseModelSerializer

from ...models import PublishedScript
from .projects import ScriptProjectSerializer
from .revisions import ScriptProjectRevisionSerializer

__all__ = ("PublishedScriptSerializer",)


class PublishedScriptSerializer(BaseModelSerializer):
    """Only `enabled` is writable: the rest is what activation published."""

    project = ScriptProjectSerializer(nested=True, read_only=True)
    script = ScriptSerializer(nested=True, read_only=True)
    revision = ScriptProjectRevisionSerializer(nested=True, read_only=True, allow_null=True)

    class Meta:
        model = PublishedScript
        fields = (
            "id", "url", "display_url", "display", "project", "script", "module_name", "class_name",
            "script_file_path", "revision", "enabled",
        )  # fmt: skip
        brief_fields = ("class_name", "display", "enabled", "id", "module_name", "url")
        read_only_fields = ("module_name", "class_name", "script_file_path")
