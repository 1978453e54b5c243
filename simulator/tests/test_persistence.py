"""Repositories, migrations, seeds and the task queue against real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from simtest_support import _admin, create_database, drop_database, run

from proxmox_simulator.cli import migrate_database, seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import Conflict
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.repositories.migrations import is_ready, latest_packaged_version
from proxmox_simulator.simulation.clock import RealClock
from proxmox_simulator.simulation.seeds import PROFILES, plan
from proxmox_simulator.tasks.service import enqueue

ROOT = Principal("root@pam")


@pytest.fixture(scope="module")
def scratch_url():
    url = create_database("persist")
    run(seed_database(Settings(database_url=url), "small", 3, "pw"))
    yield url
    drop_database(url)


async def _conn(url):
    return await db.connect(url)


def test_migrations_are_idempotent_and_gate_readiness(scratch_url):
    assert run(migrate_database(Settings(database_url=scratch_url))) == []

    async def check(url):
        conn = await _conn(url)
        try:
            return await is_ready(conn)
        finally:
            await conn.close()

    assert run(check(scratch_url)) == (True, latest_packaged_version(), latest_packaged_version())
    # An empty database connects fine but is not ready.
    empty = scratch_url.rsplit("/", 1)[0] + "/pvesim_test_empty_probe"
    run(_admin('DROP DATABASE IF EXISTS "pvesim_test_empty_probe"'))
    run(_admin('CREATE DATABASE "pvesim_test_empty_probe"'))
    try:
        assert run(check(empty))[0] is False
    finally:
        drop_database(empty)


def test_seed_plans_are_deterministic_and_unique():
    profile = PROFILES["medium"]
    assert plan(profile, 1) == plan(profile, 1)
    assert plan(profile, 1)["guests"] != plan(profile, 2)["guests"]
    big = plan(PROFILES["xlarge"], 1)
    guests = big["guests"]
    assert len(guests) == 10_000 and len(big["nodes"]) == 16
    assert len({g["vmid"] for g in guests}) == 10_000
    macs = [nic["hardware-address"] for g in guests for nic in g["interfaces"]]
    assert len(set(macs)) == len(macs) == 10_000
    ips = [a["ip-address"] for g in guests for nic in g["interfaces"] for a in nic["ip-addresses"]]
    assert len(set(ips)) == len(ips) == 10_000
    assert all(g["config"].get("scsi0") or g["config"].get("rootfs") for g in guests)


def test_standalone_profile_has_no_cluster():
    url = create_database("standalone")
    try:
        summary = run(seed_database(Settings(database_url=url), "standalone", 1, "pw"))
        assert summary["nodes"] == 1 and summary["cluster"] is None

        async def read():
            conn = await _conn(url)
            try:
                return await conn.fetchval("SELECT name FROM cluster"), await conn.fetchval(
                    "SELECT node FROM nodes"
                )
            finally:
                await conn.close()

        assert run(read()) == (None, "pve")
    finally:
        drop_database(url)


def test_vmid_uniqueness_is_a_database_constraint(scratch_url):
    async def scenario():
        conn = await _conn(scratch_url)
        try:
            existing = await conn.fetchval("SELECT min(vmid) FROM guests")
            with pytest.raises(guest_repo.VmidTaken):
                await guest_repo.insert(
                    conn,
                    vmid=existing,
                    kind="lxc",
                    node="pve1",
                    name="dup",
                    template=False,
                    pool=None,
                    config={},
                    interfaces=[],
                    maxmem=1,
                    maxdisk=1,
                    cpus=1,
                )
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(
                    "INSERT INTO guests (vmid, type, node, name, status, config, maxmem, maxdisk, cpus)"
                    " VALUES (99, 'qemu', 'pve1', 'x', 'stopped', '{}', 1, 1, 1)"
                )
        finally:
            await conn.close()

    run(scenario())


def test_stale_writer_loses_optimistic_update(scratch_url):
    async def scenario():
        conn = await _conn(scratch_url)
        try:
            row = await conn.fetchrow("SELECT * FROM guests ORDER BY vmid LIMIT 1")
            kwargs = dict(
                vmid=row["vmid"],
                config=dict(row["config"]),
                name=row["name"],
                maxmem=row["maxmem"],
                maxdisk=row["maxdisk"],
                cpus=row["cpus"],
                interfaces=row["interfaces"],
                pool=row["pool"],
            )
            new_version = await guest_repo.update_config(
                conn, expected_version=row["version"], **kwargs
            )
            assert new_version == row["version"] + 1
            with pytest.raises(Conflict, match="file changed by other user"):
                await guest_repo.update_config(conn, expected_version=row["version"], **kwargs)
        finally:
            await conn.close()

    run(scenario())


def test_task_creation_is_atomic_with_lock_and_idempotency(scratch_url):
    clock = RealClock()

    async def scenario():
        conn = await _conn(scratch_url)
        try:
            count = "SELECT count(*) FROM tasks"
            before = await conn.fetchval(count)
            # A failure later in the same transaction leaves no task, event or lock behind.
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await enqueue(
                        conn,
                        clock,
                        node="pve1",
                        task_type="qmstart",
                        task_id="9001",
                        principal=ROOT,
                        payload={},
                        lock="qemu-server/lock-9001",
                    )
                    raise RuntimeError("caller failed after enqueue")
            assert await conn.fetchval(count) == before
            assert await conn.fetchval("SELECT count(*) FROM resource_locks") == 0
            async with conn.transaction():
                first = await enqueue(
                    conn,
                    clock,
                    node="pve1",
                    task_type="qmstart",
                    task_id="9001",
                    principal=ROOT,
                    payload={},
                    lock="qemu-server/lock-9001",
                    idempotency_key="k-1",
                )
            async with conn.transaction():
                again = await enqueue(
                    conn,
                    clock,
                    node="pve1",
                    task_type="qmstart",
                    task_id="9001",
                    principal=ROOT,
                    payload={},
                    lock="qemu-server/lock-9001",
                    idempotency_key="k-1",
                )
            assert again == first
            with pytest.raises(Conflict, match="can't lock file"):
                async with conn.transaction():
                    await enqueue(
                        conn,
                        clock,
                        node="pve1",
                        task_type="qmstop",
                        task_id="9001",
                        principal=ROOT,
                        payload={},
                        lock="qemu-server/lock-9001",
                    )
            row = await task_repo.get(conn, first)
            assert row["state"] == "queued"
            assert [e["kind"] for e in await task_repo.events(conn, first)] == ["created"]
            assert await conn.fetchval("SELECT upid FROM resource_locks") == first
            await conn.execute("TRUNCATE tasks CASCADE")
        finally:
            await conn.close()

    run(scenario())


def test_concurrent_claims_skip_locked_rows(scratch_url):
    clock = RealClock()

    async def scenario():
        pool = await db.create_pool(scratch_url, min_size=2, max_size=4)
        try:
            async with pool.acquire() as conn, conn.transaction():
                upids = {
                    await enqueue(
                        conn,
                        clock,
                        node="pve1",
                        task_type="qmstart",
                        task_id=str(9100 + i),
                        principal=ROOT,
                        payload={},
                    )
                    for i in range(2)
                }

            async def claim(worker):
                async with pool.acquire() as conn:
                    return await task_repo.claim(conn, worker, 30)

            a, b = await asyncio.gather(claim("w1"), claim("w2"))
            assert {a["upid"], b["upid"]} == upids
            assert a["lease_owner"] == "w1" and b["lease_owner"] == "w2"
            async with pool.acquire() as conn:
                assert await task_repo.claim(conn, "w3", 30) is None
                # Only the lease holder can finish; the other worker is refused.
                async with conn.transaction():
                    with pytest.raises(task_repo.LeaseLost):
                        await task_repo.finish(
                            conn,
                            upid=a["upid"],
                            worker_id="w2",
                            exitstatus="OK",
                            endtime=1,
                            warnings=0,
                        )
                await conn.execute("TRUNCATE tasks CASCADE")
        finally:
            await pool.close()

    run(scenario())


def test_the_demo_profile_shows_vlans_and_a_snapshot_chain_through_the_api(scratch_url, tmp_path):
    """What the demo's first sync should find: access VLANs on guest NICs and a guest
    with snapshots, in the shapes `qm config` and `qm listsnapshot` give."""
    import httpx
    from simtest_support import Session

    from proxmox_simulator.server import SimulatorServer

    settings = Settings(database_url=scratch_url, data_dir=tmp_path, task_workers=0)
    with (
        SimulatorServer(settings) as server,
        httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
    ):
        api = Session(client, password="pw")
        guests = api.get("/cluster/resources", params={"type": "vm"}).json()["data"]
        configs = {
            g["vmid"]: api.get(f"/nodes/{g['node']}/{g['type']}/{g['vmid']}/config").json()["data"]
            for g in guests
        }
        tagged = sorted(
            option for c in configs.values() for option in c["net0"].split(",") if "tag=" in option
        )
        (protected,) = [
            g["vmid"] for g in guests if configs[g["vmid"]].get("parent") == "after-upgrade"
        ]
        node = next(g["node"] for g in guests if g["vmid"] == protected)
        snapshots = api.get(f"/nodes/{node}/qemu/{protected}/snapshot").json()["data"]
        ha = api.get("/cluster/ha/resources").json()["data"]
    assert tagged == ["tag=10", "tag=20", "tag=30"]
    by_name = {s["name"]: s for s in snapshots}
    assert set(by_name) == {"before-upgrade", "after-upgrade", "current"}
    assert by_name["after-upgrade"]["parent"] == "before-upgrade"
    assert "parent" not in by_name["before-upgrade"]
    assert by_name["current"]["parent"] == "after-upgrade"
    assert [r["sid"] for r in ha] == [f"vm:{protected}"]
