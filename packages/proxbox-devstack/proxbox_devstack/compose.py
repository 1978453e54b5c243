"""What compose/ runs besides NetBox itself, so its platform is `proxbox up`'s.

    python -m proxbox_devstack.compose backend        the sync backend (proxbox-sync serve)
    python -m proxbox_devstack.compose demo           demo endpoint + first sync (one-shot)
    python -m proxbox_devstack.compose health URL     exit 0 once URL answers below 500
    python -m proxbox_devstack.compose health-rq      exit 0 while this host's RQ worker is registered

Each container shares `PROXBOX_HOME` (the `proxbox-data` volume) with the `setup`
job, which wrote the secrets and the NetBox tokens there; the commands read them
from it, so no secret is ever written into the compose file.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

from proxbox_processes import WaitTimeout, wait_until

from .errors import StackError
from .netbox_db import backend_credentials_path, load_credentials
from .paths import data_dir as default_data_dir
from .secrets import load_or_create_secrets, write_private_file

# Where the containers find each other (compose service names).
NETBOX_URL_ENV = "PROXBOX_NETBOX_URL"
SIMULATOR_HOST_ENV = "PROXBOX_SIMULATOR_HOST"
SIMULATOR_PORT_ENV = "PROXBOX_SIMULATOR_PORT"
BACKEND_PORT_ENV = "PROXBOX_BACKEND_PORT"
DEMO_TOKEN_FILE = "simulator-demo-token.json"
READY_TIMEOUT = 300.0


def _require(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise StackError(f"{name} is not set (see compose/docker-compose.yml)")
    return value


def backend(data_dir: Path) -> int:
    """Exec the backend's `serve`, as `proxbox up` starts it, with the backend user's NetBox
    token and the API token NetBox's PLUGINS_CONFIG carries (both made by the `setup` job)."""
    from .demo import backend_serve_argv
    from .netbox_settings import tasks_redis_url
    from .state import REDIS_URL_ENV

    credentials = json.loads(backend_credentials_path(data_dir).read_text("utf-8"))
    secrets = load_or_create_secrets(data_dir)
    _require(REDIS_URL_ENV)  # the runs live there: every backend replica shares them
    env = dict(
        os.environ,
        PROXBOX_NETBOX_URL=_require(NETBOX_URL_ENV),
        PROXBOX_NETBOX_TOKEN=credentials["token"],
        PROXBOX_BACKEND_API_TOKEN=secrets["backend_api_token"],
        PROXBOX_BACKEND_REDIS_URL=tasks_redis_url(os.environ),
    )
    port = os.environ.get(BACKEND_PORT_ENV, "8800")
    host = os.environ.get("PROXBOX_BACKEND_HOST", "0.0.0.0")
    argv = backend_serve_argv(host, port)
    os.execve(argv[0], argv, env)
    return 1  # not reached


def _demo_token(data_dir: Path) -> dict[str, str]:
    """The simulator API token of the demo endpoint: created once in the simulator's
    database (PROXMOX_SIMULATOR_DATABASE_URL), kept in the data dir (0600)."""
    from proxmox_simulator.cli import create_token
    from proxmox_simulator.config import Settings

    from .demo import SIMULATOR_TOKEN_ID

    path = data_dir / DEMO_TOKEN_FILE
    if path.exists():
        return json.loads(path.read_text("utf-8"))
    created = asyncio.run(
        create_token(Settings.from_env(), SIMULATOR_TOKEN_ID, False, "proxbox compose demo")
    )
    token = {"token_id": SIMULATOR_TOKEN_ID, "token_secret": created["value"]}
    write_private_file(path, json.dumps(token, indent=2) + "\n")
    return token


def _wait_for(url: str, timeout: float = READY_TIMEOUT) -> None:
    try:
        wait_until(lambda: answers(url), timeout, url, interval=1)
    except WaitTimeout:
        raise StackError(f"{url} did not answer within {timeout:.0f}s") from None


def demo(data_dir: Path) -> int:
    """Register the demo endpoint (the simulator service) and sync it once through
    NetBox's "Sync now", as `proxbox up` does; print the URLs."""
    from .demo import demo_urls, link_demo_endpoint

    netbox = _require(NETBOX_URL_ENV).rstrip("/")
    api = f"{netbox}/api"
    admin = load_credentials(data_dir)
    if admin is None:
        raise StackError("the admin credentials are missing: the setup job has not run")
    _wait_for(f"{api}/status/")
    token = _demo_token(data_dir)
    endpoint, job = link_demo_endpoint(
        netbox,
        admin["token"],
        host=_require(SIMULATOR_HOST_ENV),
        port=int(os.environ.get(SIMULATOR_PORT_ENV, "8006")),
        token_id=token["token_id"],
        token_secret=token["token_secret"],
        # The simulator's self-signed certificate names its container's hostname, not
        # the compose service name; the compose network is private to the stack.
        verify_tls=False,
    )
    if job is not None and job["status"]["value"] != "completed":
        raise StackError(f"the first sync failed: {job.get('error') or job['status']['value']}")
    for name, url in demo_urls(os.environ.get("PROXBOX_PUBLIC_URL", netbox), endpoint).items():
        print(f"{name:<14} {url}", flush=True)
    return 0


def answers(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


def rq_worker_registered() -> bool:
    """True while an RQ worker of this host is registered in NetBox's tasks Redis."""
    import redis

    from .netbox_settings import redis_section
    from .redis_databases import from_env as redis_databases_from_env
    from .state import REDIS_URL_ENV

    url = redis_section(_require(REDIS_URL_ENV), redis_databases_from_env().tasks)["URL"]
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        hostname = socket.gethostname().encode()
        for key in client.smembers("rq:workers"):
            if client.hget(key, "hostname") == hostname:
                return True
        return False
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else ""
    try:
        if command == "backend":
            return backend(default_data_dir())
        if command == "demo":
            return demo(default_data_dir())
        if command == "health" and len(args) == 2:
            return 0 if answers(args[1]) else 1
        if command == "health-rq":
            return 0 if rq_worker_registered() else 1
    except StackError as exc:
        print(f"proxbox compose {command}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    print(
        "usage: python -m proxbox_devstack.compose backend | demo | health URL | health-rq",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
