"""REST, GraphQL and UI surfaces of projects, script files and revisions."""

import json
from datetime import timedelta

from core.models import Job, ObjectChange
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework import status
from utilities.testing import APITestCase, TestCase

from netbox_script_projects.choices import RevisionStatusChoices
from netbox_script_projects.constants import VALIDATION_JOB_NAME, get_validation_timing
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision

from .support import FaultyStorage, StorageTestMixin, archive_upload, py_upload, zip_bytes

API = "plugins-api:netbox_script_projects-api"
HIDDEN_REVISION_FIELDS = {
    "manifest",
    "script_file_snapshot",
    "validation_job",
    "validation_started",
}


def make_revision(
    project, digest_char, snapshot_char="0", status=RevisionStatusChoices.MATERIALIZED
):
    return ScriptProjectRevision.objects.create(
        project=project,
        digest=digest_char * 64,
        script_file_digest=snapshot_char * 64,
        manifest={"version": 1, "files": []},
        script_file_snapshot={"version": 1, "script_files": []},
        status=status,
    )


class ScriptProjectAPITest(APITestCase):
    def test_create_update_and_filter_projects(self):
        self.add_permissions(
            "netbox_script_projects.add_scriptproject",
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.view_scriptproject",
        )
        url = reverse(f"{API}:scriptproject-list")
        forged = "00000000-0000-0000-0000-000000000000"
        response = self.client.post(
            url,
            {"name": "Inventory", "key": "inventory", "storage_key": forged},
            format="json",
            **self.header,
        )
        self.assertEqual(response.status_code, status.HTTP_201_CREATED, response.data)
        project = ScriptProject.objects.get(pk=response.data["id"])
        self.assertNotEqual(str(project.storage_key), forged)
        self.assertEqual(response.data["activation_policy"]["value"], "automatic")
        self.assertIsNone(response.data["active_revision"])

        detail = reverse(f"{API}:scriptproject-detail", args=[project.pk])
        response = self.client.patch(
            detail,
            {"activation_policy": "manual", "storage_key": forged},
            format="json",
            **self.header,
        )
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        project.refresh_from_db()
        self.assertEqual(project.activation_policy, "manual")
        self.assertNotEqual(str(project.storage_key), forged)

        ScriptProject.objects.create(name="Other", key="other")
        response = self.client.get(f"{url}?key=inventory", **self.header)
        self.assertEqual([p["key"] for p in response.data["results"]], ["inventory"])

    def test_a_bad_regular_expression_is_a_400_naming_the_filter(self):
        self.add_permissions(
            "netbox_script_projects.view_scriptproject", "netbox_script_projects.view_scriptfile"
        )
        ScriptProject.objects.create(name="Inventory", key="inventory")
        ScriptProject.objects.create(name="Other", key="other")
        url = reverse(f"{API}:scriptproject-list")
        response = self.client.get(f"{url}?key__regex=^inv(ent)?", **self.header)
        self.assertEqual([p["key"] for p in response.data["results"]], ["inventory"])
        for list_url, query in (
            (url, "key__regex=("),
            (url, "name__iregex=a&name__iregex=["),
            (reverse(f"{API}:scriptfile-list"), "path__regex=x)"),
        ):
            with self.subTest(query=query):
                response = self.client.get(f"{list_url}?{query}", **self.header)
                self.assertEqual(response.status_code, 400, response.content)
                field = query.split("=")[0]
                self.assertIn("Invalid regular expression", response.json()[field][0])

    def test_storage_key_never_changes(self):
        project = ScriptProject.objects.create(name="P", key="p")
        project = ScriptProject.objects.get(pk=project.pk)
        original = project.storage_key
        project.storage_key = ScriptProject().storage_key
        with self.assertRaises(ValidationError):
            project.save()
        project.refresh_from_db()
        self.assertEqual(project.storage_key, original)


class ScriptFileAPITest(APITestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.add_permissions(
            "netbox_script_projects.add_scriptfile",
            "netbox_script_projects.change_scriptfile",
            "netbox_script_projects.delete_scriptfile",
            "netbox_script_projects.view_scriptfile",
        )
        self.url = reverse(f"{API}:scriptfile-list")

    def post(self, path):
        return self.client.post(
            self.url, {"project": self.project.pk, "path": path}, format="json", **self.header
        )

    def test_declare_and_disable_a_script_file(self):
        response = self.post("scripts/report.py")
        self.assertEqual(response.status_code, status.HTTP_201_CREATED, response.data)
        self.assertEqual(response.data["discovery_status"]["value"], "pending")
        detail = reverse(f"{API}:scriptfile-detail", args=[response.data["id"]])
        response = self.client.patch(detail, {"enabled": False}, format="json", **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK)
        self.assertFalse(ScriptFile.objects.get().enabled)

    def test_bad_paths_are_rejected_naming_the_field(self):
        self.assertEqual(self.post("scripts/a.py").status_code, 201)
        for path in (
            "../x.py",
            "/abs.py",
            "notes.txt",
            "scripts//b.py",
            "SCRIPTS/a.py",
            "scripts/a/__init__.py",
        ):
            with self.subTest(path=path):
                response = self.post(path)
                self.assertEqual(response.status_code, status.HTTP_400_BAD_REQUEST, response.data)
                self.assertIn("path", response.data)
        self.assertEqual(ScriptFile.objects.count(), 1)

    def test_paths_that_cannot_import_as_modules_are_rejected_naming_the_field(self):
        # Activation names Scripts "<module>.<class>": such a declaration
        # could validate and then never be activated.
        for path in ("scripts/vm-report.py", "vm-scripts/report.py", "scripts/2fa.py"):
            with self.subTest(path=path):
                response = self.post(path)
                self.assertEqual(response.status_code, status.HTTP_400_BAD_REQUEST, response.data)
                self.assertIn("not a Python identifier", str(response.data["path"]))
        self.assertEqual(self.post("scripts/vm_report.py").status_code, 201)
        self.assertEqual(
            list(ScriptFile.objects.values_list("path", flat=True)), ["scripts/vm_report.py"]
        )

    def test_script_files_are_removed_only_by_project_deletion(self):
        script_file = ScriptFile.objects.create(project=self.project, path="a.py")
        detail = reverse(f"{API}:scriptfile-detail", args=[script_file.pk])
        response = self.client.delete(detail, **self.header)
        self.assertEqual(response.status_code, status.HTTP_405_METHOD_NOT_ALLOWED)
        self.assertTrue(ScriptFile.objects.filter(pk=script_file.pk).exists())


class ScriptProjectRevisionAPITest(APITestCase):
    def setUp(self):
        super().setUp()
        self.add_permissions("netbox_script_projects.view_scriptprojectrevision")
        self.alpha = ScriptProject.objects.create(name="Alpha", key="alpha")
        self.beta = ScriptProject.objects.create(name="Beta", key="beta")
        self.r1 = make_revision(self.alpha, "a", "1")
        self.r2 = make_revision(self.alpha, "a", "2", status=RevisionStatusChoices.VALID)
        self.r3 = make_revision(self.beta, "b", "1")
        self.url = reverse(f"{API}:scriptprojectrevision-list")

    def ids(self, query):
        response = self.client.get(f"{self.url}?{query}", **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        return sorted(r["id"] for r in response.data["results"])

    def test_filters(self):
        self.assertEqual(self.ids(f"project_id={self.alpha.pk}"), [self.r1.pk, self.r2.pk])
        self.assertEqual(self.ids("project=beta"), [self.r3.pk])
        self.assertEqual(self.ids("status=valid"), [self.r2.pk])
        self.assertEqual(self.ids(f"digest={'b' * 64}"), [self.r3.pk])
        self.assertEqual(self.ids(f"script_file_digest={'1' * 64}"), [self.r1.pk, self.r3.pk])

    def test_read_only_and_documents_not_exposed(self):
        detail = reverse(f"{API}:scriptprojectrevision-detail", args=[self.r1.pk])
        response = self.client.get(detail, **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK)
        self.assertFalse(HIDDEN_REVISION_FIELDS & set(response.data))
        self.assertEqual(response.data["digest"], "a" * 64)
        self.add_permissions(
            "netbox_script_projects.add_scriptprojectrevision",
            "netbox_script_projects.change_scriptprojectrevision",
            "netbox_script_projects.delete_scriptprojectrevision",
        )
        self.assertEqual(
            self.client.post(
                self.url, {"project": self.alpha.pk}, format="json", **self.header
            ).status_code,
            405,
        )
        self.assertEqual(
            self.client.patch(
                detail, {"status": "active"}, format="json", **self.header
            ).status_code,
            405,
        )
        self.assertEqual(self.client.delete(detail, **self.header).status_code, 405)

    @override_settings(LOGIN_REQUIRED=True)
    def test_graphql_filters_and_hidden_fields(self):
        url = reverse("graphql")
        query = (
            '{ script_project_revision_list(filters: {project: {key: {exact: "alpha"}}, status: {exact: STATUS_VALID}})'
            " { id digest script_file_digest status } }"
        )
        response = self.client.post(url, data={"query": query}, format="json", **self.header)
        self.assertEqual(response.status_code, 200)
        data = json.loads(response.content)
        self.assertNotIn("errors", data, data)
        self.assertEqual(
            [int(r["id"]) for r in data["data"]["script_project_revision_list"]], [self.r2.pk]
        )

        query = f'{{ script_project_revision_list(filters: {{digest: {{exact: "{"b" * 64}"}}}}) {{ id }} }}'
        data = json.loads(
            self.client.post(url, data={"query": query}, format="json", **self.header).content
        )
        self.assertEqual(
            [int(r["id"]) for r in data["data"]["script_project_revision_list"]], [self.r3.pk]
        )

        for field in sorted(HIDDEN_REVISION_FIELDS):
            with self.subTest(field=field):
                query = f"{{ script_project_revision_list {{ id {field} }} }}"
                data = json.loads(
                    self.client.post(
                        url, data={"query": query}, format="json", **self.header
                    ).content
                )
                self.assertIn("errors", data)


class UIViewsTest(TestCase):
    def setUp(self):
        super().setUp()
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.view_scriptfile",
            "netbox_script_projects.view_scriptprojectrevision",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.script_file = ScriptFile.objects.create(project=self.project, path="scripts/a.py")
        self.revision = make_revision(self.project, "c")

    def test_pages_render(self):
        pages = [
            reverse("plugins:netbox_script_projects:scriptproject_list"),
            self.project.get_absolute_url(),
            reverse(
                "plugins:netbox_script_projects:scriptproject_revisions", args=[self.project.pk]
            ),
            reverse(
                "plugins:netbox_script_projects:scriptproject_scriptfiles", args=[self.project.pk]
            ),
            reverse("plugins:netbox_script_projects:scriptproject_upload", args=[self.project.pk]),
            reverse("plugins:netbox_script_projects:scriptfile_list"),
            self.script_file.get_absolute_url(),
            self.revision.get_absolute_url(),
        ]
        for url in pages:
            with self.subTest(url=url):
                self.assertHttpStatus(self.client.get(url), 200)

    def test_revision_page_shows_the_last_validation_failure(self):
        ScriptProjectRevision.objects.filter(pk=self.revision.pk).update(
            status="materialized",
            last_validation_failure={
                "code": "worker_failed",
                "message": "worker-failure-reason-shown",
                "job": 7,
            },
        )
        response = self.client.get(self.revision.get_absolute_url())
        self.assertHttpStatus(response, 200)
        self.assertContains(response, "Last validation failure")
        self.assertContains(response, "worker-failure-reason-shown")

    def test_revisions_have_no_standalone_list_edit_delete_or_search(self):
        from django.urls import NoReverseMatch
        from netbox.registry import registry

        for view, args in (("list", []), ("add", []), ("edit", [1]), ("delete", [1]),
                           ("bulk_delete", []), ("bulk_edit", [])):  # fmt: skip
            with self.subTest(view=view), self.assertRaises(NoReverseMatch):
                reverse(f"plugins:netbox_script_projects:scriptprojectrevision_{view}", args=args)
        self.assertNotIn("netbox_script_projects.scriptprojectrevision", registry["search"])


class UIUploadTest(StorageTestMixin, TestCase):
    def setUp(self):
        super().setUp()
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.url = reverse(
            "plugins:netbox_script_projects:scriptproject_upload", args=[self.project.pk]
        )

    def test_upload_form_stages_a_revision(self):
        response = self.client.post(self.url, {"file": py_upload("report.py")})
        revision = ScriptProjectRevision.objects.get(project=self.project)
        self.assertRedirects(response, revision.get_absolute_url(), fetch_redirect_response=False)
        self.assertEqual(revision.status, RevisionStatusChoices.MATERIALIZED)
        self.assertEqual([f["path"] for f in revision.manifest["files"]], ["report.py"])
        # Request-driven staging is change-logged, without the stored documents.
        change = ObjectChange.objects.get(changed_object_id=revision.pk, action="create")
        self.assertNotIn("manifest", change.postchange_data)
        self.assertNotIn("script_file_snapshot", change.postchange_data)

    def test_upload_form_shows_storage_errors(self):
        response = self.client.post(
            self.url, {"file": archive_upload(zip_bytes({"../x.py": b"x"}))}
        )
        self.assertHttpStatus(response, 200)
        self.assertContains(response, "path_traversal")
        self.assertEqual(self.stored_files(), [])

    def test_upload_requires_change_on_the_project(self):
        view_only = ScriptProject.objects.create(name="view-only-project", key="view-only")
        hidden = ScriptProject.objects.create(name="secret-hidden-project", key="secret-hidden")
        self.user.object_permissions.filter(actions__contains=["change"]).update(
            constraints={"pk": self.project.pk}
        )
        self.user.object_permissions.filter(actions__contains=["view"]).update(
            constraints={"pk__in": [self.project.pk, view_only.pk]}
        )
        for project, expected in ((view_only, 403), (hidden, 404)):
            with self.subTest(project=project.key):
                url = reverse(
                    "plugins:netbox_script_projects:scriptproject_upload", args=[project.pk]
                )
                self.assertHttpStatus(self.client.get(url), expected)
                response = self.client.post(url, {"file": py_upload()})
                self.assertHttpStatus(response, expected)
                self.assertNotContains(response, "secret-hidden-project", status_code=expected)
                self.assertFalse(ScriptProjectRevision.objects.filter(project=project).exists())


class SourceActionsAPITest(StorageTestMixin, APITestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")
        self.add_permissions(
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
            "netbox_script_projects.view_scriptprojectrevision",
        )

    def action(self, name, data, format="multipart"):
        url = reverse(f"{API}:scriptproject-{name}", args=[self.project.pk])
        return self.client.post(url, data, format=format, **self.header)

    def test_upload_and_refresh_outcomes(self):
        created = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual((created.status_code, created.data["outcome"]), (201, "created"))
        reused = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual((reused.status_code, reused.data["outcome"]), (200, "reused"))
        self.assertEqual(reused.data["revision"]["id"], created.data["revision"]["id"])

        ScriptFile.objects.create(project=self.project, path="report.py")
        refreshed = self.action("refresh", {}, format="json")
        self.assertEqual((refreshed.status_code, refreshed.data["outcome"]), (201, "created"))
        self.assertEqual(refreshed.data["revision"]["digest"], created.data["revision"]["digest"])
        self.assertNotEqual(
            refreshed.data["revision"]["script_file_digest"],
            created.data["revision"]["script_file_digest"],
        )
        again = self.action("refresh", {"revision": created.data["revision"]["id"]}, format="json")
        self.assertEqual((again.status_code, again.data["outcome"]), (200, "reused"))
        missing = self.action("refresh", {"revision": 999999}, format="json")
        self.assertEqual(missing.status_code, 400)
        self.assertIn("revision", missing.data)

    def test_a_failed_automatic_activation_does_not_fail_the_upload(self):
        created = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(created.status_code, 201, created.data)
        self.assertEqual(created.data["activation"], {"outcome": "queued", "detail": None})
        # A verdict whose discovery records were damaged afterwards: activating
        # it is refused as corruption, but the upload itself succeeded.
        ScriptProjectRevision.objects.filter(pk=created.data["revision"]["id"]).update(
            status=RevisionStatusChoices.VALID, discovered_scripts=[{"module": "damaged-record"}]
        )
        reused = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(reused.status_code, 200, reused.data)
        self.assertEqual(reused.data["outcome"], "reused")
        self.assertEqual(reused.data["revision"]["id"], created.data["revision"]["id"])
        self.assertEqual(reused.data["revision"]["status"]["value"], "valid")
        self.assertEqual(reused.data["activation"]["outcome"], "failed")
        self.assertIn("corrupt", reused.data["activation"]["detail"])
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)

    def test_a_waiting_validation_job_older_than_the_lease_no_longer_covers_the_revision(self):
        created = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(created.data["activation"]["outcome"], "queued")
        again = self.action("upload", {"file": py_upload("report.py")})
        # A Job that has not started yet covers the revision.
        self.assertEqual(again.data["activation"]["outcome"], "none")
        waiting = Job.objects.filter(name=VALIDATION_JOB_NAME, status="pending")
        self.assertEqual(waiting.count(), 1)
        # Its RQ submission was lost (Redis down at commit): it never starts.
        lease = get_validation_timing().lease
        waiting.update(created=timezone.now() - timedelta(seconds=lease + 60))
        retried = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(retried.status_code, 200, retried.data)
        self.assertEqual(retried.data["activation"]["outcome"], "queued")
        self.assertEqual(waiting.count(), 2)

    def test_storage_failures_map_to_responses(self):
        FaultyStorage.saves_before_failure = 0
        failed = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(failed.status_code, 503)
        self.assertEqual([e["code"] for e in failed.data["errors"]], ["storage_write_failed"])
        self.assertEqual(failed.data["revision"]["status"]["value"], "staging")

        FaultyStorage.reset()
        resumed = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual((resumed.status_code, resumed.data["outcome"]), (200, "resumed"))

        revision = ScriptProjectRevision.objects.get(pk=resumed.data["revision"]["id"])
        (self.storage_root / revision.storage_prefix / "report.py").write_bytes(
            b"tampered = True\n"
        )
        mismatch = self.action("upload", {"file": py_upload("report.py")})
        self.assertEqual(mismatch.status_code, 409)
        self.assertEqual(mismatch.data["findings"][0]["path"], "report.py")

    def test_upload_needs_change_permission_on_the_project(self):
        self.user.object_permissions.all().delete()
        self.add_permissions("netbox_script_projects.add_scriptprojectrevision")
        self.assertEqual(self.action("upload", {"file": py_upload()}).status_code, 404)
        self.assertFalse(ScriptProjectRevision.objects.exists())

    def test_a_view_only_user_is_refused_not_told_the_project_is_missing(self):
        self.user.object_permissions.all().delete()
        self.add_permissions(
            "netbox_script_projects.view_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        for name in ("upload", "refresh"):
            with self.subTest(action=name):
                data = {"file": py_upload()} if name == "upload" else {}
                response = self.action(name, data)
                self.assertEqual(response.status_code, 403, response.data)
                self.assertIn("not permitted", response.data["detail"])
        self.assertFalse(ScriptProjectRevision.objects.exists())

    @override_settings(LOGIN_REQUIRED=True)
    def test_graphql_project_tree(self):
        self.add_permissions(
            "netbox_script_projects.view_scriptproject", "netbox_script_projects.view_scriptfile"
        )
        ScriptFile.objects.create(project=self.project, path="a.py")
        make_revision(self.project, "d")
        query = "{ script_project_list { key storage_key script_files { path } revisions { digest status } } }"
        data = json.loads(
            self.client.post(
                reverse("graphql"), data={"query": query}, format="json", **self.header
            ).content
        )
        self.assertNotIn("errors", data, data)
        project = data["data"]["script_project_list"][0]
        self.assertEqual(project["script_files"], [{"path": "a.py"}])
        self.assertEqual(project["revisions"][0]["digest"], "d" * 64)
