"""PostgreSQL and Redis for the stack: the servers named by the environment, or
private ones started in the data directory.

`start_services()` is idempotent: services a previous call started and that
still run are reused; records of dead ones are dropped; a server left running
without a record (a killed `proxbox` process) is stopped before a new one starts.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from proxbox_redaction import redact_url

from . import postgres_server, redis_server
from .errors import EXIT_DATA_DIR, EXIT_SERVICE_UNREACHABLE, StackError
from .ports import choose_port
from .processes import ProcessFailed, ProcessRecord, spawn, stop, wait_ready
from .state import DATABASE_URL_ENV, REDIS_URL_ENV, StackState

SERVICES = ("postgres", "redis")
REACHABILITY_TIMEOUT = 10.0
LOCK_FILE = ".lock"
Log = Callable[[str], None]


@dataclass
class Services:
    database_url: str
    redis_url: str
    started: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {DATABASE_URL_ENV: self.database_url, REDIS_URL_ENV: self.redis_url}


def prepare_data_dir(path: Path) -> Path:
    """Create the data dir and prove we can write into it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise StackError(
            f"data directory {path} is not writable ({exc.strerror}): "
            "set PROXBOX_HOME to a writable directory",
            EXIT_DATA_DIR,
        ) from None
    return path


@contextmanager
def stack_lock(data_dir: Path) -> Iterator[None]:
    """Serialize commands that start or stop processes of one data dir."""
    with open(data_dir / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_database(url: str, timeout: float = REACHABILITY_TIMEOUT) -> None:
    """Fail with one line unless PostgreSQL at `url` accepts a connection within `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        remaining = max(1, int(deadline - time.monotonic()))
        try:
            with psycopg.connect(url, connect_timeout=min(remaining, 3)):
                return
        except psycopg.Error as exc:
            last_error = (
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            )
        time.sleep(0.5)
    raise StackError(
        f"{DATABASE_URL_ENV}={redact_url(url)} is unreachable after {timeout:.0f} s: {last_error}",
        EXIT_SERVICE_UNREACHABLE,
    )


def check_redis(url: str, timeout: float = REACHABILITY_TIMEOUT) -> None:
    import redis

    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
            try:
                client.ping()
                return
            finally:
                client.close()
        except (redis.RedisError, ValueError) as exc:
            last_error = str(exc)
        time.sleep(0.5)
    raise StackError(
        f"{REDIS_URL_ENV}={redact_url(url)} is unreachable after {timeout:.0f} s: {last_error}",
        EXIT_SERVICE_UNREACHABLE,
    )


def log_dir(data_dir: Path) -> Path:
    return data_dir / "logs"


def _recorded(state: StackState | None, name: str) -> ProcessRecord | None:
    if state is None or name not in state.processes:
        return None
    return ProcessRecord.from_json(state.processes[name])


def _start_postgres(data_dir: Path, log: Log) -> tuple[str, ProcessRecord]:
    log_file = log_dir(data_dir) / "postgres.log"
    if postgres_server.stop_orphan(data_dir):
        log("stopped a PostgreSQL server left running on this data dir")
    account = postgres_server.prepare_cluster(data_dir, log_file)
    # A port that looked free can be taken before postgres binds it; try again elsewhere.
    for _attempt in range(3):
        port = choose_port(None, postgres_server.DEFAULT_PORT)
        spec = postgres_server.process_spec(data_dir, port, log_file, account)
        popen = spawn(spec)
        try:
            wait_ready(spec, popen)
        except ProcessFailed:
            if popen.poll() is None:
                stop(ProcessRecord.of(popen.pid), spec.stop_signal)
            popen.wait()
            if "Address already in use" in _tail(log_file):
                continue
            raise
        return postgres_server.server_url(port), ProcessRecord.of(popen.pid)
    raise StackError(f"PostgreSQL could not bind a free port; see {log_file}")


def _start_redis(data_dir: Path) -> tuple[str, ProcessRecord]:
    log_file = log_dir(data_dir) / "redis.log"
    redis_server.stop_orphan(data_dir)
    for _attempt in range(3):
        port = choose_port(None, redis_server.DEFAULT_PORT)
        spec = redis_server.process_spec(data_dir, port, log_file)
        popen = spawn(spec)
        try:
            wait_ready(spec, popen)
        except ProcessFailed:
            if popen.poll() is None:
                stop(ProcessRecord.of(popen.pid))
            popen.wait()
            if "Address already in use" in _tail(log_file):
                continue
            raise
        return redis_server.server_url(port), ProcessRecord.of(popen.pid)
    raise StackError(f"Redis could not bind a free port; see {log_file}")


def _tail(path: Path, size: int = 4000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def start_services(data_dir: Path, log: Log = print) -> Services:
    """Make PostgreSQL and Redis available and record them in the data dir's state."""
    prepare_data_dir(data_dir)
    with stack_lock(data_dir):
        state = StackState.load(data_dir)
        processes = dict(state.processes) if state else {}
        urls = {
            "postgres": state.database_url if state else "",
            "redis": state.redis_url if state else "",
        }
        started: list[str] = []
        external: list[str] = []
        try:
            for name, env_name in (("postgres", DATABASE_URL_ENV), ("redis", REDIS_URL_ENV)):
                configured = os.environ.get(env_name)
                recorded = _recorded(state, name)
                if configured:
                    (check_database if name == "postgres" else check_redis)(configured)
                    if recorded is not None and recorded.alive():
                        # An embedded server from an earlier run is superseded by the URL.
                        stop(recorded, _stop_signal(name))
                    processes.pop(name, None)
                    urls[name] = configured
                    external.append(name)
                    continue
                if recorded is not None and recorded.alive():
                    continue
                processes.pop(name, None)
                if name == "postgres":
                    url, record = _start_postgres(data_dir, log)
                else:
                    url, record = _start_redis(data_dir)
                processes[name] = record.to_json()
                urls[name] = url
                started.append(name)
        except BaseException:
            for name in started:
                stop(ProcessRecord.from_json(processes[name]), _stop_signal(name))
            raise
        new_state = StackState(
            database_url=urls["postgres"],
            redis_url=urls["redis"],
            urls=state.urls if state else {},
            processes=processes,
            external=external,
            supervisor=state.supervisor if state else None,
        )
        new_state.save(data_dir)
        return Services(urls["postgres"], urls["redis"], started=started, external=external)


def running_services(data_dir: Path) -> Services | None:
    """The recorded services when every embedded one still runs, else None."""
    state = StackState.load(data_dir)
    if state is None:
        return None
    for name in SERVICES:
        if name in state.external:
            continue
        record = _recorded(state, name)
        if record is None or not record.alive():
            return None
    return Services(state.database_url, state.redis_url, external=list(state.external))


def stop_services(data_dir: Path, names: tuple[str, ...] = SERVICES) -> list[str]:
    """Stop the embedded services in `names`; returns the ones that were running."""
    if not data_dir.exists():
        return []
    stopped: list[str] = []
    with stack_lock(data_dir):
        state = StackState.load(data_dir)
        for name in names:
            record = _recorded(state, name)
            if record is not None and stop(record, _stop_signal(name), timeout=30):
                stopped.append(name)
            if state is not None:
                state.processes.pop(name, None)
        if "postgres" in names and postgres_server.stop_orphan(data_dir):
            stopped.append("postgres")
        if "redis" in names and redis_server.stop_orphan(data_dir):
            stopped.append("redis")
        if state is not None:
            if state.processes or (state.supervisor and _supervisor_alive(state)):
                state.save(data_dir)
            else:
                StackState.clear(data_dir)
    return stopped


def _supervisor_alive(state: StackState) -> bool:
    return state.supervisor is not None and ProcessRecord.from_json(state.supervisor).alive()


def _stop_signal(name: str) -> int:
    import signal

    return signal.SIGINT if name == "postgres" else signal.SIGTERM
