from netbox.api.fields import ChoiceField
from netbox.api.serializers import BaseModelSerializer
from rest_framework import serializers

from ...choices import RevisionStatusChoices
from ...models import ScriptProjectRevision
from .projects import ScriptProjectSerializer

__all__ = (
    "RefreshSerializer",
    "ScriptProjectRevisionSerializer",
    "StorageErrorSerializer",
    "UploadSerializer",
)


class ScriptProjectRevisionSerializer(BaseModelSerializer):
    """Read-only. manifest, script_file_snapshot and the validation lease
    (validation_job, validation_started) are deliberately absent."""

    project = ScriptProjectSerializer(nested=True, read_only=True)
    status = ChoiceField(choices=RevisionStatusChoices, read_only=True)

    class Meta:
        model = ScriptProjectRevision
        fields = (
            "id", "url", "display_url", "display", "project", "digest", "script_file_digest", "status",
            "file_count", "total_size", "validation_errors", "last_validation_failure", "discovered_scripts",
            "activated", "created", "last_updated",
        )  # fmt: skip
        brief_fields = ("digest", "display", "id", "script_file_digest", "status", "url")
        read_only_fields = fields


class StorageErrorSerializer(serializers.Serializer):
    path = serializers.CharField(allow_null=True)
    code = serializers.CharField()
    message = serializers.CharField()


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="A single .py file, or a zip, tar or tar.gz archive of the project tree",
        allow_empty_file=True,
    )


class RefreshSerializer(serializers.Serializer):
    revision = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=2**63 - 1,  # a bigint id; larger values cannot name a revision
        help_text="Source revision (default: the active revision, else the newest stored one)",
    )
