from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models import ChangeLoggedModel
from netbox.models.features import EventRulesMixin

from ..choices import RevisionStatusChoices
from ..constants import STORAGE_ROOT

__all__ = ("ScriptProjectRevision",)

DIGEST_REGEX = r"^[0-9a-f]{64}$"


class ScriptProjectRevision(ChangeLoggedModel, EventRulesMixin):
    """An immutable snapshot of a Project's source tree and its Script File selection.

    Identity is (project, digest, script_file_digest). Storage and validation
    services manage the lifecycle fields; nothing else edits a revision.
    """

    project = models.ForeignKey(
        to="netbox_script_projects.ScriptProject",
        on_delete=models.CASCADE,
        related_name="revisions",
        verbose_name=_("project"),
        editable=False,
    )
    # Null for rejected submissions: different rejected uploads may share an
    # accepted subset of files and must not share a content identity.
    digest = models.CharField(
        verbose_name=_("source digest"), max_length=64, blank=True, null=True, editable=False
    )
    script_file_digest = models.CharField(
        verbose_name=_("script file digest"), max_length=64, blank=True, null=True, editable=False
    )
    manifest = models.JSONField(verbose_name=_("manifest"), blank=True, null=True, editable=False)
    script_file_snapshot = models.JSONField(
        verbose_name=_("script file snapshot"), blank=True, null=True, editable=False
    )
    file_count = models.PositiveIntegerField(verbose_name=_("files"), default=0, editable=False)
    total_size = models.PositiveBigIntegerField(
        verbose_name=_("total size"), default=0, editable=False
    )
    status = models.CharField(
        verbose_name=_("status"),
        max_length=30,
        choices=RevisionStatusChoices,
        default=RevisionStatusChoices.STAGING,
        editable=False,
    )
    # Storage-time entries: {path, code, message}. Validation-time entries:
    # {source_path, code, message[, exception_type, traceback]}.
    validation_errors = models.JSONField(
        verbose_name=_("validation errors"), default=list, blank=True, editable=False
    )
    # The latest environment failure of a validation attempt (not a verdict).
    last_validation_failure = models.JSONField(
        verbose_name=_("last validation failure"), blank=True, null=True, editable=False
    )
    discovered_scripts = models.JSONField(
        verbose_name=_("discovered scripts"), default=list, blank=True, editable=False
    )
    activated = models.DateTimeField(
        verbose_name=_("activated"), blank=True, null=True, editable=False
    )
    # The validation lease: the owning Job and claim time.
    validation_job = models.ForeignKey(
        to="core.Job",
        on_delete=models.SET_NULL,
        related_name="+",
        blank=True,
        null=True,
        editable=False,
        verbose_name=_("validation job"),
    )
    validation_started = models.DateTimeField(
        verbose_name=_("validation started"), blank=True, null=True, editable=False
    )

    class Meta:
        ordering = ("project", "-created", "-pk")
        verbose_name = _("script project revision")
        verbose_name_plural = _("script project revisions")
        constraints = (
            models.UniqueConstraint(
                fields=("project", "digest", "script_file_digest"),
                name="netbox_script_projects_revision_identity",
                violation_error_message=_(
                    "This project already has a revision of this source and selection."
                ),
            ),
            # A content identity is all or nothing: both digests, or neither.
            models.CheckConstraint(
                condition=(
                    models.Q(digest__isnull=True, script_file_digest__isnull=True)
                    | models.Q(digest__regex=DIGEST_REGEX, script_file_digest__regex=DIGEST_REGEX)
                ),
                name="netbox_script_projects_revision_digests",
            ),
            # Only rejected submissions lack an identity; they are refused
            # for good (invalid, with their storage-time errors).
            models.CheckConstraint(
                condition=models.Q(digest__isnull=False)
                | models.Q(status=RevisionStatusChoices.INVALID),
                name="netbox_script_projects_revision_rejected_status",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=RevisionStatusChoices.values()),
                name="netbox_script_projects_revision_status",
            ),
            models.UniqueConstraint(
                fields=("project",),
                condition=models.Q(status=RevisionStatusChoices.ACTIVE),
                name="netbox_script_projects_revision_one_active",
            ),
        )
        indexes = (
            models.Index(fields=("project", "digest"), name="nbsp_revision_project_digest"),
            models.Index(fields=("status",), name="nbsp_revision_status"),
        )

    def __str__(self):
        if self.digest:
            return f"{self.project} @ {self.digest[:12]}/{self.script_file_digest[:8]}"
        return f"{self.project} (rejected #{self.pk})"

    def get_absolute_url(self):
        return reverse("plugins:netbox_script_projects:scriptprojectrevision", args=[self.pk])

    def get_status_color(self):
        return RevisionStatusChoices.colors.get(self.status)

    def serialize_object(self, exclude=None):
        # The manifest and snapshot are full stored documents, and the lease
        # fields record internal ownership; change records and event
        # snapshots carry what the REST serializer shows.
        exclude = [
            *(exclude or ()),
            "manifest",
            "script_file_snapshot",
            "validation_job",
            "validation_started",
        ]
        return super().serialize_object(exclude=exclude)

    @property
    def storage_prefix(self):
        """Key prefix of this revision's content (shared by all selections)."""
        if not self.digest:
            return None
        return f"{STORAGE_ROOT}/{self.project.storage_key}/revisions/{self.digest}/"
