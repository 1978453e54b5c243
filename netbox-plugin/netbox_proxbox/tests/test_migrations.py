"""The 0002 backfill, reversal and reapplication against a scratch copy of the migrated database."""

from __future__ import annotations

import os

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from proxbox_devstack.testdb import (
    clone_database,
    drop_database,
    ensure_template,
    maintenance_connection,
)

ALIAS = "nbpx_migrations"
APP = "netbox_proxbox"
BEFORE, AFTER = (APP, "0001_initial"), (APP, "0002_endpoint_native_cluster")


@pytest.fixture
def scratch(django_db_setup, django_db_blocker):
    """A private database (prefix nbpx_) cloned from the fully migrated template."""
    default = connections["default"].settings_dict
    name = f"nbpx_migrations_{os.getpid()}"
    with django_db_blocker.unblock():
        template = ensure_template(default)
        with maintenance_connection(default) as conn:
            clone_database(conn, template, name)
        connections.settings[ALIAS] = {**default, "NAME": name, "CONN_MAX_AGE": 0}
        try:
            yield Scratch(connections[ALIAS])
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]
            with maintenance_connection(default) as conn:
                drop_database(conn, name)


class Scratch:
    def __init__(self, connection):
        self.connection = connection

    def migrate(self, target):
        executor = MigrationExecutor(self.connection)
        executor.migrate([target])
        return executor.loader.project_state([target]).apps

    def columns(self):
        with self.connection.cursor() as cursor:
            return {
                c.name
                for c in self.connection.introspection.get_table_description(
                    cursor, "netbox_proxbox_proxmoxendpoint"
                )
            }

    def owners(self):
        # Raw SQL: at 0001 the column exists physically but not in the model state.
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT name, netbox_cluster_id FROM netbox_proxbox_proxmoxendpoint")
            return dict(cursor.fetchall())


class History:
    """Legacy inventory written through historical models (no plugin rules apply there)."""

    def __init__(self, apps):
        self.Endpoint = apps.get_model(APP, "ProxmoxEndpoint")
        self.Tracking = apps.get_model(APP, "ProxmoxCluster")
        self.Cluster = apps.get_model("virtualization", "Cluster")
        ClusterType = apps.get_model("virtualization", "ClusterType")
        self.type = ClusterType.objects.using(ALIAS).get_or_create(name="Proxmox", slug="proxmox")[
            0
        ]

    def endpoint(self, name):
        return self.Endpoint.objects.using(ALIAS).create(
            name=name, host=f"{name}.example", token_id="t"
        )

    def cluster(self, name):
        return self.Cluster.objects.using(ALIAS).create(name=name, type=self.type)

    def link(self, endpoint, cluster, name="x"):
        return self.Tracking.objects.using(ALIAS).create(
            endpoint_id=endpoint.pk, name=name, netbox_cluster_id=cluster.pk
        )


def test_backfill_fills_only_pairs_unique_in_both_directions(scratch):
    apps = scratch.migrate(BEFORE)
    # Reversal retained the physical column; drop it to exercise the creating path too.
    assert "netbox_cluster_id" in scratch.columns()
    with scratch.connection.cursor() as cursor:
        cursor.execute("ALTER TABLE netbox_proxbox_proxmoxendpoint DROP COLUMN netbox_cluster_id")
    h = History(apps)
    unique_pair, ambiguous_endpoint, shared_a, shared_b, bare = (
        h.endpoint(n) for n in ("unique-pair", "ambiguous-endpoint", "shared-a", "shared-b", "bare")
    )
    c1, c2, c3, c4 = (h.cluster(n) for n in ("c1", "c2", "c3", "c4"))
    h.link(unique_pair, c1, name="one")
    h.link(unique_pair, c1, name="one-duplicate")  # several rows for one identical pair still count
    h.link(ambiguous_endpoint, c2)
    h.link(ambiguous_endpoint, c3)
    h.link(shared_a, c4)
    h.link(shared_b, c4)
    h.Tracking.objects.using(ALIAS).create(endpoint=bare, name="unlinked")

    apps = scratch.migrate(AFTER)
    assert scratch.owners() == {
        "unique-pair": c1.pk,
        "ambiguous-endpoint": None,
        "shared-a": None,
        "shared-b": None,
        "bare": None,
    }
    with scratch.connection.cursor() as cursor:
        constraints = scratch.connection.introspection.get_constraints(
            cursor, "netbox_proxbox_proxmoxendpoint"
        )
    assert any(c["unique"] and c["columns"] == ["netbox_cluster_id"] for c in constraints.values())
    assert any(
        c["foreign_key"] == ("virtualization_cluster", "id")
        and c["columns"] == ["netbox_cluster_id"]
        for c in constraints.values()
    )


def test_reversal_retains_owners_and_reapplication_never_replaces_them(scratch):
    apps = scratch.migrate(AFTER)
    h = History(apps)
    retained, newcomer, unrelated = (
        h.endpoint("retained"),
        h.endpoint("newcomer"),
        h.endpoint("unrelated"),
    )
    owned, elsewhere, free = h.cluster("owned"), h.cluster("elsewhere"), h.cluster("free")
    h.Endpoint.objects.using(ALIAS).filter(pk=retained.pk).update(netbox_cluster=owned)

    apps = scratch.migrate(BEFORE)
    assert "netbox_cluster_id" in scratch.columns()
    assert scratch.owners()["retained"] == owned.pk
    # Legacy tracking changes while the older schema is active.
    h = History(apps)
    h.link(retained, elsewhere)  # the retained owner's evidence now points elsewhere
    h.link(newcomer, owned)  # a conflicting candidate for an owned cluster
    h.link(unrelated, free)  # an unrelated unambiguous pair

    apps = scratch.migrate(AFTER)
    assert scratch.owners() == {"retained": owned.pk, "newcomer": None, "unrelated": free.pk}
