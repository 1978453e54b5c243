"""Concurrent writers against real PostgreSQL: task-log appends and Idempotency-Key races.

Each test fires its requests at the same moment (``asyncio.gather`` over separate
connections, or over real HTTP to the session's running simulator) so that the
races the database has to settle actually happen.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx
from simtest_support import ROOT_PASSWORD, run

from proxmox_simulator.domain import idempotency_service
from proxmox_simulator.repositories import tasks as task_repo

APPENDERS = 400


def _api(server) -> str:
    return server.base_url + "/api2/json"


def test_concurrent_task_log_appends_keep_every_line_numbered_once(server, root, unique_vmid):
    upid = root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": 512}).json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    before = root.get(f"/nodes/pve1/tasks/{upid}/log", params={"limit": 5000}).json()

    async def append_all() -> list[BaseException | None]:
        pool = await asyncpg.create_pool(server.settings.database_url, min_size=8, max_size=8)
        try:

            async def append(i: int) -> None:
                async with pool.acquire() as conn:
                    await task_repo.append_log(conn, upid, [f"progress line {i}"])

            return await asyncio.gather(
                *(append(i) for i in range(APPENDERS)), return_exceptions=True
            )
        finally:
            await pool.close()

    outcomes = run(append_all())
    failures = [o for o in outcomes if o is not None]
    assert not failures, f"{len(failures)} of {APPENDERS} appends failed: {failures[0]!r}"

    after = root.get(f"/nodes/pve1/tasks/{upid}/log", params={"limit": 5000}).json()
    numbers = [line["n"] for line in after["data"]]
    assert after["total"] == before["total"] + APPENDERS
    assert numbers == list(range(1, after["total"] + 1))
    appended = {line["t"] for line in after["data"][before["total"] :]}
    assert appended == {f"progress line {i}" for i in range(APPENDERS)}
    root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])


async def _logged_in(client: httpx.AsyncClient) -> dict:
    response = await client.post(
        "/access/ticket", data={"username": "root@pam", "password": ROOT_PASSWORD}
    )
    data = response.json()["data"]
    return {
        "Cookie": f"PVEAuthCookie={data['ticket']}",
        "CSRFPreventionToken": data["CSRFPreventionToken"],
    }


def test_simultaneous_requests_with_one_idempotency_key_get_the_first_answer(server, root):
    """Ten trials of two simultaneous creates sharing a key: one task, one UPID, no 500."""
    vmids = [7_000_000 + uuid.uuid4().int % 900_000 for _ in range(10)]

    async def trials() -> list[tuple[httpx.Response, httpx.Response]]:
        async with httpx.AsyncClient(base_url=_api(server), verify=False, timeout=30) as client:
            auth = await _logged_in(client)
            pairs = []
            for vmid in vmids:
                headers = {**auth, "Idempotency-Key": f"create-twice-{vmid}"}
                body = {"vmid": vmid, "memory": 512, "name": f"twice-{vmid}"}
                pairs.append(
                    tuple(
                        await asyncio.gather(
                            client.post("/nodes/pve1/qemu", data=body, headers=headers),
                            client.post("/nodes/pve1/qemu", data=body, headers=headers),
                        )
                    )
                )
            return pairs

    for vmid, (first, second) in zip(vmids, run(trials()), strict=True):
        assert first.status_code == 200, (vmid, first.status_code, first.text)
        assert second.status_code == 200, (vmid, second.status_code, second.text)
        upid = first.json()["data"]
        assert second.json()["data"] == upid
        assert root.wait(upid)["exitstatus"] == "OK"
        created = root.get("/nodes/pve1/tasks", params={"vmid": vmid, "typefilter": "qmcreate"})
        assert [t["upid"] for t in created.json()["data"]] == [upid]
        root.wait(root.delete(f"/nodes/pve1/qemu/{vmid}").json()["data"])


def test_a_failed_keyed_request_leaves_its_key_free_for_the_retry(server, root, unique_vmid):
    """A key only ever replays a success: the request that failed is run again on retry."""
    headers = {"Idempotency-Key": f"retry-after-failure-{unique_vmid}"}
    refused = root.post(
        "/nodes/pve1/qemu",
        data={"vmid": unique_vmid, "scsi0": "no-such-storage:4"},
        headers=dict(headers),
    )
    assert refused.status_code == 500, refused.text
    assert refused.reason_phrase == "storage 'no-such-storage' does not exist"
    retried = root.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": 512}, headers=dict(headers)
    )
    assert retried.status_code == 200, retried.text
    upid = retried.json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    again = root.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": 512}, headers=dict(headers)
    )
    assert again.json()["data"] == upid
    root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])


def test_keyed_synchronous_write_replays_its_answer_instead_of_writing_twice(server, root):
    """A write without a task (a pool) run twice at once with one key creates it once."""
    poolid = f"idem{uuid.uuid4().hex[:8]}"

    async def twice() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=_api(server), verify=False, timeout=30) as client:
            auth = await _logged_in(client)
            headers = {**auth, "Idempotency-Key": f"pool-{poolid}"}
            return await asyncio.gather(
                *(client.post("/pools", data={"poolid": poolid}, headers=headers) for _ in range(2))
            )

    answers = run(twice())
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].json() == answers[1].json()
    pools = [p["poolid"] for p in root.get("/pools").json()["data"]]
    assert pools.count(poolid) == 1
    # Without the key the same write is a new request, refused because the pool exists.
    assert root.post("/pools", data={"poolid": poolid}).status_code == 500
    root.delete(f"/pools/{poolid}")


def test_a_key_held_by_an_unfinished_request_answers_409_and_writes_nothing(
    server, root, unique_vmid, monkeypatch
):
    """Another replica's request still owns the key: the duplicate waits, then gets a 409."""
    key = f"busy-elsewhere-{unique_vmid}"
    path = f"/api2/json/nodes/pve1/qemu/{unique_vmid}/status/start"

    async def claim_elsewhere() -> None:
        conn = await asyncpg.connect(server.settings.database_url)
        try:
            await conn.execute(
                "INSERT INTO idempotency_claims (key, request) VALUES ($1, $2)",
                f"root@pam:{key}",
                f"POST {path}",
            )
        finally:
            await conn.close()

    run(claim_elsewhere())
    monkeypatch.setattr(idempotency_service, "ANSWER_WAIT_SECONDS", 0.3)
    busy = root.post(
        f"/nodes/pve1/qemu/{unique_vmid}/status/start", headers={"Idempotency-Key": key}
    )
    assert busy.status_code == 409, busy.text
    assert "still in progress" in busy.reason_phrase
    # The same key on another request is refused as such, at once.
    other = root.post(
        "/pools", data={"poolid": f"p{unique_vmid}"}, headers={"Idempotency-Key": key}
    )
    assert other.status_code == 409 and "another request" in other.reason_phrase
    assert f"p{unique_vmid}" not in [p["poolid"] for p in root.get("/pools").json()["data"]]
