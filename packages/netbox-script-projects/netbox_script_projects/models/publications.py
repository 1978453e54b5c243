from django.db import models
from django.utils.translation import gettext_lazy as _

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
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)

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

    @property
    def is_live(self) -> bool:
        return self.revision_id is not None
