"""`proxbox-sync run` in a process of its own, against a NetBox that fails and echoes the
credentials it was sent: retries and a failed run are reported, the secrets are not."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

NETBOX_TOKEN = "f00dfeed" * 5
PROXMOX_SECRET = "5d7c9a1e-aaaa-bbbb-cccc-444455556666"


@pytest.fixture(scope="module")
def echoing_netbox():
    """Two 503s (retried), then 400s whose body quotes the request's Authorization."""
    answered = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answered.append(self.path)
            status = 503 if len(answered) <= 2 else 400
            detail = (
                f"rejected Authorization: {self.headers.get('Authorization')} ({PROXMOX_SECRET})"
            )
            body = json.dumps({"detail": detail}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status == 503:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answered
    server.shutdown()


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["summary", "json"])
def test_failed_run_with_retries_prints_no_secret(echoing_netbox, output):
    url, answered = echoing_netbox
    answered.clear()
    result = subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", "pve-lab", *output],
        env={
            "PATH": "/usr/bin:/bin",
            "PROXBOX_NETBOX_URL": url,
            "PROXBOX_NETBOX_TOKEN": NETBOX_TOKEN,
            "PROXBOX_PROXMOX_TOKEN": PROXMOX_SECRET,
            "PROXBOX_BACKEND_API_TOKEN": "unused-here",
            "COLUMNS": "200",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(answered) == 3  # two retried 503s, then the 400
    assert result.stderr.count("answered 503; retry in") == 2, result.stderr
    assert "rejected Authorization: ***" in result.stdout, result.stdout
    for secret in (NETBOX_TOKEN, PROXMOX_SECRET):
        assert secret not in result.stdout and secret not in result.stderr
