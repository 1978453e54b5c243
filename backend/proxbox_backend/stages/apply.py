"""Executing a plan with NetBox bulk writes, counting only what NetBox confirmed."""

from __future__ import annotations

from typing import Any

from proxbox_backend.background import together
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain import policy, tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.plan import Plan


async def apply_plan(
    netbox: NetBoxClient, path: str, plan: Plan, tally: Tally, **order: bool
) -> dict[Any, int]:
    """`write_plan` of the part of `plan` the run's sync policy lets through."""
    return await write_plan(netbox, path, await restricted(netbox, path, plan), tally, **order)


async def write_plan(
    netbox: NetBoxClient,
    path: str,
    plan: Plan,
    tally: Tally,
    *,
    creates_follow_updates: bool = True,
) -> dict[Any, int]:
    """Run deletes, updates, then creates; return key → id of every object that now exists.

    Deletes and updates go first so that a name they free (a renamed or removed
    guest) is available to the creates of the same run.  A stage whose updates free
    nothing a create could need passes `creates_follow_updates=False`: its updates and
    creates are then written at once.

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

    async def update() -> None:
        if not plan.updates:
            return
        result = await netbox.bulk_update(path, [{"id": u.id, **u.changes} for u in plan.updates])
        tally.add(kind, "updated", len(result.succeeded))
        for position, reason in result.failed.items():
            tally.fail(kind, plan.updates[position].label, reason)
        # A failed update leaves the object where it was; components can still follow it,
        # unless it was an adoption: then the object is still the operator's.
        failed = set(result.failed)
        ids.update(
            {u.key: u.id for i, u in enumerate(plan.updates) if not (u.adopts and i in failed)}
        )

    async def create() -> None:
        if not plan.creates:
            return
        result = await netbox.bulk_create(path, [c.payload for c in plan.creates])
        for position, obj in result.succeeded.items():
            ids[plan.creates[position].key] = obj["id"]
            tally.add(kind, "created")
        for position, reason in result.failed.items():
            tally.fail(kind, plan.creates[position].label, reason)

    if creates_follow_updates:
        await update()
        await create()
    else:
        await together(update(), create())
    return ids


async def restricted(netbox: NetBoxClient, path: str, plan: Plan) -> Plan:
    """The run's sync policy applied; components without the proxbox tag are never deleted
    while the policy keeps operator-added objects (one read per stage that deletes any)."""
    active = policy.ACTIVE.get()
    plan = active.restrict(plan)
    if not (plan.deletes and active.keep_operator_objects):
        return plan
    if plan.object_type not in policy.OPERATOR_COMPONENTS:
        return plan
    ids = [d.id for d in plan.deletes]
    params = {"tag": tags.PROXBOX.slug, "fields": "id"}
    marked = {obj["id"] for obj in await netbox.list_by_ids(path, "id", ids, params)}
    kept = {d.key: d.id for d in plan.deletes if d.id not in marked}
    plan.deletes = [d for d in plan.deletes if d.id in marked]
    plan.unchanged = {**plan.unchanged, **kept}
    return plan
