from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.test import SimpleTestCase
from django.urls import reverse
from rest_framework import status
from utilities.testing import APITestCase


class PluginStatusTest(APITestCase):
    def test_plugin_listed_in_api_status(self):
        response = self.client.get(reverse("api-status"), **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK)
        self.assertIn("netbox_proxbox", response.json()["plugins"])


class RequiredSettingsTest(SimpleTestCase):
    """NetBox's own plugin validation refuses a configuration without the encryption key."""

    def test_missing_encryption_key_stops_netbox(self):
        from netbox_proxbox import ProxboxConfig

        with self.assertRaisesMessage(ImproperlyConfigured, "'encryption_key'"):
            ProxboxConfig.validate({"backend_url": "http://x"}, ProxboxConfig.min_version)

    def test_configured_key_passes_and_defaults_fill_the_rest(self):
        from netbox_proxbox import ProxboxConfig

        user_config = {"encryption_key": Fernet.generate_key().decode()}
        ProxboxConfig.validate(user_config, ProxboxConfig.min_version)
        self.assertEqual(user_config["backend_url"], None)
