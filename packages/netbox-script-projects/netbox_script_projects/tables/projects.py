import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import NetBoxTable, PrimaryModelTable, columns

from ..models import ScriptFile, ScriptProject, ScriptProjectRevision

__all__ = ("ScriptFileTable", "ScriptProjectRevisionTable", "ScriptProjectTable")


class ScriptProjectTable(PrimaryModelTable):
    name = tables.Column(verbose_name=_("Name"), linkify=True)
    activation_policy = columns.ChoiceFieldColumn(verbose_name=_("Activation policy"))
    active_revision = tables.Column(verbose_name=_("Active revision"), linkify=True)
    enabled = columns.BooleanColumn(verbose_name=_("Enabled"))
    tags = columns.TagColumn(url_name="plugins:netbox_script_projects:scriptproject_list")

    class Meta(PrimaryModelTable.Meta):
        model = ScriptProject
        fields = (
            "pk", "id", "name", "key", "storage_key", "activation_policy", "active_revision", "enabled",
            "description", "owner", "comments", "tags", "created", "last_updated",
        )  # fmt: skip
        default_columns = (
            "pk",
            "name",
            "key",
            "activation_policy",
            "active_revision",
            "enabled",
            "description",
        )


class ScriptFileTable(NetBoxTable):
    path = tables.Column(verbose_name=_("Path"), linkify=True)
    project = tables.Column(verbose_name=_("Project"), linkify=True)
    enabled = columns.BooleanColumn(verbose_name=_("Enabled"))
    discovery_status = columns.ChoiceFieldColumn(verbose_name=_("Discovery"))
    tags = columns.TagColumn(url_name="plugins:netbox_script_projects:scriptfile_list")

    class Meta(NetBoxTable.Meta):
        model = ScriptFile
        fields = (
            "pk", "id", "project", "path", "enabled", "discovery_status", "discovered_at", "description", "tags",
            "created", "last_updated",
        )  # fmt: skip
        default_columns = ("pk", "project", "path", "enabled", "discovery_status", "description")


class ScriptProjectRevisionTable(NetBoxTable):
    id = tables.Column(verbose_name=_("ID"), linkify=True)
    digest = tables.Column(verbose_name=_("Source digest"), linkify=True)
    script_file_digest = tables.Column(verbose_name=_("Script File digest"))
    status = columns.ChoiceFieldColumn(verbose_name=_("Status"))
    # Links to confirmation pages (each with its own form), never part of a
    # bulk form: the table has no selection column and no bulk actions.
    lifecycle = tables.TemplateColumn(
        template_name="netbox_script_projects/inc/revision_lifecycle_buttons.html",
        verbose_name="",
        orderable=False,
        attrs={"td": {"class": "text-end text-nowrap noprint"}},
    )
    # No edit/delete links: revisions are not edited directly.
    actions = columns.ActionsColumn(actions=())
    # Set by the view: may the user activate revisions of this project?
    can_activate = False

    class Meta(NetBoxTable.Meta):
        model = ScriptProjectRevision
        fields = (
            "id", "project", "digest", "script_file_digest", "status", "file_count", "total_size",
            "activated", "created", "lifecycle",
        )  # fmt: skip
        default_columns = (
            "id",
            "digest",
            "script_file_digest",
            "status",
            "file_count",
            "total_size",
            "activated",
            "created",
            "lifecycle",
        )
        exempt_columns = ("lifecycle",)
