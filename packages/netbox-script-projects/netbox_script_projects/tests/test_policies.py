"""Activation policies through REST uploads, deactivation and the queued Jobs.

The queued validation Jobs run in-process here (their order against the
deactivation is the subject); test_runtime.py runs them in real workers.
"""

from __future__ import annotations

from core.choices import JobStatusChoices
from core.models import Job
from django.urls import reverse
from utilities.testing import APITestCase

from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.constants import VALIDATION_JOB_NAME
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.validation import ValidationJob

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_runtime import SOURCE

API = "plugins-api:netbox_script_projects-api"
NEWER = {**SOURCE, "lib/naming.py": SOURCE["lib/naming.py"] + b"# newer\n"}
NEWEST = {**SOURCE, "lib/naming.py": SOURCE["lib/naming.py"] + b"# newest\n"}


class ActivationPolicyTest(StorageTestMixin, APITestCase):
    def setUp(self):
        super().setUp()
        self.user.is_superuser = True
        self.user.save()
        self.project = ScriptProject.objects.create(name="Tags", key="tags")
        ScriptFile.objects.create(project=self.project, path="scripts/tags.py")

    def upload(self, files):
        url = reverse(f"{API}:scriptproject-upload", args=[self.project.pk])
        response = self.client.post(
            url, {"file": archive_upload(zip_bytes(files))}, format="multipart", **self.header
        )
        self.assertIn(response.status_code, (200, 201), response.data)
        return ScriptProjectRevision.objects.get(pk=response.data["revision"]["id"])

    def deactivate(self, revision):
        url = reverse(f"{API}:scriptprojectrevision-deactivate", args=[revision.pk])
        response = self.client.post(url, format="json", **self.header)
        self.assertEqual(response.status_code, 200, response.data)

    def run_queued_validation(self, revision):
        [job] = Job.objects.filter(
            name=VALIDATION_JOB_NAME,
            status=JobStatusChoices.STATUS_PENDING,
            data__revision=revision.pk,
        )
        ValidationJob.handle(job)
        return ScriptProjectRevision.objects.get(pk=revision.pk)

    def status_of(self, revision):
        return ScriptProjectRevision.objects.get(pk=revision.pk).status

    def test_automatic_if_valid_then_manual(self):
        first = self.run_queued_validation(self.upload(SOURCE))
        self.assertEqual(first.status, Status.ACTIVE)

        # A validation queued before a deactivation still activates its revision.
        second = self.upload(NEWER)
        self.assertEqual(second.status, Status.MATERIALIZED)
        self.deactivate(first)
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
        self.assertEqual(self.run_queued_validation(second).status, Status.ACTIVE)
        self.assertEqual(self.status_of(first), Status.RETIRED)

        # Deactivation lasts until the same source is accepted again.
        self.deactivate(second)
        self.assertEqual(self.upload(NEWER).pk, second.pk)
        self.assertEqual(self.status_of(second), Status.ACTIVE)

        # Manual: nothing activates by itself, neither a re-upload nor a verdict.
        url = reverse(f"{API}:scriptproject-detail", args=[self.project.pk])
        response = self.client.patch(
            url, {"activation_policy": ActivationPolicyChoices.MANUAL}, format="json", **self.header
        )
        self.assertEqual(response.status_code, 200, response.data)
        self.deactivate(second)
        self.upload(NEWER)
        self.assertEqual(self.status_of(second), Status.RETIRED)
        third = self.run_queued_validation(self.upload(NEWEST))
        self.assertEqual(third.status, Status.VALID)
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
