"""Table-driven permission matrix of the sync-cluster action through the REST API."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.test import TestCase
from rest_framework.test import APIClient
from users.models import Token, User
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster

from .base import (
    CLAIM_CREATE_PERMS,
    CLAIM_UPDATE_PERMS,
    auth_header,
    claim_url,
    grant,
    make_endpoint,
    make_references,
)


@dataclass(frozen=True)
class Case:
    label: str
    expected: int
    drop: tuple[str, ...] = ()  # permissions removed from the full set
    constrain: dict = field(default_factory=dict)  # permission -> constraints replacing it
    write_enabled: bool = True
    credentials: str = "token"  # token | session | anonymous
    owned: bool = False  # the endpoint already owns a native cluster (update path)
    body: dict = field(default_factory=dict)
    extra: tuple[str, ...] = ()  # permissions added on top


EP = "netbox_proxbox.{}_proxmoxendpoint"
CREATE_CASES = [
    Case("full create permissions", 201),
    Case("session user with full permissions", 201, credentials="session"),
    Case("anonymous", 403, credentials="anonymous"),
    Case("read-only token", 403, write_enabled=False),
    Case("endpoint not viewable", 404, drop=(EP.format("view"),)),
    Case(
        "endpoint view constrained elsewhere", 404, constrain={EP.format("view"): {"name": "other"}}
    ),
    Case("no change on endpoint", 403, drop=(EP.format("change"),)),
    Case(
        "endpoint change constrained elsewhere",
        403,
        constrain={EP.format("change"): {"name": "other"}},
    ),
    Case(
        "endpoint change constrained to it", 201, constrain={EP.format("change"): {"name": "pve-a"}}
    ),
    Case("no cluster add", 403, drop=("virtualization.add_cluster",)),
    Case(
        "cluster add constrained to other names",
        403,
        constrain={"virtualization.add_cluster": {"name": "x"}},
    ),
    Case(
        "cluster add constrained to this name",
        201,
        constrain={"virtualization.add_cluster": {"name": "pve-cluster"}},
    ),
    Case("created cluster not viewable", 403, drop=("virtualization.view_cluster",)),
    Case(
        "created cluster view constrained away",
        403,
        constrain={"virtualization.view_cluster": {"name": "x"}},
    ),
    Case("cluster type not visible", 400, drop=("virtualization.view_clustertype",)),
    Case("site not visible", 400, drop=("dcim.view_site",), body={"site": "SITE"}),
    Case("tenant not visible", 400, drop=("tenancy.view_tenant",), body={"tenant": "TENANT"}),
    Case("site invisible but omitted", 201, drop=("dcim.view_site",)),
    Case(
        "tracking and sidecar permissions constrained to nothing are irrelevant",
        201,
        extra=(
            "netbox_proxbox.change_proxmoxcluster",
            "netbox_proxbox.add_proxboxclustersyncstate",
        ),
        constrain={
            "netbox_proxbox.change_proxmoxcluster": {"name": "never"},
            "netbox_proxbox.add_proxboxclustersyncstate": {"message": "never"},
        },
    ),
]
UPDATE_CASES = [
    Case("full update permissions", 200, owned=True),
    Case("no cluster change", 403, owned=True, drop=("virtualization.change_cluster",)),
    Case(
        "cluster change constrained elsewhere",
        403,
        owned=True,
        constrain={"virtualization.change_cluster": {"name": "x"}},
    ),
    Case("cluster not viewable", 403, owned=True, drop=("virtualization.view_cluster",)),
    Case(
        "cluster add not needed for update", 200, owned=True, drop=("virtualization.add_cluster",)
    ),
    Case(
        "rename outside change constraint",
        403,
        owned=True,
        constrain={"virtualization.change_cluster": {"name": "owned"}},
        body={"name": "renamed"},
    ),
    Case("read-only token on update", 403, owned=True, write_enabled=False),
]


class ClaimPermissionMatrixTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, cls.tenant = make_references()

    def run_case(self, case: Case, index: int):
        endpoint = make_endpoint("pve-a")
        if case.owned:
            owned = Cluster.objects.create(name="owned", type=self.cluster_type)
            endpoint.netbox_cluster = owned
            endpoint.save(assign_native_cluster=True)
        user = User.objects.create_user(username=f"user{index}")
        base = CLAIM_UPDATE_PERMS if case.owned else CLAIM_CREATE_PERMS
        for name in (*base, *case.extra):
            if name in case.drop:
                continue
            grant(user, name, constraints=case.constrain.get(name))
        token = Token.objects.create(user=user, write_enabled=case.write_enabled)

        client = APIClient()
        headers = {}
        if case.credentials == "token":
            headers = auth_header(token)
        elif case.credentials == "session":
            client.force_login(user)
        body = {
            "name": "owned" if case.owned else "pve-cluster",
            "mode": "cluster",
            "cluster_type": self.cluster_type.pk,
        }
        body.update(case.body)
        body = {
            k: {"SITE": self.site.pk, "TENANT": self.tenant.pk}.get(v, v) for k, v in body.items()
        }

        before = (
            Cluster.objects.count(),
            ProxmoxCluster.objects.count(),
            ProxboxClusterSyncState.objects.count(),
            list(Cluster.objects.values_list("name", flat=True)),
        )
        response = client.post(claim_url(endpoint), body, format="json", **headers)
        self.assertEqual(response.status_code, case.expected, response.content)
        endpoint.refresh_from_db()
        if case.expected in (200, 201):
            self.assertIsNotNone(endpoint.netbox_cluster_id)
            self.assertEqual(
                ProxboxClusterSyncState.objects.get(
                    cluster_id=endpoint.netbox_cluster_id
                ).proxmox_cluster_id,
                response.json()["proxmox_cluster"],
            )
        else:
            # Every failure rolls back everything (endpoint, cluster, tracking, sidecar).
            after = (
                Cluster.objects.count(),
                ProxmoxCluster.objects.count(),
                ProxboxClusterSyncState.objects.count(),
                list(Cluster.objects.values_list("name", flat=True)),
            )
            self.assertEqual(after, before)
            if not case.owned:
                self.assertIsNone(endpoint.netbox_cluster_id)
        if case.expected == 400:
            self.assertTrue(
                set(response.json()) & {"cluster_type", "site", "tenant"}, response.content
            )

    def test_matrix(self):
        for index, case in enumerate(CREATE_CASES + UPDATE_CASES):
            with self.subTest(case.label):
                # Each row starts from the same empty inventory.
                savepoint = transaction.savepoint_create()
                try:
                    self.run_case(case, index)
                finally:
                    transaction.savepoint_rollback(savepoint)
