"""No secret the platform holds shows up anywhere an operator or a NetBox user can read.

A stack of its own runs on a private Redis with `requirepass` and as a PostgreSQL
role with a password. The test then provokes what prints most: retries against an
unreachable Proxmox, failed runs (NetBox's "Sync now" and `proxbox-sync run`),
refused and unknown backend requests, a secret placed in query strings of the
backend and the simulator, a simulator task worker. Finally it reads every place
text ends up — stdout/stderr of each CLI, every log file of the data dir, NetBox
Job data and log entries, change records, CSV exports, the backend's error and run
bodies — and looks for each secret in them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
import redis
from proxbox_processes import free_port, interruptible, wait_until
from psycopg import sql
from stack_support import UP_TIMEOUT, Stack, drop_database

from proxbox_devstack import redis_server

ENDPOINTS = "/api/plugins/proxbox/endpoints/proxmox/"
PREFIX = "sec_"
UNREACHABLE_ENDPOINT = "sec-unreachable"


def _server_url() -> str:
    # Exported by nox or, without it, by the `services_env` fixture's embedded servers.
    return os.environ["PROXBOX_DATABASE_URL"]


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory):
    """A private redis-server (the one the dev stack bundles) that wants a password."""
    password = "sec-redis-" + secrets.token_hex(12)
    port = free_port()
    workdir = tmp_path_factory.mktemp("sec-redis")
    server = subprocess.Popen(
        [str(redis_server.server_binary()), "--bind", "127.0.0.1", "--port", str(port)]
        + ["--requirepass", password, "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{password}@127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        except redis.RedisError:
            return False

    wait_until(answers, 20, "the private redis-server to start", interval=0.5)
    yield url, password
    server.terminate()
    server.wait(10)


@pytest.fixture(scope="module")
def role_with_password(services_env):
    """A PostgreSQL role with a password (a superuser: it clones the NetBox template)."""
    role = f"{PREFIX}role_{os.getpid()}"
    password = "sec-pg-" + secrets.token_hex(12)
    server = _server_url()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    parts = urlsplit(server)
    yield (
        f"postgresql://{role}:{password}@{parts.hostname}:{parts.port or 5432}{parts.path}",
        password,
    )
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


class Evidence(dict):
    """Every text the test read, by where it came from."""

    def add(self, source: str, text: str | bytes) -> str:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        self[source] = self.get(source, "") + text + "\n"
        return text

    def add_process(self, source: str, result: subprocess.CompletedProcess) -> None:
        self.add(f"{source} stdout", result.stdout)
        self.add(f"{source} stderr", result.stderr)

    def add_response(self, source: str, response: httpx.Response) -> httpx.Response:
        self.add(f"{source} (HTTP {response.status_code})", response.text)
        return response


@pytest.fixture(scope="module")
def secret_stack(tmp_path_factory, redis_with_password, role_with_password):
    redis_url, _ = redis_with_password
    database_url, _ = role_with_password
    home = tmp_path_factory.mktemp("e2e-secrets")
    database = f"{PREFIX}e2e_{os.getpid()}"
    env = dict(
        os.environ,
        PROXBOX_HOME=str(home),
        PROXBOX_NETBOX_DATABASE=database,
        PROXBOX_DATABASE_URL=database_url,
        PROXBOX_REDIS_URL=redis_url,
    )
    stack = Stack(home=home, port=free_port(), env=env, database=database)
    evidence = Evidence()
    try:
        result = stack.proxbox("up", "-d", "--port", str(stack.port), timeout=UP_TIMEOUT)
        evidence.add_process("proxbox up", result)
        assert result.returncode == 0, result.stdout + result.stderr
        yield stack, evidence
    finally:
        evidence.add_process("proxbox down", stack.stop())
        server_env = {"PROXBOX_DATABASE_URL": _server_url()}
        drop_database(server_env, database)
        drop_database(server_env, f"{database}_simulator")


def _known_secrets(stack: Stack, redis_password: str, pg_password: str, pve_secret: str):
    home = stack.home
    generated = json.loads((home / "secrets.json").read_text())
    backend = json.loads((home / "backend-credentials.json").read_text())
    demo = json.loads((home / "simulator" / "demo.json").read_text())
    return {
        "NetBox admin token": stack.credentials["token"],
        "NetBox admin password": stack.credentials["password"],
        "backend's NetBox token": backend["token"],
        "backend API token": generated["backend_api_token"],
        "NetBox SECRET_KEY": generated["netbox_secret_key"],
        "API token pepper": generated["netbox_api_token_pepper"],
        "plugin encryption key": generated["proxbox_encryption_key"],
        "demo Proxmox token secret": demo["token_secret"],
        "unreachable endpoint's Proxmox token secret": pve_secret,
        "PostgreSQL password": pg_password,
        "Redis password": redis_password,
    }


def _wait_job(client: httpx.Client, job_id: int) -> dict:
    def finished() -> bool:
        status = client.get(f"/api/core/jobs/{job_id}/").json()["status"]["value"]
        return status in ("completed", "errored", "failed")

    wait_until(finished, 240, f"job {job_id} to finish", interval=0.5)
    return client.get(f"/api/core/jobs/{job_id}/").json()


def _login(stack: Stack, client: httpx.Client) -> None:
    client.get("/login/")
    login = client.post(
        "/login/",
        data={
            "username": stack.credentials["username"],
            "password": stack.credentials["password"],
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
        headers={"Referer": f"{stack.url}/login/"},
    )
    assert login.status_code == 200 and "sessionid" in client.cookies, login.text[:500]


def _cli_env(stack: Stack, **extra: str) -> dict[str, str]:
    backend = json.loads((stack.home / "backend-credentials.json").read_text())
    return dict(
        stack.env,
        PROXBOX_NETBOX_URL=stack.url,
        PROXBOX_NETBOX_TOKEN=backend["token"],
        PROXBOX_PROXMOX_CA_BUNDLE=str(stack.home / "simulator" / "tls" / "pve-ssl.pem"),
        **extra,
    )


def _run(argv: list[str], env: dict[str, str], timeout: float = 300):
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_no_secret_appears_anywhere(secret_stack, redis_with_password, role_with_password):
    stack, evidence = secret_stack
    redis_url, redis_password = redis_with_password
    _, pg_password = role_with_password
    pve_secret = "sec-pve-" + secrets.token_hex(16)
    state = json.loads((stack.home / "stack.json").read_text())
    backend_url = state["urls"]["sync backend"].rstrip("/")
    simulator_url = state["urls"]["proxmox simulator"]
    api_token = json.loads((stack.home / "secrets.json").read_text())["backend_api_token"]

    # The dev stack's own output names both servers, without their passwords.
    status = stack.proxbox("status")
    evidence.add_process("proxbox status", status)
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"redis +redis://:\*\*\*@127\.0\.0\.1:\d+", status.stdout), status.stdout
    assert re.search(r"database +postgresql://sec_role_\d+:\*\*\*@", status.stdout), status.stdout

    with stack.client() as client:
        demo = client.get(ENDPOINTS, params={"name": "demo-pve"}).json()["results"][0]
        # An endpoint whose Proxmox never answers: connection errors, retried, then a failed run.
        unreachable = evidence.add_response(
            "create endpoint",
            client.post(
                ENDPOINTS,
                json={
                    "name": UNREACHABLE_ENDPOINT,
                    "host": "127.0.0.1",
                    "port": free_port(),
                    "token_id": "root@pam!sec",
                    "token_secret": pve_secret,
                    "verify_tls": True,
                    "site": demo["site"]["id"],
                },
            ),
        )
        assert unreachable.status_code == 201, unreachable.text
        endpoint = unreachable.json()
        evidence.add_response("endpoint", client.get(f"{ENDPOINTS}{endpoint['id']}/"))

        jobs = {}
        for name, target in (("failing", endpoint), ("demo", demo)):
            started = client.post(f"{ENDPOINTS}{target['id']}/sync/")
            assert started.status_code in (200, 201, 202), started.text
            jobs[name] = _wait_job(client, started.json()["id"])
            evidence.add(f"NetBox Job ({name} sync now)", json.dumps(jobs[name]))
        assert jobs["failing"]["status"]["value"] in ("errored", "failed"), jobs["failing"]
        assert jobs["demo"]["status"]["value"] == "completed", jobs["demo"]
        assert jobs["failing"]["log_entries"], jobs["failing"]

        changes = client.get("/api/core/object-changes/", params={"limit": 0})
        evidence.add_response("change records", changes)
        assert changes.json()["count"] > 0
        evidence.add_response("job list", client.get("/api/core/jobs/", params={"limit": 0}))
        evidence.add_response(
            "sidecars", client.get("/api/plugins/proxbox/cluster-sync-states/", params={"limit": 0})
        )

    with httpx.Client(base_url=stack.url, timeout=60, follow_redirects=True) as ui:
        _login(stack, ui)
        for path in (
            "/plugins/proxbox/endpoints/",
            "/core/jobs/",
            "/core/changelog/",
        ):
            for export in ("table", "yaml"):
                exported = ui.get(path, params={"export": export})
                evidence.add_response(f"export {export} {path}", exported)
        csv = ui.get("/plugins/proxbox/endpoints/", params={"export": "table"})
        assert UNREACHABLE_ENDPOINT in csv.text, csv.text[:500]

    # The backend's HTTP API: refused, unknown, a secret in the query string, a failed run.
    with httpx.Client(base_url=backend_url, timeout=30) as backend:
        assert (
            evidence.add_response("backend without token", backend.get("/runs/x")).status_code
            == 401
        )
        wrong = backend.get("/runs/x", headers={"Authorization": f"Bearer {api_token[:-2]}xx"})
        assert evidence.add_response("backend wrong token", wrong).status_code == 401
        authorized = {"Authorization": f"Bearer {api_token}"}
        unknown = backend.get(f"/runs/none?token_secret={pve_secret}", headers=authorized)
        assert evidence.add_response("backend unknown run", unknown).status_code == 404
        started = backend.post(f"/sync/{endpoint['id']}", headers=authorized)
        assert evidence.add_response("backend start", started).status_code == 202, started.text
        run_url = started.json()["url"]

        def run_finished() -> bool:
            return backend.get(run_url, headers=authorized).json()["state"] == "finished"

        wait_until(run_finished, 120, "the backend run to finish", interval=0.5)
        run = evidence.add_response("backend run", backend.get(run_url, headers=authorized))
        assert run.json()["report"]["ok"] is False
        evidence.add_response(
            "backend events", backend.get(f"{run_url}/events", headers=authorized)
        )

    # The simulator: refused credentials and a password in a query string.
    with httpx.Client(
        base_url=simulator_url,
        verify=str(stack.home / "simulator" / "tls" / "pve-ssl.pem"),
        timeout=30,
    ) as pve:
        refused = pve.get(
            "/nodes",
            params={"password": pve_secret},
            headers={"Authorization": f"PVEAPIToken=root@pam!sec={pve_secret}"},
        )
        assert evidence.add_response("simulator refused", refused).status_code == 401

    # `proxbox-sync run` in a process of its own: retries, then a failed run; then a good one.
    failing = _run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", UNREACHABLE_ENDPOINT],
        _cli_env(stack, PROXBOX_PROXMOX_TOKEN=pve_secret),
    )
    evidence.add_process("proxbox-sync run (unreachable)", failing)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "retry in" in failing.stderr, failing.stderr
    as_json = _run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", "demo-pve", "--json"],
        _cli_env(stack),
    )
    evidence.add_process("proxbox-sync run --json (demo)", as_json)
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr

    # A simulator task worker on the password-protected database, stopped mid-wait.
    simulator_env = dict(
        stack.env,
        PROXMOX_SIMULATOR_DATABASE_URL=re.sub(
            r"/[^/]*$", f"/{stack.database}_simulator", stack.env["PROXBOX_DATABASE_URL"]
        ),
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "proxmox_simulator.cli", "worker", "--worker-id", "sec-worker"],
        env=simulator_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    time.sleep(5)
    worker.send_signal(signal.SIGINT)
    out, err = worker.communicate(timeout=60)
    evidence.add("simulator worker stdout", out)
    evidence.add("simulator worker stderr", err)
    assert "worker sec-worker running" in out, out + err

    for path in sorted(Path(stack.home).rglob("*.log")):
        evidence.add(f"log file {path.relative_to(stack.home)}", path.read_bytes())
    assert any("logs/backend.log" in name for name in evidence)
    assert "retry in" in evidence["log file logs/backend.log"]

    known = _known_secrets(stack, redis_password, pg_password, pve_secret)
    leaks = [
        f"{secret_name} in {source}"
        for secret_name, value in known.items()
        for source, text in evidence.items()
        if value in text
    ]
    assert leaks == [], leaks
    # The redacted forms prove the places were looked at with secrets in reach.
    assert "***" in "".join(evidence.values())
    assert redis_url not in "".join(evidence.values())
