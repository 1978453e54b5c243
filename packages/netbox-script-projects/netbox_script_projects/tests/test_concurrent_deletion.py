"""Rows that vanish or change under a working operation, with real second sessions.

A worker thread (its own database connection) pauses inside the service
while the test thread commits a deletion or a competing declaration.
"""

import threading

from django.core.exceptions import ValidationError
from django.test import TransactionTestCase

from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage import service as service_module
from netbox_script_projects.storage.errors import RevisionNotReusable, RevisionVanished
from netbox_script_projects.storage.service import stage_upload

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_concurrency import WAIT, Gate, Worker

FILES = {"a.py": b"A = 1\n", "lib/b.py": b"B = 2\n"}


class ConcurrentDeletionTest(StorageTestMixin, TransactionTestCase):
    limits = {"lock_timeout": WAIT}

    # One test (TransactionTestCase flushes every table), one project per scenario.
    def test_scenarios(self):
        for name in (
            "reused_revision_deleted_during_verification_is_reported_as_vanished",
            "rejected_upload_for_a_project_deleted_meanwhile_is_refused",
            "competing_declarations_cannot_both_be_saved",
        ):
            with self.subTest(scenario=name):
                count = ScriptProject.objects.count()
                self.project = ScriptProject.objects.create(name=f"P {count}", key=f"p-{count}")
                getattr(self, f"scenario_{name}")()

    def stager(self, files=FILES):
        project = ScriptProject.objects.get(pk=self.project.pk)
        return lambda: stage_upload(project, archive_upload(zip_bytes(files)), "p.zip")

    def scenario_reused_revision_deleted_during_verification_is_reported_as_vanished(self):
        self.stager()()
        with Gate().around(service_module, "verify_tree") as gate:
            worker = Worker(self.stager())
            worker.start()
            self.assertTrue(gate.entered.wait(WAIT))
            # Deletion does not take the Project lock.
            ScriptProjectRevision.objects.filter(project=self.project).delete()
            gate.release.set()
            with self.assertRaises(RevisionVanished):
                worker.outcome()

    def scenario_rejected_upload_for_a_project_deleted_meanwhile_is_refused(self):
        with Gate().around(service_module, "read_upload") as gate:
            worker = Worker(self.stager({"../evil.py": b"x"}))
            worker.start()
            self.assertTrue(gate.entered.wait(WAIT))
            ScriptProject.objects.filter(pk=self.project.pk).delete()
            gate.release.set()
            with self.assertRaises(RevisionNotReusable):
                worker.outcome()
        self.assertFalse(ScriptProjectRevision.objects.filter(project_id=self.project.pk).exists())

    def scenario_competing_declarations_cannot_both_be_saved(self):
        # Both pass full_clean() before either saves; the save under the
        # Project write lock repeats the check and refuses the second.
        both_cleaned = threading.Barrier(2, timeout=WAIT)

        def declare(path):
            def run():
                declaration = ScriptFile(project=self.project, path=path)
                declaration.full_clean()
                both_cleaned.wait()
                declaration.save()
                return path

            return run

        workers = [Worker(declare("pkg.py")), Worker(declare("pkg/x.py"))]
        for worker in workers:
            worker.start()
        outcomes = []
        for worker in workers:
            try:
                outcomes.append(worker.outcome())
            except ValidationError as exc:
                outcomes.append(exc.message_dict)
        saved = list(ScriptFile.objects.filter(project=self.project).values_list("path", flat=True))
        self.assertEqual(len(saved), 1, outcomes)
        self.assertEqual(sum(isinstance(outcome, dict) for outcome in outcomes), 1, outcomes)
