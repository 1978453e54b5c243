"""The second schema validator (0010, `_release_0_2_0_schema.py`) against malformed schemas.

Like test_schema_validator.py: each malformation is applied by raw SQL inside the test's
transaction, the validator runs as its migration runs it, and the rollback restores the
migrated schema. Cases the first validator wrongly passed or failed are run through both,
so each shows the gap and that it is closed.
"""

from __future__ import annotations

import io

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from netbox_proxbox.migrations import _release_0_1_0_schema as first
from netbox_proxbox.migrations import _release_0_2_0_schema as second

from .test_schema_validator import HUGE_IN_LIST, E, S, T, drop_fk, execute

pytestmark = pytest.mark.django_db

FIRST = ("netbox_proxbox", "0005_ownership_schema_validation")
SECOND = ("netbox_proxbox", "0010_ownership_schema_revalidation")


@pytest.fixture(scope="module")
def states(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        loader = MigrationLoader(connection)
        return {
            "first": loader.project_state(FIRST).apps,
            "second": loader.project_state(SECOND).apps,
        }


def run(module, apps) -> str:
    out = io.StringIO()
    with connection.schema_editor() as editor:
        module.validate(apps, editor, out=out)
    return out.getvalue()


def failure(module, apps) -> str:
    with pytest.raises(first.SchemaValidationError) as raised:
        run(module, apps)
    message = str(raised.value)
    assert "nothing was repaired" in message
    return message


def refk(table: str, column: str, ref: str, clause: str) -> list[str]:
    """Replace Django's foreign key on table(column) by one declared with `clause`."""
    return [
        drop_fk(table, column),
        f"ALTER TABLE {table} ADD CONSTRAINT own_fk_rules FOREIGN KEY ({column}) "
        f"REFERENCES {ref} (id) {clause}",
    ]


OWNERSHIP = (
    f"foreign key own_fk_rules on {E} ({E}(netbox_cluster_id) -> virtualization_cluster(id))"
)
SIDECAR = f"foreign key own_fk_rules on {S} ({S}(cluster_id) -> virtualization_cluster(id))"

# (id, statements, substrings the second validator's failure must contain)
FOREIGN_KEY_RULES = [
    (
        "ownership-on-delete-cascade",
        refk(
            E,
            "netbox_cluster_id",
            "virtualization_cluster",
            "ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED",
        ),
        [f"{OWNERSHIP} has ON DELETE CASCADE, expected ON DELETE NO ACTION"],
    ),
    (
        "ownership-not-deferrable",
        refk(E, "netbox_cluster_id", "virtualization_cluster", "NOT DEFERRABLE"),
        [f"{OWNERSHIP} is NOT DEFERRABLE, expected DEFERRABLE INITIALLY DEFERRED"],
    ),
    (
        "ownership-initially-immediate",
        refk(E, "netbox_cluster_id", "virtualization_cluster", "DEFERRABLE INITIALLY IMMEDIATE"),
        [f"{OWNERSHIP} is DEFERRABLE INITIALLY IMMEDIATE, expected DEFERRABLE INITIALLY DEFERRED"],
    ),
    (
        "ownership-on-delete-set-null-in-the-database",
        refk(
            E,
            "netbox_cluster_id",
            "virtualization_cluster",
            "ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED",
        ),
        [f"{OWNERSHIP} has ON DELETE SET NULL, expected ON DELETE NO ACTION"],
    ),
    (
        "ownership-on-update-cascade",
        refk(
            E,
            "netbox_cluster_id",
            "virtualization_cluster",
            "ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED",
        ),
        [f"{OWNERSHIP} has ON UPDATE CASCADE, expected ON UPDATE NO ACTION"],
    ),
    (
        "ownership-match-full",
        refk(
            E,
            "netbox_cluster_id",
            "virtualization_cluster",
            "MATCH FULL DEFERRABLE INITIALLY DEFERRED",
        ),
        [f"{OWNERSHIP} is MATCH FULL, expected MATCH SIMPLE"],
    ),
    (
        "sidecar-cluster-on-delete-restrict",
        refk(
            S,
            "cluster_id",
            "virtualization_cluster",
            "ON DELETE RESTRICT DEFERRABLE INITIALLY DEFERRED",
        ),
        [f"{SIDECAR} has ON DELETE RESTRICT, expected ON DELETE NO ACTION"],
    ),
]


@pytest.mark.parametrize(
    ("statements", "expected"),
    [c[1:] for c in FOREIGN_KEY_RULES],
    ids=[c[0] for c in FOREIGN_KEY_RULES],
)
def test_foreign_key_rules_the_first_validator_passed_fail_the_second(states, statements, expected):
    execute(*statements)
    assert first.MARKER in run(first, states["first"])  # the gap
    message = failure(second, states["second"])
    for text in expected:
        assert text in message, message


def test_plain_indexes_the_first_validator_rejected_pass_the_second(states):
    execute(
        f"CREATE INDEX own_ix_name ON {T} (name)",  # owned table
        f"CREATE INDEX own_ix_sidecar ON {S} (status, last_sync)",  # owned table
        f"CREATE INDEX own_ix_pred ON {E} (name) WHERE netbox_cluster_id IS NOT NULL",
        f"CREATE INDEX own_ix_row ON {E} (({E} IS NOT NULL))",  # whole row, but not unique
    )
    message = failure(first, states["first"])
    assert f"unexpected index own_ix_name on {T} on a table this release owns" in message
    assert f"unexpected index own_ix_pred on {E} touches netbox_cluster_id" in message
    assert second.MARKER in run(second, states["second"])


# (id, statements, substrings the second validator's failure must contain)
STILL_REJECTED = [
    (
        "unique-index-on-owned-table",
        [f"CREATE UNIQUE INDEX own_uq_name ON {T} (name, endpoint_id)"],
        [f"unexpected unique index own_uq_name on {T} on a table this release owns"],
    ),
    (
        "whole-row-unique-expression-index",
        [f"CREATE UNIQUE INDEX own_uq_row ON {E} (({E} IS NOT NULL), id)"],
        [f"unexpected unique index own_uq_row on {E} references the whole row"],
    ),
    (
        "partial-unique-index-on-ownership-predicate",
        [f"CREATE UNIQUE INDEX own_uq_pred ON {E} (name) WHERE netbox_cluster_id > 0"],
        [f"unexpected unique index own_uq_pred on {E} touches netbox_cluster_id"],
    ),
    (
        "check-on-owned-table",
        [f"ALTER TABLE {S} ADD CONSTRAINT own_ck CHECK (errors < 10)"],
        [f"unexpected check constraint own_ck on {S} on a table this release owns"],
    ),
    (
        "exclusion-on-ownership",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_excl EXCLUDE USING btree (netbox_cluster_id WITH =)"],
        [f"unexpected exclusion constraint own_excl on {E} touches netbox_cluster_id"],
    ),
    (
        "extra-foreign-key-on-ownership",
        [
            f"ALTER TABLE {E} ADD CONSTRAINT own_fk_extra FOREIGN KEY (netbox_cluster_id) "
            "REFERENCES dcim_site (id)"
        ],
        [f"unexpected foreign key own_fk_extra on {E} touches netbox_cluster_id"],
    ),
    (
        "uninspectable-check-on-endpoint",
        [f"ALTER TABLE {E} ADD CONSTRAINT own_ck_huge CHECK (description NOT IN ({HUGE_IN_LIST}))"],
        [f"check constraint own_ck_huge on {E} cannot be inspected", "failing closed"],
    ),
    (
        "missing-declared-index",
        ["DROP INDEX netbox_prox_endpoin_867969_idx"],
        [f"{T}(endpoint_id, cluster_id) has no valid plain index"],
    ),
    (
        "missing-ownership-foreign-key",
        [drop_fk(E, "netbox_cluster_id")],
        [f"{E}(netbox_cluster_id) -> virtualization_cluster(id) has no validated foreign key"],
    ),
]


@pytest.mark.parametrize(
    ("statements", "expected"), [c[1:] for c in STILL_REJECTED], ids=[c[0] for c in STILL_REJECTED]
)
def test_what_the_spec_rejects_still_fails_the_second_validator(states, statements, expected):
    execute(*statements)
    message = failure(second, states["second"])
    for text in expected:
        assert text in message, message


def test_the_migrated_schema_passes_and_prints_the_second_marker(states):
    output = run(second, states["second"])
    digest, version = second.source_identity()
    assert output == (
        "PROXBOX_OWNERSHIP_SCHEMA_VALIDATED_V2 (transaction commit pending) "
        f"module=netbox_proxbox/migrations/_release_0_2_0_schema.py sha256={digest} "
        f"version={version}\n"
    )
    assert version not in ("", "unknown")


def test_every_declared_foreign_key_of_the_checked_models_has_rules(states):
    expected, _order = second.expectations(states["second"], connection)
    rules = {
        (r.table, r.columns) for r in expected.objects if isinstance(r, second.ForeignKeyRules)
    }
    keys = {(k.table, k.columns) for k in expected.objects if isinstance(k, first.ForeignKey)}
    assert rules == keys
    assert (E, ("netbox_cluster_id",)) in rules and (S, ("cluster_id",)) in rules


def test_validation_is_the_last_operation_of_the_second_validator_migration():
    import importlib

    from django.db import migrations

    module = importlib.import_module(f"netbox_proxbox.migrations.{SECOND[1]}")
    last = module.Migration.operations[-1]
    assert isinstance(last, migrations.RunPython) and last.code is second.validate
    assert module.Migration.atomic
