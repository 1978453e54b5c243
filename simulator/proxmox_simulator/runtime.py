"""Process-wide wiring: the pool, clock, contract, credentials and caches.

Nothing here is authoritative state: the caches (access snapshot, token
verifications) are rebuilt from PostgreSQL and invalidated via NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

import asyncpg

from proxmox_simulator.api.render import RawJSON
from proxmox_simulator.api.routes import RouteTable
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import selection as contract_selection
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.contracts.observations import ObservationSet, ObservationStore
from proxmox_simulator.contracts.returns import Trim, closed_trimmer
from proxmox_simulator.domain.access import AccessState
from proxmox_simulator.domain.auth import TicketAuthority, TokenVerificationCache
from proxmox_simulator.domain.guest_service import RenderedListCache
from proxmox_simulator.domain.status_broadcast import StatusBroadcast
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
            return await self._load()

    async def reload(self) -> AccessState:
        """The access data as the database holds it now, read before a denial is answered.

        Another process (the ``token create`` CLI, an API replica) tells this one
        of its changes by NOTIFY, which may arrive after a request that already
        depends on the change: PVE's pmxcfs answers that request with the change
        applied, so a refusal decided on the cached state is decided again here.
        """
        async with self._lock:
            return await self._load()

    async def _load(self) -> AccessState:
        # Called with self._lock held.
        epoch = self._epoch
        async with self.pool.acquire() as conn:
            loaded = await access_repo.load_state(conn)
        if epoch == self._epoch:
            self._state = loaded
        return loaded


@dataclass(frozen=True)
class Built:
    """A declared snapshot combined with observations under one profile, ready to serve.

    Built once per (version, profile, observation set) and reused by later swaps.
    """

    declared: Contract
    contract: Contract  # the effective snapshot: declared + observations per profile
    profile: str
    observation: ObservationSet | None

    @cached_property
    def routes(self) -> RouteTable:
        return RouteTable(self.contract)

    @cached_property
    def openapi(self) -> bytes:
        from proxmox_simulator.contracts.model import canonical_json
        from proxmox_simulator.contracts.openapi import openapi_document

        return canonical_json(openapi_document(self.contract, profile=self.profile))

    @cached_property
    def declared_sha256(self) -> str:
        return self.declared.sha256()

    @cached_property
    def trimmers(self) -> dict[tuple[str, str], Trim]:
        """Per method, how this major's serializer trims an answer (contracts/returns.py);
        methods whose ``returns`` close no object are absent and pass untouched."""
        return {
            endpoint.key: trim
            for endpoint in self.contract.endpoints
            if (trim := closed_trimmer(endpoint.returns)) is not None
        }


@dataclass(frozen=True)
class Selection:
    """One immutable contract selection: what a request is answered from, start to end."""

    built: Built
    profile: str
    origin: str  # "configured" (the start-up snapshot) or "applied" (a hot-swap)
    generation: int
    applied_at: str

    @property
    def declared(self) -> Contract:
        return self.built.declared

    @property
    def contract(self) -> Contract:
        return self.built.contract

    @property
    def observation(self) -> ObservationSet | None:
        return self.built.observation

    @property
    def routes(self) -> RouteTable:
        return self.built.routes

    @property
    def openapi(self) -> bytes:
        return self.built.openapi

    def answer(self, endpoint: Endpoint, data):
        """``data`` as this major renders it for ``endpoint`` (closed objects trimmed)."""
        trim = self.built.trimmers.get(endpoint.key)
        if trim is None:
            return data
        if isinstance(data, RawJSON):  # pre-serialized: decoded only when there is a trim
            return trim(json.loads(data.text))
        return trim(data)

    def describe(self) -> dict:
        return {
            "version": self.contract.version,
            "major": self.contract.major,
            "profile": self.profile,
            "origin": self.origin,
            "generation": self.generation,
            "applied_at": self.applied_at,
            "declared_sha256": self.built.declared_sha256,
            "observation": self.observation.id if self.observation else None,
            "counts": self.contract.counts(),
        }


def build(declared: Contract, profile: str, data_dir) -> Built:
    observed = (
        ObservationStore(data_dir).latest(declared.major)
        if profile != contract_selection.STRICT_DOCS
        else None
    )
    built = Built(
        declared=declared,
        contract=contract_selection.effective_contract(declared, observed, profile),
        profile=profile,
        observation=observed,
    )
    built.routes  # noqa: B018 - built before it is published, never on a request
    built.trimmers  # noqa: B018 - likewise
    return built


def build_selection(
    declared: Contract, profile: str, data_dir, *, origin: str, generation: int
) -> Selection:
    return Selection(
        built=build(declared, profile, data_dir),
        profile=profile,
        origin=origin,
        generation=generation,
        applied_at=_now(),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


_pinned: contextvars.ContextVar[Selection | None] = contextvars.ContextVar(
    "pvesim_selection", default=None
)


class ContractState:
    """The process's current selection; a hot-swap replaces it in one assignment.

    A request pins the selection it started with (``pin``), so everything it
    reads through ``rt.contract`` comes from one table even while a swap lands.
    Process-local by design: a restart goes back to the configured snapshot.
    """

    def __init__(self, initial: Selection, data_dir, apidoc_dir=None) -> None:
        self.current = initial
        self.data_dir = data_dir
        self.apidoc_dir = apidoc_dir
        self._lock = threading.Lock()
        # Snapshots and observation sets are immutable, so what was built stays valid;
        # a newly imported version or recorded set has a new key.
        self._declared: dict[str, Contract] = {initial.declared.version: initial.declared}
        obs = initial.observation.id if initial.observation else None
        self._built: dict[tuple, Built] = {
            (initial.declared.version, initial.profile, obs): initial.built
        }

    def apply(self, major: int | None, profile: str | None) -> Selection:
        """Build the new selection (the slow part) while requests go on, then publish it.

        Swaps are serialized so two operators' swaps land in the order they ran; the
        table requests read is never locked.
        """
        with self._lock:
            base = self.current
            profile = profile or base.profile
            if profile not in contract_selection.PROFILES:
                raise ValueError(
                    f"unknown profile {profile!r}: one of {', '.join(contract_selection.PROFILES)}"
                )
            if major is None or major == base.declared.major:
                declared = base.declared
            else:
                version = contract_selection.declared_version(major, self.data_dir, self.apidoc_dir)
                if version not in self._declared:
                    self._declared[version] = contract_selection.declared_for_major(
                        major, self.data_dir, self.apidoc_dir
                    )
                declared = self._declared[version]
            obs = None
            if profile != contract_selection.STRICT_DOCS:
                latest = ObservationStore(self.data_dir).manifests(declared.major)
                obs = latest[-1]["id"] if latest else None
            key = (declared.version, profile, obs)
            if key not in self._built:
                self._built[key] = build(declared, profile, self.data_dir)
            self.current = Selection(
                built=self._built[key],
                profile=profile,
                origin="applied",
                generation=base.generation + 1,
                applied_at=_now(),
            )
            return self.current

    @contextlib.contextmanager
    def pin(self):
        selection = self.current
        token = _pinned.set(selection)
        try:
            yield selection
        finally:
            _pinned.reset(token)


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
    contracts: ContractState
    tickets: TicketAuthority
    access: AccessCache
    token_cache: TokenVerificationCache
    list_cache: RenderedListCache = field(default_factory=RenderedListCache)
    faults: FaultEngine = field(default_factory=FaultEngine)
    status_broadcast: StatusBroadcast = field(default_factory=StatusBroadcast)
    _listener: asyncpg.Connection | None = field(default=None, repr=False)

    @property
    def contract(self) -> Contract:
        """The effective contract of the request being served (or the current one)."""
        pinned = _pinned.get()
        return (pinned or self.contracts.current).contract

    @property
    def adapter(self):
        """Per-major behaviour of the active contract (domain/version_adapters.py)."""
        return adapter_for(self.contract.major)

    @classmethod
    async def open(
        cls, settings: Settings, contract: Contract | ContractState, clock: Clock
    ) -> Runtime:
        if isinstance(contract, Contract):
            contract = ContractState(
                build_selection(
                    contract, settings.profile, settings.data_dir, origin="configured", generation=0
                ),
                settings.data_dir,
                settings.apidoc_dir,
            )
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
            contracts=contract,
            tickets=TicketAuthority(keys, settings.ticket_lifetime),
            access=AccessCache(pool, token_cache),
            token_cache=token_cache,
            list_cache=RenderedListCache(max_entries=64 if settings.list_cache else 0),
            status_broadcast=StatusBroadcast(settings.status_interval),
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
