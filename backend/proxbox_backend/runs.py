"""Sync runs started through the HTTP service: state, event log, subscribers."""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

QUEUED, RUNNING, FINISHED = "queued", "running", "finished"
HISTORY = 200  # finished runs kept for GET /runs/{id}


@dataclass
class Run:
    id: str
    endpoint: str
    state: str = QUEUED
    events: list[dict] = field(default_factory=list)
    report: dict | None = None
    # Replaced on every event: followers wait on the current one.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "endpoint": self.endpoint,
            "state": self.state,
            "events": len(self.events),
            "report": self.report,
        }


class RunRegistry:
    def __init__(self):
        self.runs: OrderedDict[str, Run] = OrderedDict()

    def active_for(self, endpoint: str) -> Run | None:
        return next(
            (r for r in self.runs.values() if r.endpoint == endpoint and r.state != FINISHED),
            None,
        )

    def new(self, endpoint: str) -> Run:
        run = Run(uuid.uuid4().hex, endpoint)
        self.runs[run.id] = run
        finished = [r.id for r in self.runs.values() if r.state == FINISHED]
        for old in finished[: max(0, len(finished) - HISTORY)]:
            del self.runs[old]
        return run

    def get(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    def record(self, run: Run, event: dict) -> None:
        """Synchronous, so events keep the order the sync emitted them in."""
        run.events.append(event)
        if event.get("event") == "finished":
            run.state, run.report = FINISHED, event["report"]
        elif run.state == QUEUED:
            run.state = RUNNING
        wake, run.changed = run.changed, asyncio.Event()
        wake.set()

    async def follow(self, run: Run):
        """Every event of the run, past ones first, until it finishes."""
        position = 0
        while True:
            while position < len(run.events):
                position += 1
                yield run.events[position - 1]
            if run.state == FINISHED:
                return
            await run.changed.wait()
