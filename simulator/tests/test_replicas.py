"""Two simulator processes on one database: one task queue, one state.

Real processes (``proxmox-simulator serve`` twice), tasks enqueued through both
concurrently; every task is claimed and finished exactly once, both replicas'
workers take part, and what one replica writes the other serves.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, Session, create_database, drop_database, run

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings
from proxmox_simulator.repositories import db
from proxmox_simulator.server import SimulatorProcess

ROUNDS = 3


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    url = create_database("replicas")
    run(seed_database(Settings(database_url=url), "small", 8, ROOT_PASSWORD))
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("replicas"),
        clock="accelerated:10",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
        lab_enabled=True,
    )
    with SimulatorProcess(settings) as one, SimulatorProcess(settings) as two:
        yield url, one, two
    drop_database(url)


def _events(url):
    async def fetch():
        conn = await db.connect(url)
        try:
            return await conn.fetch("SELECT upid, kind, worker FROM task_events ORDER BY id")
        finally:
            await conn.close()

    return run(fetch())


def test_two_replicas_share_the_queue_and_the_state(replicas):
    url, one, two = replicas
    clients = [httpx.Client(base_url=p.base_url + "/api2/json", timeout=60) for p in (one, two)]
    try:
        sessions = [Session(c) for c in clients]
        guests = [
            (g["node"], g["vmid"])
            for g in sessions[0].get("/cluster/resources", params={"type": "vm"}).json()["data"]
            if g["type"] == "qemu"
        ]
        assert len(guests) >= 4

        def churn(index: int) -> list[str]:
            node, vmid = guests[index]
            upids = []
            for round_ in range(ROUNDS):
                # Alternate the replica a guest's tasks are enqueued through.
                pve = sessions[(index + round_) % 2]
                response = pve.post(
                    f"/nodes/{node}/qemu/{vmid}/config", data={"description": f"round {round_}"}
                )
                assert response.status_code == 200, response.text
                upids.append(response.json()["data"])
                assert sessions[round_ % 2].wait(upids[-1], timeout=60)["exitstatus"] == "OK"
            return upids

        with ThreadPoolExecutor(len(guests)) as pool:
            upids = [u for batch in pool.map(churn, range(len(guests))) for u in batch]

        events = [e for e in _events(url) if e["upid"] in set(upids)]
        kinds = Counter((e["upid"], e["kind"]) for e in events)
        for upid in upids:
            assert kinds[(upid, "claimed")] == 1, upid
            assert kinds[(upid, "finished")] == 1, upid
            assert kinds[(upid, "reclaimed")] == 0, upid
        # Worker IDs are host:pid:suffix; both processes' workers ran some of them.
        claimers = {e["worker"].split(":")[1] for e in events if e["kind"] == "claimed"}
        assert len(claimers) == 2, claimers

        # Each replica serves what the other wrote.
        node, vmid = guests[0]
        for pve in sessions:
            config = pve.get(f"/nodes/{node}/qemu/{vmid}/config").json()["data"]
            assert config["description"] == f"round {ROUNDS - 1}"
        assert sessions[0].post("/pools", data={"poolid": "replicated"}).status_code == 200
        assert sessions[1].get("/pools/replicated").status_code == 200
        assert sessions[1].delete("/pools/replicated").status_code == 200
        assert sessions[0].get("/pools/replicated").status_code != 200

        # A fault scenario enabled through one replica applies on the other.
        with (
            httpx.Client(base_url=one.base_url) as lab,
            httpx.Client(base_url=two.base_url) as other,
        ):
            assert lab.post("/ui/api/faults", json={"name": "quorum-loss"}).status_code == 200
            try:
                deadline = time.monotonic() + 10
                while other.get("/ui/api/faults").json()["data"]["active"] is None:
                    assert time.monotonic() < deadline, "the other replica never saw the scenario"
                    time.sleep(0.05)
                refused = sessions[1].post("/pools", data={"poolid": "noquorum"})
                assert refused.status_code == 500
                assert refused.reason_phrase == "cluster not ready - no quorum?"
            finally:
                lab.delete("/ui/api/faults")
    finally:
        for client in clients:
            client.close()
