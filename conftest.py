"""Workspace-wide pytest configuration.

NetBox test databases are cloned from a migrated template instead of being
migrated for each run (a conftest fixture overrides pytest-django's own). Every test
process (xdist workers too) runs the cyclic garbage collector at the thresholds the
services use (`proxbox_processes.collect_garbage_less_often`).
"""

from proxbox_processes import collect_garbage_less_often

from proxbox_devstack.pytest_plugin import django_db_setup  # noqa: F401

collect_garbage_less_often()
