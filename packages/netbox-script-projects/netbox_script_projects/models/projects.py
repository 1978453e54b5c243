import uuid

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models.functions import Lower
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel, PrimaryModel
from netbox.models.features import JobsMixin

from ..choices import ActivationPolicyChoices, ScriptFileDiscoveryChoices
from ..storage.paths import script_file_path_errors, script_module_name_errors, tree_conflicts

__all__ = ("ScriptFile", "ScriptProject")


class ScriptProject(JobsMixin, PrimaryModel):
    """A named source tree whose uploads become immutable revisions."""

    name = models.CharField(verbose_name=_("name"), max_length=100, unique=True)
    key = models.SlugField(
        verbose_name=_("key"),
        max_length=100,
        unique=True,
        help_text=_("Stable identifier of the project, used in filters and URLs"),
    )
    # Addresses stored content and the Project lock. Editable fields (name,
    # key) may change; this never does, so every node finds the same content.
    storage_key = models.UUIDField(
        verbose_name=_("storage key"),
        default=uuid.uuid4,
        unique=True,
        editable=False,
    )
    activation_policy = models.CharField(
        verbose_name=_("activation policy"),
        max_length=30,
        choices=ActivationPolicyChoices,
        default=ActivationPolicyChoices.AUTOMATIC,
    )
    # SET_NULL: removing the active revision leaves the Project without an
    # active source, and lets Project deletion cascade through its revisions
    # without a protected-reference cycle.
    active_revision = models.ForeignKey(
        to="netbox_script_projects.ScriptProjectRevision",
        on_delete=models.SET_NULL,
        related_name="active_revision_for",
        blank=True,
        null=True,
        editable=False,
        verbose_name=_("active revision"),
    )
    # The revision the latest upload, refresh or reconciliation resolved to.
    # Automatic activation by a validation Job only activates this one.
    accepted_revision = models.ForeignKey(
        to="netbox_script_projects.ScriptProjectRevision",
        on_delete=models.SET_NULL,
        related_name="accepted_revision_for",
        blank=True,
        null=True,
        editable=False,
        verbose_name=_("accepted revision"),
    )
    # Optional mirror: each completed sync of this Data Source reconciles the
    # directory below into a new (or reused) revision.
    data_source = models.ForeignKey(
        to="core.DataSource",
        on_delete=models.SET_NULL,
        related_name="+",
        blank=True,
        null=True,
        verbose_name=_("data source"),
    )
    data_source_path = models.CharField(
        verbose_name=_("data source directory"),
        max_length=512,
        blank=True,
        help_text=_("Directory of the Data Source holding the project tree (blank: its root)"),
    )
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)

    clone_fields = ("activation_policy", "enabled", "description")

    class Meta:
        ordering = ("name",)
        # Activation and deactivation of revisions are governed by this
        # action on the owning project (NetBox's "<action>_<model>" naming,
        # so object permissions with the "activate" action grant it).
        permissions = [("activate_scriptproject", "Activate and deactivate revisions")]
        verbose_name = _("script project")
        verbose_name_plural = _("script projects")

    def __str__(self):
        return self.name

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._loaded_storage_key = instance.__dict__.get("storage_key")
        return instance

    def get_absolute_url(self):
        return reverse("plugins:netbox_script_projects:scriptproject", args=[self.pk])

    def get_activation_policy_color(self):
        return ActivationPolicyChoices.colors.get(self.activation_policy)

    def save(self, *args, **kwargs):
        loaded = getattr(self, "_loaded_storage_key", None)
        if loaded is not None and self.storage_key != loaded:
            raise ValidationError({"storage_key": _("The storage key of a project never changes.")})
        super().save(*args, **kwargs)
        self._loaded_storage_key = self.storage_key


class ScriptFile(NetBoxModel):
    """A Project-relative Python file declared to publish Scripts."""

    project = models.ForeignKey(
        to=ScriptProject,
        on_delete=models.CASCADE,
        related_name="script_files",
        verbose_name=_("project"),
    )
    path = models.CharField(
        verbose_name=_("path"),
        max_length=512,
        help_text=_("Project-relative path of a .py file, e.g. scripts/inventory.py"),
    )
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    description = models.CharField(verbose_name=_("description"), max_length=200, blank=True)

    # Discovery fields: written only by validation of the revision named in
    # discovered_revision, under that revision's validation lease.
    discovery_status = models.CharField(
        verbose_name=_("discovery status"),
        max_length=30,
        choices=ScriptFileDiscoveryChoices,
        default=ScriptFileDiscoveryChoices.PENDING,
        editable=False,
    )
    discovered_scripts = models.JSONField(
        verbose_name=_("discovered scripts"), default=list, blank=True, editable=False
    )
    discovery_errors = models.JSONField(
        verbose_name=_("discovery errors"), default=list, blank=True, editable=False
    )
    discovered_revision = models.ForeignKey(
        to="netbox_script_projects.ScriptProjectRevision",
        on_delete=models.SET_NULL,
        related_name="+",
        blank=True,
        null=True,
        editable=False,
        verbose_name=_("discovered in revision"),
    )
    discovered_at = models.DateTimeField(
        verbose_name=_("discovered at"), blank=True, null=True, editable=False
    )

    clone_fields = ("project", "enabled")
    DISCOVERY_FIELDS = frozenset(
        ("discovery_status", "discovered_scripts", "discovery_errors", "discovered_revision",
         "discovered_at")
    )  # fmt: skip

    class Meta:
        ordering = ("project", "path")
        verbose_name = _("script file")
        verbose_name_plural = _("script files")
        constraints = (
            models.UniqueConstraint(
                fields=("project", "path"), name="netbox_script_projects_scriptfile_unique_path"
            ),
            models.UniqueConstraint(
                "project",
                Lower("path"),
                name="netbox_script_projects_scriptfile_unique_path_casefold",
                violation_error_message=_(
                    "Another script file of this project differs only in case."
                ),
            ),
        )

    def __str__(self):
        return self.path

    def get_absolute_url(self):
        return reverse("plugins:netbox_script_projects:scriptfile", args=[self.pk])

    def get_discovery_status_color(self):
        return ScriptFileDiscoveryChoices.colors.get(self.discovery_status)

    def clean(self):
        super().clean()
        path = self.path or ""
        if errors := script_file_path_errors(path) or script_module_name_errors(path):
            raise ValidationError({"path": [error.message for error in errors]})
        if not self.project_id:
            return
        if self.pk:
            stored_project = (
                ScriptFile.objects.filter(pk=self.pk).values_list("project_id", flat=True).first()
            )
            if stored_project is not None and stored_project != self.project_id:
                # Frozen snapshots name this declaration; it never moves.
                raise ValidationError(
                    {"project": _("A script file cannot move to another project.")}
                )
        self._check_declaration_conflicts()

    def _check_declaration_conflicts(self):
        """Refuse a path the Script File snapshot rules would refuse later.

        The snapshot check (case and Unicode-normalization aliases, a module
        beside a package directory, two paths importing as one module) runs
        on every staging; a declaration it rejects would make every upload
        of the project fail as corrupt. Disabled siblings count too: enabling
        one must not create the conflict.
        """
        if not self.project_id or not self.path:
            return
        siblings = list(
            ScriptFile.objects.filter(project_id=self.project_id)
            .exclude(pk=self.pk)
            .values_list("path", flat=True)
        )
        known = set(tree_conflicts(siblings))
        added = [e for e in tree_conflicts([*siblings, self.path]) if e not in known]
        if added:
            raise ValidationError(
                {
                    "path": [
                        _("{path}: {message}").format(path=e.path, message=e.message) for e in added
                    ]
                }
            )

    def save(self, *args, **kwargs):
        # Declaration edits serialize with staging and refresh through the
        # Project write lock, so a snapshot never sees half of an edit.
        from ..storage.locks import project_write_lock

        with transaction.atomic():
            project_write_lock(self.project.storage_key)
            # Repeated under the lock: a concurrent declaration may have
            # passed clean() at the same time.
            self._check_declaration_conflicts()
            if not self._state.adding and kwargs.get("update_fields") is None:
                # Validation writes the discovery fields with UPDATEs; an
                # instance loaded before that must not write stale ones back.
                kwargs["update_fields"] = [
                    f.name
                    for f in self._meta.concrete_fields
                    if not f.primary_key and f.name not in self.DISCOVERY_FIELDS
                ]
            super().save(*args, **kwargs)
