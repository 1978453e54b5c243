"""Shared fixtures: a throwaway PostgreSQL database per session, a TLS server.

The suite needs no Django; run it with ``uv run pytest simulator/tests -p no:django``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, Session, create_database, drop_database, run

from proxmox_simulator.config import Settings


@pytest.fixture(scope="session")
def database_url():
    url = create_database("main")
    yield url
    drop_database(url)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pvesim-data")


@pytest.fixture(scope="session")
def settings(database_url, data_dir) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        contract="fakepve",
        clock="instant",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=5,
    )


@pytest.fixture(scope="session")
def seeded(settings) -> dict:
    from proxmox_simulator.cli import seed_database

    return run(seed_database(settings, "small", 7, ROOT_PASSWORD))


@pytest.fixture(scope="session")
def server(settings, seeded):
    """One TLS simulator for the session (instant clock, in-process workers)."""
    from proxmox_simulator.server import SimulatorServer

    with SimulatorServer(settings, tls=True) as srv:
        yield srv


@pytest.fixture
def unique_vmid() -> int:
    """VMIDs far above the seeded range so parallel-running tests never collide."""
    return 5000 + uuid.uuid4().int % 900000


@pytest.fixture(scope="module")
def root(server):
    """root@pam logged in with a ticket, against the session's server."""
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        yield Session(c)


# A module that defines ``lab_server`` (a simulator with PROXMOX_SIMULATOR_LAB on) gets
# these two clients of it: the laboratory surfaces, and PVE's API as root@pam.
@pytest.fixture(scope="module")
def lab(lab_server):
    with httpx.Client(base_url=lab_server.base_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def pve(lab_server):
    with httpx.Client(base_url=lab_server.base_url + "/api2/json", timeout=30) as client:
        yield Session(client)
