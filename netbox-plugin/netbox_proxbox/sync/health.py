"""Sync health of endpoints, read from their sync Jobs: is syncing working, without
opening Jobs one by one (the endpoint list's column and the dashboard widget).

Everything comes from NetBox's own Job records of `SyncEndpointJob`, so Sync now,
schedules and "sync all" count alike. `with_sync_health` annotates a queryset of
endpoints in one SQL statement (correlated subqueries on the Job table's
(object_type, object_id) index), so a list page costs no query per row; `SyncHealth`
reads those annotations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.choices import JobStatusChoices
from core.models import Job
from django.db.models import Count, Exists, F, FloatField, IntegerField, OuterRef, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.utils.translation import gettext_lazy as _

from .jobs import WAITING, SyncEndpointJob

FAILED = (JobStatusChoices.STATUS_ERRORED, JobStatusChoices.STATUS_FAILED)
FINISHED = (JobStatusChoices.STATUS_COMPLETED, *FAILED)

HEALTHY, FAILING, NEVER, DISABLED = "healthy", "failing", "never", "disabled"
LABELS = {
    HEALTHY: _("Healthy"),
    FAILING: _("Failing"),
    NEVER: _("Never synced"),
    DISABLED: _("Disabled"),
}
COLORS = {HEALTHY: "green", FAILING: "red", NEVER: "gray", DISABLED: "gray"}
# The order a problem list shows endpoints in: what needs attention first.
URGENCY = {FAILING: 0, NEVER: 1, HEALTHY: 2, DISABLED: 3}


def _endpoint_jobs():
    # The content type by its natural key, inside the statement: building the queryset
    # touches no database (a view's class attribute may hold it).
    return Job.objects.filter(
        name=SyncEndpointJob.name,
        object_type__app_label="netbox_proxbox",
        object_type__model="proxmoxendpoint",
        object_id=OuterRef("pk"),
    )


def with_sync_health(queryset):
    """`queryset` of endpoints annotated with what `SyncHealth.of` reads."""
    jobs = _endpoint_jobs()
    # A Job marked errored without an end time (its worker died) still counts, as the
    # latest only if nothing finished after it was created.
    latest = (Coalesce("completed", "created").desc(), F("pk").desc())
    finished = jobs.filter(status__in=FINISHED).order_by(*latest)
    last_success = (
        jobs.filter(status=JobStatusChoices.STATUS_COMPLETED)
        .order_by(*latest)
        .values("completed")[:1]
    )
    # Failures in a row: failed runs that no successful run finished after.
    succeeded_later = Job.objects.filter(
        name=SyncEndpointJob.name,
        object_type=OuterRef("object_type"),
        object_id=OuterRef("object_id"),
        status=JobStatusChoices.STATUS_COMPLETED,
        completed__gt=Coalesce(OuterRef("completed"), OuterRef("created")),
    )
    failures = (
        jobs.filter(status__in=FAILED)
        .exclude(Exists(succeeded_later))
        .order_by()
        .values("object_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    # Runs the backend's live-sync watcher started carry what it saw change
    # (`record_live_run`): the latest one says how far NetBox trails Proxmox.
    live = jobs.filter(status__in=FINISHED, data__trigger__has_key="watch").order_by(*latest)
    return queryset.annotate(
        health_live_waited=Subquery(
            live.annotate(waited=Cast(KT("data__trigger__waited_s"), FloatField())).values(
                "waited"
            )[:1]
        ),
        health_live_run=Subquery(live.values("execution_time")[:1]),
        health_last_success=Subquery(last_success),
        health_last_status=Subquery(finished.values("status")[:1]),
        health_last_error=Subquery(finished.values("error")[:1]),
        health_last_job=Subquery(finished.values("pk")[:1]),
        health_failures=Coalesce(Subquery(failures, output_field=IntegerField()), 0),
        health_running=Subquery(
            jobs.filter(status=JobStatusChoices.STATUS_RUNNING).values("started")[:1]
        ),
        health_next_run=Subquery(
            jobs.filter(interval__isnull=False, status__in=WAITING)
            .order_by("scheduled")
            .values("scheduled")[:1]
        ),
    )


@dataclass(frozen=True)
class SyncHealth:
    state: str
    last_success: datetime | None
    failures_in_a_row: int
    last_error: str
    last_job: int | None
    running_since: datetime | None
    next_run: datetime | None
    # Seconds from the watcher noticing a change in Proxmox to NetBox holding it, for the
    # latest live-sync run (None: no live run yet).
    live_lag: float | None = None

    @classmethod
    def of(cls, endpoint) -> SyncHealth:
        """The health of an endpoint from `with_sync_health`'s annotations."""
        status = endpoint.health_last_status
        if status in FAILED:
            state = FAILING
        elif status == JobStatusChoices.STATUS_COMPLETED:
            state = HEALTHY
        else:
            state = NEVER
        if not endpoint.enabled and state != FAILING:
            state = DISABLED
        return cls(
            state=state,
            last_success=endpoint.health_last_success,
            failures_in_a_row=endpoint.health_failures,
            last_error=(endpoint.health_last_error or "") if state == FAILING else "",
            last_job=endpoint.health_last_job,
            running_since=endpoint.health_running,
            next_run=endpoint.health_next_run,
            live_lag=_live_lag(endpoint.health_live_waited, endpoint.health_live_run),
        )

    @property
    def label(self) -> str:
        return str(LABELS[self.state])

    @property
    def color(self) -> str:
        return COLORS[self.state]


def _live_lag(waited: float | None, run: timedelta | None) -> float | None:
    """The watcher's wait before starting the run plus the run itself."""
    if run is None:
        return None
    return round((waited or 0.0) + run.total_seconds(), 1)
