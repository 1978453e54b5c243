"""Activation and deactivation through REST: permissions, the status gate,
retiring the previous revision, change logging and event payloads."""

from __future__ import annotations

from core.choices import ObjectChangeActionChoices
from core.events import OBJECT_DELETED, OBJECT_UPDATED
from core.models import ObjectChange, ObjectType
from core.signals import update_object_types
from django.apps import apps
from django.urls import reverse
from django_rq import get_queue as real_rq_queue
from extras.choices import EventRuleActionChoices
from extras.models import EventRule, Script, Webhook
from rest_framework import status
from users.models import ObjectPermission
from utilities.testing import APITestCase

from netbox_script_projects.api import serializers
from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage.service import stage_upload
from netbox_script_projects.storage.store import file_key
from netbox_script_projects.validation import ValidationJob

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_runtime import SOURCE

API = "plugins-api:netbox_script_projects-api"
OTHER = b"from extras.scripts import Script\n\nclass Other(Script):\n    def run(self, data, commit):\n        pass\n"


def validate_in_process(revision):
    """Run the validation Job synchronously (for tests about what follows a verdict)."""
    ValidationJob.enqueue(instance=revision.project, immediate=True, revision_id=revision.pk)
    return ScriptProjectRevision.objects.get(pk=revision.pk)


class ActivationAPITest(StorageTestMixin, APITestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(
            name="Tags", key="tags", activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=self.project, path="scripts/tags.py")

    def staged(self, files=SOURCE):
        return stage_upload(self.project, archive_upload(zip_bytes(files)), "p.zip").revision

    def post(self, revision, action):
        url = reverse(f"{API}:scriptprojectrevision-{action}", args=[revision.pk])
        return self.client.post(url, format="json", **self.header)

    def grant(self, actions, model):
        permission = ObjectPermission.objects.create(
            name=f"{model.__name__}-{actions}", actions=actions
        )
        permission.object_types.add(ObjectType.objects.get_for_model(model))
        permission.users.add(self.user)

    def test_activation_needs_the_projects_activate_permission(self):
        revision = validate_in_process(self.staged())
        self.assertEqual(revision.status, Status.VALID)
        self.grant(["view"], ScriptProjectRevision)
        self.grant(["view", "change"], ScriptProject)
        self.assertEqual(self.post(revision, "activate").status_code, status.HTTP_403_FORBIDDEN)
        self.assertEqual(ScriptProjectRevision.objects.get(pk=revision.pk).status, Status.VALID)

        self.grant(["activate"], ScriptProject)
        response = self.post(revision, "activate")
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertEqual(response.data["status"]["value"], Status.ACTIVE)
        # Request-driven activation is change-logged.
        change = ObjectChange.objects.get(
            changed_object_id=revision.pk,
            changed_object_type=ObjectType.objects.get_for_model(ScriptProjectRevision),
        )
        self.assertEqual(change.action, ObjectChangeActionChoices.ACTION_UPDATE)
        self.assertEqual(change.prechange_data["status"], Status.VALID)
        self.assertEqual(change.postchange_data["status"], Status.ACTIVE)
        self.assertEqual(change.user, self.user)
        # The lease fields record internal ownership, as on the REST serializer.
        for data in (change.prechange_data, change.postchange_data):
            self.assertFalse({"validation_job", "validation_started"} & set(data))

    def test_status_gate_retire_previous_and_deactivate(self):
        self.grant(["view"], ScriptProjectRevision)
        self.grant(["view", "activate"], ScriptProject)
        materialized = self.staged()
        response = self.post(materialized, "activate")
        self.assertEqual(response.status_code, status.HTTP_409_CONFLICT, response.data)
        ScriptFile.objects.create(project=self.project, path="scripts/other.py")
        self.project.script_files.filter(path="scripts/tags.py").update(enabled=False)
        invalid = validate_in_process(self.staged({"scripts/other.py": b"x = (\n"}))
        self.assertEqual(invalid.status, Status.INVALID)
        self.assertEqual(self.post(invalid, "activate").status_code, status.HTTP_409_CONFLICT)
        self.assertEqual(self.post(invalid, "deactivate").status_code, status.HTTP_409_CONFLICT)

        self.project.script_files.update(enabled=True)
        first = validate_in_process(self.staged({**SOURCE, "scripts/other.py": OTHER}))
        self.project.script_files.filter(path="scripts/other.py").update(enabled=False)
        second = validate_in_process(self.staged({**SOURCE, "scripts/other.py": OTHER}))
        self.assertEqual((first.status, second.status), (Status.VALID, Status.VALID))

        self.assertEqual(self.post(first, "activate").status_code, status.HTTP_200_OK)
        other = Script.objects.get(name="scripts.other.Other")
        self.assertTrue(other.is_executable)
        # Explicit activation may use a frozen selection; the previous one retires.
        self.assertEqual(self.post(second, "activate").status_code, status.HTTP_200_OK)
        first.refresh_from_db()
        self.project.refresh_from_db()
        self.assertEqual(first.status, Status.RETIRED)
        self.assertEqual(self.project.active_revision_id, second.pk)
        other.refresh_from_db()
        self.assertFalse(other.is_executable)
        self.assertTrue(Script.objects.get(name="scripts.tags.MakeTag").is_executable)

        # A retired revision activates again after its stored source verifies.
        self.assertEqual(self.post(first, "activate").status_code, status.HTTP_200_OK)
        other.refresh_from_db()
        self.assertTrue(other.is_executable)
        first.refresh_from_db()
        self.assertEqual(self.post(first, "deactivate").status_code, status.HTTP_200_OK)
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
        self.assertFalse(Script.objects.filter(is_executable=True).exists())
        self.assertEqual(Script.objects.count(), 3)

    def test_published_scripts_load_only_verified_content(self):
        self.grant(["view"], ScriptProjectRevision)
        self.grant(["view", "activate"], ScriptProject)
        revision = validate_in_process(self.staged())
        self.assertEqual(self.post(revision, "activate").status_code, status.HTTP_200_OK)
        script = Script.objects.get(name="scripts.tags.MakeTag")
        self.assertEqual(script.python_class.name, "Make a tag")
        # The classes come from the plugin's namespace, not NetBox's scripts root.
        self.assertTrue(script.python_class.__module__.startswith("_nbsp_r"))
        stored = self.storage_root / file_key(
            self.project.storage_key, revision.digest, "lib/naming.py"
        )
        stored.write_bytes(stored.read_bytes().replace(b"project-", b"tamper-"))
        self.assertIsNone(Script.objects.get(pk=script.pk).python_class)

    def test_revisions_stay_read_only(self):
        self.grant(["view", "change", "delete", "activate"], ScriptProjectRevision)
        revision = self.staged()
        url = reverse(f"{API}:scriptprojectrevision-detail", args=[revision.pk])
        response = self.client.patch(url, {"status": "active"}, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_405_METHOD_NOT_ALLOWED)

    def webhook_jobs(self):
        """Watch the queue NetBox's event rules send webhooks through (real Redis)."""
        # ObjectType.features is stored at migrate time; the test database was
        # migrated from a template, so store what the code declares now: a
        # model that lost EventRulesMixin must make this test fail.
        update_object_types(sender=apps.get_app_config("netbox_script_projects"))
        webhook = Webhook.objects.create(name="hook", payload_url="http://127.0.0.1:9/")
        rule = EventRule.objects.create(
            name="revision events",
            event_types=[OBJECT_UPDATED, OBJECT_DELETED],
            action_type=EventRuleActionChoices.WEBHOOK,
            action_object_type=ObjectType.objects.get_for_model(Webhook),
            action_object_id=webhook.pk,
        )
        rule.object_types.add(ObjectType.objects.get_for_model(ScriptProjectRevision))
        queue = real_rq_queue("default")
        queue.empty()
        self.addCleanup(queue.empty)

        def sent():
            return [
                job.kwargs
                for job in queue.jobs
                if job.func_name == "extras.webhooks.send_webhook"
                and job.kwargs["object_type"].model == "scriptprojectrevision"
            ]

        return sent

    def assert_revision_payload(self, data, revision):
        # The revision serializer's shape, not Django's generic serialization.
        self.assertEqual(set(data), set(serializers.ScriptProjectRevisionSerializer.Meta.fields))
        self.assertEqual((data["id"], data["digest"]), (revision.pk, revision.digest))
        self.assertEqual(data["project"]["id"], self.project.pk)
        self.assertNotIn("manifest", data)

    def test_activation_fires_event_rules_with_the_revision_payload(self):
        revision = validate_in_process(self.staged())
        sent = self.webhook_jobs()
        self.grant(["view"], ScriptProjectRevision)
        self.grant(["view", "activate"], ScriptProject)
        with self.captureOnCommitCallbacks(execute=True):
            self.assertEqual(self.post(revision, "activate").status_code, status.HTTP_200_OK)
        [event] = sent()
        self.assertEqual(event["event_type"], OBJECT_UPDATED)
        self.assert_revision_payload(event["data"], revision)
        self.assertEqual(event["data"]["status"]["value"], Status.ACTIVE)
        self.assertEqual(event["snapshots"]["prechange"]["status"], Status.VALID)
        self.assertEqual(event["snapshots"]["postchange"]["status"], Status.ACTIVE)
        for snapshot in event["snapshots"].values():
            self.assertFalse({"validation_job", "validation_started"} & set(snapshot))

    def test_cascaded_revision_deletion_fires_event_rules_with_revision_payload(self):
        revision = self.staged()
        sent = self.webhook_jobs()
        self.add_permissions("netbox_script_projects.delete_scriptproject")
        url = reverse(f"{API}:scriptproject-detail", args=[self.project.pk])
        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.delete(url, **self.header)
        self.assertEqual(response.status_code, status.HTTP_204_NO_CONTENT)
        [event] = sent()
        self.assertEqual(event["event_type"], OBJECT_DELETED)
        self.assert_revision_payload(event["data"], revision)
        self.assertEqual(event["data"]["status"]["value"], Status.MATERIALIZED)
