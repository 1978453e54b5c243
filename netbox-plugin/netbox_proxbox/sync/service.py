"""Requesting a sync ("Sync now" in the UI and REST): who may, and enqueueing the Job."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rq import Callback

from ..ownership.permissions import permitted, visible
from .client import BackendClient, BackendError
from .config import BackendNotConfigured, BackendSettings, rq_job_timeout
from .jobs import SyncEndpointJob, active_sync_job, job_lost


class SyncRequestError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail

    def as_response_data(self) -> dict:
        return {"detail": self.detail, "code": self.code}


class SyncNotFound(SyncRequestError):
    status_code = 404
    code = "not_found"


class SyncForbidden(SyncRequestError):
    status_code = 403
    code = "permission_denied"


class SyncEndpointDisabled(SyncRequestError):
    status_code = 409
    code = "endpoint_disabled"


class SyncInProgress(SyncRequestError):
    status_code = 409
    code = "sync_in_progress"


def find_endpoint(user, pk):
    """The endpoint if `user` may view it; SyncNotFound otherwise (nothing leaks)."""
    from ..models import ProxmoxEndpoint

    try:
        pk = int(pk)
    except (TypeError, ValueError):
        raise SyncNotFound(_("No Proxmox endpoint matches the given query.")) from None
    endpoint = ProxmoxEndpoint.objects.restrict(user, "view").filter(pk=pk).first()
    if endpoint is None:
        raise SyncNotFound(_("No Proxmox endpoint matches the given query."))
    return endpoint


def may_request_sync(user, endpoint) -> bool:
    """A sync rewrites what the endpoint owns: it takes change permission on the endpoint."""
    from ..models import ProxmoxEndpoint

    return visible(user, ProxmoxEndpoint, endpoint.pk) and permitted(
        user, ProxmoxEndpoint, "change", endpoint.pk
    )


class SyncPreviewFailed(SyncRequestError):
    status_code = 502
    code = "preview_failed"


def _check_may_sync(user, endpoint) -> None:
    if not may_request_sync(user, endpoint):
        raise SyncForbidden(_("You may not change this Proxmox endpoint, so you may not sync it."))
    if not endpoint.enabled:
        raise SyncEndpointDisabled(
            _("Endpoint {name!r} is disabled; enable it before synchronizing.").format(
                name=endpoint.name
            )
        )


def preview_sync(user, endpoint) -> dict:
    """ "Preview sync": the backend's dry run of `endpoint` (its report, with the plan).

    The same permission and state as "Sync now": a preview reads the endpoint's
    credentials through the backend and shows what a sync would change.
    """
    _check_may_sync(user, endpoint)
    try:
        client = BackendClient(BackendSettings.load())
    except BackendNotConfigured as exc:
        raise SyncPreviewFailed(str(exc)) from None
    try:
        return client.preview(endpoint.pk)
    except BackendError as exc:
        raise SyncPreviewFailed(str(exc)) from None
    finally:
        client.close()


def request_sync(user, endpoint, *, immediate: bool = False, target: dict | None = None):
    """Enqueue a "Sync now" Job for `endpoint` on behalf of `user`; return the Job.

    `immediate` runs the Job inline (NetBox's own switch for interactive use and tests);
    `target` ({"guest": "qemu/100"} or {"node": "pve1"}, see `target_of`) narrows the run.
    """
    _check_may_sync(user, endpoint)
    active = active_sync_job(endpoint)
    if active is not None:
        # Two requests racing past this check still never run twice: the second Job is
        # coalesced into the first by the endpoint's sync lock.
        raise SyncInProgress(
            _(
                "A sync of endpoint {name!r} is already {state} (job {job}); wait for it to finish."
            ).format(name=endpoint.name, state=active.get_status_display().lower(), job=active.pk)
        )
    extra = {"target": target} if target else {}
    return SyncEndpointJob.enqueue(
        instance=endpoint,
        user=user,
        immediate=immediate,
        job_timeout=rq_job_timeout(),
        on_failure=Callback(job_lost),
        **extra,
    )


SOURCE_FIELD = "proxbox_source"  # the backend's identity of a synced VM


def target_of(user, obj):
    """(endpoint, target) of a synced VM or node device the user may view; SyncNotFound if none.

    Only objects inside an endpoint's own native cluster qualify: a VM by its source key
    (`cluster-<id>/<kind>/<vmid>`), a node device by its name.
    """
    from dcim.models import Device
    from virtualization.models import VirtualMachine

    from ..models import ProxmoxEndpoint

    model = type(obj)
    if not model.objects.restrict(user, "view").filter(pk=obj.pk).exists():
        raise SyncNotFound(_("No such object."))
    cluster_id = obj.cluster_id
    endpoint = (
        ProxmoxEndpoint.objects.restrict(user, "view").filter(netbox_cluster_id=cluster_id).first()
        if cluster_id
        else None
    )
    if endpoint is None:
        raise SyncNotFound(_("This object is not in a Proxmox endpoint's cluster."))
    if isinstance(obj, VirtualMachine):
        parts = str((obj.custom_field_data or {}).get(SOURCE_FIELD) or "").split("#")[0].split("/")
        if len(parts) != 3 or parts[0] != f"cluster-{cluster_id}" or not parts[2].isdigit():
            raise SyncNotFound(_("This virtual machine was not synced from Proxmox."))
        return endpoint, {"guest": f"{parts[1]}/{parts[2]}"}
    if isinstance(obj, Device):
        return endpoint, {"node": obj.name}
    raise SyncNotFound(_("Only virtual machines and node devices can be synced one by one."))


def request_sync_all(user) -> tuple[list, list[str]]:
    """ "Sync all": one Job per enabled endpoint the user may sync; (Jobs, reasons skipped)."""
    from ..models import ProxmoxEndpoint

    jobs, skipped = [], []
    for endpoint in ProxmoxEndpoint.objects.restrict(user, "view").filter(enabled=True):
        try:
            jobs.append(request_sync(user, endpoint))
        except SyncRequestError as exc:
            skipped.append(exc.detail)
    return jobs, skipped
