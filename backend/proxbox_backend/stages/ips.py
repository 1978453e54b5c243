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
"""

from __future__ import annotations

import ipaddress

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update
from proxbox_backend.gateways.netbox import IP_ADDRESSES, NetBoxGateway, nested_id
from proxbox_backend.stages.apply import apply_plan

OBJECT_TYPE = "ipam.ipaddress"
ASSIGNED_TYPE = "virtualization.vminterface"
UNCONFIRMED = tags.UNCONFIRMED.slug
MANAGED = {tags.PROXBOX.slug}


def _normalized(address: str) -> str:
    return str(ipaddress.ip_interface(address))


def plan(
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    current: list[dict],
    vrf_id: int | None = None,
    marked: list[dict] = (),
) -> Plan:
    """`vrf_id`: the endpoint's VRF, where its addresses live (None: the global table).
    `marked`: addresses an operator marked for adoption (empty unless the endpoint opts in)."""
    result = Plan(OBJECT_TYPE)
    adoptions = adoptable(marked, vrf_id)
    guest_of_interface = {}
    for vm_id, guest in owned:
        for nic in guest.nics:
            if (interface_id := interface_ids.get((vm_id, nic.name))) is not None:
                guest_of_interface[interface_id] = guest
    existing = {
        (ip["assigned_object_id"], _normalized(ip["address"])): ip
        for ip in current
        if ip.get("assigned_object_type") == ASSIGNED_TYPE
        and ip.get("assigned_object_id") in guest_of_interface
    }
    wanted = set()
    for vm_id, guest in owned:
        for address in guest.addresses:
            interface_id = interface_ids.get((vm_id, address.nic))
            if interface_id is None:
                continue  # the interface (or its VM) failed
            slot = (interface_id, address.address)
            if slot in wanted:
                continue
            wanted.add(slot)
            label = f"{address.address} on {guest.name} {address.nic}"
            found = existing.get(slot)
            if found is None and (ip := adoptions.pop(address.address, None)) is not None:
                # Adopted: it moves to the sync's interface, gets `proxbox`, loses the marker.
                changes = {
                    "assigned_object_type": ASSIGNED_TYPE,
                    "assigned_object_id": interface_id,
                }
                changes = tags.with_sync_tags(changes, ip, MANAGED)
                result.updates.append(
                    Update(slot, f"{label} (adopted)", ip["id"], changes, adopts=True)
                )
            elif found is None:
                payload = {
                    "address": address.address,
                    "status": "active",
                    "vrf": vrf_id,
                    "assigned_object_type": ASSIGNED_TYPE,
                    "assigned_object_id": interface_id,
                }
                result.creates.append(
                    Create(slot, label, tags.with_sync_tags(payload, None, MANAGED))
                )
            elif changes := tags.with_sync_tags(_vrf_change(found, vrf_id), found, MANAGED):
                result.updates.append(Update(slot, label, found["id"], changes))
            else:
                result.unchanged[slot] = found["id"]
    for slot, ip in existing.items():
        if slot in wanted:
            continue
        guest = guest_of_interface[slot[0]]
        if guest.addresses_reported:
            result.deletes.append(Delete(slot, f"{ip['address']} (gone from Proxmox)", ip["id"]))
        elif changes := tags.with_sync_tags({}, ip, {*MANAGED, UNCONFIRMED}):
            label = f"{ip['address']} on {guest.name} (kept: {guest.label} did not report it)"
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


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    existing_vm_ids: set[int],
    tally: Tally,
    *,
    vrf_id: int | None = None,
    adopt: bool = False,
) -> tuple[dict[tuple[int, str], int], set[int]]:
    """((interface id, address) → id of every synced address now in NetBox, ids deleted)."""
    # Only VMs that existed before this run can already have addresses.
    lookup = [vm_id for vm_id, _ in owned if vm_id in existing_vm_ids]
    current = await netbox.ip_addresses(lookup) if lookup else []
    marked = await netbox.marked_ip_addresses(vrf_id) if adopt and owned else []
    the_plan = plan(owned, interface_ids, current, vrf_id, marked)
    if marks_unconfirmed(the_plan):
        await netbox.ensure_tag(tags.UNCONFIRMED, tally)
    ids = await apply_plan(netbox.client, IP_ADDRESSES, the_plan, tally)
    return ids, {delete.id for delete in the_plan.deletes}
