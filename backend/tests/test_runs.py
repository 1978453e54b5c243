"""The HTTP service's run registry: ordered events, followers that catch up and finish."""

import asyncio

import pytest

from proxbox_backend.runs import FINISHED, RUNNING, RunRegistry


@pytest.mark.asyncio
async def test_followers_get_past_and_future_events_in_order_then_stop():
    registry = RunRegistry()
    run = registry.new("3")
    registry.record(run, {"event": "started"})
    assert run.state == RUNNING and registry.active_for("3") is run

    async def follow():
        return [e["event"] async for e in registry.follow(run)]

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    registry.record(run, {"event": "stage", "stage": "nodes"})
    registry.record(run, {"event": "finished", "report": {"ok": True}})
    assert await asyncio.wait_for(follower, 1) == ["started", "stage", "finished"]
    assert run.state == FINISHED and run.report == {"ok": True}
    assert registry.active_for("3") is None
    # A late follower replays the whole run and ends.
    assert await asyncio.wait_for(follow(), 1) == ["started", "stage", "finished"]
