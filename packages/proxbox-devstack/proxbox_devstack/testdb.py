"""Migrated template databases for fast NetBox test runs.

NetBox's own migrations take minutes of CPU, so they run once into a base
template keyed by every non-plugin migration file and Django's release. The
plugins' migrations key a second template cloned from the base; a test run clones
that (`CREATE DATABASE … TEMPLATE …`, a fraction of a second). A changed key builds
a new template by itself; stale ones of the same NetBox release are dropped. Each
NetBox release has templates of its own (its name is in theirs), so sessions testing
another release and the locked one do not drop each other's.

A missing template is restored from a dump when one matches its key: the user's
cache (`cache_dir()`), then the dumps this package ships (`shipped_dumps_dir()`,
rebuilt by `uv run nox -s template_dumps` whenever a migration changes), so even a
machine's first `proxbox up` restores instead of migrating.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from . import scratch_tablespace
from .migrate_without_icu import WITHOUT_APPS_OPTION
from .netbox_settings import NETBOX_DATABASE_ENV, PLUGINS
from .progress import parse_event

# Receives the progress events of a template build (see `progress.emit`).
Progress = Callable[[dict], None]

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


def netbox_release() -> str:
    """The installed NetBox's version, as template and dump names carry it ("4_7_3")."""
    from importlib import metadata

    return metadata.version("netbox").replace(".", "_")


def template_prefixes() -> tuple[str, str]:
    """(base prefix, full prefix) of the installed NetBox release's templates."""
    release = netbox_release()
    return f"{BASE_PREFIX}{release}_", f"{FULL_PREFIX}{release}_"


def template_keys() -> tuple[str, str]:
    """(base key, full key) for the installed apps of the configured Django."""
    import django
    from django.apps import apps

    core, plugins = [], []
    for config in apps.get_app_configs():
        (plugins if config.name in PLUGINS else core).append(config.path)
    # Not uv.lock: the shipped dumps would go stale with every unrelated bump. What can
    # change the migrated schema is the migration files and the Django that applies them.
    base = _digest(migration_files(core), extra=django.get_version().encode())
    full = _digest(migration_files(plugins), extra=base.encode())
    return base, full


def connect(settings_dict: dict, dbname: str) -> psycopg.Connection:
    """An autocommit connection to `dbname` on the server Django's `settings_dict` names."""
    return psycopg.connect(
        dbname=dbname,
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        autocommit=True,
    )


@contextmanager
def maintenance_connection(settings_dict: dict):
    conn = connect(settings_dict, "postgres")
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


def clone_database(
    conn: psycopg.Connection, template: str, name: str, *, lasting: bool = False
) -> None:
    """`name` as a copy of `template`: in the test sessions' tablespace in memory when one
    is configured (`scratch_tablespace`), unless it is `lasting` (a template)."""
    drop_database(conn, name)
    conn.execute(scratch_tablespace.create_database_sql(name, template, lasting=lasting))


def run_netbox_migrate(
    database: str,
    *args: str,
    icu: bool = True,
    progress: Progress | None = None,
    label: str | None = None,
) -> None:
    """`netbox migrate` into `database` in a child; `progress` gets its counted events."""
    env = dict(os.environ, **{NETBOX_DATABASE_ENV: database})
    env.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    # Without ICU, NetBox's natural-sort collation needs a stand-in (see the module).
    entry = ["proxbox_devstack.migrate_without_icu", *([] if not icu else ["--with-icu"])]
    label = label or f"migrating {database.removesuffix('_building')}"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            *entry,
            "--progress",
            label,
            *args,
            "--no-input",
            "--verbosity",
            "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    errors: list[str] = []
    for line in child.stderr:
        event = parse_event(line)
        if event is None:
            errors.append(line)
        elif progress is not None:
            progress(event)
    stdout = child.stdout.read()
    if child.wait() != 0:
        raise RuntimeError(f"netbox migrate into {database} failed:\n{stdout}\n{''.join(errors)}")
    if progress is not None:
        progress({"label": label, "end": True})


def server_supports_icu(conn: psycopg.Connection) -> bool:
    try:
        with conn.transaction():
            conn.execute("CREATE COLLATION proxbox_icu_probe (provider = icu, locale = 'und')")
            raise psycopg.Rollback()
    except psycopg.errors.FeatureNotSupported:
        return False
    return True


@contextmanager
def _step(progress: Progress | None, label: str):
    if progress is not None:
        progress({"label": label})
    try:
        yield
    finally:
        if progress is not None:
            progress({"label": label, "end": True})


def _build(
    conn: psycopg.Connection, name: str, source: str | None, progress: Progress | None = None
) -> None:
    building = name + "_building"
    if source is None:
        drop_database(conn, building)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
        # NetBox's own migrations only: the base is keyed by them, and a base holding one
        # branch's plugin migrations would poison every other branch's full template.
        run_netbox_migrate(
            building,
            WITHOUT_APPS_OPTION,
            ",".join(PLUGINS),
            icu=server_supports_icu(conn),
            progress=progress,
            label="migrating NetBox",
        )
    else:
        with _step(progress, "cloning the NetBox template"):
            clone_database(conn, source, building, lasting=True)
        run_netbox_migrate(building, progress=progress, label="migrating the plugins")
    _rename(conn, building, name)


def _rename(conn: psycopg.Connection, old: str, new: str) -> None:
    conn.execute(
        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(old), sql.Identifier(new))
    )


# Templates of other keys that stay beside the current one, newest first: worktrees of
# other branches on the same server (other plugin migrations, so other keys) clone
# theirs while this one builds.
RETAINED_TEMPLATES = 2


def _drop_stale(
    conn: psycopg.Connection, prefix: str, keep: str, retain: int = RETAINED_TEMPLATES
) -> None:
    """Drop templates under `prefix` other than `keep` and the `retain` newest others."""
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s ORDER BY oid DESC",
        [prefix + "%", keep],
    )
    for (name,) in rows.fetchall()[retain:]:
        drop_database(conn, name)


# The migrated template as a compressed dump (pg_dump's custom format), so a
# server with no template (a new data dir, a fresh CI server) restores it in
# seconds instead of running every migration.
CACHE_ENV = "PROXBOX_TEMPLATE_CACHE"


def cache_dir() -> Path:
    """`$PROXBOX_TEMPLATE_CACHE`, else `$XDG_CACHE_HOME/proxbox/templates` (~/.cache)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "proxbox" / "templates"


def dump_path(conn: psycopg.Connection, full_key: str) -> Path:
    """Where the cache keeps the dump of template `full_key` for this server's major
    version and ICU support (the variant a dump written from this server has).

    The full key covers NetBox's and the plugins' migrations and Django's release.
    """
    return cache_dir() / dump_name(full_key, *_server_variant(conn))


def dump_name(full_key: str, major: int, icu: bool) -> str:
    return f"netbox{netbox_release()}-{full_key}-pg{major}-{'icu' if icu else 'noicu'}.dump"


def _server_variant(conn: psycopg.Connection) -> tuple[int, bool]:
    return conn.info.server_version // 10000, server_supports_icu(conn)


def shipped_dumps_dir() -> Path:
    """The template dumps this package ships (`uv run nox -s template_dumps` writes them)."""
    return Path(__file__).parent / "template_dumps"


# NetBox 4.7 supports PostgreSQL 14 and newer.
SHIPPED_DUMPS_OLDEST_MAJOR = 14
# Set (to anything) to measure or test a cold start that migrates: shipped dumps are ignored.
NO_SHIPPED_DUMPS_ENV = "PROXBOX_NO_SHIPPED_DUMPS"


def find_dump(conn: psycopg.Connection, full_key: str) -> Path | None:
    """A dump of template `full_key` this server can restore: the cache's, else a shipped
    one with the same collation provider from this major version or an older one (a
    newer pg_dump writes settings an older server rejects; a newer server reads older
    dumps), the closest major first."""
    major, icu = _server_variant(conn)
    candidates = [cache_dir() / dump_name(full_key, major, icu)]
    if not os.environ.get(NO_SHIPPED_DUMPS_ENV):
        older_first = range(major, SHIPPED_DUMPS_OLDEST_MAJOR - 1, -1)
        candidates += [shipped_dumps_dir() / dump_name(full_key, m, icu) for m in older_first]
    return next((path for path in candidates if path.is_file()), None)


def _variant(dump: Path) -> str:
    """`pg<major>-<icu|noicu>.dump`: the part of a dump's name its server decides."""
    return dump.name.split("-", 2)[2]


def ship_dump(dump: Path) -> Path:
    """Copy `dump` (a cache dump) among the shipped ones, replacing that variant's old one."""
    target_dir = shipped_dumps_dir()
    target_dir.mkdir(parents=True, exist_ok=True)
    for stale in target_dir.glob(f"netbox*-{_variant(dump)}"):
        stale.unlink()
    target = target_dir / dump.name
    shutil.copyfile(dump, target)
    return target


def _client_env(settings_dict: dict) -> tuple[list[str], dict[str, str]]:
    args = []
    for flag, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if settings_dict.get(key):
            args += [flag, str(settings_dict[key])]
    env = dict(os.environ)
    if settings_dict.get("PASSWORD"):
        env["PGPASSWORD"] = str(settings_dict["PASSWORD"])
    return args, env


def _client(name: str, server_major: int) -> str:
    """`pg_dump`/`pg_restore` of the server's major version, else the embedded (newest) one.

    A newer client writes settings an older server rejects (`SET transaction_timeout`
    from 17 on), so a matching one is preferred: Debian's versioned directory, then PATH.
    """
    from .postgres_server import POSTGRES_BIN_PATH

    candidates = [Path(f"/usr/lib/postgresql/{server_major}/bin/{name}")]
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and _client_major(candidate) == server_major:
            return str(candidate)
    return str(POSTGRES_BIN_PATH / name)


def _client_major(binary: Path) -> int | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return None
    digits = out.split()[-1].split(".")[0] if out.split() else ""
    return int(digits) if digits.isdigit() else None


def _restore(conn: psycopg.Connection, settings_dict: dict, dump: Path, name: str, log) -> bool:
    """Restore `dump` as database `name`; False (one line logged) when it cannot be."""
    building = name + "_building"
    drop_database(conn, building)
    conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(building)))
    args, env = _client_env(settings_dict)
    result = subprocess.run(
        [
            _client("pg_restore", conn.info.server_version // 10000),
            *args,
            "--no-owner",
            "--exit-on-error",
            "--dbname",
            building,
        ]
        + [str(dump)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        drop_database(conn, building)
        reason = next(
            (line for line in reversed(result.stderr.splitlines()) if line.strip()),
            f"exit code {result.returncode}",
        )
        log(f"template dump {dump} is unusable ({reason.strip()}); migrating instead")
        return False
    _rename(conn, building, name)
    return True


def _lock_builds(conn: psycopg.Connection, progress: Progress | None) -> None:
    """Take the template build lock; waiting for another session's build is a shown step."""
    if conn.execute("SELECT pg_try_advisory_lock(%s)", [BUILD_LOCK_KEY]).fetchone()[0]:
        return
    with _step(progress, "waiting for another session's template build"):
        conn.execute("SELECT pg_advisory_lock(%s)", [BUILD_LOCK_KEY])


def ensure_template(
    settings_dict: dict, log=print, progress: Progress | None = None, restore: bool = True
) -> str:
    """The name of an up-to-date fully migrated template, building it when needed.

    A missing template is restored from a dump that matches its key (`find_dump`;
    unless not `restore`), else migrated.
    """
    base_key, full_key = template_keys()
    base_prefix, full_prefix = template_prefixes()
    base, full = base_prefix + base_key, full_prefix + full_key
    with maintenance_connection(settings_dict) as conn:
        if database_exists(conn, full):
            return full
        _lock_builds(conn, progress)
        try:
            dump = find_dump(conn, full_key) if restore else None
            if not database_exists(conn, full) and dump is not None:
                with _step(progress, "restoring the NetBox template"):
                    if _restore(conn, settings_dict, dump, full, log):
                        log(f"Restored template {full} from {dump}")
                        _drop_stale(conn, full_prefix, keep=full)
            if not database_exists(conn, full) and not database_exists(conn, base):
                log(
                    f"Migrating NetBox into template {base} (once per NetBox release, a few minutes;"
                    f" `proxbox template build` keeps a dump that restores in seconds)"
                )
                _build(conn, base, source=None, progress=progress)
                _drop_stale(conn, base_prefix, keep=base)
            if not database_exists(conn, full):
                log(f"Applying plugin migrations into template {full}")
                _build(conn, full, source=base, progress=progress)
                _drop_stale(conn, full_prefix, keep=full)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [BUILD_LOCK_KEY])
    return full


def build_dump(settings_dict: dict, log=print, progress: Progress | None = None) -> Path:
    """Write the dump of the current template to the cache (migrating it first if needed)."""
    template = ensure_template(settings_dict, log=log, progress=progress, restore=False)
    return _write_dump(settings_dict, template, progress)


def keep_dump(
    settings_dict: dict, template: str, log=print, progress: Progress | None = None
) -> Path | None:
    """The dump of `template` (an up-to-date template, as `ensure_template` named it),
    written when neither the cache nor the shipped dumps hold one for its key. None,
    after one line, when pg_dump fails: a missing dump only costs the next cold start
    its migrations."""
    with maintenance_connection(settings_dict) as conn:
        path = find_dump(conn, template.removeprefix(template_prefixes()[1]))
    if path is not None:
        return path
    try:
        return _write_dump(settings_dict, template, progress)
    except (RuntimeError, OSError) as exc:
        log(f"template dump not written ({exc}); the next cold start migrates again")
        return None


def _write_dump(settings_dict: dict, template: str, progress: Progress | None) -> Path:
    """pg_dump `template` into its place in the cache; the same release's stale dump goes."""
    full_key = template.removeprefix(template_prefixes()[1])
    with maintenance_connection(settings_dict) as conn:
        path = dump_path(conn, full_key)
        pg_dump = _client("pg_dump", conn.info.server_version // 10000)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    args, env = _client_env(settings_dict)
    with _step(progress, "dumping the NetBox template"):
        result = subprocess.run(
            [pg_dump, *args, "--format", "custom", "--no-owner", "--file", str(partial)]
            + [template],
            env=env,
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"pg_dump of {template} failed: {result.stderr.strip()}")
    # Renamed into place whole: a concurrent `up` never restores a half-written dump.
    partial.replace(path)
    for stale in path.parent.glob(f"netbox{netbox_release()}-*-{_variant(path)}"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


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


@contextmanager
def netbox_scratch_database(prefix: str, log=print):
    """NetBox's settings loaded (`django.setup()`) against a throwaway copy of the
    migrated template named `<prefix><pid>`, dropped on exit: what a benchmark script
    needs before it touches NetBox's models."""
    name = f"{prefix}{os.getpid()}"
    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    os.environ[NETBOX_DATABASE_ENV] = name

    import django

    django.setup()
    from django.db import connections

    with scratch_database(connections["default"].settings_dict, name, log=log):
        yield name
