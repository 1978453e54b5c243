"""The HTTP service's guard: a token on every route but /health, compared in constant
time, and a service that does not start without one."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Route

from proxbox_backend import api, cli
from proxbox_backend.config import ConfigurationError, Settings
from proxbox_backend.secrets import Secret

TOKEN = "backend-token-0123456789abcdef"


class IdleService:
    """Runs nothing: the guard is what is under test."""

    async def endpoint_exists(self, endpoint_id):
        return True

    async def run(self, endpoint, emit=None, target=None):
        return None


def _app(token: str = TOKEN):
    settings = Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40))
    return api.create_app(settings, service=IdleService(), api_token=token)


def _routes(app) -> list[tuple[str, str]]:
    """Every (method, concrete path) the app serves, path parameters filled in."""
    found = []
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        path = re.sub(r"\{[^}]+\}", "1", route.path)
        found += [(method, path) for method in sorted(route.methods - {"HEAD"})]
    return found


def test_every_route_but_health_needs_the_token():
    app = _app()
    routes = _routes(app)
    # The run and stream routes, the sync trigger and the schema are all guarded.
    assert {("POST", "/sync/1"), ("GET", "/runs/1"), ("GET", "/runs/1/events")} <= set(routes)
    assert ("GET", "/openapi.json") in routes
    with TestClient(app) as client:
        for method, path in routes:
            if path == "/health":
                assert client.request(method, path).status_code == 200
                continue
            for headers in (
                {},
                {"Authorization": TOKEN},  # no scheme
                {"Authorization": f"Token {TOKEN}"},  # wrong scheme
                {"Authorization": f"Bearer {TOKEN[:-1]}X"},  # same length, one byte off
                {"Authorization": ("Bearer " + "é" * 4).encode("latin-1")},  # non-ASCII: wrong
            ):
                answer = client.request(method, path, headers=headers)
                assert answer.status_code == 401, (method, path, headers, answer.text)
        schema = client.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"})
        assert schema.status_code == 200 and "/sync/{endpoint_id}" in schema.json()["paths"]
        assert client.get("/docs").status_code == 404


def test_the_token_is_compared_in_constant_time(monkeypatch):
    compared = []

    def spy(a, b):
        compared.append((a, b))
        return a == b

    monkeypatch.setattr(api.hmac, "compare_digest", spy)
    with TestClient(_app()) as client:
        assert (
            client.get("/runs/1", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
        )
        assert client.get("/runs/1", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert compared == [(TOKEN.encode(), TOKEN.encode()), (b"nope", TOKEN.encode())]


def test_no_token_no_service(monkeypatch, capsys):
    with pytest.raises(ConfigurationError, match="PROXBOX_BACKEND_API_TOKEN"):
        _app(token="")
    monkeypatch.delenv("PROXBOX_BACKEND_API_TOKEN", raising=False)
    monkeypatch.setenv("PROXBOX_NETBOX_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("PROXBOX_NETBOX_TOKEN", "x" * 40)
    assert cli.main(["serve", "--port", "9"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PROXBOX_BACKEND_API_TOKEN" in err


def test_the_access_log_masks_secrets_in_query_strings(tmp_path):
    """`proxbox-sync serve` as the devstack runs it, its output in a log file: a request
    whose query string carries credentials is logged with their values masked."""
    import subprocess
    import sys

    import httpx
    from proxbox_processes import free_port, stop_process, wait_for_http

    leaked = {
        "token": "nbt_QueryTokenLeak0123456789",
        "access_token": "eyJhbGciOi.AccessTokenLeak",
        "api_key": "ApiKeyLeak-4f1c",
        "secret": "SecretLeak-9a7e",
    }
    port = free_port()
    log_file = tmp_path / "backend.log"
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "proxbox_backend.cli", "serve", "--port", str(port)],
            env={
                "PATH": "/usr/bin:/bin",
                "PROXBOX_NETBOX_URL": "http://127.0.0.1:9",
                "PROXBOX_NETBOX_TOKEN": "x" * 40,
                "PROXBOX_BACKEND_API_TOKEN": TOKEN,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/health", process, timeout=60, require_success=True)
        answer = httpx.get(
            f"{base}/runs/run-with-secrets",
            params={"page": "1", **leaked},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert answer.status_code == 404
    finally:
        stop_process(process)
    logged = log_file.read_text("utf-8")
    line = next(line for line in logged.splitlines() if "/runs/run-with-secrets" in line)
    assert "GET /runs/run-with-secrets?page=1&token=***&access_token=***&api_key=***" in line
    assert "&secret=*** HTTP/1.1" in line and line.rstrip().endswith("404 Not Found")
    for value in leaked.values():
        assert value not in logged
