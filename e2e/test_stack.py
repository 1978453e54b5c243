"""`proxbox up` end to end: NetBox answers with both plugins, tokens work, the UI is
styled, the worker runs, and stopping leaves no process behind.

The shared stack goes on to test_stack_sync.py, whose last test stops it (`proxbox
down` stopping every process is checked there)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from proxbox_processes import free_port, wait_until
from stack_support import drop_database, processes_using

PLUGINS = {"netbox_proxbox", "netbox_script_projects"}


def test_up_prints_urls_and_where_the_credentials_are(stack):
    """Captured output is no terminal: it names the credentials file, never the secrets
    (a terminal is shown them once, see proxbox_devstack.stack.describe)."""
    assert f"NetBox:     {stack.url}/" in stack.up_output
    assert f"credentials: {stack.home / 'credentials.json'} (mode 0600)" in stack.up_output
    assert stack.credentials["token"] not in stack.up_output
    assert stack.credentials["password"] not in stack.up_output
    assert (stack.home / "credentials.json").stat().st_mode & 0o777 == 0o600


def test_up_d_shows_the_progress_of_every_long_step(stack):
    """`up -d` draws the detached run's steps from its log (plain lines when captured)."""
    for step in (
        "starting PostgreSQL and Redis",
        "preparing netbox",
        "cloning the NetBox database",
        "starting netbox",
        "preparing simulator",
        "starting backend",
        "first sync of the demo endpoint",
    ):
        assert re.search(rf"^{re.escape(step)}: done in [\d.]+ s$", stack.up_output, re.M), (
            stack.up_output
        )


def test_up_keeps_the_template_dump_for_the_next_empty_data_dir(stack):
    """The stack's cache was empty: `up` wrote the dump a new data dir restores from."""
    dumps = list(Path(stack.env["PROXBOX_TEMPLATE_CACHE"]).glob("netbox*.dump"))
    assert len(dumps) == 1, dumps
    assert dumps[0].stat().st_size > 100_000


def test_status_lists_both_plugins(stack):
    with stack.client() as client:
        status = client.get("/api/status/")
    assert status.status_code == 200
    assert set(status.json()["plugins"]) >= PLUGINS


def test_token_authenticates_api_requests(stack):
    with stack.client() as client:
        response = client.get("/api/users/users/", params={"username": "admin"})
    assert response.status_code == 200
    assert response.json()["results"][0]["username"] == "admin"
    with stack.client(authenticated=False) as anonymous:
        assert anonymous.get("/api/users/users/").status_code == 403
    with httpx.Client(base_url=stack.url) as client:
        forged = client.get(
            "/api/users/users/", headers={"Authorization": "Bearer nbt_abcdefghijkl.wrong"}
        )
    assert forged.status_code == 403


def test_plugin_api_roots_are_served(stack):
    with stack.client() as client:
        plugins = client.get("/api/plugins/")
    assert plugins.status_code == 200
    assert {"proxbox", "script-projects"} <= set(plugins.json())


def test_ui_is_styled(stack):
    with httpx.Client(base_url=stack.url) as client:
        login = client.get("/login/")
        css = client.get("/static/netbox.css")
    assert login.status_code == 200
    assert "/static/netbox.css" in login.text
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")


def test_netbox_and_sync_rq_workers_run(stack):
    def workers_running() -> bool:
        with stack.client() as client:
            return client.get("/api/status/").json()["rq-workers-running"] >= 2

    wait_until(workers_running, 60, "NetBox's and the sync RQ worker to run", interval=0.5)


def test_status_command_reports_every_process(stack):
    result = stack.proxbox("status")
    assert result.returncode == 0, result.stdout
    for name in ("proxbox up", "netbox", "rqworkers", "simulator", "backend"):
        assert name in result.stdout
    report = json.loads(stack.proxbox("status", "--json").stdout)
    assert report["running"] is True and report["supervisor"]["pid"] > 0
    assert {"netbox", "rqworkers", "simulator", "backend"} <= {
        name for name, process in report["processes"].items() if process["running"]
    }
    assert report["urls"]["netbox"] == f"{stack.url}/"


def test_second_up_on_the_same_home_is_refused(stack):
    result = stack.proxbox("up", "--port", "1")
    assert result.returncode != 0
    assert "already running" in result.stderr


def test_foreground_up_stops_every_child_on_sigterm(tmp_path, services_env):
    """The foreground supervisor: SIGTERM (like Ctrl-C) takes its children down with it.
    `--no-demo` starts NetBox and its workers only: no simulator, backend or first sync."""
    home = tmp_path / "foreground"
    port = free_port()
    env = dict(
        os.environ,
        PROXBOX_HOME=str(home),
        PROXBOX_NETBOX_DATABASE=f"devstack_e2e_{os.getpid()}_foreground",
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "proxbox_devstack.cli", "up", "--no-demo", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in up.stdout:
            lines.append(line)
            if "press Ctrl-C to stop" in line:
                break
        assert any(f"http://127.0.0.1:{port}/" in line for line in lines), "".join(lines)
        assert not any("first sync" in line for line in lines), "".join(lines)
        children = [proc for proc in processes_using(home) if proc.pid != up.pid]
        programs = {
            word
            for proc in children
            for word in ("gunicorn", "rq_workers", "proxmox_simulator", "proxbox_backend")
            if word in " ".join(proc.cmdline())
        }
        assert programs == {"gunicorn", "rq_workers"}, programs
        up.send_signal(signal.SIGTERM)
        assert up.wait(120) == 0
        wait_until(
            lambda: processes_using(home) == [], 10, "the stack's processes to exit", interval=0.5
        )
    finally:
        if up.poll() is None:
            up.kill()
        drop_database(env, env["PROXBOX_NETBOX_DATABASE"])
        drop_database(env, env["PROXBOX_NETBOX_DATABASE"] + "_simulator")
