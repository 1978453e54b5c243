"""A tablespace in memory for the databases the test sessions throw away.

PostgreSQL writes a file for every table, index and sequence of a new database (about
2,400 for a migrated NetBox). On CI's machine (ext4 on a virtual disk) creating one such
file costs the server about a millisecond of kernel CPU, so cloning NetBox's template
took 2.1 CPU-s; into a tablespace on tmpfs the same clone takes 0.09 CPU-s. The test
sessions make hundreds of databases: NetBox test databases, e2e NetBoxes and simulators.

`ensure(database_url)` makes the tablespace `proxbox_scratch` in a directory of
`/dev/shm` when the server runs on this machine and this process can hand the directory
to the server's user (root, or the user the server runs as: the embedded server); the
test sessions then name it in PROXBOX_TEST_TABLESPACE, and the databases the test
helpers create on the session's server go there (`create_database_sql`). The migrated
templates stay in the server's default tablespace (`lasting`): they outlive a reboot,
the tablespace's memory does not. After a
reboot the tablespace's directory is gone, and so are the files of any database left
in it: `ensure` drops those databases and makes the tablespace again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psycopg
from psycopg import sql

TABLESPACE_ENV = "PROXBOX_TEST_TABLESPACE"
TABLESPACE = "proxbox_scratch"
MEMORY_PARENT = Path("/dev/shm")
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
# Serializes `ensure` across sessions of several worktrees sharing one server.
ENSURE_LOCK_KEY = 0x50B0_5C7A


def configured() -> str | None:
    """The tablespace test databases are created in (PROXBOX_TEST_TABLESPACE), if any."""
    return os.environ.get(TABLESPACE_ENV) or None


def create_database_sql(
    name: str, template: str | None = None, *, lasting: bool = False
) -> sql.Composed:
    """`CREATE DATABASE name [TEMPLATE template]`, in the configured test tablespace unless
    the database is `lasting` (a template)."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    tablespace = None if lasting else configured()
    if tablespace is not None:
        statement += sql.SQL(" TABLESPACE {}").format(sql.Identifier(tablespace))
    return statement


def ensure(
    database_url: str, parent: Path = MEMORY_PARENT, name: str = TABLESPACE
) -> tuple[str | None, str]:
    """(the tablespace's name, one line saying where it is) or (None, why there is none)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [ENSURE_LOCK_KEY])
        try:
            return _ensure(conn, parent, name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [ENSURE_LOCK_KEY])


def _ensure(conn: psycopg.Connection, parent: Path, name: str) -> tuple[str | None, str]:
    data_dir = _local_data_directory(conn)
    if data_dir is None:
        return None, "the server's data directory is not on this machine or not readable here"
    row = conn.execute(
        "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = %s",
        [name],
    ).fetchone()
    if row is not None:
        if Path(row[0]).is_dir():
            return name, f"test databases in tablespace {name} ({row[0]})"
        drop(conn, name)
    if not on_memory_filesystem(parent):
        return None, f"{parent} is not a memory filesystem"
    owner = data_dir.stat()
    if os.geteuid() not in (0, owner.st_uid):
        return None, "the server runs as another user and this process is not root"
    identifier = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
    location = parent / f"{name}-{identifier}"
    # A directory no tablespace names is a leftover of an earlier one (under the lock, no
    # other session is making it): the server wants an empty one.
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(mode=0o700)
    os.chown(location, owner.st_uid, owner.st_gid)
    try:
        conn.execute(
            sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(
                sql.Identifier(name), sql.Literal(str(location))
            )
        )
    except psycopg.Error as exc:
        shutil.rmtree(location, ignore_errors=True)
        return None, f"CREATE TABLESPACE failed: {str(exc).strip()}"
    return name, f"test databases in tablespace {name} ({location})"


def drop(conn: psycopg.Connection, tablespace: str) -> None:
    """Drop `tablespace` with the databases in it (after a reboot, only their catalog rows
    remain: their files went with the directory)."""
    rows = conn.execute(
        "SELECT datname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace"
        " WHERE t.spcname = %s",
        [tablespace],
    ).fetchall()
    for (database,) in rows:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
    conn.execute(sql.SQL("DROP TABLESPACE {}").format(sql.Identifier(tablespace)))


def _local_data_directory(conn: psycopg.Connection) -> Path | None:
    """The server's data directory when it is this machine's: its PG_VERSION file, read
    here, has the modification time the server reports for it."""
    try:
        data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])
        reported = conn.execute(
            "SELECT extract(epoch FROM modification)::bigint FROM pg_stat_file('PG_VERSION')"
        ).fetchone()[0]
        seen = int((data_dir / "PG_VERSION").stat().st_mtime)
    except (psycopg.Error, OSError):
        return None
    return data_dir if seen == reported else None


def on_memory_filesystem(path: Path, mounts: Path = Path("/proc/mounts")) -> bool:
    """Whether `path`'s filesystem (its longest mount point in `mounts`) keeps files in memory."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return False
    resolved = str(path.resolve())
    best, kind = "", ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind in MEMORY_FILESYSTEMS
