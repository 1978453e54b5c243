"""The release schema validator against malformed schemas, fixture models and lock contention.

Every case runs in the test database inside the test's transaction: the malformation is
applied by raw SQL, the validator runs as the migration runs it, and the rollback at the
end of the test restores the migrated schema (no re-migration per case).
"""

from __future__ import annotations

import io
import time

import psycopg
import pytest
from django.db import connection, models, transaction
from django.db.migrations.loader import MigrationLoader
from django.test.utils import isolate_apps

from netbox_proxbox.migrations import _release_0_1_0_schema as schema

from .test_concurrency import connection_settings

pytestmark = pytest.mark.django_db

E = "netbox_proxbox_proxmoxendpoint"
T = "netbox_proxbox_proxmoxcluster"
S = "netbox_proxbox_proxboxclustersyncstate"
VALIDATOR = ("netbox_proxbox", "0005_ownership_schema_validation")
CHECKED_TABLES = [S, T, E, "virtualization_cluster"]


@pytest.fixture(scope="module")
def historical_apps(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return MigrationLoader(connection).project_state(VALIDATOR).apps


def run_validator(apps, *, deferred=()):
    out = io.StringIO()
    with connection.schema_editor() as editor:
        editor.deferred_sql.extend(deferred)
        schema.validate(apps, editor, out=out)
        assert editor.deferred_sql == []
    return out.getvalue()


def execute(*statements):
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def drop_fk(table: str, column: str) -> str:
    """SQL dropping the foreign key Django created on table(column), whatever its hashed name."""
    return f"""
    DO $$ DECLARE n text; BEGIN
      SELECT conname INTO STRICT n FROM pg_constraint
       WHERE conrelid = '{table}'::regclass AND contype = 'f'
         AND conkey = ARRAY[(SELECT attnum FROM pg_attribute
                             WHERE attrelid = '{table}'::regclass AND attname = '{column}')];
      EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', n);
    END $$"""


DROP_OWNER_UNIQUE = f"ALTER TABLE {E} DROP CONSTRAINT {E}_netbox_cluster_id_key"
HUGE_IN_LIST = ", ".join(f"'value-{i}'" for i in range(2000))

# (id, statements, substrings the failure must contain)
CORPUS = [
    (
        "wrong-type",
        [f"ALTER TABLE {E} ALTER COLUMN netbox_cluster_id TYPE integer"],
        [f"column {E}.netbox_cluster_id has type integer, expected bigint"],
    ),
    (
        "not-null",
        [f"ALTER TABLE {E} ALTER COLUMN netbox_cluster_id SET NOT NULL"],
        [f"column {E}.netbox_cluster_id is NOT NULL, expected nullable"],
    ),
    (
        "missing-unique-index",
        [DROP_OWNER_UNIQUE],
        [f"{E}(netbox_cluster_id) has no enforcing unique index (none exists)"],
    ),
    (
        "two-unique-indexes",
        [f"CREATE UNIQUE INDEX own_second_unique ON {E} (netbox_cluster_id)"],
        ["backed by several candidates", "own_second_unique", f"{E}_netbox_cluster_id_key"],
    ),
    (
        "partial-unique-index",
        [
            DROP_OWNER_UNIQUE,
            f"CREATE UNIQUE INDEX own_partial ON {E} (netbox_cluster_id) "
            "WHERE netbox_cluster_id > 0",
        ],
        ["unique index own_partial on", "is partial"],
    ),
    (
        "expression-unique-index",
        [DROP_OWNER_UNIQUE, f"CREATE UNIQUE INDEX own_expr ON {E} ((netbox_cluster_id + 0))"],
        ["unique index own_expr on", "indexes an expression"],
    ),
    (
        "nulls-not-distinct",
        [
            DROP_OWNER_UNIQUE,
            f"ALTER TABLE {E} ADD CONSTRAINT own_nnd UNIQUE NULLS NOT DISTINCT (netbox_cluster_id)",
        ],
        ["unique constraint own_nnd on", "NULLS NOT DISTINCT"],
    ),
    (
        "not-valid-fk",
        [
            drop_fk(E, "netbox_cluster_id"),
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_nv FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES virtualization_cluster (id) NOT VALID",
        ],
        ["foreign key own_fk_nv on", "NOT VALID"],
    ),
    (
        "fk-to-wrong-column",
        [
            drop_fk(E, "netbox_cluster_id"),
            "ALTER TABLE virtualization_cluster ADD COLUMN own_alt bigint UNIQUE",
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_col FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES virtualization_cluster (own_alt)",
        ],
        ["foreign key own_fk_col on", "references virtualization_cluster(own_alt)"],
    ),
    (
        "fk-to-wrong-table",
        [
            drop_fk(E, "netbox_cluster_id"),
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_tbl FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES dcim_site (id)",
        ],
        ["foreign key own_fk_tbl on", "references dcim_site(id)"],
    ),
    (
        "extra-unique-constraint",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_uq_pair UNIQUE (netbox_cluster_id, name)"],
        [f"unexpected unique constraint own_uq_pair on {E} touches netbox_cluster_id"],
    ),
    (
        "extra-check-on-column",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_ck CHECK (netbox_cluster_id > 0)"],
        [f"unexpected check constraint own_ck on {E} touches netbox_cluster_id"],
    ),
    (
        "check-through-expression",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_ck_expr CHECK (coalesce(netbox_cluster_id, 0) >= 0)"],
        [f"unexpected check constraint own_ck_expr on {E} touches netbox_cluster_id"],
    ),
    (
        "whole-row-check",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_ck_row CHECK ({E} IS NOT NULL) NOT VALID"],
        [f"unexpected check constraint own_ck_row on {E} references the whole row"],
    ),
    (
        "whole-row-expression-index",
        [f"CREATE INDEX own_ix_row ON {E} (({E} IS NOT NULL))"],
        [f"unexpected index own_ix_row on {E} references the whole row"],
    ),
    (
        "partial-index-predicate-uses-column",
        [f"CREATE INDEX own_ix_pred ON {E} (name) WHERE netbox_cluster_id IS NOT NULL"],
        [f"unexpected index own_ix_pred on {E} touches netbox_cluster_id"],
    ),
    (
        "exclusion-constraint",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_excl EXCLUDE USING btree (netbox_cluster_id WITH =)"],
        [f"unexpected exclusion constraint own_excl on {E} touches netbox_cluster_id"],
    ),
    (
        "extra-fk-from-column",
        [
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_extra FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES dcim_site (id)"
        ],
        [f"unexpected foreign key own_fk_extra on {E} touches netbox_cluster_id"],
    ),
    (
        "duplicate-valid-fk",
        [
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_twice FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES virtualization_cluster (id)"
        ],
        ["unexpected foreign key", f"on {E} touches netbox_cluster_id"],
    ),
    (
        "fk-referencing-ownership-column",
        [
            f"CREATE TABLE own_referrer (cluster bigint CONSTRAINT own_ref_fk "
            f"REFERENCES {E} (netbox_cluster_id))"
        ],
        ["unexpected referencing foreign key own_ref_fk on own_referrer touches netbox_cluster_id"],
    ),
    (
        "wrong-default",
        [f"ALTER TABLE {S} ALTER COLUMN status SET DEFAULT 'never'"],
        [f"column {S}.status has database default", "expected none"],
    ),
    (
        "default-on-ownership-column",
        [f"ALTER TABLE {E} ALTER COLUMN netbox_cluster_id SET DEFAULT 1"],
        [f"column {E}.netbox_cluster_id has database default '1', expected none"],
    ),
    (
        "missing-identity",
        [f"ALTER TABLE {T} ALTER COLUMN id DROP IDENTITY"],
        [f"column {T}.id identity is 'missing', expected an identity column"],
    ),
    (
        "uninspectable-expression",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_ck_huge CHECK (description NOT IN ({HUGE_IN_LIST}))"],
        [f"check constraint own_ck_huge on {E} cannot be inspected", "failing closed"],
    ),
    (
        "extra-index-on-owned-table",
        [f"CREATE INDEX own_ix_name ON {T} (name)"],
        [f"unexpected index own_ix_name on {T} on a table this release owns"],
    ),
    (
        "missing-fk-on-owned-table",
        [drop_fk(S, "cluster_id")],
        [f"{S}(cluster_id) -> virtualization_cluster(id) has no validated foreign key"],
    ),
    (
        "missing-declared-index",
        ["DROP INDEX netbox_prox_endpoin_867969_idx"],
        [f"{T}(endpoint_id, cluster_id) has no valid plain index"],
    ),
    (
        "missing-fk-index",
        [f"DROP INDEX {T}_netbox_cluster_id_d2dfa8c2"],
        [f"{T}(netbox_cluster_id) has no valid plain index"],
    ),
    (
        "missing-column-check",
        [f"ALTER TABLE {T} DROP CONSTRAINT {T}_node_count_check"],
        [f"{T}(node_count) lacks its validated CHECK (node_count>=0)"],
    ),
    (
        "missing-column",
        [f"ALTER TABLE {S} DROP COLUMN message"],
        [f"column {S}.message is missing"],
    ),
    (
        "missing-table",
        [f"DROP TABLE {S}"],
        [f"table {S} is missing"],
    ),
    (
        "check-on-credential-column",
        [
            f"ALTER TABLE {E} ADD CONSTRAINT own_ck_secret "
            "CHECK (length(token_secret_ciphertext) < 5000)"
        ],
        [f"unexpected check constraint own_ck_secret on {E} touches token_secret_ciphertext"],
    ),
    (
        "endpoint-column-wrong-size",
        [f"ALTER TABLE {E} ALTER COLUMN token_id TYPE varchar(100)"],
        [f"column {E}.token_id has type character varying(100), expected character varying(255)"],
    ),
    (
        "endpoint-name-unique-dropped",
        [f"ALTER TABLE {E} DROP CONSTRAINT {E}_name_key"],
        [f"{E}(name) has no enforcing unique index"],
    ),
    (
        "unique-sidecar-link-dropped",
        [f"ALTER TABLE {S} DROP CONSTRAINT {S}_proxmox_cluster_id_key"],
        [f"{S}(proxmox_cluster_id) has no enforcing unique index"],
    ),
]


def test_corpus_has_the_required_breadth():
    assert len(CORPUS) >= 20
    assert len({case[0] for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(
    ("statements", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS]
)
def test_malformed_schema_fails_naming_the_object(historical_apps, statements, expected):
    execute(*statements)
    with pytest.raises(schema.SchemaValidationError) as failure:
        run_validator(historical_apps)
    message = str(failure.value)
    assert "nothing was repaired" in message
    for text in expected:
        assert text in message, message


def test_good_schema_passes_and_prints_the_marker_with_the_source_identity(historical_apps):
    output = run_validator(historical_apps)
    digest, version = schema.source_identity()
    assert output.startswith(schema.MARKER + " ")
    assert "PROXBOX_OWNERSHIP_SCHEMA_VALIDATED_V1 (transaction commit pending)" in output
    assert f"sha256={digest}" in output and f"version={version}" in output
    assert "_release_0_1_0_schema.py" in output
    import hashlib
    from pathlib import Path

    assert digest == hashlib.sha256(Path(schema.__file__).read_bytes()).hexdigest()


def test_unrelated_endpoint_policy_constraints_are_out_of_scope(historical_apps):
    execute(
        f"ALTER TABLE {E} ADD CONSTRAINT own_policy_port CHECK (port BETWEEN 1 AND 65535)",
        f"CREATE INDEX own_policy_host ON {E} (host)",
        f"ALTER TABLE {E} ADD CONSTRAINT own_policy_scalar CHECK (length(host || name) > 0)",
    )
    assert schema.MARKER in run_validator(historical_apps)


def test_deferred_ddl_is_drained_before_the_check(historical_apps):
    execute("DROP INDEX netbox_prox_endpoin_867969_idx")
    recreate = (
        f'CREATE INDEX "netbox_prox_endpoin_867969_idx" ON "{T}" ("endpoint_id", "cluster_id")'
    )
    assert schema.MARKER in run_validator(historical_apps, deferred=[recreate])


def test_failing_deferred_ddl_fails_the_validation(historical_apps):
    from django.db import ProgrammingError

    with pytest.raises(ProgrammingError):
        run_validator(historical_apps, deferred=['CREATE INDEX "own_x" ON "own_missing" ("x")'])


def test_node_scan_tells_whole_row_from_expression_slots():
    whole = "{NULLTEST :arg {VAR :varno 1 :varattno 0 :vartype 1 :vartypmod -1 :varcollid 0 :varlevelsup 0 :varnosyn 1 :varattnosyn 0 :location 1} :argisrow true}"
    scalar = "({FUNCEXPR :args ({VAR :varno 1 :varattno 17 :vartype 20 :vartypmod -1 :varcollid 0 :varlevelsup 0 :varnosyn 1 :varattnosyn 17 :location 7})})"
    assert schema.node_attnums(whole) == (set(), True)
    assert schema.node_attnums(scalar) == ({17}, False)
    assert schema.node_attnums(None) == (set(), False)
    with pytest.raises(schema.Uninspectable):
        schema.node_attnums("{VAR :varattno 3}")  # a reference this scan cannot read
    with pytest.raises(schema.Uninspectable):
        schema.node_attnums("x" * (schema.MAX_NODE_TEXT + 1))


# --- fixture models: each object kind the general checker supports ---------------------------


@isolate_apps("netbox_proxbox")
def test_fixture_models_prove_every_object_kind():
    class FixtureTag(models.Model):
        slug = models.CharField(max_length=30, unique=True)

        class Meta:
            app_label = "netbox_proxbox"
            db_table = "own_fixture_tag"

    class FixtureItem(models.Model):
        label = models.CharField(max_length=20, db_index=True)
        note = models.TextField(unique=True)
        count = models.PositiveSmallIntegerField(db_default=0)
        tags = models.ManyToManyField(FixtureTag, db_table="own_fixture_item_tags")

        class Meta:
            app_label = "netbox_proxbox"
            db_table = "own_fixture_item"
            unique_together = (("label", "count"),)
            indexes = (models.Index(fields=("count", "label"), name="own_fixture_count_label"),)

    with connection.schema_editor() as editor:
        editor.create_model(FixtureTag)
        editor.create_model(FixtureItem)
    expected = schema.Expected()
    schema.derive_model(expected, FixtureItem, connection)
    schema.derive_model(expected, FixtureTag, connection)
    assert "own_fixture_item_tags" in expected.tables  # the automatic M2M through table

    def problems(*statements):
        with transaction.atomic():
            execute(*statements)
            with connection.cursor() as cursor:
                found = schema.check_schema(cursor, expected)
            transaction.set_rollback(True)
        return "\n".join(found)

    assert problems() == ""
    assert "table own_fixture_item_tags is missing" in problems("DROP TABLE own_fixture_item_tags")
    assert "column own_fixture_item.count has database default '5', expected '0'" in problems(
        "ALTER TABLE own_fixture_item ALTER COLUMN count SET DEFAULT 5"
    )
    assert "column own_fixture_item.count has database default None, expected '0'" in problems(
        "ALTER TABLE own_fixture_item ALTER COLUMN count DROP DEFAULT"
    )
    assert "column own_fixture_item.id identity is 'missing'" in problems(
        "ALTER TABLE own_fixture_item ALTER COLUMN id DROP IDENTITY"
    )
    assert "column own_fixture_item.id identity is 'a'" in problems(
        "ALTER TABLE own_fixture_item ALTER COLUMN id SET GENERATED ALWAYS"
    )
    assert "own_fixture_item(note text_pattern_ops) has no valid plain index" in problems(
        "DROP INDEX own_fixture_item_note_" + _suffix("own_fixture_item", "note", "_like")
    )
    assert "own_fixture_tag(slug) has no enforcing unique index" in problems(
        "ALTER TABLE own_fixture_tag DROP CONSTRAINT own_fixture_tag_slug_key"
    )
    assert "own_fixture_item(label, count) has no enforcing unique index" in problems(
        _drop_unique("own_fixture_item", ["label", "count"])
    )
    assert "own_fixture_item(count, label) has no valid plain index" in problems(
        "DROP INDEX own_fixture_count_label"
    )
    assert "own_fixture_item(count) lacks its validated CHECK (count>=0)" in problems(
        "ALTER TABLE own_fixture_item DROP CONSTRAINT own_fixture_item_count_check"
    )
    through = "own_fixture_item_tags"
    assert f"{through}(fixtureitem_id) -> own_fixture_item(id) has no validated foreign key" in (
        problems(drop_fk(through, "fixtureitem_id"))
    )
    assert f"{through}(fixtureitem_id, fixturetag_id) has no enforcing unique index" in problems(
        _drop_unique(through, ["fixtureitem_id", "fixturetag_id"])
    )
    assert f"column {through}.fixturetag_id has type integer" in problems(
        f"ALTER TABLE {through} ALTER COLUMN fixturetag_id TYPE integer"
    )


def _suffix(table, column, suffix):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE %s AND relname LIKE %s",
            [f"{table}_{column}_%", f"%{suffix}"],
        )
        return cursor.fetchone()[0].removeprefix(f"{table}_{column}_")


def _drop_unique(table, columns):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u' "
            "AND array_length(conkey, 1) = %s",
            [table, len(columns)],
        )
        return f"ALTER TABLE {table} DROP CONSTRAINT {cursor.fetchone()[0]}"


# --- locks: real concurrent connections ------------------------------------------------------


def other_connection(**kwargs):
    return psycopg.connect(**connection_settings(), **kwargs)


def show_lock_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        return cursor.fetchone()[0]


def test_tables_are_locked_in_a_deterministic_order(historical_apps):
    _expected, order = schema.release_expectations(historical_apps, connection)
    assert order == CHECKED_TABLES == sorted(CHECKED_TABLES)
    run_validator(historical_apps)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND l.mode = 'ShareUpdateExclusiveLock' AND l.granted"
        )
        assert sorted(r[0] for r in cursor.fetchall()) == CHECKED_TABLES


def test_conflicting_lock_fails_within_five_seconds_naming_the_table(historical_apps):
    with other_connection() as holder:
        holder.execute(f"LOCK TABLE {T} IN SHARE ROW EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(schema.SchemaLockTimeout) as failure:
            run_validator(historical_apps)
        elapsed = time.monotonic() - started
    assert 4.5 <= elapsed < 10, elapsed
    assert show_lock_timeout() == "0"  # the rollback discarded the temporary timeout
    message = str(failure.value)
    assert f"Could not lock table {T} within 5000 ms" in message
    assert "release the conflicting schema operation and retry" in message


def test_a_shorter_lock_timeout_is_kept(historical_apps):
    execute("SET LOCAL lock_timeout = '1s'")
    with other_connection() as holder:
        holder.execute(f"LOCK TABLE {E} IN SHARE MODE")
        started = time.monotonic()
        with pytest.raises(schema.SchemaLockTimeout) as failure:
            run_validator(historical_apps)
        elapsed = time.monotonic() - started
    assert elapsed < 4, elapsed
    assert f"Could not lock table {E} within 1000 ms" in str(failure.value)
    assert show_lock_timeout() == "1s"


@pytest.mark.parametrize("previous", ["7s", "0"])
def test_the_previous_lock_timeout_is_restored_after_success(historical_apps, previous):
    execute(f"SET LOCAL lock_timeout = '{previous}'")
    run_validator(historical_apps)
    assert show_lock_timeout() == previous


def test_row_writes_proceed_while_index_ddl_waits(historical_apps):
    run_validator(historical_apps)  # the locks stay held until this transaction ends
    with other_connection() as writer:
        writer.execute("SET lock_timeout = '2s'")
        writer.execute(
            f"INSERT INTO {E} (custom_field_data, name, host, port, verify_tls, token_id, "
            "token_secret_ciphertext, enabled, mode, description, comments) "
            "VALUES ('{}', 'own-row-write', 'h', 8006, true, 't', '', true, 'cluster', '', '')"
        )
        for table in CHECKED_TABLES:
            writer.execute(f"UPDATE {table} SET id = id WHERE id < 0")
        writer.rollback()
        writer.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            writer.execute(f"CREATE INDEX own_blocked ON {T} (name)")
        writer.rollback()
    with other_connection(autocommit=True) as concurrent:
        concurrent.execute("SET lock_timeout = '300ms'")
        try:
            with pytest.raises(psycopg.errors.LockNotAvailable):
                concurrent.execute(f"CREATE INDEX CONCURRENTLY own_blocked_cc ON {T} (name)")
        finally:
            concurrent.execute("SET lock_timeout = '0'")
            exists = concurrent.execute(
                "SELECT 1 FROM pg_class WHERE relname = 'own_blocked_cc'"
            ).fetchone()
    assert exists is None
