"""Physical schema postcondition of endpoint ownership, second version (release 0.2.0).

Private and versioned like ``_release_0_1_0_schema.py``: once released this file is never
edited (its SHA-256 then goes into ``released-migrations.sha256``). It reuses that module's
declarative checker and closes two of its gaps:

- a foreign key is more than its columns and target. Its delete and update actions, match
  type and deferrability are derived from the historical field as Django creates them
  (``NO ACTION`` unless the field asks for a database action, ``DEFERRABLE INITIALLY
  DEFERRED`` on PostgreSQL). An ownership key redeclared ``ON DELETE CASCADE`` would let a
  raw-SQL native cluster delete remove the endpoint, which the spec forbids ("deleting a
  native cluster preserves the endpoint"); one made ``NOT DEFERRABLE`` changes when the
  writers' checks run.
- an additional plain (non-unique) index changes no data rule, so it is no longer rejected
  on the owned tables or the scoped endpoint columns. Additional uniqueness, checks,
  exclusions, foreign keys and other constraints still are, as the spec asks. Declared
  indexes must still exist.

Nothing is ever repaired; the tables are locked exactly as in the first version.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ._release_0_1_0_schema import (
    _CHECKERS,
    Column,
    Expected,
    SchemaValidationError,
    _touches,
    drain_deferred_sql,
    lock_tables,
    canonical_type,
    read_catalog,
    release_expectations,
    restore_lock_timeout,
)

MARKER = "PROXBOX_OWNERSHIP_SCHEMA_VALIDATED_V2 (transaction commit pending)"
APP = "netbox_proxbox"

# pg_constraint's one-letter codes, spelled as SQL writes them.
ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}
MATCH_TYPES = {"s": "MATCH SIMPLE", "f": "MATCH FULL", "p": "MATCH PARTIAL"}
_ACTION_CODES = {sql: code for code, sql in ACTIONS.items()}


@dataclass(frozen=True)
class ForeignKeyRules:
    """How a declared foreign key behaves, beyond what it references."""

    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]
    on_delete: str  # pg_constraint.confdeltype
    on_update: str  # pg_constraint.confupdtype
    match: str  # pg_constraint.confmatchtype
    deferrable: bool
    initially_deferred: bool

    def text(self) -> str:
        return (
            f"{self.table}({', '.join(self.columns)}) -> "
            f"{self.ref_table}({', '.join(self.ref_columns)})"
        )


def deferrability(connection) -> tuple[bool, bool]:
    """(deferrable, initially deferred) of the foreign keys Django creates on `connection`."""
    clause = connection.ops.deferrable_sql().upper()
    return "DEFERRABLE" in clause and "NOT DEFERRABLE" not in clause, "INITIALLY DEFERRED" in clause


def derive_foreign_key_rules(expected: Expected, model, connection) -> None:
    """Add the rules of every foreign key `model` declares (and its automatic M2M tables')."""
    meta = model._meta
    deferrable, deferred = deferrability(connection)
    for f in meta.local_fields:
        if not (f.is_relation and f.concrete and getattr(f, "db_constraint", False) and f.column):
            continue
        # Only Django's database-level actions (DB_CASCADE, DB_SET_NULL, ...) carry an SQL
        # operation; the others are carried out by Django's collector and leave NO ACTION.
        operation = getattr(f.remote_field.on_delete, "operation", None)
        target = f.target_field
        expected.objects.append(
            ForeignKeyRules(
                meta.db_table,
                (f.column,),
                target.model._meta.db_table,
                (target.column,),
                on_delete=_ACTION_CODES[operation] if operation else "a",
                on_update="a",
                match="s",
                deferrable=deferrable,
                initially_deferred=deferred,
            )
        )
    for m2m in meta.local_many_to_many:
        through = m2m.remote_field.through
        if through is not None and through._meta.auto_created:
            derive_foreign_key_rules(expected, through, connection)


def _check_foreign_key_rules(spec: ForeignKeyRules, columns, objects, cursor) -> list[str]:
    """Every foreign key backing `spec` behaves as declared (its absence is reported elsewhere)."""
    problems = []
    backing = [
        o
        for o in objects
        if o.kind == "foreign key"
        and o.keys == spec.columns
        and o.ref_table == spec.ref_table
        and o.ref_columns == spec.ref_columns
    ]
    for obj in backing:
        cursor.execute(
            "SELECT confdeltype, confupdtype, confmatchtype, condeferrable, condeferred "
            "FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s AND contype = 'f'",
            [spec.table, obj.name],
        )
        on_delete, on_update, match, deferrable, deferred = cursor.fetchone()
        where = f"{obj.describe()} ({spec.text()})"
        if on_delete != spec.on_delete:
            problems.append(
                f"{where} has ON DELETE {ACTIONS.get(on_delete, on_delete)}, "
                f"expected ON DELETE {ACTIONS[spec.on_delete]}"
            )
        if on_update != spec.on_update:
            problems.append(
                f"{where} has ON UPDATE {ACTIONS.get(on_update, on_update)}, "
                f"expected ON UPDATE {ACTIONS[spec.on_update]}"
            )
        if match != spec.match:
            problems.append(
                f"{where} is {MATCH_TYPES.get(match, match)}, expected {MATCH_TYPES[spec.match]}"
            )
        if (deferrable, deferred) != (spec.deferrable, spec.initially_deferred):
            problems.append(
                f"{where} is {_deferral(deferrable, deferred)}, "
                f"expected {_deferral(spec.deferrable, spec.initially_deferred)}"
            )
    return problems


def _deferral(deferrable: bool, deferred: bool) -> str:
    if not deferrable:
        return "NOT DEFERRABLE"
    return "DEFERRABLE INITIALLY DEFERRED" if deferred else "DEFERRABLE INITIALLY IMMEDIATE"


CHECKERS = {**_CHECKERS, ForeignKeyRules: _check_foreign_key_rules}


def check_schema(cursor, expected: Expected) -> list[str]:
    """Every difference between the catalogs and `expected`, as messages naming the object."""
    problems: list[str] = []
    catalogs = {}
    for name in sorted(expected.tables):
        catalog = read_catalog(cursor, name)
        if catalog is None:
            problems.append(f"table {name} is missing")
        catalogs[name] = catalog
    for spec in expected.objects:
        catalog = catalogs.get(spec.table)
        if catalog is None:
            continue
        columns, objects = catalog
        problems.extend(CHECKERS[type(spec)](spec, columns, objects, cursor))
    for name in sorted(catalogs):
        if catalogs[name] is None:
            continue
        table = expected.tables[name]
        for obj in catalogs[name][1]:
            if obj.consumed or obj.kind == "index":
                # A plain index enforces nothing: it cannot change what the release's fields hold.
                continue
            if obj.kind == "referencing foreign key" and (
                obj.table in expected.tables or table.exclusive
            ):
                # Checked where it is declared; references into owned tables from other apps
                # belong to those apps.
                continue
            if obj.uninspectable and not table.exclusive:
                problems.append(
                    f"{obj.describe()} cannot be inspected ({obj.uninspectable}); failing closed: "
                    f"it may touch {', '.join(sorted(table.scope))}"
                )
                continue
            reason = _touches(obj, table)
            if reason:
                problems.append(f"unexpected {obj.describe()} {reason}")
    return problems


def array_aware_type(db_type: str) -> str:
    """Django's column type as format_type() prints it, arrays included.

    The first version's canonical_type leaves ``varchar(100)[]`` as it is, while PostgreSQL
    prints ``character varying(100)[]`` (the endpoint's ArrayFields since 0007).
    """
    dimensions = 0
    text = db_type.strip().lower()
    while text.endswith("[]"):
        text, dimensions = text[:-2].rstrip(), dimensions + 1
    return canonical_type(text) + "[]" * dimensions


def expectations(apps, connection) -> tuple[Expected, list[str]]:
    """The first version's expectations plus the rules of every declared foreign key."""
    expected, lock_order = release_expectations(apps, connection)
    expected.objects = [
        replace(spec, type=array_aware_type(spec.type)) if isinstance(spec, Column) else spec
        for spec in expected.objects
    ]
    for model_name in ("ProxmoxCluster", "ProxboxClusterSyncState", "ProxmoxEndpoint"):
        derive_foreign_key_rules(expected, apps.get_model(APP, model_name), connection)
    return expected, lock_order


def source_identity() -> tuple[str, str]:
    """(SHA-256 of this module's source, version of the distribution that installed it).

    The distribution is looked up from the import package where the installer recorded it
    (a wheel), so a renamed distribution still reports its own version; an editable install
    records no files, and then the current distribution name is asked.
    """
    import hashlib
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    for distribution in packages_distributions().get(APP) or ["netbox-proxbox"]:
        try:
            return digest, version(distribution)
        except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
            continue
    return digest, "unknown"  # pragma: no cover


def validate(apps, schema_editor, *, out=None) -> None:
    """The validator migration's operation: drain, lock, check, restore, print the marker."""
    drain_deferred_sql(schema_editor)
    connection = schema_editor.connection
    expected, lock_order = expectations(apps, connection)
    with connection.cursor() as cursor:
        previous = lock_tables(cursor, lock_order)
        problems = check_schema(cursor, expected)
        if problems:
            raise SchemaValidationError(problems)
        restore_lock_timeout(cursor, previous)
    digest, installed = source_identity()
    (out or sys.stdout).write(
        f"{MARKER} module=netbox_proxbox/migrations/{Path(__file__).name} "
        f"sha256={digest} version={installed}\n"
    )
