"""Revision deletion records cleanup intent; the cleanup Job removes content."""

from types import SimpleNamespace
from unittest import mock

from core.choices import JobStatusChoices
from core.models import Job
from django.db import router, transaction
from django.test import TestCase
from django.urls import reverse
from utilities.testing import APITestCase

from netbox_script_projects.constants import CLEANUP_JOB_NAME
from netbox_script_projects.jobs import StorageCleanupJob, cleanup_lost
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.signals import capture_revision_content
from netbox_script_projects.storage.errors import UnsafeDatabaseAlias
from netbox_script_projects.storage.locks import require_default_database
from netbox_script_projects.storage.service import refresh_revision, stage_upload

from .support import FaultyStorage, StorageTestMixin, archive_upload, zip_bytes

FILES = {"a.py": b"A = 1\n", "lib/b.py": b"B = 2\n", "lib/c.py": b"C = 3\n"}


def cleanup_jobs():
    return Job.objects.filter(name=CLEANUP_JOB_NAME)


class CleanupTestMixin(StorageTestMixin):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")

    def stage(self, files=FILES):
        return stage_upload(self.project, archive_upload(zip_bytes(files)), "p.zip").revision

    def content_files(self):
        return [f for f in self.stored_files() if f.startswith("netbox-scripts/")]


class RevisionDeletionTest(CleanupTestMixin, TestCase):
    def test_deletion_records_job_with_payload_and_queues_it_on_commit(self):
        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=False) as callbacks, transaction.atomic():
            revision.delete()
            job = cleanup_jobs().get()
            self.assertEqual(
                job.data,
                {
                    "storage_key": str(self.project.storage_key),
                    "digest": revision.digest,
                    "paths": sorted(FILES),
                },
            )
            self.assertEqual(self.queue.submitted, [])
        # Nothing is removed by the deleting process.
        self.assertEqual(len(self.content_files()), 3)
        for callback in callbacks:
            callback()
        self.assertEqual(len(self.queue.submitted), 1)
        self.assertEqual(self.queue.run_all(), 1)
        job.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(self.content_files(), [])

    def test_a_live_rq_worker_adds_no_cleanup_job(self):
        # With a worker registered in Redis, NetBox queues a SearchCacheJob for
        # a new Project instead of indexing inline; the cleanup count must not
        # see it (this made ConcurrentStagingTest fail with 2 != 1).
        revision = self.stage()
        with (
            mock.patch("netbox.search.deferred.any_workers_for_queue", return_value=True),
            self.captureOnCommitCallbacks(execute=True),
        ):
            # Its own savepoint: NetBox batches search updates per savepoint
            # scope, and setUp's batch is not captured here.
            with transaction.atomic():
                ScriptProject.objects.create(name="Other", key="other")
            revision.delete()
        self.assertTrue(Job.objects.filter(name="Search cache update").exists())
        self.assertEqual(len(self.queue.submitted), 1)

    def test_rolled_back_deletion_records_nothing(self):
        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=True):
            try:
                with transaction.atomic():
                    revision.delete()
                    raise RuntimeError("abort")
            except RuntimeError:
                pass
        self.assertFalse(cleanup_jobs().exists())
        self.assertTrue(ScriptProjectRevision.objects.filter(digest=revision.digest).exists())
        self.assertEqual(self.queue.submitted, [])

    def test_shared_content_is_kept_while_another_selection_references_it(self):
        source = self.stage()
        ScriptFile.objects.create(project=self.project, path="a.py")
        refreshed = refresh_revision(source).revision
        with self.captureOnCommitCallbacks(execute=True):
            source.delete()
        self.assertFalse(cleanup_jobs().exists())
        with self.captureOnCommitCallbacks(execute=True):
            ScriptProjectRevision.objects.filter(pk=refreshed.pk).delete()  # QuerySet.delete() path
        self.assertEqual(cleanup_jobs().count(), 1)
        self.queue.run_all()
        self.assertEqual(self.content_files(), [])

    def test_job_rechecks_references_and_keeps_restaged_content(self):
        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        restaged = self.stage()  # same digest, before the Job runs
        self.assertEqual(restaged.digest, revision.digest)
        self.queue.run_all()
        job = cleanup_jobs().get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(len(self.content_files()), 3)

    def test_removing_the_active_revision_clears_the_pointer_and_unlisted_keys_stay(self):
        revision = self.stage()
        ScriptProject.objects.filter(pk=self.project.pk).update(active_revision=revision)
        stray = self.storage_root / revision.storage_prefix / "not-in-manifest.txt"
        stray.write_bytes(b"left alone")
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
        self.queue.run_all()
        # Only manifest-listed keys are removed; unlisted ones are never reclaimed.
        self.assertEqual(self.content_files(), [f"{revision.storage_prefix}not-in-manifest.txt"])

    def test_missing_keys_count_as_removed(self):
        revision = self.stage()
        (self.storage_root / revision.storage_prefix / "lib/b.py").unlink()
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        self.queue.run_all()
        self.assertEqual(cleanup_jobs().get().status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(self.content_files(), [])

    def test_failed_cleanup_keeps_payload_logs_leftovers_and_can_be_retried(self):
        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        FaultyStorage.fail_deletes = True
        self.queue.run_all()
        failed = cleanup_jobs().get()
        self.assertEqual(failed.status, JobStatusChoices.STATUS_FAILED)
        self.assertEqual(set(failed.data), {"storage_key", "digest", "paths"})
        self.assertEqual(failed.data["paths"], sorted(FILES))
        log = " ".join(entry["message"] for entry in failed.log_entries)
        self.assertIn(f"{revision.storage_prefix}lib/b.py", log)
        self.assertEqual(len(self.content_files()), 3)

        FaultyStorage.fail_deletes = False
        with self.captureOnCommitCallbacks(execute=True):
            retry = StorageCleanupJob.retry(failed)
        self.queue.run_all()
        retry.refresh_from_db()
        self.assertEqual(retry.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(self.content_files(), [])

    def test_a_cleanup_whose_worker_died_ends_errored_and_can_be_retried(self):
        """RQ calls the failure callback when it gives up an execution whose worker
        died (e2e/test_chaos_workers.py shows it for validation Jobs): the Job must not
        stay "running" for ever, and its kept payload queues the cleanup again."""
        from rq.exceptions import AbandonedJobError

        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        ((_func, _args, kwargs),) = self.queue.submitted
        self.queue.submitted.clear()  # its worker "died" before running it
        self.assertIs(kwargs["on_failure"].func, cleanup_lost)
        lost = cleanup_jobs().get()
        lost.start()

        def give_up(job):
            rq_job = SimpleNamespace(id=str(job.job_id))
            cleanup_lost(rq_job, None, AbandonedJobError, AbandonedJobError(), None)

        give_up(lost)
        lost.refresh_from_db()
        self.assertEqual(lost.status, JobStatusChoices.STATUS_ERRORED)
        self.assertIn("stopped before the Job finished (AbandonedJobError)", lost.error)
        self.assertEqual(lost.data["paths"], sorted(FILES))
        self.assertEqual(len(self.content_files()), 3)

        with self.captureOnCommitCallbacks(execute=True):
            retry = StorageCleanupJob.retry(lost)
        self.assertIs(self.queue.submitted[0][2]["on_failure"].func, cleanup_lost)
        self.queue.run_all()
        retry.refresh_from_db()
        self.assertEqual(retry.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(self.content_files(), [])
        give_up(retry)  # handle() recorded this one's outcome: the callback keeps it
        retry.refresh_from_db()
        self.assertEqual(retry.status, JobStatusChoices.STATUS_COMPLETED)

    def test_unsafe_routing_fails_without_deleting(self):
        revision = self.stage()
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        real = router.db_for_write

        def branch_routing(model, **hints):
            return "branch_schema" if model is ScriptProjectRevision else real(model, **hints)

        with mock.patch.object(router, "db_for_write", side_effect=branch_routing):
            self.queue.run_all()
        self.assertEqual(cleanup_jobs().get().status, JobStatusChoices.STATUS_FAILED)
        self.assertEqual(len(self.content_files()), 3)

    def test_other_database_aliases_are_refused(self):
        revision = self.stage()
        with self.assertRaises(UnsafeDatabaseAlias):
            require_default_database("replica")
        with self.assertRaises(UnsafeDatabaseAlias):
            capture_revision_content(ScriptProjectRevision, revision, using="replica")
        with self.assertRaises(UnsafeDatabaseAlias):
            StorageCleanupJob.record(
                self.project.storage_key, revision.digest, ["a.py"], using="replica"
            )
        with self.assertRaises(UnsafeDatabaseAlias):
            stage_upload(self.project, archive_upload(zip_bytes(FILES)), "p.zip", using="replica")

    def test_rejected_submissions_record_no_cleanup(self):
        with self.assertRaises(Exception):  # noqa: B017  (SubmissionRejected; the row is what matters)
            stage_upload(self.project, archive_upload(zip_bytes({"../x.py": b"x"})), "p.zip")
        with self.captureOnCommitCallbacks(execute=True):
            ScriptProjectRevision.objects.filter(project=self.project).delete()
        self.assertFalse(cleanup_jobs().exists())


class ProjectDeletionTest(CleanupTestMixin, APITestCase):
    def test_rest_project_deletion_cascades_through_the_cleanup_path(self):
        first = self.stage()
        ScriptFile.objects.create(project=self.project, path="a.py")
        refresh_revision(first)  # a second selection sharing the tree
        second = self.stage({"z.py": b"Z = 1\n"})
        # SET_NULL lets the cascade through the active revision without a cycle.
        ScriptProject.objects.filter(pk=self.project.pk).update(active_revision=second)
        self.add_permissions("netbox_script_projects.delete_scriptproject")
        url = reverse(
            "plugins-api:netbox_script_projects-api:scriptproject-detail", args=[self.project.pk]
        )
        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.delete(url, **self.header)
        self.assertEqual(response.status_code, 204)
        self.assertFalse(ScriptProjectRevision.objects.exists())
        self.assertFalse(ScriptFile.objects.exists())
        self.assertEqual(
            sorted(job.data["digest"] for job in cleanup_jobs()),
            sorted([first.digest, second.digest]),
        )
        submitted = [
            (kwargs["job"].name, kwargs["job"].data) for _f, _a, kwargs in self.queue.submitted
        ]
        self.assertEqual(self.queue.run_all(), 2, submitted)
        self.assertEqual(self.content_files(), [])
