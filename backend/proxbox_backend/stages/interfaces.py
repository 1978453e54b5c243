"""Stage `interfaces`: guest NICs → VMInterface with the MAC as its primary MAC address.

NetBox 4.x keeps MACs in `dcim.MACAddress` objects; the interface serializer's
`mac_address` shortcut creates or reassigns the primary one in the same request.
Every interface of a virtual machine the sync owns is the sync's to keep in shape.

Two custom fields of the interface say where the NIC is in the guest and on the node:

* `proxbox_guest_interface`: the guest's own name of it (`ens18` beside `net0`), from
  the QEMU guest agent by MAC or a container's `name=`; a VM whose agent does not
  answer keeps the name it had.
* `proxbox_bridge`: the node's bridge it plugs into, as the interface of the node's
  device (NetBox's own `bridge` links interfaces of one VM only); its VLANs are the
  interface's 802.1Q mode. The guest's node decides, so a migrated guest's NIC follows
  it to the new node's bridge.
"""

from __future__ import annotations

from proxbox_backend.domain import sdn, tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest, GuestNic
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.gateways.netbox import (
    BRIDGE_FIELD,
    GUEST_INTERFACE_FIELD,
    VM_INTERFACES,
    NetBoxGateway,
    nested_id,
)
from proxbox_backend.pipeline import (
    CREATE,
    DELETE,
    EVERY,
    UPDATE,
    Effect,
    Gate,
    Settle,
    Stage,
    nothing_to_settle,
)
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun

OBJECT_TYPE = "virtualization.vminterface"
MANAGED = {tags.PROXBOX.slug}


def _current(interface: dict) -> dict:
    mac = interface.get("primary_mac_address")
    mac = mac.get("mac_address") if isinstance(mac, dict) else mac
    mode = interface.get("mode")
    return {
        "enabled": interface.get("enabled"),
        "description": interface.get("description") or "",
        "mac_address": mac.upper() if mac else None,
        "mode": mode.get("value") if isinstance(mode, dict) else mode,
        "untagged_vlan": nested_id(interface.get("untagged_vlan")),
        "tagged_vlans": sorted(nested_id(v) for v in interface.get("tagged_vlans") or ()),
    }


def _current_fields(interface: dict) -> dict:
    fields = interface.get("custom_fields") or {}
    return {
        GUEST_INTERFACE_FIELD: fields.get(GUEST_INTERFACE_FIELD),
        BRIDGE_FIELD: nested_id(fields.get(BRIDGE_FIELD)),
    }


# (node name, bridge name) → the id of that node device's interface of that name, None
# when it has none; a pair missing is unknown this run (its interface stays as it is).
Bridges = dict[tuple[str, str], int | None]


def custom_fields(guest: Guest, nic: GuestNic, bridges: Bridges) -> dict:
    """The NIC's guest OS name and node bridge, as far as this run knows them."""
    wanted = {}
    if guest.guest_names_known:
        wanted[GUEST_INTERFACE_FIELD] = nic.guest_name
    if nic.bridge is None:
        wanted[BRIDGE_FIELD] = None
    elif (guest.node, nic.bridge) in bridges:
        wanted[BRIDGE_FIELD] = bridges[(guest.node, nic.bridge)]
    return wanted


NO_VLANS = {"mode": None, "untagged_vlan": None, "tagged_vlans": []}


def vlan_fields(
    nic: GuestNic, vlan_ids: dict[int, int], vnet_vlans: dict[str, int] | None = None
) -> dict:
    """802.1Q mode and VLANs of the NIC's interface: `tag=` is the access (untagged) VLAN,
    `trunks=` makes it a tagged port carrying those VLANs too; a NIC plugged into an SDN
    VNet of a VLAN zone (`bridge=<vnet>`, `vnet_vlans`: VNet → its VLAN) is an access
    port of the VNet's VLAN.

    Empty when a VLAN it needs is missing (its create failed): the fields stay as they are.
    """
    if nic.vlan is None and not nic.trunks:
        vnet_vlan = (vnet_vlans or {}).get(nic.bridge or "")
        if vnet_vlan is not None:
            return {"mode": "access", "untagged_vlan": vnet_vlan, "tagged_vlans": []}
        return NO_VLANS
    needed = ((nic.vlan,) if nic.vlan else ()) + nic.trunks
    if any(vid not in vlan_ids for vid in needed):
        return {}
    return {
        "mode": "tagged" if nic.trunks else "access",
        "untagged_vlan": vlan_ids[nic.vlan] if nic.vlan else None,
        "tagged_vlans": sorted(vlan_ids[vid] for vid in nic.trunks),
    }


def plan(
    owned: list[tuple[int, Guest]],
    current: list[dict],
    vlan_ids: dict[int, int] | None = None,
    bridges: Bridges | None = None,
    vnet_vlans: dict[str, int] | None = None,
) -> Plan:
    """`owned`: (VM id, guest) of every guest whose virtual machine exists; `bridges`:
    the node bridges their NICs plug into (`bridge_ids`); `vnet_vlans`: the VLAN of each
    SDN VNet of a VLAN zone (`stages.sdn`)."""
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
            vlans = vlan_fields(nic, vlan_ids or {}, vnet_vlans)
            fields = {
                "enabled": nic.enabled,
                "description": nic.description,
                "mac_address": nic.mac,
                **vlans,
            }
            wanted_fields = custom_fields(guest, nic, bridges or {})
            label = f"{guest.name} {nic.name}"
            found = existing.get(slot)
            if found is None:
                payload = {"virtual_machine": vm_id, "name": nic.name, **fields}
                if vlans is NO_VLANS:
                    payload = {k: v for k, v in payload.items() if k not in NO_VLANS}
                if set_fields := {k: v for k, v in wanted_fields.items() if v is not None}:
                    payload["custom_fields"] = set_fields
                result.creates.append(
                    Create(slot, label, tags.with_sync_tags(payload, None, MANAGED))
                )
                continue
            changes = diff(fields, _current(found))
            if changed_fields := diff(wanted_fields, _current_fields(found)):
                changes["custom_fields"] = changed_fields
            if changes := tags.with_sync_tags(changes, found, MANAGED):
                result.updates.append(Update(slot, label, found["id"], changes))
            else:
                result.unchanged[slot] = found["id"]
    for slot, interface in existing.items():
        if slot not in wanted:
            result.deletes.append(
                Delete(slot, f"interface {slot[1]} of VM {slot[0]}", interface["id"])
            )
    return result


async def read(netbox: NetBoxGateway, cluster_id: int, preexisting_vm_ids: list[int]) -> list[dict]:
    # A cluster whose VMs are all new this run has no interfaces to read.
    return await netbox.interfaces(cluster_id, preexisting_vm_ids) if preexisting_vm_ids else []


async def bridge_ids(
    netbox: NetBoxGateway,
    owned: list[tuple[int, Guest]],
    devices: dict[str, int],
    synced: dict[tuple[int, str], int],
    synced_devices: frozenset[int],
) -> Bridges:
    """The node bridges the owned guests' NICs plug into. `synced`: (device id, name) →
    id of the interfaces the node interfaces stage synced this run, all of those of
    `synced_devices`; other devices' bridges (an incremental or targeted run) are read
    from NetBox, in one request. A node without a device leaves its guests' NICs as
    they are."""
    out: Bridges = {}
    lookup: dict[int, set[str]] = {}
    for _, guest in owned:
        device = devices.get(guest.node)
        for nic in guest.nics:
            if nic.bridge is None or device is None:
                continue
            if device in synced_devices:
                out[(guest.node, nic.bridge)] = synced.get((device, nic.bridge))
            else:
                lookup.setdefault(device, set()).add(nic.bridge)
    if not lookup:
        return out
    names = sorted(set().union(*lookup.values()))
    found = await netbox.named_device_interfaces(sorted(lookup), names)
    ids = {(nested_id(i["device"]), i["name"]): i["id"] for i in found}
    node_of = {device: node for node, device in devices.items()}
    for device, bridges in lookup.items():
        for bridge in bridges:
            out[(node_of[device], bridge)] = ids.get((device, bridge))
    return out


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    owned: list[tuple[int, Guest]],
    existing_vm_ids: set[int],
    tally: Tally,
    vlan_ids: dict[int, int] | None = None,
    settle: Settle = nothing_to_settle,
    current: list[dict] | None = None,
    bridges: Bridges | None = None,
    vnet_vlans: dict[str, int] | None = None,
) -> dict[tuple[int, str], int]:
    """(VM id, interface name) → interface id. `current`: the interfaces read ahead
    (`read`), else read now; `bridges`: the node bridges of their NICs (`bridge_ids`)."""
    if current is None:
        existing = [vm_id for vm_id, _ in owned if vm_id in existing_vm_ids]
        current = await read(netbox, cluster_id, existing)
    the_plan = plan(owned, current, vlan_ids, bridges, vnet_vlans)
    await settle(the_plan)
    return await apply_plan(netbox.client, VM_INTERFACES, the_plan, tally)


# -- the stage -----------------------------------------------------------------------------


async def read_interfaces(run: StageRun, gate: Gate) -> list[dict]:
    return await read(run.netbox, run.cluster_id, gate.take("guests.kept").preexisting)


async def sync_interfaces(run: StageRun, gate: Gate) -> dict:
    owned = gate.take("guests.owned")
    count = sum(len(g.nics) for _, g in owned.owned)
    gate.started(count)
    bridges = await bridge_ids(
        run.netbox,
        owned.owned,
        gate.take("nodes.devices"),
        gate.take("node_interfaces.ids"),
        gate.take("node_interfaces.devices"),
    )
    ids = await apply(
        run.netbox,
        run.cluster_id,
        owned.owned,
        owned.existing,
        run.tally,
        gate.take("vlans.ids"),
        gate.settle,
        gate.current,
        bridges,
        # SDN off (the stage left out): no VNet links the interfaces to its VLAN.
        (gate.take("sdn.links") or sdn.VNetLinks()).vlans,
    )
    gate.finished(count)
    return {"interfaces.ids": ids}


STAGE = Stage(
    "interfaces",
    sync_interfaces,
    read=read_interfaces,
    starts_with=("guests.kept",),
    takes=(
        "guests.owned",
        "vlans.ids",
        "sdn.links",
        "nodes.devices",
        "node_interfaces.ids",
        "node_interfaces.devices",
    ),
    gives=("interfaces.ids",),
    reads=frozenset({OBJECT_TYPE}),
    writes={OBJECT_TYPE: EVERY},
    effects=(
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, DELETE}),
            "virtualization.virtualmachine",
            whole_row=False,
            why="a VM counts its interfaces",
        ),
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, UPDATE}),
            "dcim.macaddress",
            whole_row=True,
            why="saving an interface saves its primary MAC address (the `mac_address` shortcut)",
        ),
    ),
    events="interfaces",
)
