"""Requesting a sync ("Sync now" in the UI and REST): who may, and enqueueing the Job."""

from __future__ import annotations

from django.utils.translation import gettext as _

from ..ownership.permissions import permitted, visible
from .config import rq_job_timeout
from .jobs import SyncEndpointJob, active_sync_job


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


def request_sync(user, endpoint, *, immediate: bool = False):
    """Enqueue a "Sync now" Job for `endpoint` on behalf of `user`; return the Job.

    `immediate` runs the Job inline (NetBox's own switch for interactive use and tests).
    """
    if not may_request_sync(user, endpoint):
        raise SyncForbidden(_("You may not change this Proxmox endpoint, so you may not sync it."))
    if not endpoint.enabled:
        raise SyncEndpointDisabled(
            _("Endpoint {name!r} is disabled; enable it before synchronizing.").format(
                name=endpoint.name
            )
        )
    active = active_sync_job(endpoint)
    if active is not None:
        # Two requests racing past this check still never run twice: the second Job is
        # coalesced into the first by the endpoint's sync lock.
        raise SyncInProgress(
            _(
                "A sync of endpoint {name!r} is already {state} (job {job}); wait for it to finish."
            ).format(name=endpoint.name, state=active.get_status_display().lower(), job=active.pk)
        )
    return SyncEndpointJob.enqueue(
        instance=endpoint, user=user, immediate=immediate, job_timeout=rq_job_timeout()
    )
