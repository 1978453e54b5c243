"""Sync runs started through the HTTP service: state, event log, followers, and the
one-run-per-endpoint lease.

Two stores behind one interface (`start`, `get`, `follow`, and `ActiveRun.record` /
`finish`): `RedisRunStore` when PROXBOX_BACKEND_REDIS_URL is set, so every replica
answers for every run and the lease spans processes; `MemoryRunStore` for a single
process without Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from proxbox_backend.metrics import METRICS

QUEUED, RUNNING, FINISHED = "queued", "running", "finished"
HISTORY = 200  # finished runs a store keeps for GET /runs/{id} (memory and Redis)
HISTORY_TTL = 24 * 3600  # seconds a Redis store keeps a run's state and events
LEASE_TTL = 15.0  # seconds a crashed replica's endpoint lease outlives it
PREFIX = "proxbox-backend"
ABANDONED = {
    "ok": False,
    "status": "failed",
    "error": "the backend process running this sync stopped before it finished",
    "counters": {},
    "failures": [],
    "warnings": [],
}


class RunActive(Exception):
    """A run of the endpoint holds its lease (in this process or another)."""

    def __init__(self, run_id: str):
        super().__init__(f"a sync of this endpoint is running (run {run_id})")
        self.run_id = run_id


class RunStoreUnavailable(RuntimeError):
    """Redis does not answer: no run can be started or read."""


@contextlib.asynccontextmanager
async def _answering(url: str):
    from redis.exceptions import ConnectionError, TimeoutError

    from proxbox_redaction import redact_url

    try:
        yield
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise RunStoreUnavailable(
            f"PROXBOX_BACKEND_REDIS_URL={redact_url(url)} does not answer: {exc}"
        ) from None


async def check_store(url: str) -> None:
    store = RedisRunStore(url)
    try:
        async with _answering(url):
            await store.redis.ping()
    finally:
        await store.close()


def _next_state(state: str, event: dict) -> str:
    if event.get("event") == "finished":
        return FINISHED
    return RUNNING if state == QUEUED else state


def run_state(run_id: str, endpoint: str, state: str, events: int, report) -> dict:
    return {"id": run_id, "endpoint": endpoint, "state": state, "events": events, "report": report}


# ---------------------------------------------------------------- in process memory


@dataclass
class _MemoryRun:
    id: str
    endpoint: str
    state: str = QUEUED
    events: list[dict] = field(default_factory=list)
    report: dict | None = None
    # Replaced on every event: followers wait on the current one.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, event: dict) -> None:
        """Synchronous, so events keep the order the sync emitted them in."""
        self.events.append(event)
        self.state = _next_state(self.state, event)
        if self.state == FINISHED:
            self.report = event["report"]
        wake, self.changed = self.changed, asyncio.Event()
        wake.set()

    async def finish(self) -> None:
        pass


class MemoryRunStore:
    def __init__(self):
        self.runs: OrderedDict[str, _MemoryRun] = OrderedDict()

    async def start(self, endpoint: str) -> _MemoryRun:
        active = next(
            (r for r in self.runs.values() if r.endpoint == endpoint and r.state != FINISHED),
            None,
        )
        if active:
            raise RunActive(active.id)
        run = _MemoryRun(uuid.uuid4().hex, endpoint)
        self.runs[run.id] = run
        finished = [r.id for r in self.runs.values() if r.state == FINISHED]
        for old in finished[: max(0, len(finished) - HISTORY)]:
            del self.runs[old]
        return run

    async def get(self, run_id: str) -> dict | None:
        run = self.runs.get(run_id)
        if run is None:
            return None
        return run_state(run.id, run.endpoint, run.state, len(run.events), run.report)

    async def follow(self, run_id: str) -> AsyncIterator[dict]:
        """Every event of the run, past ones first, until it finishes."""
        run = self.runs[run_id]
        position = 0
        while True:
            while position < len(run.events):
                position += 1
                yield run.events[position - 1]
            if run.state == FINISHED:
                return
            await run.changed.wait()

    async def close(self) -> None:
        pass


# ---------------------------------------------------------------- in Redis

# Compare-and-set on the lease value: a run never renews or frees a lease that expired
# and was taken by another run meanwhile.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
# A run that is not finished while its lease is gone lost its process: finish it once,
# with a failed report, so pollers and followers on any replica stop waiting.
_ABANDON = """
local state = redis.call('hget', KEYS[1], 'state')
if not state or state == 'finished' then return 0 end
if redis.call('get', KEYS[3]) == ARGV[1] then return 0 end
redis.call('hset', KEYS[1], 'state', 'finished', 'report', ARGV[2])
redis.call('xadd', KEYS[2], '*', 'e', ARGV[3])
redis.call('expire', KEYS[1], ARGV[4])
redis.call('expire', KEYS[2], ARGV[4])
return 1
"""


def _run_key(run_id: str) -> str:
    return f"{PREFIX}:run:{run_id}"


def _events_key(run_id: str) -> str:
    return f"{PREFIX}:run:{run_id}:events"


def _lease_key(endpoint: str) -> str:
    return f"{PREFIX}:lease:{endpoint}"


# Every recorded run's id, scored by its start time: the oldest go beyond HISTORY.
RUNS_KEY = f"{PREFIX}:runs"


class _RedisRun:
    """A run this process executes: events are written in order by one writer task, and
    the endpoint's lease is renewed until `finish()`."""

    def __init__(self, store: RedisRunStore, run_id: str, endpoint: str):
        self.store, self.id, self.endpoint = store, run_id, endpoint
        self.state = QUEUED
        self._queue: asyncio.Queue[dict | None] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write())
        self._keeper = asyncio.create_task(self._keep())

    def record(self, event: dict) -> None:
        """Synchronous (the sync's callback): queued, written in emission order."""
        self._queue.put_nowait(event)

    async def _write(self) -> None:
        redis, ttl = self.store.redis, self.store.history_ttl
        while (event := await self._queue.get()) is not None:
            self.state = _next_state(self.state, event)
            pipe = redis.pipeline(transaction=True)
            pipe.xadd(_events_key(self.id), {"e": json.dumps(event)})
            pipe.hset(_run_key(self.id), "state", self.state)
            if self.state == FINISHED:
                pipe.hset(_run_key(self.id), "report", json.dumps(event["report"]))
            pipe.expire(_events_key(self.id), ttl)
            pipe.expire(_run_key(self.id), ttl)
            await pipe.execute()

    async def _keep(self) -> None:
        ttl = self.store.lease_ttl
        while True:
            await asyncio.sleep(ttl / 3)
            with contextlib.suppress(Exception):  # a Redis blip: the next renewal retries
                await self.store.redis.eval(
                    _RENEW, 1, _lease_key(self.endpoint), self.id, int(ttl * 1000)
                )

    async def finish(self) -> None:
        """Every event written, then the lease freed for the endpoint's next run."""
        self._queue.put_nowait(None)
        try:
            await self._writer
        finally:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            await self.store.redis.eval(_RELEASE, 1, _lease_key(self.endpoint), self.id)


class RedisRunStore:
    def __init__(
        self,
        url: str,
        lease_ttl: float = LEASE_TTL,
        history_ttl: int = HISTORY_TTL,
        poll_ms: int = 1000,
        history: int = HISTORY,
    ):
        import redis.asyncio

        self.url = url
        self.redis = redis.asyncio.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=5
        )
        self.lease_ttl, self.history_ttl, self.poll_ms = lease_ttl, history_ttl, poll_ms
        self.history = history

    async def start(self, endpoint: str) -> _RedisRun:
        async with _answering(self.url):
            return await self._start(endpoint)

    async def _start(self, endpoint: str) -> _RedisRun:
        run_id = uuid.uuid4().hex
        # The lease first: a state without its lease reads as an abandoned run.
        lease = _lease_key(endpoint)
        while not await self.redis.set(lease, run_id, nx=True, px=int(self.lease_ttl * 1000)):
            holder = await self.redis.get(lease)
            if holder is not None:  # else it expired between the two calls: try again
                raise RunActive(holder)
        now = time.time()
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(_run_key(run_id), mapping={"endpoint": endpoint, "state": QUEUED})
        pipe.expire(_run_key(run_id), self.history_ttl)
        pipe.zadd(RUNS_KEY, {run_id: now})
        pipe.zremrangebyscore(RUNS_KEY, "-inf", now - self.history_ttl)  # their keys expired
        pipe.expire(RUNS_KEY, self.history_ttl)
        await pipe.execute()
        await self._forget_beyond_history()
        return _RedisRun(self, run_id, endpoint)

    async def _forget_beyond_history(self) -> None:
        """At most `history` runs, whatever starts them (a fuzzer, a loop): the oldest
        finished ones beyond it go, state and events; a run still going stays."""
        excess = await self.redis.zcard(RUNS_KEY) - self.history
        if excess <= 0:
            return
        # Oldest first; the index holds about `history` ids, so reading it whole is cheap.
        for run_id in await self.redis.zrange(RUNS_KEY, 0, -1):
            if excess <= 0:
                return
            if await self.redis.hget(_run_key(run_id), "state") not in (None, FINISHED):
                continue
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(_run_key(run_id), _events_key(run_id))
            pipe.zrem(RUNS_KEY, run_id)
            await pipe.execute()
            excess -= 1

    async def _abandon_if_orphaned(self, run_id: str, endpoint: str) -> None:
        finished = json.dumps({"event": "finished", "report": ABANDONED})
        keys = (_run_key(run_id), _events_key(run_id), _lease_key(endpoint))
        await self.redis.eval(
            _ABANDON, 3, *keys, run_id, json.dumps(ABANDONED), finished, self.history_ttl
        )

    async def get(self, run_id: str) -> dict | None:
        async with _answering(self.url):
            return await self._get(run_id)

    async def _get(self, run_id: str) -> dict | None:
        fields = await self.redis.hgetall(_run_key(run_id))
        if not fields:
            return None
        if fields["state"] != FINISHED:
            await self._abandon_if_orphaned(run_id, fields["endpoint"])
            fields = await self.redis.hgetall(_run_key(run_id))
        events = await self.redis.xlen(_events_key(run_id))
        report = json.loads(fields["report"]) if fields.get("report") else None
        return run_state(run_id, fields["endpoint"], fields["state"], events, report)

    async def follow(self, run_id: str) -> AsyncIterator[dict]:
        """Every event of the run, past ones first, until it finishes (on any replica)."""
        endpoint = await self.redis.hget(_run_key(run_id), "endpoint")
        if endpoint is None:  # expired since the caller looked it up
            return
        last = "0-0"
        while True:
            answer = await self.redis.xread(
                {_events_key(run_id): last}, block=self.poll_ms, count=100
            )
            if not answer:
                await self._abandon_if_orphaned(run_id, endpoint)
                continue
            for entry_id, entry in answer[0][1]:
                last = entry_id
                event = json.loads(entry["e"])
                yield event
                if event.get("event") == "finished":
                    return

    async def close(self) -> None:
        await self.redis.aclose()


def open_store(redis_url: str | None, **options) -> MemoryRunStore | RedisRunStore:
    return RedisRunStore(redis_url, **options) if redis_url else MemoryRunStore()


async def recorded(run, endpoint: str, work, **started):
    """A started run's life: its `started` event (with `started` details, e.g. what
    triggered it), `work(record)` — the sync, emitting into the run — and `finish()`,
    which frees the endpoint's lease. Every way a run starts (the HTTP service, `run`,
    the watcher) goes through here."""
    try:
        run.record({"event": "started", "endpoint": endpoint, **started})
        report = await work(run.record)
        METRICS.run_finished(endpoint, report)
        return report
    finally:
        await run.finish()


# ---------------------------------------------------------------- the watchers' lease


def _watch_key(endpoint: str) -> str:
    return f"{PREFIX}:watch:{endpoint}"


class RedisWatchLeases:
    """One replica watches each endpoint: the key names the holder and expires `ttl`
    seconds after its last renewal (the compare-and-set scripts of the run lease)."""

    def __init__(self, store: RedisRunStore):
        self.redis = store.redis

    async def acquire(self, endpoint: str, holder: str, ttl: float) -> bool:
        key, ms = _watch_key(endpoint), int(ttl * 1000)
        if await self.redis.set(key, holder, nx=True, px=ms):
            return True
        # Held by this holder already (a restarted watch of a live process): renewed.
        return bool(await self.redis.eval(_RENEW, 1, key, holder, ms))

    async def renew(self, endpoint: str, holder: str, ttl: float) -> bool:
        return bool(await self.redis.eval(_RENEW, 1, _watch_key(endpoint), holder, int(ttl * 1000)))

    async def release(self, endpoint: str, holder: str) -> None:
        await self.redis.eval(_RELEASE, 1, _watch_key(endpoint), holder)

    async def holder(self, endpoint: str) -> str | None:
        return await self.redis.get(_watch_key(endpoint))


class MemoryWatchLeases:
    """Without Redis one process runs: its watches need no lease beyond its memory."""

    def __init__(self):
        self.held: dict[str, tuple[str, float]] = {}

    async def acquire(self, endpoint: str, holder: str, ttl: float) -> bool:
        current = self.held.get(endpoint)
        if current and current[0] != holder and current[1] > time.monotonic():
            return False
        self.held[endpoint] = (holder, time.monotonic() + ttl)
        return True

    async def renew(self, endpoint: str, holder: str, ttl: float) -> bool:
        current = self.held.get(endpoint)
        if not current or current[0] != holder:
            return False
        self.held[endpoint] = (holder, time.monotonic() + ttl)
        return True

    async def release(self, endpoint: str, holder: str) -> None:
        if self.held.get(endpoint, ("",))[0] == holder:
            del self.held[endpoint]

    async def holder(self, endpoint: str) -> str | None:
        current = self.held.get(endpoint)
        return current[0] if current and current[1] > time.monotonic() else None


def watch_leases(store: MemoryRunStore | RedisRunStore) -> MemoryWatchLeases | RedisWatchLeases:
    return RedisWatchLeases(store) if isinstance(store, RedisRunStore) else MemoryWatchLeases()
