"""The managed processes of `proxbox up`, one component per program.

A component contributes process specs and the URLs it serves; the supervisor
starts components in list order and stops them in reverse. Later parts of
the platform (the Proxmox simulator, the sync backend) join the stack by
adding a `Component` to `COMPONENTS`; the first sync, by a `after_start` hook.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import StackError
from .processes import ProcessSpec
from .services import Services

NETBOX_CONFIGURATION = "proxbox_devstack.netbox_configuration"


@dataclass
class UpOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    web_workers: int = 2


@dataclass
class StackContext:
    """What components need to build their process specs."""

    data_dir: Path
    options: UpOptions
    services: Services
    env: dict[str, str]
    urls: dict[str, str] = field(default_factory=dict)
    # Facts components report to the launcher, e.g. that credentials were created.
    notes: dict[str, object] = field(default_factory=dict)

    def log_file(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"


@dataclass
class Component:
    name: str
    specs: Callable[[StackContext], list[ProcessSpec]]
    # Runs before the component's processes start (e.g. database preparation).
    prepare: Callable[[StackContext], None] | None = None
    # Runs once every component is up (e.g. a first sync).
    after_start: Callable[[StackContext], None] | None = None


def http_answers(host: str, port: int, path: str) -> bool:
    """True once the server returns any non-5xx response on `path`."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            return conn.getresponse().status < 500
        finally:
            conn.close()
    except OSError:
        return False


def prepare_netbox_database(ctx: StackContext) -> None:
    """Clone/migrate the NetBox database and create the admin on first run (in a child)."""
    from .demo import assign_backend_url

    # NetBox's configuration names the backend's URL, so its port is chosen first.
    assign_backend_url(ctx)
    log_file = ctx.log_file("netbox-setup")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    stderr_lines: list[str] = []
    with open(log_file, "a", encoding="utf-8") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "proxbox_devstack.netbox_db"],
            env=ctx.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert child.stderr is not None and child.stdout is not None
        # Progress lines reach the terminal as they come: a first run builds the
        # migrated template for minutes.
        for line in child.stderr:
            stderr_lines.append(line.rstrip("\n"))
            log.write(line)
            log.flush()
            if not line.startswith((" ", "Traceback")):
                print(line.rstrip("\n"), file=sys.stderr, flush=True)
        stdout = child.stdout.read()
        log.write(stdout)
    if child.wait() != 0:
        reasons = [line for line in stderr_lines if line.strip()]
        reason = reasons[-1] if reasons else f"exit code {child.returncode}"
        raise StackError(f"preparing the NetBox database failed: {reason} (see {log_file})")
    ctx.notes.update(json.loads(stdout.strip().splitlines()[-1]))


def netbox_specs(ctx: StackContext) -> list[ProcessSpec]:
    host, port = ctx.options.host, ctx.options.port
    web = ProcessSpec(
        name="netbox",
        argv=[
            sys.executable,
            "-m",
            "gunicorn",
            "proxbox_devstack.wsgi:application",
            "--bind",
            f"{host}:{port}",
            "--workers",
            str(ctx.options.web_workers),
            "--timeout",
            "120",
            # Import NetBox once in the master and fork the workers from it:
            # half the start-up CPU of importing it in every worker.
            "--preload",
            # gunicorn 26 otherwise creates a control socket under ~/.gunicorn.
            "--no-control-socket",
        ],
        log_file=ctx.log_file("netbox"),
        env=ctx.env,
        ready=lambda: http_answers(host, port, "/api/status/"),
        ready_timeout=120,
    )
    worker = ProcessSpec(
        name="rqworker",
        argv=[sys.executable, "-m", "netbox", "rqworker", "high", "default", "low"],
        log_file=ctx.log_file("rqworker"),
        env=ctx.env,
        # SIGTERM is RQ's warm shutdown: the running job finishes first.
        stop_timeout=30,
    )
    base = f"http://{host}:{port}"
    ctx.urls.update({"netbox": f"{base}/", "api": f"{base}/api/"})
    return [web, worker]


def _demo_components() -> list[Component]:
    from .demo import backend_specs, first_sync, prepare_simulator, simulator_specs

    return [
        Component(name="simulator", specs=simulator_specs, prepare=prepare_simulator),
        Component(name="backend", specs=backend_specs, after_start=first_sync),
    ]


COMPONENTS: list[Component] = [
    Component(name="netbox", specs=netbox_specs, prepare=prepare_netbox_database),
    *_demo_components(),
]
