"""The tablespace in memory the test sessions' databases go to: made where the server is
this machine's, used by every database a test clones, and made again after a reboot took
its directory (and the files of the databases in it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connections
from psycopg.conninfo import make_conninfo

from proxbox_devstack import scratch_tablespace, testdb


def _server_url() -> str:
    settings = connections["default"].settings_dict
    return make_conninfo(
        dbname="postgres",
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
    )


def _tablespace_of(conn: psycopg.Connection, database: str) -> str:
    return conn.execute(
        "SELECT t.spcname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace"
        " WHERE d.datname = %s",
        [database],
    ).fetchone()[0]


def _location(conn: psycopg.Connection, tablespace: str) -> Path | None:
    row = conn.execute(
        "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = %s", [tablespace]
    ).fetchone()
    return None if row is None else Path(row[0])


@pytest.fixture
def own_tablespace() -> Iterator[tuple[str, Path]]:
    """A tablespace name and a parent directory in memory of this test's own (the session's
    `proxbox_scratch` holds the databases of the suites running beside this one)."""
    if not scratch_tablespace.on_memory_filesystem(scratch_tablespace.MEMORY_PARENT):
        pytest.skip(f"{scratch_tablespace.MEMORY_PARENT} is not a memory filesystem here")
    parent = Path(tempfile.mkdtemp(prefix="proxbox-test-", dir=scratch_tablespace.MEMORY_PARENT))
    os.chmod(parent, 0o755)  # the server's account walks through it
    name = f"proxbox_scratch_test_{os.getpid()}"
    yield name, parent
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        if _location(conn, name) is not None:
            scratch_tablespace.drop(conn, name)
    shutil.rmtree(parent, ignore_errors=True)


def _ensure_here(name: str, parent: Path) -> tuple[str | None, str]:
    made, line = scratch_tablespace.ensure(_server_url(), parent, name)
    if made is None and not os.environ.get("CI"):
        pytest.skip(f"no tablespace in memory on this machine's server: {line}")
    assert made == name, line  # CI's server is this machine's, run as root or as its user
    return made, line


def test_clones_go_to_the_tablespace_in_memory_and_templates_do_not(own_tablespace, monkeypatch):
    name, parent = own_tablespace
    _, line = _ensure_here(name, parent)
    assert str(parent) in line
    settings = connections["default"].settings_dict
    template = testdb.ensure_template(settings)
    clone, lasting = f"proxbox_test_clone_{os.getpid()}", f"proxbox_test_lasting_{os.getpid()}"
    monkeypatch.setenv(scratch_tablespace.TABLESPACE_ENV, name)
    with testdb.maintenance_connection(settings) as conn:
        try:
            testdb.clone_database(conn, template, clone)
            testdb.clone_database(conn, template, lasting, lasting=True)
            assert _tablespace_of(conn, clone) == name
            assert _tablespace_of(conn, lasting) == "pg_default"
            oid = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", [clone]).fetchone()
            # The clone's files are in the directory in memory.
            (version_dir,) = parent.glob(f"{name}-*/PG_*")
            assert scratch_tablespace.on_memory_filesystem(version_dir)
            assert len(list((version_dir / str(oid[0])).iterdir())) > 1000
        finally:
            testdb.drop_database(conn, clone)
            testdb.drop_database(conn, lasting)


def test_a_second_session_reuses_the_tablespace(own_tablespace):
    name, parent = own_tablespace
    _ensure_here(name, parent)
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        first = conn.execute("SELECT oid FROM pg_tablespace WHERE spcname = %s", [name]).fetchone()
    assert scratch_tablespace.ensure(_server_url(), parent, name)[0] == name
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        again = conn.execute("SELECT oid FROM pg_tablespace WHERE spcname = %s", [name]).fetchone()
    assert again == first


def test_a_tablespace_whose_memory_is_gone_is_made_again(own_tablespace, monkeypatch):
    """A reboot empties /dev/shm: the databases left in it are dropped (their files are
    gone), the tablespace is made anew, and a database can be created in it again."""
    name, parent = own_tablespace
    _ensure_here(name, parent)
    monkeypatch.setenv(scratch_tablespace.TABLESPACE_ENV, name)
    left = f"proxbox_test_left_{os.getpid()}"
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(scratch_tablespace.create_database_sql(left))
        lost = _location(conn, name)
        shutil.rmtree(lost)
        with pytest.raises(psycopg.Error):
            conn.execute(scratch_tablespace.create_database_sql(left + "_2"))
    made, _ = scratch_tablespace.ensure(_server_url(), parent, name)
    assert made == name
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        assert not testdb.database_exists(conn, left)
        assert _location(conn, name).is_dir()
        conn.execute(scratch_tablespace.create_database_sql(left))
        try:
            assert _tablespace_of(conn, left) == name
        finally:
            testdb.drop_database(conn, left)


def test_no_tablespace_outside_a_memory_filesystem():
    """A tablespace on disk would save nothing: the sessions keep the default one."""
    disk = Path(tempfile.mkdtemp(prefix="proxbox-test-", dir=Path.cwd()))
    try:
        if scratch_tablespace.on_memory_filesystem(disk):
            pytest.skip("the working directory is on a memory filesystem here")
        name = f"proxbox_scratch_test_disk_{os.getpid()}"
        made, line = scratch_tablespace.ensure(_server_url(), disk, name)
        assert made is None
        assert line in (
            f"{disk} is not a memory filesystem",
            "the server's data directory is not on this machine or not readable here",
        )
        with psycopg.connect(_server_url(), autocommit=True) as conn:
            assert _location(conn, name) is None
    finally:
        shutil.rmtree(disk, ignore_errors=True)


def test_create_database_sql_names_the_configured_tablespace(monkeypatch):
    monkeypatch.delenv(scratch_tablespace.TABLESPACE_ENV, raising=False)
    plain = scratch_tablespace.create_database_sql('odd"name', "tpl").as_string()
    assert plain == 'CREATE DATABASE "odd""name" TEMPLATE "tpl"'
    monkeypatch.setenv(scratch_tablespace.TABLESPACE_ENV, "proxbox_scratch")
    assert (
        scratch_tablespace.create_database_sql("db").as_string()
        == 'CREATE DATABASE "db" TABLESPACE "proxbox_scratch"'
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/dev/shm/proxbox", True),
        ("/dev/shm", True),
        ("/dev/shmother", False),  # not under /dev/shm: the root's ext4
        ("/var/lib/postgresql", False),
        ("/run/user/0/x", True),  # a tmpfs mounted inside an ext4 one
    ],
)
def test_memory_filesystem_is_the_longest_mount_point(tmp_path, path, expected):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n"
        "tmpfs /run tmpfs rw 0 0\n"
        "/dev/vdb /run/user ext4 rw 0 0\n"
        "tmpfs /run/user/0 tmpfs rw 0 0\n"
    )
    assert scratch_tablespace.on_memory_filesystem(Path(path), mounts) is expected


def test_no_mounts_file_means_no_memory_filesystem(tmp_path):
    assert not scratch_tablespace.on_memory_filesystem(Path("/dev/shm"), tmp_path / "absent")
