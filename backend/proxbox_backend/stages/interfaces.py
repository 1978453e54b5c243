"""Stage `interfaces`: guest NICs → VMInterface with the MAC as its primary MAC address.

NetBox 4.x keeps MACs in `dcim.MACAddress` objects; the interface serializer's
`mac_address` shortcut creates or reassigns the primary one in the same request.
Every interface of a virtual machine the sync owns is the sync's to keep in shape.
"""

from __future__ import annotations

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.gateways.netbox import VM_INTERFACES, NetBoxGateway, nested_id
from proxbox_backend.stages.apply import apply_plan

OBJECT_TYPE = "virtualization.vminterface"
MANAGED = {tags.PROXBOX.slug}


def _current(interface: dict) -> dict:
    mac = interface.get("primary_mac_address")
    mac = mac.get("mac_address") if isinstance(mac, dict) else mac
    return {
        "enabled": interface.get("enabled"),
        "description": interface.get("description") or "",
        "mac_address": mac.upper() if mac else None,
    }


def plan(owned: list[tuple[int, Guest]], current: list[dict]) -> Plan:
    """`owned`: (VM id, guest) of every guest whose virtual machine exists."""
    result = Plan(OBJECT_TYPE)
    ours = {vm_id for vm_id, _ in owned}
    existing = {
        (nested_id(i["virtual_machine"]), i["name"]): i
        for i in current
        if nested_id(i.get("virtual_machine")) in ours
    }
    wanted = set()
    for vm_id, guest in owned:
        for nic in guest.nics:
            slot = (vm_id, nic.name)
            wanted.add(slot)
            fields = {
                "enabled": nic.enabled,
                "description": nic.description,
                "mac_address": nic.mac,
            }
            label = f"{guest.name} {nic.name}"
            found = existing.get(slot)
            if found is None:
                payload = {"virtual_machine": vm_id, "name": nic.name, **fields}
                result.creates.append(
                    Create(slot, label, tags.with_sync_tags(payload, None, MANAGED))
                )
            elif changes := tags.with_sync_tags(diff(fields, _current(found)), found, MANAGED):
                result.updates.append(Update(slot, label, found["id"], changes))
            else:
                result.unchanged[slot] = found["id"]
    for slot, interface in existing.items():
        if slot not in wanted:
            result.deletes.append(
                Delete(slot, f"interface {slot[1]} of VM {slot[0]}", interface["id"])
            )
    return result


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    owned: list[tuple[int, Guest]],
    existing_vm_ids: set[int],
    tally: Tally,
) -> dict[tuple[int, str], int]:
    """(VM id, interface name) → interface id."""
    # A cluster whose VMs are all new this run has no interfaces to read.
    fetch = any(vm_id in existing_vm_ids for vm_id, _ in owned)
    current = await netbox.interfaces(cluster_id) if fetch else []
    return await apply_plan(netbox.client, VM_INTERFACES, plan(owned, current), tally)
