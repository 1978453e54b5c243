"""The documented recovery for duplicate tracking rows, through validated CRUD only."""

from __future__ import annotations

from django.test import TestCase
from rest_framework.test import APIClient
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster

from .base import (
    CLAIM_UPDATE_PERMS,
    api_url,
    auth_header,
    claim_url,
    make_endpoint,
    make_references,
    make_user,
)

TRACKING_CRUD = ("netbox_proxbox.view_proxmoxcluster", "netbox_proxbox.change_proxmoxcluster")


class DuplicateTrackingRecoveryTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.user, cls.token = make_user("operator", (*CLAIM_UPDATE_PERMS, *TRACKING_CRUD))
        cls.endpoint = make_endpoint("pve-a")
        # What the backfill leaves for several identical historical rows: the endpoint owns the
        # cluster, and each row still links it.
        cls.cluster = Cluster.objects.create(name="legacy-name", type=cls.cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.canonical = ProxmoxCluster(
            endpoint=cls.endpoint, name="legacy-name", netbox_cluster=cls.cluster
        )
        cls.canonical.save(claim=True)
        ProxboxClusterSyncState(cluster=cls.cluster, proxmox_cluster=cls.canonical).save(claim=True)
        cls.obsolete = ProxmoxCluster(
            endpoint=cls.endpoint, name="old-name", netbox_cluster=cls.cluster
        )
        cls.obsolete.save(claim=True)

    def api(self, method, url, data=None):
        return getattr(APIClient(), method)(url, data, format="json", **auth_header(self.token))

    def claim(self):
        return self.api(
            "post",
            claim_url(self.endpoint),
            {"name": "current-name", "mode": "cluster", "cluster_type": self.cluster_type.pk},
        )

    def test_claim_refuses_until_obsolete_duplicates_are_cleared_then_keeps_ownership(self):
        refused = self.claim()
        self.assertEqual(refused.status_code, 409, refused.content)
        self.assertEqual(refused.json()["code"], "duplicate_tracking")
        self.assertIn(str(self.canonical.pk), refused.json()["detail"])

        # Keep the canonical row (the sidecar references it); clear the obsolete link.
        cleared = self.api(
            "patch", api_url("proxmoxcluster", self.obsolete.pk), {"netbox_cluster": None}
        )
        self.assertEqual(cleared.status_code, 200, cleared.content)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, self.cluster.pk)  # ownership untouched

        # Align the canonical row's source name with the current discovery result.
        aligned = self.api(
            "patch", api_url("proxmoxcluster", self.canonical.pk), {"name": "current-name"}
        )
        self.assertEqual(aligned.status_code, 200, aligned.content)

        accepted = self.claim()
        self.assertEqual(accepted.status_code, 200, accepted.content)
        body = accepted.json()
        self.assertEqual(body["cluster"]["id"], self.cluster.pk)
        self.assertEqual(body["proxmox_cluster"], self.canonical.pk)
        self.assertTrue(body["changed"])  # the native cluster follows the reported name
        self.obsolete.refresh_from_db()
        self.assertIsNone(self.obsolete.netbox_cluster_id)

    def test_an_unlinked_row_carrying_the_name_also_needs_review(self):
        self.api("patch", api_url("proxmoxcluster", self.obsolete.pk), {"netbox_cluster": None})
        self.api("patch", api_url("proxmoxcluster", self.obsolete.pk), {"name": "current-name"})
        refused = self.claim()
        self.assertEqual(refused.status_code, 409, refused.content)
        self.assertEqual(refused.json()["code"], "tracking_name_clash")
