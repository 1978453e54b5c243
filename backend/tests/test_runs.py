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
