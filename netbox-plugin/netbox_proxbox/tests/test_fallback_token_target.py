"""A user who may only *add* endpoints cannot collect the backend's own Proxmox token.

They create, over REST, an endpoint without a secret that points at a listener of theirs.
The backend (`proxbox-sync run`, as the wired backend user with `reveal_credentials`) gets
no secret from the credentials API for it; its `PROXBOX_PROXMOX_TOKEN` fallback must never
go to that host. It goes only to `PROXBOX_PROXMOX_URL`, the target the operator fixed.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

import httpx
import pytest
from users.models import Token, User

from netbox_proxbox.models import ProxmoxEndpoint

from .base import TOKEN_PREFIX, grant

FALLBACK_SECRET = "fallback-0b7c5e2e-6f4d-4d8a-9a51-operator"
FALLBACK_TOKEN_ID = "operator@pve!fallback"


class Listener:
    """A loopback TCP listener that records every connection and the first bytes sent."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def close(self):
        self.server.close()


class OperatorProxmox(http.server.ThreadingHTTPServer):
    """The operator's Proxmox stand-in at PROXBOX_PROXMOX_URL: records the Authorization
    header and refuses it (the run then fails, which is all this test needs)."""

    def __init__(self):
        self.authorizations: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.authorizations.append(self.headers.get("Authorization", ""))
                body = b'{"data": null}'
                self.send_response(401, "authentication failure")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.shutdown()
        self.server_close()


@pytest.fixture
def attacker_listener():
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def operator_proxmox():
    server = OperatorProxmox()
    yield server
    server.close()


def bearer_of(token: Token) -> str:
    return f"Bearer {TOKEN_PREFIX}{token.key}.{token.token}"


def create_as_add_only_user(live_netbox, inventory, port: int) -> ProxmoxEndpoint:
    adder = User.objects.create_user(username=f"adder-{inventory.tag}")
    inventory.users.append(adder)
    grant(adder, "netbox_proxbox.add_proxmoxendpoint")
    token = Token.objects.create(user=adder, write_enabled=True)
    response = httpx.post(
        f"{live_netbox}/api/plugins/proxbox/endpoints/proxmox/",
        json={
            "name": f"pve-adder-{inventory.tag}",
            "host": "127.0.0.1",
            "port": port,
            "verify_tls": False,
            "token_id": "adder@pve!mine",
        },
        headers={"Authorization": bearer_of(token)},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    endpoint = ProxmoxEndpoint.objects.get(pk=response.json()["id"])
    assert not endpoint.has_token_secret
    inventory.endpoints.append(endpoint)
    return endpoint


def run_backend(live_netbox, inventory, endpoint, **proxmox_env):
    backend = User.objects.create_user(username=f"backend-{inventory.tag}", is_superuser=True)
    inventory.users.append(backend)
    grant(backend, "netbox_proxbox.view_proxmoxendpoint", actions=["view", "reveal_credentials"])
    token = Token.objects.create(user=backend, write_enabled=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXBOX_PROXMOX_")}
    env |= {
        "PROXBOX_NETBOX_URL": live_netbox,
        "PROXBOX_NETBOX_TOKEN": f"{TOKEN_PREFIX}{token.key}.{token.token}",
        "PROXBOX_PROXMOX_TOKEN_ID": FALLBACK_TOKEN_ID,
        "PROXBOX_PROXMOX_TOKEN": FALLBACK_SECRET,
        **proxmox_env,
    }
    run = subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", str(endpoint.pk)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return run, " ".join((run.stdout + run.stderr).split())


def test_the_fallback_token_never_goes_to_a_host_an_add_only_user_chose(
    live_netbox, committed_inventory, django_db_blocker, attacker_listener
):
    with django_db_blocker.unblock():
        endpoint = create_as_add_only_user(live_netbox, committed_inventory, attacker_listener.port)
        run, output = run_backend(live_netbox, committed_inventory, endpoint)
    assert run.returncode != 0, output
    assert attacker_listener.received == []  # not even a TLS handshake
    assert f"no Proxmox credentials for endpoint 'pve-adder-{committed_inventory.tag}'" in output
    assert "sent only to PROXBOX_PROXMOX_URL, which is unset" in output, output
    assert FALLBACK_SECRET not in output


def test_the_fallback_token_goes_only_to_the_target_the_operator_fixed(
    live_netbox, committed_inventory, django_db_blocker, attacker_listener, operator_proxmox
):
    with django_db_blocker.unblock():
        endpoint = create_as_add_only_user(live_netbox, committed_inventory, attacker_listener.port)
        run, output = run_backend(
            live_netbox,
            committed_inventory,
            endpoint,
            PROXBOX_PROXMOX_URL=f"http://127.0.0.1:{operator_proxmox.server_port}",
        )
    assert run.returncode != 0, output  # the stand-in refuses every request
    assert attacker_listener.received == []
    assert operator_proxmox.authorizations, output
    assert set(operator_proxmox.authorizations) == {
        f"PVEAPIToken={FALLBACK_TOKEN_ID}={FALLBACK_SECRET}"
    }
