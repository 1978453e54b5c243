"""Process-wide wiring: the pool, clock, contract, credentials and caches.

Nothing here is authoritative state: the caches (access snapshot, token
verifications) are rebuilt from PostgreSQL and invalidated via NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import asyncpg

from proxmox_simulator.config import Settings
from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.domain.access import AccessState
from proxmox_simulator.domain.auth import TicketAuthority, TokenVerificationCache
from proxmox_simulator.domain.guest_service import RenderedListCache
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import settings as settings_repo
from proxmox_simulator.repositories.migrations import is_ready
from proxmox_simulator.simulation.clock import Clock

log = logging.getLogger("proxmox_simulator")


class AccessCache:
    """The current ``AccessState``; reloaded after any access change is notified.

    A bounded age is a safety net for a missed notification (e.g. a dropped
    listener connection), never the primary invalidation mechanism.
    """

    def __init__(
        self, pool: asyncpg.Pool, token_cache: TokenVerificationCache, max_age: float = 30.0
    ):
        self.pool = pool
        self.token_cache = token_cache
        self.max_age = max_age
        self._state: AccessState | None = None
        self._lock = asyncio.Lock()

    def invalidate(self, *_args) -> None:
        self._state = None
        self.token_cache.clear()

    async def get(self) -> AccessState:
        state = self._state
        if state is not None and time.monotonic() - state.loaded_at < self.max_age:
            return state
        async with self._lock:
            if self._state is None or time.monotonic() - self._state.loaded_at >= self.max_age:
                async with self.pool.acquire() as conn:
                    self._state = await access_repo.load_state(conn)
            return self._state


@dataclass
class Runtime:
    settings: Settings
    pool: asyncpg.Pool
    clock: Clock
    contract: Contract
    tickets: TicketAuthority
    access: AccessCache
    token_cache: TokenVerificationCache
    list_cache: RenderedListCache = field(default_factory=RenderedListCache)
    _listener: asyncpg.Connection | None = field(default=None, repr=False)

    @classmethod
    async def open(cls, settings: Settings, contract: Contract, clock: Clock) -> Runtime:
        pool = await db.create_pool(
            settings.database_url,
            min_size=min(settings.pool_min_size, settings.pool_max_size),
            max_size=settings.pool_max_size,
        )
        async with pool.acquire() as conn:
            ready, current, latest = await is_ready(conn)
            keys = await settings_repo.auth_keys(conn) if ready else None
        if keys is None:
            await pool.close()
            raise RuntimeError(
                f"database schema is at migration {current}, this simulator needs {latest}: "
                "run `proxmox-simulator migrate` first"
            )
        token_cache = TokenVerificationCache()
        runtime = cls(
            settings=settings,
            pool=pool,
            clock=clock,
            contract=contract,
            tickets=TicketAuthority(keys, settings.ticket_lifetime),
            access=AccessCache(pool, token_cache),
            token_cache=token_cache,
            list_cache=RenderedListCache(max_entries=64 if settings.list_cache else 0),
        )
        runtime._listener = await db.connect(settings.database_url)
        await runtime._listener.add_listener(access_repo.ACCESS_CHANNEL, runtime.access.invalidate)
        return runtime

    async def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self.pool.close()
