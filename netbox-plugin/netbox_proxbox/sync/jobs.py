"""The "Sync now" Job: start a backend run for one endpoint, wait for it, keep its summary."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict
from datetime import timedelta

from core.choices import JobStatusChoices
from core.dataclasses import JobLogEntry
from core.exceptions import JobFailed
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_pg_utils import advisory_lock
from netbox.constants import ADVISORY_LOCK_KEYS
from netbox.jobs import JobRunner

from ..constants import SYNC_LOCK_CLASS
from .client import BackendClient, BackendError
from .config import BackendNotConfigured, BackendSettings, rq_job_timeout, sync_queue
from .hygiene import hygiene_log

MAX_LOGGED_FAILURES = 20  # the full list stays in the Job's data
PROGRESS_SAVE_INTERVAL = 1.0  # seconds between saves of a running Job's log and progress
SUMMARY_OUTCOMES = ("created", "updated", "deleted", "failed")


class SyncJobError(Exception):
    """The Job could not get a run done (configuration, backend unreachable or refusing, timeout).

    NetBox records `repr()` of the exception as the Job's error and marks it errored: the
    plain message is the useful part, so repr() returns just that.
    """

    def __repr__(self) -> str:
        return str(self)


class SyncEndpointJob(JobRunner):
    class Meta:
        name = "Proxbox sync"

    @classmethod
    def enqueue(cls, *args, **kwargs):
        # Every way a sync is queued (Sync now, schedules, sync all, and NetBox's own
        # rescheduling of a recurring Job, which passes no queue) lands on the sync queue.
        kwargs.setdefault("queue_name", sync_queue())
        return super().enqueue(*args, **kwargs)

    def run(self, *args, **kwargs):
        endpoint = self.job.object
        if endpoint is None:
            self.job.interval = None
            self.job.error = "The Proxmox endpoint was deleted before its sync started."
            raise JobFailed()
        if self.job.interval and not endpoint.enabled:
            # Re-enabling the endpoint schedules again (ensure_schedule on save).
            self.job.interval = None
            self.job.error = (
                f"Scheduled sync not run: endpoint {endpoint.name!r} is disabled; "
                "its schedule resumes when it is enabled again."
            )
            raise JobFailed()
        with advisory_lock((SYNC_LOCK_CLASS, endpoint.pk), wait=False) as acquired:
            try:
                if not acquired:
                    self._coalesce(endpoint)
                    return
                self._sync(endpoint, kwargs.get("target"))
            finally:
                if self.job.interval:
                    self._follow_schedule_changes(endpoint)

    def _coalesce(self, endpoint) -> None:
        other = active_sync_job(endpoint, running_only=True, exclude=self.job)
        into = f" (job {other.pk})" if other is not None else ""
        self.job.data = {"endpoint": endpoint.pk, "coalesced_into": getattr(other, "pk", None)}
        self.logger.warning(
            f"Another sync of endpoint {endpoint.name!r} is running{into}; "
            "this one is coalesced into it and does not start a second run."
        )

    def _follow_schedule_changes(self, endpoint) -> None:
        """A schedule edited while this occurrence ran: end the old chain, start the new one."""
        current = type(endpoint).objects.filter(pk=endpoint.pk).values("sync_interval", "enabled")
        current = current.first()
        if current and current["enabled"] and current["sync_interval"] == self.job.interval:
            return
        self.logger.info(
            "The endpoint's schedule changed during this run; the new schedule takes over."
        )
        self.job.interval = None
        if current is not None:
            transaction.on_commit(lambda: ensure_schedule(endpoint, ending=self.job))

    def _sync(self, endpoint, target=None) -> None:
        try:
            settings = BackendSettings.load()
        except BackendNotConfigured as exc:
            self.logger.error(str(exc))
            raise SyncJobError(str(exc)) from None

        client = BackendClient(settings)
        try:
            run = self._run_backend_sync(client, endpoint, target)
        except BackendError as exc:
            self.logger.error(str(exc))
            raise SyncJobError(str(exc)) from None
        finally:
            client.close()

        report = run.get("report") or {}
        self.job.data = {
            **(self.job.data or {}),
            "endpoint": endpoint.pk,
            "backend_run": run.get("id"),
            "report": report,
        }
        self._log_report(report)
        if not report.get("ok"):
            self.job.error = failure_reason(report)
            raise JobFailed()

    def _run_backend_sync(self, client: BackendClient, endpoint, target=None) -> dict:
        run_id = client.start_sync(endpoint.pk, target)
        deadline = time.monotonic() + client.settings.sync_timeout
        self.job.data = {"endpoint": endpoint.pk, "backend_run": run_id}
        what = f" (only {', '.join(f'{k} {v}' for k, v in target.items())})" if target else ""
        if target:
            self.job.data["target"] = target
        self.logger.info(f"Backend run {run_id} started for endpoint {endpoint.name!r}{what}")
        # Saved now: should the worker die, the errored Job still names the run.
        self._publish(force=True)
        # Follow the run's event stream while it runs, so the Job's page and log show the
        # stages as they happen; the run's final state still comes from GET /runs/{id}.
        try:
            for event in client.events(run_id, deadline):
                self._log_event(event)
        except BackendError as exc:
            self.logger.warning(f"Live progress interrupted ({exc}); waiting for the run")
        seen_states = set()

        def on_poll(run: dict) -> None:
            state = run.get("state")
            if state not in seen_states:
                seen_states.add(state)
                self.logger.debug(f"Backend run {run_id} is {state}")

        return client.wait(run_id, on_poll=on_poll, deadline=deadline)

    def _publish(self, *, force: bool = False) -> None:
        """Save the Job's log and progress while it runs (at most every PROGRESS_SAVE_INTERVAL)."""
        now = time.monotonic()
        if not force and now - getattr(self, "_published", 0.0) < PROGRESS_SAVE_INTERVAL:
            return
        self._published = now
        self.job.save(update_fields=["log_entries", "data"])

    def _progress(self, stage, done, total) -> None:
        progress = {"stage": stage, "done": done, "total": total}
        if total:
            progress["percent"] = min(100, round(100 * done / total))
        self.job.data = {**(self.job.data or {}), "progress": progress}

    def _log_event(self, event: dict) -> None:
        kind, stage = event.get("event"), event.get("stage")
        if kind == "stage" and event.get("state") == "started":
            self._progress(stage, 0, event.get("total"))
            self.logger.info(f"Stage {stage}: started, {event.get('total', 0)} to process")
            self._publish(force=True)
        elif kind == "stage" and event.get("state") == "finished":
            self._progress(stage, event.get("done", 0), event.get("done", 0))
            self.logger.info(f"Stage {stage}: {event.get('done', 0)} processed")
            self._publish(force=True)
        elif kind == "progress":
            done, total = event.get("done", 0), event.get("total") or 0
            self._progress(stage, done, total)
            # One log line per tenth of the stage; the data's progress follows every event.
            step = max(1, total // 10)
            if total and (done % step == 0 or done == total):
                phase = f" ({event['phase']})" if event.get("phase") else ""
                self.logger.info(
                    f"Stage {stage}{phase}: {done}/{total} ({self.job.data['progress']['percent']}%)"
                )
            self._publish()

    def _log_report(self, report: dict) -> None:
        for level, message in report_log(report):
            self.logger.log(level, message)


def report_log(report: dict) -> list[tuple[int, str]]:
    """The log lines (level, message) a sync Job keeps of a run's report."""
    lines = []
    for failure in (report.get("read_failures") or [])[:MAX_LOGGED_FAILURES]:
        lines.append((logging.ERROR, f"Proxmox read failed: {failure}"))
    for warning in report.get("warnings") or []:
        lines.append((logging.WARNING, str(warning)))
    for failure in (report.get("failures") or [])[:MAX_LOGGED_FAILURES]:
        if not isinstance(failure, dict):
            continue
        lines.append(
            (
                logging.ERROR,
                f"{failure.get('object_type')} {failure.get('label')}: {failure.get('reason')}",
            )
        )
    lines += hygiene_log(report, MAX_LOGGED_FAILURES)  # IPAM hygiene findings
    counters = report.get("counters") if isinstance(report.get("counters"), dict) else {}
    for object_type, outcomes in sorted(counters.items()):
        if isinstance(outcomes, dict):
            summary = ", ".join(f"{outcome} {number}" for outcome, number in outcomes.items())
            lines.append((logging.INFO, f"{object_type}: {summary}"))
    if report.get("error"):
        lines.append((logging.ERROR, f"Sync failed: {report['error']}"))
    else:
        lines.append(
            (
                logging.INFO,
                f"Sync {report.get('status', 'finished')}: "
                f"{report.get('inventory_writes', 0)} NetBox writes",
            )
        )
    return lines


# A live-sync run's Job: its id follows from the endpoint and the backend's run, so the
# backend recording a run twice (an answer lost on the way) leaves one Job.
LIVE_RUN_NAMESPACE = uuid.UUID("0b6f8f1e-4c1a-5b9e-9d57-70726f78626f")


def record_live_run(user, endpoint, *, backend_run, started, completed, report, trigger):
    """A run the backend's live-sync watcher started, recorded as a finished sync Job of
    the endpoint (its Jobs tab and recent syncs show it beside Sync now and schedules).
    Answers (job, created)."""
    from core.models import Job, ObjectType

    job_id = uuid.uuid5(LIVE_RUN_NAMESPACE, f"{endpoint.pk}/{backend_run}")
    existing = Job.objects.filter(job_id=job_id).first()
    if existing is not None:
        return existing, False
    ok = report.get("ok") is True
    entries = [
        asdict(JobLogEntry(logging.getLevelName(level).lower(), message, completed))
        for level, message in [
            (logging.INFO, f"Live sync run {backend_run} of endpoint {endpoint.name!r}"),
            *report_log(report),
        ]
    ]
    job = Job(
        object_type=ObjectType.objects.get_for_model(endpoint, for_concrete_model=False),
        object_id=endpoint.pk,
        name=SyncEndpointJob.name,
        user=user,
        job_id=job_id,
        started=started,
        completed=completed,
        execution_time=completed - started,
        status=JobStatusChoices.STATUS_COMPLETED if ok else JobStatusChoices.STATUS_FAILED,
        error="" if ok else failure_reason(report),
        data={
            "endpoint": endpoint.pk,
            "backend_run": backend_run,
            "trigger": trigger,
            "report": report,
        },
        log_entries=entries,
    )
    try:
        with transaction.atomic():
            job.save()
    except IntegrityError:  # the same run recorded at the same moment by a retry
        return Job.objects.get(job_id=job_id), False
    # `created` is set on insert: the run's start is when the Job began.
    Job.objects.filter(pk=job.pk).update(created=started)
    job.created = started
    return job, True


def job_lost(rq_job, connection, exc_type, exc_value, traceback) -> None:
    """RQ's failure callback: mark the NetBox Job errored when its worker died with it.

    `JobRunner.handle` records every outcome it sees, but a worker killed mid-Job
    (kill -9, OOM killer, lost host) sees none: NetBox would show the Job "running"
    for ever. RQ notices the loss itself (the work horse's exit, or the Job's
    heartbeat expiring in the started registry) and calls this. The Job is not
    re-queued: the backend's run is independent of the worker and may have finished,
    and a sync is requested again with "Sync now" (idempotent) rather than behind the
    operator's back.
    """
    from core.models import Job

    job = Job.objects.filter(job_id=rq_job.id).first()
    if job is None or job.status in JobStatusChoices.TERMINAL_STATE_CHOICES:
        return  # handle() recorded the outcome (or the row is gone)
    backend_run = (job.data or {}).get("backend_run") if isinstance(job.data, dict) else None
    job.terminate(
        status=JobStatusChoices.STATUS_ERRORED,
        error=(
            f"The RQ worker running this Job stopped before the Job finished "
            f"({getattr(exc_type, '__name__', exc_type)})"
            + (f"; backend run {backend_run} may have completed on its own" if backend_run else "")
        ),
    )


def active_sync_job(endpoint, *, running_only=False, recurring=False, exclude=None):
    """A sync Job of `endpoint` that is running (or queued to run now, unless running_only)."""
    states = [JobStatusChoices.STATUS_RUNNING]
    if not running_only:
        states.append(JobStatusChoices.STATUS_PENDING)
    jobs = SyncEndpointJob.get_jobs(endpoint).filter(status__in=states)
    if recurring:
        jobs = jobs.filter(interval__isnull=False)
    if exclude is not None:
        jobs = jobs.exclude(pk=exclude.pk)
    return jobs.order_by("created").first()


def failure_reason(report: dict) -> str:
    if report.get("error"):
        return f"Sync failed: {report['error']}"
    failures = report.get("failures") or []
    reads = report.get("read_failures") or []
    problems = []
    if reads:
        problems.append(f"{len(reads)} Proxmox read(s) failed; first: {reads[0]}")
    if failures:
        first = failures[0]
        problems.append(
            f"{len(failures)} object(s) failed to sync; first: {first.get('object_type')} "
            f"{first.get('label')}: {first.get('reason')}"
        )
    if problems:
        # The run went to its end: its cluster's sync state says "degraded".
        return ("Sync degraded: " if reads else "") + "; ".join(problems)
    return f"Sync ended with status {report.get('status')!r}"


def counters_summary(data) -> str | None:
    """One line of a sync Job's counters summed over object types; None before a report."""
    report = (data or {}).get("report") if isinstance(data, dict) else None
    counters = (report or {}).get("counters")
    if not isinstance(counters, dict):
        return None
    totals = dict.fromkeys(SUMMARY_OUTCOMES, 0)
    for outcomes in counters.values():
        for outcome in SUMMARY_OUTCOMES:
            totals[outcome] += int((outcomes or {}).get(outcome) or 0)
    return ", ".join(f"{number} {outcome}" for outcome, number in totals.items())


# The recurring Job of an endpoint: kept here, beside the Job that reschedules itself
# when its endpoint's schedule changed during a run.

WAITING = JobStatusChoices.ENQUEUED_STATE_CHOICES  # pending or scheduled


def recurring_jobs(endpoint):
    """The endpoint's waiting recurring sync Jobs (normally at most one)."""
    return SyncEndpointJob.get_jobs(endpoint).filter(interval__isnull=False, status__in=WAITING)


def _first_run(endpoint, interval: int):
    # After a restart, keep the rhythm of the last sync rather than syncing every endpoint
    # at once; an endpoint that never synced (or is overdue) syncs right away.
    last = (
        SyncEndpointJob.get_jobs(endpoint)
        .filter(completed__isnull=False)
        .order_by("-completed")
        .values_list("completed", flat=True)
        .first()
    )
    now = timezone.now()
    if last is None:
        return now
    return max(now, last + timedelta(minutes=interval))


def ensure_schedule(endpoint, *, ending=None) -> object | None:
    """Make the endpoint's recurring Job match its settings; return the waiting Job or None.

    A disabled endpoint keeps no waiting schedule (the page says why); re-enabling it
    schedules again. Idempotent, serialized with NetBox's own schedule lock. `ending` is
    a running occurrence that will not schedule a successor (its schedule changed).
    """
    with transaction.atomic(), advisory_lock(ADVISORY_LOCK_KEYS["job-schedules"]):
        endpoint.refresh_from_db(fields=["sync_interval", "enabled"])
        interval = endpoint.sync_interval if endpoint.enabled else None
        waiting = list(recurring_jobs(endpoint).order_by("scheduled"))
        keep = next((job for job in waiting if job.interval == interval), None)
        for job in waiting:
            if job is not keep:
                job.delete()
        if interval is None or keep is not None:
            return keep
        if active_sync_job(endpoint, running_only=True, recurring=True, exclude=ending):
            # The running occurrence schedules its own successor when it ends.
            return None
        return SyncEndpointJob.enqueue(
            instance=endpoint,
            schedule_at=_first_run(endpoint, interval),
            interval=interval,
            job_timeout=rq_job_timeout(),
        )
