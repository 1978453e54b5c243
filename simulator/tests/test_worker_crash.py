"""A worker process killed mid-task: the task is reclaimed and finishes exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from proxbox_processes import interruptible, wait_until
from simtest_support import create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.simulation.clock import RealClock
from proxmox_simulator.tasks.service import enqueue

LEASE = 1.0


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
        preexec_fn=interruptible,
    )


async def _enqueue_reboot(url: str) -> tuple[str, int]:
    conn = await db.connect(url)
    try:
        vmid = await conn.fetchval("SELECT min(vmid) FROM guests WHERE type = 'qemu'")
        await conn.execute("UPDATE guests SET status = 'running' WHERE vmid = $1", vmid)
        async with conn.transaction():
            upid = await enqueue(
                conn,
                RealClock(),
                node="pve",
                task_type="qmreboot",
                task_id=str(vmid),
                principal=Principal("root@pam"),
                payload={"vmid": vmid, "kind": "qemu", "action": "reboot"},
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


def _started(proc: subprocess.Popen) -> None:
    """Block until the worker reports it is running (imports take a while under load)."""
    line = proc.stdout.readline().decode()
    assert "running" in line, line


@pytest.mark.timeout(120)
def test_killed_worker_task_is_reclaimed_and_finished_once(crash_db):
    """Three workers compete; the one holding the task is killed mid-task.

    The task (a 4 s reboot) outlasts several leases after the reclaim, so the
    reclaiming worker finishes it only if it keeps renewing its lease: with
    renewal broken, a third worker would reclaim it again (attempts == 3).
    """
    workers = {name: _worker(crash_db, name) for name in ("w1", "w2", "w3")}
    try:
        for proc in workers.values():
            _started(proc)
        upid, vmid = run(_enqueue_reboot(crash_db))
        claimed = wait_until(
            lambda: (s := run(_snapshot(crash_db, upid, vmid)))[0]["state"] == "running" and s,
            20,
            "the first claim",
            interval=0.05,
        )
        doomed = claimed[0]["lease_owner"]
        workers[doomed].send_signal(signal.SIGKILL)
        workers[doomed].wait(timeout=10)
        done = wait_until(
            lambda: (s := run(_snapshot(crash_db, upid, vmid)))[0]["state"] == "stopped" and s,
            30,
            "the reclaimed task to finish",
            interval=0.05,
        )
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in workers.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    task, events, status, locks = done
    assert task["exitstatus"] == "OK" and task["attempts"] == 2
    assert [kind for kind, _ in events] == ["created", "claimed", "reclaimed", "finished"]
    rescuer = events[2][1]
    assert events[1][1] == doomed and rescuer != doomed and events[3][1] == rescuer
    assert status == "running" and locks == 0
