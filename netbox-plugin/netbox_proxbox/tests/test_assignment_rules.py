"""Assignment rules over REST and the UI: validated (400 naming the field, nothing
written), ordered per endpoint, and shown on their list and the endpoint's page."""

from __future__ import annotations

import html
import re

from dcim.models import DeviceRole, Location, Platform, Site
from django.test import Client, TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from tenancy.models import Tenant
from users.models import User

from netbox_proxbox.models import ProxmoxAssignmentRule

from .base import api_url, auth_header, grant, make_endpoint, make_user

RULE_PERMS = (
    "netbox_proxbox.view_proxmoxassignmentrule",
    "netbox_proxbox.add_proxmoxassignmentrule",
    "netbox_proxbox.change_proxmoxassignmentrule",
    "netbox_proxbox.view_proxmoxendpoint",
    "tenancy.view_tenant",
    "dcim.view_devicerole",
    "dcim.view_platform",
    "dcim.view_site",
    "dcim.view_location",
)


class AssignmentRuleRestTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-rules")
        cls.other_endpoint = make_endpoint("pve-other")
        cls.tenant = Tenant.objects.create(name="Acme", slug="acme")
        cls.role = DeviceRole.objects.create(name="Web", slug="web", vm_role=True)
        cls.device_only_role = DeviceRole.objects.create(name="Rack", slug="rack", vm_role=False)
        cls.platform = Platform.objects.create(name="Debian", slug="debian")
        cls.site = Site.objects.create(name="DC1", slug="dc1")
        cls.other_site = Site.objects.create(name="DC2", slug="dc2")
        cls.location = Location.objects.create(name="Room 1", slug="room-1", site=cls.site)
        cls.user, cls.token = make_user("rules-operator", RULE_PERMS)

    def post(self, **body):
        body.setdefault("endpoint", self.endpoint.pk)
        return APIClient().post(
            api_url("proxmoxassignmentrule"), body, format="json", **auth_header(self.token)
        )

    def assert_refused(self, response, field):
        self.assertEqual(response.status_code, 400, response.content)
        self.assertIn(field, response.json())
        self.assertFalse(ProxmoxAssignmentRule.objects.exists())

    def test_a_rule_round_trips_into_what_the_backend_reads(self):
        response = self.post(
            weight=10,
            description="web servers",
            name_pattern=r"web-\d+",
            proxmox_tag="prod",
            pool="webpool",
            node="pve1",
            vmid_min=100,
            vmid_max=199,
            tenant=self.tenant.pk,
            vm_role=self.role.pk,
            platform=self.platform.pk,
            site=self.site.pk,
            location=self.location.pk,
        )
        self.assertEqual(response.status_code, 201, response.content)
        rule = response.json()["rule"]
        self.assertEqual(rule["weight"], 10)
        self.assertTrue(rule["enabled"])
        self.assertEqual(
            rule["match"],
            {
                "name_pattern": r"web-\d+",
                "proxmox_tag": "prod",
                "pool": "webpool",
                "node": "pve1",
                "vmid_min": 100,
                "vmid_max": 199,
            },
        )
        self.assertEqual(
            rule["assign"],
            {
                "tenant": self.tenant.pk,
                "vm_role": self.role.pk,
                "platform": self.platform.pk,
                "site": self.site.pk,
                "location": self.location.pk,
            },
        )
        self.assertEqual(self.listed(self.endpoint), [response.json()["id"]])
        self.assertEqual(self.listed(self.other_endpoint), [])

    def listed(self, endpoint) -> list[int]:
        """The ids of the rules REST lists for `endpoint`."""
        url = api_url("proxmoxassignmentrule")
        page = APIClient().get(url, {"endpoint_id": endpoint.pk}, **auth_header(self.token))
        return [rule["id"] for rule in page.json()["results"]]

    def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(self):
        tenant = self.tenant.pk
        self.assert_refused(self.post(name_pattern="web-(", tenant=tenant), "name_pattern")
        self.assert_refused(self.post(tenant=tenant), "name_pattern")  # no matcher
        self.assert_refused(self.post(node="pve1"), "tenant")  # no assignment
        self.assert_refused(self.post(vmid_min=500, vmid_max=499, tenant=tenant), "vmid_max")
        self.assert_refused(self.post(vmid_min=99, tenant=tenant), "vmid_min")
        self.assert_refused(self.post(vmid_max=1_000_000_000, tenant=tenant), "vmid_max")
        self.assert_refused(self.post(node="pve1", vm_role=self.device_only_role.pk), "vm_role")
        self.assert_refused(self.post(node="pve1", location=self.location.pk), "site")
        self.assert_refused(
            self.post(node="pve1", site=self.other_site.pk, location=self.location.pk), "location"
        )
        self.assert_refused(self.post(node="pve1", tenant=999999), "tenant")
        sited = make_endpoint("pve-sited", site=self.site)
        self.assert_refused(self.post(endpoint=sited.pk, node="n", site=self.other_site.pk), "site")
        same = self.post(endpoint=sited.pk, node="n", site=self.site.pk)
        self.assertEqual(same.status_code, 201, same.content)

    def test_the_order_is_unique_per_endpoint(self):
        self.assertEqual(self.post(weight=5, node="pve1", tenant=self.tenant.pk).status_code, 201)
        again = self.post(weight=5, node="pve2", tenant=self.tenant.pk)
        self.assertEqual(again.status_code, 400, again.content)
        self.assertIn("weight", again.json())
        self.assertEqual(ProxmoxAssignmentRule.objects.count(), 1)
        elsewhere = self.post(
            endpoint=self.other_endpoint.pk, weight=5, node="pve2", tenant=self.tenant.pk
        )
        self.assertEqual(elsewhere.status_code, 201, elsewhere.content)

    def test_an_invisible_endpoint_cannot_be_given_rules(self):
        user, token = make_user("narrow", ())
        for name in RULE_PERMS:
            constraints = {"name": "pve-other"} if name.endswith("proxmoxendpoint") else None
            grant(user, name, constraints=constraints)
        response = APIClient().post(
            api_url("proxmoxassignmentrule"),
            {"endpoint": self.endpoint.pk, "node": "pve1", "tenant": self.tenant.pk},
            format="json",
            **auth_header(token),
        )
        self.assert_refused(response, "endpoint")


class AssignmentRuleUiTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-ui")
        cls.tenant = Tenant.objects.create(name="Globex", slug="globex")
        cls.rule = ProxmoxAssignmentRule.objects.create(
            endpoint=cls.endpoint, weight=20, node="pve-node-7", tenant=cls.tenant
        )
        other = make_endpoint("pve-ui-other")
        ProxmoxAssignmentRule.objects.create(
            endpoint=other, weight=20, node="pve-node-8", tenant=cls.tenant
        )
        cls.user = User.objects.create_user(username="rules-viewer", is_superuser=True)

    def setUp(self):
        self.client = Client()
        self.client.force_login(self.user)

    def test_the_endpoint_page_lists_its_rules(self):
        page = self.client.get(self.endpoint.get_absolute_url()).content.decode()
        # The panel loads its table with htmx: the endpoint's rules, filtered by it.
        found = re.search(r'hx-get="(/plugins/proxbox/assignment-rules/\?[^"]+)"', page)
        self.assertIsNotNone(found, "no assignment-rules table panel on the endpoint page")
        self.assertIn(f"endpoint_id={self.endpoint.pk}", found[1])
        table = self.client.get(html.unescape(found[1])).content.decode()
        self.assertIn("pve-node-7", table)
        self.assertIn(self.rule.get_absolute_url(), table)
        self.assertNotIn("pve-node-8", table)  # another endpoint's rule

    def test_list_detail_and_form(self):
        listing = self.client.get(reverse("plugins:netbox_proxbox:proxmoxassignmentrule_list"))
        self.assertEqual(listing.status_code, 200)
        self.assertIn("pve-node-7", listing.content.decode())
        self.assertIn("pve-node-8", listing.content.decode())
        detail = self.client.get(self.rule.get_absolute_url())
        self.assertEqual(detail.status_code, 200)
        self.assertIn("Globex", detail.content.decode())
        add = reverse("plugins:netbox_proxbox:proxmoxassignmentrule_add")
        refused = self.client.post(
            add, {"endpoint": self.endpoint.pk, "weight": 30, "name_pattern": "a(", "tenant": ""}
        )
        self.assertEqual(refused.status_code, 200)  # the form again, with its errors
        self.assertIn("Not a valid regular expression", refused.content.decode())
        created = self.client.post(
            add,
            {"endpoint": self.endpoint.pk, "weight": 30, "pool": "lab", "tenant": self.tenant.pk},
        )
        self.assertEqual(created.status_code, 302, created.content[:2000])
        self.assertTrue(ProxmoxAssignmentRule.objects.filter(weight=30, pool="lab").exists())

    def test_bulk_edit_goes_through_validation(self):
        second = ProxmoxAssignmentRule.objects.create(
            endpoint=self.endpoint, weight=21, pool="lab", tenant=self.tenant
        )
        url = reverse("plugins:netbox_proxbox:proxmoxassignmentrule_bulk_edit")
        pks = [self.rule.pk, second.pk]
        self.client.post(url, {"pk": pks, "_apply": "1", "enabled": "False"})
        self.assertEqual(
            set(ProxmoxAssignmentRule.objects.filter(pk__in=pks).values_list("enabled")),
            {(False,)},
        )
        # Clearing the only assignment would leave rules that assign nothing: refused.
        self.client.post(url, {"pk": pks, "_apply": "1", "_nullify": ["tenant"]})
        self.assertEqual(
            set(ProxmoxAssignmentRule.objects.filter(pk__in=pks).values_list("tenant_id")),
            {(self.tenant.pk,)},
        )

    def test_graphql_lists_an_endpoints_rules(self):
        query = "{ proxmox_assignment_rule_list { weight node tenant { name } endpoint { name } } }"
        response = self.client.post("/graphql/", {"query": query}, content_type="application/json")
        self.assertEqual(response.status_code, 200, response.content)
        rules = response.json()["data"]["proxmox_assignment_rule_list"]
        self.assertIn(
            {
                "weight": 20,
                "node": "pve-node-7",
                "tenant": {"name": "Globex"},
                "endpoint": {"name": "pve-ui"},
            },
            rules,
        )

    def test_bulk_import_resolves_names(self):
        response = self.client.post(
            reverse("plugins:netbox_proxbox:proxmoxassignmentrule_bulk_import"),
            {
                "data": "endpoint,weight,proxmox_tag,tenant\npve-ui,40,db,Globex",
                "format": "csv",
                "csv_delimiter": ",",
            },
        )
        self.assertIn(response.status_code, (200, 302))
        rule = ProxmoxAssignmentRule.objects.get(weight=40)
        self.assertEqual((rule.proxmox_tag, rule.tenant_id), ("db", self.tenant.pk))
