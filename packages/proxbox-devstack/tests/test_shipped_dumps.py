"""The template dumps proxbox-devstack ships: current for today's migrations, and a
real migrated NetBox when restored (what a machine's first `proxbox up` gets)."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import pytest
from django.db.migrations.loader import MigrationLoader

from proxbox_devstack import testdb
from proxbox_devstack.postgres_server import POSTGRES_BIN_PATH

REBUILD = "rebuild them with `uv run nox -s template_dumps`"


def embedded_major() -> int:
    major = testdb._client_major(POSTGRES_BIN_PATH / "postgres")
    assert major is not None
    return major


def embedded_dump_name() -> str:
    return testdb.dump_name(testdb.template_keys()[1], embedded_major(), icu=False)


def test_the_shipped_dumps_carry_the_current_migrations_key():
    current = f"netbox{testdb.netbox_release()}-{testdb.template_keys()[1]}-pg"
    names = sorted(path.name for path in testdb.shipped_dumps_dir().glob("*.dump"))
    assert embedded_dump_name() in names, f"no dump for the embedded server ({names}): {REBUILD}"
    stale = [name for name in names if not name.startswith(current)]
    assert not stale, f"shipped dumps of other migrations or releases {stale}: {REBUILD}"


def test_the_embedded_servers_dump_restores_into_a_fully_migrated_netbox(
    embedded, monkeypatch, tmp_path
):
    """Restored through ensure_template on an embedded server, as `proxbox up` does: every
    migration Django knows of (NetBox's and both plugins') is applied, none migrated."""
    _data_dir, started = embedded
    url = urlsplit(started.database_url)
    settings = {"HOST": url.hostname, "PORT": url.port, "USER": url.username, "PASSWORD": ""}
    monkeypatch.setenv(testdb.CACHE_ENV, str(tmp_path / "empty-cache"))

    def no_migrating(*_args, **_kwargs):
        pytest.fail("migrated instead of restoring the shipped dump")

    monkeypatch.setattr(testdb, "_build", no_migrating)
    lines: list[str] = []
    template = testdb.ensure_template(settings, log=lines.append)

    shipped = testdb.shipped_dumps_dir() / embedded_dump_name()
    assert lines == [f"Restored template {template} from {shipped}"]
    with psycopg.connect(started.database_url.rsplit("/", 1)[0] + f"/{template}") as db:
        applied = set(db.execute("SELECT app, name FROM django_migrations").fetchall())
    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    assert known - applied == set()
    assert {app for app, _name in applied} >= {"dcim", "netbox_proxbox", "netbox_script_projects"}
