"""Stage `ips`: guest addresses (config, agent, container runtime) → IPAddress on the
VMInterface.

Addresses assigned to an interface the sync owns belong to the sync; everything else
in IPAM is left alone.  A synced address that Proxmox did not report this run is:

* deleted when the running guest reported its addresses without it (it is gone);
* kept, with the `proxbox-unconfirmed` tag, when the guest could not say (stopped, or
  its agent silent): IPAM users keep the address, its id and the VM's primary IP.
  The tag goes again when the guest reports the address once more.

An address whose interface goes away goes with it (NetBox deletes an interface's
addresses with the interface).

The VM's primary addresses (as the primary IPs stage leaves them) carry the guest's DNS
name (`dns_name`: a container's hostname with its search domain, the host name a QEMU
guest's agent reports); a guest that did not say its name leaves theirs as they are.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update
from proxbox_backend.gateways.netbox import IP_ADDRESSES, NetBoxGateway, nested_id
from proxbox_backend.pipeline import (
    CREATE,
    DELETE,
    EVERY,
    UPDATE,
    Effect,
    Gate,
    Settle,
    Stage,
    Unreached,
    nothing_to_settle,
)
from proxbox_backend.stages import primary_ips
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun
from proxbox_backend.stages.guests import preexisting

OBJECT_TYPE = "ipam.ipaddress"
ASSIGNED_TYPE = "virtualization.vminterface"
UNCONFIRMED = tags.UNCONFIRMED.slug
MANAGED = {tags.PROXBOX.slug}


def _normalized(address: str) -> str:
    return str(ipaddress.ip_interface(address))


@dataclass(frozen=True)
class Owner:
    """Whose interface an address sits on, and whether it reported its addresses."""

    name: str  # web-001
    source: str  # who was asked: the guest's label (qemu/101 web-001)
    reported: bool = True


@dataclass(frozen=True)
class Wanted:
    interface_id: int
    address: str
    label: str


def plan(
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    current: list[dict],
    vrf_id: int | None = None,
    marked: list[dict] = (),
    primaries: dict[int, dict[str, int | None]] | None = None,
    frozen: Collection[int] = (),
) -> Plan:
    """`vrf_id`: the endpoint's VRF, where its addresses live (None: the global table).
    `marked`: addresses an operator marked for adoption (empty unless the endpoint opts in).
    `primaries`: the VMs' primary addresses before this run (`primary_ips.VmOutcomes`),
    to name the ones they will have (None: no DNS names written); `frozen`: VMs whose
    primaries this run may not set (the policy holds them back)."""
    owners = {}
    for vm_id, guest in owned:
        owner = Owner(guest.name, guest.label, guest.addresses_reported)
        for nic in guest.nics:
            if (interface_id := interface_ids.get((vm_id, nic.name))) is not None:
                owners[interface_id] = owner
    wanted = [
        Wanted(interface_id, a.address, f"{a.address} on {guest.name} {a.nic}")
        for vm_id, guest in owned
        for a in guest.addresses
        # None: the interface (or its VM) failed
        if (interface_id := interface_ids.get((vm_id, a.nic))) is not None
    ]
    shape = plan_assigned(ASSIGNED_TYPE, owners, wanted, current, vrf_id, marked=marked)
    if primaries is None or not any(guest.dns_name for _, guest in owned):
        return shape
    removed = {delete.key for delete in shape.deletes}
    names = primary_dns_names(owned, interface_ids, current, primaries, removed, frozen)
    if not names:
        return shape
    return plan_assigned(
        ASSIGNED_TYPE, owners, wanted, current, vrf_id, marked=marked, dns_names=names
    )


def primary_dns_names(
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    current: list[dict],
    primaries: dict[int, dict[str, int | None]],
    removed: set[tuple[int, str]],
    frozen: Collection[int] = (),
) -> dict[tuple[int, str], str]:
    """(interface id, address) → the guest's DNS name, of each address that is its VM's
    primary once this run is written: the primary set while it stays, else (unless the
    VM is `frozen`) the guest's first address of that IP version (`primary_ips`). A
    primary an operator chose on an interface the sync does not keep is not named."""
    slot_of = {
        ip["id"]: (ip["assigned_object_id"], _normalized(ip["address"]))
        for ip in current
        if ip.get("assigned_object_type") == ASSIGNED_TYPE
    }
    names = {}
    for vm_id, guest in owned:
        if not guest.dns_name:
            continue
        for family, field in primary_ips.FIELDS.items():
            present = primaries.get(vm_id, {}).get(field)
            if present is not None and present not in slot_of:
                continue
            slots = (
                ()
                if vm_id in frozen
                else primary_ips.family_slots(vm_id, guest, family, interface_ids)
            )
            chosen = primary_ips.keeps_or_first(slot_of.get(present), removed, slots)
            if chosen is not None:
                names[chosen] = guest.dns_name
    return names


def _dns_change(ip: dict, name: str | None) -> dict:
    """The DNS name the address should carry, when it differs (None: no opinion; an
    answer without the field: unknown, left alone)."""
    if name is None or "dns_name" not in ip or (ip.get("dns_name") or "") == name:
        return {}
    return {"dns_name": name}


def plan_assigned(
    assigned_type: str,
    owners: dict[int, Owner],
    wanted: list[Wanted],
    current: list[dict],
    vrf_id: int | None,
    *,
    only_tagged: bool = False,
    marked: list[dict] = (),
    dns_names: dict[tuple[int, str], str] | None = None,
) -> Plan:
    """Addresses on the interfaces in `owners` (of `assigned_type`) as `wanted` says.

    `only_tagged`: the interfaces are hardware an operator documents further (a node's),
    so an address Proxmox does not list is the sync's to delete only with `proxbox`.
    `marked`: addresses an operator marked for adoption, taken over instead of created.
    `dns_names`: (interface id, address) → the DNS name that address carries.
    """
    dns_names = dns_names or {}
    result = Plan(OBJECT_TYPE)
    adoptions = adoptable(marked, vrf_id)
    existing = {
        (ip["assigned_object_id"], _normalized(ip["address"])): ip
        for ip in current
        if ip.get("assigned_object_type") == assigned_type
        and ip.get("assigned_object_id") in owners
    }
    slots = set()
    for want in wanted:
        slot = (want.interface_id, want.address)
        if slot in slots:
            continue
        slots.add(slot)
        found = existing.get(slot)
        if found is None and (ip := adoptions.pop(want.address, None)) is not None:
            # Adopted: it moves to the sync's interface, gets `proxbox`, loses the marker.
            changes = {
                "assigned_object_type": assigned_type,
                "assigned_object_id": want.interface_id,
                **_dns_change(ip, dns_names.get(slot)),
            }
            changes = tags.with_sync_tags(changes, ip, MANAGED)
            result.updates.append(
                Update(slot, f"{want.label} (adopted)", ip["id"], changes, adopts=True)
            )
        elif found is None:
            payload = {
                "address": want.address,
                "status": "active",
                "vrf": vrf_id,
                "assigned_object_type": assigned_type,
                "assigned_object_id": want.interface_id,
            }
            if slot in dns_names:
                payload["dns_name"] = dns_names[slot]
            result.creates.append(
                Create(slot, want.label, tags.with_sync_tags(payload, None, MANAGED))
            )
        elif changes := tags.with_sync_tags(
            {**_vrf_change(found, vrf_id), **_dns_change(found, dns_names.get(slot))},
            found,
            MANAGED,
        ):
            result.updates.append(Update(slot, want.label, found["id"], changes))
        else:
            result.unchanged[slot] = found["id"]
    for slot, ip in existing.items():
        if slot in slots:
            continue
        owner = owners[slot[0]]
        if only_tagged and tags.PROXBOX.slug not in tags.tag_slugs(ip):
            continue  # the operator's
        if owner.reported:
            result.deletes.append(Delete(slot, f"{ip['address']} (gone from Proxmox)", ip["id"]))
        elif changes := tags.with_sync_tags(
            _dns_change(ip, dns_names.get(slot)), ip, {*MANAGED, UNCONFIRMED}
        ):
            label = f"{ip['address']} on {owner.name} (kept: {owner.source} did not report it)"
            result.updates.append(Update(slot, label, ip["id"], changes))
        else:
            result.unchanged[slot] = ip["id"]
    return result


def adoptable(marked: list[dict], vrf_id: int | None) -> dict[str, dict]:
    """Address → an IP address the sync may take over instead of creating a duplicate:
    marked `proxbox-adopt`, not the sync's (`proxbox`), in the endpoint's VRF."""
    found: dict[str, dict] = {}
    for ip in marked:
        slugs = tags.tag_slugs(ip)
        if (
            tags.ADOPT.slug in slugs
            and tags.PROXBOX.slug not in slugs
            and "vrf" in ip
            and nested_id(ip.get("vrf")) == vrf_id
        ):
            found.setdefault(_normalized(ip["address"]), ip)
    return found


def _vrf_change(ip: dict, vrf_id: int | None) -> dict:
    # A VRF of `None` in the answer means the global table; the field is absent only in
    # answers trimmed without it.
    if "vrf" not in ip:
        return {}
    return {} if nested_id(ip.get("vrf")) == vrf_id else {"vrf": vrf_id}


def marks_unconfirmed(the_plan: Plan) -> bool:
    """Whether the plan tags an address unconfirmed (so the tag must exist first)."""
    return any(
        UNCONFIRMED in (t["slug"] for t in update.changes.get("tags", ()))
        for update in the_plan.updates
    )


async def read(netbox: NetBoxGateway, preexisting_vm_ids: list[int]) -> list[dict]:
    return await netbox.ip_addresses(preexisting_vm_ids) if preexisting_vm_ids else []


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    existing_vm_ids: set[int],
    tally: Tally,
    *,
    vrf_id: int | None = None,
    adopt: bool = False,
    settle: Settle = nothing_to_settle,
    current: list[dict] | None = None,
    primaries: dict[int, dict[str, int | None]] | None = None,
    frozen: Collection[int] = (),
) -> tuple[dict[tuple[int, str], int], set[int]]:
    """((interface id, address) → id of every synced address now in NetBox, ids deleted).
    `current`: the addresses read ahead (`read`), else read now; `primaries`, `frozen`:
    the VMs' primary addresses before this run, to name (`plan`)."""
    if current is None:
        current = await read(netbox, preexisting(owned, existing_vm_ids))
    marked = await netbox.marked_ip_addresses(vrf_id) if adopt and owned else []
    the_plan = plan(owned, interface_ids, current, vrf_id, marked, primaries, frozen)
    if marks_unconfirmed(the_plan):
        await netbox.ensure_tag(tags.UNCONFIRMED, tally)
    await settle(the_plan)
    ids = await apply_plan(
        netbox.client,
        IP_ADDRESSES,
        the_plan,
        tally,
        creates_follow_updates=frees_addresses(the_plan),
    )
    return ids, {delete.id for delete in the_plan.deletes}


def frees_addresses(the_plan: Plan) -> bool:
    """Whether an update may free an address a create of the same plan takes: one that
    moves an address to another VRF (out of the one the create is in) or adopts one.
    Tag changes never do, so such updates and the creates are written at once."""
    return any("vrf" in update.changes or update.adopts for update in the_plan.updates)


# -- the stage -----------------------------------------------------------------------------
VM = "virtualization.virtualmachine"


async def read_addresses(run: StageRun, gate: Gate) -> list[dict]:
    return await read(run.netbox, gate.take("guests.kept").preexisting)


async def sync_addresses(run: StageRun, gate: Gate) -> dict:
    """The VMs' addresses, then the VMs' primary addresses; gives the synced addresses
    now in NetBox ((interface id, address) → id) to the prefixes stage."""
    owned = gate.take("guests.owned")
    interface_ids = gate.take("interfaces.ids")
    count = sum(len(g.addresses) for _, g in owned.owned)
    gate.started(count)
    ip_ids, removed_ip_ids = await apply(
        run.netbox,
        owned.owned,
        interface_ids,
        owned.existing,
        run.tally,
        vrf_id=run.endpoint.vrf_id,
        adopt=run.policy.adopt_existing,
        settle=gate.settle,
        current=gate.current,
        primaries=owned.outcomes.primaries,
        # An existing VM's primaries stay as they are where the policy holds them back.
        frozen=owned.existing if run.policy.holds_back(VM, "primary_ip4") else (),
    )
    await primary_ips.apply(
        run.netbox,
        owned.owned,
        interface_ids,
        ip_ids,
        removed_ip_ids,
        owned.outcomes,
        run.tally,
        gate.settle,
    )
    gate.finished(count)
    return {"ips.addresses": ip_ids}


STAGE = Stage(
    "ips",
    sync_addresses,
    read=read_addresses,
    starts_with=("guests.kept",),
    takes=("guests.owned", "interfaces.ids"),
    gives=("ips.addresses",),
    reads=frozenset({OBJECT_TYPE}),
    writes={
        OBJECT_TYPE: EVERY,
        VM: frozenset({UPDATE}),  # the primaries
        "extras.tag": frozenset({CREATE}),  # `proxbox-unconfirmed`, the first time
    },
    effects=(
        Effect(
            OBJECT_TYPE,
            frozenset({DELETE}),
            VM,
            whole_row=True,
            why="deleting a VM's primary address saves the VM without it",
        ),
    ),
    unreached=(
        Unreached(
            OBJECT_TYPE,
            frozenset({DELETE}),
            "dcim.device",
            why="an address on a VM interface is never a device's primary or out-of-band one",
        ),
    ),
    events="ips",
)
