"""Simulation clocks: how long a simulated operation takes, and what time it is.

Simulated durations (a VM boot, a disk allocation) go through the clock so
tests and benchmarks can make them instant or advance them by hand.  Worker
leases deliberately do NOT use this clock (see tasks/worker.py).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod


class Clock(ABC):
    @abstractmethod
    def now(self) -> float:
        """Current simulated time, epoch seconds."""

    @abstractmethod
    async def sleep(self, seconds: float) -> None:
        """Wait for ``seconds`` of simulated time."""

    async def sleep_until(self, deadline: float) -> None:
        """Wait until the clock reads ``deadline`` (immediately if it already does)."""
        remaining = deadline - self.now()
        if remaining > 0:
            await self.sleep(remaining)
        else:
            await asyncio.sleep(0)


class RealClock(Clock):
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class AcceleratedClock(Clock):
    """Virtual time runs ``factor`` times faster than wall time from creation."""

    def __init__(self, factor: float) -> None:
        if factor <= 0:
            raise ValueError("acceleration factor must be positive")
        self.factor = factor
        self._origin_wall = time.time()
        self._origin_mono = time.monotonic()

    def now(self) -> float:
        return self._origin_wall + (time.monotonic() - self._origin_mono) * self.factor

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self.factor)


class InstantClock(RealClock):
    """Wall-clock timestamps, zero-length simulated durations."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


class ManualClock(Clock):
    """Time moves only when ``advance`` is called; sleepers wake when due."""

    def __init__(self, start: float | None = None) -> None:
        self._now = start if start is not None else time.time()
        self._changed = asyncio.Event()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._changed.set()
        self._changed = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, deadline: float) -> None:
        while self._now < deadline:
            await self._changed.wait()


def clock_from_spec(spec: str) -> Clock:
    """``real`` | ``instant`` | ``manual`` | ``accelerated:<factor>``."""
    if spec == "real":
        return RealClock()
    if spec == "instant":
        return InstantClock()
    if spec == "manual":
        return ManualClock()
    if spec.startswith("accelerated:"):
        return AcceleratedClock(float(spec.split(":", 1)[1]))
    raise ValueError(f"unknown clock {spec!r}; use real, instant, manual or accelerated:N")
