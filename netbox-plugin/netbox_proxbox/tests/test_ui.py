"""Detail pages: each side links to the other only for viewers who may see it."""

from __future__ import annotations

from django.test import Client, TestCase
from django.urls import reverse
from users.models import User
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster

from .base import compliance_form_fields, grant, make_endpoint, make_references


class OwnershipLinksTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.endpoint = make_endpoint("pve-a")
        cls.cluster = Cluster.objects.create(name="native-one", type=cls.cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)

    def viewer(self, *perms, constraints=None):
        user = User.objects.create_user(username=f"viewer{User.objects.count()}")
        for name in perms:
            grant(user, name, constraints=(constraints or {}).get(name))
        client = Client()
        client.force_login(user)
        return client

    def endpoint_page(self, client):
        response = client.get(self.endpoint.get_absolute_url())
        self.assertEqual(response.status_code, 200)
        return response.content.decode()

    def cluster_page(self, client):
        response = client.get(reverse("virtualization:cluster", args=[self.cluster.pk]))
        self.assertEqual(response.status_code, 200)
        return response.content.decode()

    def test_endpoint_page_links_the_native_cluster_only_when_viewable(self):
        cluster_url = self.cluster.get_absolute_url()
        both = self.viewer("netbox_proxbox.view_proxmoxendpoint", "virtualization.view_cluster")
        self.assertIn(f'href="{cluster_url}"', self.endpoint_page(both))
        endpoint_only = self.viewer("netbox_proxbox.view_proxmoxendpoint")
        page = self.endpoint_page(endpoint_only)
        self.assertNotIn(f'href="{cluster_url}"', page)
        self.assertNotIn("native-one", page)
        constrained = self.viewer(
            "netbox_proxbox.view_proxmoxendpoint",
            "virtualization.view_cluster",
            constraints={"virtualization.view_cluster": {"name": "someone-else"}},
        )
        self.assertNotIn("native-one", self.endpoint_page(constrained))

    def test_cluster_page_panel_links_back_only_when_endpoint_viewable(self):
        endpoint_url = self.endpoint.get_absolute_url()
        # No typed sidecar exists for this cluster: the panel still appears.
        self.assertFalse(ProxboxClusterSyncState.objects.filter(cluster=self.cluster).exists())
        both = self.viewer("netbox_proxbox.view_proxmoxendpoint", "virtualization.view_cluster")
        page = self.cluster_page(both)
        self.assertIn('id="proxbox-endpoint-panel"', page)
        self.assertIn(f'href="{endpoint_url}"', page)
        cluster_only = self.viewer("virtualization.view_cluster")
        page = self.cluster_page(cluster_only)
        self.assertNotIn('id="proxbox-endpoint-panel"', page)
        self.assertNotIn(f'href="{endpoint_url}"', page)

    def test_tracking_record_and_sync_state_pages_link_only_what_the_viewer_may_see(self):
        tracking = ProxmoxCluster(
            endpoint=self.endpoint,
            name="pve-cl",
            cluster_id="cl-7",
            netbox_cluster=self.cluster,
            version="8.2.4",
            node_count=3,
        )
        tracking.save(claim=True)
        state = ProxboxClusterSyncState(
            cluster=self.cluster, proxmox_cluster=tracking, status="failed", objects_created=11
        )
        state.message = "guests: 2 failed"
        state.save(claim=True)
        links = (self.endpoint, self.cluster, tracking)
        everything = self.viewer(
            "netbox_proxbox.view_proxmoxendpoint",
            "virtualization.view_cluster",
            "netbox_proxbox.view_proxmoxcluster",
            "netbox_proxbox.view_proxboxclustersyncstate",
        )
        tracking_page = everything.get(tracking.get_absolute_url()).content.decode()
        for shown in (
            "cl-7",
            "8.2.4",
            "Reflection",
            *(f'href="{o.get_absolute_url()}"' for o in links[:2]),
        ):
            self.assertIn(shown, tracking_page)
        state_page = everything.get(state.get_absolute_url()).content.decode()
        for shown in (
            "Failed",
            "11",
            "guests: 2 failed",
            *(f'href="{o.get_absolute_url()}"' for o in links[1:]),
        ):
            self.assertIn(shown, state_page)
        # The records alone: no link to the endpoint or the native cluster, nor the latter's name
        # (the tracking record's own name includes its endpoint's).
        records_only = self.viewer(
            "netbox_proxbox.view_proxmoxcluster", "netbox_proxbox.view_proxboxclustersyncstate"
        )
        tracking_page = records_only.get(tracking.get_absolute_url()).content.decode()
        state_page = records_only.get(state.get_absolute_url()).content.decode()
        self.assertIn("cl-7", tracking_page)
        for page in (tracking_page, state_page):
            self.assertNotIn(f'href="{self.endpoint.get_absolute_url()}"', page)
            self.assertNotIn(f'href="{self.cluster.get_absolute_url()}"', page)
            self.assertNotIn("native-one", page)

    def test_list_and_edit_pages_render(self):
        client = self.viewer(
            "netbox_proxbox.view_proxmoxendpoint",
            "netbox_proxbox.add_proxmoxendpoint",
            "netbox_proxbox.view_proxmoxcluster",
            "netbox_proxbox.view_proxboxclustersyncstate",
        )
        # Tracking records and sync states are server-owned: lists only (test_ui_links).
        pages = ("proxmoxendpoint_list", "proxmoxendpoint_add")
        pages += ("proxmoxcluster_list", "proxboxclustersyncstate_list")
        for name in pages:
            with self.subTest(page=name):
                response = client.get(reverse(f"plugins:netbox_proxbox:{name}"))
                self.assertEqual(response.status_code, 200)
        page = client.get(reverse("plugins:netbox_proxbox:proxmoxendpoint_list") + "?export=table")
        self.assertNotIn("s3cret", page.content.decode())

    def test_graphql_lists_endpoints_without_secrets(self):
        client = self.viewer("netbox_proxbox.view_proxmoxendpoint", "virtualization.view_cluster")
        query = "{ proxmox_endpoint_list { name netbox_cluster { name } } }"
        response = client.post(
            reverse("graphql"), {"query": query}, content_type="application/json"
        )
        self.assertEqual(response.status_code, 200, response.content)
        data = response.json()
        self.assertNotIn("errors", data, data)
        self.assertEqual(
            data["data"]["proxmox_endpoint_list"],
            [{"name": "pve-a", "netbox_cluster": {"name": "native-one"}}],
        )
        bad = client.post(
            reverse("graphql"),
            {"query": "{ proxmox_endpoint_list { token_secret_ciphertext } }"},
            content_type="application/json",
        )
        self.assertIn("errors", bad.json())


class EditFormsTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.endpoint = make_endpoint("pve-a")
        cls.cluster = Cluster.objects.create(name="native-one", type=cls.cluster_type)

    def setUp(self):
        self.user = User.objects.create_user(username="editor", is_superuser=True)
        self.client = Client()
        self.client.force_login(self.user)

    def test_endpoint_form_keeps_the_secret_when_left_empty_and_never_renders_it(self):
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        page = self.client.get(url).content.decode()
        self.assertNotIn("s3cret-pve-a", page)
        self.assertNotIn(self.endpoint.token_secret_ciphertext, page)
        form = {
            "name": "pve-a",
            "host": "pve-a.example.net",
            "port": 8006,
            "description": "edited in the UI",
            "token_id": "proxbox@pve!sync",
            "mode": "cluster",
            "enabled": "on",
            "verify_tls": "on",
            **compliance_form_fields(),
        }
        response = self.client.post(url, form)
        self.assertEqual(response.status_code, 302, response.content.decode()[:2000])
        self.endpoint.refresh_from_db()
        self.assertEqual(
            (self.endpoint.description, self.endpoint.reveal_token_secret()),
            ("edited in the UI", "s3cret-pve-a"),
        )
        response = self.client.post(url, {**form, "token_secret": "rotated-in-the-ui-form"})
        self.assertEqual(response.status_code, 302)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.reveal_token_secret(), "rotated-in-the-ui-form")
