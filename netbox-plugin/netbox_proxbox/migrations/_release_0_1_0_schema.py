"""Physical schema postcondition of release 0.1.0 (endpoint ownership of native clusters).

Private and versioned: once released this file is never edited (its SHA-256 is
recorded in ``released-migrations.sha256``); a later release adds its own
``_release_<version>_schema.py`` and may import the general checker from here.

The expected objects are derived from the historical model state the migration
receives, never from the live models, and compared with PostgreSQL's catalogs:

- every column (type, nullability, database default, identity) of the tables
  the release owns, and of the ownership column on the endpoint table;
- primary keys, declared uniqueness (exactly one enforcing, single-purpose unique
  index: non-partial, no expressions, NULLS DISTINCT, valid, immediate),
  validated foreign keys to the right table and column with matching types,
  declared and implicit indexes (Django's ``_like`` pattern indexes included),
  Django's column checks, automatic M2M through tables;
- nothing else: an additional unique, check, exclusion or foreign-key constraint
  or index touching the release's fields or tables is rejected, including through
  expressions, predicates and whole-row references.

Nothing is ever repaired. The checked tables are locked (SHARE UPDATE EXCLUSIVE,
deterministic order, until the transaction ends) so no index or constraint DDL
can change the result before the migration commits.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from django.db import DatabaseError
from django.db.models import NOT_PROVIDED
from django.db.models.fields import AutoFieldMixin

MARKER = "PROXBOX_OWNERSHIP_SCHEMA_VALIDATED_V1 (transaction commit pending)"
# Lock acquisition never waits longer than this; a shorter existing lock_timeout is kept.
LOCK_TIMEOUT_MS = 5000
# Stored expression trees longer than this are not inspected: the object fails closed.
MAX_NODE_TEXT = 16384
LOCK_NOT_AVAILABLE = "55P03"


class SchemaValidationError(RuntimeError):
    """The physical schema differs from the release's postcondition (nothing was changed)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(
            "Proxbox schema validation failed; nothing was repaired. Preserve this error and the "
            "existing data, investigate the schema and obtain a reviewed repair before retrying "
            "the same migration:\n" + "\n".join(f"- {p}" for p in problems)
        )


class SchemaLockTimeout(RuntimeError):
    """Another session holds a lock that conflicts with the validator's table locks."""


# --- declarative expected objects -------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    table: str
    name: str
    type: str  # as PostgreSQL's format_type() prints it
    nullable: bool
    default: str | None = None  # normalized database default expression, None: no default
    identity: str = ""  # pg_attribute.attidentity: "d" (BY DEFAULT), "a" (ALWAYS) or ""


@dataclass(frozen=True)
class PrimaryKey:
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Unique:
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    table: str
    columns: tuple[str, ...]
    opclasses: tuple[str, ...] = ()  # empty: the default operator classes


@dataclass(frozen=True)
class ForeignKey:
    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class Check:
    table: str
    columns: tuple[str, ...]
    definition: str  # normalized predicate


@dataclass(frozen=True)
class Table:
    name: str
    # Exclusive: the release owns the table; every constraint and index on it must be
    # expected. Otherwise only objects touching `scope` (or the whole row) are checked.
    exclusive: bool
    scope: frozenset[str] = frozenset()


@dataclass
class Expected:
    tables: dict[str, Table] = field(default_factory=dict)
    objects: list = field(default_factory=list)

    def add_table(self, table: Table) -> None:
        known = self.tables.get(table.name)
        if known is not None and not known.exclusive and not table.exclusive:
            table = Table(table.name, False, known.scope | table.scope)
        self.tables[table.name] = table

    def lock_order(self, *extra: str) -> list[str]:
        return sorted({*self.tables, *extra})


# --- derivation from (historical) models -------------------------------------------------------

_TYPE_NAMES = {
    "varchar": "character varying",
    "timestamp": "timestamp without time zone",
    "serial": "integer",
    "bigserial": "bigint",
    "smallserial": "smallint",
}


class UnsupportedDeclaration(RuntimeError):
    """The deriver cannot express a declared object; validation fails closed."""


def canonical_type(db_type: str) -> str:
    """Django's column type spelled the way format_type() prints it."""
    text = db_type.strip().lower()
    match = re.fullmatch(r"([a-z ]+?)\s*(\(.*\))?", text)
    if match is None:
        return text
    base, size = match.group(1), match.group(2) or ""
    return _TYPE_NAMES.get(base, base) + size.replace(" ", "")


def normalize_sql(text: str) -> str:
    """A predicate or default with quoting, casts to named types, parentheses and spaces removed."""
    text = text.strip()
    if text.upper().startswith("CHECK"):
        text = text[5:]
    text = re.sub(r"::[a-z ]+(\(\d+(,\d+)?\))?", "", text.lower())
    return re.sub(r"[\s()\"]", "", text)


def derive_model(
    expected: Expected,
    model,
    connection,
    *,
    fields: tuple[str, ...] | None = None,
    scope: tuple[str, ...] | None = None,
):
    """Add the objects `model` declares.

    `fields` limits the derivation to those fields (table-level declarations are then
    skipped). The table is exclusive (every constraint and index on it must be expected)
    unless `fields` or `scope` is given: then additional objects are rejected only when
    they touch the columns of `scope` (default: `fields`) or the whole row.
    """
    meta = model._meta
    table = meta.db_table
    chosen = [meta.get_field(name) for name in fields] if fields else list(meta.local_fields)
    partial = fields is not None or scope is not None
    scoped = [meta.get_field(name) for name in scope] if scope else chosen
    expected.add_table(
        Table(table, exclusive=not partial, scope=frozenset(f.column for f in scoped) if partial else frozenset())
    )
    for f in chosen:
        _derive_field(expected, table, f, connection)
    if fields is not None:
        return
    for group in meta.unique_together:
        expected.objects.append(
            Unique(table, tuple(meta.get_field(name).column for name in group))
        )
    for index in meta.indexes:
        if index.expressions or index.condition is not None or index.include:
            raise UnsupportedDeclaration(f"index {index.name} on {table}: expressions/conditions")
        expected.objects.append(
            Index(
                table,
                tuple(meta.get_field(name.lstrip("-")).column for name in index.fields),
                tuple(index.opclasses),
            )
        )
    for constraint in meta.constraints:
        columns = getattr(constraint, "fields", ())
        if (
            type(constraint).__name__ != "UniqueConstraint"
            or constraint.condition is not None
            or constraint.expressions
            or constraint.include
            or constraint.nulls_distinct is False
            or constraint.deferrable
        ):
            raise UnsupportedDeclaration(f"constraint {constraint.name} on {table}")
        expected.objects.append(Unique(table, tuple(meta.get_field(n).column for n in columns)))
    for m2m in meta.local_many_to_many:
        through = m2m.remote_field.through
        if through is not None and through._meta.auto_created:
            derive_model(expected, through, connection)


def _derive_field(expected: Expected, table: str, f, connection) -> None:
    db_type = f.db_type(connection)
    if db_type is None or f.column is None:
        return
    default = None
    if f.db_default is not NOT_PROVIDED:
        editor = connection.SchemaEditorClass(connection, collect_sql=True)
        sql, params = editor.db_default_sql(f)
        default = normalize_sql(sql % tuple(editor.quote_value(p) for p in params))
    is_identity = isinstance(f, AutoFieldMixin)
    expected.objects.append(
        Column(
            table,
            f.column,
            canonical_type(db_type),
            nullable=f.null,
            default=default,
            identity="d" if is_identity else "",
        )
    )
    if f.primary_key:
        expected.objects.append(PrimaryKey(table, (f.column,)))
    elif f.unique:
        expected.objects.append(Unique(table, (f.column,)))
    elif f.db_index:
        expected.objects.append(Index(table, (f.column,)))
    if not f.primary_key and (f.db_index or f.unique) and "[" not in db_type:
        # Django adds a pattern-ops index for LIKE queries on varchar and text columns.
        if db_type.startswith("varchar"):
            expected.objects.append(Index(table, (f.column,), ("varchar_pattern_ops",)))
        elif db_type.startswith("text"):
            expected.objects.append(Index(table, (f.column,), ("text_pattern_ops",)))
    check = f.db_check(connection)
    if check:
        expected.objects.append(Check(table, (f.column,), normalize_sql(check)))
    if f.is_relation and f.concrete and getattr(f, "db_constraint", False):
        target = f.target_field
        expected.objects.append(
            ForeignKey(table, (f.column,), target.model._meta.db_table, (target.column,))
        )


# --- catalog inventory ------------------------------------------------------------------------

_VAR = re.compile(r"\{VAR :varno (\d+) :varattno (-?\d+)[^{}]*?:varlevelsup (\d+)[^{}]*\}")


class Uninspectable(Exception):
    pass


def node_attnums(text: str | None) -> tuple[set[int], bool]:
    """Column numbers a stored expression tree (pg_node_tree text) references, and whole-row use.

    A whole-row Var (varattno 0) touches every column even though pg_depend then names only
    the table, like an automatic dependency. Index key slots numbered 0 are expression slots
    and are not whole-row references by themselves; only the stored tree tells. Anything this
    bounded token scan cannot account for raises Uninspectable (the caller fails closed).
    """
    if not text:
        return set(), False
    if len(text) > MAX_NODE_TEXT:
        raise Uninspectable(f"stored expression of {len(text)} characters exceeds the bound")
    found = _VAR.findall(text)
    if len(found) != text.count("{VAR "):
        raise Uninspectable("stored expression has column references this scan cannot read")
    attnums, whole_row = set(), False
    for varno, attno, levelsup in found:
        if varno != "1" or levelsup != "0":
            raise Uninspectable("stored expression references another relation or query level")
        if int(attno) == 0:
            whole_row = True
        elif int(attno) < 0:
            raise Uninspectable("stored expression references a system column")
        else:
            attnums.add(int(attno))
    return attnums, whole_row


@dataclass
class CatalogObject:
    kind: str  # "index", "unique index", "primary key", "exclusion constraint", "check", ...
    name: str
    table: str
    keys: tuple[str, ...] = ()  # plain key columns, in order (index slots that are columns)
    touched: set[str] = field(default_factory=set)
    whole_row: bool = False
    uninspectable: str = ""
    has_expressions: bool = False
    predicate: str | None = None
    nulls_not_distinct: bool = False
    enforcing: bool = True  # valid, ready and (for uniqueness) immediate
    default_opclasses: bool = True
    opclasses: tuple[str, ...] = ()
    method: str = "btree"
    ref_table: str = ""
    ref_columns: tuple[str, ...] = ()
    validated: bool = True
    definition: str = ""
    consumed: bool = False

    def describe(self) -> str:
        return f"{self.kind} {self.name} on {self.table}"


def _names(attnums, columns_by_num) -> tuple[str, ...]:
    return tuple(columns_by_num.get(n, f"#{n}") for n in attnums)


def read_catalog(cursor, table: str):
    """Columns and constraint/index objects of `table`; None when the table does not exist."""
    cursor.execute(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname = %s AND n.nspname = current_schema() AND c.relkind IN ('r', 'p')",
        [table],
    )
    row = cursor.fetchone()
    if row is None:
        return None
    oid = row[0]
    cursor.execute(
        "SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
        "AND d.adnum = a.attnum WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
        [oid],
    )
    columns = {r[1]: r for r in cursor.fetchall()}
    by_num = {r[0]: r[1] for r in columns.values()}
    objects: list[CatalogObject] = []

    cursor.execute(
        "SELECT ic.relname, i.indisunique, i.indisprimary, i.indisvalid AND i.indisready, "
        "i.indimmediate, i.indnullsnotdistinct, i.indkey::int2[], i.indnkeyatts, "
        "i.indexprs::text, i.indpred::text, pg_get_expr(i.indpred, i.indrelid), am.amname, "
        "ARRAY(SELECT o.opcname FROM unnest(i.indclass) WITH ORDINALITY u(oid, n) "
        "      JOIN pg_opclass o ON o.oid = u.oid ORDER BY u.n), "
        "(SELECT bool_and(o.opcdefault) FROM unnest(i.indclass) u(oid) "
        "      JOIN pg_opclass o ON o.oid = u.oid), "
        "(SELECT con.contype FROM pg_constraint con WHERE con.conindid = i.indexrelid "
        "      AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x')) "
        "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
        "JOIN pg_am am ON am.oid = ic.relam WHERE i.indrelid = %s ORDER BY ic.relname",
        [oid],
    )
    for (
        name,
        unique,
        primary,
        ready,
        immediate,
        nnd,
        indkey,
        nkeys,
        exprs,
        pred,
        pred_sql,
        method,
        opclasses,
        default_ops,
        contype,
    ) in cursor.fetchall():
        kind = (
            "primary key"
            if primary
            else "exclusion constraint"
            if contype == "x"
            else "unique constraint"
            if contype == "u"
            else "unique index"
            if unique
            else "index"
        )
        obj = CatalogObject(kind, name, table)
        keys = list(indkey)
        obj.keys = _names([k for k in keys[:nkeys] if k != 0], by_num)
        obj.has_expressions = 0 in keys or bool(exprs)
        obj.touched = set(_names([k for k in keys if k != 0], by_num))
        obj.predicate = pred_sql
        obj.nulls_not_distinct = bool(nnd)
        obj.enforcing = bool(ready) and (bool(immediate) or not unique)
        obj.method = method
        obj.opclasses = tuple(opclasses)
        obj.default_opclasses = bool(default_ops)
        _inspect(obj, (exprs, pred), by_num)
        objects.append(obj)

    cursor.execute(
        "SELECT con.conname, con.contype, con.conkey, con.confrelid::regclass::text, con.confkey, "
        "con.convalidated, con.conbin::text, pg_get_constraintdef(con.oid), "
        "con.conrelid = %s AS outgoing, con.conrelid::regclass::text "
        # PostgreSQL 18 records each NOT NULL as a constraint ('n'); a validated one is the
        # column's nullability, checked with the column. A NOT VALID one is reported (unexpected).
        "FROM pg_constraint con WHERE (con.conrelid = %s AND con.contype NOT IN ('p', 'u', 'x') "
        "AND NOT (con.contype = 'n' AND con.convalidated)) "
        "OR (con.confrelid = %s AND con.contype = 'f' AND con.conrelid <> %s) ORDER BY con.conname",
        [oid, oid, oid, oid],
    )
    for name, contype, conkey, ref_table, confkey, validated, conbin, definition, outgoing, owner in (
        cursor.fetchall()
    ):
        if not outgoing:
            # A foreign key elsewhere that references this table: it touches the referenced columns.
            obj = CatalogObject("referencing foreign key", name, owner)
            obj.touched = set(_names(confkey or [], by_num))
            obj.ref_table, obj.validated = table, bool(validated)
            objects.append(obj)
            continue
        kind = {"c": "check constraint", "f": "foreign key", "t": "constraint trigger"}.get(
            contype, f"constraint ({contype})"
        )
        obj = CatalogObject(kind, name, table)
        obj.keys = _names([k for k in conkey or [] if k != 0], by_num)
        obj.touched = set(obj.keys)
        obj.validated = bool(validated)
        obj.definition = definition
        if contype == "f":
            obj.ref_table = ref_table
            cursor.execute(
                "SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(%s::int2[]) WITH ORDINALITY "
                "k(num, n) JOIN pg_attribute a ON a.attrelid = %s::regclass AND a.attnum = k.num",
                [list(confkey), ref_table],
            )
            obj.ref_columns = tuple(cursor.fetchone()[0] or ())
        _inspect(obj, (conbin,), by_num)
        objects.append(obj)
    return columns, objects


def _inspect(obj: CatalogObject, trees, by_num) -> None:
    for tree in trees:
        try:
            attnums, whole_row = node_attnums(tree)
        except Uninspectable as exc:
            obj.uninspectable = str(exc)
            continue
        obj.touched |= set(_names(sorted(attnums), by_num))
        obj.whole_row |= whole_row


# --- checking ---------------------------------------------------------------------------------


def check_schema(cursor, expected: Expected, *, reject_unexpected: bool = True) -> list[str]:
    """Every difference between the catalogs and `expected`, as messages naming the object.

    With ``reject_unexpected=False`` only the expected objects are verified (additional
    constraints and indexes are not looked at).
    """
    problems: list[str] = []
    catalogs = {}
    for name in sorted(expected.tables):
        catalog = read_catalog(cursor, name)
        if catalog is None:
            problems.append(f"table {name} is missing")
        catalogs[name] = catalog
    for obj in expected.objects:
        catalog = catalogs.get(obj.table)
        if catalog is None:
            continue
        columns, objects = catalog
        checker = _CHECKERS[type(obj)]
        problems.extend(checker(obj, columns, objects, cursor))
    for name in sorted(catalogs):
        if catalogs[name] is None or not reject_unexpected:
            continue
        table = expected.tables[name]
        for obj in catalogs[name][1]:
            if obj.consumed:
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


def _touches(obj: CatalogObject, table: Table) -> str:
    if obj.whole_row:
        return "references the whole row (every column)"
    if table.exclusive:
        return f"on a table this release owns (columns: {', '.join(sorted(obj.touched)) or '-'})"
    hit = sorted(obj.touched & table.scope)
    return f"touches {', '.join(hit)}" if hit else ""


def _check_column(spec: Column, columns, objects, cursor) -> list[str]:
    where = f"column {spec.table}.{spec.name}"
    row = columns.get(spec.name)
    if row is None:
        return [f"{where} is missing"]
    _, _, actual_type, nullable, default, identity, generated = row
    problems = []
    if actual_type != spec.type:
        problems.append(f"{where} has type {actual_type}, expected {spec.type}")
    if nullable != spec.nullable:
        problems.append(
            f"{where} is {'nullable' if nullable else 'NOT NULL'}, expected "
            f"{'nullable' if spec.nullable else 'NOT NULL'}"
        )
    actual_default = normalize_sql(default) if default is not None else None
    if actual_default != spec.default:
        problems.append(
            f"{where} has database default {default!r}, expected "
            + (repr(spec.default) if spec.default is not None else "none")
        )
    if identity != spec.identity:
        expected = "an identity column (GENERATED BY DEFAULT)" if spec.identity else "no identity"
        problems.append(f"{where} identity is {identity or 'missing'!r}, expected {expected}")
    if generated:
        problems.append(f"{where} is a generated column, expected a stored ordinary column")
    return problems


def _claim(candidates, spec_text, near, what):
    """Consume exactly one proper candidate; messages otherwise (naming the near misses)."""
    if len(candidates) == 1:
        candidates[0].consumed = True
        return []
    if len(candidates) > 1:
        names = ", ".join(c.name for c in candidates)
        for c in candidates:
            c.consumed = True
        return [f"{spec_text} is backed by several candidates ({names}); exactly one {what} is expected"]
    detail = "; ".join(near) if near else "none exists"
    return [f"{spec_text} has no {what} ({detail})"]


def _unique_defect(obj: CatalogObject) -> str:
    if obj.predicate:
        return f"{obj.describe()} is partial (WHERE {obj.predicate})"
    if obj.has_expressions:
        return f"{obj.describe()} indexes an expression"
    if obj.nulls_not_distinct:
        return f"{obj.describe()} is NULLS NOT DISTINCT"
    if not obj.enforcing:
        return f"{obj.describe()} is not valid, not ready or deferrable"
    if obj.method != "btree":
        return f"{obj.describe()} uses {obj.method}"
    return ""


def _check_primary_key(spec: PrimaryKey, columns, objects, cursor) -> list[str]:
    found = [o for o in objects if o.kind == "primary key" and o.keys == spec.columns]
    found = [o for o in found if not _unique_defect(o)]
    return _claim(found, f"{spec.table}({', '.join(spec.columns)})", [], "primary key")


def _check_unique(spec: Unique, columns, objects, cursor) -> list[str]:
    candidates = [
        o
        for o in objects
        if o.kind in ("unique constraint", "unique index") and set(spec.columns) <= o.touched
    ]
    proper = [o for o in candidates if o.keys == spec.columns and not _unique_defect(o)]
    near = [_unique_defect(o) for o in candidates if _unique_defect(o)]
    text = f"{spec.table}({', '.join(spec.columns)})"
    return _claim(proper, text, near, "enforcing unique index")


def _check_index(spec: Index, columns, objects, cursor) -> list[str]:
    def fits(o):
        if o.kind != "index" or o.keys != spec.columns or o.has_expressions or o.predicate:
            return False
        if not o.enforcing:
            return False
        return o.opclasses == spec.opclasses if spec.opclasses else o.default_opclasses

    free = [o for o in objects if fits(o) and not o.consumed]
    text = f"{spec.table}({', '.join(spec.columns)}{' ' + ' '.join(spec.opclasses) if spec.opclasses else ''})"
    if free:
        free[0].consumed = True
        return []
    return [f"{text} has no valid plain index"]


def _check_foreign_key(spec: ForeignKey, columns, objects, cursor) -> list[str]:
    text = f"{spec.table}({', '.join(spec.columns)}) -> {spec.ref_table}({', '.join(spec.ref_columns)})"
    candidates = [o for o in objects if o.kind == "foreign key" and o.keys == spec.columns]
    proper = [
        o
        for o in candidates
        if o.ref_table == spec.ref_table and o.ref_columns == spec.ref_columns and o.validated
    ]
    near = []
    for o in candidates:
        if o in proper:
            continue
        if o.ref_table != spec.ref_table or o.ref_columns != spec.ref_columns:
            near.append(f"{o.describe()} references {o.ref_table}({', '.join(o.ref_columns)})")
        elif not o.validated:
            near.append(f"{o.describe()} is NOT VALID (convalidated is false)")
    problems = []
    if len(proper) >= 1:
        # A second identical foreign key stays unconsumed and is reported as unexpected.
        proper[0].consumed = True
    else:
        problems.append(f"{text} has no validated foreign key ({'; '.join(near) or 'none exists'})")
    # The referencing column must have exactly the referenced column's type.
    for column, ref_column in zip(spec.columns, spec.ref_columns, strict=True):
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attname = %s AND NOT attisdropped",
            [spec.ref_table, ref_column],
        )
        ref = cursor.fetchone()
        own = columns.get(column)
        if ref is None:
            problems.append(f"referenced column {spec.ref_table}.{ref_column} is missing")
        elif own is not None and own[2] != ref[0]:
            problems.append(
                f"column {spec.table}.{column} has type {own[2]} but the referenced "
                f"{spec.ref_table}.{ref_column} has type {ref[0]}"
            )
    return problems


def _check_check(spec: Check, columns, objects, cursor) -> list[str]:
    proper = [
        o
        for o in objects
        if o.kind == "check constraint"
        and not o.consumed
        and o.validated
        and normalize_sql(o.definition) == spec.definition
        and o.touched == set(spec.columns)
    ]
    if proper:
        proper[0].consumed = True
        return []
    return [f"{spec.table}({', '.join(spec.columns)}) lacks its validated CHECK ({spec.definition})"]


_CHECKERS = {
    Column: _check_column,
    PrimaryKey: _check_primary_key,
    Unique: _check_unique,
    Index: _check_index,
    ForeignKey: _check_foreign_key,
    Check: _check_check,
}


# --- locking ----------------------------------------------------------------------------------


def lock_tables(cursor, tables: list[str]) -> str:
    """Lock `tables` in the given order until the transaction ends; returns the previous timeout.

    The transaction-local lock_timeout is at most LOCK_TIMEOUT_MS and keeps a shorter one.
    """
    cursor.execute("SELECT current_setting('lock_timeout')")
    previous = cursor.fetchone()[0]
    cursor.execute(
        "SELECT setting::int FROM pg_settings WHERE name = 'lock_timeout'"
    )  # milliseconds; 0 means "wait forever"
    current_ms = cursor.fetchone()[0]
    effective = LOCK_TIMEOUT_MS if current_ms == 0 else min(current_ms, LOCK_TIMEOUT_MS)
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{effective}ms"])
    # A missing table cannot be locked; check_schema reports it.
    cursor.execute(
        "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relkind IN ('r', 'p') "
        "AND relnamespace = current_schema()::regnamespace",
        [tables],
    )
    existing = {row[0] for row in cursor.fetchall()}
    for table in [t for t in tables if t in existing]:
        try:
            cursor.execute(f'LOCK TABLE "{table}" IN SHARE UPDATE EXCLUSIVE MODE')
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                raise SchemaLockTimeout(
                    f"Could not lock table {table} within {effective} ms: another session holds "
                    "a conflicting lock (a schema operation such as CREATE INDEX, ALTER TABLE or "
                    "VACUUM FULL). Preserve its evidence, release the conflicting schema "
                    "operation and retry the migration; nothing was changed."
                ) from exc
            raise
    return previous


def restore_lock_timeout(cursor, previous: str) -> None:
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


# --- this release ------------------------------------------------------------------------------

APP = "netbox_proxbox"


def release_expectations(apps, connection) -> tuple[Expected, list[str]]:
    """What release 0.1.0 adds, from the historical models, and the tables to lock."""
    expected = Expected()
    derive_model(expected, apps.get_model(APP, "ProxmoxCluster"), connection)
    derive_model(expected, apps.get_model(APP, "ProxboxClusterSyncState"), connection)
    endpoint = apps.get_model(APP, "ProxmoxEndpoint")
    # Every endpoint column is checked, but operators may keep their own policy constraints on
    # the endpoint table: only those touching the ownership or credential columns are rejected.
    derive_model(
        expected, endpoint, connection, scope=("netbox_cluster", "token_secret_ciphertext")
    )
    cluster_table = endpoint._meta.get_field("netbox_cluster").target_field.model._meta.db_table
    # The native cluster table is locked too: its primary key type is part of the postcondition.
    return expected, expected.lock_order(cluster_table)


def source_identity() -> tuple[str, str]:
    """(SHA-256 of this module's source, installed package version)."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    try:
        installed = version("netbox-proxbox")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        installed = "unknown"
    return digest, installed


def drain_deferred_sql(schema_editor) -> None:
    """Run the DDL Django deferred within this migration now, so it is part of what is checked."""
    while schema_editor.deferred_sql:
        schema_editor.execute(schema_editor.deferred_sql.pop(0))


def validate(apps, schema_editor, *, out=None) -> None:
    """The validator migration's operation: drain, lock, check, restore, print the marker."""
    drain_deferred_sql(schema_editor)
    connection = schema_editor.connection
    expected, lock_order = release_expectations(apps, connection)
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
