"""Task workers: claim, lease, execute, finish exactly once.

Leases use PostgreSQL wall time and ``asyncio`` monotonic sleeps, never the
simulation clock, so pausing or accelerating a scenario cannot make a live
worker look dead (or a dead one look alive).  Wake-ups come from
``LISTEN pvesim_tasks``; a short poll remains only to notice expired leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import asyncpg

from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.observability import metrics
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.simulation.clock import Clock
from proxmox_simulator.simulation.faults import FaultEngine

if TYPE_CHECKING:
    from proxmox_simulator.observability.tracing import Tracing

log = logging.getLogger("proxmox_simulator.tasks")

Effect = Callable[[asyncpg.Connection], Awaitable[None]]


class TaskContext:
    """What an executor may do: log, sleep in simulated time, commit its effect."""

    def __init__(self, worker: TaskWorker, row: asyncpg.Record) -> None:
        self.worker = worker
        self.row = row
        self.payload: dict = row["payload"]
        self.warnings = 0
        self.completed = False
        self.exitstatus: str | None = None  # set when the task finishes
        # Simulated durations run from the task's creation on the simulation
        # clock, not from the claim: a task queued behind others (or reclaimed
        # after a crash) is due when it would have been due anyway.
        self._deadline = (
            row["clock_start"] if row["clock_start"] is not None else worker.clock.now()
        )

    @property
    def clock(self) -> Clock:
        return self.worker.clock

    async def log(self, *lines: str) -> None:
        async with self.worker.pool.acquire() as conn:
            await task_repo.append_log(conn, self.row["upid"], list(lines))

    async def warn(self, line: str) -> None:
        self.warnings += 1
        await self.log(f"WARN: {line}")

    async def sleep(self, seconds: float) -> None:
        self._deadline += seconds
        await self.clock.sleep_until(self._deadline)

    async def complete(
        self, effect: Effect | None = None, *, lines: list[str] = (), failure: list[str] = ()
    ) -> None:
        """Apply the effect and mark the task stopped in one transaction.

        An effect that did part of its work and then failed, as PVE workers that die
        after some changes, appends its message to ``failure``: the changes are kept
        and the task ends with that error.
        """
        async with self.worker.pool.acquire() as conn, conn.transaction():
            if effect is not None:
                await effect(conn)
            exitstatus = f"WARNINGS: {self.warnings}" if self.warnings else "OK"
            if failure:
                exitstatus = failure[0]
            final = [
                *lines,
                "TASK OK"
                if exitstatus == "OK"
                else f"TASK {'ERROR: ' if failure else ''}{exitstatus}",
            ]
            await task_repo.append_log(conn, self.row["upid"], final)
            await task_repo.finish(
                conn,
                upid=self.row["upid"],
                worker_id=self.worker.worker_id,
                exitstatus=exitstatus,
                endtime=int(self.clock.now()),
                warnings=self.warnings,
            )
        self.completed = True
        self.exitstatus = exitstatus

    async def fail(self, message: str) -> None:
        async with self.worker.pool.acquire() as conn, conn.transaction():
            await task_repo.append_log(conn, self.row["upid"], [f"TASK ERROR: {message}"])
            await task_repo.finish(
                conn,
                upid=self.row["upid"],
                worker_id=self.worker.worker_id,
                exitstatus=message,
                endtime=int(self.clock.now()),
                warnings=self.warnings,
            )
        self.completed = True
        self.exitstatus = message


Executor = Callable[[TaskContext], Awaitable[None]]


class TaskWorker:
    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        clock: Clock,
        executors: dict[str, Executor],
        *,
        lease_seconds: float = 30.0,
        concurrency: int = 4,
        worker_id: str | None = None,
        poll_seconds: float | None = None,
        faults: FaultEngine | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.pool = pool
        self.dsn = dsn
        self.clock = clock
        self.executors = executors
        self.lease_seconds = lease_seconds
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.poll_seconds = poll_seconds or min(1.0, lease_seconds / 2)
        self.faults = faults
        self.tracing = tracing
        self._wake = asyncio.Event()
        self._stopping = False
        self._loops: list[asyncio.Task] = []
        self._listener: asyncpg.Connection | None = None

    async def start(self) -> None:
        self._listener = await db.connect(self.dsn)
        await self._listener.add_listener(task_repo.TASK_CHANNEL, self._on_notify)
        self._loops = [
            asyncio.create_task(self._loop(), name=f"task-worker-{i}")
            for i in range(self.concurrency)
        ]

    def _on_notify(self, *_args) -> None:
        self._wake.set()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop claiming; let in-flight work finish within ``grace``, then cancel."""
        self._stopping = True
        self._wake.set()
        if self._loops:
            _done, pending = await asyncio.wait(self._loops, timeout=grace)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                async with self.pool.acquire() as conn:
                    row = await task_repo.claim(conn, self.worker_id, self.lease_seconds)
            except (asyncpg.UndefinedTableError, OSError, asyncpg.PostgresError) as exc:
                # Before `migrate` ran, or while the database restarts: retry later.
                log.warning("task claim failed: %s", exc)
                row = None
                await asyncio.sleep(self.poll_seconds)
            if row is not None:
                await self._execute(row)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_seconds)

    async def _renew(self, upid: str) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            async with self.pool.acquire() as conn:
                if not await task_repo.renew(conn, upid, self.worker_id, self.lease_seconds):
                    log.warning("lost lease on %s", upid)
                    return

    async def _execute(self, row: asyncpg.Record) -> None:
        if self.tracing is None:
            await self._run(row)
            return
        with self.tracing.task_span(
            row["type"], row["node"], row["upid"], row["attempts"], self.worker_id
        ) as span:
            ctx = await self._run(row)
            self.tracing.finish_task(span, ctx.exitstatus)

    async def _run(self, row: asyncpg.Record) -> TaskContext:
        ctx = TaskContext(self, row)
        renewer = asyncio.create_task(self._renew(row["upid"]))
        try:
            if row["attempts"] > 1:
                metrics.record_lease_reclaim()
                await ctx.log(f"task reclaimed by {self.worker_id} (attempt {row['attempts']})")
            # A payload naming its executor wins: PVE reuses task types (srvstop stops
            # a systemd unit and a Ceph daemon alike).
            executor = self.executors.get(
                (row["payload"] or {}).get("executor", "")
            ) or self.executors.get(row["type"])
            if executor is None:
                await ctx.fail(f"unknown task type '{row['type']}'")
                return ctx
            fault = (
                self.faults.on_task(row["type"], row["node"], row["upid"]) if self.faults else None
            )
            if fault is not None:
                for _ in range(fault.warnings):
                    await ctx.warn("simulated fault (task_warnings)")
                if fault.failure is not None:
                    await ctx.fail(fault.failure)
                    return ctx
            try:
                await executor(ctx)
                if not ctx.completed:
                    await ctx.complete()
            except PveError as exc:
                await ctx.fail(exc.message)
        except task_repo.LeaseLost:
            log.warning(
                "task %s was taken over by another worker; effects rolled back", row["upid"]
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in an executor must not kill the worker loop
            log.exception("task %s crashed", row["upid"])
            with contextlib.suppress(Exception):
                await ctx.fail(f"internal error: {exc}")
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renewer
        return ctx
