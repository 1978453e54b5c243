"""pytest plugin: NetBox test databases cloned from a migrated template.

Imported by the workspace root conftest.py (a conftest fixture overrides
pytest-django's own `django_db_setup`, which would
run every NetBox migration for each run.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    from django.conf import settings
    from django.db import connections

    from .testdb import clone_database, ensure_template, maintenance_connection

    default = connections["default"]
    test_name = default.settings_dict["TEST"]["NAME"]
    with django_db_blocker.unblock():
        template = ensure_template(default.settings_dict)
        with maintenance_connection(default.settings_dict) as conn:
            clone_database(conn, template, test_name)
        default.close()
        default.settings_dict["NAME"] = test_name
        settings.DATABASES["default"]["NAME"] = test_name
    yield
    with django_db_blocker.unblock():
        for connection in connections.all():
            connection.close()
        with maintenance_connection(default.settings_dict) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{test_name}" WITH (FORCE)')
