"""Published Scripts: the administrator's `enabled` switch (REST and UI) and
what a Project deletion does to the NetBox Scripts it published."""

from __future__ import annotations

import sys

from core.models import Job, ObjectChange, ObjectType
from django.urls import reverse
from extras.models import Script, ScriptModule
from rest_framework import status
from utilities.testing import APITestCase

from netbox_script_projects.activation import activate_revision, deactivate_revision
from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.models import PublishedScript, ScriptFile, ScriptProject
from netbox_script_projects.runtime.loader import loaded_namespaces, namespace_for
from netbox_script_projects.storage.service import stage_upload

from .support import StorageTestMixin, archive_upload, zip_bytes
from .test_activation import validate_in_process
from .test_runtime import SOURCE

API = "plugins-api:netbox_script_projects-api"


class PublishedScriptTestMixin(StorageTestMixin):
    def setUp(self):
        super().setUp()
        self.project = self.active_project("Tags", "tags")

    def active_project(self, name, key):
        project = ScriptProject.objects.create(
            name=name, key=key, activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=project, path="scripts/tags.py")
        revision = stage_upload(project, archive_upload(zip_bytes(SOURCE)), "p.zip").revision
        revision = activate_revision(validate_in_process(revision))
        project.revision = revision
        return project

    def publication(self, class_name="MakeTag", project=None):
        return PublishedScript.objects.select_related("script").get(
            project=project or self.project, class_name=class_name
        )

    def executable(self, publication) -> bool:
        return Script.objects.get(pk=publication.script_id).is_executable


class EnabledThroughRESTTest(PublishedScriptTestMixin, APITestCase):
    def patch(self, publication, data):
        url = reverse(f"{API}:publishedscript-detail", args=[publication.pk])
        return self.client.patch(url, data, format="json", **self.header)

    def test_patch_enabled_needs_change_permission_and_withdraws_the_script(self):
        publication = self.publication()
        self.assertTrue(self.executable(publication))
        self.add_permissions("netbox_script_projects.view_publishedscript")
        listed = self.client.get(
            reverse(f"{API}:publishedscript-list"), {"project_id": self.project.pk}, **self.header
        )
        self.assertEqual(listed.status_code, status.HTTP_200_OK)
        self.assertEqual(
            sorted(r["class_name"] for r in listed.data["results"]), ["Hello", "MakeTag"]
        )
        self.assertEqual(self.patch(publication, {"enabled": False}).status_code, 403)
        self.assertTrue(PublishedScript.objects.get(pk=publication.pk).enabled)

        self.add_permissions("netbox_script_projects.change_publishedscript")
        response = self.patch(publication, {"enabled": False, "class_name": "Renamed"})
        self.assertEqual(response.status_code, status.HTTP_200_OK, response.data)
        self.assertFalse(response.data["enabled"])
        # Only `enabled` is the administrator's: the published identity stays.
        self.assertEqual(response.data["class_name"], "MakeTag")
        self.assertFalse(self.executable(publication))
        self.assertIsNone(Script.objects.get(pk=publication.script_id).python_class)
        change = ObjectChange.objects.get(
            changed_object_type=ObjectType.objects.get_for_model(PublishedScript),
            changed_object_id=publication.pk,
        )
        self.assertEqual(
            (change.prechange_data["enabled"], change.postchange_data["enabled"]), (True, False)
        )
        self.assertEqual(change.user, self.user)

        # Kept across retire and republish; enabling a retired Script does not run it.
        deactivate_revision(self.project.revision)
        self.assertFalse(self.executable(publication))
        self.assertEqual(self.patch(publication, {"enabled": True}).status_code, 200)
        self.assertFalse(self.executable(publication))
        self.assertEqual(self.patch(publication, {"enabled": False}).status_code, 200)
        activate_revision(self.project.revision)
        self.assertFalse(self.executable(publication))
        self.assertTrue(self.executable(self.publication("Hello")))
        self.assertEqual(self.patch(publication, {"enabled": True}).status_code, 200)
        self.assertTrue(self.executable(publication))
        self.assertEqual(
            Script.objects.get(pk=publication.script_id).python_class.__name__, "MakeTag"
        )

    def test_no_create_or_delete(self):
        self.add_permissions(
            "netbox_script_projects.add_publishedscript",
            "netbox_script_projects.delete_publishedscript",
        )
        publication = self.publication()
        detail = reverse(f"{API}:publishedscript-detail", args=[publication.pk])
        self.assertEqual(self.client.delete(detail, **self.header).status_code, 405)
        created = self.client.post(
            reverse(f"{API}:publishedscript-list"), {"enabled": True}, format="json", **self.header
        )
        self.assertEqual(created.status_code, 405)


class EnabledThroughUITest(PublishedScriptTestMixin, APITestCase):
    def test_edit_form_switches_enabled_with_change_permission_only(self):
        publication = self.publication()
        self.client.force_login(self.user)
        edit = reverse("plugins:netbox_script_projects:publishedscript_edit", args=[publication.pk])
        self.add_permissions("netbox_script_projects.view_publishedscript")
        tab = reverse(
            "plugins:netbox_script_projects:scriptproject_published_scripts", args=[self.project.pk]
        )
        self.add_permissions("netbox_script_projects.view_scriptproject")
        page = self.client.get(tab)
        self.assertContains(page, "MakeTag")
        self.assertNotContains(page, edit)
        self.assertEqual(self.client.get(edit).status_code, 403)
        self.assertEqual(self.client.post(edit, {}).status_code, 403)
        self.assertTrue(self.executable(publication))

        self.add_permissions("netbox_script_projects.change_publishedscript")
        self.assertContains(self.client.get(tab), edit)
        self.assertContains(self.client.get(edit), 'name="enabled"')
        # An unchecked box posts nothing: the Script is disabled.
        response = self.client.post(edit, {})
        self.assertEqual(response.status_code, 302, response.content[:2000])
        self.assertFalse(PublishedScript.objects.get(pk=publication.pk).enabled)
        self.assertFalse(self.executable(publication))
        detail = self.client.get(publication.get_absolute_url())
        self.assertContains(detail, "scripts.tags")
        response = self.client.post(edit, {"enabled": "on"})
        self.assertEqual(response.status_code, 302)
        self.assertTrue(self.executable(publication))


class ProjectDeletionTest(PublishedScriptTestMixin, APITestCase):
    def test_deleting_a_project_removes_its_modules_scripts_and_their_jobs(self):
        other = self.active_project("Other", "other")
        kept = self.publication(project=other)
        publication = self.publication()
        job = Job.objects.create(
            name="run", object_type=ObjectType.objects.get_for_model(Script),
            object_id=publication.script_id, job_id="00000000-0000-0000-0000-000000000001",
        )  # fmt: skip
        modules = set(
            Script.objects.filter(script_project_publication__project=self.project).values_list(
                "module_id", flat=True
            )
        )
        self.assertEqual(len(modules), 1)

        self.add_permissions("netbox_script_projects.delete_scriptproject")
        url = reverse(f"{API}:scriptproject-detail", args=[self.project.pk])
        response = self.client.delete(url, **self.header)
        self.assertEqual(response.status_code, status.HTTP_204_NO_CONTENT)
        self.assertFalse(ScriptModule.objects.filter(pk__in=modules).exists())
        self.assertFalse(Script.objects.filter(pk=publication.script_id).exists())
        self.assertFalse(Job.objects.filter(pk=job.pk).exists())
        # NetBox's Scripts list no longer offers them; the other project's stay.
        self.assertEqual(
            list(Script.objects.values_list("name", flat=True).order_by("name")),
            ["scripts.tags.Hello", "scripts.tags.MakeTag"],
        )
        self.assertTrue(self.executable(kept))

    def test_bulk_queryset_deletion_takes_the_same_path(self):
        ScriptProject.objects.filter(pk=self.project.pk).delete()
        self.assertFalse(Script.objects.exists())
        self.assertFalse(
            ScriptModule.objects.filter(file_path__startswith="_script_projects/").exists()
        )


class DeletedRevisionTest(PublishedScriptTestMixin, APITestCase):
    def test_deleting_the_active_revision_row_retires_its_scripts(self):
        from netbox_script_projects.models import ScriptProjectRevision

        publication = self.publication()
        self.assertTrue(self.executable(publication))
        ScriptProjectRevision.objects.filter(pk=self.project.revision.pk).delete()
        self.project.refresh_from_db()
        self.assertIsNone(self.project.active_revision)
        for class_name in ("MakeTag", "Hello"):
            retired = self.publication(class_name)
            self.assertIsNone(retired.revision_id)
            self.assertFalse(self.executable(retired))
        # NetBox's REST run action refuses a non-executable Script.
        self.add_permissions("extras.view_script", "extras.run_script")
        url = reverse("extras-api:script-detail", args=[publication.script_id])
        response = self.client.post(
            url, {"data": {}, "commit": False}, format="json", **self.header
        )
        self.assertGreaterEqual(response.status_code, 400, response.data)


class NetBoxScriptsPageTest(PublishedScriptTestMixin, APITestCase):
    """NetBox's own Scripts page: modules are titled by Project and managed only there."""

    def setUp(self):
        super().setUp()
        # An administrator: NetBox shows Edit and Delete on every module card.
        self.user.is_superuser = True
        self.user.save()
        self.client.force_login(self.user)
        self.module = Script.objects.get(pk=self.publication().script_id).module

    def test_published_modules_are_titled_by_their_project(self):
        page = self.client.get(reverse("extras:script_list"))
        self.assertContains(page, "Tags: scripts.tags")
        self.assertEqual(str(self.module), "Tags: scripts.tags")

    def test_deleting_a_published_module_there_is_refused_and_keeps_everything(self):
        publication = self.publication()
        job = Job.objects.create(
            name="run", object_type=ObjectType.objects.get_for_model(Script),
            object_id=publication.script_id, job_id="00000000-0000-0000-0000-000000000002",
        )  # fmt: skip
        PublishedScript.objects.filter(pk=publication.pk).update(enabled=False)
        url = reverse("extras:scriptmodule_delete", args=[self.module.pk])
        response = self.client.post(url, {"confirm": True}, follow=True)
        self.assertContains(response, "published by a Script Project")
        self.assertTrue(ScriptModule.objects.filter(pk=self.module.pk).exists())
        self.assertTrue(Script.objects.filter(pk=publication.script_id).exists())
        self.assertTrue(Job.objects.filter(pk=job.pk).exists())
        self.assertFalse(PublishedScript.objects.get(pk=publication.pk).enabled)
        self.assertTrue(self.executable(self.publication("Hello")))

    def test_editing_a_published_module_is_refused(self):
        from utilities.exceptions import AbortRequest

        module = ScriptModule.objects.get(pk=self.module.pk)
        module.file_path = "replaced.py"
        with self.assertRaisesMessage(AbortRequest, "published by a Script Project"):
            module.save()
        self.assertTrue(
            ScriptModule.objects.filter(
                pk=self.module.pk, file_path__startswith="_script_projects/"
            ).exists()
        )

    def test_a_web_process_drops_retired_revisions_from_memory(self):
        first = self.project.revision
        self.assertContains(self.client.get(reverse("extras:script_list")), "Tags: scripts.tags")
        self.assertIn(namespace_for(first), sys.modules)

        newer = {**SOURCE, "lib/naming.py": SOURCE["lib/naming.py"] + b"\nPADDING = 'x' * 10\n"}
        staged = stage_upload(self.project, archive_upload(zip_bytes(newer)), "p.zip").revision
        second = activate_revision(validate_in_process(staged))
        self.assertContains(self.client.get(reverse("extras:script_list")), "Tags: scripts.tags")
        self.assertIn(namespace_for(second), sys.modules)
        retired = [n for n in sys.modules if n.startswith(namespace_for(first))]
        self.assertEqual(retired, [])
        self.assertEqual(loaded_namespaces(), [namespace_for(second)])

    def test_loaded_revisions_are_bounded(self):
        from netbox_script_projects.runtime import loader

        revisions = [self.project.revision]
        for index in range(loader.MAX_LOADED_REVISIONS + 1):
            files = {
                **SOURCE,
                "lib/naming.py": SOURCE["lib/naming.py"] + f"\nN = {index}\n".encode(),
            }
            staged = stage_upload(self.project, archive_upload(zip_bytes(files)), "p.zip").revision
            revisions.append(validate_in_process(staged))
        for revision in revisions:
            loader.load_revision(revision)
        held = loaded_namespaces()
        self.assertEqual(len(held), loader.MAX_LOADED_REVISIONS)
        self.assertEqual(held[-1], namespace_for(revisions[-1]))
        self.assertNotIn(namespace_for(revisions[0]), sys.modules)

    def test_scripts_list_in_publication_order(self):
        ordered = {
            "scripts/ordered.py": b"""from extras.scripts import Script


class Alpha(Script):
    class Meta:
        name = "alpha-listed-second"

    def run(self, data, commit):
        pass


class Zulu(Script):
    class Meta:
        name = "zulu-listed-first"

    def run(self, data, commit):
        pass


script_order = (Zulu, Alpha)
"""
        }
        project = ScriptProject.objects.create(
            name="Ordered", key="ordered", activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=project, path="scripts/ordered.py")
        staged = stage_upload(project, archive_upload(zip_bytes(ordered)), "p.zip").revision
        activate_revision(validate_in_process(staged))
        page = self.client.get(reverse("extras:script_list")).content.decode()
        self.assertIn("zulu-listed-first", page)
        self.assertLess(page.index("zulu-listed-first"), page.index("alpha-listed-second"))

    def test_retired_modules_load_quietly(self):
        deactivate_revision(self.project.revision)
        with self.assertNoLogs("netbox.data_backends", level="ERROR"):
            page = self.client.get(reverse("extras:script_list"))
        self.assertHttpStatus(page, 200)
        self.assertFalse(self.executable(self.publication()))
