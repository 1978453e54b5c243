"""Ownership data names and links only what the caller may view: 409 messages, tables, REST."""

from __future__ import annotations

from django.test import Client, TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster

from .base import (
    CLAIM_UPDATE_PERMS,
    api_url,
    auth_header,
    claim_url,
    grant,
    make_endpoint,
    make_references,
    make_user,
)

WITHOUT_CLUSTER_VIEW = tuple(p for p in CLAIM_UPDATE_PERMS if p != "virtualization.view_cluster")


class ConflictMessagesTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.endpoint = make_endpoint("pve-mine")
        cls.other = make_endpoint("pve-secret-owner")
        cls.owned = Cluster.objects.create(name="secret-cluster", type=cls.cluster_type)
        cls.other.netbox_cluster = cls.owned
        cls.other.save(assign_native_cluster=True)
        ProxmoxCluster(endpoint=cls.endpoint, name="x", netbox_cluster=cls.owned).save(claim=True)

    def claim_as(self, perms, constraints=None):
        user, token = make_user(f"u{len(perms)}-{bool(constraints)}", ())
        for name in perms:
            grant(user, name, constraints=(constraints or {}).get(name))
        response = APIClient().post(
            claim_url(self.endpoint),
            {"name": "mine", "mode": "cluster", "cluster_type": self.cluster_type.pk},
            format="json",
            **auth_header(token),
        )
        self.assertEqual(response.status_code, 409, response.content)
        self.assertEqual(response.json()["code"], "owned_by_another_endpoint")
        return response.json()["detail"]

    def test_owner_and_cluster_are_named_only_to_callers_who_may_view_them(self):
        detail = self.claim_as(CLAIM_UPDATE_PERMS)
        self.assertIn("'secret-cluster'", detail)
        self.assertIn("'pve-secret-owner'", detail)
        detail = self.claim_as(
            WITHOUT_CLUSTER_VIEW,
            constraints={"netbox_proxbox.view_proxmoxendpoint": {"name": "pve-mine"}},
        )
        self.assertNotIn("secret-cluster", detail)
        self.assertNotIn("pve-secret-owner", detail)
        self.assertIn("another endpoint", detail)

    def test_ambiguous_cluster_ids_are_listed_only_when_viewable(self):
        hidden = Cluster.objects.create(name="hidden-two", type=self.cluster_type)
        ProxmoxCluster.objects.filter(endpoint=self.endpoint).delete()
        ProxmoxCluster(endpoint=self.endpoint, name="a", netbox_cluster=self.owned).save(claim=True)
        ProxmoxCluster(endpoint=self.endpoint, name="b", netbox_cluster=hidden).save(claim=True)
        user, token = make_user("constrained", WITHOUT_CLUSTER_VIEW)
        grant(user, "virtualization.view_cluster", constraints={"name": "secret-cluster"})
        response = APIClient().post(
            claim_url(self.endpoint),
            {"name": "mine", "mode": "cluster", "cluster_type": self.cluster_type.pk},
            format="json",
            **auth_header(token),
        )
        self.assertEqual(response.json()["code"], "ambiguous_tracking", response.content)
        detail = response.json()["detail"]
        self.assertIn(str(self.owned.pk), detail)
        self.assertNotIn(f"{hidden.pk}", detail.replace(str(self.owned.pk), ""))
        self.assertIn("1 you may not view", detail)


class RelationColumnsTest(TestCase):
    """Tables and REST representations apply the detail pages' rule to native clusters."""

    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.endpoint = make_endpoint("pve-a")
        cls.cluster = Cluster.objects.create(name="native-hidden", type=cls.cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.tracking = ProxmoxCluster(endpoint=cls.endpoint, name="t", netbox_cluster=cls.cluster)
        cls.tracking.save(claim=True)
        ProxboxClusterSyncState(cluster=cls.cluster, proxmox_cluster=cls.tracking).save(claim=True)

    PLUGIN_VIEWS = (
        "netbox_proxbox.view_proxmoxendpoint",
        "netbox_proxbox.view_proxmoxcluster",
        "netbox_proxbox.view_proxboxclustersyncstate",
    )

    def user(self, *extra, constraints=None):
        user, token = make_user(f"viewer-{len(extra)}-{bool(constraints)}", ())
        for name in (*self.PLUGIN_VIEWS, *extra):
            grant(user, name, constraints=(constraints or {}).get(name))
        return user, token

    def pages(self, user):
        client = Client()
        client.force_login(user)
        out = {}
        for name in ("proxmoxendpoint_list", "proxmoxcluster_list", "proxboxclustersyncstate_list"):
            response = client.get(reverse(f"plugins:netbox_proxbox:{name}"))
            self.assertEqual(response.status_code, 200)
            out[name] = response.content.decode()
        return out

    def test_tables_link_the_native_cluster_only_for_viewers_who_may_view_it(self):
        url = self.cluster.get_absolute_url()
        allowed, _ = self.user("virtualization.view_cluster")
        for name, page in self.pages(allowed).items():
            self.assertIn(f'href="{url}"', page, name)
        for denied, _ in (
            self.user(),
            self.user(
                "virtualization.view_cluster",
                constraints={"virtualization.view_cluster": {"name": "someone-else"}},
            ),
        ):
            for name, page in self.pages(denied).items():
                self.assertNotIn(f'href="{url}"', page, name)
                self.assertNotIn("native-hidden", page, name)

    def test_rest_representations_omit_clusters_the_caller_may_not_view(self):
        fields = {
            "proxmoxendpoint": "netbox_cluster",
            "proxmoxcluster": "netbox_cluster",
            "proxboxclustersyncstate": "cluster",
        }
        _, allowed = self.user("virtualization.view_cluster")
        _, denied = self.user()
        client = APIClient()
        for model, field in fields.items():
            with self.subTest(model):
                shown = client.get(api_url(model), **auth_header(allowed)).json()["results"]
                self.assertEqual(shown[0][field]["id"], self.cluster.pk)
                hidden = client.get(api_url(model), **auth_header(denied)).json()["results"]
                self.assertIsNone(hidden[0][field])
                self.assertNotIn("native-hidden", str(hidden))


class HiddenNamesTest(TestCase):
    """A viewer of one ownership record learns nothing of the related records it may not view.

    The tracking row carries the Proxmox cluster's name, as synchronization writes it, so
    a leak of any related record would show one of these names.
    """

    ENDPOINT = "secret-endpoint-name"
    HOST = "hidden-host.example"
    CLUSTER = "hidden-cluster-name"

    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, _, _ = make_references()
        cls.endpoint = make_endpoint(cls.ENDPOINT, host=cls.HOST)
        cls.cluster = Cluster.objects.create(name=cls.CLUSTER, type=cls.cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.tracking = ProxmoxCluster(
            endpoint=cls.endpoint, name=cls.CLUSTER, netbox_cluster=cls.cluster
        )
        cls.tracking.save(claim=True)
        cls.sidecar = ProxboxClusterSyncState(cluster=cls.cluster, proxmox_cluster=cls.tracking)
        cls.sidecar.save(claim=True)

    def responses(self, perms, pages):
        """REST list, UI list and UI detail of each (model, pk) in `pages`, as one text."""
        user, token = make_user(f"viewer-{'-'.join(sorted(perms))}"[:150], perms)
        browser = Client()
        browser.force_login(user)
        out = []
        for model, pk in pages:
            for response in (
                APIClient().get(api_url(model), **auth_header(token)),
                browser.get(reverse(f"plugins:netbox_proxbox:{model}_list")),
                browser.get(reverse(f"plugins:netbox_proxbox:{model}", args=[pk])),
            ):
                self.assertEqual(response.status_code, 200, response.content[:500])
                out.append(response.content.decode())
        return "\n".join(out)

    def assertHidden(self, name, text):
        at = text.find(name)
        if at >= 0:
            self.fail(f"{name!r} leaks: …{text[max(0, at - 200) : at + 60]}…")

    def test_everything_is_named_for_a_viewer_of_everything(self):
        text = self.responses(
            (
                "netbox_proxbox.view_proxmoxendpoint",
                "netbox_proxbox.view_proxmoxcluster",
                "netbox_proxbox.view_proxboxclustersyncstate",
                "virtualization.view_cluster",
            ),
            [("proxboxclustersyncstate", self.sidecar.pk), ("proxmoxcluster", self.tracking.pk)],
        )
        for name in (self.ENDPOINT, self.HOST, self.CLUSTER):
            self.assertIn(name, text)

    def test_a_sync_state_viewer_sees_no_tracking_endpoint_or_cluster_name(self):
        text = self.responses(
            ("netbox_proxbox.view_proxboxclustersyncstate",),
            [("proxboxclustersyncstate", self.sidecar.pk)],
        )
        for name in (self.ENDPOINT, self.HOST, self.CLUSTER):
            self.assertHidden(name, text)
        rest = (
            APIClient()
            .get(
                api_url("proxboxclustersyncstate", self.sidecar.pk),
                **auth_header(
                    make_user("sidecar-only", ("netbox_proxbox.view_proxboxclustersyncstate",))[1]
                ),
            )
            .json()
        )
        self.assertIsNone(rest["cluster"])
        self.assertIsNone(rest["proxmox_cluster"])

    def test_a_tracking_viewer_sees_no_endpoint_name_or_host(self):
        text = self.responses(
            ("netbox_proxbox.view_proxmoxcluster", "netbox_proxbox.view_proxboxclustersyncstate"),
            [("proxmoxcluster", self.tracking.pk), ("proxboxclustersyncstate", self.sidecar.pk)],
        )
        self.assertHidden(self.ENDPOINT, text)
        self.assertHidden(self.HOST, text)
        rest = (
            APIClient()
            .get(
                api_url("proxmoxcluster", self.tracking.pk),
                **auth_header(
                    make_user("tracking-only", ("netbox_proxbox.view_proxmoxcluster",))[1]
                ),
            )
            .json()
        )
        self.assertIsNone(rest["endpoint"])
        self.assertIsNone(rest["netbox_cluster"])
        self.assertEqual(rest["name"], self.CLUSTER)


class GraphQLHiddenRelationsTest(HiddenNamesTest):
    """GraphQL answers a related object the caller may not view as null, not as an error."""

    QUERY = """{
      proxbox_cluster_sync_state_list { id display cluster { name } proxmox_cluster { name } }
      proxmox_cluster_list { id display name endpoint { name host } netbox_cluster { name } }
    }"""

    def graphql(self, *perms):
        user, _ = make_user(f"gql-{len(perms)}", perms)
        browser = Client()
        browser.force_login(user)
        response = browser.post(
            reverse("graphql"), {"query": self.QUERY}, content_type="application/json"
        )
        self.assertEqual(response.status_code, 200)
        return response.json()

    def test_a_viewer_of_everything_gets_every_relation(self):
        body = self.graphql(
            "netbox_proxbox.view_proxmoxendpoint",
            "netbox_proxbox.view_proxmoxcluster",
            "netbox_proxbox.view_proxboxclustersyncstate",
            "virtualization.view_cluster",
        )
        self.assertNotIn("errors", body, body)
        state = body["data"]["proxbox_cluster_sync_state_list"][0]
        self.assertEqual(state["cluster"], {"name": self.CLUSTER})
        tracking = body["data"]["proxmox_cluster_list"][0]
        self.assertEqual(tracking["endpoint"], {"name": self.ENDPOINT, "host": self.HOST})

    def test_hidden_relations_are_null(self):
        body = self.graphql(
            "netbox_proxbox.view_proxmoxcluster", "netbox_proxbox.view_proxboxclustersyncstate"
        )
        self.assertNotIn("errors", body, body)
        state = body["data"]["proxbox_cluster_sync_state_list"]
        self.assertEqual(len(state), 1)
        self.assertIsNone(state[0]["cluster"])
        tracking = body["data"]["proxmox_cluster_list"]
        self.assertEqual(len(tracking), 1)
        self.assertIsNone(tracking[0]["endpoint"])
        self.assertIsNone(tracking[0]["netbox_cluster"])
        self.assertHidden(self.ENDPOINT, str(body))
        self.assertHidden(self.HOST, str(body))

    # The REST/UI probes of the parent class are not repeated here.
    test_everything_is_named_for_a_viewer_of_everything = None
    test_a_sync_state_viewer_sees_no_tracking_endpoint_or_cluster_name = None
    test_a_tracking_viewer_sees_no_endpoint_name_or_host = None
