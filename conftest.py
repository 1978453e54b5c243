"""Workspace-wide pytest configuration.

NetBox test databases are cloned from a migrated template instead of being
migrated for each run (a conftest fixture overrides pytest-django's own).
"""

from proxbox_devstack.pytest_plugin import django_db_setup  # noqa: F401
