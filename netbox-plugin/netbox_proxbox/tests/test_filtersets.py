"""Filters of the three REST collections and their GraphQL counterparts."""

from __future__ import annotations

from django.test import Client, TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from users.models import User
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster

from .base import api_url, auth_header, grant, make_endpoint, make_references, make_user

VIEW_ALL = (
    "netbox_proxbox.view_proxmoxendpoint",
    "netbox_proxbox.view_proxmoxcluster",
    "netbox_proxbox.view_proxboxclustersyncstate",
    "virtualization.view_cluster",
)


class FilterTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.a = make_endpoint("pve-a", site=cls.site, mode="standalone")
        cls.b = make_endpoint("pve-b", enabled=False)
        cls.cluster = Cluster.objects.create(name="native", type=cls.cluster_type)
        cls.linked = ProxmoxCluster(
            endpoint=cls.a, name="alpha", cluster_id="id-a", netbox_cluster=cls.cluster
        )
        cls.linked.save(claim=True)
        cls.unlinked = ProxmoxCluster.objects.create(endpoint=cls.b, name="beta")
        cls.sidecar = ProxboxClusterSyncState(
            cluster=cls.cluster, proxmox_cluster=cls.linked, status="failed"
        )
        cls.sidecar.save(claim=True)
        cls.user, cls.token = make_user("reader", VIEW_ALL)

    def ids(self, model, query):
        response = APIClient().get(api_url(model) + query, **auth_header(self.token))
        self.assertEqual(response.status_code, 200, response.content)
        return sorted(row["id"] for row in response.json()["results"])

    def test_rest_filters(self):
        cases = [
            ("proxmoxendpoint", "?mode=standalone", [self.a.pk]),
            ("proxmoxendpoint", "?enabled=false", [self.b.pk]),
            ("proxmoxendpoint", f"?site_id={self.site.pk}", [self.a.pk]),
            ("proxmoxendpoint", "?q=pve-b", [self.b.pk]),
            ("proxmoxcluster", "?linked=true", [self.linked.pk]),
            ("proxmoxcluster", "?linked=false", [self.unlinked.pk]),
            ("proxmoxcluster", f"?endpoint_id={self.b.pk}", [self.unlinked.pk]),
            ("proxmoxcluster", f"?netbox_cluster_id={self.cluster.pk}", [self.linked.pk]),
            ("proxmoxcluster", "?cluster_id=id-a", [self.linked.pk]),
            ("proxboxclustersyncstate", f"?cluster_id={self.cluster.pk}", [self.sidecar.pk]),
            ("proxboxclustersyncstate", "?status=succeeded", []),
            ("proxboxclustersyncstate", f"?proxmox_cluster_id={self.linked.pk}", [self.sidecar.pk]),
        ]
        for model, query, expected in cases:
            with self.subTest(model=model, query=query):
                self.assertEqual(self.ids(model, query), expected)

    def test_graphql_tracking_and_sidecars(self):
        client = Client()
        client.force_login(User.objects.get(pk=self.user.pk))
        query = """{
          proxmox_cluster_list(filters: {name: {exact: "alpha"}}) { name endpoint { name } netbox_cluster { name } }
          proxbox_cluster_sync_state_list { status proxmox_cluster { name } cluster { name } }
        }"""
        response = client.post(
            reverse("graphql"), {"query": query}, content_type="application/json"
        )
        data = response.json()
        self.assertNotIn("errors", data, data)
        self.assertEqual(
            data["data"]["proxmox_cluster_list"],
            [
                {
                    "name": "alpha",
                    "endpoint": {"name": "pve-a"},
                    "netbox_cluster": {"name": "native"},
                }
            ],
        )
        self.assertEqual(
            data["data"]["proxbox_cluster_sync_state_list"],
            [
                {
                    "status": "failed",
                    "proxmox_cluster": {"name": "alpha"},
                    "cluster": {"name": "native"},
                }
            ],
        )

    def test_views_are_restricted_by_object_permissions(self):
        limited, token = make_user("limited")
        grant(
            limited, "netbox_proxbox.view_proxmoxcluster", constraints={"endpoint__name": "pve-b"}
        )
        response = APIClient().get(api_url("proxmoxcluster"), **auth_header(token))
        self.assertEqual([row["id"] for row in response.json()["results"]], [self.unlinked.pk])


class NullSearchTermTest(FilterTest):
    """`null` is a search term for text and range lookups: NetBox core answers
    `/api/virtualization/clusters/?name__ic=null` with a 500 (found by schemathesis)."""

    def test_null_is_searched_literally_by_text_lookups(self):
        nullable = ProxmoxCluster.objects.create(endpoint=self.b, name="nullable")
        self.assertEqual(self.ids("proxmoxcluster", "?name__ic=null"), [nullable.pk])
        self.assertEqual(
            self.ids("proxmoxcluster", "?name__ic=nullab"),
            self.ids("proxmoxcluster", "?name=nullable"),
        )
        self.assertEqual(self.ids("proxmoxendpoint", "?token_id__regex=null"), [])
        self.assertEqual(self.ids("proxmoxendpoint", "?host__ic=null"), [])
        # `null` keeps its meaning where it has one: exact matches and exclusions.
        self.assertEqual(len(self.ids("proxmoxendpoint", "?host__n=null")), 2)

    def test_a_bad_regular_expression_is_a_400_naming_the_filter(self):
        """PostgreSQL refuses the pattern for the whole query (NetBox core answers 500)."""
        self.assertEqual(self.ids("proxmoxcluster", "?name__regex=^al(pha)?$"), [self.linked.pk])
        self.assertEqual(self.ids("proxmoxcluster", "?name__iregex=^BE"), [self.unlinked.pk])
        for query in ("?name__regex=(", "?name__regex=a&name__regex=x)", "?name__iregex=["):
            with self.subTest(query=query):
                response = APIClient().get(
                    api_url("proxmoxcluster") + query, **auth_header(self.token)
                )
                self.assertEqual(response.status_code, 400, response.content)
                (field,) = response.json()
                self.assertIn(field, ("name__regex", "name__iregex"))
                self.assertIn("Invalid regular expression", response.json()[field][0])
