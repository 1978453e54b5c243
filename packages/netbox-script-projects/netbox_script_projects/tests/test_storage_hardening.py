"""Storage-service defects found by reading the code, each proven through REST.

Recorded errors never name storage locations; a complete shared tree is
verified, never rewritten; malformed ids and routed aliases get clear 4xx.
"""

import json
from unittest import mock

from django.db import router
from django.test import TestCase
from django.urls import reverse
from utilities.testing import APITestCase

from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage.errors import RevisionNotReusable
from netbox_script_projects.storage.service import stage_upload

from .support import FaultyStorage, StorageTestMixin, archive_upload, py_upload, zip_bytes

API = "plugins-api:netbox_script_projects-api"
FILES = {"report.py": b"REPORT = 1\n", "lib/util.py": b"UTIL = 2\n"}


class SourceAPIMixin(StorageTestMixin):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.add_permissions(
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
            "netbox_script_projects.view_scriptprojectrevision",
        )

    def action(self, name, data, pk=None, format="multipart"):
        url = reverse(f"{API}:scriptproject-{name}", args=[pk or self.project.pk])
        return self.client.post(url, data, format=format, **self.header)

    def upload(self, files=FILES):
        return self.action("upload", {"file": archive_upload(zip_bytes(files))})

    def stored(self, revision, path):
        return self.storage_root / revision.storage_prefix / path

    def assert_names_no_storage_location(self, text, digest=None):
        self.assertNotIn(str(self.storage_root), text)
        self.assertNotIn(str(self.project.storage_key), text)
        self.assertNotIn("netbox-scripts/", text)
        if digest:
            self.assertNotIn(f"/{digest}/", text)


class StorageErrorTextTest(SourceAPIMixin, APITestCase):
    def test_failed_write_records_and_returns_no_storage_location(self):
        FaultyStorage.saves_before_failure = 0
        response = self.upload()
        self.assertEqual(response.status_code, 503, response.data)
        revision = ScriptProjectRevision.objects.get(project=self.project)
        self.assertEqual(revision.status, Status.STAGING)
        self.assertEqual(
            [e["code"] for e in revision.validation_errors], ["storage_write_failed"] * 2
        )
        self.assertEqual(
            revision.validation_errors[0]["message"], "Storage write failed (OSError)."
        )
        self.assert_names_no_storage_location(json.dumps(revision.validation_errors))
        self.assert_names_no_storage_location(response.content.decode(), revision.digest)
        detail = reverse(f"{API}:scriptprojectrevision-detail", args=[revision.pk])
        shown = self.client.get(detail, **self.header)
        self.assert_names_no_storage_location(shown.content.decode(), revision.digest)

    def test_unreadable_stored_file_is_reported_without_its_location(self):
        self.assertEqual(self.upload().status_code, 201)
        FaultyStorage.fail_reads = True
        response = self.upload()
        self.assertEqual(response.status_code, 409, response.data)
        self.assertEqual({f["code"] for f in response.data["findings"]}, {"unreadable"})
        self.assert_names_no_storage_location(
            response.content.decode(), response.data["revision"]["digest"]
        )


class SharedTreeEvidenceTest(SourceAPIMixin, APITestCase):
    def test_upload_under_a_new_selection_reports_tampering_instead_of_rewriting(self):
        first = self.upload()
        self.assertEqual(first.status_code, 201, first.data)
        revision = ScriptProjectRevision.objects.get(pk=first.data["revision"]["id"])
        tampered = self.stored(revision, "report.py")
        tampered.write_bytes(b"REPORT = 9\n")  # same size, other content
        ScriptFile.objects.create(project=self.project, path="report.py")

        response = self.upload()
        self.assertEqual(response.status_code, 409, response.data)
        self.assertEqual(
            [(f["path"], f["code"]) for f in response.data["findings"]],
            [("report.py", "checksum_mismatch")],
        )
        # The evidence is still there, and no revision of the new selection exists.
        self.assertEqual(tampered.read_bytes(), b"REPORT = 9\n")
        self.assertEqual(ScriptProjectRevision.objects.filter(project=self.project).count(), 1)

    def test_upload_under_a_new_selection_shares_the_verified_tree_without_writing(self):
        first = self.upload()
        saves = FaultyStorage.saves
        ScriptFile.objects.create(project=self.project, path="report.py")
        response = self.upload()
        self.assertEqual((response.status_code, response.data["outcome"]), (201, "created"))
        self.assertEqual(response.data["revision"]["status"]["value"], Status.MATERIALIZED)
        self.assertEqual(response.data["revision"]["digest"], first.data["revision"]["digest"])
        self.assertNotEqual(
            response.data["revision"]["script_file_digest"],
            first.data["revision"]["script_file_digest"],
        )
        self.assertEqual(FaultyStorage.saves, saves)

    def test_failed_selection_beside_a_complete_tree_is_verified_not_rewritten(self):
        # The selection with the declaration fails to write; then the same
        # source completes under the empty selection.
        declaration = ScriptFile.objects.create(project=self.project, path="report.py")
        FaultyStorage.saves_before_failure = 0
        self.assertEqual(self.upload().status_code, 503)
        FaultyStorage.reset()
        declaration.enabled = False
        declaration.save()
        complete = self.upload()
        self.assertEqual((complete.status_code, complete.data["outcome"]), (201, "created"))
        revision = ScriptProjectRevision.objects.get(pk=complete.data["revision"]["id"])
        declaration.enabled = True
        declaration.save()

        tampered = self.stored(revision, "lib/util.py")
        tampered.write_bytes(b"UTIL = 666\n")
        response = self.upload()
        self.assertEqual(response.status_code, 409, response.data)
        self.assertEqual(tampered.read_bytes(), b"UTIL = 666\n")

        tampered.write_bytes(FILES["lib/util.py"])
        saves = FaultyStorage.saves
        response = self.upload()
        self.assertEqual((response.status_code, response.data["outcome"]), (200, "resumed"))
        self.assertEqual(response.data["revision"]["status"]["value"], Status.MATERIALIZED)
        self.assertEqual(response.data["revision"]["validation_errors"], [])
        self.assertEqual(FaultyStorage.saves, saves)


class MalformedInputTest(SourceAPIMixin, APITestCase):
    def test_source_actions_answer_404_for_a_malformed_project_id(self):
        for name, data, format in (
            ("refresh", {}, "json"),
            ("upload", {"file": py_upload()}, "multipart"),
        ):
            for pk in ("abc", "1e3", "-1", "99999999999999999999999"):
                with self.subTest(action=name, pk=pk):
                    response = self.action(name, data, pk=pk, format=format)
                    self.assertEqual(response.status_code, 404, response.data)

    def test_refresh_rejects_an_out_of_range_revision_naming_the_field(self):
        self.assertEqual(self.upload().status_code, 201)
        for revision in (0, -1, 2**63, 10**30, "abc"):
            with self.subTest(revision=revision):
                response = self.action("refresh", {"revision": revision}, format="json")
                self.assertEqual(response.status_code, 400, response.data)
                self.assertIn("revision", response.data)


class RoutedDatabaseTest(SourceAPIMixin, APITestCase):
    def routed_elsewhere(self):
        real = router.db_for_write

        def branch_routing(model, **hints):
            if model is ScriptProjectRevision:
                return "branch_schema"
            return real(model, **hints)

        return mock.patch.object(router, "db_for_write", side_effect=branch_routing)

    def test_upload_and_refresh_refuse_revisions_routed_off_the_default_database(self):
        self.assertEqual(self.upload().status_code, 201)
        files_before = self.stored_files()
        with self.routed_elsewhere():
            for name, data, format in (
                (
                    "upload",
                    {"file": archive_upload(zip_bytes({"new.py": b"N = 1\n"}))},
                    "multipart",
                ),
                ("refresh", {}, "json"),
            ):
                with self.subTest(action=name):
                    response = self.action(name, data, format=format)
                    self.assertEqual(response.status_code, 409, response.data)
                    self.assertIn("'default' database only", response.data["detail"])
        self.assertEqual(ScriptProjectRevision.objects.filter(project=self.project).count(), 1)
        self.assertEqual(self.stored_files(), files_before)


class RejectedUploadOfDeletedProjectTest(StorageTestMixin, TestCase):
    def test_rejected_upload_for_a_deleted_project_is_refused_not_recorded(self):
        project = ScriptProject.objects.create(name="Gone", key="gone")
        stale = ScriptProject.objects.get(pk=project.pk)
        ScriptProject.objects.filter(pk=project.pk).delete()
        with self.assertRaises(RevisionNotReusable):
            stage_upload(stale, archive_upload(zip_bytes({"../x.py": b"x"})), "p.zip")
        self.assertFalse(ScriptProjectRevision.objects.exists())
