"""The Project lock under real concurrency: separate PostgreSQL sessions.

A probe session calls pg_try_advisory_lock at each step to see who holds
the lock; worker threads use their own Django connections.
"""

import threading
from contextlib import contextmanager
from unittest import mock

import psycopg
from core.choices import JobStatusChoices
from core.models import Job
from django.db import connection, connections
from django.db.models.signals import post_delete
from django.test import TransactionTestCase
from django.urls import reverse
from proxbox_processes import wait_until
from utilities.testing import APITestCase

from netbox_script_projects import jobs as cleanup_module
from netbox_script_projects.constants import CLEANUP_JOB_NAME
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage import service as service_module
from netbox_script_projects.storage.locks import lock_key
from netbox_script_projects.storage.service import stage_upload, verify_revision_storage

from .support import StorageTestMixin, archive_upload, zip_bytes

FILES = {"a.py": b"A = 1\n", "lib/b.py": b"B = 2\n"}
WAIT = 15


def _probe_params():
    settings = connection.settings_dict
    return {
        "dbname": settings["NAME"],
        "user": settings["USER"],
        "password": settings["PASSWORD"] or None,
        "host": settings["HOST"] or None,
        "port": settings["PORT"] or None,
        "autocommit": True,
    }


def lock_is_held(storage_key) -> bool:
    """Ask from a separate session whether someone holds the Project lock."""
    key = lock_key(storage_key)
    with psycopg.connect(**_probe_params()) as probe:
        granted = probe.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0]
        if granted:
            probe.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        return not granted


def lock_waiters(storage_key) -> int:
    """Sessions waiting for the Project lock in this test database.

    pg_locks spans the whole cluster, and other runs of this suite use other
    databases on the same server: count only waiters in ours.
    """
    classid, objid = lock_key(storage_key)
    with psycopg.connect(**_probe_params()) as probe:
        return probe.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid::bigint = (%s::bigint & 4294967295) AND objid::bigint = (%s::bigint & 4294967295)",
            [classid, objid],
        ).fetchone()[0]


class Worker(threading.Thread):
    def __init__(self, target):
        super().__init__(daemon=True)
        self.target = target
        self.result = None
        self.error = None

    def run(self):
        try:
            self.result = self.target()
        except BaseException as exc:  # reported to the test thread
            self.error = exc
        finally:
            connections.close_all()

    def outcome(self):
        self.join(WAIT)
        if self.is_alive():
            raise AssertionError("worker did not finish")
        if self.error:
            raise self.error
        return self.result


class Gate:
    """Pauses the first call of a wrapped function until released."""

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()
        self.used = False

    def wrap(self, function):
        def gated(*args, **kwargs):
            if not self.used:
                self.used = True
                self.entered.set()
                if not self.release.wait(WAIT):
                    raise AssertionError("gate was never released")
            return function(*args, **kwargs)

        return gated

    @contextmanager
    def around(self, module, name):
        with mock.patch.object(module, name, self.wrap(getattr(module, name))):
            try:
                yield self
            finally:
                self.release.set()


class ConcurrentStagingTest(StorageTestMixin, TransactionTestCase):
    limits = {"lock_timeout": WAIT}

    # Each TransactionTestCase test flushes every NetBox table (seconds), so
    # the scenarios run as subtests of two tests, each on a fresh project.

    def fresh_project(self):
        self.queue.submitted.clear()
        count = ScriptProject.objects.count()
        self.project = ScriptProject.objects.create(
            name=f"Inventory {count}", key=f"inventory-{count}"
        )

    def run_scenarios(self, *names):
        for name in names:
            with self.subTest(scenario=name):
                self.fresh_project()
                getattr(self, f"scenario_{name}")()

    def test_staging_concurrency(self):
        self.run_scenarios(
            "staging_holds_the_lock_only_while_it_works",
            "two_stagers_of_the_same_content_yield_one_revision",
            "revision_deleted_during_staging_is_reported_as_vanished",
            "cascaded_script_file_deletion_takes_the_write_lock",
        )

    def test_cleanup_racing_restage(self):
        self.run_scenarios(
            "cleanup_waiting_behind_a_restage_keeps_the_content",
            "restage_waiting_behind_cleanup_rewrites_the_content",
        )

    def stager(self, files=FILES):
        project = ScriptProject.objects.get(pk=self.project.pk)
        return lambda: stage_upload(project, archive_upload(zip_bytes(files)), "p.zip")

    def scenario_staging_holds_the_lock_only_while_it_works(self):
        self.assertFalse(lock_is_held(self.project.storage_key))
        with Gate().around(service_module, "write_tree") as gate:
            worker = Worker(self.stager())
            worker.start()
            self.assertTrue(gate.entered.wait(WAIT))
            self.assertTrue(lock_is_held(self.project.storage_key))
            gate.release.set()
            result = worker.outcome()
        self.assertEqual(result.revision.status, "materialized")
        self.assertFalse(lock_is_held(self.project.storage_key))

    def scenario_two_stagers_of_the_same_content_yield_one_revision(self):
        with Gate().around(service_module, "write_tree") as gate:
            first = Worker(self.stager())
            first.start()
            self.assertTrue(gate.entered.wait(WAIT))
            second = Worker(self.stager())
            second.start()
            wait_until(
                lambda: lock_waiters(self.project.storage_key) == 1,
                WAIT,
                "the second stager to wait for the lock",
                interval=0.02,
            )
            self.assertTrue(lock_is_held(self.project.storage_key))
            gate.release.set()
            outcomes = sorted([first.outcome().outcome, second.outcome().outcome])
        self.assertEqual(outcomes, ["created", "reused"])
        self.assertEqual(ScriptProjectRevision.objects.filter(project=self.project).count(), 1)
        self.assertFalse(lock_is_held(self.project.storage_key))

    def _deleted_revision(self):
        revision = self.stager()().revision
        revision.delete()  # autocommit: the Job is recorded and submitted on commit
        self.assertEqual(len(self.queue.submitted), 1)
        return revision

    def scenario_cleanup_waiting_behind_a_restage_keeps_the_content(self):
        deleted = self._deleted_revision()
        with Gate().around(service_module, "write_tree") as gate:
            restage = Worker(self.stager())
            restage.start()
            self.assertTrue(gate.entered.wait(WAIT))
            cleanup = Worker(self.queue.run_all)
            cleanup.start()
            wait_until(
                lambda: lock_waiters(self.project.storage_key) == 1,
                WAIT,
                "cleanup to wait for the lock",
                interval=0.02,
            )
            gate.release.set()
            revision = restage.outcome().revision
            cleanup.outcome()
        self.assertEqual(revision.digest, deleted.digest)
        job = Job.objects.filter(name=CLEANUP_JOB_NAME, data__digest=deleted.digest).get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(verify_revision_storage(revision), [])

    def scenario_restage_waiting_behind_cleanup_rewrites_the_content(self):
        deleted = self._deleted_revision()
        with Gate().around(cleanup_module, "file_key") as gate:
            cleanup = Worker(self.queue.run_all)
            cleanup.start()
            self.assertTrue(gate.entered.wait(WAIT))
            self.assertTrue(lock_is_held(self.project.storage_key))
            restage = Worker(self.stager())
            restage.start()
            wait_until(
                lambda: lock_waiters(self.project.storage_key) == 1,
                WAIT,
                "the re-stage to wait for the lock",
                interval=0.02,
            )
            gate.release.set()
            cleanup.outcome()
            result = restage.outcome()
        self.assertEqual((result.outcome, result.revision.digest), ("created", deleted.digest))
        self.assertEqual(verify_revision_storage(result.revision), [])

    def scenario_revision_deleted_during_staging_is_reported_as_vanished(self):
        from netbox_script_projects.storage.errors import RevisionVanished

        with Gate().around(service_module, "write_tree") as gate:
            worker = Worker(self.stager())
            worker.start()
            self.assertTrue(gate.entered.wait(WAIT))
            # Deletion does not take the Project lock; it records cleanup intent.
            ScriptProjectRevision.objects.filter(project=self.project).delete()
            gate.release.set()
            with self.assertRaises(RevisionVanished):
                worker.outcome()
        self.assertEqual(len(self.queue.submitted), 1)

    def scenario_cascaded_script_file_deletion_takes_the_write_lock(self):
        ScriptFile.objects.create(project=self.project, path="a.py")
        self.assertFalse(lock_is_held(self.project.storage_key))
        observed = []

        def observe(sender, instance, **kwargs):
            observed.append(lock_is_held(self.project.storage_key))

        post_delete.connect(observe, sender=ScriptFile)
        try:
            ScriptProject.objects.get(pk=self.project.pk).delete()  # browser-style: no session lock
        finally:
            post_delete.disconnect(observe, sender=ScriptFile)
        self.assertEqual(observed, [True])
        # A transaction-level lock: gone with the deleting transaction.
        self.assertFalse(lock_is_held(self.project.storage_key))


class LockHoldersTest(StorageTestMixin, APITestCase):
    """Where the lock must be held, probed from another session mid-operation."""

    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.observed = []

    def observe(self, sender, instance, **kwargs):
        self.observed.append(lock_is_held(self.project.storage_key))

    @contextmanager
    def observing(self, model):
        post_delete.connect(self.observe, sender=model)
        try:
            yield
        finally:
            post_delete.disconnect(self.observe, sender=model)

    def test_rest_project_deletion_holds_the_lock_through_netbox_delete(self):
        self.add_permissions("netbox_script_projects.delete_scriptproject")
        url = reverse(
            "plugins-api:netbox_script_projects-api:scriptproject-detail", args=[self.project.pk]
        )
        with self.observing(ScriptProject):
            self.assertEqual(self.client.delete(url, **self.header).status_code, 204)
        self.assertEqual(self.observed, [True])
        self.assertFalse(lock_is_held(self.project.storage_key))

    def test_cleanup_job_holds_the_lock_while_removing(self):
        revision = stage_upload(self.project, archive_upload(zip_bytes(FILES)), "p.zip").revision
        with self.captureOnCommitCallbacks(execute=True):
            revision.delete()
        real_file_key = cleanup_module.file_key

        def observing_file_key(*args):
            self.observed.append(lock_is_held(self.project.storage_key))
            return real_file_key(*args)

        with mock.patch.object(cleanup_module, "file_key", observing_file_key):
            self.queue.run_all()
        self.assertEqual(self.observed, [True, True])
        self.assertFalse(lock_is_held(self.project.storage_key))

    def test_rest_bulk_deletion_holds_each_project_lock(self):
        other = ScriptProject.objects.create(name="Other", key="other")
        ScriptFile.objects.create(project=other, path="a.py")
        self.add_permissions("netbox_script_projects.delete_scriptproject")
        url = reverse("plugins-api:netbox_script_projects-api:scriptproject-list")
        held = []

        def observe(sender, instance, **kwargs):
            held.append((instance.key, lock_is_held(instance.storage_key)))

        post_delete.connect(observe, sender=ScriptProject)
        try:
            response = self.client.delete(
                url, [{"id": self.project.pk}, {"id": other.pk}], format="json", **self.header
            )
        finally:
            post_delete.disconnect(observe, sender=ScriptProject)
        self.assertEqual(response.status_code, 204)
        self.assertEqual(sorted(held), [("inventory", True), ("other", True)])


class ProjectBusyTest(StorageTestMixin, APITestCase):
    limits = {"lock_timeout": 0.2}

    def test_a_held_lock_makes_staging_report_a_busy_project(self):
        project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.add_permissions(
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        url = reverse(
            "plugins-api:netbox_script_projects-api:scriptproject-upload", args=[project.pk]
        )
        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.post(
                url, {"file": archive_upload(zip_bytes(FILES))}, format="multipart", **self.header
            )
        self.assertEqual(response.status_code, 503)
        self.assertIn("busy", response.data["detail"])
        self.assertEqual(self.stored_files(), [])
        # The holder's session ended, and with it the lock.
        self.assertFalse(lock_is_held(project.storage_key))
