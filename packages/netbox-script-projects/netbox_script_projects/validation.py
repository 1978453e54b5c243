"""Validation: a NetBox Job that claims a revision, imports it and records a verdict.

The claim is a conditional UPDATE (materialized, or validating with an
expired lease) naming the owning Job; every final transition repeats that
condition, so a worker whose lease was reclaimed writes nothing. Validation
never takes the Project lock: arbitrary source code runs under the lease.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import timedelta

from core.choices import JobStatusChoices
from core.exceptions import JobFailed
from core.models import Job
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q, Value
from django.db.models.functions import Now
from netbox.jobs import JobRunner
from rq import Callback

from .choices import RevisionStatusChoices as Status
from .choices import ScriptFileDiscoveryChoices
from .constants import VALIDATION_JOB_NAME, get_validation_timing
from .jobs import lost_job, lost_reason, terminate_lost
from .runtime.discovery import DiscoveryCodes, Scrubber, discover
from .runtime.loader import StorageUnavailable, load_revision, read_verified_source
from .storage.errors import RevisionCorrupt, VerificationFailed
from .storage.locks import require_default_database
from .storage.store import get_storage

logger = logging.getLogger("netbox_script_projects.validation")


def _revisions():
    from .models import ScriptProjectRevision

    return ScriptProjectRevision.objects


def _lease_expired_before():
    lease = timedelta(seconds=get_validation_timing().lease)
    return ExpressionWrapper(Now() - Value(lease), output_field=DateTimeField())


def _claimable():
    return Q(status=Status.MATERIALIZED) | Q(
        status=Status.VALIDATING, validation_started__lt=_lease_expired_before()
    )


def needs_verdict(revision) -> bool:
    """Materialized, or validating under a lease that has expired."""
    return _revisions().filter(_claimable(), pk=revision.pk).exists()


def queue_validation(revision) -> Job | None:
    """Record one validation Job for `revision` (submitted to RQ on commit).

    Nothing is queued when the revision needs no verdict or a Job that has
    not started yet already covers it. A waiting Job older than the lease
    does not: its submission to RQ may have been lost (a Redis outage at
    commit), and it would otherwise block validation for ever.
    """
    require_default_database(None)
    with transaction.atomic():
        if not needs_verdict(revision):
            return None
        waiting = Job.objects.filter(
            name=VALIDATION_JOB_NAME,
            status__in=(JobStatusChoices.STATUS_PENDING, JobStatusChoices.STATUS_SCHEDULED),
            data__revision=revision.pk,
            created__gte=_lease_expired_before(),
        )
        if waiting.exists():
            return None
        job = ValidationJob.enqueue(
            instance=revision.project,
            job_timeout=get_validation_timing().job_timeout,
            notifications="on_failure",
            on_failure=Callback(validation_lost),
            revision_id=revision.pk,
        )
        job.data = {"revision": revision.pk}
        job.save(update_fields=["data"])
        return job


def claim(revision_id: int, job: Job) -> bool:
    return bool(
        _revisions()
        .filter(_claimable(), pk=revision_id)
        .update(status=Status.VALIDATING, validation_job=job, validation_started=Now())
    )


def _owned(revision_id: int, job: Job):
    return _revisions().filter(pk=revision_id, status=Status.VALIDATING, validation_job=job)


def record_verdict(revision_id: int, job: Job, revision, discovery) -> bool:
    """Write the verdict and discovery results in one transaction, if still owned."""
    from .models import ScriptFile

    valid = not discovery.errors
    with transaction.atomic():
        # Same statement as the verdict: a valid revision always has its records.
        updated = _owned(revision_id, job).update(
            status=Status.VALID if valid else Status.INVALID,
            validation_errors=discovery.errors,
            discovered_scripts=discovery.scripts if valid else [],
        )
        if not updated:
            return False
        for script_file_id, (entries, errors) in discovery.by_script_file.items():
            if entries and not errors:
                outcome = ScriptFileDiscoveryChoices.DISCOVERED
            elif all(e["code"] == DiscoveryCodes.NO_SCRIPTS for e in errors):
                outcome = ScriptFileDiscoveryChoices.EMPTY
            else:
                outcome = ScriptFileDiscoveryChoices.FAILED
            ScriptFile.objects.filter(pk=script_file_id, project_id=revision.project_id).update(
                discovery_status=outcome,
                discovered_scripts=entries,
                discovery_errors=errors,
                discovered_revision_id=revision_id,
                discovered_at=Now(),
            )
    return True


def release(revision_id: int, job: Job, code: str, message: str) -> bool:
    """An environment failure: back to materialized, lease cleared, failure kept."""
    failure = {"code": code, "message": message, "job": job.pk}
    return bool(
        _owned(revision_id, job).update(
            status=Status.MATERIALIZED,
            validation_job=None,
            validation_started=None,
            last_validation_failure=failure,
        )
    )


def validation_lost(rq_job, connection, exc_type, exc_value, traceback) -> None:
    """RQ's failure callback: the worker died with the Job (kill -9, OOM, lost host).

    `JobRunner.handle` never ran to record it, so the Job is marked errored here
    instead of staying "running" for ever, and its lease is released (the
    revision is materialized again, failure kept) so the next upload, refresh or
    reconciliation queues a new validation without waiting for the lease to
    expire. Whichever comes first, this or the expiry, hands the revision on.
    """
    job = lost_job(rq_job)
    if job is None:
        return
    reason = lost_reason(exc_type)
    revision_id = (job.data or {}).get("revision") if isinstance(job.data, dict) else None
    if revision_id:
        release(revision_id, job, "worker_lost", f"The worker stopped mid-validation ({reason}).")
    terminate_lost(job, reason)


def _interpreter_locations() -> list[str]:
    """Where NetBox and its Python live: an import that reaches NetBox's own
    packages (a project shadowing `core`, say) names files there."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    candidates.update(entry for entry in sys.path if isinstance(entry, str))
    return [c for c in candidates if c and os.path.isabs(c) and c != os.sep]


def _secrets(revision) -> list[str]:
    storage = get_storage()
    secrets = [str(revision.project.storage_key), revision.digest]
    location = getattr(storage, "location", None)
    if location:
        secrets.append(str(location))
    return secrets + _interpreter_locations()


def accepted_for_automatic_activation(revision) -> bool:
    """Automatic activation: the Project's accepted source under its current selection."""
    from .models import ScriptProject
    from .snapshot import build_script_file_snapshot

    project = ScriptProject.objects.get(pk=revision.project_id)
    if project.activation_policy != "automatic" or project.accepted_revision_id != revision.pk:
        return False
    _snapshot, current_digest = build_script_file_snapshot(project)
    return current_digest == revision.script_file_digest


class ValidationJob(JobRunner):
    class Meta:
        name = VALIDATION_JOB_NAME

    def run(self, revision_id=None, *args, **kwargs):
        revision_id = revision_id or (self.job.data or {}).get("revision")
        if not claim(revision_id, self.job):
            current = _revisions().filter(pk=revision_id).values_list("status", flat=True).first()
            self.logger.info(
                f"Revision {revision_id} is not claimable ({current or 'deleted'}); nothing to do."
            )
            return
        self.logger.info(f"Claimed revision {revision_id}.")
        try:
            self._validate(revision_id)
        except JobFailed:
            raise
        except BaseException as exc:
            # The worker itself failed (timeout, crash, bug): not the content's verdict.
            release(revision_id, self.job, "worker_failed", type(exc).__name__)
            raise

    def _validate(self, revision_id):
        revision = _revisions().select_related("project").get(pk=revision_id)
        try:
            files = read_verified_source(revision)
        except (RevisionCorrupt, VerificationFailed) as exc:
            code = "revision_corrupt" if isinstance(exc, RevisionCorrupt) else "verification_failed"
            release(revision_id, self.job, code, "Stored source failed its checks; refused.")
            self.logger.error(f"Revision {revision_id} refused: {exc}")
            raise JobFailed() from exc
        except StorageUnavailable as exc:
            release(
                revision_id, self.job, "storage_unavailable", f"Storage could not be read ({exc})."
            )
            self.logger.error(f"Storage could not be read for revision {revision_id}.")
            raise JobFailed() from exc

        loaded = load_revision(revision, files)
        try:
            discovery = discover(
                loaded, revision.script_file_snapshot, Scrubber(loaded, _secrets(revision))
            )
        finally:
            loaded.unload()

        if not record_verdict(revision_id, self.job, revision, discovery):
            self.logger.warning(f"Lease on revision {revision_id} was reclaimed; nothing written.")
            return
        if discovery.errors:
            self.logger.warning(
                f"Revision {revision_id} is invalid ({len(discovery.errors)} error(s))."
            )
            return
        self.logger.info(f"Revision {revision_id} is valid: {len(discovery.scripts)} script(s).")
        revision.refresh_from_db()
        if accepted_for_automatic_activation(revision):
            from .activation import ActivationRefused, activate_revision

            try:
                activate_revision(revision)
                self.logger.info(f"Revision {revision_id} activated automatically.")
            except ActivationRefused as exc:
                self.logger.warning(f"Automatic activation refused: {exc}")


def accept_source(revision) -> str | None:
    """What follows an upload, refresh or reconciliation that resolved to `revision`.

    The revision becomes the Project's accepted source; one that needs a
    verdict gets a validation Job, and under Automatic if valid a valid or
    retired one (e.g. after a deactivation) is activated again. Returns
    "queued", "activated" or None.
    """
    from .models import ScriptProject

    ScriptProject.objects.filter(pk=revision.project_id).update(accepted_revision=revision)
    revision.refresh_from_db()
    if queue_validation(revision) is not None:
        return "queued"
    if revision.status in Status.ACTIVATABLE and accepted_for_automatic_activation(revision):
        from .activation import activate_revision

        activate_revision(revision)
        return "activated"
    return None
