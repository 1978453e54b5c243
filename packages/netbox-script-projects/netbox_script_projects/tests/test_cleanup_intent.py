"""Cleanup intent is never lost to a Job that already started, and failures read well."""

from core.choices import JobStatusChoices
from django.test import TestCase

from .support import FaultyStorage
from .test_cleanup import FILES, CleanupTestMixin, cleanup_jobs


class CleanupIntentTest(CleanupTestMixin, TestCase):
    def delete(self, revision):
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()

    def test_a_pending_job_covers_a_new_deletion_of_the_same_content(self):
        self.delete(self.stage())
        self.delete(self.stage())
        self.assertEqual(cleanup_jobs().count(), 1)
        self.assertEqual(self.queue.run_all(), 1)
        self.assertEqual(self.content_files(), [])

    def test_a_running_or_stuck_job_does_not_cover_a_new_deletion(self):
        self.delete(self.stage())
        started = cleanup_jobs().get()
        # A worker took the Job and may have made its reference check already,
        # or died: then the row stays "running" for ever.
        self.queue.submitted.clear()
        started.start()
        self.delete(self.stage())
        recorded = cleanup_jobs().exclude(pk=started.pk)
        self.assertEqual(recorded.count(), 1)
        self.assertEqual(recorded.get().data, started.data)
        self.assertEqual(self.queue.run_all(), 1)
        self.assertEqual(recorded.get().status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(self.content_files(), [])

    def test_failed_cleanup_logs_a_formatted_summary(self):
        revision = self.stage()
        self.delete(revision)
        FaultyStorage.fail_deletes = True
        self.queue.run_all()
        failed = cleanup_jobs().get()
        self.assertEqual(failed.status, JobStatusChoices.STATUS_FAILED)
        summaries = [
            entry["message"]
            for entry in failed.log_entries
            if entry["message"].startswith("Cleanup of")
        ]
        self.assertEqual(
            summaries,
            [
                f"Cleanup of {revision.digest} left {len(FILES)} key(s) behind: "
                + ", ".join(f"{revision.storage_prefix}{path}" for path in sorted(FILES))
            ],
        )
