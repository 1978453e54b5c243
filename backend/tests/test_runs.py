"""The HTTP service's run registry: ordered events, followers that catch up and finish."""

import asyncio

import pytest

from proxbox_backend.runs import FINISHED, RUNNING, MemoryRunStore, RunActive


@pytest.mark.asyncio
async def test_followers_get_past_and_future_events_in_order_then_stop():
    store = MemoryRunStore()
    run = await store.start("3")
    run.record({"event": "started"})
    assert (await store.get(run.id))["state"] == RUNNING
    with pytest.raises(RunActive) as refused:
        await store.start("3")
    assert refused.value.run_id == run.id

    async def follow():
        return [e["event"] async for e in store.follow(run.id)]

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    run.record({"event": "stage", "stage": "nodes"})
    run.record({"event": "finished", "report": {"ok": True}})
    assert await asyncio.wait_for(follower, 1) == ["started", "stage", "finished"]
    state = await store.get(run.id)
    assert state["state"] == FINISHED and state["report"] == {"ok": True}
    assert (await store.start("3")).id != run.id  # the endpoint is free again
    # A late follower replays the whole run and ends.
    assert await asyncio.wait_for(follow(), 1) == ["started", "stage", "finished"]


@pytest.mark.asyncio
async def test_an_unexpected_answer_still_finishes_the_run_with_a_report():
    import httpx

    from proxbox_backend.clients.netbox import NetBoxClient
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret
    from proxbox_backend.service import SyncService

    # NetBox answers the endpoint lookup with something that is not an endpoint.
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"unexpected": 1}))
    netbox = NetBoxClient("http://netbox.test", Secret("t" * 40), transport=transport)
    settings = Settings(netbox_url="http://netbox.test", netbox_token=Secret("t" * 40))
    events = []
    report = await SyncService(settings, netbox=netbox).run(5, events.append)
    assert not report.ok and report.error.startswith("unexpected KeyError")
    assert events[-1]["event"] == "finished" and events[-1]["report"]["status"] == "failed"


def test_reports_and_sidecar_messages_are_scrubbed():
    """What a run shows or stores quotes remote answers: secrets in them are masked."""
    from proxbox_backend.service import RunReport, reflection

    report = RunReport(error="proxmox: GET https://sync:pw-in-url@pve:8006/ failed")
    report.tally.fail("ipam.ipaddress", "10.0.0.5/24", "echo: Authorization: Token " + "a" * 40)
    report.warnings.append('answer {"token_secret": "5d7c9a1e-1111"}')
    shown = report.as_dict()
    stored = reflection(report.tally, error=report.error)["message"]
    for text in (str(shown), stored):
        assert "pw-in-url" not in text and "a" * 40 not in text
    assert "5d7c9a1e" not in str(shown)
    assert shown["failures"][0]["label"] == "10.0.0.5/24"
    assert report.tally.failures[0].reason.endswith("a" * 40)  # the domain keeps its facts


@pytest.mark.asyncio
async def test_redis_keeps_a_bounded_history_of_runs_that_expire(redis_url):
    """A loop of POST /sync (a fuzzer) leaves at most `history` runs, each with a TTL;
    a run still going is never the one forgotten."""
    from proxbox_backend.runs import HISTORY_TTL, RUNS_KEY, RedisRunStore

    store = RedisRunStore(redis_url, history=3)
    try:
        going = await store.start("endpoint-still-syncing")
        going.record({"event": "started"})
        finished = []
        for number in range(6):
            run = await store.start(f"endpoint-{number}")
            run.record({"event": "finished", "report": {"ok": True}})
            await run.finish()
            finished.append(run.id)
        kept = set(await store.redis.zrange(RUNS_KEY, 0, -1))
        assert kept == {going.id, *finished[-2:]}
        assert [await store.get(run_id) for run_id in finished[:-2]] == [None] * 4
        run_keys = [key async for key in store.redis.scan_iter("proxbox-backend:run:*")]
        assert sorted(run_keys) == sorted(
            key
            for run_id in (going.id, *finished[-2:])
            for key in (f"proxbox-backend:run:{run_id}", f"proxbox-backend:run:{run_id}:events")
        )
        for key in [*run_keys, RUNS_KEY]:
            assert 0 < await store.redis.ttl(key) <= HISTORY_TTL
        assert (await store.get(going.id))["state"] == RUNNING
        going.record({"event": "finished", "report": {"ok": True}})
        await going.finish()
    finally:
        await store.close()


def test_a_sync_of_an_endpoint_netbox_does_not_have_is_404_and_records_nothing():
    import httpx
    from fastapi.testclient import TestClient

    from proxbox_backend.api import create_app
    from proxbox_backend.clients.netbox import NetBoxClient
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret
    from proxbox_backend.service import SyncService

    asked = []

    def netbox_answer(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.path, dict(request.url.params)))
        wanted = request.url.params.get("id")
        if wanted == "403":
            return httpx.Response(403, json={"detail": "You do not have permission."})
        if request.url.path.endswith("/endpoints/proxmox/") and wanted is not None:
            count = 1 if wanted == "7" else 0
            return httpx.Response(200, json={"count": count, "results": [{"id": 7}][:count]})
        return httpx.Response(404, json={"detail": "Not found."})

    netbox = NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(netbox_answer)
    )
    settings = Settings(netbox_url="http://netbox.test", netbox_token=Secret("t" * 40))
    app = create_app(settings, SyncService(settings, netbox=netbox), api_token="b" * 32)
    auth = {"Authorization": "Bearer " + "b" * 32}
    with TestClient(app) as client:
        unknown = client.post("/sync/999999", headers=auth)
        assert unknown.status_code == 404
        assert unknown.json() == {"detail": "no Proxmox endpoint with id 999999 in NetBox"}
        assert asked == [
            (
                "/api/plugins/proxbox/endpoints/proxmox/",
                {"id": "999999", "brief": "1", "limit": "1"},
            )
        ]
        assert app.state.runs.runs == {}
        beyond = client.post(f"/sync/{2**63}", headers=auth)
        assert beyond.status_code == 422 and beyond.json()["detail"][0]["loc"] == [
            "path",
            "endpoint_id",
        ]
        refused = client.post("/sync/403", headers=auth)
        assert refused.status_code == 502
        assert refused.json()["detail"].startswith(
            "NetBox could not say whether endpoint 403 exists: "
        )
        assert app.state.runs.runs == {}
        started = client.post("/sync/7", headers=auth)
        assert started.status_code == 202
        assert list(app.state.runs.runs) == [started.json()["run_id"]]
