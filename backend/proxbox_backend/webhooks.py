"""PVE notification webhooks: who may post (a per-endpoint secret), which posts count
(fresh, never seen before), and how a post reaches the watch of its endpoint on
whichever replica holds it.

`POST /webhooks/proxmox/{endpoint_id}` (api.py) checks the `X-Proxbox-Webhook-Secret`
header against the endpoint's secret in constant time, reads the notification
(`domain.webhook`), refuses it outside the window around its `timestamp` and when
the same body came before (a digest kept with SET NX past the window), and then
nudges the endpoint's watch: a nudge is pushed on the endpoint's Redis list, which the
watcher holding the endpoint waits on between polls (BLPOP), so it starts a run at
once, wherever it runs. Without Redis one process serves and watches: the same in
its memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import defaultdict

from proxbox_backend.domain.watch import Changes
from proxbox_backend.runs import PREFIX, MemoryRunStore, RedisRunStore

HEADER = "X-Proxbox-Webhook-Secret"


def _nudge_key(endpoint: str) -> str:
    return f"{PREFIX}:nudge:{endpoint}"


def _seen_key(digest: str) -> str:
    return f"{PREFIX}:webhook-seen:{digest}"


def digest(endpoint: str, body: bytes) -> str:
    return hashlib.sha256(endpoint.encode() + b"\0" + body).hexdigest()


def encode(changes: Changes) -> str:
    return json.dumps(changes.as_dict())


def decode(text: str) -> Changes:
    data = json.loads(text)
    return Changes(
        guests=frozenset(data.get("guests", ())),
        nodes=frozenset(data.get("nodes", ())),
        reasons=tuple(data.get("reasons", ())),
    )


class RedisWebhooks:
    """The replay memory and the nudge lists, shared by every replica."""

    def __init__(self, store: RedisRunStore):
        self.redis = store.redis

    async def first_time(self, key: str, ttl: float) -> bool:
        """True once per `key` within `ttl` seconds (the body's digest)."""
        return bool(await self.redis.set(_seen_key(key), "1", nx=True, ex=max(1, int(ttl))))

    async def nudge(self, endpoint: str, changes: Changes, ttl: float) -> None:
        """Queue `changes` for the endpoint's watch; a nudge nobody takes (the watch
        moved and none holds it yet) lapses with the key after `ttl`."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.rpush(_nudge_key(endpoint), encode(changes))
        pipe.expire(_nudge_key(endpoint), max(1, int(ttl)))
        await pipe.execute()

    async def wait(self, endpoint: str, timeout: float) -> Changes | None:
        """The nudges queued for the endpoint (merged), waiting up to `timeout` s for one."""
        key = _nudge_key(endpoint)
        # BLPOP's 0 waits for ever: a wait always ends.
        answer = await self.redis.blpop([key], timeout=max(timeout, 0.01))
        if answer is None:
            return None
        changes = decode(answer[1])
        for more in await self.redis.lpop(key, 100) or ():
            changes = changes | decode(more)
        return changes


class MemoryWebhooks:
    """One process without Redis: the same in its memory."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.seen: dict[str, float] = {}
        self.queues: defaultdict[str, asyncio.Queue] = defaultdict(asyncio.Queue)

    async def first_time(self, key: str, ttl: float) -> bool:
        now = self.clock()
        self.seen = {k: until for k, until in self.seen.items() if until > now}
        if key in self.seen:
            return False
        self.seen[key] = now + ttl
        return True

    async def nudge(self, endpoint: str, changes: Changes, ttl: float) -> None:
        self.queues[endpoint].put_nowait(changes)

    async def wait(self, endpoint: str, timeout: float) -> Changes | None:
        queue = self.queues[endpoint]
        try:
            changes = await asyncio.wait_for(queue.get(), max(timeout, 0.0))
        except TimeoutError:
            return None
        while not queue.empty():
            changes = changes | queue.get_nowait()
        return changes


def open_webhooks(store: MemoryRunStore | RedisRunStore) -> MemoryWebhooks | RedisWebhooks:
    return RedisWebhooks(store) if isinstance(store, RedisRunStore) else MemoryWebhooks()
