"""The run's writes of VM rows, and the component writes that must not overlap them.

NetBox's PATCH of a VM saves its whole row from what it read first, and some component
writes update VM rows themselves: a virtual disk written sets its VM's disk total and
disk count, an interface created or deleted its interface count, an address deleted
clears the primary it was.  Overlapping either way, one of the two writes would be
lost.  Writes without such side effects (addresses created or re-tagged, interfaces
updated, VLANs) need not wait for the VMs' updates, so an incremental run's VM updates
and address writes go to NetBox at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from proxbox_backend.background import abandon


class VmRowWrites:
    """The guests stage's VM writes still in flight (`pending`), or none."""

    def __init__(self, pending: Awaitable | None = None):
        self._pending = asyncio.ensure_future(pending) if pending is not None else None

    async def settled(self) -> None:
        """Wait until the VMs' writes are done; their failure is raised here (and to every
        other caller)."""
        if self._pending is not None:
            await asyncio.shield(self._pending)

    async def abandon(self) -> None:
        """Cancel writes still in flight (the run failed elsewhere) and collect them."""
        if self._pending is not None:
            await abandon(self._pending)


SETTLED = VmRowWrites()
