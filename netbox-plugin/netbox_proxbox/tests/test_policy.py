"""Per-endpoint sync policy over REST and the UI form: validated, and what the backend reads."""

from __future__ import annotations

from django.test import TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from users.models import Token, User

from netbox_proxbox.models.policy import parse_vmid_ranges

from .base import api_url, auth_header, compliance_form_fields, grant, make_endpoint
from .test_sync_now import CHANGE


class SyncPolicyRestTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-p")
        cls.operator = User.objects.create_user(username="operator")
        for name in CHANGE:
            grant(cls.operator, name)
        cls.token = Token.objects.create(user=cls.operator, write_enabled=True)

    def patch(self, **body):
        return APIClient().patch(
            api_url("proxmoxendpoint", self.endpoint.pk),
            body,
            format="json",
            **auth_header(self.token),
        )

    def test_defaults_are_the_safe_ones(self):
        body = (
            APIClient()
            .get(api_url("proxmoxendpoint", self.endpoint.pk), **auth_header(self.token))
            .json()
        )
        policy = body["sync_policy"]
        # Unset: the backend's own settings decide (offline, skip templates by default).
        self.assertIsNone(policy["removed_guests"])
        self.assertIsNone(policy["sync_templates"])
        self.assertTrue(policy["keep_operator_objects"])
        self.assertIs(policy["adopt_existing"], False)  # adoption is opt-in
        self.assertIs(body["adopt_existing"], False)
        # Every switch on but the guest network prefixes (opt-in).
        self.assertEqual(policy["modes"].pop("prefixes"), "off")
        self.assertEqual(body["prefixes_mode"]["value"], "off")
        self.assertEqual(set(policy["modes"].values()), {"always"})
        self.assertEqual(
            set(policy["modes"]),
            {"guests", "nodes", "interfaces", "ips", "disks", "vlans", "tags", "records", "sdn"},
        )
        self.assertEqual(policy["protected_fields"], [])

    def test_every_switch_round_trips_into_the_policy_the_backend_reads(self):
        response = self.patch(
            removed_guests="delete",
            sync_templates=True,
            guests_mode="create_only",
            disks_mode="off",
            records_mode="create_only",
            sdn_mode="off",
            prefixes_mode="always",
            protected_fields=["name", "primary_ip"],
            keep_operator_objects=False,
            adopt_existing=True,
            exclude_vmids="900-999, 150",
            exclude_names=["test-*"],
            exclude_tags=["nosync"],
            exclude_nodes=["pve3"],
            exclude_pools=["lab"],
        )
        self.assertEqual(response.status_code, 200, response.content)
        policy = response.json()["sync_policy"]
        self.assertEqual(policy["removed_guests"], "delete")
        self.assertTrue(policy["sync_templates"])
        self.assertEqual(policy["modes"]["guests"], "create_only")
        self.assertEqual(policy["modes"]["disks"], "off")
        self.assertEqual(policy["modes"]["nodes"], "always")
        self.assertEqual(policy["modes"]["records"], "create_only")
        self.assertEqual(policy["modes"]["sdn"], "off")
        self.assertEqual(policy["modes"]["prefixes"], "always")
        self.assertEqual(policy["protected_fields"], ["name", "primary_ip"])
        self.assertFalse(policy["keep_operator_objects"])
        self.assertIs(policy["adopt_existing"], True)
        self.assertEqual(
            policy["exclude"],
            {
                "vmids": [[150, 150], [900, 999]],
                "names": ["test-*"],
                "tags": ["nosync"],
                "nodes": ["pve3"],
                "pools": ["lab"],
            },
        )

    def test_bad_values_are_refused_naming_the_field_and_nothing_is_written(self):
        cases = {
            "guests_mode": "sometimes",
            "records_mode": "create-only",
            "sdn_mode": "sometimes",
            "prefixes_mode": "on",
            "removed_guests": "archive",
            "protected_fields": ["name", "colour"],
            "exclude_vmids": "100-199, 150-250",
        }
        for field, value in cases.items():
            with self.subTest(field=field):
                response = self.patch(**{field: value, "description": "must not stick"})
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn(field, response.json())
        for field, value in {
            "exclude_vmids": "abc",
            "exclude_names": ["a", "a"],
            "exclude_nodes": [" "],
        }.items():
            with self.subTest(field=field):
                response = self.patch(**{field: value})
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn(field, response.json())
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.description, "")
        self.assertEqual(self.endpoint.guests_mode, "always")
        self.assertEqual(self.endpoint.records_mode, "always")
        self.assertEqual(self.endpoint.sdn_mode, "always")
        self.assertEqual(self.endpoint.prefixes_mode, "off")
        self.assertEqual(self.endpoint.exclude_vmids, "")

    def test_offline_then_delete_takes_a_number_of_days(self):
        answer = self.patch(removed_guests="offline-then-delete", removed_guests_days=30)
        self.assertEqual(answer.status_code, 200, answer.content)
        policy = answer.json()["sync_policy"]
        self.assertEqual(
            (policy["removed_guests"], policy["removed_guests_days"]), ("offline-then-delete", 30)
        )
        # Back to a policy without days: the days must go too.
        answer = self.patch(removed_guests="offline", removed_guests_days=None)
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertIsNone(answer.json()["sync_policy"]["removed_guests_days"])
        for body in (
            {"removed_guests": "offline-then-delete"},  # no days
            {"removed_guests": "offline-then-delete", "removed_guests_days": 0},
            {"removed_guests": "offline-then-delete", "removed_guests_days": 3651},
            {"removed_guests": "delete", "removed_guests_days": 7},  # days without counting
        ):
            with self.subTest(body=body):
                answer = self.patch(**body, description="must not stick")
                self.assertEqual(answer.status_code, 400, answer.content)
                self.assertIn("removed_guests_days", answer.json())
        self.endpoint.refresh_from_db()
        self.assertEqual((self.endpoint.removed_guests, self.endpoint.description), ("offline", ""))

    def test_blank_removed_guests_is_answered_and_nul_text_is_refused(self):
        # Both found by the e2e schemathesis run: "" answered outside the schema's enum,
        # and NUL in text a 500 from PostgreSQL.
        answer = self.patch(removed_guests="")
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertIsNone(answer.json()["removed_guests"])  # not set: the backend decides
        self.assertEqual(self.patch(removed_guests="keep").status_code, 200)
        answer = self.patch(removed_guests=None)  # the schema documents null: it unsets
        self.assertEqual(answer.status_code, 200, answer.content)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.removed_guests, "")
        answer = self.patch(exclude_vmids="100\x00")
        self.assertEqual(answer.status_code, 400, answer.content)
        self.assertIn("exclude_vmids", answer.json())

    def test_the_form_shows_a_field_error(self):
        self.client.force_login(self.operator)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        response = self.client.post(
            url,
            {
                "name": self.endpoint.name,
                "host": self.endpoint.host,
                "port": 8006,
                "token_id": self.endpoint.token_id,
                "mode": "cluster",
                "enabled": "on",
                "guests_mode": "always",
                "nodes_mode": "always",
                "interfaces_mode": "always",
                "ips_mode": "always",
                "disks_mode": "always",
                "vlans_mode": "always",
                "tags_mode": "always",
                "records_mode": "always",
                "keep_operator_objects": "on",
                "exclude_vmids": "100-300, 200",
            },
        )
        self.assertEqual(response.status_code, 200)
        self.assertIn("ranges overlap at 200-200", response.content.decode())

    def test_adoption_is_switched_on_in_the_form_and_shown_on_the_endpoint(self):
        self.client.force_login(self.operator)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        fields = edit_form_fields(
            self.endpoint,
            **{f"{kind}_mode": "always" for kind in ("guests", "nodes", "interfaces", "ips")},
            **{f"{kind}_mode": "always" for kind in ("disks", "vlans", "tags")},
            adopt_existing="on",
        )
        response = self.client.post(url, fields)
        self.assertEqual(response.status_code, 302, response.content.decode()[-2000:])
        self.endpoint.refresh_from_db()
        self.assertTrue(self.endpoint.adopt_existing)
        page = self.client.get(self.endpoint.get_absolute_url()).content.decode()
        row = page.split('id="adopt-existing"', 1)[1].split("</td>", 1)[0]
        self.assertIn("mdi-check-bold", row)

    def test_family_modes_are_set_in_the_form_refused_when_unknown_and_shown_on_the_endpoint(
        self,
    ):
        self.client.force_login(self.operator)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        # The one-switch families: every record type, everything SDN, the guest networks'
        # prefixes (off until switched on; a form posted without it keeps it off).
        for family, label, default, chosen, shown in (
            ("records", "Storage and data-protection records", "always", "off", "Off"),
            ("sdn", "SDN", "always", "off", "Off"),
            ("prefixes", "Guest network prefixes", "off", "always", "Create, update and delete"),
        ):
            with self.subTest(family=family):
                field = f"{family}_mode"
                fields = edit_form_fields(self.endpoint)
                refused = self.client.post(url, {**fields, field: "sometimes"})
                self.assertEqual(refused.status_code, 200)
                self.assertIn("Select a valid choice", refused.content.decode())
                self.endpoint.refresh_from_db()
                self.assertEqual(getattr(self.endpoint, field), default)
                response = self.client.post(url, {**fields, field: chosen})
                self.assertEqual(response.status_code, 302, response.content.decode()[-2000:])
                self.endpoint.refresh_from_db()
                self.assertEqual(getattr(self.endpoint, field), chosen)
                self.assertEqual(self.endpoint.policy()["modes"][family], chosen)
                page = self.client.get(self.endpoint.get_absolute_url()).content.decode()
                row = page.split(f'id="{family}-mode"', 1)[1].split("</td>", 1)[0]
                self.assertIn(shown, row)
                self.assertIn(label, page)
                if default != chosen:
                    self.client.post(url, fields)
                    self.endpoint.refresh_from_db()
                    self.assertEqual(getattr(self.endpoint, field), default)

    def test_live_sync_interval_is_validated_filtered_and_shown(self):
        for bad in (0, -1, 3601, "often"):
            with self.subTest(value=bad):
                answer = self.patch(watch_interval=bad, description="must not stick")
                self.assertEqual(answer.status_code, 400, answer.content)
                self.assertIn("watch_interval", answer.json())
        self.endpoint.refresh_from_db()
        self.assertEqual((self.endpoint.watch_interval, self.endpoint.description), (None, ""))
        answer = self.patch(watch_interval=5)
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertEqual(answer.json()["watch_interval"], 5)
        # What the backend asks for: the watched endpoints and their intervals.
        listed = APIClient().get(
            api_url("proxmoxendpoint"),
            {"enabled": "true", "watch_interval__gte": 1, "fields": "id,watch_interval"},
            **auth_header(self.token),
        )
        self.assertEqual(listed.json()["results"], [{"id": self.endpoint.pk, "watch_interval": 5}])
        self.client.force_login(self.operator)
        page = self.client.get(self.endpoint.get_absolute_url()).content.decode()
        row = page.split('id="live-sync"', 1)[1].split("</td>", 1)[0]
        self.assertIn("every 5 s", row)
        # The edit form: refused below the minimum, and empty turns the watch off.
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        fields = edit_form_fields(self.endpoint)
        refused = self.client.post(url, {**fields, "watch_interval": "0"})
        self.assertEqual(refused.status_code, 200)
        self.assertIn("greater than or equal to 1", refused.content.decode())
        response = self.client.post(url, {**fields, "watch_interval": ""})
        self.assertEqual(response.status_code, 302, response.content.decode()[-2000:])
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.watch_interval)

    def test_the_form_renders_the_policy_widgets_as_netbox_does_and_saves_them(self):
        self.client.force_login(self.operator)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        page = self.client.get(url).content.decode()
        protected = page.split('name="protected_fields"', 1)[1].split("</select>", 1)[0]
        self.assertIn("multiple", protected.split(">", 1)[0])
        self.assertIn('class="form-select', protected.split(">", 1)[0])
        self.assertIn(">Primary IP</option>", protected)
        templates = page.split('name="sync_templates"', 1)[1].split("</select>", 1)[0]
        self.assertNotIn("Unknown", templates)
        self.assertRegex(templates, r'value=""\s+selected\s*>The backend&#x27;s setting')
        fields = edit_form_fields(
            self.endpoint, protected_fields=["name", "primary_ip"], sync_templates="False"
        )
        response = self.client.post(url, fields)
        self.assertEqual(response.status_code, 302, response.content.decode()[-2000:])
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.protected_fields, ["name", "primary_ip"])
        self.assertIs(self.endpoint.sync_templates, False)
        page = self.client.get(url).content.decode()
        templates = page.split('name="sync_templates"', 1)[1].split("</select>", 1)[0]
        self.assertRegex(templates, r'value="False"\s+selected')
        self.client.post(url, {**fields, "sync_templates": ""})
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.sync_templates)


def edit_form_fields(endpoint, **fields) -> dict:
    """The endpoint edit form's required fields as they stand, plus `fields`."""
    return {
        "name": endpoint.name,
        "host": endpoint.host,
        "port": endpoint.port,
        "token_id": endpoint.token_id,
        "mode": "cluster",
        "enabled": "on",
        # Left out, the checkbox would turn verification off (a change of connection target).
        "verify_tls": "on" if endpoint.verify_tls else "",
        "keep_operator_objects": "on",
        **compliance_form_fields(),
        **fields,
    }


class VmidRangeTest(TestCase):
    def test_parsing(self):
        self.assertEqual(parse_vmid_ranges(""), [])
        self.assertEqual(parse_vmid_ranges("250, 100-199"), [(100, 199), (250, 250)])
        for bad in ("99", "200-100", "1-2-3", "x", "100-199,199"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                parse_vmid_ranges(bad)
