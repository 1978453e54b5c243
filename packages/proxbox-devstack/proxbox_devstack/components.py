"""The managed processes of `proxbox up`, one component per program.

A component contributes process specs and the URLs it serves; the supervisor
starts components in list order and stops them in reverse. Later parts of
the platform (the Proxmox simulator, the sync backend) join the stack by
adding a `Component` to `COMPONENTS`; the first sync, by a `after_start` hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .context import StackContext, http_answers
from .demo import (
    assign_backend_url,
    backend_specs,
    first_sync,
    prepare_simulator,
    simulator_specs,
)
from .errors import StackError
from .processes import ProcessSpec, open_log
from .progress import parse_event
from .rq_workers import Worker, worker_arguments

NETBOX_CONFIGURATION = "proxbox_devstack.netbox_configuration"
# NetBox's own RQ queues, served by a worker that never runs a sync.
NETBOX_QUEUES = ("high", "default", "low")
# The plugin's sync queue (its setting `sync_queue`, default "netbox_proxbox.sync"):
# a sync holds its worker for minutes, so it gets a worker of its own.
SYNC_QUEUE = "netbox_proxbox.sync"


def stack_workers(log_file: Callable[[str], Path]) -> list[Worker]:
    """The stack's RQ workers: NetBox's queues, and the sync queue apart; `log_file` names
    each one's log from its name."""
    return [
        Worker(name, log_file(name), queues)
        for name, queues in (("rqworker", NETBOX_QUEUES), ("rqworker-sync", (SYNC_QUEUE,)))
    ]


@dataclass
class Component:
    name: str
    specs: Callable[[StackContext], list[ProcessSpec]]
    # Runs before the component's processes start (e.g. database preparation).
    prepare: Callable[[StackContext], None] | None = None
    # Runs once every component is up (e.g. a first sync).
    after_start: Callable[[StackContext], None] | None = None
    # How the progress display names the after_start step.
    after_start_label: str | None = None
    # Part of the demo (a simulated cluster synced into NetBox): `up --no-demo` leaves it out.
    demo: bool = False


def run_setup_child(
    ctx: StackContext, argv: list[str], log_file: Path, what: str
) -> dict[str, object]:
    """Run a NetBox setup child, showing its progress; its last stdout line is JSON."""
    stderr_lines: list[str] = []
    with open_log(log_file, "a") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", *argv],
            env=ctx.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert child.stderr is not None and child.stdout is not None
        # Progress reaches the terminal as it comes: a first run without a
        # template dump migrates for minutes.
        for line in child.stderr:
            event = parse_event(line)
            if event is not None:
                ctx.reporter.event(event)
                continue
            stderr_lines.append(line.rstrip("\n"))
            log.write(line)
            log.flush()
            if not line.startswith((" ", "Traceback")):
                ctx.reporter.log(line.rstrip("\n"))
        stdout = child.stdout.read()
        log.write(stdout)
    if child.wait() != 0:
        reasons = [line for line in stderr_lines if line.strip()]
        reason = reasons[-1] if reasons else f"exit code {child.returncode}"
        raise StackError(f"{what} failed: {reason} (see {log_file})")
    return json.loads(stdout.strip().splitlines()[-1])


def prepare_netbox_database(ctx: StackContext) -> None:
    """Clone/migrate the NetBox database and create the admin on first run (in a child)."""
    # NetBox's configuration names the backend's URL, so its port is chosen first.
    assign_backend_url(ctx)
    result = run_setup_child(
        ctx,
        ["proxbox_devstack.netbox_db"],
        ctx.log_file("netbox-setup"),
        "preparing the NetBox database",
    )
    ctx.notes.update(result)


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
            # Stopping workers skip the interpreter's teardown of NetBox's heap.
            "--config",
            "python:proxbox_devstack.gunicorn_config",
        ],
        log_file=ctx.log_file("netbox"),
        env=ctx.env,
        ready=lambda: http_answers(host, port, "/api/status/"),
        ready_timeout=120,
    )
    # Both workers forked from one NetBox import (proxbox_devstack.rq_workers).
    rq_workers = ProcessSpec(
        name="rqworkers",
        argv=[
            sys.executable,
            "-m",
            "proxbox_devstack.rq_workers",
            *worker_arguments(stack_workers(ctx.log_file)),
        ],
        log_file=ctx.log_file("rqworkers"),
        env=ctx.env,
        # SIGTERM is RQ's warm shutdown: the running job finishes first.
        stop_timeout=30,
    )
    base = f"http://{host}:{port}"
    ctx.urls.update({"netbox": f"{base}/", "api": f"{base}/api/"})
    return [web, rq_workers]


def _demo_components() -> list[Component]:
    return [
        Component(name="simulator", specs=simulator_specs, prepare=prepare_simulator, demo=True),
        Component(
            name="backend",
            specs=backend_specs,
            after_start=first_sync,
            after_start_label="first sync of the demo endpoint",
            demo=True,
        ),
    ]


COMPONENTS: list[Component] = [
    Component(name="netbox", specs=netbox_specs, prepare=prepare_netbox_database),
    *_demo_components(),
]


def components_for(demo: bool) -> list[Component]:
    """What `up` starts: everything, or NetBox alone when the demo is off."""
    return [component for component in COMPONENTS if demo or not component.demo]
