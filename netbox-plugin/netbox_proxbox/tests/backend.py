"""The real Proxbox sync backend (its FastAPI app under uvicorn) in a thread, for "Sync now" tests.

`serve_backend()` runs `proxbox_backend.api.create_app` on a free local port. The
service it drives is either the backend's real `SyncService` or `ScriptedSyncService`,
which replays stage events and a report built with the backend's own `RunReport`, so
the HTTP contract (202 + run id, GET /runs/{id}, the SSE replay, 401, 409) is the
backend's real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import uvicorn
from proxbox_processes import free_port

from proxbox_backend.api import create_app
from proxbox_backend.config import Settings
from proxbox_backend.domain.counters import Tally
from proxbox_backend.secrets import Secret
from proxbox_backend.service import RunReport

BACKEND_TOKEN = "backend-api-token-for-tests"


@contextlib.contextmanager
def serve_backend(service, *, api_token: str = BACKEND_TOKEN, netbox_url="http://127.0.0.1:9"):
    settings = Settings(netbox_url=netbox_url, netbox_token=Secret("unused-by-the-app"))
    app = create_app(settings, service=service, api_token=api_token)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name=f"backend:{port}", daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        thread.join(0.025)
    if not server.started:
        raise RuntimeError("the backend did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def report(*, failures=(), error=None, counters=None, read_failures=()) -> dict:
    """A run report exactly as the backend serializes it."""
    tally = Tally()
    for object_type, outcomes in (counters or {}).items():
        for outcome, number in outcomes.items():
            tally.add(object_type, outcome, number)
    for object_type, label, reason in failures:
        tally.fail(object_type, label, reason)
    run_report = RunReport(
        endpoint={"id": 0, "name": "scripted"},
        tally=tally,
        error=error,
        read_failures=list(read_failures),
    )
    return run_report.as_dict()


class ScriptedSyncService:
    """Stands in for SyncService behind the real app: emits stage events, then the report."""

    def __init__(self, run_report: dict | None = None, *, finish: bool = True):
        self.report = run_report if run_report is not None else report()
        self.finish = finish
        self.calls: list[int] = []
        self.targets: list = []

    async def endpoint_exists(self, endpoint_id):
        """The backend asks before it records a run; the endpoints these tests sync exist."""
        return True

    async def run(self, endpoint_id, emit, target=None):
        self.calls.append(int(endpoint_id))
        self.targets.append(target)
        for stage in ("cluster", "nodes", "guests"):
            emit({"event": "stage", "stage": stage, "state": "started", "total": 2})
            await asyncio.sleep(0.01)
            emit({"event": "stage", "stage": stage, "state": "finished", "done": 2})
        if not self.finish:
            # A run that outlives the Job's sync_timeout (cancelled with the server's loop).
            await asyncio.Event().wait()
        emit({"event": "finished", "report": self.report})


def planned_report(endpoint_id: int = 0):
    """A dry run's report as the backend builds it: a VM to create (on a new node), one to
    update (its tenant by an assignment rule), one to delete; the recorder is the
    backend's own."""
    from proxbox_backend.domain.preview import PlanRecorder

    plan = PlanRecorder()
    node = plan.create("dcim.device", {"name": "pve9", "status": "active"})
    plan.create("virtualization.virtualmachine", {"name": "db", "memory": 1024, "device": node})
    plan.update(
        "virtualization.virtualmachine",
        12,
        {"memory": 4096, "tenant": 5},
        {"name": "web", "memory": 2048},
    )
    plan.explain("virtualization.virtualmachine", 12, {"tenant"}, "rule 10 (web servers)")
    plan.delete("virtualization.virtualmachine", 13, {"name": "old-vm"})
    tally = Tally()
    tally.add("dcim.device", "created")
    for outcome in ("created", "updated", "deleted"):
        tally.add("virtualization.virtualmachine", outcome)
    return RunReport(
        endpoint={"id": endpoint_id, "name": "scripted"}, tally=tally, dry_run=True, plan=plan
    )


class PlanningSyncService(ScriptedSyncService):
    """A backend service that also previews: a dry run answers with `planned_report`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.previews: list[int] = []

    async def run(self, endpoint_id, emit, target=None, dry_run=False):
        if dry_run:
            self.previews.append(int(endpoint_id))
            return planned_report(int(endpoint_id))
        return await super().run(endpoint_id, emit, target)
