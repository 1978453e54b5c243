"""Chaos that converges, simulator side: a sync through seeded faults (5xx bursts,
latency, a failing task) retries boundedly, counts every retry, and reaches the
state an undisturbed sync reaches; the rerun without faults changes nothing.

Real processes: NetBox, the simulator (`serve --tls`, lab API on), `proxbox-sync run`.
The scenario is enabled through the simulator's CLI and read back from its lab API,
so the retries the backend reports are compared with the faults the simulator
injected, one for one.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time

import httpx
import pytest
from chaos_support import (
    INVENTORY_TYPES,
    assert_consistent,
    endpoint_cluster,
    sync_command,
    sync_state,
)
from proxbox_processes import wait_until
from sync_fixtures import Simulator, create_endpoint, create_site, expected_inventory

# Sparse enough that no read fails all four of the backend's attempts
# (RetryPolicy.attempts); a burst of two hits the next matching read as well.
RULES = [
    {"kind": "http_error", "methods": ["GET"], "probability": 0.04, "burst": 2},
    {"kind": "latency", "methods": ["GET"], "probability": 0.3, "delay_ms": 20},
    {"kind": "task_failure", "task_types": ["qmstart"], "message": "start failed: QEMU exited"},
]


class LabSimulator(Simulator):
    def env(self) -> dict:
        return {**super().env(), "PROXMOX_SIMULATOR_LAB": "1"}

    def lab(self) -> httpx.Client:
        verify = ssl.create_default_context(cafile=self.ca_bundle)
        return httpx.Client(base_url=self.url, verify=verify, timeout=30)


@pytest.fixture(scope="module")
def faulty_simulator(sync_workdir):
    simulator = LabSimulator("faults", "small", 23, sync_workdir)
    try:
        simulator.start().renumber("10.94.0")
        yield simulator
    finally:
        simulator.stop()


def _wait_for_scenario(simulator: LabSimulator, active: bool) -> None:
    with simulator.lab() as lab:
        wait_until(
            lambda: (lab.get("/ui/api/faults").json()["data"]["active"] is not None) == active,
            10,
            "the server to pick up the scenario",
            interval=0.05,
        )


def test_seeded_faults_during_a_sync_are_retried_bounded_and_counted(
    netbox_server, faulty_simulator, sync_workdir
):
    sim = faulty_simulator
    site = create_site(netbox_server, "pbsync-faults")
    endpoint = create_endpoint(netbox_server, "pve-faults", sim, site=site)
    with sim.api() as pve:
        stopped = next(
            g
            for g in pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
            if g["type"] == "qemu" and g["status"] == "stopped"
        )
    expected = expected_inventory(sim.inventory())

    rules = sync_workdir / "fault-rules.json"
    rules.write_text(json.dumps(RULES))
    sim.cli("faults", "enable", "sync-chaos-e2e", "--rules", str(rules), "--seed", "17")
    _wait_for_scenario(sim, active=True)

    argv, env = sync_command(netbox_server, sim, endpoint["name"])
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # A task that fails mid-sync changes nothing the sync could have seen.  This
    # test's own reads meet the 5xx rule too: they are counted apart.
    own_5xx = 0
    with sim.api() as pve:
        response = pve.post(f"/nodes/{stopped['node']}/qemu/{stopped['vmid']}/status/start")
        assert response.status_code == 200, response.text  # POSTs are not in the 5xx rule
        upid = response.json()["data"]
        deadline = time.monotonic() + 60
        while True:
            status = pve.get(f"/nodes/{stopped['node']}/tasks/{upid}/status")
            own_5xx += status.status_code == 500
            if status.status_code == 200 and status.json()["data"]["status"] == "stopped":
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status.json()["data"]["exitstatus"] == "start failed: QEMU exited"
    stdout, stderr = run.communicate(timeout=600)
    report = json.loads(stdout)
    # Reads whose retries met the 5xx rule again failed: the run is degraded, and says so.
    assert report["error"] is None and report["failures"] == [], report
    assert report["ok"] is (not report["read_failures"]), report
    assert run.returncode == (1 if report["read_failures"] else 0), (stdout[-3000:], stderr[-3000:])

    with sim.lab() as lab:
        injected = lab.get("/ui/api/faults").json()["data"]["injections"]
    assert injected.get("http_error", 0) > 0 and injected.get("latency", 0) > 0, injected
    assert injected.get("task_failure") == 1, injected
    proxmox = report["proxmox_requests"]
    # Every injected 5xx was retried exactly once and counted; nothing else was.
    assert proxmox["retries"] == injected["http_error"] - own_5xx, (proxmox, injected, own_5xx)

    cluster_id = endpoint_cluster(netbox_server, endpoint["id"])
    converged = assert_consistent(netbox_server, cluster_id)
    for part in INVENTORY_TYPES.values():
        assert converged[part] == expected[part], part
    state = sync_state(netbox_server, cluster_id)
    if report["read_failures"]:
        assert state["status"]["value"] == "degraded", state
        assert state["errors"] == len(report["read_failures"]), state
        assert f"{len(report['read_failures'])} Proxmox read(s) failed" in state["message"]
    else:
        assert state["status"]["value"] == "succeeded", state

    sim.cli("faults", "disable")
    _wait_for_scenario(sim, active=False)
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, (rerun.stdout[-3000:], rerun.stderr[-3000:])
    calm = json.loads(rerun.stdout)
    assert calm["proxmox_requests"]["retries"] == 0
    # The same reads as the disturbed run, minus its retries.
    assert calm["proxmox_requests"]["total"] == proxmox["total"] - proxmox["retries"]
    for object_type in INVENTORY_TYPES:
        assert calm["counters"].get(object_type, {}).get("created", 0) == 0, object_type
    assert assert_consistent(netbox_server, cluster_id) == converged
