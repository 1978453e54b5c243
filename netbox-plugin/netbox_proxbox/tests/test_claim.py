"""The sync-cluster action: status codes, flags, rename, placement, adoption and 409 paths."""

from __future__ import annotations

from dcim.models import Site
from django.test import TestCase
from rest_framework.test import APIClient
from tenancy.models import Tenant
from virtualization.models import Cluster, ClusterType

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

from .base import (
    CLAIM_UPDATE_PERMS,
    auth_header,
    claim_url,
    make_endpoint,
    make_references,
    make_user,
)


class ClaimTestBase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()
        cls.user, cls.token = make_user("claimer", CLAIM_UPDATE_PERMS)
        cls.endpoint = make_endpoint("pve-a")

    def setUp(self):
        self.client = APIClient()

    def claim(self, endpoint=None, token=None, **body):
        payload = {"name": "pve-cluster", "mode": "cluster", "cluster_type": self.cluster_type.pk}
        payload.update(body)
        payload = {k: v for k, v in payload.items() if v is not OMIT}
        return self.client.post(
            claim_url(endpoint or self.endpoint),
            payload,
            format="json",
            **auth_header(token or self.token),
        )

    def inventory(self):
        """A fingerprint of every row the claim may write, to prove rollbacks."""
        return (
            list(
                Cluster.objects.order_by("pk").values_list(
                    "pk", "name", "type_id", "_site_id", "tenant_id"
                )
            ),
            list(ProxmoxEndpoint.objects.order_by("pk").values_list("pk", "netbox_cluster_id")),
            list(
                ProxmoxCluster.objects.order_by("pk").values_list(
                    "pk", "name", "netbox_cluster_id", "cluster_id"
                )
            ),
            list(
                ProxboxClusterSyncState.objects.order_by("pk").values_list(
                    "pk", "cluster_id", "proxmox_cluster_id"
                )
            ),
        )


OMIT = object()


class ClaimFlagsTest(ClaimTestBase):
    def test_create_then_repeat_then_rename(self):
        response = self.claim(site=self.site.pk, tenant=self.tenant.pk, cluster_id="c-1")
        self.assertEqual(response.status_code, 201, response.content)
        body = response.json()
        self.assertEqual(set(body), {"cluster", "proxmox_cluster", "created", "changed"})
        self.assertIs(body["created"], True)
        self.assertIs(body["changed"], False)
        cluster = Cluster.objects.get(pk=body["cluster"]["id"])
        self.assertEqual(body["cluster"]["name"], "pve-cluster")
        self.assertEqual(body["cluster"]["type"]["id"], self.cluster_type.pk)
        self.assertEqual(cluster._site_id, self.site.pk)
        self.assertEqual(cluster.tenant_id, self.tenant.pk)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, cluster.pk)
        tracking = ProxmoxCluster.objects.get(pk=body["proxmox_cluster"])
        self.assertEqual(
            (tracking.endpoint_id, tracking.name, tracking.cluster_id, tracking.netbox_cluster_id),
            (self.endpoint.pk, "pve-cluster", "c-1", cluster.pk),
        )
        sidecar = ProxboxClusterSyncState.objects.get(cluster=cluster)
        self.assertEqual(sidecar.proxmox_cluster_id, tracking.pk)

        repeat = self.claim(site=self.site.pk, tenant=self.tenant.pk, cluster_id="c-1")
        self.assertEqual(repeat.status_code, 200, repeat.content)
        self.assertEqual((repeat.json()["created"], repeat.json()["changed"]), (False, False))
        self.assertEqual(repeat.json()["cluster"]["id"], cluster.pk)

        renamed = self.claim(name="pve-renamed", cluster_id="c-1")
        self.assertEqual(renamed.status_code, 200, renamed.content)
        self.assertEqual((renamed.json()["created"], renamed.json()["changed"]), (False, True))
        self.assertEqual(renamed.json()["cluster"]["id"], cluster.pk)
        self.assertEqual(renamed.json()["proxmox_cluster"], tracking.pk)
        cluster.refresh_from_db()
        tracking.refresh_from_db()
        self.assertEqual((cluster.name, tracking.name), ("pve-renamed", "pve-renamed"))
        # Omitted placement was preserved by the rename.
        self.assertEqual((cluster._site_id, cluster.tenant_id), (self.site.pk, self.tenant.pk))
        self.assertEqual(Cluster.objects.count(), 1)
        self.assertEqual(ProxmoxCluster.objects.count(), 1)

    def test_each_substantive_field_sets_changed(self):
        self.assertEqual(self.claim().status_code, 201)
        other_type = ClusterType.objects.create(name="Other", slug="other")
        other_site = Site.objects.create(name="Other site", slug="other-site")
        other_tenant = Tenant.objects.create(name="Other tenant", slug="other-tenant")
        steps = [
            ("type", {"cluster_type": other_type.pk}, True),
            ("type repeated", {"cluster_type": other_type.pk}, False),
            ("site set", {"cluster_type": other_type.pk, "site": other_site.pk}, True),
            ("site omitted", {"cluster_type": other_type.pk}, False),
            ("site same", {"cluster_type": other_type.pk, "site": other_site.pk}, False),
            ("tenant set", {"cluster_type": other_type.pk, "tenant": other_tenant.pk}, True),
            ("site cleared", {"cluster_type": other_type.pk, "site": None}, True),
            ("site cleared again", {"cluster_type": other_type.pk, "site": None}, False),
            ("tenant cleared", {"cluster_type": other_type.pk, "tenant": None}, True),
            ("mode only", {"cluster_type": other_type.pk, "mode": "standalone"}, False),
            (
                "identity only",
                {"cluster_type": other_type.pk, "mode": "standalone", "cluster_id": "late-id"},
                False,
            ),
        ]
        for label, body, changed in steps:
            with self.subTest(label):
                response = self.claim(**body)
                self.assertEqual(response.status_code, 200, response.content)
                self.assertEqual(response.json()["created"], False)
                self.assertEqual(response.json()["changed"], changed)
        cluster = Cluster.objects.get()
        self.assertEqual(
            (cluster.type_id, cluster.scope_id, cluster.tenant_id), (other_type.pk, None, None)
        )
        tracking = ProxmoxCluster.objects.get()
        self.assertEqual((tracking.mode, tracking.cluster_id), ("standalone", "late-id"))

    def test_request_validation_names_the_field(self):
        cases = [
            ({"name": OMIT}, "name"),
            ({"name": ""}, "name"),
            ({"mode": OMIT}, "mode"),
            ({"mode": "galaxy"}, "mode"),
            ({"cluster_type": OMIT}, "cluster_type"),
            ({"cluster_type": 999999}, "cluster_type"),
            ({"site": 999999}, "site"),
            ({"tenant": "x"}, "tenant"),
            ({"name": "n" * 101}, "name"),
        ]
        for body, field in cases:
            with self.subTest(field=field, body=body):
                before = self.inventory()
                response = self.claim(**body)
                self.assertEqual(response.status_code, 400, response.content)
                self.assertIn(field, response.json())
                self.assertEqual(self.inventory(), before)

    def test_disabled_endpoint_is_refused(self):
        disabled = make_endpoint("pve-off", enabled=False)
        response = self.claim(endpoint=disabled)
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "endpoint_disabled")
        self.assertFalse(Cluster.objects.exists())

    def test_unknown_endpoint_is_404(self):
        self.assertEqual(self.claim(endpoint=987654).status_code, 404)

    def test_no_credentials_or_proxmox_calls(self):
        # The stored secret is never decrypted by the claim: a corrupt ciphertext does not matter.
        ProxmoxEndpoint.objects.filter(pk=self.endpoint.pk).update(
            token_secret_ciphertext="garbage"
        )
        self.assertEqual(self.claim().status_code, 201)


class AdoptionTest(ClaimTestBase):
    def link(self, endpoint, cluster, name="pve-cluster", **fields):
        """Legacy history: a tracking row linked to a native cluster (as written by old backends)."""
        row = ProxmoxCluster(endpoint=endpoint, name=name, netbox_cluster=cluster, **fields)
        row.save(claim=True)
        return row

    def test_unambiguous_tracking_link_is_adopted(self):
        legacy = Cluster.objects.create(name="legacy", type=self.cluster_type)
        row = self.link(self.endpoint, legacy, name="legacy")
        response = self.claim(name="legacy")
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual((response.json()["created"], response.json()["changed"]), (False, False))
        self.assertEqual(response.json()["cluster"]["id"], legacy.pk)
        self.assertEqual(response.json()["proxmox_cluster"], row.pk)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, legacy.pk)
        self.assertEqual(
            ProxboxClusterSyncState.objects.get(cluster=legacy).proxmox_cluster_id, row.pk
        )

    def test_adoption_with_rename(self):
        legacy = Cluster.objects.create(name="old-name", type=self.cluster_type)
        row = self.link(self.endpoint, legacy, name="old-name")
        response = self.claim(name="new-name")
        self.assertEqual(response.status_code, 200, response.content)
        self.assertEqual(response.json()["changed"], True)
        legacy.refresh_from_db()
        row.refresh_from_db()
        self.assertEqual((legacy.name, row.name), ("new-name", "new-name"))

    def test_ambiguous_links_of_one_endpoint_are_409(self):
        first = Cluster.objects.create(name="one", type=self.cluster_type)
        second = Cluster.objects.create(name="two", type=self.cluster_type)
        self.link(self.endpoint, first, name="one")
        self.link(self.endpoint, second, name="two")
        before = self.inventory()
        response = self.claim(name="one")
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "ambiguous_tracking")
        self.assertEqual(self.inventory(), before)

    def test_cluster_linked_by_two_endpoints_is_409(self):
        shared = Cluster.objects.create(name="shared", type=self.cluster_type)
        other = make_endpoint("pve-b")
        self.link(self.endpoint, shared, name="shared")
        self.link(other, shared, name="shared")
        before = self.inventory()
        response = self.claim(name="shared")
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "ambiguous_tracking")
        self.assertEqual(self.inventory(), before)

    def test_name_match_alone_never_adopts(self):
        lookalike = Cluster.objects.create(name="pve-cluster", type=self.cluster_type)
        response = self.claim()
        self.assertEqual(response.status_code, 201, response.content)
        self.assertNotEqual(response.json()["cluster"]["id"], lookalike.pk)
        self.assertFalse(ProxboxClusterSyncState.objects.filter(cluster=lookalike).exists())

    def test_native_uniqueness_clash_is_actionable_409(self):
        Cluster.objects.create(name="pve-cluster", type=self.cluster_type, scope=self.site)
        before = self.inventory()
        response = self.claim(site=self.site.pk)
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "native_name_clash")
        self.assertIn("pve-cluster", response.json()["detail"])
        self.assertEqual(self.inventory(), before)

    def test_cluster_owned_by_another_endpoint_is_never_adopted_or_mutated(self):
        other = make_endpoint("pve-b")
        owned = Cluster.objects.create(name="theirs", type=self.cluster_type)
        other.netbox_cluster = owned
        other.save(assign_native_cluster=True)
        self.link(self.endpoint, owned, name="theirs")
        before = self.inventory()
        response = self.claim(name="mine-now", site=self.site.pk)
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "owned_by_another_endpoint")
        self.assertEqual(self.inventory(), before)


class ConflictPathsTest(ClaimTestBase):
    def owned(self):
        response = self.claim(cluster_id="c-1")
        self.assertEqual(response.status_code, 201)
        return Cluster.objects.get(pk=response.json()["cluster"]["id"])

    def test_duplicate_tracking_rows_for_the_owned_cluster(self):
        cluster = self.owned()
        ProxmoxCluster(endpoint=self.endpoint, name="dup", netbox_cluster=cluster).save(claim=True)
        before = self.inventory()
        response = self.claim(cluster_id="c-1")
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "duplicate_tracking")
        self.assertEqual(self.inventory(), before)

    def test_unrelated_unlinked_row_with_the_reported_name(self):
        self.owned()
        ProxmoxCluster.objects.create(endpoint=self.endpoint, name="renamed", cluster_id="zzz")
        response = self.claim(name="renamed", cluster_id="c-1")
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "tracking_name_clash")

    def test_changed_source_identity_is_refused(self):
        self.owned()
        before = self.inventory()
        response = self.claim(cluster_id="c-2")
        self.assertEqual(response.status_code, 409)
        self.assertEqual(response.json()["code"], "identity_changed")
        self.assertEqual(self.inventory(), before)

    def test_matching_row_linked_to_another_cluster_is_not_moved(self):
        cluster = self.owned()
        ProxmoxCluster.objects.filter(endpoint=self.endpoint).update(netbox_cluster=None)
        elsewhere = Cluster.objects.create(name="elsewhere", type=self.cluster_type)
        ProxmoxCluster.objects.filter(endpoint=self.endpoint).update(netbox_cluster=elsewhere)
        before = self.inventory()
        response = self.claim(cluster_id="c-1")
        self.assertEqual(response.status_code, 409, response.content)
        self.assertEqual(response.json()["code"], "stale_tracking_link")
        self.assertEqual(self.inventory(), before)
        self.endpoint.refresh_from_db()
        self.assertEqual(self.endpoint.netbox_cluster_id, cluster.pk)

    def test_unlinked_tracking_row_is_reused_by_identity(self):
        row = ProxmoxCluster.objects.create(endpoint=self.endpoint, name="old", cluster_id="c-9")
        response = self.claim(name="fresh", cluster_id="c-9")
        self.assertEqual(response.status_code, 201, response.content)
        self.assertEqual(response.json()["proxmox_cluster"], row.pk)
        row.refresh_from_db()
        self.assertEqual(
            (row.name, row.netbox_cluster_id), ("fresh", response.json()["cluster"]["id"])
        )

    def test_owned_cluster_deleted_between_claims_creates_a_new_one(self):
        cluster = self.owned()
        cluster.delete()
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.netbox_cluster_id)
        response = self.claim(cluster_id="c-1")
        self.assertEqual(response.status_code, 201, response.content)
        self.assertEqual(ProxmoxCluster.objects.count(), 1)


class DatabaseConflictTest(ClaimTestBase):
    """PostgreSQL serialization failures and deadlocks surface as a controlled 409."""

    def test_retryable_database_errors_become_409(self):
        from unittest import mock

        from django.db import IntegrityError, OperationalError
        from psycopg import errors

        from netbox_proxbox.ownership import claim as claim_module

        cases = [
            (OperationalError, errors.DeadlockDetected, "retry"),
            (OperationalError, errors.SerializationFailure, "retry"),
            (OperationalError, errors.LockNotAvailable, "retry"),
            (IntegrityError, errors.ForeignKeyViolation, "retry"),
            (IntegrityError, errors.UniqueViolation, "uniqueness"),
        ]
        for django_error, pg_error, code in cases:
            with self.subTest(pg_error.__name__):
                failure = django_error(pg_error.__name__)
                failure.__cause__ = pg_error()
                with mock.patch.object(claim_module._Claim, "run", side_effect=failure):
                    response = self.claim()
                self.assertEqual(response.status_code, 409, response.content)
                self.assertEqual(response.json()["code"], code)
                if code == "retry":
                    self.assertIn(
                        "Retry after the inventory state has settled", response.json()["detail"]
                    )
