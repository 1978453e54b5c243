"""The systemd units the operator guide ships (docs/operations/systemd/): systemd's own
`systemd-analyze verify` accepts each, with the install paths pointed at this machine's
executables; the backend's unit, run as systemd would run it (its ExecStart, its
EnvironmentFile's variables), serves /health and stops cleanly on systemd's SIGTERM; the
sync worker's serves the plugin's sync queue."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from configparser import ConfigParser
from pathlib import Path

import httpx
import pytest
from proxbox_processes import free_port, wait_until

from netbox_proxbox.constants import DEFAULT_SYNC_QUEUE

UNITS = Path(__file__).resolve().parents[3] / "docs" / "operations" / "systemd"
BACKEND_UNIT = UNITS / "proxbox-backend.service"
WORKER_UNIT = UNITS / "netbox-rq-proxbox-sync@.service"
# Where the guide installs things → this machine's equivalents.
INSTALL_PATHS = {
    "/opt/proxbox/venv/bin/": f"{Path(sys.executable).parent}/",
    "/opt/netbox/venv/bin/python3": sys.executable,
    "/etc/proxbox/backend.env": str(UNITS / "backend.env"),
}


def unit(path: Path) -> ConfigParser:
    parser = ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def localized(path: Path, folder: Path) -> Path:
    text = path.read_text()
    for installed, here in INSTALL_PATHS.items():
        text = text.replace(installed, here)
    copy = folder / path.name
    copy.write_text(text)
    return copy


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing (Debian's systemd package)")
        pytest.skip("needs systemd-analyze (Debian's systemd package)")
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in UNITS.glob("*.service")))
def test_systemd_accepts_each_unit(name, tmp_path):
    verify = subprocess.run(
        [systemd_analyze(), "verify", str(localized(UNITS / name, tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr.strip() == "", verify.stderr  # no warning either


def test_the_sync_worker_unit_serves_the_plugins_sync_queue_only():
    argv = shlex.split(unit(WORKER_UNIT)["Service"]["ExecStart"])
    assert argv[-2:] == ["rqworker", DEFAULT_SYNC_QUEUE]


def test_the_backend_unit_serves_health_and_stops_on_systemds_sigterm(tmp_path):
    service = unit(localized(BACKEND_UNIT, tmp_path))["Service"]
    argv = shlex.split(service["ExecStart"])
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    example = dict(
        line.split("=", 1)
        for line in (UNITS / "backend.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(example) >= {
        "PROXBOX_NETBOX_URL",
        "PROXBOX_NETBOX_TOKEN",
        "PROXBOX_BACKEND_API_TOKEN",
    }
    env = {
        "PATH": os.environ["PATH"],
        **example,
        # This machine's instead of the example's: NetBox is not asked before a run.
        "PROXBOX_NETBOX_URL": f"http://127.0.0.1:{free_port()}",
        "PROXBOX_NETBOX_TOKEN": "nbt_unitunitunit.secret",
        "PROXBOX_WATCH": "off",
    }
    env.pop("PROXBOX_BACKEND_REDIS_URL")  # runs in process memory: none is started here
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: _health(port) == 200 or process.poll() is not None, timeout=60, interval=0.2
        )
        assert process.poll() is None, process.stdout.read().decode()
        process.send_signal(signal.SIGTERM)  # systemd's default KillSignal
        code = process.wait(timeout=int(service["TimeoutStopSec"]))
        output = process.stdout.read().decode()
        # uvicorn shuts down, then ends by the signal it caught: systemd counts an exit by
        # SIGTERM as clean (SuccessExitStatus's default), as it does 0.
        assert code in (0, -signal.SIGTERM), output
        assert "Application shutdown complete" in output, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _health(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code
    except httpx.TransportError:
        return None
