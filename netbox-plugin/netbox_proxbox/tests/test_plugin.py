from django.urls import reverse
from rest_framework import status
from utilities.testing import APITestCase


class PluginStatusTest(APITestCase):
    def test_plugin_listed_in_api_status(self):
        response = self.client.get(reverse("api-status"), **self.header)
        self.assertEqual(response.status_code, status.HTTP_200_OK)
        self.assertIn("netbox_proxbox", response.json()["plugins"])
