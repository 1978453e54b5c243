"""Stage `disks`: guest disks (scsi0/virtio0/sata0/ide0, rootfs/mpN) → VirtualDisk.

NetBox keeps the VM's `disk` total equal to the sum of its virtual disks itself.
"""

from __future__ import annotations

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.gateways.netbox import VIRTUAL_DISKS, NetBoxGateway, nested_id
from proxbox_backend.pipeline import (
    EVERY,
    Effect,
    Gate,
    Settle,
    Stage,
    nothing_to_settle,
)
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun
from proxbox_backend.stages.guests import preexisting

OBJECT_TYPE = "virtualization.virtualdisk"
MANAGED = {tags.PROXBOX.slug}


def plan(owned: list[tuple[int, Guest]], current: list[dict]) -> Plan:
    result = Plan(OBJECT_TYPE)
    ours = {vm_id for vm_id, _ in owned}
    existing = {
        (nested_id(d["virtual_machine"]), d["name"]): d
        for d in current
        if nested_id(d.get("virtual_machine")) in ours
    }
    wanted = set()
    for vm_id, guest in owned:
        for disk in guest.disks:
            slot = (vm_id, disk.key)
            wanted.add(slot)
            fields = {"size": disk.size_mb, "description": disk.volume}
            label = f"{guest.name} {disk.key}"
            found = existing.get(slot)
            if found is None:
                payload = {"virtual_machine": vm_id, "name": disk.key, **fields}
                result.creates.append(
                    Create(slot, label, tags.with_sync_tags(payload, None, MANAGED))
                )
            elif changes := tags.with_sync_tags(
                diff(
                    fields,
                    {"size": found.get("size"), "description": found.get("description") or ""},
                ),
                found,
                MANAGED,
            ):
                result.updates.append(Update(slot, label, found["id"], changes))
            else:
                result.unchanged[slot] = found["id"]
    for slot, disk in existing.items():
        if slot not in wanted:
            result.deletes.append(Delete(slot, f"disk {slot[1]} of VM {slot[0]}", disk["id"]))
    return result


async def read(netbox: NetBoxGateway, preexisting_vm_ids: list[int]) -> list[dict]:
    """The disks of the VMs that existed before this run (no other VM can have any)."""
    return await netbox.disks(preexisting_vm_ids) if preexisting_vm_ids else []


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    existing_vm_ids: set[int],
    tally: Tally,
    settle: Settle = nothing_to_settle,
    current: list[dict] | None = None,
) -> dict:
    """`current`: the disks read ahead (`read`), else read now."""
    if current is None:
        current = await read(netbox, preexisting(owned, existing_vm_ids))
    the_plan = plan(owned, current)
    await settle(the_plan)
    return await apply_plan(netbox.client, VIRTUAL_DISKS, the_plan, tally)


# -- the stage -----------------------------------------------------------------------------
VM = "virtualization.virtualmachine"


async def read_disks(run: StageRun, gate: Gate) -> list[dict]:
    return await read(run.netbox, gate.take("guests.kept").preexisting)


async def sync_disks(run: StageRun, gate: Gate) -> None:
    owned = gate.take("guests.owned")
    count = sum(len(g.disks) for _, g in owned.owned)
    gate.started(count)
    await apply(run.netbox, owned.owned, owned.existing, run.tally, gate.settle, gate.current)
    gate.finished(count)


STAGE = Stage(
    "disks",
    sync_disks,
    read=read_disks,
    starts_with=("guests.kept",),
    takes=("guests.owned",),
    reads=frozenset({OBJECT_TYPE}),
    writes={OBJECT_TYPE: EVERY},
    effects=(
        Effect(
            OBJECT_TYPE,
            EVERY,
            VM,
            whole_row=False,
            why="NetBox sets the VM's disk total to the sum of its disks (and counts them)",
        ),
    ),
    events="disks",
)
