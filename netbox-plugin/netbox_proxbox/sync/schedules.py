"""Scheduled syncs: one recurring NetBox Job per scheduled endpoint, plus "sync all".

An endpoint with `sync_interval` owns exactly one recurring `SyncEndpointJob` (a Job
with `interval`, rescheduled by NetBox's JobRunner after every run). `ensure_schedule`
puts that Job in place or removes it; it runs when an endpoint is saved and from the
system job `SyncScheduleKeeperJob`, which NetBox's rqworker schedules at every start, so
schedules survive restarts, flushed Redis queues and edits made while no worker ran.

"Sync all enabled endpoints" is the plugin setting `sync_all_interval` (minutes): a
recurring `SyncAllEndpointsJob` that queues one sync per enabled endpoint.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from core.choices import JobStatusChoices
from django.db import transaction
from django.utils import timezone
from django_pg_utils import advisory_lock
from netbox.constants import ADVISORY_LOCK_KEYS
from netbox.jobs import JobRunner, system_job
from netbox.plugins import get_plugin_config

from ..constants import MAX_SYNC_INTERVAL, MIN_SYNC_INTERVAL, SCHEDULE_KEEPER_INTERVAL
from .config import PLUGIN, BackendNotConfigured, rq_job_timeout
from .jobs import WAITING, SyncEndpointJob, active_sync_job, ensure_schedule, recurring_jobs

logger = logging.getLogger("netbox_proxbox.schedules")


def next_scheduled_sync(endpoint):
    """When the endpoint's schedule runs next (None: no schedule in place)."""
    job = recurring_jobs(endpoint).order_by("scheduled").first()
    if job is None:
        return None
    return job.scheduled or job.created


def schedule_state(endpoint) -> str | None:
    """Why a configured schedule does not run; None when it runs (or none is configured)."""
    if not endpoint.sync_interval:
        return None
    if not endpoint.enabled:
        return "Scheduled syncs do not run: the endpoint is disabled."
    return None


def sync_all_interval() -> int | None:
    """PLUGINS_CONFIG["netbox_proxbox"]["sync_all_interval"] in minutes (None: off)."""
    value = get_plugin_config(PLUGIN, "sync_all_interval")
    if value in (None, "", 0):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MIN_SYNC_INTERVAL <= value <= MAX_SYNC_INTERVAL
    ):
        raise BackendNotConfigured(
            'PLUGINS_CONFIG["netbox_proxbox"]["sync_all_interval"] must be a whole number of '
            f"minutes from {MIN_SYNC_INTERVAL} to {MAX_SYNC_INTERVAL}, got {value!r}"
        )
    return value


class SyncAllEndpointsJob(JobRunner):
    """Queue one sync per enabled endpoint ("Sync all", and the sync_all_interval schedule)."""

    class Meta:
        name = "Proxbox sync all endpoints"

    def run(self, *args, **kwargs):
        from ..models import ProxmoxEndpoint

        queued, skipped = [], []
        for endpoint in ProxmoxEndpoint.objects.filter(enabled=True).order_by("name"):
            running = active_sync_job(endpoint)
            if running is not None:
                skipped.append(endpoint.name)
                self.logger.info(
                    f"Endpoint {endpoint.name!r}: a sync is already queued or running "
                    f"(job {running.pk}); not queued again"
                )
                continue
            job = SyncEndpointJob.enqueue(
                instance=endpoint, user=self.job.user, job_timeout=rq_job_timeout()
            )
            queued.append(endpoint.name)
            self.logger.info(f"Endpoint {endpoint.name!r}: sync queued as job {job.pk}")
        self.job.data = {"queued": queued, "skipped": skipped}


def ensure_sync_all_schedule():
    """Keep the "sync all" recurring Job in line with sync_all_interval."""
    interval = sync_all_interval()
    with transaction.atomic(), advisory_lock(ADVISORY_LOCK_KEYS["job-schedules"]):
        waiting = list(
            SyncAllEndpointsJob.get_jobs().filter(interval__isnull=False, status__in=WAITING)
        )
        keep = next((job for job in waiting if job.interval == interval), None)
        for job in waiting:
            if job is not keep:
                job.delete()
        if interval is None or keep is not None:
            return keep
        running = SyncAllEndpointsJob.get_jobs().filter(
            interval=interval, status=JobStatusChoices.STATUS_RUNNING
        )
        if running.exists():
            return None
        return SyncAllEndpointsJob.enqueue(
            schedule_at=timezone.now() + timedelta(minutes=interval), interval=interval
        )


@system_job(interval=SCHEDULE_KEEPER_INTERVAL)
class SyncScheduleKeeperJob(JobRunner):
    """Puts every endpoint's schedule (and "sync all") back in place; runs at worker start."""

    class Meta:
        name = "Proxbox sync schedules"

    def run(self, *args, **kwargs):
        from ..models import ProxmoxEndpoint

        scheduled = 0
        for endpoint in ProxmoxEndpoint.objects.order_by("name"):
            if ensure_schedule(endpoint) is not None:
                scheduled += 1
            elif reason := schedule_state(endpoint):
                self.logger.info(f"Endpoint {endpoint.name!r}: {reason}")
        try:
            all_job = ensure_sync_all_schedule()
        except BackendNotConfigured as exc:
            self.logger.error(str(exc))
            all_job = None
        self.job.data = {"scheduled_endpoints": scheduled, "sync_all": bool(all_job)}
        self.logger.info(
            f"{scheduled} endpoint schedule(s) in place"
            + (f"; sync all every {all_job.interval} min" if all_job else "")
        )
