"""pytest plugin: NetBox test databases cloned from a migrated template, and a fast
password hasher for the tests that use them.

Imported by the workspace root conftest.py (a conftest fixture overrides
pytest-django's own `django_db_setup`, which would
run every NetBox migration for each run.
"""

from __future__ import annotations

import pytest

# Django's advice for test suites: its default hasher (PBKDF2, 1.5 million rounds) costs
# 0.36 CPU-s a hash here, paid by every test user with a password and every login. PBKDF2
# stays second, so a hash written by a NetBox process a test starts (NetBox's own
# settings) still verifies in the test process.
TEST_PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    from django.conf import settings
    from django.db import connections
    from django.test import override_settings

    from .testdb import clone_database, ensure_template, maintenance_connection

    # Django's own override: its setting_changed signal empties the hasher caches.
    fast_hashers = override_settings(PASSWORD_HASHERS=TEST_PASSWORD_HASHERS)
    fast_hashers.enable()
    default = connections["default"]
    test_name = default.settings_dict["TEST"]["NAME"]
    with django_db_blocker.unblock():
        template = ensure_template(default.settings_dict)
        with maintenance_connection(default.settings_dict) as conn:
            clone_database(conn, template, test_name)
        default.close()
        default.settings_dict["NAME"] = test_name
        settings.DATABASES["default"]["NAME"] = test_name
    try:
        yield
    finally:
        fast_hashers.disable()
    with django_db_blocker.unblock():
        for connection in connections.all():
            connection.close()
        with maintenance_connection(default.settings_dict) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{test_name}" WITH (FORCE)')
