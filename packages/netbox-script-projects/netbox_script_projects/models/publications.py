from django.db import models, transaction
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models.features import ChangeLoggingMixin
from utilities.querysets import RestrictedQuerySet

__all__ = ("PublishedScript",)


class PublishedScript(models.Model):
    """The plugin's side of a NetBox Script row that a revision published.

    The Script row (and its Job history) outlives every revision: retiring
    clears `revision` and makes the Script non-executable; publishing the same
    class again reuses the row. `enabled` belongs to the administrator and is
    never changed by activation.
    """

    project = models.ForeignKey(
        to="netbox_script_projects.ScriptProject",
        on_delete=models.CASCADE,
        related_name="published_scripts",
        editable=False,
    )
    script = models.OneToOneField(
        to="extras.Script",
        on_delete=models.CASCADE,
        related_name="script_project_publication",
        editable=False,
    )
    # Project-relative identity of the class: defining module and class name.
    module_name = models.CharField(max_length=255, editable=False)
    class_name = models.CharField(max_length=100, editable=False)
    # The Script File that published it in `revision` (or last did).
    script_file_path = models.CharField(max_length=512, editable=False)
    # The pinned revision whose verified content runs; null once retired.
    revision = models.ForeignKey(
        to="netbox_script_projects.ScriptProjectRevision",
        on_delete=models.SET_NULL,
        related_name="published_scripts",
        blank=True,
        null=True,
        editable=False,
    )
    enabled = models.BooleanField(
        verbose_name=_("enabled"),
        default=True,
        help_text=_("A disabled script cannot run, whichever revision publishes it"),
    )

    objects = RestrictedQuerySet.as_manager()

    # Change logging of the administrator's edits without the mixin's
    # created/last_updated columns (NetBox's signal needs only these methods).
    _changelog_message = None
    serialize_object = ChangeLoggingMixin.serialize_object
    snapshot = ChangeLoggingMixin.snapshot
    to_objectchange = ChangeLoggingMixin.to_objectchange

    class Meta:
        ordering = ("project", "module_name", "class_name")
        verbose_name = _("published script")
        verbose_name_plural = _("published scripts")
        constraints = (
            models.UniqueConstraint(
                fields=("project", "module_name", "class_name"),
                name="netbox_script_projects_published_identity",
            ),
        )

    def __str__(self):
        return f"{self.module_name}.{self.class_name}"

    def get_absolute_url(self):
        return reverse("plugins:netbox_script_projects:publishedscript", args=[self.pk])

    def save(self, *args, **kwargs):
        """Saving an existing row writes `enabled` only (the administrator's field).

        The other fields belong to activation, which writes them with
        update_fields under the Project lock; a full save from a form loaded
        before an activation must not write a stale `revision` back. The NetBox
        Script follows `enabled` at once while a revision serves it.
        """
        from extras.models import Script

        from ..storage.locks import project_write_lock

        if self._state.adding or self.pk is None:
            return super().save(*args, **kwargs)
        update_fields = kwargs.pop("update_fields", None)
        if update_fields is not None and "enabled" not in update_fields:
            return super().save(*args, update_fields=update_fields, **kwargs)
        with transaction.atomic():
            # Serializes with activation, which reads `enabled` while publishing.
            project_write_lock(self.project.storage_key)
            super().save(*args, update_fields=update_fields or ["enabled"], **kwargs)
            live = PublishedScript.objects.filter(pk=self.pk, revision__isnull=False).exists()
            Script.objects.filter(pk=self.script_id).update(is_executable=self.enabled and live)

    @property
    def is_live(self) -> bool:
        return self.revision_id is not None
