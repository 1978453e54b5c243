"""Helpers shared by the simulator tests (plain functions, no fixtures).

Kept out of conftest.py because the workspace has its own root conftest and
``from conftest import ...`` would be ambiguous.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import asyncpg
import httpx

from proxbox_devstack import scratch_tablespace
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.contracts.returns import returns_errors

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_URL = os.environ.get("PROXBOX_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT_PASSWORD = "test-root-password"


def apidoc_dir() -> Path:
    override = os.environ.get("PROXMOX_SIMULATOR_APIDOC_DIR")
    return Path(override) if override else (REPO_ROOT / ".." / "shared" / "pve-apidoc").resolve()


def official_apidoc(version: str) -> Path:
    """The official viewer schema of ``version``; in CI its absence is a failure, not a skip."""
    import pytest

    path = apidoc_dir() / f"pve-{version}-apidoc.js"
    if not path.exists():
        message = f"official viewer schema not available at {path}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: the apidoc-dependent tests must run)")
        pytest.skip(message)
    return path


def run(coro):
    return asyncio.run(coro)


def _with_database(url: str, name: str) -> str:
    base, _, _old = url.rpartition("/")
    return f"{base}/{name}"


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(BASE_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(suffix: str) -> str:
    """A ``pvesim_``-prefixed database, migrated and bootstrapped."""
    from proxmox_simulator.cli import migrate_database

    prefix = os.environ.get("PVESIM_TEST_DB_PREFIX", "pvesim_test_")
    assert prefix.startswith("pvesim_")
    name = f"{prefix}{os.getpid()}_{suffix}"
    run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    run(_admin(scratch_tablespace.create_database_sql(name).as_string()))
    url = _with_database(BASE_URL, name)
    run(migrate_database(Settings(database_url=url)))
    return url


def drop_database(url: str) -> None:
    name = url.rpartition("/")[2]
    assert name.startswith("pvesim_")
    run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def proxmoxer_client(server, user: str = "root@pam", password: str = ROOT_PASSWORD):
    """proxmoxer logged in (as root unless told) to the session's served simulator,
    trusting its CA."""
    from proxmoxer import ProxmoxAPI

    return ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(server.settings.data_dir / "tls" / "pve-ssl.pem"),
        timeout=30,
        user=user,
        password=password,
    )


def close_proxmoxer(api) -> None:
    """An open keep-alive connection would hold the session server's shutdown."""
    api._store["session"].close()


def login(client, username="root@pam", password=ROOT_PASSWORD):
    response = client.post("/access/ticket", data={"username": username, "password": password})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    return data["ticket"], data["CSRFPreventionToken"]


class Session:
    """A logged-in caller: cookie + CSRF header, like the GUI or proxmoxer."""

    def __init__(self, client, username="root@pam", password=ROOT_PASSWORD):
        self.client = client
        self.ticket, self.csrf = login(client, username, password)

    def request(self, method, path, **kwargs):
        headers = kwargs.pop("headers", {})
        if method != "GET":
            headers.setdefault("CSRFPreventionToken", self.csrf)
        headers.setdefault("Cookie", f"PVEAuthCookie={self.ticket}")
        return self.client.request(method, path, headers=headers, **kwargs)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def wait(self, upid, timeout=20):
        node = upid.split(":")[1]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.get(f"/nodes/{node}/tasks/{upid}/status").json()["data"]
            if status["status"] == "stopped":
                return status
            time.sleep(0.02)
        raise AssertionError(f"task {upid} did not finish")


# The official viewer schemas of majors 6-8 plus fakepve's 9.2: every response a
# test checks must fit each of them that declares the method.
OFFICIAL_VERSIONS = ("6.4-15", "7.4-16", "8.4.5")


@functools.cache
def all_major_contracts() -> tuple[Contract, ...]:
    contracts = []
    for version in OFFICIAL_VERSIONS:
        path = apidoc_dir() / f"pve-{version}-apidoc.js"
        if not path.exists():
            # Missing schemas must fail the suite, not silently shrink what it checks.
            raise AssertionError(f"official viewer schema missing: {path}")
        contracts.append(sources.parse_artifact(sources.read_file(path), version).contract)
    nine = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION)
    contracts.append(nine.contract)
    return tuple(contracts)


def assert_conforms(path: str, method: str, data, *, majors: tuple[int, ...] | None = None):
    """``data`` validates against ``returns`` of every major declaring (path, method)."""
    declaring = [
        c
        for c in all_major_contracts()
        if c.endpoint(path, method) is not None and (majors is None or c.major in majors)
    ]
    assert declaring, f"no major declares {method} {path}"
    problems = {
        c.version: errs
        for c in declaring
        if (errs := returns_errors(c.endpoint(path, method).returns, data))
    }
    assert not problems, f"{method} {path} does not match its returns schema: {problems}"
    return data


def expect_data(response, template: str | None = None, method: str = "GET"):
    """The ``data`` of a 200 answer, checked against every major's ``returns`` for ``template``."""
    assert response.status_code == 200, (response.status_code, response.text)
    data = response.json()["data"]
    if template is not None:
        assert_conforms(template, method, data)
    return data


def expect_error(response, status: int, fragment: str) -> None:
    """A PVE-style error: the status, and ``fragment`` in the reason phrase or body."""
    assert response.status_code == status, (response.status_code, response.text)
    assert fragment in response.reason_phrase + response.text, response.text


def make_vm(session, node: str, vmid: int, **extra) -> int:
    """Create a QEMU guest (2 GiB scsi0 on local-lvm) and wait for its task."""
    upid = expect_data(
        session.post(
            f"/nodes/{node}/qemu",
            data={"vmid": vmid, "name": f"vm{vmid}", "scsi0": "local-lvm:2", **extra},
        )
    )
    assert session.wait(upid)["exitstatus"] == "OK"
    return vmid


def metric_value(text: str, name: str, **labels) -> float:
    """One sample of a Prometheus exposition (0 when the series is absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def ansible_playbook(server, tmp_path: Path, name: str, tasks: str, extra_vars: dict) -> dict:
    """Run ``tasks`` as one play on localhost against ``server`` (root, no cert check);
    the json callback's result per task name. A failed task fails the test."""
    import pytest

    play = textwrap.dedent(
        """\
        - hosts: localhost
          connection: local
          gather_facts: false
          module_defaults:
            group/community.proxmox.proxmox:
              api_host: 127.0.0.1
              api_port: "{{ api_port }}"
              api_user: root@pam
              api_password: "{{ api_password }}"
              validate_certs: false
          tasks:
        """
    ) + textwrap.indent(textwrap.dedent(tasks), "    ")
    path = tmp_path / f"{name}.yml"
    path.write_text(play)
    env = {
        **os.environ,
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
    }
    variables = {"api_port": server.port, "api_password": ROOT_PASSWORD, **extra_vars}
    completed = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", str(path), "-e", json.dumps(variables)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    try:
        result = json.loads(completed.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON:\n{completed.stdout}\n{completed.stderr}")
    tasks_run = result["plays"][0]["tasks"]
    failed = {
        t["task"]["name"]: t["hosts"]["localhost"].get("msg")
        for t in tasks_run
        if t["hosts"].get("localhost", {}).get("failed")
    }
    assert not failed and completed.returncode == 0, (failed, completed.stderr[-2000:])
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in tasks_run}


@contextlib.contextmanager
def lab_simulator(data_dir: Path, name: str, profile: str, seed: int):
    """A TLS-less simulator of its own with the laboratory API (majors swap through it),
    on a fresh database seeded with ``profile``; dropped afterwards."""
    from proxmox_simulator.cli import seed_database
    from proxmox_simulator.server import SimulatorServer

    url = create_database(name)
    settings = Settings(
        database_url=url,
        data_dir=data_dir,
        contract="fakepve",
        clock="instant",
        task_workers=1,
        lease_seconds=10,
        pool_max_size=4,
        lab_enabled=True,
        apidoc_dir=apidoc_dir(),
    )
    official_apidoc("6.4-15")  # in CI a missing schema fails here, not as an unavailable major
    run(seed_database(settings, profile, seed, ROOT_PASSWORD))
    try:
        with SimulatorServer(settings) as server:
            yield server
    finally:
        drop_database(url)


def swap_major(server, major: int) -> None:
    """Hot-swap the laboratory simulator's contract to ``major``."""
    with httpx.Client(base_url=server.base_url, timeout=30) as admin:
        response = admin.post("/ui/api/contract/apply", data={"major": major})
        assert response.status_code == 200, response.text
