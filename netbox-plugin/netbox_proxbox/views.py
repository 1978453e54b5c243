from core.models import Job
from dcim.models import Device
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.views.generic import View
from netbox.object_actions import BulkExport, ObjectAction
from netbox.views import generic
from utilities.rqworker import any_workers_for_queue
from utilities.views import register_model_view
from virtualization.models import VirtualMachine

from . import filtersets, forms, tables
from .models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxNodeTypeOverride,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from .sync.health import with_sync_health
from .sync.hygiene import hygiene_context
from .sync.report import is_sync_job, object_type_title, sync_job_report_context
from .sync.service import (
    SyncNotFound,
    SyncRequestError,
    find_endpoint,
    may_request_sync,
    preview_sync,
    request_sync,
    request_sync_all,
    target_of,
)
from .ui.panels import (
    ASSIGNMENT_RULE_LAYOUT,
    ENDPOINT_LAYOUT,
    LAYOUTS,
    NODE_TYPE_OVERRIDE_LAYOUT,
    PROXMOX_CLUSTER_LAYOUT,
    SYNC_STATE_LAYOUT,
)

#
# Endpoints
#


class SyncAllEndpoints(ObjectAction):
    """The "Sync all" button of the endpoint list (a CSRF-protected POST form)."""

    name = "sync_all"
    label = _("Sync all")
    template_name = "netbox_proxbox/inc/sync_all_button.html"
    permissions_required = {"change"}

    @classmethod
    def render(cls, context, obj, **kwargs):
        # Rendered without the request's context processors: hand the form its CSRF token.
        return super().render(context, obj, csrf_token=get_token(context["request"]), **kwargs)


@register_model_view(ProxmoxEndpoint, "list", path="", detail=False)
class ProxmoxEndpointListView(generic.ObjectListView):
    queryset = with_sync_health(
        ProxmoxEndpoint.objects.select_related("site", "tenant", "netbox_cluster")
    )
    actions = (*generic.ObjectListView.actions, SyncAllEndpoints)
    table = tables.ProxmoxEndpointTable
    filterset = filtersets.ProxmoxEndpointFilterSet
    filterset_form = forms.ProxmoxEndpointFilterForm


class EndpointSyncAction(ObjectAction):
    """A sync button of the endpoint page, for viewers who may sync this very endpoint
    (object-level permission, beyond the model-level check NetBox makes)."""

    permissions_required = {"change"}
    url_kwargs = ["pk"]

    @classmethod
    def render(cls, context, obj, **kwargs):
        if not may_request_sync(context["request"].user, obj):
            return ""
        return super().render(context, obj, object=obj, **kwargs)


class PreviewSync(EndpointSyncAction):
    name = "preview"
    label = _("Preview sync")
    template_name = "netbox_proxbox/inc/preview_sync_button.html"


class SyncNow(EndpointSyncAction):
    """A CSRF-protected POST form; disabled, with the reason, on a disabled endpoint."""

    name = "sync_now"
    label = _("Sync now")
    template_name = "netbox_proxbox/inc/sync_now_button.html"

    @classmethod
    def render(cls, context, obj, **kwargs):
        # Rendered without the request's context processors: hand the form its CSRF token.
        return super().render(context, obj, csrf_token=get_token(context["request"]), **kwargs)


@register_model_view(ProxmoxEndpoint)
class ProxmoxEndpointView(generic.ObjectView):
    queryset = ProxmoxEndpoint.objects.all()
    template_name = "generic/object.html"
    layout = ENDPOINT_LAYOUT
    actions = (PreviewSync, SyncNow, *generic.ObjectView.actions)


def endpoint_or_404(user, pk) -> ProxmoxEndpoint:
    """The endpoint `user` may sync, or the 404 NetBox gives for objects out of reach."""
    try:
        return find_endpoint(user, pk)
    except SyncNotFound:
        raise Http404(_("No Proxmox endpoint matches the given query.")) from None


def refused(request, exc: SyncRequestError, obj):
    """Back to the page the button was on, saying why nothing was queued."""
    messages.error(request, exc.detail)
    return redirect(obj.get_absolute_url())


def announce_queued(request, job, subject: str) -> None:
    """The success message; it links the Job only for users who may view Jobs."""
    if request.user.has_perm("core.view_job"):
        message = format_html(
            _('Sync of {subject} queued as <a href="{url}">job {job}</a>.'),
            subject=subject,
            url=job.get_absolute_url(),
            job=job.pk,
        )
    else:
        message = _("Sync of {subject} queued.").format(subject=subject)
    messages.success(request, message)
    warn_if_no_sync_worker(request, [job])


def warn_if_no_sync_worker(request, jobs) -> None:
    # Syncs have a queue (and worker) of their own: an installation upgraded with only
    # NetBox's `rqworker` would otherwise see its syncs stay pending with no hint why.
    for queue in sorted({job.queue_name for job in jobs}):
        if not any_workers_for_queue(queue):
            messages.warning(
                request,
                _(
                    "No RQ worker serves the queue {queue}: the sync waits until one starts "
                    "(manage.py rqworker {queue})."
                ).format(queue=queue),
            )


@register_model_view(ProxmoxEndpoint, "sync_all", path="sync-all", detail=False)
class ProxmoxEndpointSyncAllView(LoginRequiredMixin, View):
    """Queue a sync of every enabled endpoint the user may sync (each checked like Sync now)."""

    def post(self, request):
        jobs, skipped = request_sync_all(request.user)
        messages.success(
            request,
            _("{queued} endpoint sync(s) queued.").format(queued=len(jobs)),
        )
        for reason in skipped:
            messages.warning(request, reason)
        warn_if_no_sync_worker(request, jobs)
        return redirect("plugins:netbox_proxbox:proxmoxendpoint_list")


@register_model_view(ProxmoxEndpoint, "sync_now", path="sync")
class ProxmoxEndpointSyncView(LoginRequiredMixin, View):
    """The "Sync now" button: POST only (CSRF-protected), change permission on the endpoint."""

    def post(self, request, pk):
        endpoint = endpoint_or_404(request.user, pk)
        try:
            job = request_sync(request.user, endpoint)
        except SyncRequestError as exc:
            return refused(request, exc, endpoint)
        announce_queued(request, job, endpoint.name)
        return redirect(endpoint.get_absolute_url())


@register_model_view(ProxmoxEndpoint, "preview", path="preview")
class ProxmoxEndpointPreviewView(LoginRequiredMixin, View):
    """ "Preview sync": the backend's dry run, per object type; "Apply" is the Sync now form.

    A GET (the backend only reads), with the same permission and state checks as Sync now.
    """

    def get(self, request, pk):
        endpoint = endpoint_or_404(request.user, pk)
        try:
            report = preview_sync(request.user, endpoint)
        except SyncRequestError as exc:
            return refused(request, exc, endpoint)
        return render(
            request,
            "netbox_proxbox/proxmoxendpoint_preview.html",
            {
                "object": endpoint,
                "report": report,
                "plan": plan_sections(report),
                "hygiene": hygiene_context(report),
            },
        )


def plan_sections(report: dict) -> list[dict]:
    """The plan as the page lists it: per object type, creates / updates / deletes, with
    placeholder ids (objects the run would create) named instead of shown as numbers."""
    plan = report.get("plan") or {}
    placeholders = plan.get("placeholders") or {}

    def shown(value):
        if isinstance(value, int) and not isinstance(value, bool) and str(value) in placeholders:
            entry = placeholders[str(value)]
            return _("new {object_type} {label}").format(**entry)
        if isinstance(value, list):
            return ", ".join(str(shown(v)) for v in value) or "[]"
        if value is None or value == "":
            return "—"
        return value

    sections = []
    for object_type, types in (plan.get("object_types") or {}).items():
        sections.append(
            {
                "object_type": object_type,
                "title": object_type_title(object_type),
                "counts": (types["create"], types["update"], types["delete"]),
                "creates": [
                    {
                        "label": c["label"],
                        "fields": [(k, shown(v)) for k, v in sorted(c["payload"].items())],
                        "because": c.get("because"),
                    }
                    for c in types["creates"]
                ],
                "updates": [
                    {
                        "id": u["id"],
                        "label": u["label"],
                        "because": u.get("because"),
                        "changes": [
                            (name, shown(change["old"]), shown(change["new"]))
                            for name, change in u["changes"].items()
                        ],
                    }
                    for u in types["updates"]
                ],
                "deletes": types["deletes"],
            }
        )
    return sections


class SyncObjectView(LoginRequiredMixin, View):
    """ "Sync now" on a VM or node device page: that guest or node only (same claim, planners)."""

    models = {"virtualmachine": VirtualMachine, "device": Device}

    def post(self, request, model, pk):
        if model not in self.models:
            raise Http404()
        obj = self.models[model].objects.restrict(request.user, "view").filter(pk=pk).first()
        if obj is None:
            raise Http404()
        try:
            endpoint, target = target_of(request.user, obj)
            job = request_sync(request.user, endpoint, target=target)
        except SyncRequestError as exc:
            return refused(request, exc, obj)
        announce_queued(request, job, str(obj))
        return redirect(obj.get_absolute_url())


@register_model_view(ProxmoxEndpoint, "add", detail=False)
@register_model_view(ProxmoxEndpoint, "edit")
class ProxmoxEndpointEditView(generic.ObjectEditView):
    queryset = ProxmoxEndpoint.objects.all()
    form = forms.ProxmoxEndpointForm


@register_model_view(ProxmoxEndpoint, "delete")
class ProxmoxEndpointDeleteView(generic.ObjectDeleteView):
    queryset = ProxmoxEndpoint.objects.all()


@register_model_view(ProxmoxEndpoint, "bulk_edit", path="edit", detail=False)
class ProxmoxEndpointBulkEditView(generic.BulkEditView):
    queryset = ProxmoxEndpoint.objects.all()
    filterset = filtersets.ProxmoxEndpointFilterSet
    table = tables.ProxmoxEndpointTable
    form = forms.ProxmoxEndpointBulkEditForm


@register_model_view(ProxmoxEndpoint, "bulk_delete", path="delete", detail=False)
class ProxmoxEndpointBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxmoxEndpoint.objects.all()
    filterset = filtersets.ProxmoxEndpointFilterSet
    table = tables.ProxmoxEndpointTable


#
# Assignment rules: the operator's, with every view NetBox gives an editable model.
#


@register_model_view(ProxmoxAssignmentRule, "list", path="", detail=False)
class ProxmoxAssignmentRuleListView(generic.ObjectListView):
    queryset = ProxmoxAssignmentRule.objects.select_related(
        "endpoint", "tenant", "vm_role", "platform", "site", "location"
    )
    table = tables.ProxmoxAssignmentRuleTable
    filterset = filtersets.ProxmoxAssignmentRuleFilterSet
    filterset_form = forms.ProxmoxAssignmentRuleFilterForm


@register_model_view(ProxmoxAssignmentRule)
class ProxmoxAssignmentRuleView(generic.ObjectView):
    queryset = ProxmoxAssignmentRule.objects.all()
    template_name = "generic/object.html"
    layout = ASSIGNMENT_RULE_LAYOUT


@register_model_view(ProxmoxAssignmentRule, "add", detail=False)
@register_model_view(ProxmoxAssignmentRule, "edit")
class ProxmoxAssignmentRuleEditView(generic.ObjectEditView):
    queryset = ProxmoxAssignmentRule.objects.all()
    form = forms.ProxmoxAssignmentRuleForm


@register_model_view(ProxmoxAssignmentRule, "delete")
class ProxmoxAssignmentRuleDeleteView(generic.ObjectDeleteView):
    queryset = ProxmoxAssignmentRule.objects.all()


@register_model_view(ProxmoxAssignmentRule, "bulk_import", path="import", detail=False)
class ProxmoxAssignmentRuleBulkImportView(generic.BulkImportView):
    queryset = ProxmoxAssignmentRule.objects.all()
    model_form = forms.ProxmoxAssignmentRuleImportForm


@register_model_view(ProxmoxAssignmentRule, "bulk_edit", path="edit", detail=False)
class ProxmoxAssignmentRuleBulkEditView(generic.BulkEditView):
    queryset = ProxmoxAssignmentRule.objects.all()
    filterset = filtersets.ProxmoxAssignmentRuleFilterSet
    table = tables.ProxmoxAssignmentRuleTable
    form = forms.ProxmoxAssignmentRuleBulkEditForm


@register_model_view(ProxmoxAssignmentRule, "bulk_delete", path="delete", detail=False)
class ProxmoxAssignmentRuleBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxmoxAssignmentRule.objects.all()
    filterset = filtersets.ProxmoxAssignmentRuleFilterSet
    table = tables.ProxmoxAssignmentRuleTable


#
# Server-owned records: tracking records, typed sidecars and the inventory are written by
# the claim and the sync, so the UI lists, shows and exports them, nothing more (REST keeps
# its validated CRUD). No add, edit or delete views exist, so no page can link to one.
#

SERVER_OWNED = (
    # model, related objects its list shows, filter form (inventory lists have none)
    (ProxmoxCluster, ("endpoint", "netbox_cluster"), forms.ProxmoxClusterFilterForm),
    (
        ProxboxClusterSyncState,
        ("cluster", "proxmox_cluster"),
        forms.ProxboxClusterSyncStateFilterForm,
    ),
    (ProxmoxStorage, ("cluster", "device"), None),
    (ProxmoxBackup, ("cluster", "storage", "virtual_machine"), None),
    (ProxmoxBackupJob, ("cluster",), None),
    (ProxmoxSnapshot, ("cluster", "virtual_machine"), None),
    (ProxmoxReplicationJob, ("cluster", "virtual_machine", "target_device"), None),
    (ProxmoxHAGroup, ("cluster",), None),
    (ProxmoxHAResource, ("cluster", "virtual_machine", "group"), None),
    (ProxmoxHARule, ("cluster",), None),
)

SERVER_OWNED_LAYOUTS = {
    "proxmoxcluster": PROXMOX_CLUSTER_LAYOUT,
    "proxboxclustersyncstate": SYNC_STATE_LAYOUT,
    **LAYOUTS,
}


def register_read_only_views(model, related: tuple[str, ...], filterset_form) -> None:
    name = model.__name__
    queryset = model.objects.select_related(*related)
    list_view = type(
        f"{name}ListView",
        (generic.ObjectListView,),
        {
            "queryset": queryset,
            "table": getattr(tables, f"{name}Table"),
            "filterset": getattr(filtersets, f"{name}FilterSet"),
            "filterset_form": filterset_form,
            "actions": (BulkExport,),
        },
    )
    detail_view = type(
        f"{name}View",
        (generic.ObjectView,),
        {
            "queryset": queryset,
            "template_name": "generic/object.html",
            "layout": SERVER_OWNED_LAYOUTS[model._meta.model_name],
            "actions": (),
        },
    )
    register_model_view(model, "list", path="", detail=False)(list_view)
    register_model_view(model)(detail_view)


for _model, _related, _filterset_form in SERVER_OWNED:
    register_read_only_views(_model, _related, _filterset_form)


#
# Node type overrides
#


@register_model_view(ProxmoxNodeTypeOverride, "list", path="", detail=False)
class ProxmoxNodeTypeOverrideListView(generic.ObjectListView):
    queryset = ProxmoxNodeTypeOverride.objects.select_related("endpoint", "device_type")
    table = tables.ProxmoxNodeTypeOverrideTable
    filterset = filtersets.ProxmoxNodeTypeOverrideFilterSet
    filterset_form = forms.ProxmoxNodeTypeOverrideFilterForm


@register_model_view(ProxmoxNodeTypeOverride)
class ProxmoxNodeTypeOverrideView(generic.ObjectView):
    queryset = ProxmoxNodeTypeOverride.objects.select_related("endpoint", "device_type")
    template_name = "generic/object.html"
    layout = NODE_TYPE_OVERRIDE_LAYOUT


@register_model_view(ProxmoxNodeTypeOverride, "add", detail=False)
@register_model_view(ProxmoxNodeTypeOverride, "edit")
class ProxmoxNodeTypeOverrideEditView(generic.ObjectEditView):
    queryset = ProxmoxNodeTypeOverride.objects.all()
    form = forms.ProxmoxNodeTypeOverrideForm


@register_model_view(ProxmoxNodeTypeOverride, "delete")
class ProxmoxNodeTypeOverrideDeleteView(generic.ObjectDeleteView):
    queryset = ProxmoxNodeTypeOverride.objects.all()


@register_model_view(ProxmoxNodeTypeOverride, "bulk_import", path="import", detail=False)
class ProxmoxNodeTypeOverrideBulkImportView(generic.BulkImportView):
    queryset = ProxmoxNodeTypeOverride.objects.all()
    model_form = forms.ProxmoxNodeTypeOverrideImportForm


@register_model_view(ProxmoxNodeTypeOverride, "bulk_delete", path="delete", detail=False)
class ProxmoxNodeTypeOverrideBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxmoxNodeTypeOverride.objects.all()
    filterset = filtersets.ProxmoxNodeTypeOverrideFilterSet
    table = tables.ProxmoxNodeTypeOverrideTable


@register_model_view(ProxmoxEndpoint, "bulk_import", path="import", detail=False)
class ProxmoxEndpointBulkImportView(generic.BulkImportView):
    """NetBox's bulk import, kept from ever holding a pasted token secret beyond the request."""

    queryset = ProxmoxEndpoint.objects.all()
    model_form = forms.ProxmoxEndpointImportForm

    def post(self, request):
        # A background import would serialize the whole request, plaintext secrets included,
        # into the job queue; endpoint imports are small, so they always run in the request.
        # The copy is mutable, so get_extra_context() can scrub what a failed import echoes.
        request.POST = request.POST.copy()
        request.POST.pop("background_job", None)
        return super().post(request)

    def get_extra_context(self, request):
        # Only a failed import re-renders the form: never send pasted secrets back to the page.
        if request.method == "POST" and "token_secret" in request.POST.get("data", ""):
            request.POST["data"] = ""
            messages.warning(
                request,
                _("The pasted data contained token secrets and was cleared: paste it again."),
            )
        return super().get_extra_context(request)


class SyncJobReportView(LoginRequiredMixin, View):
    """The report card of a sync Job's page, reloaded by htmx while the Job runs."""

    def get(self, request, pk):
        job = get_object_or_404(Job.objects.restrict(request.user, "view"), pk=pk)
        if not is_sync_job(job):
            raise Http404
        return render(
            request, "netbox_proxbox/inc/sync_job_report.html", sync_job_report_context(job)
        )
