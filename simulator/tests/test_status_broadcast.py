"""`/cluster/resources` as fresh as PVE's: with PROXMOX_SIMULATOR_STATUS_INTERVAL set, a
guest's status, name and sizes there are those of the last status broadcast (pvestatd's
10 s on PVE), while its existence, node and the guest's own status call are current."""

from __future__ import annotations

import time

import httpx
import pytest
from simtest_support import create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.domain.status_broadcast import StatusBroadcast

INTERVAL = 10.0


@pytest.fixture(scope="module")
def broadcasting(tmp_path_factory):
    from proxmox_simulator.server import SimulatorServer

    url = create_database("broadcast")
    run(seed_database(Settings(database_url=url), "standalone", 2, "pw"))
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("broadcast"),
        clock="manual",
        task_workers=2,
        status_interval=INTERVAL,
        pool_max_size=4,
    )
    with SimulatorServer(settings) as server:
        client = httpx.Client(base_url=server.base_url, timeout=30)
        login = client.post(
            "/api2/json/access/ticket", data={"username": "root@pam", "password": "pw"}
        ).json()["data"]
        client.headers.update(
            {
                "Cookie": f"PVEAuthCookie={login['ticket']}",
                "CSRFPreventionToken": login["CSRFPreventionToken"],
            }
        )
        yield client
        client.close()
    drop_database(url)


def advance(client, seconds: float) -> float:
    return client.post("/simulator/clock/advance", data={"seconds": seconds}).json()["data"]["now"]


def finish(client, upid: str) -> None:
    """The task run to its end: 3 simulated seconds are enough for a stop, a start or a
    create, and leave the broadcast cycle (10 s) unfinished after two of them."""
    advance(client, 3)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = client.get(f"/api2/json/nodes/pve/tasks/{upid}/status").json()["data"]
        if status["status"] == "stopped":
            assert status["exitstatus"] == "OK", status
            return
        time.sleep(0.05)
    raise AssertionError(f"{upid} still running")


def resources(client) -> dict[int, dict]:
    listed = client.get("/api2/json/cluster/resources", params={"type": "vm"}).json()["data"]
    return {entry["vmid"]: entry for entry in listed}


def test_cluster_resources_show_the_last_broadcast_like_pve(broadcasting):
    client = broadcasting
    now = advance(client, 0)
    advance(client, INTERVAL - now % INTERVAL + 0.01)  # the start of a broadcast cycle
    guest = next(g for g in resources(client).values() if g["type"] == "qemu")
    vmid, status = guest["vmid"], guest["status"]
    action = "stop" if status == "running" else "start"
    finish(client, client.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/{action}").json()["data"])
    created = client.post(
        "/api2/json/nodes/pve/qemu", data={"vmid": 990, "name": "fresh", "memory": 512}
    )
    finish(client, created.json()["data"])

    # Within the cycle: the old status, and the new guest without a broadcast yet.
    current = client.get(f"/api2/json/nodes/pve/qemu/{vmid}/status/current").json()["data"]
    assert current["status"] != status  # the guest's own call is current
    listed = resources(client)
    assert listed[vmid]["status"] == status
    assert listed[990] == {
        "id": "qemu/990", "type": "qemu", "vmid": 990, "node": "pve", "status": "unknown"
    }  # fmt: skip

    advance(client, INTERVAL)  # the next broadcast
    listed = resources(client)
    assert listed[vmid]["status"] == current["status"]
    assert (listed[990]["name"], listed[990]["status"]) == ("fresh", "stopped")
    assert listed[990]["maxmem"] == 512 * 1024**2


def test_without_an_interval_the_list_is_current():
    rows = [{"vmid": 100, **dict.fromkeys(("name", "template", "cpus", "maxmem"), 1),
             "status": "running", "maxdisk": 1, "started_at": 1}]  # fmt: skip
    assert StatusBroadcast(0).view(rows, 5.0)[0]["broadcast"] is True
    broadcast = StatusBroadcast(10)
    broadcast.view(rows, 5.0)
    changed = [{**rows[0], "status": "stopped"}, {**rows[0], "vmid": 101}]
    same_cycle = broadcast.view(changed, 9.9)
    assert same_cycle[0]["status"] == "running" and same_cycle[1]["broadcast"] is False
    next_cycle = broadcast.view(changed, 10.0)
    assert next_cycle[0]["status"] == "stopped" and next_cycle[1]["broadcast"] is True
