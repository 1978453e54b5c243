import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import NetBoxTable, PrimaryModelTable, columns

from ..models import PublishedScript, ScriptFile, ScriptProject, ScriptProjectRevision

__all__ = (
    "PublishedScriptTable",
    "ScriptFileTable",
    "ScriptProjectRevisionTable",
    "ScriptProjectTable",
)


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
    # Script Files go with their Project: there is no delete view to link to.
    actions = columns.ActionsColumn(actions=("edit", "changelog"))

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


class PublishedScriptTable(NetBoxTable):
    id = tables.Column(verbose_name=_("ID"), linkify=True)
    script = tables.Column(verbose_name=_("Script"), linkify=True)
    module_name = tables.Column(verbose_name=_("Module"))
    class_name = tables.Column(verbose_name=_("Class"), linkify=True)
    script_file_path = tables.Column(verbose_name=_("Script File"))
    revision = tables.Column(verbose_name=_("Serving revision"), linkify=True)
    enabled = columns.BooleanColumn(verbose_name=_("Enabled"))
    # Rows come and go with activation and Project deletion: edit only.
    actions = columns.ActionsColumn(actions=("edit",))

    class Meta(NetBoxTable.Meta):
        model = PublishedScript
        fields = (
            "id", "project", "script", "module_name", "class_name", "script_file_path", "revision",
            "enabled", "actions",
        )  # fmt: skip
        default_columns = (
            "id", "class_name", "module_name", "script_file_path", "revision", "enabled", "script",
        )  # fmt: skip
