"""Stage `disks`: guest disks (scsi0/virtio0/sata0/ide0, rootfs/mpN) → VirtualDisk.

NetBox keeps the VM's `disk` total equal to the sum of its virtual disks itself.
"""

from __future__ import annotations

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.gateways.netbox import VIRTUAL_DISKS, NetBoxGateway, nested_id
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.guests import preexisting
from proxbox_backend.stages.vm_rows import SETTLED, VmRowWrites

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


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    existing_vm_ids: set[int],
    tally: Tally,
    vm_rows: VmRowWrites = SETTLED,
) -> dict:
    lookup = preexisting(owned, existing_vm_ids)
    current = await netbox.disks(lookup) if lookup else []
    the_plan = plan(owned, current)
    if the_plan.writes:
        await vm_rows.settled()  # a disk written sets its VM's disk total and count
    return await apply_plan(netbox.client, VIRTUAL_DISKS, the_plan, tally)
