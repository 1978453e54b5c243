"""The backend-only credentials API: who may read an endpoint's decrypted token, and how."""

from __future__ import annotations

import logging

from core.models import ObjectChange
from django.test import TestCase
from django.urls import reverse
from netbox.registry import registry
from rest_framework.test import APIClient
from users.models import Token, User

from netbox_proxbox.models import ProxmoxEndpoint

from .base import api_url, auth_header, grant, make_endpoint

VIEW = "netbox_proxbox.view_proxmoxendpoint"
REVEAL = "netbox_proxbox.reveal_credentials_proxmoxendpoint"


def grant_perm(user, name, constraints=None):
    """`grant`, but for the custom action too (its name contains an underscore)."""
    if name == REVEAL:
        return grant(user, VIEW, constraints, actions=["reveal_credentials"])
    return grant(user, name, constraints)


def credentials_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-credentials", kwargs={"pk": pk})


class CapturedLogs(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


class CredentialsPermissionTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-a")
        cls.other = make_endpoint("pve-b")

    def token_for(self, *perms, constraints=None, superuser=False, write_enabled=True):
        user = User.objects.create_user(
            username=f"reader{User.objects.count()}", is_superuser=superuser
        )
        for name in perms:
            grant_perm(user, name, (constraints or {}).get(name))
        return Token.objects.create(user=user, write_enabled=write_enabled)

    def read(self, token, endpoint=None):
        client = APIClient()
        headers = auth_header(token) if token is not None else {}
        return client.get(credentials_url(endpoint or self.endpoint), **headers)

    def test_permission_matrix(self):
        only_a = {"name": "pve-a"}
        cases = [
            ("anonymous", None, self.endpoint, (401, 403)),
            ("no permission at all", self.token_for(), self.endpoint, (404,)),
            ("view only", self.token_for(VIEW), self.endpoint, (403,)),
            ("action without view", self.token_for(REVEAL), self.endpoint, (404,)),
            ("view and action", self.token_for(VIEW, REVEAL), self.endpoint, (200,)),
            (
                "read-only token with the action",
                self.token_for(VIEW, REVEAL, write_enabled=False),
                self.endpoint,
                (200,),
            ),
            (
                "action constrained to pve-a, reading pve-b",
                self.token_for(VIEW, REVEAL, constraints={REVEAL: only_a}),
                self.other,
                (403,),
            ),
            (
                "action constrained to pve-a, reading pve-a",
                self.token_for(VIEW, REVEAL, constraints={REVEAL: only_a}),
                self.endpoint,
                (200,),
            ),
            (
                "view constrained to pve-a, reading pve-b",
                self.token_for(VIEW, REVEAL, constraints={VIEW: only_a}),
                self.other,
                (404,),
            ),
            ("superuser without the action", self.token_for(superuser=True), self.endpoint, (403,)),
            (
                "superuser granted the action",
                self.token_for(REVEAL, superuser=True),
                self.endpoint,
                (200,),
            ),
            ("unknown endpoint", self.token_for(VIEW, REVEAL), 999999, (404,)),
        ]
        for label, token, endpoint, expected in cases:
            with self.subTest(label):
                response = self.read(token, endpoint)
                self.assertIn(response.status_code, expected, response.content)
                if token is not None:  # anonymous requests are refused before the view runs
                    self.assertEqual(response["Cache-Control"], "no-store")
                if response.status_code == 200:
                    target = ProxmoxEndpoint.objects.get(pk=getattr(endpoint, "pk", endpoint))
                    self.assertEqual(
                        response.json(),
                        {"token_id": "proxbox@pve!sync", "token_secret": f"s3cret-{target.name}"},
                    )
                else:
                    self.assertNotIn("s3cret", response.content.decode())

    def test_group_assigned_action_counts(self):
        from users.models import Group, ObjectPermission

        token = self.token_for(VIEW)
        group = Group.objects.create(name="proxbox-backend")
        token.user.groups.add(group)
        permission = grant_perm(token.user, REVEAL)
        permission.users.clear()
        permission.groups.add(group)
        self.assertEqual(self.read(token).status_code, 200)
        ObjectPermission.objects.filter(pk=permission.pk).update(enabled=False)
        self.assertEqual(self.read(token).status_code, 403)

    def test_endpoint_without_secret_answers_empty(self):
        endpoint = ProxmoxEndpoint.objects.create(name="bare", host="bare.example", token_id="x")
        response = self.read(self.token_for(VIEW, REVEAL), endpoint)
        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.json()["token_secret"], "")

    def test_only_get_reveals(self):
        token = self.token_for(VIEW, REVEAL, "netbox_proxbox.change_proxmoxendpoint")
        for method in ("post", "put", "patch", "delete"):
            with self.subTest(method):
                response = getattr(APIClient(), method)(
                    credentials_url(self.endpoint), {}, format="json", **auth_header(token)
                )
                # DRF checks permissions before it looks the method up: 403 or 405.
                self.assertIn(response.status_code, (403, 405))
                self.assertNotIn("s3cret", response.content.decode())

    def test_action_is_offered_in_the_permission_form(self):
        actions = registry["model_actions"]["netbox_proxbox.proxmoxendpoint"]
        self.assertIn("reveal_credentials", {action.name for action in actions})


class CredentialsStayOutOfRecordsTest(TestCase):
    def test_secret_absent_from_change_log_logs_and_endpoint_representation(self):
        secret = "plaintext-that-must-not-leak"
        user = User.objects.create_user(username="operator")
        for name in (VIEW, REVEAL, "netbox_proxbox.add_proxmoxendpoint"):
            grant_perm(user, name)
        grant(user, "netbox_proxbox.change_proxmoxendpoint")
        token = Token.objects.create(user=user, write_enabled=True)
        client = APIClient()

        captured = CapturedLogs()
        root = logging.getLogger()
        previous_level = root.level
        root.addHandler(captured)
        root.setLevel(logging.DEBUG)
        try:
            created = client.post(
                api_url("proxmoxendpoint"),
                {"name": "pve-log", "host": "h", "token_id": "a@pve!b", "token_secret": secret},
                format="json",
                **auth_header(token),
            )
            self.assertEqual(created.status_code, 201, created.content)
            pk = created.json()["id"]
            changes_before = ObjectChange.objects.count()
            response = client.get(credentials_url(pk), **auth_header(token))
            detail = client.get(api_url("proxmoxendpoint", pk), **auth_header(token))
        finally:
            root.removeHandler(captured)
            root.setLevel(previous_level)

        self.assertEqual(response.json()["token_secret"], secret)
        # Reading creates no change record, and no change record carries the secret.
        self.assertEqual(ObjectChange.objects.count(), changes_before)
        for change in ObjectChange.objects.filter(changed_object_id=pk):
            self.assertNotIn(secret, repr(change.prechange_data) + repr(change.postchange_data))
        self.assertNotIn(secret, detail.content.decode())
        self.assertFalse([line for line in captured.lines if secret in line])
