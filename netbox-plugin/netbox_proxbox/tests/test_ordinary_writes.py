"""Ordinary CRUD never claims, moves or erases ownership; the secret stays write-only."""

from __future__ import annotations

import json

from core.models import ObjectChange
from django.test import TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from users.models import User
from utilities.exceptions import AbortRequest
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

from .base import (
    CLAIM_UPDATE_PERMS,
    api_url,
    auth_header,
    claim_url,
    grant,
    make_endpoint,
    make_references,
    make_user,
)

CRUD_PERMS = tuple(
    f"netbox_proxbox.{action}_{model}"
    for action in ("view", "add", "change", "delete")
    for model in ("proxmoxendpoint", "proxmoxcluster", "proxboxclustersyncstate")
) + ("virtualization.view_cluster", "virtualization.delete_cluster")


class OrdinaryWriteBase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.user, cls.token = make_user("operator", set(CLAIM_UPDATE_PERMS) | set(CRUD_PERMS))
        cls.superuser = User.objects.create_user(username="root", is_superuser=True)
        from users.models import Token

        cls.super_token = Token.objects.create(user=cls.superuser)

    def setUp(self):
        self.client = APIClient()
        self.endpoint = make_endpoint("pve-a")

    def api(self, method, url, data=None, token=None):
        return getattr(self.client, method)(
            url, data, format="json", **auth_header(token or self.token)
        )

    def claim(self, name="pve-cluster", **body):
        response = self.api(
            "post",
            claim_url(self.endpoint),
            {"name": name, "mode": "cluster", "cluster_type": self.cluster_type.pk, **body},
        )
        self.assertIn(response.status_code, (200, 201), response.content)
        return response.json()


class EndpointWritesTest(OrdinaryWriteBase):
    def test_secret_is_write_only_encrypted_and_absent_from_change_records(self):
        response = self.api(
            "post",
            api_url("proxmoxendpoint"),
            {
                "name": "pve-new",
                "host": "pve-new.example.net",
                "token_id": "proxbox@pve!sync",
                "token_secret": "very-secret-value",
                "netbox_cluster": Cluster.objects.create(name="sneaky", type=self.cluster_type).pk,
            },
        )
        self.assertEqual(response.status_code, 201, response.content)
        body = response.json()
        self.assertNotIn("token_secret", body)
        self.assertTrue(body["has_token_secret"])
        self.assertIsNone(body["netbox_cluster"])  # read-only: ignored on create
        endpoint = ProxmoxEndpoint.objects.get(pk=body["id"])
        self.assertNotIn("very-secret-value", endpoint.token_secret_ciphertext)
        self.assertEqual(endpoint.reveal_token_secret(), "very-secret-value")

        patched = self.api(
            "patch",
            api_url("proxmoxendpoint", endpoint.pk),
            {"token_secret": "rotated-secret-value"},
        )
        self.assertEqual(patched.status_code, 200, patched.content)
        endpoint.refresh_from_db()
        self.assertEqual(endpoint.reveal_token_secret(), "rotated-secret-value")
        listed = self.api("get", api_url("proxmoxendpoint") + "?name=pve-new").content.decode()
        changes = json.dumps(
            list(
                ObjectChange.objects.filter(changed_object_id=endpoint.pk).values(
                    "prechange_data", "postchange_data"
                )
            )
        )
        for text in (listed, changes, repr(endpoint), str(endpoint)):
            self.assertNotIn("very-secret-value", text)
            self.assertNotIn("rotated", text)
            self.assertNotIn("token_secret_ciphertext", text)
        self.assertIn("pve-new", changes)  # change records exist, just without the secret

    def test_malformed_token_id_is_refused_naming_the_field(self):
        for token_id in ("sync", "proxbox@pve", "proxbox!sync", "a b@pve!sync"):
            with self.subTest(token_id=token_id):
                response = self.api(
                    "post",
                    api_url("proxmoxendpoint"),
                    {"name": "pve-bad", "host": "h.example", "token_id": token_id},
                )
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn("token_id", response.json())
        self.assertFalse(ProxmoxEndpoint.objects.filter(name="pve-bad").exists())

    def test_templates_cannot_read_the_secret(self):
        from jinja2.sandbox import SecurityError
        from utilities.jinja2 import render_jinja2

        # Export templates and custom links render objects in NetBox's sandboxed Jinja2.
        self.assertEqual(render_jinja2("[{{ e.token_secret }}]", {"e": self.endpoint}), "[]")
        with self.assertRaises(SecurityError):
            render_jinja2("{{ e.reveal_token_secret() }}", {"e": self.endpoint})
        self.assertEqual(self.endpoint.reveal_token_secret(), "s3cret-pve-a")

    def test_relation_is_read_only_and_survives_rest_and_stale_saves(self):
        stale = ProxmoxEndpoint.objects.get(pk=self.endpoint.pk)  # loaded before the claim
        cluster_id = self.claim()["cluster"]["id"]
        other = Cluster.objects.create(name="other", type=self.cluster_type)

        response = self.api(
            "patch",
            api_url("proxmoxendpoint", self.endpoint.pk),
            {"description": "x", "netbox_cluster": other.pk},
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["netbox_cluster"]["id"], cluster_id)
        response = self.api(
            "put",
            api_url("proxmoxendpoint", self.endpoint.pk),
            {
                "name": "pve-a",
                "host": "pve-a.example.net",
                "token_id": "proxbox@pve!sync",
                "netbox_cluster": None,
            },
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["netbox_cluster"]["id"], cluster_id)

        stale.description = "stale full save"
        stale.save()
        self.assertEqual(stale.netbox_cluster_id, cluster_id)  # reloaded under the row lock
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, cluster_id)

        # Bulk edit goes through save() as well, while the relation is still set.
        response = self.api(
            "patch",
            api_url("proxmoxendpoint"),
            [{"id": self.endpoint.pk, "enabled": False, "netbox_cluster": other.pk}],
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.endpoint.refresh_from_db()
        self.assertFalse(self.endpoint.enabled)
        self.assertEqual(self.endpoint.netbox_cluster_id, cluster_id)
        self.assertEqual(response.json()[0]["netbox_cluster"]["id"], cluster_id)

        # Objects loaded before the native cluster was deleted do not resurrect the relation.
        stale = ProxmoxEndpoint.objects.get(pk=self.endpoint.pk)
        Cluster.objects.get(pk=cluster_id).delete()
        stale.description = "after deletion"
        stale.save()
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.netbox_cluster_id)

    def test_deleting_an_endpoint_keeps_its_native_cluster(self):
        result = self.claim()
        response = self.api("delete", api_url("proxmoxendpoint", self.endpoint.pk))
        self.assertEqual(response.status_code, 204, response.content)
        self.assertTrue(Cluster.objects.filter(pk=result["cluster"]["id"]).exists())
        self.assertFalse(ProxmoxCluster.objects.exists())
        sidecar = ProxboxClusterSyncState.objects.get(cluster_id=result["cluster"]["id"])
        self.assertIsNone(sidecar.proxmox_cluster_id)

    def test_deleting_a_native_cluster_keeps_the_endpoint(self):
        result = self.claim()
        # Through NetBox's own REST delete, whose change logging runs inside the request.
        response = self.api(
            "delete", reverse("virtualization-api:cluster-detail", args=[result["cluster"]["id"]])
        )
        self.assertEqual(response.status_code, 204, response.content)
        self.assertFalse(Cluster.objects.filter(pk=result["cluster"]["id"]).exists())
        # The tracking row's unlink is on record, as the deleting user's change.
        unlink = ObjectChange.objects.get(
            changed_object_type__model="proxmoxcluster",
            changed_object_id=result["proxmox_cluster"],
            action="update",
            user=self.user,
        )
        self.assertEqual(unlink.prechange_data["netbox_cluster"], result["cluster"]["id"])
        self.assertIsNone(unlink.postchange_data["netbox_cluster"])
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.netbox_cluster_id)
        tracking = ProxmoxCluster.objects.get(pk=result["proxmox_cluster"])
        self.assertIsNone(tracking.netbox_cluster_id)
        self.assertFalse(ProxboxClusterSyncState.objects.exists())


class TrackingWritesTest(OrdinaryWriteBase):
    def test_create_cannot_claim_even_for_a_superuser(self):
        cluster = Cluster.objects.create(name="c", type=self.cluster_type)
        for token in (self.token, self.super_token):
            with self.subTest(user=token.user.username):
                response = self.api(
                    "post",
                    api_url("proxmoxcluster"),
                    {"endpoint": self.endpoint.pk, "name": "c", "netbox_cluster": cluster.pk},
                    token=token,
                )
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn("netbox_cluster", response.json())
        self.assertFalse(ProxmoxCluster.objects.exists())
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.netbox_cluster_id)

    def test_update_may_refresh_metadata_or_clear_but_never_move(self):
        result = self.claim()
        url = api_url("proxmoxcluster", result["proxmox_cluster"])
        other_cluster = Cluster.objects.create(name="other", type=self.cluster_type)
        other_endpoint = make_endpoint("pve-b")

        response = self.api("patch", url, {"version": "8.2.4", "node_count": 3, "quorate": True})
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["netbox_cluster"]["id"], result["cluster"]["id"])
        for label, body, field in [
            ("move cluster", {"netbox_cluster": other_cluster.pk}, "netbox_cluster"),
            ("move endpoint", {"endpoint": other_endpoint.pk}, "endpoint"),
        ]:
            with self.subTest(label):
                response = self.api("patch", url, body, token=self.super_token)
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn(field, response.json())

        response = self.api("patch", url, {"netbox_cluster": None})
        self.assertEqual(response.status_code, 200, response.content)
        self.assertIsNone(response.json()["netbox_cluster"])
        # Clearing evidence neither transfers nor erases the authoritative relation.
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, result["cluster"]["id"])
        # ...and the link cannot be put back by CRUD.
        response = self.api(
            "patch", url, {"netbox_cluster": result["cluster"]["id"]}, token=self.super_token
        )
        self.assertEqual(response.status_code, 400, response.content)

    def test_references_must_be_visible(self):
        limited, token = make_user("limited", ["netbox_proxbox.add_proxmoxcluster"])
        grant(limited, "netbox_proxbox.view_proxmoxendpoint", constraints={"name": "other"})
        response = self.api(
            "post",
            api_url("proxmoxcluster"),
            {"endpoint": self.endpoint.pk, "name": "x"},
            token=token,
        )
        self.assertEqual(response.status_code, 400, response.content)
        self.assertIn("endpoint", response.json())

    def test_stale_saves_neither_resurrect_nor_erase_links(self):
        row = ProxmoxCluster.objects.create(endpoint=self.endpoint, name="pve-cluster")
        stale = ProxmoxCluster.objects.get(pk=row.pk)  # loaded before the claim linked it
        result = self.claim()
        self.assertEqual(result["proxmox_cluster"], row.pk)
        stale.version = "stale"
        stale.save()
        row.refresh_from_db()
        self.assertEqual(row.netbox_cluster_id, result["cluster"]["id"])

        stale = ProxmoxCluster.objects.get(pk=row.pk)  # loaded while linked
        fresh = ProxmoxCluster.objects.get(pk=row.pk)
        fresh.netbox_cluster = None
        fresh.save()  # an operator clears the obsolete link
        stale.version = "stale again"
        stale.save()
        row.refresh_from_db()
        self.assertIsNone(row.netbox_cluster_id)

    def test_saving_a_deleted_record_is_refused_not_resurrected(self):
        row = ProxmoxCluster.objects.create(endpoint=self.endpoint, name="gone")
        stale = ProxmoxCluster.objects.get(pk=row.pk)
        row.delete()
        stale.version = "x"
        with self.assertRaises(AbortRequest):
            stale.save()
        self.assertFalse(ProxmoxCluster.objects.filter(pk=stale.pk).exists())


class SidecarWritesTest(OrdinaryWriteBase):
    def test_link_can_be_repeated_but_not_replaced_or_cleared(self):
        result = self.claim()
        sidecar = ProxboxClusterSyncState.objects.get(cluster_id=result["cluster"]["id"])
        url = api_url("proxboxclustersyncstate", sidecar.pk)
        response = self.api(
            "patch",
            url,
            {
                "proxmox_cluster": result["proxmox_cluster"],
                "status": "succeeded",
                "last_sync": "2026-11-30T06:00:00Z",
                "objects_created": 4,
                "objects_updated": 2,
            },
        )
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["status"]["value"], "succeeded")
        other = ProxmoxCluster.objects.create(endpoint=make_endpoint("pve-b"), name="x")
        for label, value in (("replace", other.pk), ("clear", None)):
            with self.subTest(label):
                response = self.api(
                    "patch", url, {"proxmox_cluster": value}, token=self.super_token
                )
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn("proxmox_cluster", response.json())
        sidecar.refresh_from_db()
        self.assertEqual(sidecar.proxmox_cluster_id, result["proxmox_cluster"])

    def test_create_cannot_set_the_link_and_stale_saves_keep_it(self):
        cluster = Cluster.objects.create(name="bare", type=self.cluster_type)
        row = ProxmoxCluster.objects.create(endpoint=self.endpoint, name="x")
        response = self.api(
            "post",
            api_url("proxboxclustersyncstate"),
            {"cluster": cluster.pk, "proxmox_cluster": row.pk},
        )
        self.assertEqual(response.status_code, 400, response.content)
        self.assertIn("proxmox_cluster", response.json())

        response = self.api("post", api_url("proxboxclustersyncstate"), {"cluster": cluster.pk})
        self.assertEqual(response.status_code, 201, response.content)
        stale = ProxboxClusterSyncState.objects.get(pk=response.json()["id"])
        ProxboxClusterSyncState.objects.filter(pk=stale.pk).update(
            proxmox_cluster=row
        )  # the claim's write
        stale.errors = 7
        stale.save()
        stale.refresh_from_db()
        self.assertEqual((stale.errors, stale.proxmox_cluster_id), (7, row.pk))

        # A second sidecar for the same cluster is refused with a 400, not a server error.
        response = self.api("post", api_url("proxboxclustersyncstate"), {"cluster": cluster.pk})
        self.assertEqual(response.status_code, 400, response.content)
