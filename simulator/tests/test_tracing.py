"""Optional OpenTelemetry tracing, end to end.

A real ``proxmox-simulator serve`` process exports over OTLP/HTTP to a receiver
this test runs as a real HTTP server; the spans are decoded from the protobuf
the exporter sent. Without an exporter configured nothing is sent, and an
exporter the simulator does not ship is refused at startup with one line.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from proxbox_processes import interruptible
from simtest_support import ROOT_PASSWORD, Session, create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.observability.tracing import configured_exporters
from proxmox_simulator.server import SimulatorProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Receiver:
    """A minimal OTLP/HTTP trace receiver: every exported span, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.requests = 0
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.record(self.path, body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def record(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.requests += 1
        self.paths.append(path)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "kind": span.kind,
                            "trace_id": span.trace_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "status": span.status.code,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "resource": resource,
                        }
                    )

    def wait_for(self, predicate, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for span in list(self.spans):
                if predicate(span):
                    return span
            time.sleep(0.05)
        raise AssertionError(f"no such span among {[s['name'] for s in self.spans]}")

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    url = create_database("tracing")
    run(seed_database(Settings(database_url=url), "small", 11, ROOT_PASSWORD))
    yield url
    drop_database(url)


def _settings(url, tmp_path_factory) -> Settings:
    return Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("tracing"),
        clock="instant",
        task_workers=1,
        lease_seconds=10,
        pool_max_size=3,
    )


def _first_guest(pve: Session) -> tuple[str, int]:
    guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
    guest = next(g for g in guests if g["type"] == "qemu")
    return guest["node"], guest["vmid"]


def test_requests_and_tasks_are_exported_as_spans(database, tmp_path_factory, monkeypatch):
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        with (
            SimulatorProcess(_settings(database, tmp_path_factory)) as sim,
            httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client,
        ):
            pve = Session(client)
            node, vmid = _first_guest(pve)
            status = pve.get(
                f"/nodes/{node}/status",
                headers={
                    "x-request-id": "trace-req-1",
                    "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
                },
            )
            assert status.status_code == 200, status.text
            missing = pve.get("/nodes/nowhere/qemu/1/does-not-exist")
            assert missing.status_code == 501
            response = pve.post(f"/nodes/{node}/qemu/{vmid}/config", data={"description": "traced"})
            assert response.status_code == 200, response.text
            upid = response.json()["data"]
            assert pve.wait(upid, timeout=30)["exitstatus"] == "OK"
            healthz = httpx.get(sim.base_url + "/healthz", timeout=10)
            assert healthz.status_code == 200

            server = receiver.wait_for(lambda s: s["name"] == "GET /nodes/{node}/status")
            assert server["kind"] == 2  # SPAN_KIND_SERVER
            assert server["attributes"] == {
                "http.request.method": "GET",
                "http.route": "/nodes/{node}/status",
                "http.response.status_code": 200,
                "pvesim.request_id": "trace-req-1",
            }
            # The caller's W3C trace context is continued.
            assert server["trace_id"] == TRACE_ID
            assert server["parent_id"] == PARENT_ID
            assert server["resource"]["service.name"] == "proxmox-simulator"

            unmatched = receiver.wait_for(
                lambda s: s["attributes"].get("http.response.status_code") == 501
            )
            assert unmatched["name"] == "GET (unmatched)"
            assert unmatched["attributes"]["pvesim.request_id"] == missing.headers["x-request-id"]

            write = receiver.wait_for(
                lambda s: s["name"] == "POST /nodes/{node}/qemu/{vmid}/config"
            )
            assert write["attributes"]["pvesim.request_id"] == response.headers["x-request-id"]
            assert write["attributes"]["pvesim.task.upid"] == upid  # correlates with the task
            receiver.wait_for(lambda s: s["name"] == "GET /healthz" and s["kind"] == 2)

            task_type = upid.split(":")[5]
            task = receiver.wait_for(lambda s: s["name"] == f"task {task_type}")
            assert task["kind"] == 5  # SPAN_KIND_CONSUMER
            assert task["attributes"]["pvesim.task.upid"] == upid
            assert task["attributes"]["pvesim.task.node"] == node
            assert task["attributes"]["pvesim.task.exitstatus"] == "OK"
            assert task["attributes"]["pvesim.task.attempt"] == 1
            assert task["attributes"]["pvesim.task.worker"]

            login = receiver.wait_for(lambda s: s["name"] == "POST /access/ticket")
            assert login["attributes"]["http.response.status_code"] == 200
        assert all(path == "/v1/traces" for path in receiver.paths)
        # No password, ticket or CSRF token in any span.
        exported = json.dumps(receiver.spans)
        for secret in (ROOT_PASSWORD, pve.ticket, pve.csrf, pve.ticket.split("::")[-1]):
            assert secret not in exported


def test_nothing_is_exported_when_the_exporter_is_none(database, tmp_path_factory, monkeypatch):
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        with (
            SimulatorProcess(_settings(database, tmp_path_factory)) as sim,
            httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client,
        ):
            pve = Session(client)
            node, vmid = _first_guest(pve)
            response = pve.post(f"/nodes/{node}/qemu/{vmid}/config", data={"description": "n"})
            upid = response.json()["data"]
            assert pve.wait(upid, timeout=30)["exitstatus"] == "OK"
            time.sleep(0.5)
        # The process has shut down (and would have flushed): still nothing.
        assert receiver.requests == 0


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER: unsupported exporter 'zipkin'"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL: unsupported"),
    ],
)
def test_serve_refuses_an_exporter_it_does_not_ship(database, variable, value, fragment):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", variable: value})
    env["PROXMOX_SIMULATOR_DATABASE_URL"] = database
    result = subprocess.run(
        [sys.executable, "-m", "proxmox_simulator", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2  # EXIT_USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ("otlp", "console")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, ()),
    ],
)
def test_which_environment_switches_tracing_on(environ, expected):
    assert configured_exporters(environ) == expected


def test_console_exporter_prints_spans(database, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with (
        SimulatorProcess(_settings(database, tmp_path_factory)) as sim,
        httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client,
    ):
        pve = Session(client)
        assert pve.get("/version", headers={"x-request-id": "console-1"}).status_code == 200
        deadline = time.monotonic() + 20
        while '"pvesim.request_id": "console-1"' not in sim.output():
            assert time.monotonic() < deadline, sim.output()[-2000:]
            time.sleep(0.1)
        assert '"name": "GET /version"' in sim.output()


def test_a_standalone_worker_exports_task_spans(database, tmp_path_factory, monkeypatch):
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    settings = dataclasses.replace(_settings(database, tmp_path_factory), task_workers=0)
    with Receiver() as receiver:
        env = {
            **os.environ,
            "PROXMOX_SIMULATOR_DATABASE_URL": database,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint + "/v1/traces",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "pvesim-worker",
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", "proxmox_simulator", "worker", "--workers", "1"]
            + ["--clock", "instant", "--worker-id", "traced-worker"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=interruptible,
        )
        try:
            assert "running" in worker.stdout.readline().decode()
            with (
                SimulatorProcess(settings) as sim,
                httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client,
            ):
                pve = Session(client)
                node, vmid = _first_guest(pve)
                response = pve.post(f"/nodes/{node}/qemu/{vmid}/config", data={"description": "w"})
                upid = response.json()["data"]
                assert pve.wait(upid, timeout=30)["exitstatus"] == "OK"
            task = receiver.wait_for(lambda s: s["attributes"].get("pvesim.task.upid") == upid)
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(timeout=30)
        assert task["attributes"]["pvesim.task.worker"] == "traced-worker"
        assert task["resource"]["service.name"] == "pvesim-worker"
        # The API process had no exporter configured: only the worker's task span arrived.
        assert {s["name"] for s in receiver.spans} == {task["name"]}
