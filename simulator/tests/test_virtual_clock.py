"""The simulation clock drives task durations; worker leases stay on wall time.

One database, one server per clock mode (manual, accelerated, real), all through HTTP.
"""

from __future__ import annotations

import time

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, Session, create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.server import SimulatorServer


@pytest.fixture(scope="module")
def clock_db():
    url = create_database("clock")
    run(seed_database(Settings(database_url=url), "standalone", 5, ROOT_PASSWORD))
    yield url
    drop_database(url)


def _settings(url, tmp_path, clock, lease=10.0):
    return Settings(
        database_url=url,
        data_dir=tmp_path,
        clock=clock,
        # Two claim loops: the idle one would reclaim a lease that expired.
        task_workers=2,
        lease_seconds=lease,
        pool_max_size=3,
        lab_enabled=True,
    )


def _stopped_vm(pve) -> int:
    guests = pve.get("/nodes/pve/qemu").json()["data"]
    for guest in guests:
        if guest["status"] == "stopped":
            return guest["vmid"]
    vmid = guests[0]["vmid"]
    pve.wait(pve.post(f"/nodes/pve/qemu/{vmid}/status/stop").json()["data"])
    return vmid


def _events(url, upid) -> list[str]:
    async def fetch():
        conn = await db.connect(url)
        try:
            return [e["kind"] for e in await task_repo.events(conn, upid)]
        finally:
            await conn.close()

    return run(fetch())


def _start_and_stop(pve, vmid) -> tuple[str, float]:
    """Start the VM (1.5 simulated seconds) and time it; stop it again."""
    started = time.monotonic()
    upid = pve.post(f"/nodes/pve/qemu/{vmid}/status/start").json()["data"]
    status = pve.wait(upid, timeout=30)
    elapsed = time.monotonic() - started
    assert status["exitstatus"] == "OK"
    pve.wait(pve.post(f"/nodes/pve/qemu/{vmid}/status/stop").json()["data"], timeout=30)
    return upid, elapsed


def test_manual_clock_holds_a_task_longer_than_its_lease_without_losing_it(clock_db, tmp_path):
    # Lease 1 s: renewed on wall time every 1/3 s while the simulated clock stands still.
    settings = _settings(clock_db, tmp_path, "manual", lease=1.0)
    with SimulatorServer(settings) as server, httpx.Client(base_url=server.base_url) as lab:
        pve = Session(httpx.Client(base_url=server.base_url + "/api2/json", timeout=30))
        vmid = _stopped_vm(pve)
        before = lab.get("/ui/api/clock").json()["data"]
        assert before["mode"] == "manual"
        upid = pve.post(f"/nodes/pve/qemu/{vmid}/status/start").json()["data"]
        time.sleep(3)  # three leases of wall time
        status = pve.get(f"/nodes/pve/tasks/{upid}/status").json()["data"]
        assert status["status"] == "running"
        assert _events(clock_db, upid) == ["created", "claimed"]

        advanced = lab.post("/ui/api/clock/advance", data={"seconds": 2})
        assert advanced.status_code == 200
        assert advanced.json()["data"]["now"] == pytest.approx(before["now"] + 2, abs=0.01)
        done = pve.wait(upid)
        assert done["exitstatus"] == "OK"
        assert _events(clock_db, upid) == ["created", "claimed", "finished"]
        bad = lab.post("/ui/api/clock/advance", data={"seconds": "soon"})
        assert bad.status_code == 400 and "seconds" in bad.json()["errors"]
        pve.client.close()


def test_accelerated_and_real_clocks_scale_task_durations(clock_db, tmp_path):
    with SimulatorServer(_settings(clock_db, tmp_path, "accelerated:10")) as server:
        with httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client:
            pve = Session(client)
            vmid = _stopped_vm(pve)
            upid, fast = _start_and_stop(pve, vmid)
            status = pve.get(f"/nodes/pve/tasks/{upid}/status").json()["data"]
            tasks = pve.get("/nodes/pve/tasks", params={"vmid": vmid}).json()["data"]
            entry = next(t for t in tasks if t["upid"] == upid)
            # 1.5 simulated seconds pass in about 0.15 wall seconds.
            assert 1 <= entry["endtime"] - status["starttime"] <= 3
        with httpx.Client(base_url=server.base_url) as lab:
            refused = lab.post("/ui/api/clock/advance", data={"seconds": 1})
            assert refused.status_code == 400  # only a manual clock is advanced by hand
    with (
        SimulatorServer(_settings(clock_db, tmp_path, "real")) as server,
        httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
    ):
        _, real = _start_and_stop(Session(client), vmid)
    assert real >= 1.5
    assert fast < real / 3
