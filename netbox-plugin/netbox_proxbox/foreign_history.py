"""Refuse to migrate a database whose `netbox_proxbox` history belongs to another project.

Upstream Proxbox (the `netbox-proxbox` distribution on PyPI) uses the same app label,
`netbox_proxbox`, with migrations of its own, some under our names (`0001_initial`). Django
would take their rows in `django_migrations` for ours and run our later migrations on
their tables, leaving a half-migrated schema. A `pre_migrate` check stops `migrate` before
anything runs, with one message saying what was found and what to do.
"""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

APP_LABEL = "netbox_proxbox"
# Created by our 0001_initial; no other project's netbox_proxbox has this model.
OWN_FIRST_TABLE = "netbox_proxbox_proxboxclustersyncstate"
MIGRATION_NAME = re.compile(r"^\d{4}_\w+$")
# Read as files: importing the migrations package from here would import this app's package.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
MAX_NAMED = 5


class ForeignMigrationHistory(CommandError):
    pass


def own_migration_names() -> set[str]:
    return {
        module.name
        for module in pkgutil.iter_modules([str(MIGRATIONS_DIR)])
        if MIGRATION_NAME.match(module.name)
    }


def foreign_evidence(connection) -> list[str]:
    """What in this database's history is not ours (empty: nothing foreign)."""
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return []
    recorded = sorted(name for app, name in recorder.applied_migrations() if app == APP_LABEL)
    if not recorded:
        return []
    foreign = [name for name in recorded if name not in own_migration_names()]
    if foreign:
        shown = ", ".join(foreign[:MAX_NAMED])
        more = f" and {len(foreign) - MAX_NAMED} more" if len(foreign) > MAX_NAMED else ""
        return [f"recorded migrations this plugin does not have: {shown}{more}"]
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    if OWN_FIRST_TABLE not in tables:
        return [f"0001_initial is recorded but its table {OWN_FIRST_TABLE} does not exist"]
    return []


def refuse_foreign_history(sender, using=None, **kwargs) -> None:
    evidence = foreign_evidence(connections[using or "default"])
    if evidence:
        raise ForeignMigrationHistory(
            f"this database's '{APP_LABEL}' migration history is another project's "
            f"(upstream Proxbox, PyPI 'netbox-proxbox'?): {'; '.join(evidence)}. Nothing was "
            "migrated. Remove that plugin's tables and its django_migrations rows first "
            "(docs/operator-guide.md, 'Coming from upstream Proxbox'), then migrate again."
        )
