"""Bulk import of endpoints through NetBox's import view: secrets encrypted, never echoed."""

from __future__ import annotations

from core.models import Job, ObjectChange
from django.test import Client, TestCase
from django.urls import reverse
from users.models import User

from netbox_proxbox.models import ProxmoxEndpoint

from .base import auth_header, make_endpoint, make_references, make_user

IMPORT_URL = "plugins:netbox_proxbox:proxmoxendpoint_bulk_import"
SECRET_A, SECRET_B = "imported-secret-aaaa", "imported-secret-bbbb"


class EndpointBulkImportTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()

    def setUp(self):
        self.user = User.objects.create_user(username="importer", is_superuser=True)
        self.client = Client()
        self.client.force_login(self.user)

    def post(self, data: str, fmt: str = "csv", **extra):
        return self.client.post(
            reverse(IMPORT_URL),
            {"data": data, "format": fmt, "csv_delimiter": ",", **extra},
            follow=True,
        )

    def assert_nowhere(self, response, *secrets):
        changes = " ".join(
            str(c.prechange_data) + str(c.postchange_data) for c in ObjectChange.objects.all()
        )
        for secret in secrets:
            self.assertNotIn(secret, response.content.decode())
            self.assertNotIn(secret, changes)
            for ciphertext in ProxmoxEndpoint.objects.values_list(
                "token_secret_ciphertext", flat=True
            ):
                self.assertNotIn(secret, ciphertext)

    def test_csv_import_encrypts_secrets_and_resolves_names(self):
        response = self.post(
            "name,host,token_id,token_secret,mode,site,tenant\n"
            f"pve-csv-a,a.example.net,proxbox@pve!sync,{SECRET_A},standalone,{self.site.name},{self.tenant.name}\n"
            f"pve-csv-b,b.example.net,proxbox@pve!sync,{SECRET_B},cluster,,\n"
        )
        self.assertEqual(response.status_code, 200)
        self.assertContains(response, "Imported 2")
        a = ProxmoxEndpoint.objects.get(name="pve-csv-a")
        b = ProxmoxEndpoint.objects.get(name="pve-csv-b")
        self.assertEqual((a.reveal_token_secret(), b.reveal_token_secret()), (SECRET_A, SECRET_B))
        self.assertEqual(
            (a.mode, a.site, a.tenant, a.port), ("standalone", self.site, self.tenant, 8006)
        )
        self.assertEqual(b.mode, "cluster")
        self.assert_nowhere(response, SECRET_A, SECRET_B)

    def test_yaml_import_and_background_request_runs_inline(self):
        response = self.post(
            f"- name: pve-yaml\n  host: y.example.net\n  port: 8443\n  token_id: proxbox@pve!sync\n"
            f"  token_secret: {SECRET_A}\n  verify_tls: false\n",
            fmt="yaml",
            background_job="on",
        )
        self.assertContains(response, "Imported 1")
        endpoint = ProxmoxEndpoint.objects.get(name="pve-yaml")
        self.assertEqual((endpoint.port, endpoint.verify_tls), (8443, False))
        self.assertEqual(endpoint.reveal_token_secret(), SECRET_A)
        # A queued import would have carried the plaintext into the job queue.
        self.assertFalse(Job.objects.exists())
        self.assert_nowhere(response, SECRET_A)

    def test_update_by_id_without_the_column_keeps_the_secret(self):
        endpoint = make_endpoint("pve-kept")
        response = self.post(f"id,description\n{endpoint.pk},moved to rack 4\n")
        self.assertContains(response, "Imported 1")
        endpoint.refresh_from_db()
        self.assertEqual(
            (endpoint.description, endpoint.reveal_token_secret()),
            ("moved to rack 4", "s3cret-pve-kept"),
        )

    def test_errors_name_the_field_like_rest_and_nothing_is_written_or_echoed(self):
        bad_rows = (
            ("token_id", "pve-bad-1,h.example.net,not-a-token-id,{secret},cluster"),
            ("port", "pve-bad-2,h.example.net,proxbox@pve!sync,{secret},cluster,70000"),
            ("mode", "pve-bad-3,h.example.net,proxbox@pve!sync,{secret},sideways"),
        )
        _, token = make_user("rest-writer", ["netbox_proxbox.add_proxmoxendpoint"])
        for field, row in bad_rows:
            with self.subTest(field):
                columns = "name,host,token_id,token_secret,mode" + (
                    ",port" if field == "port" else ""
                )
                good = f"pve-good,g.example.net,proxbox@pve!sync,{SECRET_B},cluster" + (
                    ",8006" if field == "port" else ""
                )
                response = self.post(f"{columns}\n{good}\n{row.format(secret=SECRET_A)}\n")
                self.assertEqual(response.status_code, 200)
                self.assertContains(response, f"Record 2 {field}:")
                self.assertFalse(ProxmoxEndpoint.objects.exists())
                self.assert_nowhere(response, SECRET_A, SECRET_B)
                self.assertContains(response, "contained token secrets and was cleared")

                values = dict(
                    zip(columns.split(","), row.format(secret=SECRET_A).split(","), strict=True)
                )
                if "port" in values:
                    values["port"] = int(values["port"])
                rest = Client().post(
                    reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-list"),
                    values,
                    content_type="application/json",
                    **auth_header(token),
                )
                self.assertEqual(rest.status_code, 400)
                self.assertEqual(list(rest.json()), [field])
