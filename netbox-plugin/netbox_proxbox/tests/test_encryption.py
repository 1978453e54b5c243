"""Token secrets are Fernet-encrypted with the configured key; a missing or bad key is explicit."""

from __future__ import annotations

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import SimpleTestCase, override_settings

from netbox_proxbox.encryption import SecretDecryptionError, decrypt_secret, encrypt_secret
from netbox_proxbox.models import ProxmoxEndpoint


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
