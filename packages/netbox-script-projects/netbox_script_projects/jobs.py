"""The storage cleanup Job: removes a deleted revision's content once unreferenced.

The deleting transaction records the Job with its full payload (storage key,
digest, file paths) and RQ receives it only after commit. The Job takes the
Project lock, repeats the reference check under it, and removes exactly the
captured keys. A failed Job keeps its payload and logs what it left behind,
so the cleanup can be retried once the backend works again; so does a Job whose
worker died under it (RQ's failure callback marks it errored).
"""

from __future__ import annotations

import logging
import re
import uuid

from core.choices import JobStatusChoices
from core.exceptions import JobFailed
from core.models import Job
from django.db import DEFAULT_DB_ALIAS
from netbox.jobs import JobRunner
from rq import Callback

from .constants import CLEANUP_JOB_NAME
from .storage.locks import project_lock, require_default_database, routed_revision_database
from .storage.paths import normalize_member_name, path_rule_errors
from .storage.store import file_key, get_storage

logger = logging.getLogger("netbox_script_projects.cleanup")

PAYLOAD_KEYS = {"storage_key", "digest", "paths"}
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def lost_job(rq_job) -> Job | None:
    """The NetBox Job of an RQ job whose worker died (kill -9, OOM, lost host), unless
    `JobRunner.handle` recorded its outcome first (or the row is gone)."""
    job = Job.objects.filter(job_id=rq_job.id).first()
    if job is None or job.status in JobStatusChoices.TERMINAL_STATE_CHOICES:
        return None
    return job


def lost_reason(exc_type) -> str:
    """How RQ gave the execution up (AbandonedJobError, …), for the Job's error."""
    return getattr(exc_type, "__name__", str(exc_type))


def terminate_lost(job: Job, reason: str) -> None:
    """Mark a lost Job errored instead of leaving it "running" for ever."""
    job.terminate(
        status=JobStatusChoices.STATUS_ERRORED,
        error=f"The RQ worker running this Job stopped before the Job finished ({reason})",
    )


def cleanup_lost(rq_job, connection, exc_type, exc_value, traceback) -> None:
    """RQ's failure callback for a cleanup whose worker died: the Job ends errored with
    its payload kept, so `StorageCleanupJob.retry` can queue the cleanup again."""
    job = lost_job(rq_job)
    if job is not None:
        terminate_lost(job, lost_reason(exc_type))


def routing_is_safe() -> bool:
    """Revision rows must be read and written on the default database.

    A router that sends them elsewhere (e.g. an active branch schema) would
    make the reference check look at the wrong rows.
    """
    return routed_revision_database() == DEFAULT_DB_ALIAS


def payload_problems(payload) -> list[str]:
    if not isinstance(payload, dict) or set(payload) != PAYLOAD_KEYS:
        return ["payload has an unexpected shape"]
    problems = []
    try:
        uuid.UUID(str(payload["storage_key"]))
    except ValueError:
        problems.append("payload storage_key is not a UUID")
    if not isinstance(payload["digest"], str) or not _DIGEST.match(payload["digest"]):
        problems.append("payload digest is not a sha256 hex digest")
    if not isinstance(payload["paths"], list):
        return [*problems, "payload paths is not a list"]
    for path in payload["paths"]:
        if (
            not isinstance(path, str)
            or normalize_member_name(path) != (path, None)
            or path_rule_errors(path)
        ):
            problems.append(f"payload path {path!r} is not acceptable")
    return problems


class StorageCleanupJob(JobRunner):
    class Meta:
        name = CLEANUP_JOB_NAME

    @classmethod
    def record(
        cls, storage_key, digest: str, paths: list[str], using: str | None = None
    ) -> Job | None:
        """Record a cleanup Job in the current transaction (queued on commit).

        A Job for the same content that has not started yet covers it: the
        keys of a digest are the same whichever revision captured them. A
        running Job may have made its reference check already, and one whose
        worker died stays "running" for ever, so neither covers a new deletion.
        """
        require_default_database(using)
        payload = {"storage_key": str(storage_key), "digest": digest, "paths": list(paths)}
        pending = Job.objects.filter(
            name=cls.name,
            status__in=(JobStatusChoices.STATUS_PENDING, JobStatusChoices.STATUS_SCHEDULED),
            data__storage_key=payload["storage_key"],
            data__digest=digest,
        )
        if pending.exists():
            return None
        job = cls.enqueue(notifications="on_failure", on_failure=Callback(cleanup_lost))
        # The on-commit submission holds this same instance, so the worker
        # receives the payload; the row keeps it for retries.
        job.data = payload
        job.save(update_fields=["data"])
        return job

    @classmethod
    def retry(cls, failed_job: Job) -> Job:
        """Queue a new cleanup from a failed Job's retained payload."""
        if problems := payload_problems(failed_job.data):
            raise ValueError("; ".join(problems))
        job = cls.enqueue(notifications="on_failure", on_failure=Callback(cleanup_lost))
        job.data = dict(failed_job.data)
        job.save(update_fields=["data"])
        return job

    def run(self, *args, **kwargs):
        payload = self.job.data
        if problems := payload_problems(payload):
            for problem in problems:
                self.logger.error(problem)
            raise JobFailed()
        if not routing_is_safe():
            self.logger.error(
                "Database routing sends revisions off the default database; nothing removed."
            )
            raise JobFailed()

        from .models import ScriptProjectRevision

        storage_key, digest, paths = payload["storage_key"], payload["digest"], payload["paths"]
        with project_lock(storage_key):
            # Checked under the lock: a re-stage of the same content either
            # finished before (and is seen here) or starts after removal.
            if ScriptProjectRevision.objects.filter(
                project__storage_key=storage_key, digest=digest
            ).exists():
                # Job logs keep the unformatted message: format it here.
                self.logger.info(f"Content {digest} is referenced by a revision again; kept.")
                return
            storage = get_storage()
            left_behind = []
            removed = 0
            for path in paths:
                key = file_key(storage_key, digest, path)
                try:
                    if storage.exists(key):
                        storage.delete(key)
                    # A missing key counts as removed (an earlier attempt did it).
                    removed += 1
                except FileNotFoundError:
                    removed += 1
                except Exception as exc:
                    left_behind.append(key)
                    self.logger.error(f"Could not remove {key}: {exc}")
        if left_behind:
            self.logger.error(
                f"Cleanup of {digest} left {len(left_behind)} key(s) behind: "
                + ", ".join(left_behind)
            )
            raise JobFailed()
        self.logger.info(f"Removed {removed} stored file(s) of {digest}.")
