"""Stage `ips`: guest addresses (agent, container config) → IPAddress on the VMInterface.

Addresses assigned to an interface the sync owns belong to the sync: one that no
longer shows up in Proxmox is deleted; everything else in IPAM is left alone.
"""

from __future__ import annotations

import ipaddress

from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan
from proxbox_backend.gateways.netbox import IP_ADDRESSES, NetBoxGateway
from proxbox_backend.stages.apply import apply_plan

OBJECT_TYPE = "ipam.ipaddress"
ASSIGNED_TYPE = "virtualization.vminterface"


def _normalized(address: str) -> str:
    return str(ipaddress.ip_interface(address))


def plan(
    owned: list[tuple[int, Guest]], interface_ids: dict[tuple[int, str], int], current: list[dict]
) -> Plan:
    result = Plan(OBJECT_TYPE)
    ours = set(interface_ids.values())
    existing = {
        (ip["assigned_object_id"], _normalized(ip["address"])): ip
        for ip in current
        if ip.get("assigned_object_type") == ASSIGNED_TYPE and ip.get("assigned_object_id") in ours
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
            if slot in existing:
                result.unchanged[slot] = existing[slot]["id"]
            else:
                payload = {
                    "address": address.address,
                    "status": "active",
                    "assigned_object_type": ASSIGNED_TYPE,
                    "assigned_object_id": interface_id,
                }
                result.creates.append(
                    Create(slot, f"{address.address} on {guest.name} {address.nic}", payload)
                )
    for slot, ip in existing.items():
        if slot not in wanted:
            result.deletes.append(Delete(slot, f"{ip['address']} (gone from Proxmox)", ip["id"]))
    return result


async def apply(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    interface_ids: dict[tuple[int, str], int],
    existing_vm_ids: set[int],
    tally: Tally,
) -> tuple[dict[tuple[int, str], int], set[int]]:
    """((interface id, address) → id of every synced address now in NetBox, ids deleted)."""
    # Only VMs that existed before this run can already have addresses.
    lookup = [vm_id for vm_id, _ in owned if vm_id in existing_vm_ids]
    current = await netbox.ip_addresses(lookup) if lookup else []
    the_plan = plan(owned, interface_ids, current)
    ids = await apply_plan(netbox.client, IP_ADDRESSES, the_plan, tally)
    return ids, {delete.id for delete in the_plan.deletes}
