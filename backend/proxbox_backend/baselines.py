"""Where incremental runs keep their baselines (`domain/baseline.py`): in Redis when
PROXBOX_BACKEND_REDIS_URL is set, so every replica and `proxbox-sync run` share them;
in the `serve` process's memory otherwise.  A baseline that is lost only costs the next
run its shortcut: that run is a full one and writes a new baseline."""

from __future__ import annotations

import hashlib
import logging
from typing import Protocol

from proxbox_backend.domain.baseline import Baseline

log = logging.getLogger("proxbox_backend.sync")

# An endpoint not synced for this long starts over with a full run.
BASELINE_TTL = 7 * 24 * 3600


def baseline_key(netbox_url: str, endpoint_id: int) -> str:
    # Two NetBoxes sharing a Redis have endpoints with the same ids.
    netbox = hashlib.blake2b(netbox_url.rstrip("/").encode(), digest_size=8).hexdigest()
    return f"proxbox-backend:baseline:{netbox}:{endpoint_id}"


class BaselineStore(Protocol):
    async def load(self, key: str) -> Baseline | None: ...

    async def save(self, key: str, baseline: Baseline) -> None: ...


class MemoryBaselines:
    """One process's baselines (the HTTP service without Redis)."""

    def __init__(self):
        self._stored: dict[str, str] = {}

    async def load(self, key: str) -> Baseline | None:
        return Baseline.from_json(self._stored.get(key))

    async def save(self, key: str, baseline: Baseline) -> None:
        self._stored[key] = baseline.to_json()


class RedisBaselines:
    """Baselines in Redis.  Redis not answering costs the shortcut, never the run: a
    baseline that cannot be read is a full run.  One that cannot be written leaves the
    previous baseline, which stays sound: the change log after its end holds this run's
    writes, so the next run plans the guests they touched again."""

    def __init__(self, url: str):
        # The client library loads with the store: imported inside a run, it would hold
        # the event loop, and every request in flight, for as long as the import takes.
        import redis.asyncio

        self.url = url
        self._redis = redis.asyncio.Redis

    def _connect(self):
        # A connection per call: a run loads once and saves once, and the CLI's and the
        # HTTP service's event loops then need no shared pool to close.
        return self._redis.from_url(self.url, socket_connect_timeout=5)

    async def load(self, key: str) -> Baseline | None:
        try:
            async with self._connect() as redis:
                return Baseline.from_json(await redis.get(key))
        except Exception as exc:  # any Redis failure means "no baseline"
            log.warning("baseline %s unreadable, full run: %s", key, exc)
            return None

    async def save(self, key: str, baseline: Baseline) -> None:
        try:
            async with self._connect() as redis:
                await redis.set(key, baseline.to_json(), ex=BASELINE_TTL)
        except Exception as exc:
            log.warning("baseline %s not saved: %s", key, exc)


def open_baselines(redis_url: str | None) -> MemoryBaselines | RedisBaselines:
    return RedisBaselines(redis_url) if redis_url else MemoryBaselines()
