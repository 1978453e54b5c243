"""Where the backend sends the token secret is credential-bound, and secret changes are recorded.

A user who may only change an endpoint must not redirect its stored secret (host, port,
verify_tls) to a listener of their own: REST, the edit form, bulk edit and import refuse it
unless the same change enters a new secret or the user holds `reveal_credentials`.
"""

from __future__ import annotations

from core.models import ObjectChange
from django.test import Client, TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from users.models import User

from netbox_proxbox.models import ProxmoxEndpoint

from .base import api_url, auth_header, compliance_form_fields, grant, make_endpoint, make_user
from .test_credentials import REVEAL, credentials_url, grant_perm

VIEW = "netbox_proxbox.view_proxmoxendpoint"
CHANGE = "netbox_proxbox.change_proxmoxendpoint"
STORED_SECRET = "s3cret-pve-exfil"  # make_endpoint's secret for "pve-exfil"
NEW_SECRET = "0f3c2a9e-5b1d-4c77-9e2a-rotated-secret"
ATTACKER_HOST = "listener.attacker.invalid"


class ConnectionTargetBase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.editor, cls.editor_token = make_user("change-only-editor", (VIEW, CHANGE))
        cls.backend_user, cls.backend_token = make_user("proxbox-backend", (VIEW,))
        grant_perm(cls.backend_user, REVEAL)
        cls.revealer, cls.revealer_token = make_user("editor-with-reveal", (VIEW, CHANGE))
        grant_perm(cls.revealer, REVEAL)
        cls.superuser = User.objects.create_user(username="admin-root", is_superuser=True)
        from users.models import Token

        cls.super_token = Token.objects.create(user=cls.superuser)

    def setUp(self):
        self.endpoint = make_endpoint("pve-exfil")
        self.api_client = APIClient()

    def patch(self, token, body, endpoint=None):
        return self.api_client.patch(
            api_url("proxmoxendpoint", (endpoint or self.endpoint).pk),
            body,
            format="json",
            **auth_header(token),
        )

    def secret_the_backend_reads(self) -> str:
        response = self.api_client.get(
            credentials_url(self.endpoint), **auth_header(self.backend_token)
        )
        self.assertEqual(response.status_code, 200, response.content)
        return response.json()["token_secret"]

    def stored_target(self) -> tuple:
        return tuple(
            ProxmoxEndpoint.objects.filter(pk=self.endpoint.pk)
            .values_list("host", "port", "verify_tls")
            .get()
        )

    def changes(self):
        return ObjectChange.objects.filter(changed_object_id=self.endpoint.pk).order_by("pk")


class RestConnectionTargetTest(ConnectionTargetBase):
    def test_change_only_user_cannot_redirect_the_stored_secret(self):
        before = self.stored_target()
        changes_before = self.changes().count()
        for body, fields in (
            ({"port": 9443, "verify_tls": False}, {"port", "verify_tls"}),
            ({"host": ATTACKER_HOST}, {"host"}),
            ({"verify_tls": False}, {"verify_tls"}),
            # Removing the secret does not make the redirect safe: the backend would fall
            # back to its own PROXBOX_PROXMOX_TOKEN for an endpoint without one.
            ({"host": ATTACKER_HOST, "token_secret": ""}, {"host"}),
        ):
            with self.subTest(body=body):
                response = self.patch(self.editor_token, body)
                self.assertEqual(response.status_code, 400, response.content)
                self.assertEqual(set(response.json()), fields)
                self.assertIn("reveal_credentials", str(response.json()))
        self.assertEqual(self.stored_target(), before)
        self.assertEqual(self.changes().count(), changes_before)
        self.assertEqual(self.secret_the_backend_reads(), STORED_SECRET)

    def test_bulk_patch_is_refused_the_same_way(self):
        other = make_endpoint("pve-exfil-two")
        response = self.api_client.patch(
            api_url("proxmoxendpoint"),
            [{"id": self.endpoint.pk, "description": "fine"}, {"id": other.pk, "port": 1}],
            format="json",
            **auth_header(self.editor_token),
        )
        self.assertEqual(response.status_code, 400, response.content)
        self.assertIn("port", str(response.json()))
        other.refresh_from_db()
        self.endpoint.refresh_from_db()
        self.assertEqual((other.port, self.endpoint.description), (8006, ""))

    def test_superuser_without_reveal_credentials_is_refused_too(self):
        response = self.patch(self.super_token, {"host": ATTACKER_HOST})
        self.assertEqual(response.status_code, 400, response.content)
        self.assertEqual(list(response.json()), ["host"])

    def test_other_fields_stay_editable_with_change_permission(self):
        response = self.patch(self.editor_token, {"description": "rack 4", "enabled": False})
        self.assertEqual(response.status_code, 200, response.content)
        # Sending the current values back (as a full PUT-like client does) changes nothing.
        response = self.patch(self.editor_token, {"host": "pve-exfil.example.net", "port": 8006})
        self.assertEqual(response.status_code, 200, response.content)

    def test_reentering_the_secret_moves_it_and_the_old_one_never_reaches_the_new_target(self):
        response = self.patch(
            self.editor_token, {"host": ATTACKER_HOST, "port": 9443, "token_secret": NEW_SECRET}
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(self.stored_target(), (ATTACKER_HOST, 9443, True))
        # What the backend fetches for the new target is the secret entered with it.
        self.assertEqual(self.secret_the_backend_reads(), NEW_SECRET)
        change = self.changes().last()
        self.assertEqual(change.prechange_data["host"], "pve-exfil.example.net")
        self.assertEqual(change.postchange_data["host"], ATTACKER_HOST)
        self.assertEqual(
            (change.prechange_data["token_secret"], change.postchange_data["token_secret"]),
            ("set", "set (new secret)"),
        )
        self.assertNotIn(NEW_SECRET, repr(change.prechange_data) + repr(change.postchange_data))

    def test_holder_of_reveal_credentials_may_change_the_target_alone(self):
        response = self.patch(self.revealer_token, {"port": 9443, "verify_tls": False})
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(self.stored_target(), ("pve-exfil.example.net", 9443, False))
        self.assertEqual(self.secret_the_backend_reads(), STORED_SECRET)

    def test_constrained_reveal_credentials_covers_only_its_endpoints(self):
        user, token = make_user("reveal-elsewhere", (VIEW, CHANGE))
        grant(user, VIEW, {"name": "some-other-endpoint"}, actions=["reveal_credentials"])
        response = self.patch(token, {"port": 9443})
        self.assertEqual(response.status_code, 400, response.content)


class SecretRotationRecordTest(ConnectionTargetBase):
    def test_rotation_writes_a_change_record_without_the_value(self):
        changes_before = self.changes().count()
        response = self.patch(self.editor_token, {"token_secret": NEW_SECRET})
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(self.changes().count(), changes_before + 1)
        change = self.changes().last()
        self.assertEqual(change.user, self.editor)
        self.assertEqual(change.diff()["post"], {"token_secret": "set (new secret)"})
        self.assertEqual(change.diff()["pre"], {"token_secret": "set"})
        text = repr(change.prechange_data) + repr(change.postchange_data)
        for leaked in (NEW_SECRET, STORED_SECRET, "ciphertext"):
            self.assertNotIn(leaked, text)

    def test_removing_the_secret_is_recorded(self):
        response = self.patch(self.editor_token, {"token_secret": ""})
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(self.changes().last().diff()["post"], {"token_secret": "not set"})

    def test_malformed_secrets_are_refused_naming_the_field(self):
        for secret, reason in (
            (NEW_SECRET + "\n", "line breaks"),
            ("0f3c2a9e-5b1d\n4c77-9e2a-rotated", "line breaks"),
            ("tab\tinside-a-long-secret", "line breaks"),
            ("proxmox", "at least 16"),
            ("fifteen-chars!!", "at least 16"),
        ):
            with self.subTest(secret=secret):
                response = self.patch(self.editor_token, {"token_secret": secret})
                self.assertEqual(response.status_code, 400, response.content)
                self.assertEqual(list(response.json()), ["token_secret"])
                self.assertIn(reason, response.json()["token_secret"][0])
                self.assertNotIn(secret.strip(), response.content.decode())
        self.assertEqual(self.secret_the_backend_reads(), STORED_SECRET)
        self.assertEqual(self.patch(self.editor_token, {"token_secret": "x" * 16}).status_code, 200)


class FormConnectionTargetTest(ConnectionTargetBase):
    def form(self, **fields):
        return {
            "name": "pve-exfil",
            "host": "pve-exfil.example.net",
            "port": 8006,
            "token_id": "proxbox@pve!sync",
            "mode": "cluster",
            "enabled": "on",
            "verify_tls": "on",
            **compliance_form_fields(),
            **fields,
        }

    def post_edit(self, user, form):
        client = Client()
        client.force_login(user)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        return client.post(url, form)

    def test_edit_form_refuses_the_redirect_with_a_field_error(self):
        before = self.stored_target()
        form = self.form(port=9443)
        del form["verify_tls"]  # an unticked checkbox: verify_tls off
        response = self.post_edit(self.editor, form)
        self.assertEqual(response.status_code, 200)  # the form again, with its errors
        errors = response.context["form"].errors
        self.assertEqual(set(errors), {"port", "verify_tls"})
        self.assertIn("reveal_credentials", response.content.decode())
        self.assertEqual(self.stored_target(), before)

    def test_edit_form_accepts_the_redirect_with_the_secret_entered_again(self):
        response = self.post_edit(
            self.editor, self.form(host=ATTACKER_HOST, token_secret=NEW_SECRET)
        )
        self.assertEqual(response.status_code, 302)
        self.assertEqual(self.stored_target()[0], ATTACKER_HOST)
        self.assertEqual(self.secret_the_backend_reads(), NEW_SECRET)

    def test_edit_form_refuses_malformed_secrets(self):
        for secret in ("proxmox", NEW_SECRET + "\r\n"):
            with self.subTest(secret=secret):
                response = self.post_edit(self.editor, self.form(token_secret=secret))
                self.assertEqual(response.status_code, 200)
                self.assertEqual(list(response.context["form"].errors), ["token_secret"])
        self.assertEqual(self.secret_the_backend_reads(), STORED_SECRET)

    def test_bulk_edit_of_verify_tls_is_refused(self):
        grant(self.editor, "netbox_proxbox.change_proxmoxendpoint")
        client = Client()
        client.force_login(self.editor)
        response = client.post(
            reverse("plugins:netbox_proxbox:proxmoxendpoint_bulk_edit"),
            {"pk": [self.endpoint.pk], "_apply": "1", "verify_tls": "false"},
        )
        self.assertIn(response.status_code, (200, 302))
        self.assertEqual(self.stored_target()[2], True)

    def test_bulk_import_update_cannot_redirect(self):
        grant(self.editor, "netbox_proxbox.add_proxmoxendpoint")  # the import view's own
        client = Client()
        client.force_login(self.editor)
        response = client.post(
            reverse("plugins:netbox_proxbox:proxmoxendpoint_bulk_import"),
            {
                "data": f"id,host\n{self.endpoint.pk},{ATTACKER_HOST}\n",
                "format": "csv",
                "csv_delimiter": ",",
            },
        )
        self.assertEqual(response.status_code, 200)
        self.assertIn("host", response.content.decode())
        self.assertEqual(self.stored_target()[0], "pve-exfil.example.net")
