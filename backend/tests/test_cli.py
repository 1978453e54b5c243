"""The CLI's summary rendering and its configuration errors."""

import pytest
from rich.console import Console

from proxbox_backend import cli
from proxbox_backend.service import RunReport


def test_summary_lists_counters_failures_and_the_claim():
    report = RunReport(endpoint={"id": 1, "name": "pve-lab"})
    report.cluster = {
        "id": 4,
        "name": "lab",
        "mode": "cluster",
        "claim_status": 200,
        "created": False,
        "changed": True,
    }
    report.tally.add("virtualization.virtualmachine", "created", 3)
    report.tally.add("virtualization.virtualmachine", "unchanged", 7)
    report.tally.fail("ipam.ipaddress", "10.0.0.5/24 on web net0", "HTTP 400: duplicate")
    console = Console(record=True, width=140)
    cli.render_summary(report, console)
    text = console.export_text()
    assert "claim HTTP 200, created=false, changed=true" in text
    assert "virtualization.virtualmachine" in text and "ipam.ipaddress" in text
    assert "failed ipam.ipaddress 10.0.0.5/24 on web net0: HTTP 400: duplicate" in text


def test_missing_netbox_settings_exit_2(monkeypatch, capsys):
    for var in ("PROXBOX_NETBOX_URL", "PROXBOX_NETBOX_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["run", "--endpoint", "1"]) == cli.EXIT_USAGE
    assert "PROXBOX_NETBOX_URL" in capsys.readouterr().err


def test_bad_policy_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("PROXBOX_NETBOX_URL", "http://netbox.test")
    monkeypatch.setenv("PROXBOX_NETBOX_TOKEN", "x" * 40)
    monkeypatch.setenv("PROXBOX_DISAPPEARED_GUESTS", "vanish")
    assert cli.main(["run", "--endpoint", "1"]) == cli.EXIT_USAGE
    assert "offline, delete, keep" in capsys.readouterr().err


def test_bad_template_policy_is_refused_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PROXBOX_NETBOX_URL", "http://netbox.test")
    monkeypatch.setenv("PROXBOX_NETBOX_TOKEN", "x" * 40)
    monkeypatch.setenv("PROXBOX_TEMPLATES", "maybe")
    assert cli.main(["run", "--endpoint", "1"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "PROXBOX_TEMPLATES must be one of skip, sync, not 'maybe'" in err
    assert len(err.strip().splitlines()) == 1


def _cli(*args: str, **env: str):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


def test_version_and_exit_codes_as_a_user_sees_them():
    from importlib import metadata

    from proxbox_backend import __version__

    version = _cli("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"proxbox-sync {__version__}")
    assert __version__ == metadata.version("proxbox-backend")
    text = _cli("--help").stdout
    assert "exit codes:" in text and "  2  usage or configuration error" in text


def test_a_bad_environment_value_is_one_line_naming_the_variable():
    result = _cli(
        "serve",
        PROXBOX_NETBOX_URL="http://netbox.test",
        PROXBOX_NETBOX_TOKEN="x" * 40,
        PROXBOX_DISAPPEARED_GUESTS="vanish",
    )
    assert result.returncode == cli.EXIT_USAGE
    assert result.stderr.strip() == (
        "proxbox-sync: PROXBOX_DISAPPEARED_GUESTS must be one of offline, delete, keep, "
        "not 'vanish'"
    )


def test_the_proxmox_concurrency_comes_from_the_environment_and_is_bounded():
    from proxbox_backend.config import Settings

    base = {"PROXBOX_NETBOX_URL": "http://netbox.test", "PROXBOX_NETBOX_TOKEN": "x" * 40}
    result = _cli("serve", **base, PROXBOX_PROXMOX_CONCURRENCY="0")
    assert result.returncode == cli.EXIT_USAGE
    assert result.stderr.strip() == (
        "proxbox-sync: PROXBOX_PROXMOX_CONCURRENCY='0': input should be greater than 0"
    )
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**base, "PROXBOX_PROXMOX_CONCURRENCY": "24"}.items():
            env.setenv(name, value)
        assert Settings.from_env().proxmox_concurrency == 24
    assert Settings(netbox_url="http://netbox.test", netbox_token="t").proxmox_concurrency == 64


@pytest.fixture
def netbox_without_endpoints():
    """A NetBox that answers every request at once: 404."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"detail": "Not found."}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_closed_pipe_ends_the_command_quietly(netbox_without_endpoints):
    """`proxbox-sync run --json | head -1` once head has exited: the reader of the pipe is
    gone before the report is written."""
    import os
    import sys

    from proxbox_processes import run_into_closed_pipe

    from proxbox_redaction import EXIT_BROKEN_PIPE

    result = run_into_closed_pipe(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", "3", "--json"],
        env={
            **os.environ,
            "PROXBOX_NETBOX_URL": netbox_without_endpoints,
            "PROXBOX_NETBOX_TOKEN": "x" * 40,
        },
    )
    assert (result.returncode, result.stderr) == (EXIT_BROKEN_PIPE, "")


def test_ctrl_c_stops_serve_with_one_line_and_exit_130(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from proxbox_processes import free_port, interruptible, stop_process, wait_for_http

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "proxbox_backend.cli", "serve", "--port", str(port)],
        env={
            **os.environ,
            "PROXBOX_NETBOX_URL": "http://127.0.0.1:9",
            "PROXBOX_NETBOX_TOKEN": "x" * 40,
            "PROXBOX_BACKEND_API_TOKEN": "ctrl-c-token-0123456789",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/health", process, timeout=60)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        stop_process(process)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.rstrip().splitlines()[-1] == "proxbox-sync: interrupted"
    assert stderr.count("proxbox-sync: interrupted") == 1


def test_the_http_timeout_comes_from_the_environment_and_bounds_each_request():
    """PROXBOX_HTTP_TIMEOUT: a NetBox slower than it fails the run naming the timeout; a
    value out of range is refused naming the variable."""
    import http.server
    import threading
    import time

    class SlowHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(3)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = {
        "PROXBOX_NETBOX_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "PROXBOX_NETBOX_TOKEN": "x" * 40,
    }
    try:
        refused = _cli("run", "--endpoint", "3", **base, PROXBOX_HTTP_TIMEOUT="0")
        assert refused.returncode == cli.EXIT_USAGE
        assert refused.stderr.strip() == (
            "proxbox-sync: PROXBOX_HTTP_TIMEOUT='0': input should be greater than 0"
        )
        started = time.monotonic()
        slow = _cli("run", "--endpoint", "3", "--json", **base, PROXBOX_HTTP_TIMEOUT="0.3")
        assert slow.returncode != 0
        assert "ReadTimeout" in slow.stdout + slow.stderr, (slow.stdout, slow.stderr)
        # Every attempt gave up after 0.3 s, not after the 3 s NetBox took.
        assert time.monotonic() - started < 30
    finally:
        server.shutdown()
        server.server_close()


def test_permissions_prints_what_the_operator_guide_shows_and_needs_no_netbox():
    import json
    from pathlib import Path

    from proxbox_backend.permissions import required_permissions

    table = _cli("permissions", PROXBOX_NETBOX_URL="", PROXBOX_NETBOX_TOKEN="")
    assert table.returncode == 0, table.stderr
    guide = Path(__file__).resolve().parents[2] / "docs" / "operator-guide.md"
    assert table.stdout in guide.read_text(), "the guide's table differs: paste the output"
    as_json = _cli("permissions", "--json")
    assert json.loads(as_json.stdout) == {t: list(a) for t, a in required_permissions().items()}
    rows = table.stdout.splitlines()[2:]
    listed = {t.strip(" `") for row in rows for t in row.split(" | ")[0].strip("| ").split(",")}
    assert listed == set(required_permissions())  # every type once, in one row
