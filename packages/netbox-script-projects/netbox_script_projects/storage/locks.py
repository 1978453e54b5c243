"""The Project lock: a PostgreSQL advisory lock keyed by the Project's storage_key.

Staging, refresh, activation and storage cleanup hold it at session level,
because they coordinate revision rows with stored content, which no
database transaction covers; storage I/O then needs no long transaction, and
a crashed worker's lock goes away with its database session. Script File
writes take the transaction-level form of the same key (the "write lock"),
so they serialize with those operations without holding a session lock.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager

from django.apps import apps
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    OperationalError,
    connections,
    router,
    transaction,
)

from ..constants import ADVISORY_LOCK_NAMESPACE, get_limits
from .errors import ProjectBusy, UnsafeDatabaseAlias


def lock_key(storage_key) -> tuple[int, int]:
    """The two int4 keys of a Project's lock (namespace, storage_key bits).

    Two projects may share the second key; that only serializes them.
    """
    key = storage_key if isinstance(storage_key, uuid.UUID) else uuid.UUID(str(storage_key))
    return ADVISORY_LOCK_NAMESPACE, int.from_bytes(key.bytes[:4], "big", signed=True)


def require_default_database(using: str | None) -> str:
    """Revision rows, cleanup Jobs and locks live together on the default database."""
    using = using or DEFAULT_DB_ALIAS
    if using != DEFAULT_DB_ALIAS:
        raise UnsafeDatabaseAlias(
            f"Script project storage operations run on the {DEFAULT_DB_ALIAS!r} database only, not {using!r}"
        )
    return using


def routed_revision_database() -> str:
    """The alias revision rows are routed to now (reads or writes), default first.

    A router may send them elsewhere (e.g. an active branch schema) even when
    no caller names an alias; returns the first non-default alias it picks.
    """
    # Through the app registry: the models take these locks, so importing them here
    # would make a circle.
    revision_model = apps.get_model("netbox_script_projects", "ScriptProjectRevision")
    for alias in (router.db_for_write(revision_model), router.db_for_read(revision_model)):
        if alias not in (None, DEFAULT_DB_ALIAS):
            return alias
    return DEFAULT_DB_ALIAS


def require_default_routing(using: str | None = None) -> str:
    """require_default_database() for the named alias and where revisions are routed."""
    require_default_database(using)
    return require_default_database(routed_revision_database())


@contextmanager
def _lock_timeout(cursor, timeout: float):
    """lock_timeout for the statements of the block only.

    Set locally inside the caller's (sub)transaction and restored before it
    ends, so it never outlives the lock request.
    """
    cursor.execute("SELECT current_setting('lock_timeout')")
    previous = cursor.fetchone()[0]
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(timeout * 1000)}ms"])
    yield
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


def _busy(timeout: float) -> ProjectBusy:
    return ProjectBusy(f"The project is busy (lock not granted within {timeout:g} s)")


@contextmanager
def project_lock(storage_key, using: str | None = None, timeout: float | None = None):
    """Hold the session-level Project lock for the duration of the block."""
    using = require_default_database(using)
    connection = connections[using]
    classid, objid = lock_key(storage_key)
    timeout = get_limits().lock_timeout if timeout is None else timeout
    try:
        with (
            transaction.atomic(using=using),
            connection.cursor() as cursor,
            _lock_timeout(cursor, timeout),
        ):
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [classid, objid])
    except OperationalError as exc:
        raise _busy(timeout) from exc
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [classid, objid])
        except DatabaseError:
            # Ending the session is the one release that cannot fail.
            connection.close()


def project_write_lock(storage_key, using: str | None = None, timeout: float | None = None) -> None:
    """Take the transaction-level form of the Project lock (released at commit).

    Waits at most the configured lock timeout, then raises ProjectBusy; the
    failed request is rolled back to its own savepoint, so the caller's
    transaction stays usable.
    """
    using = require_default_database(using)
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RuntimeError("project_write_lock() must run inside a transaction")
    timeout = get_limits().lock_timeout if timeout is None else timeout
    try:
        with (
            transaction.atomic(using=using),
            connection.cursor() as cursor,
            _lock_timeout(cursor, timeout),
        ):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(lock_key(storage_key)))
    except OperationalError as exc:
        raise _busy(timeout) from exc
