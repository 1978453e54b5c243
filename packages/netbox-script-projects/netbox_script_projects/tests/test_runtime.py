"""Upload -> validation Job -> activation -> NetBox runs the published Scripts.

Jobs run in real RQ worker processes against committed data.
"""

from __future__ import annotations

from core.choices import JobStatusChoices
from core.models import Job
from django.contrib.auth import get_user_model
from django.test import TransactionTestCase
from django.urls import reverse
from extras.models import Script, Tag
from proxbox_processes import wait_until
from users.constants import TOKEN_PREFIX
from users.models import Token

from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.constants import VALIDATION_JOB_NAME
from netbox_script_projects.models import (
    PublishedScript,
    ScriptFile,
    ScriptProject,
    ScriptProjectRevision,
)

from .support import archive_upload, zip_bytes
from .workers import RealWorkerMixin

API = "plugins-api:netbox_script_projects-api"

TAG_SCRIPT = b"""
from extras.scripts import Script, StringVar

from ..lib.naming import tag_name


class MakeTag(Script):
    class Meta:
        name = "Make a tag"
        description = "Creates one tag"
        commit_default = False

    slug = StringVar()

    def run(self, data, commit):
        from extras.models import Tag

        Tag.objects.create(name=tag_name(data["slug"]), slug=data["slug"])
        self.log_success(f"made {data['slug']}")
        return "done " + data["slug"]


class Hello(Script):
    def run(self, data, commit):
        self.log_info("hello from a project")
"""
NAMING = b"def tag_name(slug):\n    return 'project-' + slug\n"
SOURCE = {"scripts/tags.py": TAG_SCRIPT, "lib/naming.py": NAMING, "lib/__init__.py": b""}


class RuntimeTestMixin(RealWorkerMixin):
    def setUp(self):
        super().setUp()
        self.user = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")

        self.token = Token.objects.create(user=self.user)
        self.header = {
            "HTTP_AUTHORIZATION": f"Bearer {TOKEN_PREFIX}{self.token.key}.{self.token.token}"
        }
        self.project = ScriptProject.objects.create(name="Tags", key="tags")
        self.script_file = ScriptFile.objects.create(project=self.project, path="scripts/tags.py")

    def upload(self, files=SOURCE, project=None):
        project = project or self.project
        url = reverse(f"{API}:scriptproject-upload", args=[project.pk])
        return self.client.post(url, {"file": archive_upload(zip_bytes(files))}, **self.header)

    def revision_action(self, revision, action):
        url = reverse(f"{API}:scriptprojectrevision-{action}", args=[revision.pk])
        return self.client.post(url, content_type="application/json", **self.header)

    def run_script(self, script, data, commit):
        url = reverse("extras-api:script-detail", args=[script.pk])
        response = self.client.post(
            url, {"data": data, "commit": commit}, content_type="application/json", **self.header
        )
        self.assertEqual(response.status_code, 200, response.content)
        job = Job.objects.filter(object_id=script.pk).order_by("-pk").first()
        return wait_until(
            lambda: Job.objects.filter(
                pk=job.pk, status__in=JobStatusChoices.TERMINAL_STATE_CHOICES
            ).first(),
            60,
            "the script Job to finish",
            interval=0.2,
        )

    def wait_for_live_worker(self):
        from utilities.rqworker import any_workers_for_queue

        self.start_worker()
        wait_until(
            lambda: any_workers_for_queue("default"), 60, "the RQ worker to register", interval=0.2
        )


class UploadValidateActivateRunTest(RuntimeTestMixin, TransactionTestCase):
    def test_upload_validates_activates_runs_deactivates_and_republishes(self):
        response = self.upload()
        self.assertEqual(response.status_code, 201, response.content)
        revision = ScriptProjectRevision.objects.get(pk=response.json()["revision"]["id"])
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.assertEqual(Job.objects.filter(name=VALIDATION_JOB_NAME).count(), 1)

        self.drain_queue()

        revision.refresh_from_db()
        self.project.refresh_from_db()
        self.assertEqual(revision.status, Status.ACTIVE, revision.last_validation_failure)
        self.assertEqual(self.project.active_revision, revision)
        self.assertEqual(
            [(s["module"], s["class_name"], s["script_file"]) for s in revision.discovered_scripts],
            [
                ("scripts.tags", "Hello", "scripts/tags.py"),
                ("scripts.tags", "MakeTag", "scripts/tags.py"),
            ],
        )
        make_tag = next(s for s in revision.discovered_scripts if s["class_name"] == "MakeTag")
        self.assertEqual(make_tag["name"], "Make a tag")
        self.assertEqual(make_tag["description"], "Creates one tag")
        self.assertFalse(make_tag["defaults"]["commit_default"])
        # The verdict keeps its lease fields as provenance.
        self.assertIsNotNone(revision.validation_job_id)
        self.assertIsNotNone(revision.validation_started)
        self.script_file.refresh_from_db()
        self.assertEqual(self.script_file.discovery_status, "discovered")
        self.assertEqual(self.script_file.discovered_revision, revision)

        script = Script.objects.get(name="scripts.tags.MakeTag")
        self.assertTrue(script.is_executable)
        # NetBox's Scripts list shows it.
        self.client.force_login(self.user)
        listing = self.client.get(reverse("extras:script_list"))
        self.client.logout()
        self.assertContains(listing, "Make a tag")

        self.wait_for_live_worker()
        dry_run = self.run_script(script, {"slug": "dry"}, commit=False)
        self.assertEqual(dry_run.status, JobStatusChoices.STATUS_COMPLETED, dry_run.data)
        self.assertFalse(Tag.objects.filter(slug="dry").exists())
        self.assertIn("made dry", str(dry_run.data["log"]))

        committed = self.run_script(script, {"slug": "real"}, commit=True)
        self.assertEqual(committed.status, JobStatusChoices.STATUS_COMPLETED, committed.data)
        self.assertEqual(Tag.objects.get(slug="real").name, "project-real")
        self.assertEqual(committed.data["output"], "done real")

        # NetBox's own run form in the UI, dry-run (commit unchecked) and commit.
        self.client.force_login(self.user)
        form_url = reverse("extras:script", kwargs={"pk": script.pk})
        self.assertContains(self.client.get(form_url), 'name="slug"')
        for slug, commit in (("ui-dry", False), ("ui-real", True)):
            data = {"slug": slug, **({"_commit": "on"} if commit else {})}
            response = self.client.post(form_url, data)
            self.assertEqual(response.status_code, 302, response.content[:2000])
            job = Job.objects.filter(object_id=script.pk).order_by("-pk").first()
            self.assertIn(f"/{job.pk}/", response["Location"])
            finished = wait_until(
                lambda job=job: Job.objects.filter(
                    pk=job.pk, status__in=JobStatusChoices.TERMINAL_STATE_CHOICES
                ).first(),
                60,
                "the UI-run Job to finish",
                interval=0.2,
            )
            self.assertEqual(finished.status, JobStatusChoices.STATUS_COMPLETED, finished.data)
            self.assertIn(f"made {slug}", str(finished.data["log"]))
            self.assertEqual(Tag.objects.filter(slug=slug).exists(), commit)
        self.client.logout()

        # Deactivate: Scripts withdrawn, history kept.
        response = self.revision_action(revision, "deactivate")
        self.assertEqual(response.status_code, 200, response.content)
        revision.refresh_from_db()
        self.project.refresh_from_db()
        self.assertEqual(revision.status, Status.RETIRED)
        self.assertIsNone(self.project.active_revision)
        script.refresh_from_db()
        self.assertFalse(script.is_executable)
        self.assertEqual(script.jobs.count(), 4)
        refused = self.client.post(
            reverse("extras-api:script-detail", args=[script.pk]),
            {"data": {"slug": "late"}, "commit": True},
            content_type="application/json",
            **self.header,
        )
        self.assertEqual(refused.status_code, 400, refused.content)

        # Automatic if valid: the same source accepted again activates again,
        # reusing the Script rows with their history and enabled settings.
        publication = PublishedScript.objects.get(script__name="scripts.tags.Hello")
        publication.enabled = False
        publication.save()
        response = self.upload()
        self.assertEqual(response.status_code, 200, response.content)
        revision.refresh_from_db()
        self.assertEqual(revision.status, Status.ACTIVE)
        republished = Script.objects.get(name="scripts.tags.MakeTag")
        self.assertEqual(republished.pk, script.pk)
        self.assertTrue(republished.is_executable)
        self.assertEqual(republished.jobs.count(), 4)
        self.assertFalse(Script.objects.get(name="scripts.tags.Hello").is_executable)
