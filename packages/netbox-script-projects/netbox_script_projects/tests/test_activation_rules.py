"""Activation's own refusals and its use of the recorded discovery (REST).

Each case is a sentence of the spec: Script rows come from discovered_scripts
(shape-checked, never a fresh import), a revision without records publishes
nothing, stored source is verified again, the Project lock and the default
database are required.
"""

from __future__ import annotations

from unittest import mock

import psycopg
from django.db import router
from django.urls import reverse
from extras.models import Script
from rest_framework import status
from utilities.testing import APITestCase

from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage.locks import lock_key
from netbox_script_projects.storage.service import stage_upload
from netbox_script_projects.storage.store import file_key

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_activation import validate_in_process
from .test_concurrency import _probe_params
from .test_runtime import SOURCE

API = "plugins-api:netbox_script_projects-api"


class ActivationRulesTest(StorageTestMixin, APITestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(
            name="Tags", key="tags", activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=self.project, path="scripts/tags.py")
        self.add_permissions(
            "netbox_script_projects.view_scriptprojectrevision",
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.activate_scriptproject",
        )
        revision = stage_upload(self.project, archive_upload(zip_bytes(SOURCE)), "p.zip").revision
        self.revision = validate_in_process(revision)
        self.assertEqual(self.revision.status, Status.VALID)

    def activate(self, revision=None):
        revision = revision or self.revision
        url = reverse(f"{API}:scriptprojectrevision-activate", args=[revision.pk])
        return self.client.post(url, format="json", **self.header)

    def set_records(self, records, status=None):
        ScriptProjectRevision.objects.filter(pk=self.revision.pk).update(
            discovered_scripts=records, **({"status": status} if status else {})
        )

    def assert_unchanged(self, response, code):
        self.assertEqual(response.status_code, code, response.data)
        self.assertEqual(
            ScriptProjectRevision.objects.get(pk=self.revision.pk).status, Status.VALID
        )
        self.assertFalse(Script.objects.exists())
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)

    def test_script_rows_are_built_from_the_records_not_a_fresh_import(self):
        records = self.revision.discovered_scripts
        self.set_records([r for r in records if r["class_name"] == "Hello"])
        self.assertEqual(self.activate().status_code, status.HTTP_200_OK)
        # MakeTag is in the source, but not in the records: not published.
        self.assertEqual(
            list(Script.objects.values_list("name", flat=True)), ["scripts.tags.Hello"]
        )

    def test_records_failing_the_shape_check_refuse_activation(self):
        good = self.revision.discovered_scripts[0]
        for records in (
            {"not": "a list"},
            [{**good, "extra": 1}],
            [{**good, "class_name": "not an identifier"}],
            [good, good],
        ):
            with self.subTest(records=records):
                self.set_records(records)
                response = self.activate()
                self.assert_unchanged(response, status.HTTP_409_CONFLICT)
                self.assertIn("corrupt", response.data["detail"])

    def test_a_revision_without_records_publishes_nothing_on_reactivation(self):
        self.assertEqual(self.activate().status_code, status.HTTP_200_OK)
        self.assertEqual(Script.objects.filter(is_executable=True).count(), 2)
        # A retired revision from before discovery existed: no records.
        older = stage_upload(
            self.project, archive_upload(zip_bytes({**SOURCE, "lib/extra.py": b""})), "p.zip"
        ).revision
        ScriptProjectRevision.objects.filter(pk=older.pk).update(
            status=Status.RETIRED, discovered_scripts=[]
        )
        self.assertEqual(self.activate(older).status_code, status.HTTP_200_OK)
        self.assertFalse(Script.objects.filter(is_executable=True).exists())
        self.assertEqual(
            ScriptProjectRevision.objects.get(pk=self.revision.pk).status, Status.RETIRED
        )

    def test_tampered_stored_source_refuses_activation(self):
        stored = self.storage_root / file_key(
            self.project.storage_key, self.revision.digest, "scripts/tags.py"
        )
        stored.write_bytes(stored.read_bytes() + b"\n# changed\n")
        response = self.activate()
        self.assert_unchanged(response, status.HTTP_409_CONFLICT)
        # Reported, never repaired.
        self.assertTrue(stored.read_bytes().endswith(b"# changed\n"))

    def test_activation_refuses_rows_routed_off_the_default_database(self):
        real = router.db_for_write

        def branch_routing(model, **hints):
            return "branch_schema" if model is Script else real(model, **hints)

        with mock.patch.object(router, "db_for_write", side_effect=branch_routing):
            response = self.activate()
        self.assert_unchanged(response, status.HTTP_409_CONFLICT)
        self.assertIn("'default' database only", response.data["detail"])


class ActivationLockTest(StorageTestMixin, APITestCase):
    limits = {"lock_timeout": 0.2}

    def test_activation_waits_for_the_project_lock(self):
        # No Script File rows: saving one takes the transaction-level Project
        # lock, which this test's never-committed transaction would keep.
        project = ScriptProject.objects.create(name="Tags", key="tags")
        revision = stage_upload(project, archive_upload(zip_bytes(SOURCE)), "p.zip").revision
        ScriptProjectRevision.objects.filter(pk=revision.pk).update(status=Status.VALID)
        self.add_permissions(
            "netbox_script_projects.view_scriptprojectrevision",
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.activate_scriptproject",
        )
        url = reverse(f"{API}:scriptprojectrevision-activate", args=[revision.pk])
        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.post(url, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_503_SERVICE_UNAVAILABLE, response.data)
        self.assertIn("busy", response.data["detail"])
        self.assertEqual(ScriptProjectRevision.objects.get(pk=revision.pk).status, Status.VALID)
        project.refresh_from_db()
        self.assertIsNone(project.active_revision)


class ReactivationByRefreshTest(StorageTestMixin, APITestCase):
    """Under Automatic if valid, deactivation lasts until the same source is accepted again."""

    def test_refresh_resolving_to_a_deactivated_revision_activates_it_again(self):
        project = ScriptProject.objects.create(name="Auto", key="auto")
        ScriptFile.objects.create(project=project, path="scripts/tags.py")
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.activate_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
            "netbox_script_projects.view_scriptprojectrevision",
        )
        upload = reverse(f"{API}:scriptproject-upload", args=[project.pk])
        staged = self.client.post(
            upload, {"file": archive_upload(zip_bytes(SOURCE))}, format="multipart", **self.header
        )
        self.assertEqual(staged.data["activation"]["outcome"], "queued")
        revision = validate_in_process(
            ScriptProjectRevision.objects.get(pk=staged.data["revision"]["id"])
        )
        self.assertEqual(revision.status, Status.ACTIVE)

        deactivate = reverse(f"{API}:scriptprojectrevision-deactivate", args=[revision.pk])
        response = self.client.post(deactivate, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertFalse(Script.objects.get(name="scripts.tags.MakeTag").is_executable)

        refresh = reverse(f"{API}:scriptproject-refresh", args=[project.pk])
        response = self.client.post(refresh, {}, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertEqual(response.data["outcome"], "reused")
        self.assertEqual(response.data["activation"], {"outcome": "activated", "detail": None})
        self.assertEqual(response.data["revision"]["status"]["value"], Status.ACTIVE)
        project.refresh_from_db()
        self.assertEqual(project.active_revision_id, revision.pk)
        self.assertTrue(Script.objects.get(name="scripts.tags.MakeTag").is_executable)
