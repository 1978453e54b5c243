"""Token secrets are Fernet-encrypted with the configured key; a missing or bad key is explicit."""

from __future__ import annotations

import io

from core.models import ObjectChange
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import SimpleTestCase, TestCase, override_settings

from netbox_proxbox.encryption import SecretDecryptionError, decrypt_secret, encrypt_secret
from netbox_proxbox.models import ProxmoxEndpoint
from netbox_proxbox.tests.base import make_endpoint


def plugins_config(**proxbox):
    return {**settings.PLUGINS_CONFIG, "netbox_proxbox": proxbox}


class EncryptionTest(SimpleTestCase):
    def test_round_trip_and_ciphertext_only(self):
        endpoint = ProxmoxEndpoint(name="e")
        endpoint.token_secret = "abc123"
        self.assertNotIn("abc123", endpoint.token_secret_ciphertext)
        self.assertEqual(endpoint.reveal_token_secret(), "abc123")
        endpoint.token_secret = ""
        self.assertEqual(
            (endpoint.token_secret_ciphertext, endpoint.reveal_token_secret()), ("", "")
        )
        with self.assertRaises(AttributeError):
            endpoint.token_secret  # noqa: B018  (write-only)

    def test_missing_or_malformed_key_is_improperly_configured(self):
        for label, config in (
            ("missing", {}),
            ("empty", {"encryption_key": ""}),
            ("bad", {"encryption_key": "x"}),
        ):
            with (
                self.subTest(label),
                override_settings(PLUGINS_CONFIG=plugins_config(**config)),
                self.assertRaisesMessage(ImproperlyConfigured, "encryption_key"),
            ):
                encrypt_secret("s")

    def test_rotated_key_is_reported_not_garbled(self):
        ciphertext = encrypt_secret("s")
        with (
            override_settings(
                PLUGINS_CONFIG=plugins_config(encryption_key=Fernet.generate_key().decode())
            ),
            self.assertRaises(SecretDecryptionError),
        ):
            decrypt_secret(ciphertext)


def keys(*configured):
    return override_settings(PLUGINS_CONFIG=plugins_config(encryption_key=list(configured)))


class KeyListTest(SimpleTestCase):
    """A list of keys, newest first: encrypt with the newest, decrypt with any."""

    def setUp(self):
        self.new, self.old = Fernet.generate_key().decode(), Fernet.generate_key().decode()

    def test_old_ciphertext_still_decrypts_and_new_uses_the_newest_key(self):
        with keys(self.old):
            old_ciphertext = encrypt_secret("s-old")
        with keys(self.new, self.old):
            self.assertEqual(decrypt_secret(old_ciphertext), "s-old")
            fresh = encrypt_secret("s-new")
        self.assertEqual(Fernet(self.new).decrypt(fresh.encode()), b"s-new")
        with keys(self.new), self.assertRaises(SecretDecryptionError):
            decrypt_secret(old_ciphertext)

    def test_malformed_entry_is_named(self):
        for configured in ([], [self.new, "x"], [self.new, ""]):
            with (
                self.subTest(configured),
                keys(*configured),
                self.assertRaisesMessage(ImproperlyConfigured, "encryption_key"),
            ):
                encrypt_secret("s")
        with keys(self.new, "x"), self.assertRaisesMessage(ImproperlyConfigured, "entry 1"):
            encrypt_secret("s")


class RotateKeysCommandTest(TestCase):
    """manage.py proxbox_rotate_keys re-encrypts with the newest key, all or nothing."""

    def setUp(self):
        self.new, self.old = Fernet.generate_key().decode(), Fernet.generate_key().decode()
        with keys(self.old):
            make_endpoint("pve-stale")
        with keys(self.new):
            make_endpoint("pve-current")
            make_endpoint("pve-empty")
        ProxmoxEndpoint.objects.filter(name="pve-empty").update(token_secret_ciphertext="")

    def rotate(self, *configured) -> str:
        out = io.StringIO()
        with keys(*configured):
            call_command("proxbox_rotate_keys", stdout=out)
        return out.getvalue()

    def ciphertexts(self) -> dict:
        return dict(ProxmoxEndpoint.objects.values_list("name", "token_secret_ciphertext"))

    def test_rotation_then_old_key_can_go_and_rerun_changes_nothing(self):
        changes_before = ObjectChange.objects.count()
        current_before = self.ciphertexts()["pve-current"]
        out = self.rotate(self.new, self.old)
        self.assertIn("re-encrypted 1 token secret(s) with the newest key; 1 already used it", out)
        after = self.ciphertexts()
        self.assertEqual(after["pve-current"], current_before)
        self.assertEqual(after["pve-empty"], "")
        with keys(self.new):
            revealed = {e.name: e.reveal_token_secret() for e in ProxmoxEndpoint.objects.all()}
        self.assertEqual(
            revealed,
            {"pve-stale": "s3cret-pve-stale", "pve-current": "s3cret-pve-current", "pve-empty": ""},
        )
        self.assertEqual(ObjectChange.objects.count(), changes_before)
        out = self.rotate(self.new, self.old)
        self.assertIn("re-encrypted 0 token secret(s) with the newest key; 2 already used it", out)
        self.assertEqual(self.ciphertexts(), after)

    def test_undecryptable_secret_aborts_without_writing(self):
        with keys(Fernet.generate_key().decode()):
            make_endpoint("pve-lost")
        before = self.ciphertexts()
        with self.assertRaisesMessage(CommandError, "pve-lost"):
            self.rotate(self.new, self.old)
        self.assertEqual(self.ciphertexts(), before)

    def test_missing_key_is_one_clear_error(self):
        with self.assertRaisesMessage(CommandError, "encryption_key"):
            self.rotate()
