"""Migrated template databases for fast NetBox test runs.

NetBox's own migrations take minutes of CPU, so they run once into a base
template keyed by every non-plugin migration file. The plugins' migrations and
`uv.lock` key a second template cloned from the base; a test run clones that
(`CREATE DATABASE … TEMPLATE …`, a fraction of a second). A changed key builds a
new template by itself; stale ones are dropped.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from .netbox_settings import NETBOX_DATABASE_ENV, PLUGINS
from .paths import repo_root

BASE_PREFIX = "proxbox_tpl_base_"
FULL_PREFIX = "proxbox_tpl_full_"
# Serializes template builds across concurrent test sessions on one server.
BUILD_LOCK_KEY = 0x50B0_7E57


def _digest(paths: Iterable[Path], extra: bytes = b"") -> str:
    hasher = hashlib.sha256(extra)
    for path in sorted(paths):
        hasher.update(str(path.name).encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def migration_files(app_paths: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for app_path in app_paths:
        files.extend(Path(app_path, "migrations").glob("*.py"))
    return files


def template_keys() -> tuple[str, str]:
    """(base key, full key) for the installed apps of the configured Django."""
    from django.apps import apps

    core, plugins = [], []
    for config in apps.get_app_configs():
        (plugins if config.name in PLUGINS else core).append(config.path)
    base = _digest(migration_files(core))
    lock = repo_root() / "uv.lock"
    lock_bytes = lock.read_bytes() if lock.exists() else b""
    full = _digest(migration_files(plugins), extra=base.encode() + lock_bytes)
    return base, full


@contextmanager
def maintenance_connection(settings_dict: dict):
    conn = psycopg.connect(
        dbname="postgres",
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        autocommit=True,
    )
    try:
        yield conn
    finally:
        conn.close()


def database_exists(conn: psycopg.Connection, name: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
    )


def drop_database(conn: psycopg.Connection, name: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def clone_database(conn: psycopg.Connection, template: str, name: str) -> None:
    drop_database(conn, name)
    conn.execute(
        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    )


def run_netbox_migrate(database: str, *args: str, icu: bool = True) -> None:
    env = dict(os.environ, **{NETBOX_DATABASE_ENV: database})
    env.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    # Without ICU, NetBox's natural-sort collation needs a stand-in (see the module).
    entry = ["netbox", "migrate"] if icu else ["proxbox_devstack.migrate_without_icu"]
    result = subprocess.run(
        [sys.executable, "-m", *entry, *args, "--no-input", "--verbosity", "0"],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"netbox migrate into {database} failed:\n{result.stdout}\n{result.stderr}"
        )


def server_supports_icu(conn: psycopg.Connection) -> bool:
    try:
        with conn.transaction():
            conn.execute("CREATE COLLATION proxbox_icu_probe (provider = icu, locale = 'und')")
            raise psycopg.Rollback()
    except psycopg.errors.FeatureNotSupported:
        return False
    return True


def _build(conn: psycopg.Connection, name: str, source: str | None) -> None:
    building = name + "_building"
    if source is None:
        drop_database(conn, building)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
        run_netbox_migrate(building, icu=server_supports_icu(conn))
    else:
        clone_database(conn, source, building)
        run_netbox_migrate(building)
    conn.execute(
        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
            sql.Identifier(building), sql.Identifier(name)
        )
    )


def _drop_stale(conn: psycopg.Connection, prefix: str, keep: str) -> None:
    rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [prefix + "%"])
    for (name,) in rows.fetchall():
        if name != keep:
            drop_database(conn, name)


def ensure_template(settings_dict: dict, log=print) -> str:
    """The name of an up-to-date fully migrated template, building it when needed."""
    base_key, full_key = template_keys()
    base, full = BASE_PREFIX + base_key, FULL_PREFIX + full_key
    with maintenance_connection(settings_dict) as conn:
        if database_exists(conn, full):
            return full
        conn.execute("SELECT pg_advisory_lock(%s)", [BUILD_LOCK_KEY])
        try:
            if not database_exists(conn, base):
                log(
                    f"Migrating NetBox into template {base} (once per NetBox release, a few minutes)"
                )
                _build(conn, base, source=None)
                _drop_stale(conn, BASE_PREFIX, keep=base)
            if not database_exists(conn, full):
                log(f"Applying plugin migrations into template {full}")
                _build(conn, full, source=base)
                _drop_stale(conn, FULL_PREFIX, keep=full)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [BUILD_LOCK_KEY])
    return full


@contextmanager
def scratch_database(settings_dict: dict, name: str, log=print):
    """A throwaway copy of the migrated template named `name`, dropped on exit.

    For scripts (benchmarks) that point NetBox at their own database: the
    caller's settings already name `name`; connections are closed before the drop.
    """
    from django.db import connections

    template = ensure_template(settings_dict, log=log)
    with maintenance_connection(settings_dict) as conn:
        clone_database(conn, template, name)
    try:
        yield name
    finally:
        connections.close_all()
        with maintenance_connection(settings_dict) as conn:
            drop_database(conn, name)
