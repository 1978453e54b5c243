"""The 0002 backfill, reversal and reapplication and the 0005 validator migration, each against a
scratch copy of the migrated database (Django's MigrationExecutor, separate transactions)."""

from __future__ import annotations

import os

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

import netbox_proxbox
from proxbox_devstack.testdb import (
    clone_database,
    drop_database,
    ensure_template,
    maintenance_connection,
)

ALIAS = "nbpx_migrations"
APP = "netbox_proxbox"
BEFORE, AFTER = (APP, "0001_initial"), (APP, "0002_endpoint_native_cluster")
PRE_VALIDATOR = (APP, "0004_endpoint_token_id_format")
VALIDATOR = (APP, "0005_ownership_schema_validation")
ENDPOINTS = "netbox_proxbox_proxmoxendpoint"


@pytest.fixture(scope="module")
def before_template(django_db_setup, django_db_blocker):
    """The migrated template at BEFORE, made once: each test starts from a copy of it.

    The plugin's tables and recorded migrations are removed, then BEFORE and AFTER are
    applied and AFTER reversed (its reversal keeps the owner column, as the tests expect).
    That leaves the columns, constraints, indexes and migration records that reversing
    every later migration leaves (compared when this was written; the released migrations
    do not change), for a fraction of the CPU: a reversal renders NetBox's whole model
    state once per migration it reverses. No other app refers to the plugin's tables, and
    its migrations create no other database object."""
    default = connections["default"].settings_dict
    name = f"own_migrations_before_{os.getpid()}"
    alias = f"{ALIAS}_before"
    with django_db_blocker.unblock():
        template = ensure_template(default)
        with maintenance_connection(default) as conn:
            clone_database(conn, template, name)
        connections.settings[alias] = {**default, "NAME": name, "CONN_MAX_AGE": 0}
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename LIKE 'netbox\\_proxbox\\_%%'"
                )
                tables = ", ".join(f'"{table}"' for (table,) in cursor.fetchall())
                # One statement drops tables that refer to each other; no CASCADE, so a
                # reference from another app would fail here instead of being cut.
                cursor.execute(f"DROP TABLE {tables}")
                cursor.execute("DELETE FROM django_migrations WHERE app = %s", [APP])
            MigrationExecutor(connections[alias]).migrate([AFTER])
            MigrationExecutor(connections[alias]).migrate([BEFORE])
        finally:
            connections[alias].close()
            del connections[alias]
            del connections.settings[alias]
        try:
            yield name
        finally:
            with maintenance_connection(default) as conn:
                drop_database(conn, name)


@pytest.fixture
def scratch(before_template, django_db_blocker):
    """A private database (prefix own_) at BEFORE, cloned from the module's template."""
    default = connections["default"].settings_dict
    name = f"own_migrations_{os.getpid()}"
    with django_db_blocker.unblock():
        with maintenance_connection(default) as conn:
            clone_database(conn, before_template, name)
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
        """Migrate to `target`; Django's project state after it, whose `apps` (the
        historical models) renders only when a test asks for them."""
        return MigrationExecutor(self.connection).migrate([target])

    def columns(self):
        with self.connection.cursor() as cursor:
            return {
                c.name
                for c in self.connection.introspection.get_table_description(
                    cursor, "netbox_proxbox_proxmoxendpoint"
                )
            }

    def applied(self):
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT name FROM django_migrations WHERE app = %s", [APP])
            return {row[0] for row in cursor.fetchall()}

    def execute(self, *statements):
        with self.connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def schema_objects(self):
        """Columns, constraints and indexes of the plugin's tables, as PostgreSQL lists them."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT table_name, column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns WHERE table_name LIKE 'netbox_proxbox_%%' "
                "ORDER BY 1, 2"
            )
            columns = cursor.fetchall()
            cursor.execute(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE conrelid::regclass::text LIKE 'netbox_proxbox_%%' "
                "ORDER BY 1, 2"
            )
            constraints = cursor.fetchall()
            cursor.execute(
                "SELECT tablename, indexname, indexdef FROM pg_indexes "
                "WHERE tablename LIKE 'netbox_proxbox_%%' ORDER BY 1, 2"
            )
            return columns, constraints, cursor.fetchall()

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
    apps = scratch.migrate(BEFORE).apps
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

    scratch.migrate(AFTER)
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
    apps = scratch.migrate(AFTER).apps
    h = History(apps)
    retained, newcomer, unrelated = (
        h.endpoint("retained"),
        h.endpoint("newcomer"),
        h.endpoint("unrelated"),
    )
    owned, elsewhere, free = h.cluster("owned"), h.cluster("elsewhere"), h.cluster("free")
    h.Endpoint.objects.using(ALIAS).filter(pk=retained.pk).update(netbox_cluster=owned)

    apps = scratch.migrate(BEFORE).apps
    assert "netbox_cluster_id" in scratch.columns()
    assert scratch.owners()["retained"] == owned.pk
    # Legacy tracking changes while the older schema is active.
    h = History(apps)
    h.link(retained, elsewhere)  # the retained owner's evidence now points elsewhere
    h.link(newcomer, owned)  # a conflicting candidate for an owned cluster
    h.link(unrelated, free)  # an unrelated unambiguous pair

    scratch.migrate(AFTER)
    assert scratch.owners() == {"retained": owned.pk, "newcomer": None, "unrelated": free.pk}


def test_validator_migration_prints_the_marker_and_is_recorded(scratch, capsys):
    from netbox_proxbox.migrations._release_0_1_0_schema import MARKER, source_identity

    digest, version = source_identity()
    marker = f"{MARKER} module=netbox_proxbox/migrations/_release_0_1_0_schema.py"
    h = History(scratch.migrate(BEFORE).apps)
    owned = h.cluster("kept-cluster")
    h.link(h.endpoint("kept-owner"), owned)
    capsys.readouterr()
    scratch.migrate(VALIDATOR)  # first application (0002 backfills the owner)
    assert marker in capsys.readouterr().out
    assert VALIDATOR[1] in scratch.applied()
    schema, owners = scratch.schema_objects(), scratch.owners()
    assert owners == {"kept-owner": owned.pk}

    scratch.migrate(PRE_VALIDATOR)  # reversal: unrecorded, a no-op for schema and data
    assert VALIDATOR[1] not in scratch.applied()
    assert (scratch.schema_objects(), scratch.owners()) == (schema, owners)

    scratch.migrate(VALIDATOR)  # reapplication validates again
    out = capsys.readouterr().out
    assert marker in out
    # The released module asks for the distribution's 0.1.0 name; the alias answers it.
    assert version == netbox_proxbox.__version__
    assert f"sha256={digest} version={version}" in out
    assert VALIDATOR[1] in scratch.applied()
    assert (scratch.schema_objects(), scratch.owners()) == (schema, owners)


def test_failing_validator_leaves_the_ownership_migration_committed_and_itself_unrecorded(
    scratch,
):
    from netbox_proxbox.migrations._release_0_1_0_schema import SchemaValidationError

    scratch.migrate(BEFORE)
    # Not part of 0002's retained-column rules, but an extra constraint on the ownership column.
    scratch.execute(
        f"ALTER TABLE {ENDPOINTS} ADD CONSTRAINT own_extra CHECK (netbox_cluster_id > 0)"
    )
    with pytest.raises(SchemaValidationError, match="unexpected check constraint own_extra"):
        scratch.migrate(VALIDATOR)
    applied = scratch.applied()
    assert {AFTER[1], PRE_VALIDATOR[1]} <= applied
    assert VALIDATOR[1] not in applied
    # Nothing was repaired: the offending constraint is still there.
    with scratch.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_constraint WHERE conname = 'own_extra'")
        assert cursor.fetchone() is not None


def test_database_that_applied_an_unpublished_dev_migration_keeps_its_owner(scratch):
    """Column and unique constraint exist from a development migration whose recorder row
    stays behind as an ignored orphan; the release migration keeps them and only backfills."""
    apps = scratch.migrate(BEFORE).apps
    h = History(apps)
    retained, other, unrelated = h.endpoint("retained"), h.endpoint("other"), h.endpoint("free")
    owned, elsewhere, free = h.cluster("owned"), h.cluster("elsewhere"), h.cluster("free")
    scratch.execute(
        f"UPDATE {ENDPOINTS} SET netbox_cluster_id = {owned.pk} WHERE id = {retained.pk}",
        "INSERT INTO django_migrations (app, name, applied) "
        "VALUES ('netbox_proxbox', '0002_dev_endpoint_native_cluster_binding', now())",
    )
    h.link(retained, elsewhere)  # evidence changed after the dev migration ran
    h.link(other, owned)  # a conflicting candidate for the retained owner's cluster
    h.link(unrelated, free)
    scratch.migrate(VALIDATOR)
    assert scratch.owners() == {"retained": owned.pk, "other": None, "free": free.pk}
    applied = scratch.applied()
    assert {"0002_dev_endpoint_native_cluster_binding", AFTER[1], VALIDATOR[1]} <= applied


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (
            [f"ALTER TABLE {ENDPOINTS} ALTER COLUMN netbox_cluster_id TYPE integer"],
            "has type integer, expected bigint",
        ),
        (
            [
                f"ALTER TABLE {ENDPOINTS} DROP CONSTRAINT {ENDPOINTS}_netbox_cluster_id_key",
                f"CREATE UNIQUE INDEX own_partial ON {ENDPOINTS} (netbox_cluster_id) "
                "WHERE netbox_cluster_id > 0",
            ],
            "own_partial",
        ),
        (
            [
                "DO $$ DECLARE n text; BEGIN SELECT conname INTO STRICT n FROM pg_constraint "
                f"WHERE conrelid = '{ENDPOINTS}'::regclass AND contype = 'f' "
                "AND conname LIKE '%netbox_cluster_id%'; "
                f"EXECUTE format('ALTER TABLE {ENDPOINTS} DROP CONSTRAINT %I', n); END $$",
                f"ALTER TABLE {ENDPOINTS} ADD CONSTRAINT own_nv FOREIGN KEY (netbox_cluster_id) "
                "REFERENCES virtualization_cluster (id) NOT VALID",
            ],
            "own_nv",
        ),
        (
            [f"ALTER TABLE {ENDPOINTS} ALTER COLUMN netbox_cluster_id SET NOT NULL"],
            "is NOT NULL, expected nullable",
        ),
    ],
    ids=["type", "partial-unique", "not-valid-fk", "not-null"],
)
def test_retained_column_that_breaks_the_rules_fails_the_ownership_migration(
    scratch, statements, expected
):
    scratch.migrate(BEFORE)
    scratch.execute(*statements)
    with pytest.raises(RuntimeError, match="does not match the ownership schema") as failure:
        scratch.migrate(AFTER)
    assert expected in str(failure.value)
    assert AFTER[1] not in scratch.applied()


def test_every_backfill_rule_forward_backward_and_forward_again(scratch):
    apps = scratch.migrate(BEFORE).apps
    scratch.execute(f"ALTER TABLE {ENDPOINTS} DROP COLUMN netbox_cluster_id")
    h = History(apps)
    single, duplicated, ambiguous, shared_a, shared_b, bare, later = (
        h.endpoint(n)
        for n in ("single", "duplicated", "ambiguous", "shared-a", "shared-b", "bare", "later")
    )
    c_single, c_dup, c_amb1, c_amb2, c_shared, c_later, c_moved = (
        h.cluster(n) for n in ("c-single", "c-dup", "c-amb1", "c-amb2", "c-shared", "c-later", "m")
    )
    h.link(single, c_single)
    for name in ("dup-1", "dup-2", "dup-3"):  # several identical historical rows for one pair
        h.link(duplicated, c_dup, name=name)
    h.link(ambiguous, c_amb1)
    h.link(ambiguous, c_amb2)
    h.link(shared_a, c_shared)
    h.link(shared_b, c_shared)
    h.Tracking.objects.using(ALIAS).create(endpoint=bare, name="unlinked")
    first = {
        "single": c_single.pk,
        "duplicated": c_dup.pk,
        "ambiguous": None,
        "shared-a": None,
        "shared-b": None,
        "bare": None,
        "later": None,
    }

    scratch.migrate(VALIDATOR)
    assert scratch.owners() == first
    apps = scratch.migrate(BEFORE).apps
    assert scratch.owners() == first  # reversal keeps the column and its values
    h = History(apps)
    h.Tracking.objects.using(ALIAS).filter(endpoint_id=single.pk).update(netbox_cluster=c_moved)
    h.link(later, c_dup)  # a conflicting legacy candidate for a retained owner's cluster
    h.link(bare, c_later)  # an unrelated pair that became unambiguous meanwhile
    scratch.migrate(VALIDATOR)
    assert scratch.owners() == {**first, "bare": c_later.pk}
    # Reversing and reapplying once more changes nothing further.
    scratch.migrate(BEFORE)
    scratch.migrate(VALIDATOR)
    assert scratch.owners() == {**first, "bare": c_later.pk}


def test_lock_contention_fails_the_validator_migration_explicitly_and_leaves_it_unrecorded(
    scratch,
):
    import time

    import psycopg

    from netbox_proxbox.migrations._release_0_1_0_schema import SchemaLockTimeout

    scratch.migrate(PRE_VALIDATOR)
    s = scratch.connection.settings_dict
    with psycopg.connect(
        dbname=s["NAME"], user=s["USER"] or None, host=s["HOST"] or None, port=s["PORT"] or None
    ) as holder:
        # Like a CREATE INDEX in progress on the tracking table.
        holder.execute("LOCK TABLE netbox_proxbox_proxmoxcluster IN SHARE MODE")
        started = time.monotonic()
        with pytest.raises(
            SchemaLockTimeout, match="Could not lock table netbox_proxbox_proxmoxcluster"
        ):
            scratch.migrate(VALIDATOR)
        elapsed = time.monotonic() - started
    assert elapsed < 30, elapsed  # the 5 s lock timeout plus loading the migration graph
    assert VALIDATOR[1] not in scratch.applied()
    scratch.migrate(VALIDATOR)  # once the schema operation is gone, the retry validates
    assert VALIDATOR[1] in scratch.applied()


REVALIDATOR = (APP, "0010_ownership_schema_revalidation")
BEFORE_REVALIDATOR = (APP, "0009_endpoint_records_mode")
CLUSTERS = "netbox_proxbox_proxmoxcluster"


def test_second_validator_migration_refuses_a_cascading_owner_key_and_allows_plain_indexes(
    scratch, capsys
):
    from netbox_proxbox.migrations._release_0_1_0_schema import SchemaValidationError
    from netbox_proxbox.migrations._release_0_2_0_schema import MARKER, source_identity

    scratch.migrate(BEFORE_REVALIDATOR)  # 0005 passed the schema as Django made it
    owner_key = """
    DO $$ DECLARE n text; BEGIN
      SELECT conname INTO STRICT n FROM pg_constraint
       WHERE conrelid = 'netbox_proxbox_proxmoxendpoint'::regclass AND contype = 'f'
         AND conkey = ARRAY[(SELECT attnum FROM pg_attribute
                             WHERE attrelid = 'netbox_proxbox_proxmoxendpoint'::regclass
                               AND attname = 'netbox_cluster_id')];
      EXECUTE format('ALTER TABLE netbox_proxbox_proxmoxendpoint DROP CONSTRAINT %I', n);
    END $$"""
    scratch.execute(
        owner_key,
        f"ALTER TABLE {ENDPOINTS} ADD CONSTRAINT own_owner_fk FOREIGN KEY (netbox_cluster_id) "
        "REFERENCES virtualization_cluster (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED",
        f"CREATE INDEX own_plain_name ON {CLUSTERS} (name)",
    )
    with pytest.raises(SchemaValidationError) as failure:
        scratch.migrate(REVALIDATOR)
    message = str(failure.value)
    assert "foreign key own_owner_fk on netbox_proxbox_proxmoxendpoint" in message
    assert "has ON DELETE CASCADE, expected ON DELETE NO ACTION" in message
    assert "own_plain_name" not in message  # a plain index changes no data rule
    assert REVALIDATOR[1] not in scratch.applied()
    assert BEFORE_REVALIDATOR[1] in scratch.applied()

    # A reviewed repair (Django's own declaration again), then the same migration passes.
    capsys.readouterr()
    scratch.execute(
        f"ALTER TABLE {ENDPOINTS} DROP CONSTRAINT own_owner_fk",
        f"ALTER TABLE {ENDPOINTS} ADD CONSTRAINT own_owner_fk FOREIGN KEY (netbox_cluster_id) "
        "REFERENCES virtualization_cluster (id) DEFERRABLE INITIALLY DEFERRED",
    )
    scratch.migrate(REVALIDATOR)
    digest, version = source_identity()
    assert version == netbox_proxbox.__version__
    assert (
        f"{MARKER} module=netbox_proxbox/migrations/_release_0_2_0_schema.py "
        f"sha256={digest} version={version}"
    ) in capsys.readouterr().out
    assert REVALIDATOR[1] in scratch.applied()
    with scratch.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_class WHERE relname = 'own_plain_name'")
        assert cursor.fetchone() is not None  # nothing was repaired or removed
