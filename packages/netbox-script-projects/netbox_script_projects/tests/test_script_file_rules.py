"""Script File declarations obey the snapshot's rules when saved, under a bounded lock."""

import unicodedata

import psycopg
from django.db import connection
from django.urls import reverse
from utilities.testing import APITestCase, TestCase

from netbox_script_projects.models import ScriptFile, ScriptProject
from netbox_script_projects.snapshot import build_script_file_snapshot
from netbox_script_projects.storage.locks import lock_key

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_concurrency import _probe_params

API = "plugins-api:netbox_script_projects-api"
NFC = unicodedata.normalize("NFC", "café.py")
NFD = unicodedata.normalize("NFD", "café.py")


class ScriptFileRulesTest(StorageTestMixin, APITestCase):
    limits = {"lock_timeout": 0.5}

    def setUp(self):
        super().setUp()
        self.add_permissions(
            "netbox_script_projects.add_scriptfile",
            "netbox_script_projects.change_scriptfile",
            "netbox_script_projects.view_scriptfile",
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        self.url = reverse(f"{API}:scriptfile-list")

    def project(self, key):
        return ScriptProject.objects.create(name=key, key=key)

    def declare(self, project, path, enabled=True):
        return self.client.post(
            self.url,
            {"project": project.pk, "path": path, "enabled": enabled},
            format="json",
            **self.header,
        )

    def test_declarations_the_snapshot_would_refuse_are_rejected_naming_the_field(self):
        pairs = {
            "module beside its package directory": ("pkg/x.py", "pkg.py"),
            "package directory beside its module": ("pkg.py", "pkg/x.py"),
            "NFC and NFD spellings of one name": (NFC, NFD),
            "NFD then NFC": (NFD, NFC),
            "a disabled declaration still counts": ("tools/x.py", "tools.py"),
        }
        for index, (case, (first, second)) in enumerate(pairs.items()):
            with self.subTest(case=case):
                project = self.project(f"p{index}")
                accepted = self.declare(project, first, enabled="disabled" not in case)
                self.assertEqual(accepted.status_code, 201, accepted.data)
                refused = self.declare(project, second)
                self.assertEqual(refused.status_code, 400, refused.data)
                self.assertIn("path", refused.data)
                self.assertEqual(ScriptFile.objects.filter(project=project).count(), 1)
                # The project's snapshot still builds: uploads are not "corrupt".
                build_script_file_snapshot(project)

    def test_an_edit_into_a_conflict_is_rejected_and_uploads_keep_working(self):
        project = self.project("inventory")
        self.assertEqual(self.declare(project, "pkg/x.py").status_code, 201)
        other = self.declare(project, "tools.py")
        detail = reverse(f"{API}:scriptfile-detail", args=[other.data["id"]])
        response = self.client.patch(detail, {"path": "pkg.py"}, format="json", **self.header)
        self.assertEqual(response.status_code, 400, response.data)
        self.assertIn("path", response.data)
        self.assertEqual(ScriptFile.objects.get(pk=other.data["id"]).path, "tools.py")

        upload = reverse(f"{API}:scriptproject-upload", args=[project.pk])
        files = {"pkg/x.py": b"X = 1\n", "tools.py": b"T = 1\n"}
        response = self.client.post(
            upload, {"file": archive_upload(zip_bytes(files))}, format="multipart", **self.header
        )
        self.assertEqual(response.status_code, 201, response.data)

    def test_script_file_write_lock_waits_at_most_the_lock_timeout(self):
        project = self.project("busy")
        # bulk_create skips save(): this test's transaction must not hold the
        # write lock itself before the other session takes the Project lock.
        (declared,) = ScriptFile.objects.bulk_create([ScriptFile(project=project, path="a.py")])
        detail = reverse(f"{API}:scriptfile-detail", args=[declared.pk])
        with connection.cursor() as cursor:
            # Without a lock timeout the write would wait for ever; bound the test.
            cursor.execute("SET LOCAL statement_timeout = '10s'")
        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SET lock_timeout = '10s'")
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.patch(detail, {"enabled": False}, format="json", **self.header)
        self.assertEqual(response.status_code, 503, response.data)
        self.assertIn("busy", response.data["detail"])
        self.assertTrue(ScriptFile.objects.get(pk=declared.pk).enabled)
        # The request's transaction was left usable: the next write succeeds.
        response = self.client.patch(detail, {"enabled": False}, format="json", **self.header)
        self.assertEqual(response.status_code, 200, response.data)
        self.assertFalse(ScriptFile.objects.get(pk=declared.pk).enabled)


class ScriptFileStaleDiscoveryTest(StorageTestMixin, APITestCase):
    def test_an_edit_loaded_before_validation_keeps_the_discovery_it_recorded(self):
        project = ScriptProject.objects.create(name="Stale", key="stale")
        declared = ScriptFile.objects.create(project=project, path="scripts/a.py")
        loaded_before = ScriptFile.objects.get(pk=declared.pk)
        # Validation records its outcome meanwhile (conditional UPDATE).
        ScriptFile.objects.filter(pk=declared.pk).update(
            discovery_status="discovered",
            discovered_scripts=[{"class_name": "recorded-by-validation"}],
        )
        loaded_before.description = "edited while validating"
        loaded_before.save()
        stored = ScriptFile.objects.get(pk=declared.pk)
        self.assertEqual(stored.description, "edited while validating")
        self.assertEqual(stored.discovery_status, "discovered")
        self.assertEqual(stored.discovered_scripts, [{"class_name": "recorded-by-validation"}])


class ScriptFileEditBusyTest(StorageTestMixin, TestCase):
    limits = {"lock_timeout": 0.5}

    def test_edit_form_reports_a_busy_project_instead_of_failing(self):
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.view_scriptfile",
            "netbox_script_projects.change_scriptfile",
        )
        project = ScriptProject.objects.create(name="Busy", key="busy")
        # bulk_create skips save(): this transaction must not hold the write lock.
        (declared,) = ScriptFile.objects.bulk_create([ScriptFile(project=project, path="a.py")])
        url = reverse("plugins:netbox_script_projects:scriptfile_edit", args=[declared.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '10s'")
        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SET lock_timeout = '10s'")
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.post(url, {"path": "a.py", "description": "edited"})
        self.assertHttpStatus(response, 200)
        self.assertContains(response, "The project is busy")
        self.assertEqual(ScriptFile.objects.get(pk=declared.pk).description, "")


class ProjectDeletionBusyTest(StorageTestMixin, TestCase):
    limits = {"lock_timeout": 0.5}

    def test_browser_deletion_of_a_busy_project_is_refused_with_a_message(self):
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.delete_scriptproject",
        )
        project = ScriptProject.objects.create(name="busy-project-kept", key="busy-kept")
        # bulk_create skips save(): this transaction must not hold the write lock.
        ScriptFile.objects.bulk_create([ScriptFile(project=project, path="a.py")])
        url = reverse("plugins:netbox_script_projects:scriptproject_delete", args=[project.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '10s'")
        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SET lock_timeout = '10s'")
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.post(url, {"confirm": True}, follow=True)
        self.assertHttpStatus(response, 200)
        self.assertContains(response, "The project is busy")
        self.assertTrue(ScriptProject.objects.filter(pk=project.pk).exists())
        self.assertTrue(ScriptFile.objects.filter(project=project).exists())
