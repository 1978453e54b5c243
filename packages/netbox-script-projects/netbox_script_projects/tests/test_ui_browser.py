"""The Revisions tab and its confirmation pages, and NetBox's own Scripts page, in
headless Chromium.

Debian's chromium (/usr/bin/chromium) driven by Playwright; no browser
download. The test is skipped where that browser is not installed, except under
CI (`CI` set), where a missing browser is a failure: .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from core.models import ObjectType
from django.contrib.auth import get_user_model
from django.contrib.staticfiles.testing import StaticLiveServerTestCase
from django.test import Client, override_settings
from extras.models import ScriptModule
from users.models import ObjectPermission

from netbox_script_projects.activation import activate_revision
from netbox_script_projects.choices import ActivationPolicyChoices
from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.storage.service import stage_upload
from proxbox_devstack.browser import launch, requires_chromium

from .support import archive_upload, zip_bytes
from .test_activation import validate_in_process
from .test_runtime import SOURCE
from .workers import RealWorkerMixin

pytestmark = requires_chromium()


def grant(user, actions, model):
    permission = ObjectPermission.objects.create(name=f"{user}-{model.__name__}", actions=actions)
    permission.object_types.add(ObjectType.objects.get_for_model(model))
    permission.users.add(user)


class ScriptProjectsBrowserTest(RealWorkerMixin, StaticLiveServerTestCase):
    host = "127.0.0.1"

    @classmethod
    def setUpClass(cls):
        # Playwright's sync API runs an event loop in this thread; the ORM
        # calls the test makes between page actions are still synchronous.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        super().setUpClass()
        from playwright.sync_api import sync_playwright

        cls.playwright = sync_playwright().start()
        cls.browser = launch(cls.playwright)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.playwright.stop()
        super().tearDownClass()
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)

    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(
            name="Tags", key="tags", activation_policy=ActivationPolicyChoices.MANUAL
        )
        ScriptFile.objects.create(project=self.project, path="scripts/tags.py")
        result = stage_upload(self.project, archive_upload(zip_bytes(SOURCE)), "p.zip")
        # The verdict is this test's precondition, not its subject: validate in-process.
        self.revision = validate_in_process(result.revision)
        self.assertEqual(self.revision.status, Status.VALID)

    def page_for(self, user):
        client = Client()
        client.force_login(user)
        context = self.browser.new_context(base_url=self.live_server_url)
        context.add_cookies(
            [
                {
                    "name": "sessionid",
                    "value": client.cookies["sessionid"].value,
                    "url": self.live_server_url,
                }
            ]
        )
        self.addCleanup(context.close)
        return context.new_page()

    def tab_url(self):
        return f"/plugins/script-projects/projects/{self.project.pk}/revisions/"

    def detail_url(self):
        return f"/plugins/script-projects/revisions/{self.revision.pk}/"

    def test_activate_and_deactivate_through_confirmation_pages(self):
        admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
        page = self.page_for(admin)
        page.goto(self.tab_url())
        # A table without bulk actions: no selection checkboxes.
        assert page.locator("input[name=pk]").count() == 0
        assert page.locator("a[data-action=activate]").count() == 1
        # The revision's own page offers the same action and confirmation page.
        page.goto(self.detail_url())
        assert page.locator("a[data-action=deactivate]").count() == 0
        page.locator("a[data-action=activate]").click()
        page.wait_for_url(f"**/revisions/{self.revision.pk}/activate/")
        form = page.locator("form:has(button[name=_confirm])")
        assert form.count() == 1
        # The confirmation form is its own form, not the table's bulk form.
        assert form.locator("table").count() == 0
        form.locator("button[name=_confirm]").click()
        page.wait_for_url(f"**{self.tab_url()}")
        self.revision.refresh_from_db()
        assert self.revision.status == Status.ACTIVE
        assert page.locator("a[data-action=activate]").count() == 0
        page.goto(self.detail_url())
        assert page.locator("a[data-action=activate]").count() == 0
        assert page.locator("a[data-action=deactivate]").count() == 1
        page.goto(self.tab_url())

        page.locator("a[data-action=deactivate]").click()
        page.wait_for_url(f"**/revisions/{self.revision.pk}/deactivate/")
        page.locator("button[name=_confirm]").click()
        page.wait_for_url(f"**{self.tab_url()}")
        self.revision.refresh_from_db()
        self.project.refresh_from_db()
        assert self.revision.status == Status.RETIRED
        assert self.project.active_revision is None
        assert page.locator("a[data-action=activate]").count() == 1

    def test_buttons_hidden_and_pages_refused_without_activate_permission(self):
        viewer = get_user_model().objects.create_user("viewer", password="pw")
        grant(viewer, ["view"], ScriptProject)
        grant(viewer, ["view"], ScriptProjectRevision)
        page = self.page_for(viewer)
        page.goto(self.tab_url())
        assert page.get_by_text(self.revision.digest[:12]).count() >= 1
        assert page.locator("a[data-action=activate]").count() == 0
        page.goto(self.detail_url())
        assert page.get_by_text(self.revision.digest).count() >= 1
        assert page.locator("a[data-action]").count() == 0
        response = page.goto(f"/plugins/script-projects/revisions/{self.revision.pk}/activate/")
        assert response.status == 403

        activator = get_user_model().objects.create_user("activator", password="pw")
        grant(activator, ["view", "activate"], ScriptProject)
        grant(activator, ["view"], ScriptProjectRevision)
        page = self.page_for(activator)
        page.goto(self.tab_url())
        assert page.locator("a[data-action=activate]").count() == 1
        page.goto(self.detail_url())
        assert page.locator("a[data-action=activate]").count() == 1
        assert page.locator("a[data-action=deactivate]").count() == 0

    def test_revisions_tab_needs_revision_view_permission(self):
        outsider = get_user_model().objects.create_user("outsider", password="pw")
        grant(outsider, ["view", "activate"], ScriptProject)
        page = self.page_for(outsider)
        page.goto(f"/plugins/script-projects/projects/{self.project.pk}/")
        assert page.locator(f"a[href$='{self.tab_url()}']").count() == 0
        response = page.goto(self.tab_url())
        assert response.status == 403

    def ordinary_module(self, name="plain"):
        """A module as NetBox's own upload leaves it: a file in SCRIPTS_ROOT."""
        scripts_root = tempfile.mkdtemp(prefix="nbsp-scripts-root-")
        self.addCleanup(shutil.rmtree, scripts_root, ignore_errors=True)
        override = override_settings(SCRIPTS_ROOT=scripts_root)
        override.enable()
        self.addCleanup(override.disable)
        with open(os.path.join(scripts_root, f"{name}.py"), "w") as f:
            f.write(PLAIN_SCRIPT)
        return ScriptModule.objects.create(file_root="scripts", file_path=f"{name}.py")

    def test_netbox_scripts_page_offers_no_edit_or_delete_on_published_modules(self):
        plain = self.ordinary_module()
        activate_revision(self.revision)
        admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
        page = self.page_for(admin)
        page.goto("/extras/scripts/")

        def card(title):
            header = page.locator("h2.card-header", has_text=title)
            return page.locator("div.card").filter(has=header)

        published, ordinary = card("Tags: scripts.tags"), card("plain")
        assert published.count() == 1 and ordinary.count() == 1
        # The published module's Scripts are still listed and runnable there.
        assert published.get_by_role("button", name="Run Script").count() == 2
        assert published.get_by_role("link", name="Edit").count() == 0
        assert published.get_by_role("link", name="Delete").count() == 0
        for name, action in (("Edit", "edit"), ("Delete", "delete")):
            link = ordinary.get_by_role("link", name=name)
            assert link.count() == 1 and link.is_visible()
            assert link.get_attribute("href") == f"/extras/script-modules/{plain.pk}/{action}/"
        ordinary.get_by_role("link", name="Delete").click()
        page.wait_for_url(f"**/extras/script-modules/{plain.pk}/delete/")


PLAIN_SCRIPT = """
from extras.scripts import Script


class Plain(Script):
    def run(self, data, commit):
        return "plain"
"""
