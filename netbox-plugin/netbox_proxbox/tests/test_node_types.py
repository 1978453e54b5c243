"""Node device types: the endpoint's `node_device_type` and per-node overrides, over REST,
the UI form and GraphQL, validated, and what the backend reads (`node_device_types`)."""

from __future__ import annotations

from dcim.models import DeviceType, Manufacturer
from django.db.models import ProtectedError
from django.test import TestCase
from django.urls import reverse
from rest_framework.test import APIClient

from netbox_proxbox.models import ProxmoxNodeTypeOverride

from .base import api_url, auth_header, make_endpoint, make_user

PERMS = (
    "netbox_proxbox.view_proxmoxendpoint",
    "netbox_proxbox.change_proxmoxendpoint",
    "netbox_proxbox.view_proxmoxnodetypeoverride",
    "netbox_proxbox.add_proxmoxnodetypeoverride",
    "netbox_proxbox.change_proxmoxnodetypeoverride",
    "netbox_proxbox.delete_proxmoxnodetypeoverride",
    "dcim.view_devicetype",
)


class NodeTypesRestTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-nt")
        cls.other = make_endpoint("pve-nt2")
        maker = Manufacturer.objects.create(name="Acme", slug="acme")
        cls.r640 = DeviceType.objects.create(manufacturer=maker, model="R640", slug="r640")
        cls.r750 = DeviceType.objects.create(manufacturer=maker, model="R750", slug="r750")
        cls.user, cls.token = make_user("typist", PERMS)

    def call(self, method, url, body=None):
        return getattr(APIClient(), method)(url, body, format="json", **auth_header(self.token))

    def override(self, node, device_type, endpoint=None):
        return {
            "endpoint": (endpoint or self.endpoint).pk,
            "node": node,
            "device_type": device_type.pk,
        }

    def test_the_endpoint_type_and_its_overrides_are_what_the_backend_reads(self):
        response = self.call(
            "patch",
            api_url("proxmoxendpoint", self.endpoint.pk),
            {"node_device_type": self.r640.pk},
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["node_device_type"]["id"], self.r640.pk)
        created = self.call(
            "post", api_url("proxmoxnodetypeoverride"), self.override("pve2", self.r750)
        )
        self.assertEqual(created.status_code, 201, created.content)
        self.assertEqual(created.json()["device_type"]["id"], self.r750.pk)
        body = self.call("get", api_url("proxmoxendpoint", self.endpoint.pk)).json()
        self.assertEqual(body["node_device_types"], {"pve2": self.r750.pk})
        # The other endpoint's overrides are its own.
        other = self.call("get", api_url("proxmoxendpoint", self.other.pk)).json()
        self.assertEqual(other["node_device_types"], {})
        self.assertIsNone(other["node_device_type"])

    def test_a_node_listed_twice_is_refused_naming_the_node_field(self):
        first = self.call(
            "post", api_url("proxmoxnodetypeoverride"), self.override("pve1", self.r640)
        )
        self.assertEqual(first.status_code, 201, first.content)
        again = self.call(
            "post", api_url("proxmoxnodetypeoverride"), self.override("pve1", self.r750)
        )
        self.assertEqual(again.status_code, 400, again.content)
        self.assertIn("node", again.json())
        # The same node of another endpoint is another node.
        elsewhere = self.call(
            "post",
            api_url("proxmoxnodetypeoverride"),
            self.override("pve1", self.r750, endpoint=self.other),
        )
        self.assertEqual(elsewhere.status_code, 201, elsewhere.content)
        # Renaming another override onto a listed node is refused the same way.
        third = self.call(
            "post", api_url("proxmoxnodetypeoverride"), self.override("pve3", self.r640)
        )
        moved = self.call(
            "patch", api_url("proxmoxnodetypeoverride", third.json()["id"]), {"node": "pve1"}
        )
        self.assertEqual(moved.status_code, 400, moved.content)
        self.assertIn("node", moved.json())
        self.assertEqual(
            ProxmoxNodeTypeOverride.objects.get(pk=third.json()["id"]).device_type, self.r640
        )

    def test_a_bulk_create_naming_a_node_twice_writes_nothing(self):
        response = self.call(
            "post",
            api_url("proxmoxnodetypeoverride"),
            [self.override("pve7", self.r640), self.override("pve7", self.r750)],
        )
        self.assertEqual(response.status_code, 400, response.content)
        [error] = response.json()["errors"]
        self.assertEqual(error["index"], 1)
        self.assertIn("node", error["errors"])
        self.assertFalse(ProxmoxNodeTypeOverride.objects.filter(node="pve7").exists())

    def test_a_malformed_node_name_or_a_missing_type_is_refused_naming_the_field(self):
        bad = self.call(
            "post", api_url("proxmoxnodetypeoverride"), self.override("pve 1", self.r640)
        )
        self.assertEqual(bad.status_code, 400, bad.content)
        self.assertIn("node", bad.json())
        body = self.override("pve1", self.r640)
        del body["device_type"]
        missing = self.call("post", api_url("proxmoxnodetypeoverride"), body)
        self.assertEqual(missing.status_code, 400, missing.content)
        self.assertIn("device_type", missing.json())
        unknown = self.call(
            "patch", api_url("proxmoxendpoint", self.endpoint.pk), {"node_device_type": 999999}
        )
        self.assertEqual(unknown.status_code, 400, unknown.content)
        self.assertIn("node_device_type", unknown.json())

    def test_a_device_type_the_caller_may_not_view_is_refused_naming_the_field(self):
        blind, token = make_user("blind", [p for p in PERMS if p != "dcim.view_devicetype"])
        client = APIClient()
        endpoint = client.patch(
            api_url("proxmoxendpoint", self.endpoint.pk),
            {"node_device_type": self.r640.pk},
            format="json",
            **auth_header(token),
        )
        self.assertEqual(endpoint.status_code, 400, endpoint.content)
        self.assertIn("node_device_type", endpoint.json())
        override = client.post(
            api_url("proxmoxnodetypeoverride"),
            self.override("pve1", self.r640),
            format="json",
            **auth_header(token),
        )
        self.assertEqual(override.status_code, 400, override.content)
        self.assertIn("device_type", override.json())
        self.assertFalse(ProxmoxNodeTypeOverride.objects.exists())
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.node_device_type)

    def test_overrides_filter_by_endpoint_and_device_type(self):
        ProxmoxNodeTypeOverride.objects.create(
            endpoint=self.endpoint, node="pve1", device_type=self.r640
        )
        ProxmoxNodeTypeOverride.objects.create(
            endpoint=self.other, node="pve1", device_type=self.r750
        )
        url = api_url("proxmoxnodetypeoverride")
        by_endpoint = self.call("get", f"{url}?endpoint_id={self.other.pk}").json()
        self.assertEqual([o["device_type"]["id"] for o in by_endpoint["results"]], [self.r750.pk])
        by_type = self.call("get", f"{url}?device_type_id={self.r640.pk}").json()
        self.assertEqual([o["endpoint"]["id"] for o in by_type["results"]], [self.endpoint.pk])

    def test_a_device_type_in_use_is_not_deleted(self):
        ProxmoxNodeTypeOverride.objects.create(
            endpoint=self.endpoint, node="pve1", device_type=self.r750
        )
        self.endpoint.node_device_type = self.r640
        self.endpoint.save()
        with self.assertRaises(ProtectedError):
            self.r750.delete()
        with self.assertRaises(ProtectedError):
            self.r640.delete()

    def test_graphql_lists_an_endpoints_overrides(self):
        ProxmoxNodeTypeOverride.objects.create(
            endpoint=self.endpoint, node="pve1", device_type=self.r750
        )
        query = (
            "{ proxmox_node_type_override_list { node device_type { slug } endpoint { name } } }"
        )
        response = self.call("post", "/graphql/", {"query": query})
        self.assertEqual(response.status_code, 200, response.content)
        rows = response.json()["data"]["proxmox_node_type_override_list"]
        self.assertEqual(
            rows,
            [{"node": "pve1", "device_type": {"slug": "r750"}, "endpoint": {"name": "pve-nt"}}],
        )


class NodeTypesFormTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-ntf")
        maker = Manufacturer.objects.create(name="Acme", slug="acme")
        cls.r640 = DeviceType.objects.create(manufacturer=maker, model="R640", slug="r640")
        cls.user, _ = make_user("former", PERMS)
        ProxmoxNodeTypeOverride.objects.create(
            endpoint=cls.endpoint, node="pve1", device_type=cls.r640
        )

    def setUp(self):
        self.client.force_login(self.user)

    def test_the_form_refuses_a_second_override_of_a_node(self):
        url = reverse("plugins:netbox_proxbox:proxmoxnodetypeoverride_add")
        response = self.client.post(
            url, {"endpoint": self.endpoint.pk, "node": "pve1", "device_type": self.r640.pk}
        )
        self.assertEqual(response.status_code, 200)  # the form again, with the error
        self.assertContains(response, "already has a device type override for node pve1")
        self.assertEqual(ProxmoxNodeTypeOverride.objects.count(), 1)

    def test_the_endpoint_page_shows_its_device_type_and_overrides(self):
        self.endpoint.node_device_type = self.r640
        self.endpoint.save()
        response = self.client.get(self.endpoint.get_absolute_url())
        self.assertContains(response, "Node device type")
        self.assertContains(response, "Node type overrides")
        override = self.client.get(ProxmoxNodeTypeOverride.objects.get().get_absolute_url())
        self.assertContains(override, "R640")
        self.assertContains(override, "pve1")
