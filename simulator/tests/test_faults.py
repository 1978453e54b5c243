"""Seeded fault scenarios through the lab API, the CLI, PVE's API and the task worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from simtest_support import (
    ROOT_PASSWORD,
    Session,
    create_database,
    drop_database,
    expect_data,
    metric_value,
    run,
)

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings, settings_env

FAULT_SERIES = "pvesim_fault_injections_total"


@pytest.fixture(scope="module")
def lab_settings(tmp_path_factory):
    url = create_database("faults")
    run(seed_database(Settings(database_url=url), "small", 3, ROOT_PASSWORD))
    yield Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("faults"),
        clock="instant",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
        lab_enabled=True,
    )
    drop_database(url)


@pytest.fixture(scope="module")
def lab_server(lab_settings):
    from proxmox_simulator.server import SimulatorServer

    with SimulatorServer(lab_settings) as server:
        yield server


@pytest.fixture(autouse=True)
def no_faults_after(lab):
    yield
    lab.delete("/ui/api/faults")


def _enable(lab, **body):
    response = lab.post("/ui/api/faults", json=body)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def _cli(settings, *args):
    env = {**os.environ, **settings_env(settings)}
    return subprocess.run(
        [sys.executable, "-m", "proxmox_simulator", "faults", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


BURSTS = [{"kind": "http_error", "methods": ["GET"], "path": "/nodes/*", "probability": 0.25}]


def _trace(pve, n=40) -> list[int]:
    return [pve.get(f"/nodes/pve{1 + i % 3}/status").status_code for i in range(n)]


def test_same_seed_same_faults_same_order(lab, pve):
    _enable(lab, rules=[{**BURSTS[0], "burst": 2}], seed=11)
    first = _trace(pve)
    _enable(lab, rules=[{**BURSTS[0], "burst": 2}], seed=11)
    again = _trace(pve)
    _enable(lab, rules=[{**BURSTS[0], "burst": 2}], seed=12)
    other = _trace(pve)
    assert first == again
    assert first != other
    assert 0 < first.count(500) < len(first)
    # A firing rule with burst 2 fails two matching requests in a row.
    starts = [i for i, s in enumerate(first) if s == 500 and (i == 0 or first[i - 1] != 500)]
    assert all(i + 1 < len(first) and first[i + 1] == 500 for i in starts[:-1])
    state = lab.get("/ui/api/faults").json()["data"]
    assert state["injections"]["http_error"] == other.count(500)
    assert [e["kind"] for e in state["recent"]] == ["http_error"] * other.count(500)


def test_http_errors_carry_pves_message_and_only_hit_what_they_match(lab, pve):
    _enable(lab, rules=BURSTS, seed=1, name="reads")
    injected_before = metric_value(lab.get("/metrics").text, FAULT_SERIES, kind="http_error")
    statuses = {}
    failures = 0
    for _ in range(30):
        response = pve.get("/nodes/pve1/status")
        statuses.setdefault(response.status_code, response)
        failures += response.status_code == 500
        assert pve.get("/cluster/status").status_code == 200  # not under /nodes/*
    injected = metric_value(lab.get("/metrics").text, FAULT_SERIES, kind="http_error")
    assert injected - injected_before == failures > 0
    failed = statuses[500]
    assert failed.reason_phrase == "Can't connect to 127.0.0.1:85 (Connection refused)"
    assert failed.json() == {"data": None, "message": failed.reason_phrase + "\n"}


def test_latency_rule_delays_matching_requests(lab, pve):
    _enable(lab, rules=[{"kind": "latency", "path": "/version", "delay_ms": 300}])
    started = time.monotonic()
    assert pve.get("/version").status_code == 200
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    assert pve.get("/nodes").status_code == 200
    assert time.monotonic() - started < 0.3


def _stopped_qemu(pve, node="pve1"):
    for guest in pve.get(f"/nodes/{node}/qemu").json()["data"]:
        if guest["status"] == "stopped" and not guest.get("template"):
            return guest["vmid"]
    vmid = pve.get(f"/nodes/{node}/qemu").json()["data"][0]["vmid"]
    pve.wait(pve.post(f"/nodes/{node}/qemu/{vmid}/status/stop").json()["data"])
    return vmid


def test_task_failures_and_warnings_in_the_worker(lab, pve):
    _enable(
        lab,
        rules=[
            {"kind": "task_failure", "task_types": ["qmstart"], "message": "start failed: boom"},
            {"kind": "task_warnings", "task_types": ["qmstop"], "warnings": 2},
        ],
    )
    vmid = _stopped_qemu(pve)
    upid = pve.post(f"/nodes/pve1/qemu/{vmid}/status/start").json()["data"]
    assert pve.wait(upid)["exitstatus"] == "start failed: boom"
    # The failed task changed nothing.
    status = pve.get(f"/nodes/pve1/qemu/{vmid}/status/current").json()["data"]
    assert status["status"] == "stopped"
    log = pve.get(f"/nodes/pve1/tasks/{upid}/log").json()["data"]
    assert log[-1]["t"] == "TASK ERROR: start failed: boom"

    lab.post("/ui/api/faults/rules/0", data={"enabled": "0"})
    pve.wait(pve.post(f"/nodes/pve1/qemu/{vmid}/status/start").json()["data"])
    upid = pve.post(f"/nodes/pve1/qemu/{vmid}/status/stop").json()["data"]
    assert pve.wait(upid)["exitstatus"] == "WARNINGS: 2"
    log = [line["t"] for line in pve.get(f"/nodes/pve1/tasks/{upid}/log").json()["data"]]
    assert log[-1] == "TASK WARNINGS: 2"
    assert sum(line.startswith("WARN: ") for line in log) == 2


def test_node_offline_and_quorum_loss(lab, pve):
    _enable(lab, name="node-offline", node="pve3")
    response = pve.get("/nodes/pve3/status")
    assert response.status_code == 595
    assert response.reason_phrase == "No route to host"
    assert pve.get("/nodes/pve1/status").status_code == 200
    online = {e["name"]: e["online"] for e in pve.get("/cluster/status").json()["data"][1:]}
    assert online == {"pve1": 1, "pve2": 1, "pve3": 0}
    nodes = {n["node"]: n["status"] for n in pve.get("/nodes").json()["data"]}
    assert nodes["pve3"] == "offline"

    _enable(lab, name="quorum-loss")
    refused = pve.post("/pools", data={"poolid": "noquorum"})
    assert refused.status_code == 500
    assert refused.reason_phrase == "cluster not ready - no quorum?"
    assert pve.get("/pools/noquorum").status_code != 200
    assert pve.get("/cluster/status").json()["data"][0]["quorate"] == 0
    Session(pve.client)  # logging in still works


def test_an_offline_node_drops_out_of_a_fabric(lab, pve):
    fabric = "flab"
    expect_data(
        pve.post(
            "/cluster/sdn/fabrics/fabric",
            data={"id": fabric, "protocol": "openfabric", "ip_prefix": "10.77.0.0/24"},
        )
    )
    for index, node in enumerate(("pve1", "pve2", "pve3"), start=1):
        expect_data(
            pve.post(
                f"/cluster/sdn/fabrics/node/{fabric}",
                data={
                    "node_id": node,
                    "protocol": "openfabric",
                    "ip": f"10.77.0.{index}",
                    "interfaces": "name=ens19",
                },
            )
        )
    assert pve.wait(expect_data(pve.put("/cluster/sdn")))["exitstatus"] == "OK"
    view = f"/nodes/pve1/sdn/fabrics/{fabric}"
    assert [n["neighbor"] for n in expect_data(pve.get(f"{view}/neighbors"))] == ["pve2", "pve3"]
    _enable(lab, name="node-offline", node="pve3")
    assert [n["neighbor"] for n in expect_data(pve.get(f"{view}/neighbors"))] == ["pve2"]
    assert [r["route"] for r in expect_data(pve.get(f"{view}/routes"))] == ["10.77.0.2/32"]


def test_storage_full_lock_timeout_and_slow_agent(lab, pve, unique_vmid):
    _enable(lab, name="storage-full", storage="local-lvm")
    refused = pve.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "scsi0": "local-lvm:4", "memory": 512}
    )
    assert refused.status_code == 500, refused.text
    reason = refused.reason_phrase
    assert reason == "unable to allocate image on storage 'local-lvm' - No space left on device"
    assert pve.get(f"/nodes/pve1/qemu/{unique_vmid}/status/current").status_code != 200

    _enable(lab, name="lock-contention", seed=0)
    _enable(lab, rules=[{"kind": "lock_timeout"}])
    vmid = _stopped_qemu(pve)
    refused = pve.put(f"/nodes/pve1/qemu/{vmid}/config", data={"description": "x"})
    assert refused.status_code == 500
    expected = f"can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout"
    assert refused.reason_phrase == expected

    _enable(lab, rules=[{"kind": "slow_agent", "status": 500}])
    refused = pve.post(f"/nodes/pve1/qemu/{vmid}/agent/ping")
    assert refused.reason_phrase == f"VM {vmid} qmp command 'guest-ping' failed - got timeout"
    _enable(lab, rules=[{"kind": "slow_agent", "delay_ms": 400}])
    started = time.monotonic()
    pve.post(f"/nodes/pve1/qemu/{vmid}/agent/ping")
    assert time.monotonic() - started >= 0.4


def test_bad_scenarios_are_refused_naming_the_field(lab, lab_settings):
    cases = [
        ({"name": "no-such"}, "name"),
        ({"rules": [{"kind": "meteor"}]}, "rules[0].kind"),
        ({"rules": [{"kind": "latency", "probability": 2}]}, "rules[0].probability"),
        ({"rules": [{"kind": "latency", "color": "red"}]}, "rules[0].color"),
        ({"rules": [{"kind": "storage_full"}]}, "rules[0].storage"),
        ({"name": "slow-api", "seed": "x"}, "seed"),
    ]
    for body, field in cases:
        response = lab.post("/ui/api/faults", json=body)
        assert response.status_code == 400, (body, response.text)
        assert field in response.json()["errors"], (body, response.json())
    assert lab.get("/ui/api/faults").json()["data"]["active"] is None
    assert lab.post("/ui/api/faults/rules/0", data={"enabled": "1"}).status_code == 400
    cross = lab.post(
        "/ui/api/faults", json={"name": "slow-api"}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert lab.get("/ui/api/faults").json()["data"]["active"] is None

    result = _cli(lab_settings, "enable", "no-such")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "name" in result.stderr, result.stderr


def test_cli_enables_a_scenario_every_process_sees(lab, pve, lab_settings):
    listed = json.loads(_cli(lab_settings, "list").stdout)
    assert {"flaky-api", "task-failures", "quorum-loss", "sync-chaos"} <= {
        s["name"] for s in listed
    }
    result = _cli(lab_settings, "enable", "quorum-loss", "--seed", "5")
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 5
    while lab.get("/ui/api/faults").json()["data"]["active"] is None:
        assert time.monotonic() < deadline, "the server did not pick up the CLI's scenario"
        time.sleep(0.05)
    assert pve.post("/pools", data={"poolid": "clipool"}).status_code == 500
    assert _cli(lab_settings, "rule", "0", "off").returncode == 0
    deadline = time.monotonic() + 5
    while lab.get("/ui/api/faults").json()["data"]["active"]["rules"][0]["enabled"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pve.post("/pools", data={"poolid": "clipool"}).status_code == 200
    assert json.loads(_cli(lab_settings, "status").stdout)["active"]["name"] == "quorum-loss"
    assert _cli(lab_settings, "disable").returncode == 0
    pve.delete("/pools/clipool")


def test_lab_surfaces_are_off_unless_enabled(server):
    with httpx.Client(base_url=server.base_url, verify=False, timeout=10) as client:
        for path in ("/ui/", "/ui/api/faults", "/ui/api/clock"):
            assert client.get(path).status_code == 404, path
        assert client.post("/ui/api/faults", json={"name": "slow-api"}).status_code == 404
