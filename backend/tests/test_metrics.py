"""`GET /metrics`: runs by outcome and duration, the last success and its age, the
watchers' polls and lag, in Prometheus's text format."""

from __future__ import annotations

from fastapi.testclient import TestClient
from proxbox_processes import wait_until

from proxbox_backend import api
from proxbox_backend.config import Settings
from proxbox_backend.metrics import METRICS, Metrics
from proxbox_backend.report import RunReport
from proxbox_backend.secrets import Secret

TOKEN = "metrics-token-0123456789abcdef"


def report(error=None, seconds=1.0) -> RunReport:
    made = RunReport(error=error)
    made.duration_s = seconds
    return made


def test_runs_are_counted_by_outcome_with_the_last_successes_age():
    now = [1_000.0]
    metrics = Metrics(clock=lambda: now[0])
    metrics.run_finished("3", report(seconds=2.0))
    now[0] = 1_030.0
    metrics.run_finished("3", report(error="Proxmox unreachable"))
    metrics.run_finished("4", RunReport(dry_run=True))  # a preview is no run
    metrics.polls["3"] += 5
    metrics.watch_lag["3"] = 4.5
    metrics.watching["3"] = 1
    text = metrics.render()
    for line in (
        "# TYPE proxbox_runs_total counter",
        'proxbox_runs_total{endpoint="3",outcome="succeeded"} 1.0',
        'proxbox_runs_total{endpoint="3",outcome="failed"} 1.0',
        "# TYPE proxbox_run_duration_seconds summary",
        'proxbox_run_duration_seconds_sum{endpoint="3"} 3.0',
        'proxbox_run_duration_seconds_count{endpoint="3"} 2.0',
        'proxbox_last_success_timestamp_seconds{endpoint="3"} 1000.0',
        'proxbox_last_success_age_seconds{endpoint="3"} 30.0',
        'proxbox_watch_polls_total{endpoint="3"} 5.0',
        'proxbox_watch_lag_seconds{endpoint="3"} 4.5',
        'proxbox_watch_held{endpoint="3"} 1.0',
    ):
        assert line in text.splitlines(), line
    assert 'endpoint="4"' not in text


class OneRunService:
    async def endpoint_exists(self, endpoint_id):
        return True

    async def run(self, endpoint_id, emit, target=None):
        done = report(seconds=0.5)
        emit({"event": "finished", "report": done.as_dict()})
        return done


def test_the_service_serves_them_behind_its_token():
    settings = Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40))
    app = api.create_app(settings, service=OneRunService(), api_token=TOKEN)
    before = METRICS.runs[("41", "succeeded")]
    with TestClient(app) as client:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        run_id = client.post("/sync/41", headers=auth).json()["run_id"]
        wait_until(
            lambda: client.get(f"/runs/{run_id}", headers=auth).json()["state"] == "finished",
            10,
            "the run to finish",
        )
        assert client.get("/metrics").status_code == 401
        answer = client.get("/metrics", headers=auth)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert METRICS.runs[("41", "succeeded")] == before + 1
    assert f'proxbox_runs_total{{endpoint="41",outcome="succeeded"}} {before + 1.0!r}' in (
        answer.text.splitlines()
    )
