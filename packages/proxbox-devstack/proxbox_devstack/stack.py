"""`proxbox up / down / status`: the services, then every component's processes,
supervised until Ctrl-C or SIGTERM, then everything stopped in reverse order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from proxbox_redaction import redact_url

from . import redis_databases
from . import services as services_mod
from .components import NETBOX_CONFIGURATION, components_for
from .context import StackContext, UpOptions
from .errors import EXIT_FAILURE, EXIT_NOT_RUNNING, EXIT_PORT_IN_USE, StackError
from .netbox_db import credentials_path, load_credentials
from .paths import HOME_ENV
from .ports import port_is_free
from .processes import ProcessRecord, ProcessSpec, open_log, spawn, stop, wait_ready
from .progress import Reporter
from .state import StackState

Log = Callable[[str], None]
DETACHED_LOG = "proxbox-up.log"
SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SERVICES_STEP = "starting PostgreSQL and Redis"


def running_supervisor(data_dir: Path) -> ProcessRecord | None:
    state = StackState.load(data_dir)
    if state is None or state.supervisor is None:
        return None
    record = ProcessRecord.from_json(state.supervisor)
    return record if record.alive() else None


def preflight(data_dir: Path, options: UpOptions) -> None:
    """The checks that must fail fast, before anything starts."""
    services_mod.prepare_data_dir(data_dir)
    current = running_supervisor(data_dir)
    if current is not None and current.pid != os.getpid():
        state = StackState.load(data_dir)
        url = state.urls.get("netbox", "") if state else ""
        raise StackError(
            f"a stack is already running from {data_dir} (pid {current.pid}) {url}: "
            "stop it with `proxbox down`",
            EXIT_FAILURE,
        )
    # Children of a crashed `proxbox up` may still hold the port: stop them first.
    _stop_stale(data_dir, print)
    if not port_is_free(options.port, options.host):
        raise StackError(
            f"port {options.port} on {options.host} is in use: choose another with --port",
            EXIT_PORT_IN_USE,
        )
    for env_name, check in (
        (services_mod.DATABASE_URL_ENV, services_mod.check_database),
        (services_mod.REDIS_URL_ENV, services_mod.check_redis),
    ):
        if os.environ.get(env_name):
            check(os.environ[env_name])


def stack_env(
    data_dir: Path,
    services: services_mod.Services,
    lease: redis_databases.RedisLease | None = None,
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(services.env())
    env[HOME_ENV] = str(data_dir)
    if lease is not None:
        env[redis_databases.DATABASES_ENV] = lease.databases.to_env()
    env.setdefault("NETBOX_CONFIGURATION", NETBOX_CONFIGURATION)
    env["DJANGO_SETTINGS_MODULE"] = "netbox.settings"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Supervisor:
    """Starts process specs, records them, watches them, stops them in reverse order."""

    def __init__(self, data_dir: Path, log: Log) -> None:
        self.data_dir = data_dir
        self.log = log
        self.children: list[tuple[ProcessSpec, subprocess.Popen]] = []
        self.stopping = threading.Event()

    def _record(self, name: str, record: ProcessRecord | None) -> None:
        with services_mod.stack_lock(self.data_dir):
            state = StackState.load(self.data_dir)
            if state is None:
                return
            if record is None:
                state.processes.pop(name, None)
            else:
                state.processes[name] = record.to_json()
            state.save(self.data_dir)

    def start(self, specs: list[ProcessSpec]) -> None:
        """Start the processes of one component together, then wait until all are ready."""
        started = []
        for spec in specs:
            self.log(f"starting {spec.name}")
            popen = spawn(spec)
            self.children.append((spec, popen))
            self._record(spec.name, ProcessRecord.of(popen.pid))
            started.append((spec, popen))
        for spec, popen in started:
            wait_ready(spec, popen)

    def watch(self) -> str | None:
        """Block until a shutdown signal (None) or a child dies (its name)."""
        while not self.stopping.wait(0.5):
            for spec, popen in self.children:
                if popen.poll() is not None:
                    return spec.name
        return None

    def stop_all(self) -> None:
        for spec, popen in reversed(self.children):
            if popen.poll() is None:
                self.log(f"stopping {spec.name}")
                stop(ProcessRecord.of(popen.pid), spec.stop_signal, spec.stop_timeout)
            popen.wait()
            self._record(spec.name, None)
        self.children.clear()


def _install_signal_handlers(supervisor: Supervisor) -> None:
    def request_stop(signum, _frame):
        supervisor.stopping.set()

    for sig in SHUTDOWN_SIGNALS:
        signal.signal(sig, request_stop)


def _stop_stale(data_dir: Path, log: Log) -> None:
    """Stop processes a crashed `proxbox up` left behind (its record outlived it)."""
    with services_mod.stack_lock(data_dir):
        state = StackState.load(data_dir)
        if state is None:
            return
        for name in list(state.processes):
            if name in services_mod.SERVICES:
                continue
            if stop(ProcessRecord.from_json(state.processes[name])):
                log(f"stopped {name} left running by an earlier proxbox up")
            state.processes.pop(name)
        state.supervisor = None
        state.urls = {}
        state.save(data_dir)


def _release_stale_lease(data_dir: Path, log: Log) -> None:
    """Free the Redis pair a killed supervisor held, instead of waiting for it to expire."""
    state = StackState.load(data_dir)
    if state is None or not state.redis_databases:
        return
    try:
        released = redis_databases.release_owned(state.redis_url, data_dir)
    except Exception as exc:  # Redis gone: the lease expires by itself
        log(f"could not release the Redis lease: {exc}")
        return
    for pair in released:
        log(f"released Redis {pair.describe()}")


def _redis_line(redis_url: str, databases: list[int] | None) -> str:
    if not databases:
        return redact_url(redis_url)
    pair = redis_databases.RedisDatabases(*databases)
    return f"{redact_url(redis_url)} ({pair.describe()})"


def up(data_dir: Path, options: UpOptions, log: Log = print, detached_child: bool = False) -> int:
    """Run the stack in the foreground until a signal; returns the exit code."""
    preflight(data_dir, options)
    supervisor = Supervisor(data_dir, log)
    _install_signal_handlers(supervisor)
    reporter = Reporter(log)
    with reporter.step(SERVICES_STEP):
        services = services_mod.start_services(data_dir, log=log)
    lease: redis_databases.RedisLease | None = None
    exit_code = 0
    try:
        lease = redis_databases.acquire(services.redis_url, data_dir)
        if lease is not None:
            lease.keep(on_lost=log)
        with services_mod.stack_lock(data_dir):
            state = StackState.load(data_dir)
            assert state is not None
            state.supervisor = ProcessRecord.of(os.getpid()).to_json()
            state.redis_databases = (
                [lease.databases.tasks, lease.databases.caching] if lease else None
            )
            state.save(data_dir)
        ctx = StackContext(
            data_dir, options, services, stack_env(data_dir, services, lease), reporter=reporter
        )
        components = components_for(options.demo)
        for component in components:
            if supervisor.stopping.is_set():
                break
            if component.prepare is not None:
                try:
                    with reporter.step(f"preparing {component.name}"):
                        component.prepare(ctx)
                except StackError:
                    # Ctrl-C reaches the preparation child too; that is a stop, not a failure.
                    if supervisor.stopping.is_set():
                        break
                    raise
            with reporter.step(f"starting {component.name}"):
                supervisor.start(component.specs(ctx))
        for component in components:
            if component.after_start is not None and not supervisor.stopping.is_set():
                with reporter.step(component.after_start_label or f"{component.name}: after start"):
                    component.after_start(ctx)
        reporter.close()
        if not supervisor.stopping.is_set():
            _announce_ready(data_dir, ctx, log, show_secrets=not detached_child)
            died = supervisor.watch()
            if died is not None:
                log(f"{died} exited unexpectedly; stopping the stack (see {ctx.log_file(died)})")
                exit_code = EXIT_FAILURE
    finally:
        reporter.close()
        # A second Ctrl-C during shutdown must not abandon children half-stopped.
        for sig in SHUTDOWN_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        supervisor.stop_all()
        if lease is not None:
            lease.release()
        for name in reversed(services.started):
            log(f"stopping {name}")
        services_mod.stop_services(data_dir, tuple(services.started))
        with services_mod.stack_lock(data_dir):
            state = StackState.load(data_dir)
            if state is not None:
                state.supervisor = None
                state.urls = {}
                if state.processes:
                    state.save(data_dir)
                else:
                    StackState.clear(data_dir)
        for sig in SHUTDOWN_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
    log("stack stopped")
    return exit_code


def _announce_ready(data_dir: Path, ctx: StackContext, log: Log, show_secrets: bool) -> None:
    with services_mod.stack_lock(data_dir):
        state = StackState.load(data_dir)
        assert state is not None
        state.urls = dict(ctx.urls)
        state.credentials_created = bool(ctx.notes.get("credentials_created"))
        state.save(data_dir)
    for line in describe(data_dir, show_secrets=show_secrets and state.credentials_created):
        log(line)
    log("press Ctrl-C to stop")


def describe(data_dir: Path, show_secrets: bool = False) -> list[str]:
    """The lines `up` prints once the stack is ready."""
    state = StackState.load(data_dir)
    if state is None:
        return []
    lines = [f"NetBox:     {state.urls.get('netbox', '?')}"]
    lines.append(f"API:        {state.urls.get('api', '?')}")
    for name, url in state.urls.items():
        if name not in ("netbox", "api"):
            lines.append(f"{name + ':':<11} {url}")
    lines.append(f"PostgreSQL: {redact_url(state.database_url)}")
    lines.append(f"Redis:      {_redis_line(state.redis_url, state.redis_databases)}")
    credentials = load_credentials(data_dir)
    # Shown once, and only to a terminal: captured output (CI logs, files) never holds them.
    if show_secrets and credentials is not None and sys.stdout.isatty():
        lines.append(
            f"admin user: {credentials['username']} / {credentials['password']} (shown once)"
        )
        lines.append(f"API token:  Authorization: Bearer {credentials['token']}")
    lines.append(f"credentials: {credentials_path(data_dir)} (mode 0600)")
    lines.append(f"logs:       {data_dir / 'logs'}")
    return lines


def up_detached(data_dir: Path, argv: list[str], options: UpOptions, log: Log = print) -> int:
    """Start `proxbox up` in the background and return once it serves requests."""
    preflight(data_dir, options)
    log_file = data_dir / "logs" / DETACHED_LOG
    with open_log(log_file) as out:
        # The detached child logs its progress as plain lines; they are drawn
        # here again, from where this run's output starts.
        offset = out.tell()
        child = subprocess.Popen(
            [sys.executable, "-m", "proxbox_devstack.cli", *argv, "--detached-child"],
            env=dict(os.environ, **{HOME_ENV: str(data_dir)}),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    reporter = Reporter(log)
    try:
        while True:
            code = child.poll()
            state = StackState.load(data_dir)
            ready = (
                state is not None
                and bool(state.urls)
                and state.supervisor is not None
                and int(state.supervisor["pid"]) == child.pid
            )
            offset = _follow(log_file, offset, reporter, progress_only=ready or code is not None)
            if code is not None:
                reporter.close()
                raise StackError(
                    _last_line(log_file) or f"proxbox up exited with code {code}", code or 1
                )
            if ready:
                reporter.close()
                for line in describe(data_dir, show_secrets=state.credentials_created):
                    log(line)
                log(f"running in the background (pid {child.pid}); stop with `proxbox down`")
                return 0
            time.sleep(0.3)
    finally:
        reporter.close()


def _follow(path: Path, offset: int, reporter: Reporter, progress_only: bool) -> int:
    """Show the complete lines written to `path` after `offset`; the new offset.

    Once the child is ready (or gone) only progress lines are shown: it prints
    its URLs (or its error) then, and the caller prints them itself.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return offset
    complete = chunk[: chunk.rfind(b"\n") + 1]
    for line in complete.decode("utf-8", "replace").splitlines():
        if not reporter.replay(line) and not progress_only and line.strip():
            reporter.log(line)
    return offset + len(complete)


def template_build(data_dir: Path, log: Log = print, ship: bool = False) -> int:
    """`proxbox template build`: the migrated template's dump in the template cache
    (with `ship`, also among the package's shipped dumps).

    Uses the stack's servers (the environment's, or the embedded ones, started
    for the build and stopped afterwards unless they were running already).
    """
    from .components import run_setup_child

    reporter = Reporter(log)
    with reporter.step(SERVICES_STEP):
        services = services_mod.start_services(data_dir, log=log)
    try:
        ctx = StackContext(
            data_dir, UpOptions(), services, stack_env(data_dir, services), reporter=reporter
        )
        result = run_setup_child(
            ctx,
            ["proxbox_devstack.netbox_db", "template-build"],
            ctx.log_file("template-build"),
            "building the template dump",
        )
    finally:
        reporter.close()
        services_mod.stop_services(data_dir, tuple(services.started))
    log(f"template dump: {result['dump']} ({int(result['bytes']) / 1e6:.1f} MB)")
    if ship:
        from .testdb import ship_dump

        log(f"shipped as {ship_dump(Path(result['dump']))}")
    return 0


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].removeprefix("proxbox: ") if lines else ""


def down(data_dir: Path, log: Log = print) -> int:
    """Stop a stack started by `up -d` (or left behind), services included."""
    if not data_dir.exists():
        log(f"nothing is running from {data_dir}")
        return 0
    supervisor = running_supervisor(data_dir)
    if supervisor is not None:
        log(f"stopping proxbox up (pid {supervisor.pid})")
        stop(supervisor, signal.SIGTERM, timeout=90)
    _stop_stale(data_dir, log)
    _release_stale_lease(data_dir, log)
    stopped = services_mod.stop_services(data_dir)
    for name in stopped:
        log(f"stopped {name}")
    StackState.clear(data_dir)
    log("stack stopped")
    return 0


def status_report(data_dir: Path) -> dict | None:
    """What `proxbox status` shows, as data (`--json` prints it); None without a stack."""
    state = StackState.load(data_dir)
    if state is None:
        return None
    supervisor = running_supervisor(data_dir)
    processes = {}
    for name, raw in state.processes.items():
        record = ProcessRecord.from_json(raw)
        processes[name] = {"pid": record.pid, "running": record.alive()}
    return {
        "running": all(p["running"] for p in processes.values()),
        "data_dir": str(data_dir),
        "supervisor": {"pid": supervisor.pid} if supervisor is not None else None,
        "processes": processes,
        "external": list(state.external),
        "urls": dict(state.urls),
        "database_url": redact_url(state.database_url),
        "redis_url": redact_url(state.redis_url),
        "redis_databases": list(state.redis_databases) if state.redis_databases else None,
    }


def status(data_dir: Path, log: Log = print, as_json: bool = False) -> int:
    report = status_report(data_dir)
    if as_json:
        log(json.dumps(report or {"running": False, "data_dir": str(data_dir)}, indent=2))
        return 0 if report and report["running"] else EXIT_NOT_RUNNING
    if report is None:
        log(f"no stack is running from {data_dir}")
        return EXIT_NOT_RUNNING
    if report["supervisor"] is not None:
        log(f"proxbox up   running (pid {report['supervisor']['pid']})")
    for name, process in report["processes"].items():
        log(f"{name:<12} {'running' if process['running'] else 'DEAD'} (pid {process['pid']})")
    for name in report["external"]:
        log(f"{name:<12} external")
    for name, url in report["urls"].items():
        log(f"{name:<12} {url}")
    log(f"database     {report['database_url']}")
    log(f"redis        {_redis_line(report['redis_url'], report['redis_databases'])}")
    return 0 if report["running"] else EXIT_NOT_RUNNING
