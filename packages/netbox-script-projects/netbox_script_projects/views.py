from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy as _
from extras.ui.panels import CustomFieldsPanel, TagsPanel
from netbox.object_actions import BulkEdit, BulkExport, BulkImport, EditObject
from netbox.ui import layout
from netbox.ui.breadcrumbs import Breadcrumb, object_view_url
from netbox.ui.panels import CommentsPanel, JSONPanel
from netbox.views import generic
from utilities.permissions import get_permission_for_model
from utilities.views import ViewTab, register_model_view

from . import filtersets, forms, tables
from .models import ScriptFile, ScriptProject, ScriptProjectRevision
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


@register_model_view(ScriptProject, "delete")
class ScriptProjectDeleteView(generic.ObjectDeleteView):
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
class ScriptProjectBulkDeleteView(generic.BulkDeleteView):
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
        return get_object_or_404(ScriptProject.objects.restrict(request.user, "change"), pk=pk)

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


@register_model_view(ScriptProjectRevision)
class ScriptProjectRevisionView(generic.ObjectView):
    queryset = ScriptProjectRevision.objects.select_related("project")
    template_name = "generic/object.html"
    actions = ()
    layout = layout.SimpleLayout(
        left_panels=[panels.ScriptProjectRevisionPanel()],
        right_panels=[
            JSONPanel("validation_errors", title=_("Validation errors")),
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
