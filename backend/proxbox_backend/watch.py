"""Live sync: each watched endpoint's watcher polls Proxmox and starts runs for changes.

`WatchSupervisor` runs in every `serve` replica: it reads which endpoints are watched
(enabled, `watch_interval` set), and for each one competes for the endpoint's watch
lease; the replica holding it runs the endpoint's `Watcher`, the others retry, so a
replica that dies hands the watch on within one lease period. The watcher polls
`/cluster/resources` and `/cluster/tasks` every `watch_interval` seconds
(`domain.watch` says what counts as a change), and when something changed starts a run
of the endpoint through the run store — the same lease, claim, policy and recording as
`POST /sync/{id}` — which, with a baseline, is incremental: it syncs just the guests
whose Proxmox input changed. Changes found while a run goes are kept and become one
run after it; a run of the endpoint that someone else holds (a manual or scheduled one)
makes the watcher try again at its next poll.

Between polls the watcher waits on its endpoint's nudges (`webhooks.py`): a PVE
notification posted to `POST /webhooks/proxmox/{id}` on any replica reaches the
holder at once and becomes a change like a poll's, coalesced with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from proxbox_backend.background import abandon, together
from proxbox_backend.clients.proxmox import ProxmoxClient
from proxbox_backend.domain.watch import ChangeDetector, Changes, Pending
from proxbox_backend.metrics import METRICS
from proxbox_backend.runs import RunActive, RunStoreUnavailable, recorded, watch_leases
from proxbox_backend.secrets import scrub
from proxbox_backend.webhooks import open_webhooks

log = logging.getLogger("proxbox_backend.watch")

# The watch lease's key lives this share of the lease period after its last renewal, and
# a replica without it asks again every remaining share: a holder that dies is replaced
# within one lease period. The holder renews four times per period.
LEASE_SHARE = 0.8
RENEWALS = 4
STARTED = Changes(reasons=("watch started",))


class Watcher:
    """One endpoint's watch state while this replica holds it: detects changes between
    polls, coalesces them, and hands them to `launch` when no run of its own is going.

    `launch(changes, found_at)` starts a run and answers its task, or None when another
    run holds the endpoint (the changes stay pending for the next poll)."""

    def __init__(self, endpoint_id: int, interval: float, launch, clock=time.monotonic):
        self.endpoint_id, self.interval, self.launch = endpoint_id, interval, launch
        self.clock = clock
        self.detector = ChangeDetector()
        self.pending = Pending()
        self.running: asyncio.Future | None = None
        self.failures = 0  # polls in a row that failed

    async def step(self, client: ProxmoxClient) -> None:
        """One poll: both reads at once, then a run for what changed (if none is going)."""
        resources, tasks = await together(client.resources(), client.cluster_tasks())
        self.pending.add(self.detector.observe(resources, tasks), self.clock())
        await self.start_pending()

    async def start_pending(self) -> None:
        if not self.pending.changes or (self.running is not None and not self.running.done()):
            return
        changes, found_at = self.pending.take()
        task = await self.launch(changes, found_at)
        if task is None:
            self.pending.restore(changes, found_at)
            return
        self.running = task


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class WatchSupervisor:
    """The watches of one backend replica (see the module's docstring)."""

    def __init__(
        self, settings, service, store, leases=None, holder: str | None = None, webhooks=None
    ):
        self.settings, self.service, self.store = settings, service, store
        self.leases = leases or watch_leases(store)
        self.webhooks = webhooks or open_webhooks(store)
        self.holder = holder or replica_id()
        self.intervals: dict[int, float] = {}
        self.watches: dict[int, asyncio.Task] = {}
        self.watchers: dict[int, Watcher] = {}
        self.runs: set[asyncio.Task] = set()
        self.clock: Callable[[], float] = time.monotonic

    async def run(self) -> None:
        try:
            while True:
                try:
                    self.reconcile(await self.service.watched_endpoints())
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NetBox unreachable: the current watches go on
                    log.warning("cannot read which endpoints to watch: %s", scrub(str(exc)))
                await asyncio.sleep(self.settings.watch_refresh)
        finally:
            await abandon(*self.watches.values(), *self.runs)

    def reconcile(self, wanted: dict[int, int]) -> None:
        """Watch exactly the `wanted` endpoints (id → poll interval in seconds)."""
        for endpoint_id in [e for e in self.watches if e not in wanted]:
            self.watches.pop(endpoint_id).cancel()
            self.intervals.pop(endpoint_id, None)
            log.info("endpoint %s is no longer watched", endpoint_id)
        for endpoint_id, interval in wanted.items():
            self.intervals[endpoint_id] = float(interval)
            if endpoint_id in self.watchers:
                self.watchers[endpoint_id].interval = float(interval)
            task = self.watches.get(endpoint_id)
            if task is None or task.done():
                self.watches[endpoint_id] = asyncio.create_task(self.watch(endpoint_id))

    async def watch(self, endpoint_id: int) -> None:
        """Hold the endpoint's watch lease whenever it is free, and watch while held."""
        key, period = str(endpoint_id), self.settings.watch_lease
        ttl, retry = period * LEASE_SHARE, period * (1 - LEASE_SHARE)
        while True:
            try:
                acquired = await self.leases.acquire(key, self.holder, ttl)
            except Exception as exc:
                log.warning("watch lease of endpoint %s: %s", endpoint_id, scrub(str(exc)))
                acquired = False
            if not acquired:
                await asyncio.sleep(retry)
                continue
            log.info("watching endpoint %s (this replica: %s)", endpoint_id, self.holder)
            METRICS.watching[key] = 1
            watching = asyncio.create_task(self.watching(endpoint_id))
            try:
                while not watching.done():
                    await asyncio.wait({watching}, timeout=period / RENEWALS)
                    if watching.done():
                        break
                    try:
                        held = await self.leases.renew(key, self.holder, ttl)
                    except Exception:
                        held = False
                    if not held:
                        # Another replica may hold it by now: stop polling at once.
                        log.warning("endpoint %s: the watch lease was lost", endpoint_id)
                        break
            finally:
                METRICS.watching[key] = 0
                await abandon(watching)
                with contextlib.suppress(Exception):
                    await self.leases.release(key, self.holder)
            if watching.done() and not watching.cancelled() and watching.exception():
                log.error("watch of endpoint %s stopped: %s", endpoint_id, watching.exception())
            await asyncio.sleep(retry)

    async def watching(self, endpoint_id: int) -> None:
        """Poll every interval until cancelled; a catch-up run first (nobody watched
        before), and a failing poll (Proxmox or NetBox away) retried at the next one."""
        watcher = Watcher(
            endpoint_id, self.intervals.get(endpoint_id, 10.0), self._launcher(endpoint_id)
        )
        watcher.clock = self.clock
        watcher.pending.add(STARTED, self.clock())
        self.watchers[endpoint_id] = watcher
        client: ProxmoxClient | None = None
        try:
            while True:
                began = self.clock()
                try:
                    if client is None:
                        client = await self.service.watch_client(endpoint_id)
                    await watcher.step(client)
                    watcher.failures = 0
                    METRICS.polls[str(endpoint_id)] += 1
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    watcher.failures += 1
                    METRICS.poll_failures[str(endpoint_id)] += 1
                    log.warning("endpoint %s: poll failed: %s", endpoint_id, scrub(str(exc)))
                    if client is not None:
                        # A new client next time: a ticket may have expired.
                        await client.aclose()
                        client = None
                await self.between_polls(endpoint_id, watcher, began + watcher.interval)
        finally:
            if self.watchers.get(endpoint_id) is watcher:
                del self.watchers[endpoint_id]
            if client is not None:
                await client.aclose()

    async def between_polls(self, endpoint_id: int, watcher: Watcher, until: float) -> None:
        """Wait for the next poll, taking the endpoint's nudges (webhook notifications)
        meanwhile: each is a change that starts a run now, or after the one going."""
        key = str(endpoint_id)
        while (left := until - self.clock()) > 0:
            # While changes wait for a run to end, look again each second.
            timeout = min(left, 1.0) if watcher.pending.changes else left
            try:
                nudged = await self.webhooks.wait(key, timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the polls go on without nudges
                log.warning("endpoint %s: nudges unreadable: %s", endpoint_id, scrub(str(exc)))
                await asyncio.sleep(max(0.0, until - self.clock()))
                return
            if nudged:
                log.info("endpoint %s: nudged by %s", endpoint_id, nudged.as_dict()["reasons"])
                watcher.pending.add(nudged, self.clock())
            await watcher.start_pending()

    def _launcher(self, endpoint_id: int):
        key = str(endpoint_id)

        async def launch(changes: Changes, found_at: float | None) -> asyncio.Task | None:
            try:
                run = await self.store.start(key)
            except RunActive as active:
                log.info("endpoint %s: run %s holds it; retrying", endpoint_id, active.run_id)
                return None
            except RunStoreUnavailable as exc:
                log.warning("endpoint %s: %s", endpoint_id, exc)
                return None
            lag = None if found_at is None else round(self.clock() - found_at, 3)
            trigger = {"watch": changes.as_dict(), "waited_s": lag}
            log.info("endpoint %s: run %s for %s", endpoint_id, run.id, trigger["watch"])

            async def work(record):
                report = await self.service.run(endpoint_id, record)
                try:
                    job = await self.service.record_live_run(endpoint_id, run.id, report, trigger)
                except Exception as exc:  # the run is done; only its Job is missing
                    job = f"not recorded: {exc}"
                if found_at is not None:
                    METRICS.watch_lag[key] = self.clock() - found_at
                log.info(
                    "endpoint %s: run %s ended %s; %s",
                    endpoint_id,
                    run.id,
                    report.status,
                    scrub(job),
                )
                return report

            task = asyncio.create_task(recorded(run, key, work, trigger=trigger))
            # Not the watch's: a run goes on to its end when the watch moves elsewhere.
            self.runs.add(task)
            task.add_done_callback(self.runs.discard)
            return task

        return launch
