"""Manual clock, task abort and PVE's standalone→cluster path, on a private database."""

from __future__ import annotations

import time

import httpx
import pytest
from simtest_support import create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.repositories import db


@pytest.fixture(scope="module")
def manual_server(tmp_path_factory):
    from proxmox_simulator.server import SimulatorServer

    url = create_database("manual")
    run(seed_database(Settings(database_url=url), "standalone", 2, "pw"))
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("manual"),
        clock="manual",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
    )
    with SimulatorServer(settings) as server:
        yield server
    drop_database(url)


@pytest.fixture(scope="module")
def session(manual_server):
    client = httpx.Client(base_url=manual_server.base_url, timeout=30)
    login = client.post("/api2/json/access/ticket", data={"username": "root@pam", "password": "pw"})
    data = login.json()["data"]
    client.headers.update(
        {
            "Cookie": f"PVEAuthCookie={data['ticket']}",
            "CSRFPreventionToken": data["CSRFPreventionToken"],
        }
    )
    yield client
    client.close()


def _status(session, upid):
    return session.get(f"/api2/json/nodes/pve/tasks/{upid}/status").json()["data"]


def _wait(session, upid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(session, upid)
        if status["status"] == "stopped":
            return status
        time.sleep(0.02)
    raise AssertionError(f"{upid} still running")


def _stopped_vm(session):
    guests = session.get("/api2/json/nodes/pve/qemu").json()["data"]
    vmid = guests[0]["vmid"]
    if guests[0]["status"] == "running":
        upid = session.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/stop").json()["data"]
        session.post("/simulator/clock/advance", data={"seconds": 1})
        _wait(session, upid)
    return vmid


def test_manual_clock_holds_tasks_until_advanced(session):
    vmid = _stopped_vm(session)
    upid = session.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/start").json()["data"]
    time.sleep(0.3)
    assert _status(session, upid)["status"] == "running"  # 1.5 simulated seconds not yet elapsed
    session.post("/simulator/clock/advance", data={"seconds": 1})
    time.sleep(0.2)
    assert _status(session, upid)["status"] == "running"
    advanced = session.post("/simulator/clock/advance", data={"seconds": 1})
    assert advanced.status_code == 200
    assert _wait(session, upid)["exitstatus"] == "OK"
    current = session.get(f"/api2/json/nodes/pve/qemu/{vmid}/status/current").json()["data"]
    assert current["status"] == "running"


def test_stopping_a_task_rolls_back_its_effect(session, manual_server):
    vmid = _stopped_vm(session)
    upid = session.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/start").json()["data"]

    async def events():
        conn = await db.connect(manual_server.settings.database_url)
        try:
            return [
                r["kind"]
                for r in await conn.fetch(
                    "SELECT kind FROM task_events WHERE upid = $1 ORDER BY id", upid
                )
            ]
        finally:
            await conn.close()

    # Abort while a worker holds the task (it waits for the manual clock).
    deadline = time.monotonic() + 10
    while "claimed" not in run(events()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.delete(f"/api2/json/nodes/pve/tasks/{upid}").status_code == 200
    status = _status(session, upid)
    assert status["status"] == "stopped" and status["exitstatus"] == "interrupted by signal"
    session.post("/simulator/clock/advance", data={"seconds": 5})  # let the worker try to finish
    time.sleep(0.3)
    current = session.get(f"/api2/json/nodes/pve/qemu/{vmid}/status/current").json()["data"]
    assert current["status"] == "stopped"  # the aborted start never took effect
    assert run(events()) == ["created", "claimed", "aborted"]
    # The guest lock was released with the abort: a new start is accepted.
    again = session.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/start").json()["data"]
    session.post("/simulator/clock/advance", data={"seconds": 2})
    assert _wait(session, again)["exitstatus"] == "OK"


def test_standalone_node_becomes_a_cluster_the_pve_way(session):
    status = session.get("/api2/json/cluster/status").json()["data"]
    assert [e["type"] for e in status] == ["node"] and status[0]["nodeid"] == 0
    upid = session.post("/api2/json/cluster/config", data={"clustername": "lab"}).json()["data"]
    assert ":clustercreate:lab:" in upid
    session.post("/simulator/clock/advance", data={"seconds": 1})
    assert _wait(session, upid)["exitstatus"] == "OK"
    status = session.get("/api2/json/cluster/status").json()["data"]
    assert status[0] == {**status[0], "type": "cluster", "name": "lab", "quorate": 1}
    again = session.post("/api2/json/cluster/config", data={"clustername": "other"})
    assert again.status_code == 500 and "already exists" in again.reason_phrase


def _cluster_tasks(client, **headers):
    answer = client.get("/api2/json/cluster/tasks", headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def test_cluster_tasks_list_running_first_then_finished_newest_first_as_pve(session):
    vmid = _stopped_vm(session)
    upid = session.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/start").json()["data"]
    listed = _cluster_tasks(session)
    # PVE's status cache: running tasks first, with their pid but no pstart or status.
    unfinished = [task for task in listed if "status" not in task]
    assert listed[: len(unfinished)] == unfinished
    running = next(task for task in unfinished if task["upid"] == upid)
    assert running["type"] == "qmstart"
    assert "pid" in running and not {"pstart", "endtime"} & set(running)
    finished = listed[len(unfinished) :]
    assert finished, "the VM's earlier stop is listed as finished"
    for task in finished:
        assert {"status", "endtime"} <= set(task) and not {"pid", "pstart"} & set(task)
    starts = [task["starttime"] for task in finished]
    assert starts == sorted(starts, reverse=True)
    session.post("/simulator/clock/advance", data={"seconds": 2})
    _wait(session, upid)
    ended = next(task for task in _cluster_tasks(session) if task["upid"] == upid)
    assert ended["status"] == "OK" and "endtime" in ended and "pid" not in ended


def test_cluster_tasks_split_a_tokens_user_and_need_sys_audit_on_root(session):
    token = session.post(
        "/api2/json/access/users/root@pam/token/watch", data={"privsep": 0}
    ).json()["data"]
    auth = {"Authorization": f"PVEAPIToken=root@pam!watch={token['value']}"}
    vmid = _stopped_vm(session)
    with httpx.Client(base_url=session.base_url, headers=auth, timeout=30) as as_token:
        started = as_token.post(f"/api2/json/nodes/pve/qemu/{vmid}/status/start")
    assert started.status_code == 200, started.text
    upid = started.json()["data"]
    entry = next(t for t in _cluster_tasks(session) if t["upid"] == upid)
    assert (entry["user"], entry["tokenid"]) == ("root@pam", "watch")
    session.post("/simulator/clock/advance", data={"seconds": 2})
    _wait(session, upid)
    # Without Sys.Audit on /, only the caller's own tasks: none for a fresh user.
    created = session.post(
        "/api2/json/access/users", data={"userid": "eve@pve", "password": "eve-pw-1"}
    )
    assert created.status_code == 200, created.text
    login = session.post(
        "/api2/json/access/ticket", data={"username": "eve@pve", "password": "eve-pw-1"}
    ).json()["data"]
    assert _cluster_tasks(session, Cookie=f"PVEAuthCookie={login['ticket']}") == []


def test_cluster_tasks_keep_25_entries_per_node_running_ones_first():
    from proxmox_simulator.tasks.service import RECENT_TASKS, cluster_task_list

    def row(node, pid, state, starttime):
        return {
            "upid": f"UPID:{node}:{pid}", "node": node, "pid": pid, "starttime": starttime,
            "type": "qmstart", "id": "100", "userid": "root@pam", "tokenid": None,
            "state": state, "exitstatus": "OK" if state == "stopped" else None,
            "endtime": starttime + 1 if state == "stopped" else None,
        }  # fmt: skip

    # As repositories.tasks.recent orders them: per node, running, then newest finished.
    rows = [row("a", 1, "running", 100), row("a", 2, "running", 101)]
    rows += [row("a", 100 + n, "stopped", 90 - n) for n in range(RECENT_TASKS)]
    rows += [row("b", 200 + n, "stopped", 90 - n) for n in range(RECENT_TASKS)]
    listed = cluster_task_list(rows)
    a = [t for t in listed if t["node"] == "a"]
    b = [t for t in listed if t["node"] == "b"]
    assert len(a) == len(b) == RECENT_TASKS
    assert [t["upid"] for t in a[:2]] == ["UPID:a:1", "UPID:a:2"]
    assert a[-1]["upid"] == f"UPID:a:{100 + RECENT_TASKS - 3}"  # the oldest two fell off
    assert [t["node"] for t in listed] == ["a"] * RECENT_TASKS + ["b"] * RECENT_TASKS
