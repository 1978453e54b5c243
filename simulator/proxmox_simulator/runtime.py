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
from proxmox_simulator.domain.version_adapters import adapter_for
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import faults as fault_repo
from proxmox_simulator.repositories import settings as settings_repo
from proxmox_simulator.repositories.migrations import is_ready
from proxmox_simulator.simulation.clock import Clock
from proxmox_simulator.simulation.faults import FaultEngine, scenario_from_row

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
        # Bumped by every invalidation.  A load that overlapped one may have read
        # pre-change rows, so its result is used for that caller but not cached.
        self._epoch = 0

    def invalidate(self, *_args) -> None:
        self._epoch += 1
        self._state = None
        self.token_cache.clear()

    def _fresh(self, state: AccessState | None) -> bool:
        return state is not None and time.monotonic() - state.loaded_at < self.max_age

    async def get(self) -> AccessState:
        state = self._state
        if self._fresh(state):
            return state
        async with self._lock:
            if self._fresh(self._state):
                return self._state
            epoch = self._epoch
            async with self.pool.acquire() as conn:
                loaded = await access_repo.load_state(conn)
            if epoch == self._epoch:
                self._state = loaded
            return loaded


async def follow_faults(conn: asyncpg.Connection, pool: asyncpg.Pool, engine: FaultEngine) -> None:
    """Load the active fault scenario into ``engine`` now and after every
    ``NOTIFY pvesim_faults`` (``conn`` is a dedicated listener connection)."""
    pending: set[asyncio.Task] = set()

    async def reload() -> None:
        try:
            async with pool.acquire() as c:
                engine.load(scenario_from_row(await fault_repo.active(c)))
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("fault scenario reload failed: %s", exc)

    def on_notify(*_args) -> None:
        task = asyncio.get_running_loop().create_task(reload())
        pending.add(task)
        task.add_done_callback(pending.discard)

    await conn.add_listener(fault_repo.FAULT_CHANNEL, on_notify)
    await reload()


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
    faults: FaultEngine = field(default_factory=FaultEngine)
    _listener: asyncpg.Connection | None = field(default=None, repr=False)

    @property
    def adapter(self):
        """Per-major behaviour of the active contract (domain/version_adapters.py)."""
        return adapter_for(self.contract.major)

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
        await follow_faults(runtime._listener, pool, runtime.faults)
        return runtime

    async def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self.pool.close()
