"""The test templates' base holds NetBox's own migrations and nothing else: it is keyed
by them alone, so a plugin migration in it would be whichever branch built it first."""

from __future__ import annotations

import os
import subprocess
import sys

from django.db import connections
from psycopg import sql

from proxbox_devstack import testdb
from proxbox_devstack.netbox_settings import NETBOX_DATABASE_ENV, PLUGINS


def test_the_base_template_is_planned_without_the_plugins_migrations():
    """`migrate --plan` on an empty database, as the base is built."""
    settings = connections["default"].settings_dict
    empty = f"proxbox_test_plan_{os.getpid()}"
    with testdb.maintenance_connection(settings) as conn:
        testdb.drop_database(conn, empty)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(empty)))
    try:
        env = dict(
            os.environ,
            **{NETBOX_DATABASE_ENV: empty},
            NETBOX_CONFIGURATION="proxbox_devstack.netbox_configuration",
        )
        plan = subprocess.run(
            [
                sys.executable,
                "-m",
                "proxbox_devstack.migrate_without_icu",
                testdb.WITHOUT_APPS_OPTION,
                ",".join(PLUGINS),
                "--plan",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        with testdb.maintenance_connection(settings) as conn:
            testdb.drop_database(conn, empty)
    assert plan.returncode == 0, plan.stderr
    planned = {line.split()[0].split(".")[0] for line in plan.stdout.splitlines() if "." in line}
    assert {"dcim", "virtualization", "extras"} <= planned, plan.stdout[:2000]
    assert not set(PLUGINS) & planned, sorted(planned)
