"""A NetBox database that ran upstream Proxbox (PyPI `netbox-proxbox`, the same app label
`netbox_proxbox`) is refused at `migrate` with one message, and nothing is migrated: its
history is never taken for ours."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connections

from netbox_proxbox.foreign_history import OWN_FIRST_TABLE, foreign_evidence
from proxbox_devstack.netbox_settings import NETBOX_DATABASE_ENV
from proxbox_devstack.testdb import (
    clone_database,
    drop_database,
    ensure_template,
    maintenance_connection,
)

# Migration names of upstream Proxbox's netbox_proxbox app (its first one shares our name).
UPSTREAM_HISTORY = (
    "0001_initial",
    "0002_vmresources_description",
    "0003_auto_20210419_2330",
    "0004_fastapiendpoint_netboxendpoint_proxmoxendpoint_and_more",
    "0005_alter_proxmoxendpoint_name",
)


@pytest.fixture
def upstream_database(django_db_setup, django_db_blocker):
    """A migrated NetBox whose netbox_proxbox history is upstream's (the plugin's own tables
    and rows replaced by an upstream-shaped table and upstream's recorded migrations)."""
    default = connections["default"].settings_dict
    name = f"upstream_history_{os.getpid()}"
    with django_db_blocker.unblock():
        template = ensure_template(default)
        with maintenance_connection(default) as conn:
            clone_database(conn, template, name)
        try:
            yield name
        finally:
            with maintenance_connection(default) as conn:
                drop_database(conn, name)


def connect(settings: dict, name: str) -> psycopg.Connection:
    return psycopg.connect(
        dbname=name,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        autocommit=True,
    )


def make_upstream(conn: psycopg.Connection, history) -> None:
    own = [
        row[0]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'netbox\\_proxbox\\_%'"
        )
    ]
    for table in own:
        conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    conn.execute("DELETE FROM django_migrations WHERE app = 'netbox_proxbox'")
    conn.execute(
        "CREATE TABLE netbox_proxbox_proxmoxendpoint (id bigserial PRIMARY KEY, "
        "ip_address inet, domain varchar(255), token_name varchar(255), verify_ssl boolean)"
    )
    conn.execute("INSERT INTO netbox_proxbox_proxmoxendpoint (domain) VALUES ('pve.upstream')")
    for migration in history:
        conn.execute(
            "INSERT INTO django_migrations (app, name, applied) VALUES ('netbox_proxbox', %s, now())",
            (migration,),
        )


def schema_and_history(conn: psycopg.Connection) -> tuple:
    columns = conn.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'public' ORDER BY 1, 2"
    ).fetchall()
    history = conn.execute("SELECT app, name FROM django_migrations ORDER BY id").fetchall()
    return columns, history


def run_migrate(name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, NETBOX_DATABASE_ENV: name}
    return subprocess.run(
        [sys.executable, "-m", "netbox", "migrate", "--no-input"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_migrate_refuses_an_upstream_history_and_changes_nothing(upstream_database):
    settings = connections["default"].settings_dict
    with connect(settings, upstream_database) as conn:
        make_upstream(conn, UPSTREAM_HISTORY)
        before = schema_and_history(conn)
    result = run_migrate(upstream_database)
    assert result.returncode != 0, result.stdout[-2000:]
    error = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(error) == 1, result.stderr
    assert "migration history is another project's" in error[0]
    assert "0002_vmresources_description" in error[0]
    assert "Nothing was migrated" in error[0]
    with connect(settings, upstream_database) as conn:
        assert schema_and_history(conn) == before
        assert conn.execute("SELECT domain FROM netbox_proxbox_proxmoxendpoint").fetchall() == [
            ("pve.upstream",)
        ]


def test_a_history_of_upstreams_first_migration_only_is_foreign_too(
    upstream_database, django_db_blocker
):
    """Upstream's 0001_initial shares our name: its missing tables give it away."""
    settings = connections["default"].settings_dict
    with connect(settings, upstream_database) as conn:
        make_upstream(conn, UPSTREAM_HISTORY[:1])
    alias = "upstream_history"
    with django_db_blocker.unblock():
        connections.settings[alias] = {**settings, "NAME": upstream_database, "CONN_MAX_AGE": 0}
        try:
            evidence = foreign_evidence(connections[alias])
        finally:
            connections[alias].close()
            del connections[alias]
            del connections.settings[alias]
    assert evidence == [f"0001_initial is recorded but its table {OWN_FIRST_TABLE} does not exist"]


@pytest.mark.django_db
def test_our_own_history_is_not_foreign():
    assert foreign_evidence(connections["default"]) == []
