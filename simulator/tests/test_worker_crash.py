"""A worker process killed mid-task: the task is reclaimed and finishes exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from simtest_support import create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.simulation.clock import RealClock
from proxmox_simulator.tasks.service import enqueue

LEASE = 1.5


@pytest.fixture
def crash_db():
    url = create_database("crash")
    run(seed_database(Settings(database_url=url), "standalone", 1, "pw"))
    yield url
    drop_database(url)


def _worker(url: str, worker_id: str) -> subprocess.Popen:
    env = {**os.environ, "PROXMOX_SIMULATOR_DATABASE_URL": url}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxmox_simulator.cli",
            "worker",
            "--clock",
            "real",
            "--lease-seconds",
            str(LEASE),
            "--workers",
            "1",
            "--worker-id",
            worker_id,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def _enqueue_shutdown(url: str) -> tuple[str, int]:
    conn = await db.connect(url)
    try:
        vmid = await conn.fetchval("SELECT min(vmid) FROM guests WHERE type = 'qemu'")
        await conn.execute("UPDATE guests SET status = 'running' WHERE vmid = $1", vmid)
        async with conn.transaction():
            upid = await enqueue(
                conn,
                RealClock(),
                node="pve",
                task_type="qmshutdown",
                task_id=str(vmid),
                principal=Principal("root@pam"),
                payload={"vmid": vmid, "kind": "qemu", "action": "shutdown"},
                lock=f"qemu-server/lock-{vmid}",
            )
        return upid, vmid
    finally:
        await conn.close()


async def _snapshot(url: str, upid: str, vmid: int):
    conn = await db.connect(url)
    try:
        task = await task_repo.get(conn, upid)
        events = [(e["kind"], e["worker"]) for e in await task_repo.events(conn, upid)]
        status = await conn.fetchval("SELECT status FROM guests WHERE vmid = $1", vmid)
        locks = await conn.fetchval("SELECT count(*) FROM resource_locks")
        return task, events, status, locks
    finally:
        await conn.close()


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _started(proc: subprocess.Popen) -> None:
    """Block until the worker reports it is running (imports take a while under load)."""
    line = proc.stdout.readline().decode()
    assert "running" in line, line


@pytest.mark.timeout(120)
def test_killed_worker_task_is_reclaimed_and_finished_once(crash_db):
    first = _worker(crash_db, "doomed")
    try:
        _started(first)
        # qmshutdown takes 3 simulated seconds on the real clock: time to kill mid-task.
        upid, vmid = run(_enqueue_shutdown(crash_db))
        _wait_for(
            lambda: run(_snapshot(crash_db, upid, vmid))[0]["state"] == "running", 20, "first claim"
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    task, events, status, _ = run(_snapshot(crash_db, upid, vmid))
    assert task["state"] == "running" and task["lease_owner"] == "doomed" and status == "running"

    second = _worker(crash_db, "rescuer")
    try:
        _started(second)
        done = _wait_for(
            lambda: (s := run(_snapshot(crash_db, upid, vmid)))[0]["state"] == "stopped" and s,
            30,
            "reclaimed task to finish",
        )
    finally:
        second.send_signal(signal.SIGINT)
        try:
            second.wait(timeout=10)
        except subprocess.TimeoutExpired:
            second.kill()
    task, events, status, locks = done
    assert task["exitstatus"] == "OK" and task["attempts"] == 2
    assert [kind for kind, _ in events] == ["created", "claimed", "reclaimed", "finished"]
    assert events[1][1] == "doomed" and events[2][1] == "rescuer" and events[3][1] == "rescuer"
    assert status == "stopped" and locks == 0
