"""The demo half of `proxbox up`: a Proxmox simulator, the sync backend, and a demo
endpoint in NetBox that the backend syncs once.

* The simulator gets its own database on the stack's PostgreSQL
  (`<netbox database>_simulator`), migrated and seeded with a deterministic
  profile once; a PVE API token is created then and kept in
  `<data>/simulator/demo.json` (0600). It serves HTTPS on 127.0.0.1 with the
  certificate it generates in `<data>/simulator/tls/`.
* The backend (`proxbox-sync serve`) authenticates NetBox with the
  `proxbox-backend` user's token (created by `netbox_db`) and its callers with
  the generated `backend_api_token` secret, which NetBox's PLUGINS_CONFIG
  carries too. It verifies the simulator's certificate with the simulator's CA.
* After start, the demo endpoint is registered once (verify_tls on) and synced
  through the backend's HTTP API, the same path NetBox's "Sync now" takes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import subprocess
import sys
import time
from pathlib import Path

from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.secrets import Secret

from . import scratch_tablespace
from .context import StackContext, http_answers
from .errors import StackError
from .netbox_db import backend_credentials_path, load_credentials
from .netbox_settings import (
    BACKEND_URL_ENV,
    DEFAULT_NETBOX_DATABASE,
    NETBOX_DATABASE_ENV,
    tasks_redis_url,
)
from .ports import choose_port
from .processes import ProcessSpec, open_log
from .secrets import load_or_create_secrets, write_private_file

SIMULATOR_PROFILE = "small"
SIMULATOR_SEED = 1
SIMULATOR_PORT = 8006
SIMULATOR_TOKEN_ID = "root@pam!proxbox-demo"
BACKEND_PORT = 8800
DEMO_ENDPOINT = "demo-pve"
# Proxmox nodes become NetBox devices, and devices need a site.
DEMO_SITE = {"name": "Proxbox demo", "slug": "proxbox-demo"}
SYNC_TIMEOUT = 300.0
JOB_DONE_STATES = ("completed", "errored", "failed")
ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"


def simulator_dir(ctx: StackContext) -> Path:
    return ctx.data_dir / "simulator"


def simulator_database(env: dict[str, str]) -> str:
    return f"{env.get(NETBOX_DATABASE_ENV, DEFAULT_NETBOX_DATABASE)}_simulator"


def _server_dsn(server_url: str, database: str) -> str:
    base, _, _ = server_url.partition("?")[0].rpartition("/")
    return f"{base}/{database}"


def _simulator_env(ctx: StackContext) -> dict[str, str]:
    return dict(
        ctx.env,
        PROXMOX_SIMULATOR_DATABASE_URL=_server_dsn(
            ctx.services.database_url, simulator_database(ctx.env)
        ),
        PROXMOX_SIMULATOR_DATA_DIR=str(simulator_dir(ctx)),
        # Simulated tasks finish at once: a demo need not wait for fake clones.
        PROXMOX_SIMULATOR_CLOCK="instant",
    )


def _simulator_cli(ctx: StackContext, *args: str) -> str:
    log_file = ctx.log_file("simulator-setup")
    result = subprocess.run(
        [sys.executable, "-m", "proxmox_simulator.cli", *args],
        env=_simulator_env(ctx),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    with open_log(log_file, "a") as log:
        log.write(f"$ proxmox-simulator {args[0]}\n{result.stderr}")
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        raise StackError(f"proxmox-simulator {args[0]} failed: {reason} (see {log_file})")
    return result.stdout


def demo_state_path(ctx: StackContext) -> Path:
    return simulator_dir(ctx) / "demo.json"


def prepare_simulator(ctx: StackContext) -> None:
    """Create, migrate and seed the simulator's database and its API token, once."""
    import psycopg

    database = simulator_database(ctx.env)
    state_path = demo_state_path(ctx)
    with psycopg.connect(ctx.services.database_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
        if not exists:
            conn.execute(scratch_tablespace.create_database_sql(database))
            # A token recorded for a database that no longer exists is worthless.
            state_path.unlink(missing_ok=True)
    _simulator_cli(ctx, "migrate")
    if not state_path.exists():
        _simulator_cli(ctx, "seed", "--profile", SIMULATOR_PROFILE, "--seed", str(SIMULATOR_SEED))
        secret = json.loads(
            _simulator_cli(ctx, "token", "create", SIMULATOR_TOKEN_ID, "--privsep", "0", "--json")
        )["value"]
        state = {"database": database, "token_id": SIMULATOR_TOKEN_ID, "token_secret": secret}
        write_private_file(state_path, json.dumps(state, indent=2) + "\n")


def _https_answers(port: int, path: str) -> bool:
    context = ssl.create_default_context()
    # Readiness only: the certificate may not exist yet when the server starts.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        try:
            conn.request("GET", path)
            return conn.getresponse().status < 500
        finally:
            conn.close()
    except OSError:
        return False


def simulator_specs(ctx: StackContext) -> list[ProcessSpec]:
    port = choose_port(None, SIMULATOR_PORT)
    ctx.notes["simulator_port"] = port
    ctx.urls["proxmox simulator"] = f"https://127.0.0.1:{port}/api2/json"
    return [
        ProcessSpec(
            name="simulator",
            argv=[
                sys.executable,
                "-m",
                "proxmox_simulator.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--tls",
                "--workers",
                "1",
            ],
            log_file=ctx.log_file("simulator"),
            env=_simulator_env(ctx),
            ready=lambda: _https_answers(port, "/healthz"),
            ready_timeout=60,
        )
    ]


def assign_backend_url(ctx: StackContext) -> None:
    """Pick the backend's port before NetBox starts: its configuration names the URL."""
    port = choose_port(None, BACKEND_PORT)
    ctx.notes["backend_port"] = port
    ctx.env[BACKEND_URL_ENV] = f"http://127.0.0.1:{port}"


def backend_serve_argv(host: str, port: int | str) -> list[str]:
    """This interpreter's own backend serving on host:port: a `proxbox-sync` that PATH
    finds may be another installation's, or missing where the venv's bin is not on PATH
    (systemd, a venv never activated)."""
    return [
        sys.executable,
        "-m",
        "proxbox_backend.cli",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
    ]


def backend_specs(ctx: StackContext) -> list[ProcessSpec]:
    port = int(ctx.notes["backend_port"])
    credentials = json.loads(backend_credentials_path(ctx.data_dir).read_text("utf-8"))
    secrets = load_or_create_secrets(ctx.data_dir)
    env = dict(
        ctx.env,
        PROXBOX_NETBOX_URL=f"http://{ctx.options.host}:{ctx.options.port}",
        PROXBOX_NETBOX_TOKEN=credentials["token"],
        PROXBOX_BACKEND_API_TOKEN=secrets["backend_api_token"],
        PROXBOX_PROXMOX_CA_BUNDLE=str(simulator_dir(ctx) / "tls" / "pve-ssl.pem"),
        PROXBOX_BACKEND_REDIS_URL=tasks_redis_url(ctx.env),
    )
    ctx.urls["sync backend"] = ctx.env[BACKEND_URL_ENV] + "/"
    return [
        ProcessSpec(
            name="backend",
            argv=backend_serve_argv("127.0.0.1", port),
            log_file=ctx.log_file("backend"),
            env=env,
            ready=lambda: http_answers("127.0.0.1", port, "/health"),
            ready_timeout=60,
        )
    ]


async def _demo_site(netbox: NetBoxClient) -> int:
    page = await netbox.get("/dcim/sites/", slug=DEMO_SITE["slug"])
    if page["results"]:
        return page["results"][0]["id"]
    site = await netbox.call("POST", "/dcim/sites/", json=dict(DEMO_SITE))
    return site["id"]


async def _register_endpoint(
    netbox: NetBoxClient,
    *,
    host: str,
    port: int,
    token_id: str,
    token_secret: str,
    verify_tls: bool,
) -> dict:
    """The demo endpoint, registered on first use; pointed at `host:port` with this token."""
    site = await _demo_site(netbox)
    page = await netbox.get(ENDPOINTS, name=DEMO_ENDPOINT)
    if not page["results"]:
        return await netbox.call(
            "POST",
            ENDPOINTS,
            json={
                "name": DEMO_ENDPOINT,
                "host": host,
                "port": port,
                "verify_tls": verify_tls,
                "token_id": token_id,
                "token_secret": token_secret,
                "mode": "cluster",
                "site": site,
            },
        )
    endpoint = page["results"][0]
    if (
        endpoint["host"] == host
        and endpoint["port"] == port
        and endpoint.get("token_id") == token_id
        and endpoint.get("site")
    ):
        return endpoint
    return await netbox.call(
        "PATCH",
        f"{ENDPOINTS}{endpoint['id']}/",
        json={
            "host": host,
            "port": port,
            "site": site,
            "token_id": token_id,
            "token_secret": token_secret,
        },
    )


async def _sync_until_linked(netbox: NetBoxClient, endpoint: dict) -> tuple[dict, dict | None]:
    """Sync an endpoint whose cluster is not linked yet through NetBox's "Sync now" Job, as
    an operator would (the run is then among the endpoint's recent syncs, with its log,
    status and counters). Returns the endpoint afterwards and the finished Job (None when
    the cluster was linked already)."""
    if endpoint.get("netbox_cluster"):
        return endpoint, None
    queued = await netbox.call("POST", f"{ENDPOINTS}{endpoint['id']}/sync/")
    deadline = time.monotonic() + SYNC_TIMEOUT
    while (job := await netbox.get(f"/core/jobs/{queued['id']}/"))["status"][
        "value"
    ] not in JOB_DONE_STATES:
        if time.monotonic() > deadline:
            raise StackError(f"the first sync did not finish within {SYNC_TIMEOUT:.0f}s")
        await asyncio.sleep(0.5)
    return await netbox.get(f"{ENDPOINTS}{endpoint['id']}/"), job


def link_demo_endpoint(
    netbox_url: str,
    admin_token: str,
    *,
    host: str,
    port: int,
    token_id: str,
    token_secret: str,
    verify_tls: bool = True,
) -> tuple[dict, dict | None]:
    """Register the demo endpoint (on first use) and sync it until its cluster is linked,
    through the backend's NetBox client (its retries, error descriptions and token
    handling). Returns the endpoint and the first sync's finished Job (None when the
    cluster was linked already)."""

    async def link() -> tuple[dict, dict | None]:
        async with NetBoxClient(netbox_url, Secret(admin_token), timeout=60.0) as netbox:
            endpoint = await _register_endpoint(
                netbox,
                host=host,
                port=port,
                token_id=token_id,
                token_secret=token_secret,
                verify_tls=verify_tls,
            )
            return await _sync_until_linked(netbox, endpoint)

    try:
        return asyncio.run(link())
    except NetBoxError as exc:
        raise StackError(f"the demo endpoint could not be set up: {exc}") from None


def demo_urls(netbox: str, endpoint: dict) -> dict[str, str]:
    urls = {"demo endpoint": f"{netbox}/plugins/proxbox/endpoints/{endpoint['id']}/"}
    cluster = endpoint.get("netbox_cluster")
    if cluster:
        urls["demo cluster"] = f"{netbox}/virtualization/clusters/{cluster['id']}/"
        urls["demo VMs"] = f"{netbox}/virtualization/virtual-machines/?cluster_id={cluster['id']}"
    return urls


def first_sync(ctx: StackContext) -> None:
    """Register the demo endpoint and sync it through the backend until its cluster is linked."""
    netbox = f"http://{ctx.options.host}:{ctx.options.port}"
    admin = load_credentials(ctx.data_dir)
    if admin is None:
        raise StackError("the admin credentials are missing; cannot register the demo endpoint")
    demo = json.loads(demo_state_path(ctx).read_text("utf-8"))
    endpoint, job = link_demo_endpoint(
        netbox,
        admin["token"],
        host="127.0.0.1",
        port=int(ctx.notes["simulator_port"]),
        token_id=demo["token_id"],
        token_secret=demo["token_secret"],
        # The backend verifies the simulator's self-signed certificate with its CA
        # (PROXBOX_PROXMOX_CA_BUNDLE), so verification stays on.
        verify_tls=True,
    )
    if job is not None and job["status"]["value"] != "completed":
        print(
            f"proxbox: the first sync reported problems: {job.get('error') or 'see'} "
            f"{netbox}/core/jobs/{job['id']}/ (and {ctx.log_file('rqworker-sync')}, "
            f"{ctx.log_file('backend')})",
            file=sys.stderr,
        )
    ctx.urls.update(demo_urls(netbox, endpoint))
