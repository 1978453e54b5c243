"""Chaos that converges: a sync killed with SIGKILL half-way leaves NetBox without
duplicates or dangling relations, and the next run finishes the job, counts exactly
what it wrote, and reaches the state an undisturbed sync reaches; a simulator task
worker killed mid-task during a sync has its task reclaimed and run once, and the
sync converges.

Real processes: NetBox (gunicorn), simulators (`serve --tls`) on a 30-guest profile
(one with its task workers as separate `worker` processes), and `proxbox-sync run` as
a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from chaos_support import (
    INVENTORY_TYPES,
    assert_consistent,
    assert_converged,
    endpoint_cluster,
    settled,
    sync_command,
    sync_midway,
    sync_state,
)
from proxbox_processes import stop_process
from psycopg.rows import dict_row
from sync_fixtures import (
    Simulator,
    create_endpoint,
    create_site,
    expected_inventory,
    server_dsn,
)


@pytest.fixture(scope="module")
def chaos_simulator(sync_workdir):
    simulator = Simulator("chaos", "compact", 17, sync_workdir)
    try:
        simulator.start().renumber("10.91.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def chaos_endpoint(netbox_server, chaos_simulator):
    site = create_site(netbox_server, "pbsync-chaos")
    return create_endpoint(netbox_server, "pve-chaos", chaos_simulator, site=site)


def test_sync_killed_midway_converges_on_rerun(netbox_server, chaos_simulator, chaos_endpoint):
    expected = expected_inventory(chaos_simulator.inventory())
    argv, env = sync_command(netbox_server, chaos_simulator, chaos_endpoint["name"])
    run = sync_midway(netbox_server, chaos_simulator, chaos_endpoint["name"])
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL, "the run ended before it could be killed midway"
    settled(netbox_server)

    cluster_id = endpoint_cluster(netbox_server, chaos_endpoint["id"])
    partial = assert_consistent(netbox_server, cluster_id)
    synced = {part: len(partial[part]) for part in INVENTORY_TYPES.values()}
    wanted = {part: len(expected[part]) for part in INVENTORY_TYPES.values()}
    assert 0 < sum(synced.values()) < sum(wanted.values()), (synced, wanted)
    # The killed run claims no success it did not have.
    assert sync_state(netbox_server, cluster_id)["status"]["value"] != "succeeded"

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    report = json.loads(rerun.stdout) if rerun.stdout.strip() else {}
    assert rerun.returncode == 0, (
        report.get("failures"),
        report.get("error"),
        rerun.stderr[-3000:],
    )
    assert report["ok"], report
    assert_converged(netbox_server, cluster_id, expected, partial, report["counters"])


# -- the simulator's task worker killed mid-task during a sync --------------------------------

TASK_LEASE = 1.0


@pytest.fixture(scope="module")
def task_simulator(sync_workdir):
    """The HTTP server without task workers: tasks run in `worker` processes we can kill."""
    simulator = Simulator("tasks", "compact", 18, sync_workdir, PROXMOX_SIMULATOR_TASK_WORKERS="0")
    try:
        simulator.start()
        # Renumbering reloads the nodes' networks: tasks, which need a worker here.
        setup_worker = _task_worker(simulator, "setup")
        try:
            simulator.renumber("10.93.0")
        finally:
            stop_process(setup_worker)
        yield simulator
    finally:
        simulator.stop()


def _task_worker(simulator, name: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "proxmox_simulator.cli", "worker", "--clock", "real"]
    argv += ["--lease-seconds", str(TASK_LEASE), "--workers", "1", "--worker-id", name]
    process = subprocess.Popen(
        argv, env=simulator.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    line = process.stdout.readline().decode()  # imports take a while under load
    assert "running" in line, line
    return process


def _task(simulator, upid: str) -> dict:
    with psycopg.connect(server_dsn(simulator.database), row_factory=dict_row) as conn:
        task = conn.execute(
            "SELECT state, exitstatus, lease_owner, attempts FROM tasks WHERE upid = %s", (upid,)
        ).fetchone()
        events = conn.execute(
            "SELECT kind, worker FROM task_events WHERE upid = %s ORDER BY id", (upid,)
        ).fetchall()
    return {**task, "events": [(e["kind"], e["worker"]) for e in events]}


def _wait_task(simulator, upid: str, done, what: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done(task := _task(simulator, upid)):
            return task
        time.sleep(0.05)
    raise AssertionError(f"{what}: {task}")


def test_task_worker_killed_mid_task_during_a_sync(netbox_server, task_simulator):
    """A reboot issued while the sync runs; its worker is killed mid-task; the other worker
    reclaims it after the lease and finishes it once; the sync converges regardless."""
    expected = expected_inventory(task_simulator.inventory())
    site = create_site(netbox_server, "pbsync-chaos-tasks")
    endpoint = create_endpoint(netbox_server, "pve-chaos-tasks", task_simulator, site=site)
    running = next(
        g["resource"]
        for (kind, _), g in sorted(task_simulator.inventory()["guests"].items())
        if kind == "qemu" and g["resource"]["status"] == "running"
    )
    workers = {name: _task_worker(task_simulator, name) for name in ("w1", "w2")}
    argv, env = sync_command(netbox_server, task_simulator, endpoint["name"])
    run = sync_midway(netbox_server, task_simulator, endpoint["name"])
    try:
        with task_simulator.api() as pve:
            response = pve.post(f"/nodes/{running['node']}/qemu/{running['vmid']}/status/reboot")
            assert response.status_code == 200, response.text
            upid = response.json()["data"]
        claimed = _wait_task(
            task_simulator, upid, lambda t: t["state"] == "running", "the task's first claim"
        )
        doomed = claimed["lease_owner"]
        workers[doomed].send_signal(signal.SIGKILL)
        workers[doomed].wait(timeout=10)
        assert run.poll() is None, "the sync ended before the worker was killed"
        done = _wait_task(task_simulator, upid, lambda t: t["state"] == "stopped", "the reclaim")
        stdout, stderr = run.communicate(timeout=600)
    finally:
        for process in [*workers.values(), run]:
            if process.poll() is None:
                process.kill()
                process.wait()
    # Reclaimed once, finished once, by the survivor.
    assert done["exitstatus"] == "OK" and done["attempts"] == 2, done
    assert [kind for kind, _ in done["events"]] == ["created", "claimed", "reclaimed", "finished"]
    assert done["events"][1][1] == doomed != done["events"][3][1] == done["events"][2][1]

    assert run.returncode == 0, stderr.decode()[-3000:]
    report = json.loads(stdout)
    cluster_id = endpoint_cluster(netbox_server, endpoint["id"])
    empty = {part: set() for part in (*INVENTORY_TYPES.values(), "node_ips")}
    assert_converged(netbox_server, cluster_id, expected, empty, report["counters"])
    # And a rerun changes nothing: the state an undisturbed sync reaches.
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = assert_consistent(netbox_server, cluster_id)
    assert_converged(
        netbox_server, cluster_id, expected, after, json.loads(rerun.stdout)["counters"]
    )
