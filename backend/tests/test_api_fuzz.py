"""Schemathesis against the backend's own OpenAPI document: generated requests, valid
and not, get no 5xx and only documented status codes, content types and bodies.

A small example budget here (the default test session); `nox -s fuzz` runs the same
with PROXBOX_FUZZ_EXAMPLES=1000.
"""

from __future__ import annotations

import os

import schemathesis
from hypothesis import HealthCheck, settings

from proxbox_backend.api import create_app
from proxbox_backend.config import Settings
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.secrets import Secret
from proxbox_backend.service import RunReport

TOKEN = "fuzz-backend-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("PROXBOX_FUZZ_EXAMPLES", "25"))


class FinishingService:
    """Ends each run at once with a report, as the real service's boundary does; NetBox
    has the endpoints with odd ids, so the fuzzing meets the 404 of the others too."""

    async def endpoint_exists(self, endpoint_id):
        return endpoint_id % 2 == 1

    async def run(self, endpoint_id, emit, target=None, dry_run=False):
        emit({"event": "stage", "stage": "nodes", "state": "started", "total": 0})
        report = RunReport(dry_run=dry_run, plan=PlanRecorder() if dry_run else None)
        report.error = f"no endpoint {endpoint_id}"
        emit({"event": "finished", "report": report.as_dict()})
        return report


app = create_app(
    Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40)),
    service=FinishingService(),
    api_token=TOKEN,
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_backend_api_answers_as_documented(case):
    case.call_and_validate(headers=AUTH)


@schema.parametrize()
@settings(max_examples=max(5, EXAMPLES // 5), deadline=None, database=None)
def test_backend_api_refuses_without_the_token_as_documented(case):
    response = case.call_and_validate()
    if case.path != "/health" and case.method.upper() == case.operation.method.upper():
        assert response.status_code == 401, (case.method, case.path, response.status_code)


# What the first fuzzing run found, each a fixed case now: 401, 404 and 409 answers and
# the event stream's content type were missing from the schema.


class BlockingService:
    async def endpoint_exists(self, endpoint_id):
        return True

    async def run(self, endpoint_id, emit, target=None, dry_run=False):
        import asyncio

        await asyncio.Event().wait()


def _operation(path: str, method: str, service=None):
    application = create_app(
        Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40)),
        service=service or FinishingService(),
        api_token=TOKEN,
    )
    loaded = schemathesis.openapi.from_asgi("/openapi.json", application, headers=AUTH)
    return loaded[path][method]


def test_unauthorized_answer_is_documented():
    case = _operation("/runs/{run_id}", "GET").Case(path_parameters={"run_id": "r1"})
    assert case.call_and_validate().status_code == 401


def test_unknown_run_answer_is_documented():
    case = _operation("/runs/{run_id}", "GET").Case(path_parameters={"run_id": "r1"})
    assert case.call_and_validate(headers=AUTH).status_code == 404


def test_unknown_endpoint_answer_is_documented():
    """Found by the fuzzing: every id was a 202 and a run record, NetBox had it or not."""
    case = _operation("/sync/{endpoint_id}", "POST").Case(path_parameters={"endpoint_id": 999998})
    response = case.call_and_validate(headers=AUTH)
    assert response.status_code == 404
    assert response.json() == {"detail": "no Proxmox endpoint with id 999998 in NetBox"}


def test_sync_already_running_answer_is_documented():
    operation = _operation("/sync/{endpoint_id}", "POST", service=BlockingService())
    case = operation.Case(path_parameters={"endpoint_id": 7})
    from fastapi.testclient import TestClient

    # One client for both calls: the first run must still be active for the second.
    with TestClient(operation.schema.app) as client:
        assert client.post("/sync/7", headers=AUTH).status_code == 202
        response = case.call_and_validate(headers=AUTH, session=client)
    assert response.status_code == 409


def test_event_stream_content_type_is_documented():
    operation = _operation("/runs/{run_id}/events", "GET")
    assert list(operation.definition.raw["responses"]["200"]["content"]) == ["text/event-stream"]
    from fastapi.testclient import TestClient

    with TestClient(operation.schema.app) as client:
        run_id = client.post("/sync/3", headers=AUTH).json()["run_id"]
        case = operation.Case(path_parameters={"run_id": run_id})
        response = case.call_and_validate(headers=AUTH, session=client)
    assert response.status_code == 200
    assert response.headers["content-type"][0].startswith("text/event-stream")
    assert "event: finished" in response.text
