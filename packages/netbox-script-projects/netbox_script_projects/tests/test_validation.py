"""Validation Jobs in real RQ worker processes: verdicts, sanitized errors,
environment failures and the validation lease under concurrency."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path

from core.choices import JobStatusChoices
from core.models import Job, ObjectChange
from django.core.files.storage import FileSystemStorage
from django.db import connections
from django.test import TransactionTestCase
from django.utils import timezone

from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.constants import VALIDATION_JOB_NAME
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.runtime.discovery import Discovery
from netbox_script_projects.storage.service import stage_upload
from netbox_script_projects.storage.store import file_key
from netbox_script_projects.validation import accept_source, claim, record_verdict, release

from .support import archive_upload, zip_bytes
from .test_runtime import SOURCE
from .workers import RealWorkerMixin

VALID = b"from extras.scripts import Script\n\nclass Ok(Script):\n    def run(self, data, commit):\n        pass\n"


class ProjectsMixin(RealWorkerMixin):
    def make_project(
        self, key, files, script_files, policy=ActivationPolicyChoices.AUTOMATIC, accept=True
    ):
        project = ScriptProject.objects.create(name=key, key=key, activation_policy=policy)
        for path in script_files:
            ScriptFile.objects.create(project=project, path=path)
        return project, self.upload(project, files, accept)

    def upload(self, project, files, accept=True):
        result = stage_upload(project, archive_upload(zip_bytes(files)), "p.zip")
        if accept:
            accept_source(result.revision)
        return ScriptProjectRevision.objects.get(pk=result.revision.pk)

    def assert_sanitized(self, revision):
        text = json.dumps(
            [revision.validation_errors, revision.last_validation_failure], ensure_ascii=False
        )
        for secret in (
            str(revision.project.storage_key),
            revision.digest,
            str(self.storage_root),
            "_nbsp_r",
            "site-packages",
            "/tmp/",
        ):
            self.assertNotIn(secret, text)


class VerdictTest(ProjectsMixin, TransactionTestCase):
    def test_verdicts_discovery_and_leases_in_one_worker_run(self):
        broken = b"from extras.scripts import Script\n\nclass Bad(Script)\n    pass\n"
        raises = (
            b"from extras.scripts import Script\n"
            b"raise RuntimeError(f'cannot start in {__name__} from {__file__}')\n"
        )
        missing = b"from ..lib.absent import helper\n"
        shared = b"from extras.scripts import Script\n\nclass Shared(Script):\n    pass\n"
        reexport = b"from ..lib.common import Shared\n"
        bad_meta = (
            b"from extras.scripts import Script\n\nclass Slow(Script):\n"
            b"    class Meta:\n        job_timeout = 'soon'\n"
        )
        cases = {
            "syntax": ({"scripts/a.py": broken}, ["scripts/a.py"]),
            "raises": ({"scripts/a.py": raises}, ["scripts/a.py"]),
            "missing": ({"scripts/a.py": missing}, ["scripts/a.py"]),
            "empty": ({"scripts/a.py": b"X = 1\n"}, ["scripts/a.py"]),
            "absent": ({"scripts/a.py": VALID}, ["scripts/a.py", "scripts/b.py"]),
            "duplicate": (
                {"lib/common.py": shared, "scripts/a.py": reexport, "scripts/b.py": reexport},
                ["scripts/a.py", "scripts/b.py"],
            ),
            "declaration": ({"scripts/a.py": bad_meta}, ["scripts/a.py"]),
            "none": ({"scripts/a.py": VALID}, []),
            "exits": (
                {"scripts/a.py": b"import sys\nsys.exit('leaving-at-import-secret')\n"},
                ["scripts/a.py"],
            ),
            "order": ({"scripts/a.py": VALID + b"script_order = None\n"}, ["scripts/a.py"]),
            "foreign": (
                {
                    "scripts/a.py": VALID.replace(
                        b"        pass\n", b"        pass\n\n    __module__ = 'os'\n"
                    )
                },
                ["scripts/a.py"],
            ),
            # An absolute import reaches NetBox's own `core`, whose file lives in the virtualenv.
            "shadow": (
                {
                    "core/__init__.py": b"helpers = 1\n",
                    "scripts/a.py": b"from core import helpers\n",
                },
                ["scripts/a.py"],
            ),
            # Declared before declarations were checked (save() skips clean()).
            "dashed": ({"scripts/vm-report.py": VALID}, ["scripts/vm-report.py"]),
        }
        invalid = {key: self.make_project(key, *case) for key, case in cases.items()}
        manual, manual_revision = self.make_project(
            "manual", SOURCE, ["scripts/tags.py"], ActivationPolicyChoices.MANUAL
        )

        # Automatic activation needs the accepted source under the current selection.
        superseded, first = self.make_project(
            "superseded", {"scripts/a.py": VALID}, ["scripts/a.py"]
        )
        latest = self.upload(superseded, {"scripts/a.py": VALID + b"# newer\n"})
        reselected, before = self.make_project(
            "reselected", {"scripts/a.py": VALID}, ["scripts/a.py"]
        )
        ScriptFile.objects.create(project=reselected, path="scripts/b.py")

        # A lease whose worker vanished: expired, its Job row still "running".
        stale, stale_revision = self.make_project(
            "stale", {"scripts/a.py": VALID}, ["scripts/a.py"], accept=False
        )
        live, live_revision = self.make_project(
            "live", {"scripts/a.py": VALID}, ["scripts/a.py"], accept=False
        )
        for revision, started in (
            (stale_revision, timezone.now() - timedelta(hours=2)),
            (live_revision, timezone.now()),
        ):
            vanished = Job.objects.create(
                name=VALIDATION_JOB_NAME,
                status=JobStatusChoices.STATUS_RUNNING,
                job_id=uuid.uuid4(),
                data={"revision": revision.pk},
            )
            ScriptProjectRevision.objects.filter(pk=revision.pk).update(
                status=Status.VALIDATING, validation_job=vanished, validation_started=started
            )
        # Lease expiry itself queued nothing; the next upload resolving to each does, once.
        for key, (_project, revision) in invalid.items():
            self.upload(revision.project, cases[key][0])
        self.upload(manual, SOURCE)
        self.upload(stale, {"scripts/a.py": VALID})
        self.upload(stale, {"scripts/a.py": VALID})
        self.upload(live, {"scripts/a.py": VALID})
        queued = Job.objects.filter(
            name=VALIDATION_JOB_NAME, status=JobStatusChoices.STATUS_PENDING
        )
        self.assertEqual(
            sorted(job.data["revision"] for job in queued),
            sorted(
                [r.pk for _p, r in invalid.values()]
                + [manual_revision.pk, stale_revision.pk, first.pk, latest.pk, before.pk]
            ),
        )

        self.drain_queue()

        expected_codes = {
            "syntax": ["syntax_error"],
            "raises": ["import_error"],
            "missing": ["import_error"],
            "empty": ["no_scripts"],
            "absent": ["script_file_missing"],
            "duplicate": ["duplicate_script"],
            "declaration": ["invalid_declaration"],
            "none": ["no_script_files"],
            "exits": ["import_error"],
            "order": ["invalid_script_order"],
            "dashed": ["invalid_module_name"],
            "foreign": ["no_scripts"],
            "shadow": ["import_error"],
        }
        for key, (_project, revision) in invalid.items():
            with self.subTest(case=key):
                revision.refresh_from_db()
                self.assertEqual(revision.status, Status.INVALID, revision.last_validation_failure)
                self.assertEqual(
                    [e["code"] for e in revision.validation_errors], expected_codes[key]
                )
                self.assertEqual(revision.discovered_scripts, [])
                self.assertIsNotNone(revision.validation_job_id)
                self.assert_sanitized(revision)
        raised = invalid["raises"][1].validation_errors[0]
        self.assertEqual(raised["source_path"], "scripts/a.py")
        self.assertEqual(raised["exception_type"], "RuntimeError")
        self.assertIn("cannot start in scripts.a from scripts/a.py", raised["message"])
        self.assertIn('File "scripts/a.py", line 2', raised["traceback"])
        self.assertIn("scripts.a", raised["message"])
        exited = invalid["exits"][1].validation_errors[0]
        self.assertEqual(exited["exception_type"], "SystemExit")
        self.assertIn("leaving-at-import-secret", exited["message"])
        self.assertIsNone(invalid["exits"][1].last_validation_failure)
        self.assertIn("NoneType", invalid["order"][1].validation_errors[0]["message"])
        self.assertIn("'vm-report'", invalid["dashed"][1].validation_errors[0]["message"])
        shadowed = invalid["shadow"][1].validation_errors[0]["message"]
        self.assertIn("cannot import name 'helpers' from 'core'", shadowed)
        self.assertNotIn(sys.prefix, shadowed)
        syntax = invalid["syntax"][1].validation_errors[0]
        self.assertEqual(syntax["exception_type"], "SyntaxError")
        self.assertIn("scripts/a.py", syntax["traceback"])
        self.assertIn("(scripts/a.py, line 3)", syntax["message"])
        declaration = invalid["declaration"][1].validation_errors[0]
        self.assertEqual(declaration["exception_type"], "ValidationError")
        self.assertIn("ValidationError", declaration["traceback"])
        self.assertIn(
            "No module named 'lib'", invalid["missing"][1].validation_errors[0]["message"]
        )
        self.assertEqual(
            ScriptFile.objects.get(
                project=invalid["empty"][0], path="scripts/a.py"
            ).discovery_status,
            "empty",
        )

        manual_revision.refresh_from_db()
        manual.refresh_from_db()
        self.assertEqual(manual_revision.status, Status.VALID)
        self.assertIsNone(manual.active_revision)
        self.assertEqual(len(manual_revision.discovered_scripts), 2)

        for revision, expected in (
            (first, Status.VALID),
            (latest, Status.ACTIVE),
            (before, Status.VALID),
        ):
            revision.refresh_from_db()
            self.assertEqual(revision.status, expected)

        stale_revision.refresh_from_db()
        self.assertEqual(stale_revision.status, Status.ACTIVE)
        self.assertNotEqual(stale_revision.validation_job.status, JobStatusChoices.STATUS_RUNNING)
        live_revision.refresh_from_db()
        self.assertEqual(live_revision.status, Status.VALIDATING)

        # The Job's automatic activation writes no request change record.
        self.assertFalse(
            ObjectChange.objects.filter(
                changed_object_id=stale_revision.pk,
                changed_object_type__model="scriptprojectrevision",
            ).exists()
        )


class EnvironmentFailureTest(ProjectsMixin, TransactionTestCase):
    storage_backend = "netbox_script_projects.tests.test_validation.OutageFileSystemStorage"

    def test_storage_outage_and_tampering_are_not_verdicts(self):
        project, revision = self.make_project("outage", {"scripts/a.py": VALID}, ["scripts/a.py"])
        tampered_project, tampered = self.make_project(
            "tampered", {"scripts/a.py": VALID}, ["scripts/a.py"]
        )
        key = file_key(tampered_project.storage_key, tampered.digest, "scripts/a.py")
        (self.storage_root / key).write_bytes(VALID.replace(b"pass", b"0   "))
        # The outage applies to the project named in the marker only.
        (self.storage_root / OUTAGE_MARKER).write_text(str(project.storage_key))

        self.drain_queue()

        for candidate, code in (
            (revision, "storage_unavailable"),
            (tampered, "verification_failed"),
        ):
            with self.subTest(code=code):
                candidate.refresh_from_db()
                self.assertEqual(candidate.status, Status.MATERIALIZED)
                self.assertIsNone(candidate.validation_job_id)
                self.assertIsNone(candidate.validation_started)
                self.assertEqual(candidate.last_validation_failure["code"], code)
                self.assertEqual(candidate.validation_errors, [])
                self.assert_sanitized(candidate)
                job = Job.objects.get(pk=candidate.last_validation_failure["job"])
                self.assertEqual(job.status, JobStatusChoices.STATUS_FAILED)

        # Backend back: the next upload resolving to the revision validates it.
        (self.storage_root / OUTAGE_MARKER).unlink()
        self.upload(project, {"scripts/a.py": VALID})
        self.drain_queue()
        revision.refresh_from_db()
        self.assertEqual(revision.status, Status.ACTIVE)
        # The last environment failure stays on record.
        self.assertEqual(revision.last_validation_failure["code"], "storage_unavailable")


OUTAGE_MARKER = "OUTAGE"


class OutageFileSystemStorage(FileSystemStorage):
    def open(self, name, mode="rb"):
        marker = Path(self.location) / OUTAGE_MARKER
        if marker.exists() and marker.read_text() in name:
            raise OSError(f"backend unreachable at {self.path(name)}")
        return super().open(name, mode)


class WorkerTimeoutTest(ProjectsMixin, TransactionTestCase):
    plugin_config = {"validation_job_timeout": 3, "validation_lease": 600}

    def test_a_validation_that_outlives_its_job_timeout_is_not_a_verdict(self):
        endless = b"import time\n\nwhile True:\n    time.sleep(0.05)\n"
        _project, revision = self.make_project(
            "endless", {"scripts/a.py": endless}, ["scripts/a.py"]
        )
        self.drain_queue()
        revision.refresh_from_db()
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.assertEqual(revision.validation_errors, [])
        self.assertIsNone(revision.validation_job_id)
        self.assertEqual(revision.last_validation_failure["code"], "worker_failed")
        job = Job.objects.get(pk=revision.last_validation_failure["job"])
        self.assertEqual(job.status, JobStatusChoices.STATUS_ERRORED)


class LeaseConcurrencyTest(ProjectsMixin, TransactionTestCase):
    """Claims and final transitions from separate database sessions."""

    def job(self, revision):
        return Job.objects.create(
            name=VALIDATION_JOB_NAME,
            status=JobStatusChoices.STATUS_RUNNING,
            job_id=uuid.uuid4(),
            data={"revision": revision.pk},
        )

    def in_threads(self, calls):
        barrier = threading.Barrier(len(calls))
        results = [None] * len(calls)

        def run(index, call):
            try:
                barrier.wait()
                results[index] = call()
            finally:
                connections.close_all()

        threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return results

    def test_one_claim_wins_and_a_reclaimed_worker_writes_nothing(self):
        project, revision = self.make_project("lease", {"scripts/a.py": VALID}, ["scripts/a.py"])
        first, second, third = self.job(revision), self.job(revision), self.job(revision)

        won = self.in_threads(
            [lambda: claim(revision.pk, first), lambda: claim(revision.pk, second)]
        )
        self.assertEqual(sorted(won), [False, True])
        owner, loser = (first, second) if won[0] else (second, first)
        # A live lease is not reclaimable.
        self.assertFalse(claim(revision.pk, third))

        # Expire it: a newer Job reclaims although the owner's Job still "runs".
        ScriptProjectRevision.objects.filter(pk=revision.pk).update(
            validation_started=timezone.now() - timedelta(days=1)
        )
        self.assertTrue(claim(revision.pk, third))

        script_file = ScriptFile.objects.get(project=project)
        discovery = Discovery(
            scripts=[{"module": "scripts.a", "class_name": "Ok"}],
            errors=[],
            by_script_file={script_file.pk: ([{"module": "scripts.a"}], [])},
        )
        stale = self.in_threads(
            [
                lambda: record_verdict(revision.pk, owner, revision, discovery),
                lambda: release(revision.pk, loser, "worker_failed", "x"),
            ]
        )
        self.assertEqual(stale, [False, False])
        revision.refresh_from_db()
        script_file.refresh_from_db()
        self.assertEqual(
            (revision.status, revision.validation_job_id), (Status.VALIDATING, third.pk)
        )
        self.assertEqual(revision.discovered_scripts, [])
        self.assertEqual(script_file.discovery_status, "pending")
        self.assertIsNone(script_file.discovered_revision)

        self.assertTrue(record_verdict(revision.pk, third, revision, discovery))
        revision.refresh_from_db()
        script_file.refresh_from_db()
        self.assertEqual(revision.status, Status.VALID)
        self.assertEqual(revision.validation_job_id, third.pk)
        self.assertEqual(script_file.discovered_revision_id, revision.pk)


class LostWorkerTest(ProjectsMixin, TransactionTestCase):
    """A worker killed mid-validation never lets `JobRunner.handle` record it: RQ's
    failure callback does (e2e/test_chaos_workers.py kills a real worker)."""

    def test_rq_holds_the_callback_that_errors_the_job_and_releases_the_lease(self):
        import django_rq
        from rq.exceptions import AbandonedJobError
        from rq.job import Job as RQJob
        from rq.timeouts import UnixSignalDeathPenalty

        from netbox_script_projects.validation import validation_lost

        _project, revision = self.make_project("lost", {"scripts/a.py": VALID}, ["scripts/a.py"])
        job = Job.objects.get(name=VALIDATION_JOB_NAME, data__revision=revision.pk)
        rq_job = RQJob.fetch(str(job.job_id), connection=django_rq.get_connection(job.queue_name))
        self.assertIs(rq_job.failure_callback, validation_lost)
        job.start()
        self.assertTrue(claim(revision.pk, job))

        rq_job.execute_failure_callback(
            UnixSignalDeathPenalty, AbandonedJobError, AbandonedJobError(), None
        )
        job.refresh_from_db()
        revision.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_ERRORED)
        self.assertIn("stopped before the Job finished (AbandonedJobError)", job.error)
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.assertIsNone(revision.validation_job)
        self.assertEqual(revision.last_validation_failure["code"], "worker_lost")
