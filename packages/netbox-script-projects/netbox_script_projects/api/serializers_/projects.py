from core.api.serializers import DataSourceSerializer
from netbox.api.fields import ChoiceField
from netbox.api.serializers import (
    BaseModelSerializer,
    NetBoxModelSerializer,
    PrimaryModelSerializer,
)
from rest_framework import serializers

from ...choices import ActivationPolicyChoices, RevisionStatusChoices, ScriptFileDiscoveryChoices
from ...models import ScriptFile, ScriptProject, ScriptProjectRevision

__all__ = ("ScriptFileSerializer", "ScriptProjectSerializer")


class _ActiveRevisionSerializer(BaseModelSerializer):
    """Brief revision shape for the project's active_revision (avoids a cycle)."""

    status = ChoiceField(choices=RevisionStatusChoices, read_only=True)

    class Meta:
        model = ScriptProjectRevision
        fields = ("id", "url", "display", "digest", "script_file_digest", "status")


class ScriptProjectSerializer(PrimaryModelSerializer):
    activation_policy = ChoiceField(choices=ActivationPolicyChoices, required=False)
    storage_key = serializers.UUIDField(read_only=True)
    active_revision = _ActiveRevisionSerializer(read_only=True, allow_null=True)
    data_source = DataSourceSerializer(nested=True, required=False, allow_null=True)

    class Meta:
        model = ScriptProject
        fields = (
            "id", "url", "display_url", "display", "name", "key", "storage_key", "activation_policy",
            "active_revision", "data_source", "data_source_path", "enabled", "description", "owner", "comments", "tags", "custom_fields",
            "created", "last_updated",
        )  # fmt: skip
        brief_fields = ("description", "display", "id", "key", "name", "url")


class ScriptFileSerializer(NetBoxModelSerializer):
    project = ScriptProjectSerializer(nested=True)
    discovery_status = ChoiceField(choices=ScriptFileDiscoveryChoices, read_only=True)

    class Meta:
        model = ScriptFile
        fields = (
            "id", "url", "display_url", "display", "project", "path", "enabled", "description",
            "discovery_status", "discovered_scripts", "discovery_errors", "discovered_at", "tags",
            "custom_fields", "created", "last_updated",
        )  # fmt: skip
        brief_fields = ("description", "display", "enabled", "id", "path", "url")
        read_only_fields = ("discovered_scripts", "discovery_errors", "discovered_at")

    def validate(self, data):
        # The project of a declaration is fixed: moving it would change the
        # meaning of snapshots that already name it.
        if (
            self.instance is not None
            and "project" in data
            and data["project"] != self.instance.project
        ):
            raise serializers.ValidationError(
                {"project": "A script file cannot move to another project."}
            )
        return super().validate(data)
