"""Guards the spec names and no other test reached (REST, the validation Job, Data Source syncs).

- Refresh, validation and activation check the Script File snapshot before use; a failed
  check is revision corruption, never a content verdict, and the operation is refused.
- Refresh shares the Project lock with staging, activation and cleanup.
- Stored source is checked against its manifest after writing.
- Under Automatic if valid, the next reconciliation that resolves to a deactivated
  revision activates it again.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psycopg
from core.models import DataSource
from django.urls import reverse
from extras.models import Script
from rest_framework import status
from utilities.testing import APITestCase

from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage.locks import lock_key
from netbox_script_projects.storage.service import stage_upload

from .support import FaultyStorage, StorageTestMixin, archive_upload, zip_bytes
from .test_activation import validate_in_process
from .test_concurrency import _probe_params
from .test_runtime import SOURCE

API = "plugins-api:netbox_script_projects-api"
PERMISSIONS = (
    "netbox_script_projects.view_scriptproject",
    "netbox_script_projects.change_scriptproject",
    "netbox_script_projects.activate_scriptproject",
    "netbox_script_projects.add_scriptprojectrevision",
    "netbox_script_projects.view_scriptprojectrevision",
)


def misdigested(revision) -> dict:
    """The revision's snapshot naming another Script File id: well formed, every path
    acceptable, but no longer what the revision's script_file_digest was computed from."""
    entries = [
        {"id": entry["id"] + 1000, "path": entry["path"]}
        for entry in revision.script_file_snapshot["script_files"]
    ]
    return {"version": revision.script_file_snapshot["version"], "script_files": entries}


class SnapshotCheckTest(StorageTestMixin, APITestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(
            name="Tags", key="tags", activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=self.project, path="scripts/tags.py")
        self.add_permissions(*PERMISSIONS)

    def upload(self, files=SOURCE):
        url = reverse(f"{API}:scriptproject-upload", args=[self.project.pk])
        response = self.client.post(
            url, {"file": archive_upload(zip_bytes(files))}, format="multipart", **self.header
        )
        self.assertEqual(response.status_code, status.HTTP_201_CREATED, response.data)
        return ScriptProjectRevision.objects.get(pk=response.data["revision"]["id"])

    def corrupt_snapshot(self, revision):
        ScriptProjectRevision.objects.filter(pk=revision.pk).update(
            script_file_snapshot=misdigested(revision)
        )

    def test_validation_refuses_a_revision_whose_snapshot_fails_its_check(self):
        revision = self.upload()
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.corrupt_snapshot(revision)

        revision = validate_in_process(revision)
        # Corruption is not a content verdict: no valid/invalid, no discovery.
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.assertEqual(revision.last_validation_failure["code"], "revision_corrupt")
        self.assertEqual((revision.validation_errors, revision.discovered_scripts), ([], []))
        self.assertIsNone(ScriptFile.objects.get(project=self.project).discovered_revision_id)

    def test_activation_refuses_a_valid_revision_whose_snapshot_fails_its_check(self):
        revision = validate_in_process(self.upload())
        self.assertEqual(revision.status, Status.VALID)
        self.corrupt_snapshot(revision)

        url = reverse(f"{API}:scriptprojectrevision-activate", args=[revision.pk])
        response = self.client.post(url, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_409_CONFLICT, response.data)
        self.assertEqual(
            response.data["detail"], "The revision is corrupt; the operation was refused."
        )
        self.assertEqual(
            response.data["problems"], ["script file snapshot: digest does not match the revision"]
        )
        self.assertEqual(ScriptProjectRevision.objects.get(pk=revision.pk).status, Status.VALID)
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
        self.assertFalse(Script.objects.filter(name__startswith="scripts.tags").exists())


class RefreshLockTest(StorageTestMixin, APITestCase):
    limits = {"lock_timeout": 0.2}

    def test_refresh_waits_for_the_project_lock_and_writes_nothing_meanwhile(self):
        # Script File rows are inserted without save(): save() takes the transaction-level
        # Project lock, which this test's never-committed transaction would keep, and the
        # holder below could then never take the lock itself.
        project = ScriptProject.objects.create(name="Tags", key="tags")
        source = stage_upload(project, archive_upload(zip_bytes(SOURCE)), "p.zip").revision
        ScriptFile.objects.bulk_create([ScriptFile(project=project, path="scripts/tags.py")])
        self.add_permissions(*PERMISSIONS)
        url = reverse(f"{API}:scriptproject-refresh", args=[project.pk])
        body = {"revision": source.pk}

        with psycopg.connect(**_probe_params()) as holder:
            holder.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(project.storage_key))
            response = self.client.post(url, body, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_503_SERVICE_UNAVAILABLE, response.data)
        self.assertIn("busy", response.data["detail"])
        self.assertEqual(response["Retry-After"], "5")
        self.assertEqual(list(ScriptProjectRevision.objects.filter(project=project)), [source])

        # Once the lock is free, the same refresh creates the new selection's revision.
        response = self.client.post(url, body, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_201_CREATED, response.data)
        self.assertEqual(response.data["outcome"], "created")
        self.assertEqual(ScriptProjectRevision.objects.filter(project=project).count(), 2)


class PostWriteVerificationTest(StorageTestMixin, APITestCase):
    def test_an_upload_whose_stored_bytes_differ_stays_staging_and_resumes(self):
        project = ScriptProject.objects.create(
            name="Tags", key="tags", activation_policy=ActivationPolicyChoices.MANUAL
        )
        self.add_permissions(*PERMISSIONS)
        url = reverse(f"{API}:scriptproject-upload", args=[project.pk])

        FaultyStorage.corrupt_saves = True  # every save "succeeds" with other bytes
        response = self.client.post(
            url, {"file": archive_upload(zip_bytes(SOURCE))}, format="multipart", **self.header
        )
        self.assertEqual(response.status_code, status.HTTP_503_SERVICE_UNAVAILABLE, response.data)
        self.assertEqual(
            {(e["path"], e["code"]) for e in response.data["errors"]},
            {(path, "storage_write_failed") for path in SOURCE},
        )
        for error in response.data["errors"]:
            self.assertTrue(error["message"].startswith("Verification after write: "), error)
        revision = ScriptProjectRevision.objects.get(project=project)
        self.assertEqual(revision.status, Status.STAGING)  # never materialized, never validated

        # A healthy backend again: the next upload rewrites the mismatched files.
        FaultyStorage.corrupt_saves = False
        response = self.client.post(
            url, {"file": archive_upload(zip_bytes(SOURCE))}, format="multipart", **self.header
        )
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertEqual(response.data["outcome"], "resumed")
        self.assertEqual(response.data["revision"]["status"]["value"], Status.MATERIALIZED)


class ReactivationByReconciliationTest(StorageTestMixin, APITestCase):
    """Under Automatic if valid, deactivation lasts until the same source is accepted again:
    here by the next sync of the Data Source the Project mirrors."""

    def test_the_next_data_source_sync_activates_a_deactivated_revision_again(self):
        tree = Path(tempfile.mkdtemp(prefix="scr-reactivate-"))
        self.addCleanup(shutil.rmtree, tree, ignore_errors=True)
        for path, content in SOURCE.items():
            (tree / "netbox" / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / "netbox" / path).write_bytes(content)
        source = DataSource.objects.create(name="repo", type="local", source_url=f"file://{tree}")
        project = ScriptProject.objects.create(
            name="Mirror", key="mirror", data_source=source, data_source_path="netbox/"
        )
        self.assertEqual(project.activation_policy, ActivationPolicyChoices.AUTOMATIC)
        ScriptFile.objects.create(project=project, path="scripts/tags.py")
        self.add_permissions(*PERMISSIONS)

        source.sync()
        revision = validate_in_process(ScriptProjectRevision.objects.get(project=project))
        self.assertEqual(revision.status, Status.ACTIVE)
        url = reverse(f"{API}:scriptprojectrevision-deactivate", args=[revision.pk])
        response = self.client.post(url, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertFalse(Script.objects.get(name="scripts.tags.MakeTag").is_executable)

        source.refresh_from_db()
        source.sync()  # the same tree: it resolves to the deactivated revision
        self.assertEqual(list(ScriptProjectRevision.objects.filter(project=project)), [revision])
        revision.refresh_from_db()
        self.assertEqual(revision.status, Status.ACTIVE)
        project.refresh_from_db()
        self.assertEqual(project.active_revision_id, revision.pk)
        self.assertTrue(Script.objects.get(name="scripts.tags.MakeTag").is_executable)
