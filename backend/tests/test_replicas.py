"""Two `proxbox-sync serve` processes sharing one Redis: any replica answers for any run,
and the per-endpoint lease spans processes (a second `serve` or `run` is refused until the
first run ends or its process dies and the lease expires).

The NetBox the replicas talk to holds its answer to the endpoint lookup until the test
releases it, so a run stays running for exactly as long as a test needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from proxbox_processes import free_port, stop_process, wait_until

TOKEN = "replica-test-api-token-0123456789abcdef"
ENDPOINT = 7
LEASE_TTL = 2.0
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class JSONHandler(BaseHTTPRequestHandler):
    def answer(self, status, document):
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class HeldNetBox:
    """NetBox that has the endpoint when asked before a run starts (a filtered list), and
    whose endpoint lookups by a run wait for `release()`, then answer 404."""

    def __init__(self):
        self.released = threading.Event()
        self.lookups = 0
        held = self

        class Handler(JSONHandler):
            def do_GET(self):
                if f"id={ENDPOINT}&" in self.path:
                    page = {"count": 1, "next": None, "results": [{"id": ENDPOINT}]}
                    return self.answer(200, page)
                held.lookups += 1
                held.released.wait(60)
                self.answer(404, {"detail": "Not found."})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self):
        self.released.set()

    def close(self):
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def netbox() -> Iterator[HeldNetBox]:
    held = HeldNetBox()
    try:
        yield held
    finally:
        held.close()


def backend_env(netbox: HeldNetBox, redis_url: str) -> dict[str, str]:
    return dict(
        os.environ,
        PROXBOX_NETBOX_URL=netbox.url,
        PROXBOX_NETBOX_TOKEN="n" * 40,
        PROXBOX_BACKEND_API_TOKEN=TOKEN,
        PROXBOX_BACKEND_REDIS_URL=redis_url,
        PROXBOX_BACKEND_LEASE_TTL=str(LEASE_TTL),
        # These replicas only serve runs (the watch has its own test below).
        PROXBOX_WATCH="off",
    )


@contextlib.contextmanager
def replica(env: dict[str, str], log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    argv = [sys.executable, "-m", "proxbox_backend.cli", "serve", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        return False

    try:
        wait_until(answers, 30, f"the backend on {port} to start")
        yield url, process
    finally:
        stop_process(process, timeout=10)


@pytest.fixture
def replicas(netbox, redis_url, tmp_path):
    env = backend_env(netbox, redis_url)
    with replica(env, tmp_path / "a.log") as a, replica(env, tmp_path / "b.log") as b:
        yield a, b


def events(url: str, run_id: str) -> list[dict]:
    with httpx.stream("GET", f"{url}/runs/{run_id}/events", headers=AUTH, timeout=30) as sse:
        assert sse.status_code == 200
        lines = [line for line in sse.iter_lines() if line.startswith("data: ")]
    return [json.loads(line.removeprefix("data: ")) for line in lines]


def start(url: str) -> httpx.Response:
    return httpx.post(f"{url}/sync/{ENDPOINT}", headers=AUTH, timeout=10)


def test_a_run_started_on_one_replica_is_read_and_followed_on_the_other(replicas, netbox):
    (a, _), (b, _) = replicas
    started = start(a)
    assert started.status_code == 202
    run_id = started.json()["run_id"]
    wait_until(lambda: netbox.lookups, 10, "the run to ask NetBox for its endpoint")

    running = httpx.get(f"{b}/runs/{run_id}", headers=AUTH, timeout=10)
    assert running.status_code == 200
    assert running.json()["state"] == "running" and running.json()["endpoint"] == str(ENDPOINT)

    netbox.release()
    from_b, from_a = events(b, run_id), events(a, run_id)
    assert from_b == from_a
    assert [e["event"] for e in from_b] == ["started", "finished"]
    assert from_b[-1]["report"]["error"] == f"no Proxmox endpoint with id {ENDPOINT}"
    finished = httpx.get(f"{b}/runs/{run_id}", headers=AUTH, timeout=10).json()
    assert finished["state"] == "finished" and finished["events"] == 2
    assert finished["report"] == from_a[-1]["report"]


def test_a_second_run_of_the_endpoint_is_refused_on_the_other_replica(replicas, netbox):
    (a, _), (b, _) = replicas
    run_id = start(a).json()["run_id"]
    time.sleep(LEASE_TTL * 1.5)  # past one TTL: the live run renews its lease

    refused = start(b)
    assert refused.status_code == 409
    assert refused.json()["detail"]["run_id"] == run_id

    netbox.release()
    events(b, run_id)
    wait_until(lambda: start(b).status_code == 202, 10, "the finished run to release the lease")


def test_a_cli_run_of_the_endpoint_is_refused_while_a_replica_runs_it(replicas, netbox, redis_url):
    (a, _), _ = replicas
    run_id = start(a).json()["run_id"]
    argv = [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", str(ENDPOINT)]
    cli = subprocess.run(
        argv, env=backend_env(netbox, redis_url), capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 3
    assert cli.stderr.strip().splitlines() == [
        f"proxbox-sync: endpoint {ENDPOINT} is already being synced by run {run_id} "
        "(another `run` or a `serve` replica); try again when it finishes"
    ]


def test_a_replica_refuses_the_endpoint_while_a_cli_run_syncs_it_and_shows_that_run(
    replicas, netbox, redis_url
):
    (a, _), _ = replicas
    argv = [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", str(ENDPOINT)]
    cli = subprocess.Popen(
        argv, env=backend_env(netbox, redis_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: netbox.lookups, 30, "the CLI run to ask NetBox")
        refused = start(a)
        assert refused.status_code == 409
        cli_run = refused.json()["detail"]["run_id"]
        shown = httpx.get(f"{a}/runs/{cli_run}", headers=AUTH, timeout=10).json()
        assert shown["state"] == "running" and shown["endpoint"] == str(ENDPOINT)
        netbox.release()
        assert cli.wait(60) == 1  # the run failed: NetBox has no such endpoint
        assert [e["event"] for e in events(a, cli_run)] == ["started", "finished"]
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)


def test_a_killed_replicas_lease_expires_and_its_run_ends_failed(replicas, netbox):
    (a, process_a), (b, _) = replicas
    run_id = start(a).json()["run_id"]
    wait_until(lambda: netbox.lookups, 10, "the run to ask NetBox for its endpoint")
    process_a.send_signal(signal.SIGKILL)
    process_a.wait(10)

    assert start(b).status_code == 409  # the lease outlives the process for its TTL
    accepted = wait_until(
        lambda: (answer := start(b)).status_code == 202 and answer,
        LEASE_TTL * 3,
        "the lease to expire",
    )
    assert accepted.json()["run_id"] != run_id

    orphan = httpx.get(f"{b}/runs/{run_id}", headers=AUTH, timeout=10).json()
    assert orphan["state"] == "finished"
    assert orphan["report"]["ok"] is False and "stopped" in orphan["report"]["error"]
    assert [e["event"] for e in events(b, run_id)] == ["started", "finished"]


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["run", "--endpoint", "7"]])
def test_an_unreachable_redis_is_one_line_and_exit_2(netbox, command):
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    argv = [sys.executable, "-m", "proxbox_backend.cli", *command]
    cli = subprocess.run(
        argv, env=backend_env(netbox, nobody), capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 2
    [line] = cli.stderr.strip().splitlines()
    assert line.startswith(f"proxbox-sync: PROXBOX_BACKEND_REDIS_URL={nobody} does not answer")


def test_a_replica_whose_redis_stops_answers_503(netbox, redis_url, tmp_path):
    import redis

    with replica(backend_env(netbox, redis_url), tmp_path / "a.log") as (a, _):
        redis.Redis.from_url(redis_url).shutdown(nosave=True)
        refused = start(a)
        assert refused.status_code == 503
        assert "PROXBOX_BACKEND_REDIS_URL" in refused.json()["detail"]


# ---------------------------------------------------------------- the live-sync watch

WATCH_LEASE = 3.0


def json_server(answer) -> tuple[ThreadingHTTPServer, str]:
    """A local HTTP server whose every request is answered by `answer(method, path,
    headers)` → (status, document)."""

    class Handler(JSONHandler):
        def reply(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.answer(*answer(self.command, self.path, self.headers))

        do_GET = do_POST = do_PATCH = reply

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def watched():
    """NetBox with endpoint 7 watched every second (no credentials API: each replica
    uses its own fallback token), and a Proxmox that records whose token polls it."""
    polls: list[tuple[float, str]] = []
    endpoint = {
        "id": ENDPOINT, "name": "pve-watched", "host": "127.0.0.1", "port": 8006,
        "verify_tls": False, "enabled": True, "mode": "cluster",
        "token_id": "root@pam!watch", "watch_interval": 1,
    }  # fmt: skip

    def netbox(method, path, headers):
        if path.startswith("/api/plugins/proxbox/endpoints/proxmox/?"):
            return 200, {"count": 1, "next": None, "results": [endpoint]}
        if path == f"/api/plugins/proxbox/endpoints/proxmox/{ENDPOINT}/":
            return 200, endpoint
        if method == "POST" and path.endswith("/live-runs/"):
            return 201, {"id": 1}
        return 404, {"detail": "Not found."}

    def proxmox(method, path, headers):
        if path.startswith(("/api2/json/cluster/resources", "/api2/json/cluster/tasks")):
            token = headers.get("Authorization", "").rpartition("=")[2]
            polls.append((time.monotonic(), token))
            return 200, {"data": []}
        return 404, {"data": None}

    servers = [json_server(netbox), json_server(proxmox)]
    try:
        yield servers[0][1], servers[1][1], polls
    finally:
        for server, _ in servers:
            server.shutdown()
            server.server_close()


def test_killing_the_replica_that_watches_moves_the_watch_within_one_lease_period(
    watched, redis_url, tmp_path
):
    import redis

    netbox_url, proxmox_url, polls = watched
    secrets = {name: f"{name}-token-secret-0123456789abcdef" for name in ("a", "b")}

    def env(name):
        return dict(
            os.environ,
            PROXBOX_NETBOX_URL=netbox_url,
            PROXBOX_NETBOX_TOKEN="n" * 40,
            PROXBOX_BACKEND_API_TOKEN=TOKEN,
            PROXBOX_BACKEND_REDIS_URL=redis_url,
            PROXBOX_PROXMOX_URL=proxmox_url,
            PROXBOX_PROXMOX_TOKEN=secrets[name],
            PROXBOX_WATCH_LEASE=str(WATCH_LEASE),
            PROXBOX_WATCH_REFRESH="0.5",
        )

    lease = redis.Redis.from_url(redis_url, decode_responses=True)
    key = f"proxbox-backend:watch:{ENDPOINT}"
    with (
        replica(env("a"), tmp_path / "a.log") as (_, process_a),
        replica(env("b"), tmp_path / "b.log") as (_, process_b),
    ):
        by_pid = {process_a.pid: ("a", process_a), process_b.pid: ("b", process_b)}
        holder = wait_until(lambda: lease.get(key), 30, "a replica to take the watch")
        name, process = by_pid[int(holder.split(":")[1])]
        other = "b" if name == "a" else "a"
        wait_until(lambda: len(polls) >= 6, 30, "the watcher to poll Proxmox")
        time.sleep(WATCH_LEASE)  # the standby keeps trying meanwhile
        assert {token for _, token in polls} == {secrets[name]}, "only the holder polls"

        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed = time.monotonic()
        new_holder = wait_until(
            lambda: (value := lease.get(key)) and value != holder and value,
            WATCH_LEASE * 3,
            "the other replica to take the watch over",
        )
        taken_over = time.monotonic() - killed
        assert by_pid[int(new_holder.split(":")[1])][0] == other
        # Within one lease period (and the test's own polling of Redis, 0.1 s).
        assert taken_over <= WATCH_LEASE + 0.3, taken_over
        wait_until(
            lambda: any(t > killed and token == secrets[other] for t, token in polls),
            WATCH_LEASE * 2,
            "the new holder to poll Proxmox",
        )
