from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from extras.ui.panels import CustomFieldsPanel, TagsPanel
from netbox.object_actions import BulkEdit, BulkExport, BulkImport, EditObject, ObjectAction
from netbox.ui import layout
from netbox.ui.breadcrumbs import Breadcrumb, object_view_url
from netbox.ui.panels import CommentsPanel, JSONPanel
from netbox.views import generic
from utilities.permissions import get_permission_for_model
from utilities.views import ViewTab, register_model_view

from . import filtersets, forms, tables
from .activation import ACTIVATE_ACTION, activate_revision, deactivate_revision
from .choices import RevisionStatusChoices
from .models import PublishedScript, ScriptFile, ScriptProject, ScriptProjectRevision
from .storage import errors
from .storage.service import stage_upload
from .ui import panels
from .validation import accept_source

#
# Script projects
#


@register_model_view(ScriptProject, "list", path="", detail=False)
class ScriptProjectListView(generic.ObjectListView):
    queryset = ScriptProject.objects.select_related("active_revision")
    filterset = filtersets.ScriptProjectFilterSet
    filterset_form = forms.ScriptProjectFilterForm
    table = tables.ScriptProjectTable


@register_model_view(ScriptProject)
class ScriptProjectView(generic.ObjectView):
    queryset = ScriptProject.objects.all()
    template_name = "generic/object.html"
    layout = layout.SimpleLayout(
        left_panels=[panels.ScriptProjectPanel(), TagsPanel()],
        right_panels=[CustomFieldsPanel(), CommentsPanel()],
    )


@register_model_view(ScriptProject, "add", detail=False)
@register_model_view(ScriptProject, "edit")
class ScriptProjectEditView(generic.ObjectEditView):
    queryset = ScriptProject.objects.all()
    form = forms.ScriptProjectForm


class ProjectBusyRefusalMixin:
    """A deletion whose cascade waits too long for the Project lock (each
    Script File deletion takes it) is refused with a message, not a 500."""

    def post(self, request, *args, **kwargs):
        try:
            return super().post(request, *args, **kwargs)
        except errors.ProjectBusy as exc:
            messages.error(request, _("Not deleted: {error}. Retry shortly.").format(error=exc))
            return redirect(request.path)


@register_model_view(ScriptProject, "delete")
class ScriptProjectDeleteView(ProjectBusyRefusalMixin, generic.ObjectDeleteView):
    queryset = ScriptProject.objects.all()


@register_model_view(ScriptProject, "bulk_import", path="import", detail=False)
class ScriptProjectBulkImportView(generic.BulkImportView):
    queryset = ScriptProject.objects.all()
    model_form = forms.ScriptProjectImportForm


@register_model_view(ScriptProject, "bulk_edit", path="edit", detail=False)
class ScriptProjectBulkEditView(generic.BulkEditView):
    queryset = ScriptProject.objects.all()
    filterset = filtersets.ScriptProjectFilterSet
    table = tables.ScriptProjectTable
    form = forms.ScriptProjectBulkEditForm


@register_model_view(ScriptProject, "bulk_delete", path="delete", detail=False)
class ScriptProjectBulkDeleteView(ProjectBusyRefusalMixin, generic.BulkDeleteView):
    queryset = ScriptProject.objects.all()
    filterset = filtersets.ScriptProjectFilterSet
    table = tables.ScriptProjectTable


@register_model_view(ScriptProject, "scriptfiles", path="script-files")
class ScriptProjectScriptFilesView(generic.ObjectChildrenView):
    queryset = ScriptProject.objects.all()
    child_model = ScriptFile
    table = tables.ScriptFileTable
    filterset = filtersets.ScriptFileFilterSet
    filterset_form = forms.ScriptFileFilterForm
    actions = (EditObject, BulkEdit)
    tab = ViewTab(
        label=_("Script Files"),
        badge=lambda obj: obj.script_files.count(),
        permission="netbox_script_projects.view_scriptfile",
        weight=500,
    )

    def get_children(self, request, parent):
        return ScriptFile.objects.restrict(request.user, "view").filter(project=parent)


@register_model_view(ScriptProject, "revisions")
class ScriptProjectRevisionsView(generic.ObjectChildrenView):
    queryset = ScriptProject.objects.all()
    child_model = ScriptProjectRevision
    table = tables.ScriptProjectRevisionTable
    filterset = filtersets.ScriptProjectRevisionFilterSet
    actions = ()
    tab = ViewTab(
        label=_("Revisions"),
        badge=lambda obj: obj.revisions.count(),
        permission="netbox_script_projects.view_scriptprojectrevision",
        weight=510,
    )

    def get_children(self, request, parent):
        return ScriptProjectRevision.objects.restrict(request.user, "view").filter(project=parent)

    def get(self, request, *args, **kwargs):
        # The tab is reached through the project, but shows revisions.
        if not request.user.has_perm(get_permission_for_model(ScriptProjectRevision, "view")):
            raise PermissionDenied(_("Viewing script project revisions is not permitted."))
        return super().get(request, *args, **kwargs)

    def get_table(self, data, request, bulk_actions=True):
        table = super().get_table(data, request, bulk_actions=False)
        table.can_activate = can_activate(request.user, self._parent)
        return table

    def prep_table_data(self, request, queryset, parent):
        self._parent = parent
        return super().prep_table_data(request, queryset, parent)


@register_model_view(ScriptProject, "published_scripts", path="published-scripts")
class ScriptProjectPublishedScriptsView(generic.ObjectChildrenView):
    queryset = ScriptProject.objects.all()
    child_model = PublishedScript
    table = tables.PublishedScriptTable
    filterset = filtersets.PublishedScriptFilterSet
    actions = ()
    tab = ViewTab(
        label=_("Published Scripts"),
        badge=lambda obj: obj.published_scripts.count(),
        permission="netbox_script_projects.view_publishedscript",
        weight=515,
        hide_if_empty=True,
    )

    def get_children(self, request, parent):
        return (
            PublishedScript.objects.restrict(request.user, "view")
            .filter(project=parent)
            .select_related("script", "revision")
        )

    def get_table(self, data, request, bulk_actions=True):
        return super().get_table(data, request, bulk_actions=False)


@register_model_view(ScriptProject, "upload")
class ScriptProjectUploadView(generic.ObjectView):
    """Stage an uploaded .py file or archive as a revision (same service as REST)."""

    queryset = ScriptProject.objects.all()
    template_name = "netbox_script_projects/scriptproject_upload.html"
    tab = ViewTab(
        label=_("Upload"), permission="netbox_script_projects.add_scriptprojectrevision", weight=520
    )

    def get_required_permission(self):
        return get_permission_for_model(ScriptProjectRevision, "add")

    def _project(self, request, pk):
        # A project the user can see but not change is refused (403); only an
        # invisible one is "not found".
        project = ScriptProject.objects.restrict(request.user, "change").filter(pk=pk).first()
        if project is None:
            get_object_or_404(ScriptProject.objects.restrict(request.user, "view"), pk=pk)
            raise PermissionDenied(_("Changing this script project is not permitted."))
        return project

    def _render(self, request, project, form, storage_errors=()):
        return render(
            request,
            self.template_name,
            {"object": project, "form": form, "storage_errors": storage_errors, "tab": self.tab},
        )

    def get(self, request, pk):
        return self._render(request, self._project(request, pk), forms.ScriptProjectUploadForm())

    def post(self, request, pk):
        project = self._project(request, pk)
        form = forms.ScriptProjectUploadForm(request.POST, request.FILES)
        if not form.is_valid():
            return self._render(request, project, form)
        uploaded = form.cleaned_data["file"]
        try:
            result = stage_upload(project, uploaded, uploaded.name)
        except errors.SubmissionRejected as exc:
            messages.error(request, _("The upload was rejected."))
            return self._render(request, project, form, exc.errors)
        except errors.StorageWriteFailed as exc:
            messages.error(request, _("Storage write failed; upload again to resume."))
            return self._render(request, project, form, exc.errors)
        except errors.VerificationFailed as exc:
            messages.error(request, _("Stored content differs from its manifest."))
            return self._render(request, project, form, exc.findings)
        except errors.ScriptProjectStorageError as exc:
            messages.error(request, str(exc))
            return self._render(request, project, form)
        messages.success(
            request,
            _("Revision {revision} {outcome}.").format(
                revision=result.revision, outcome=result.outcome
            ),
        )
        try:
            accept_source(result.revision)
        except errors.ScriptProjectStorageError as exc:
            messages.warning(request, _("Automatic activation failed: {error}").format(error=exc))
        return redirect(result.revision.get_absolute_url())


def can_activate(user, project) -> bool:
    """The owning Project's activate permission (object permissions included)."""
    return ScriptProject.objects.restrict(user, ACTIVATE_ACTION).filter(pk=project.pk).exists()


class RevisionLifecycleView(generic.ObjectView):
    """Confirmation page of a revision's Activate or Deactivate (its own form)."""

    queryset = ScriptProjectRevision.objects.select_related("project")
    template_name = "netbox_script_projects/revision_lifecycle_confirm.html"
    operation = None
    title = ""
    message = ""
    done = ""

    def get_required_permission(self):
        return get_permission_for_model(ScriptProjectRevision, "view")

    def _revision(self, request, pk):
        revision = get_object_or_404(
            ScriptProjectRevision.objects.restrict(request.user, "view").select_related("project"),
            pk=pk,
        )
        if not can_activate(request.user, revision.project):
            raise PermissionDenied(_("Activating revisions of this project is not permitted."))
        return revision

    def _return_url(self, revision):
        return reverse(
            "plugins:netbox_script_projects:scriptproject_revisions", args=[revision.project_id]
        )

    def get(self, request, pk):
        revision = self._revision(request, pk)
        return render(
            request,
            self.template_name,
            {
                "object": revision,
                "title": self.title,
                "message": self.message,
                "return_url": self._return_url(revision),
                "button_class": "primary",
            },
        )

    def post(self, request, pk):
        revision = self._revision(request, pk)
        try:
            type(self).operation(revision)
        except errors.ScriptProjectStorageError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, self.done.format(revision=revision))
        return redirect(self._return_url(revision))


@register_model_view(ScriptProjectRevision, "activate")
class ScriptProjectRevisionActivateView(RevisionLifecycleView):
    operation = activate_revision
    title = _("Activate revision")
    message = _(
        "This revision becomes the project's active source and publishes its scripts; "
        "the currently active revision is retired."
    )
    done = _("Revision {revision} activated.")


@register_model_view(ScriptProjectRevision, "deactivate")
class ScriptProjectRevisionDeactivateView(RevisionLifecycleView):
    operation = deactivate_revision
    title = _("Deactivate revision")
    message = _(
        "This revision and its scripts are retired; the project has no active source "
        "until a revision is activated again."
    )
    done = _("Revision {revision} deactivated.")


#
# Published scripts: the administrator edits `enabled`; rows come and go with
# activation and Project deletion (no add or delete views)
#


@register_model_view(PublishedScript)
class PublishedScriptView(generic.ObjectView):
    queryset = PublishedScript.objects.select_related("project", "script", "revision")
    template_name = "generic/object.html"
    actions = (EditObject,)
    layout = layout.SimpleLayout(
        left_panels=[panels.PublishedScriptPanel()],
        breadcrumbs=[
            Breadcrumb("project"),
            Breadcrumb(
                "project",
                label=_("Published Scripts"),
                url=object_view_url(
                    "plugins:netbox_script_projects:scriptproject_published_scripts"
                ),
            ),
        ],
        root_breadcrumb=False,
    )


@register_model_view(PublishedScript, "edit")
class PublishedScriptEditView(generic.ObjectEditView):
    queryset = PublishedScript.objects.select_related("project", "script")
    form = forms.PublishedScriptForm


#
# Script files (removed only by Project deletion: no delete views)
#


@register_model_view(ScriptFile, "list", path="", detail=False)
class ScriptFileListView(generic.ObjectListView):
    queryset = ScriptFile.objects.select_related("project")
    filterset = filtersets.ScriptFileFilterSet
    filterset_form = forms.ScriptFileFilterForm
    table = tables.ScriptFileTable
    actions = (BulkImport, BulkExport, BulkEdit)


@register_model_view(ScriptFile)
class ScriptFileView(generic.ObjectView):
    queryset = ScriptFile.objects.select_related("project")
    template_name = "generic/object.html"
    actions = (EditObject,)
    layout = layout.SimpleLayout(
        left_panels=[panels.ScriptFilePanel(), TagsPanel()],
        right_panels=[panels.ScriptFileDiscoveryPanel(), CustomFieldsPanel()],
    )


@register_model_view(ScriptFile, "add", detail=False)
@register_model_view(ScriptFile, "edit")
class ScriptFileEditView(generic.ObjectEditView):
    queryset = ScriptFile.objects.all()
    form = forms.ScriptFileForm


@register_model_view(ScriptFile, "bulk_import", path="import", detail=False)
class ScriptFileBulkImportView(generic.BulkImportView):
    queryset = ScriptFile.objects.all()
    model_form = forms.ScriptFileImportForm


@register_model_view(ScriptFile, "bulk_edit", path="edit", detail=False)
class ScriptFileBulkEditView(generic.BulkEditView):
    queryset = ScriptFile.objects.all()
    filterset = filtersets.ScriptFileFilterSet
    table = tables.ScriptFileTable
    form = forms.ScriptFileBulkEditForm


#
# Revisions: a detail page only (reached from the Project's Revisions tab)
#


class _RevisionLifecycleAction(ObjectAction):
    """A lifecycle button of the revision page: shown for the statuses it
    applies to and only with the owning Project's activate permission."""

    url_kwargs = ["pk"]
    template_name = "netbox_script_projects/buttons/revision_lifecycle.html"
    statuses = ()
    css_class = ""

    @classmethod
    def render(cls, context, obj, **kwargs):
        if obj.status not in cls.statuses or not can_activate(context["request"].user, obj.project):
            return ""
        return super().render(context, obj, action=cls.name, css_class=cls.css_class, **kwargs)


class ActivateRevision(_RevisionLifecycleAction):
    name = "activate"
    label = _("Activate")
    statuses = RevisionStatusChoices.ACTIVATABLE
    css_class = "btn-green"


class DeactivateRevision(_RevisionLifecycleAction):
    name = "deactivate"
    label = _("Deactivate")
    statuses = (RevisionStatusChoices.ACTIVE,)
    css_class = "btn-orange"


@register_model_view(ScriptProjectRevision)
class ScriptProjectRevisionView(generic.ObjectView):
    queryset = ScriptProjectRevision.objects.select_related("project")
    template_name = "generic/object.html"
    actions = (ActivateRevision, DeactivateRevision)
    layout = layout.SimpleLayout(
        left_panels=[panels.ScriptProjectRevisionPanel()],
        right_panels=[
            JSONPanel("validation_errors", title=_("Validation errors")),
            # Environment failures return the revision to materialized: without
            # this the page would show "Materialized" and no reason.
            JSONPanel("last_validation_failure", title=_("Last validation failure")),
            JSONPanel("discovered_scripts", title=_("Discovered scripts")),
        ],
        breadcrumbs=[
            Breadcrumb("project"),
            Breadcrumb(
                "project",
                label=_("Revisions"),
                url=object_view_url("plugins:netbox_script_projects:scriptproject_revisions"),
            ),
        ],
        root_breadcrumb=False,
    )
