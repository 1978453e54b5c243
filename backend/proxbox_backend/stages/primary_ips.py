"""Stage `primary IPs`: a synced VM's `primary_ip4` / `primary_ip6` from its synced addresses.

A primary address that is set is kept while it exists, whoever chose it (an
operator in NetBox, or an earlier run), so the sync never fights a choice made
in NetBox. An empty slot, or one whose address this run deleted (NetBox then
clears it), gets the guest's first synced address of that family, in the order
Proxmox reports them.

Counting: the primary address is part of the VM, not an object of its own. A VM
created in this run stays `created`; one the guests stage found unchanged
becomes `updated`; one it already updated stays `updated`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, replace

from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Plan, Update
from proxbox_backend.gateways.netbox import VIRTUAL_MACHINES, NetBoxGateway, nested_id
from proxbox_backend.pipeline import Settle, nothing_to_settle
from proxbox_backend.stages.apply import restricted

OBJECT_TYPE = "virtualization.virtualmachine"
FIELDS = {4: "primary_ip4", 6: "primary_ip6"}


@dataclass(frozen=True)
class VmOutcomes:
    """What the guests (nodes) stage did to each VM (device), and the primaries it read."""

    existing: frozenset[int]  # VMs that existed before this run
    unchanged: frozenset[int]  # VMs the guests stage left as they were
    primaries: dict[int, dict[str, int | None]]  # vm id → {"primary_ip4": id, "primary_ip6": id}


def current_primaries(vms: Iterable[dict]) -> dict[int, dict[str, int | None]]:
    return {vm["id"]: {name: nested_id(vm.get(name)) for name in FIELDS.values()} for vm in vms}


def family_slots(
    vm_id: int, guest: Guest, family: int, interface_ids: dict[tuple[int, str], int]
) -> Iterator[tuple[int, str]]:
    """(interface id, address) of the guest's addresses of one IP version, in the order
    Proxmox reports them (those whose interface exists)."""
    for address in guest.addresses:
        if ipaddress.ip_interface(address.address).version != family:
            continue
        interface_id = interface_ids.get((vm_id, address.nic))
        if interface_id is not None:
            yield interface_id, address.address


def keeps_or_first[T](present: T | None, gone: Container[T], candidates: Iterable[T]) -> T | None:
    """A primary after this run: the one set while it stays, else the first candidate."""
    if present is not None and present not in gone:
        return present
    return next(iter(candidates), None)


def plan(
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    ip_ids: dict[tuple[int, str], int],
    primaries: dict[int, dict[str, int | None]],
    removed_ip_ids: set[int],
) -> Plan:
    result = Plan(OBJECT_TYPE)
    for vm_id, guest in owned:
        current = primaries.get(vm_id, {})
        changes = {}
        for family, name in FIELDS.items():
            present = current.get(name)
            synced = (
                ip_ids[slot]
                for slot in family_slots(vm_id, guest, family, interface_ids)
                if slot in ip_ids
            )
            chosen = keeps_or_first(present, removed_ip_ids, synced)
            if chosen is not None and chosen != present:
                changes[name] = chosen
        if changes:
            result.updates.append(Update(vm_id, f"{guest.label} primary IP", vm_id, changes))
    return result


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    ip_ids: dict[tuple[int, str], int],
    removed_ip_ids: set[int],
    outcomes: VmOutcomes,
    tally: Tally,
    settle: Settle = nothing_to_settle,
) -> None:
    the_plan = plan(owned, interface_ids, ip_ids, outcomes.primaries, removed_ip_ids)
    the_plan = await restrict_primaries(netbox, VIRTUAL_MACHINES, the_plan, outcomes)
    await write(netbox, VIRTUAL_MACHINES, the_plan, outcomes, tally, settle)


async def restrict_primaries(
    netbox: NetBoxGateway, path: str, the_plan: Plan, outcomes: VmOutcomes
) -> Plan:
    """The endpoint's switches for primaries of objects that existed before this run
    (guests or nodes off or create-only, `primary_ip` protected): an object created in
    this run gets its primary as part of its creation."""
    created = [u for u in the_plan.updates if u.id not in outcomes.existing]
    existed = replace(the_plan, updates=[u for u in the_plan.updates if u.id in outcomes.existing])
    kept = await restricted(netbox.client, path, existed)
    return replace(kept, updates=[*kept.updates, *created])


async def write(
    netbox: NetBoxGateway,
    path: str,
    the_plan: Plan,
    outcomes: VmOutcomes,
    tally: Tally,
    settle: Settle = nothing_to_settle,
) -> None:
    """Set the planned primaries of VMs (or devices) and count them as part of their owner."""
    if not the_plan.updates:
        return
    await settle(the_plan)
    updates = the_plan.updates
    result = await netbox.client.bulk_update(path, [{"id": u.id, **u.changes} for u in updates])
    for position in result.succeeded:
        owner_id = updates[position].id
        if owner_id in outcomes.existing and owner_id in outcomes.unchanged:
            tally.add(the_plan.object_type, "unchanged", -1)
            tally.add(the_plan.object_type, "updated")
    for position, reason in result.failed.items():
        tally.fail(the_plan.object_type, updates[position].label, reason)
