"""Preview sync: the endpoint page's button, the page listing the backend's dry-run plan
per object type, "Apply" (the Sync now form), and the REST action, through the real
backend app."""

from __future__ import annotations

from html.parser import HTMLParser

from core.choices import JobStatusChoices
from django.test import Client
from django.urls import reverse
from proxbox_processes import free_port
from rest_framework.test import APIClient
from users.models import Token, User

from netbox_proxbox.sync.jobs import SyncEndpointJob

from .backend import PlanningSyncService
from .base import auth_header, grant, make_endpoint
from .test_sync_now import CHANGE, SyncNowTestCase, backend, plugin_config


class _HeadingText(HTMLParser):
    """The text of the plan's card headings, one string each, whitespace collapsed as a
    browser shows it (so words of adjacent elements without a space between run together)."""

    def __init__(self):
        super().__init__()
        self.headings: list[str] = []
        self._parts: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h2" and "card-header" in (dict(attrs).get("class") or ""):
            self._parts = []

    def handle_endtag(self, tag):
        if tag == "h2" and self._parts is not None:
            self.headings.append(" ".join("".join(self._parts).split()))
            self._parts = None

    def handle_data(self, data):
        if self._parts is not None:
            self._parts.append(data)


def card_headings(page: str) -> list[str]:
    parser = _HeadingText()
    parser.feed(page)
    return parser.headings


def preview_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins:netbox_proxbox:proxmoxendpoint_preview", args=[pk])


class PreviewPageTest(SyncNowTestCase):
    def client_for(self, user):
        client = Client()
        client.force_login(user)
        return client

    def test_the_page_lists_the_plan_and_apply_starts_the_sync(self):
        client = self.client_for(self.operator)
        endpoint_page = client.get(self.endpoint.get_absolute_url()).content.decode()
        self.assertIn(f'href="{preview_url(self.endpoint)}"', endpoint_page)
        service = PlanningSyncService()
        with backend(service):
            response = client.get(preview_url(self.endpoint))
            self.assertEqual(response.status_code, 200)
            self.assertEqual(service.previews, [self.endpoint.pk])
            self.assertEqual(service.calls, [])  # a preview starts no sync
            self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())
            page = response.content.decode()
            # Each card is headed by the model's name and its counts, as separate words.
            self.assertIn(
                "Virtual machines virtualization.virtualmachine "
                "1 to create, 1 to update, 1 to delete",
                card_headings(page),
            )
            self.assertIn("<code>memory</code>: 2048 &rarr; 4096", page)
            self.assertIn("web (#12)", page)
            self.assertIn("assigned by rule 10 (web servers)", page)
            self.assertIn("old-vm (#13)", page)
            # A placeholder is named as the object the run would create.
            self.assertIn("<code>device</code>: new dcim.device pve9", page)
            apply = reverse(
                "plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[self.endpoint.pk]
            )
            self.assertIn(f'action="{apply}"', page)
            applied = client.post(apply, follow=True)
        self.assertContains(applied, "queued as")
        self.assertEqual(service.calls, [self.endpoint.pk])
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)

    def test_preview_needs_the_sync_permission_and_an_enabled_endpoint(self):
        viewer = User.objects.create_user(username="viewer")
        grant(viewer, CHANGE[0])
        disabled = make_endpoint("pve-off", enabled=False)
        service = PlanningSyncService()
        with backend(service):
            client = self.client_for(viewer)
            self.assertNotIn(
                preview_url(self.endpoint),
                client.get(self.endpoint.get_absolute_url()).content.decode(),
            )
            refused = client.get(preview_url(self.endpoint), follow=True)
            self.assertContains(refused, "you may not sync it")
            operator = self.client_for(self.operator)
            self.assertContains(operator.get(preview_url(disabled), follow=True), "is disabled")
            self.assertEqual(operator.get(preview_url(disabled.pk + 1000)).status_code, 404)
        self.assertEqual(service.previews, [])

    def test_an_unreachable_backend_is_reported_on_the_endpoint_page(self):
        url = f"http://127.0.0.1:{free_port()}"
        with plugin_config(backend_url=url, backend_token="x"):
            response = self.client_for(self.operator).get(preview_url(self.endpoint), follow=True)
        self.assertContains(response, "is unreachable")
        self.assertEqual(response.redirect_chain[-1][0], self.endpoint.get_absolute_url())


def preview_api_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-preview", kwargs={"pk": pk})


class PreviewRestTest(SyncNowTestCase):
    def preview(self, token=None, endpoint=None):
        return APIClient().post(
            preview_api_url(endpoint or self.endpoint), **auth_header(token or self.token)
        )

    def test_the_action_answers_the_plan_and_writes_nothing(self):
        service = PlanningSyncService()
        with backend(service):
            response = self.preview()
        self.assertEqual(response.status_code, 200, response.content)
        body = response.json()
        self.assertEqual((body["dry_run"], body["status"]), (True, "previewed"))
        vms = body["plan"]["object_types"]["virtualization.virtualmachine"]
        self.assertEqual(
            vms["updates"][0]["changes"],
            {"memory": {"old": 2048, "new": 4096}, "tenant": {"old": None, "new": 5}},
        )
        self.assertEqual(vms["updates"][0]["because"], "rule 10 (web servers)")
        self.assertEqual([d["label"] for d in vms["deletes"]], ["old-vm"])
        self.assertEqual(service.previews, [self.endpoint.pk])
        self.assertEqual(service.calls, [])
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

    def test_refusals(self):
        viewer = User.objects.create_user(username="viewer")
        grant(viewer, CHANGE[0])
        read_only = Token.objects.create(user=self.operator, write_enabled=False)
        disabled = make_endpoint("pve-off", enabled=False)
        service = PlanningSyncService()
        with backend(service):
            self.assertEqual(self.preview(token=read_only).status_code, 403)
            viewer_token = Token.objects.create(user=viewer, write_enabled=True)
            refused = self.preview(token=viewer_token)
            self.assertEqual(refused.status_code, 403)
            self.assertEqual(refused.json()["code"], "permission_denied")
            self.assertEqual(self.preview(endpoint=disabled).status_code, 409)
            self.assertEqual(self.preview(endpoint=disabled.pk + 1000).status_code, 404)
        self.assertEqual(service.previews, [])
        with plugin_config(backend_url=None):
            unset = self.preview()
        self.assertEqual(unset.status_code, 502)
        self.assertIn('["backend_url"] is not set', unset.json()["detail"])
