"""Preview sync: the endpoint page's button, the page listing the backend's dry-run plan
per object type, and "Apply" (the Sync now form), through the real backend app."""

from __future__ import annotations

from core.choices import JobStatusChoices
from django.test import Client
from django.urls import reverse
from users.models import User

from netbox_proxbox.sync.jobs import SyncEndpointJob

from .backend import PlanningSyncService, free_port
from .base import grant, make_endpoint
from .test_sync_now import CHANGE, SyncNowTestCase, backend, plugin_config


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
            self.assertIn("virtualization.virtualmachine", page)
            self.assertIn("1 to create, 1 to update, 1 to delete", page)
            self.assertIn("<code>memory</code>: 2048 &rarr; 4096", page)
            self.assertIn("web (#12)", page)
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
