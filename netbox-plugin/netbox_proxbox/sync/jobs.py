"""The "Sync now" Job: start a backend run for one endpoint, wait for it, keep its summary."""

from __future__ import annotations

from core.choices import JobStatusChoices
from core.exceptions import JobFailed
from netbox.jobs import JobRunner

from .client import BackendClient, BackendError
from .config import BackendNotConfigured, BackendSettings

MAX_LOGGED_FAILURES = 20  # the full list stays in the Job's data
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

    def run(self, *args, **kwargs):
        endpoint = self.job.object
        if endpoint is None:
            self.job.error = "The Proxmox endpoint was deleted before its sync started."
            raise JobFailed()
        try:
            settings = BackendSettings.load()
        except BackendNotConfigured as exc:
            self.logger.error(str(exc))
            raise SyncJobError(str(exc)) from None

        client = BackendClient(settings)
        try:
            run = self._run_backend_sync(client, endpoint)
        except BackendError as exc:
            self.logger.error(str(exc))
            raise SyncJobError(str(exc)) from None
        finally:
            client.close()

        report = run.get("report") or {}
        self.job.data = {"endpoint": endpoint.pk, "backend_run": run.get("id"), "report": report}
        self._log_report(report)
        if not report.get("ok"):
            self.job.error = failure_reason(report)
            raise JobFailed()

    def _run_backend_sync(self, client: BackendClient, endpoint) -> dict:
        run_id = client.start_sync(endpoint.pk)
        self.job.data = {"endpoint": endpoint.pk, "backend_run": run_id}
        # Saved now: should the worker die, the errored Job still names the run.
        self.job.save(update_fields=["data"])
        self.logger.info(f"Backend run {run_id} started for endpoint {endpoint.name!r}")
        seen_states = set()

        def on_poll(run: dict) -> None:
            state = run.get("state")
            if state not in seen_states:
                seen_states.add(state)
                self.logger.debug(f"Backend run {run_id} is {state}")

        run = client.wait(run_id, on_poll=on_poll)
        # Replaying the finished run's events is best effort: the report is what counts.
        try:
            for event in client.events(run_id):
                self._log_event(event)
        except BackendError as exc:
            self.logger.warning(f"Could not replay the run's progress events: {exc}")
        return run

    def _log_event(self, event: dict) -> None:
        if event.get("event") == "stage" and event.get("state") == "finished":
            self.logger.info(f"Stage {event.get('stage')}: {event.get('done', 0)} processed")

    def _log_report(self, report: dict) -> None:
        for warning in report.get("warnings") or []:
            self.logger.warning(warning)
        for failure in (report.get("failures") or [])[:MAX_LOGGED_FAILURES]:
            self.logger.error(
                f"{failure.get('object_type')} {failure.get('label')}: {failure.get('reason')}"
            )
        for object_type, counters in sorted((report.get("counters") or {}).items()):
            self.logger.info(
                f"{object_type}: "
                + ", ".join(f"{outcome} {number}" for outcome, number in counters.items())
            )
        if report.get("error"):
            self.logger.error(f"Sync failed: {report['error']}")
        else:
            self.logger.info(
                f"Sync {report.get('status', 'finished')}: "
                f"{report.get('inventory_writes', 0)} NetBox writes"
            )


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


def failure_reason(report: dict) -> str:
    if report.get("error"):
        return f"Sync failed: {report['error']}"
    failures = report.get("failures") or []
    if failures:
        first = failures[0]
        return (
            f"{len(failures)} object(s) failed to sync; first: {first.get('object_type')} "
            f"{first.get('label')}: {first.get('reason')}"
        )
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
