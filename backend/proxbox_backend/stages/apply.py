"""Executing a plan with NetBox bulk writes, counting only what NetBox confirmed."""

from __future__ import annotations

from typing import Any

from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.plan import Plan


async def apply_plan(netbox: NetBoxClient, path: str, plan: Plan, tally: Tally) -> dict[Any, int]:
    """Run deletes, updates, then creates; return key → id of every object that now exists.

    Deletes and updates go first so that a name they free (a renamed or removed
    guest) is available to the creates of the same run.

    Updated and unchanged objects keep their ids; a failed create has no id, so
    stages further down skip its components instead of guessing.
    """
    kind = plan.object_type
    ids: dict[Any, int] = dict(plan.unchanged)
    tally.add(kind, "unchanged", len(plan.unchanged))
    for failure in plan.failures:
        tally.fail(kind, failure.label, failure.reason)

    if plan.deletes:
        result = await netbox.bulk_delete(path, [d.id for d in plan.deletes])
        tally.add(kind, "deleted", len(result.succeeded))
        for position, reason in result.failed.items():
            tally.fail(kind, plan.deletes[position].label, reason)
    if plan.updates:
        result = await netbox.bulk_update(path, [{"id": u.id, **u.changes} for u in plan.updates])
        tally.add(kind, "updated", len(result.succeeded))
        for position, reason in result.failed.items():
            tally.fail(kind, plan.updates[position].label, reason)
        # A failed update leaves the object where it was; components can still follow it.
        ids.update({u.key: u.id for u in plan.updates})

    if plan.creates:
        result = await netbox.bulk_create(path, [c.payload for c in plan.creates])
        for position, obj in result.succeeded.items():
            ids[plan.creates[position].key] = obj["id"]
            tally.add(kind, "created")
        for position, reason in result.failed.items():
            tally.fail(kind, plan.creates[position].label, reason)

    return ids
