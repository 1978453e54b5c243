"""Stage `node interfaces`: each node's /nodes/{node}/network → interfaces of its device.

Bridges, bonds (LAG) and VLAN interfaces (virtual) keep their type, MTU, state and
comment; bond members point at their LAG, bridge ports at their bridge, VLAN
interfaces at their parent.  Two plans: the interfaces themselves, then (once every
interface has an id) those links.

A device is hardware an operator may document further: only interfaces carrying the
`proxbox` tag are the sync's to delete, and a node whose network could not be read
(offline, refused) keeps its interfaces as they are.
"""

from __future__ import annotations

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import NodeInterface
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.gateways.netbox import DEVICE_INTERFACES, NetBoxGateway, nested_id
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
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun

OBJECT_TYPE = "dcim.interface"
MANAGED = {tags.PROXBOX.slug}
LINKS = ("parent", "lag", "bridge")

# device id → the node's interfaces (only for nodes whose network was read)
Networks = dict[int, list[NodeInterface]]


def _type(interface: dict):
    value = interface.get("type")
    return value.get("value") if isinstance(value, dict) else value


def _fields(interface: NodeInterface) -> dict:
    return {
        "type": interface.type,
        "enabled": interface.enabled,
        "mtu": interface.mtu,
        "description": interface.description,
    }


def _current(interface: dict) -> dict:
    return {
        "type": _type(interface),
        "enabled": interface.get("enabled"),
        "mtu": interface.get("mtu"),
        "description": interface.get("description") or "",
    }


def _existing(networks: Networks, current: list[dict]) -> dict[tuple[int, str], dict]:
    return {
        (nested_id(i["device"]), i["name"]): i
        for i in current
        if nested_id(i.get("device")) in networks
    }


def plan(networks: Networks, current: list[dict]) -> Plan:
    result = Plan(OBJECT_TYPE)
    existing = _existing(networks, current)
    wanted = set()
    for device_id, interfaces in networks.items():
        for interface in interfaces:
            slot = (device_id, interface.name)
            wanted.add(slot)
            label = f"{interface.name} of device {device_id}"
            found = existing.get(slot)
            fields = _fields(interface)
            if found is None:
                payload = {"device": device_id, "name": interface.name, **fields}
                result.creates.append(
                    Create(slot, label, tags.with_sync_tags(payload, None, MANAGED))
                )
            elif changes := tags.with_sync_tags(diff(fields, _current(found)), found, MANAGED):
                result.updates.append(Update(slot, label, found["id"], changes))
            else:
                result.unchanged[slot] = found["id"]
    for slot, interface in existing.items():
        if slot not in wanted and tags.PROXBOX.slug in tags.tag_slugs(interface):
            label = f"{slot[1]} of device {slot[0]} (gone from Proxmox)"
            result.deletes.append(Delete(slot, label, interface["id"]))
    return result


def plan_links(networks: Networks, current: list[dict], ids: dict[tuple[int, str], int]) -> Plan:
    """Parent, LAG and bridge of every synced interface, by id (None clears a link)."""
    result = Plan(OBJECT_TYPE)
    existing = _existing(networks, current)
    for device_id, interfaces in networks.items():
        for interface in interfaces:
            slot = (device_id, interface.name)
            if slot not in ids:
                continue  # its create failed
            wanted = {
                link: ids.get((device_id, name)) if name else None
                for link in LINKS
                if (name := getattr(interface, link)) is None or (device_id, name) in ids
            }
            found = existing.get(slot, {})
            now = {link: nested_id(found.get(link)) for link in LINKS}
            if changes := diff(wanted, now):
                label = f"{interface.name} of device {device_id} links"
                result.updates.append(Update(slot, label, ids[slot], changes))
    return result


async def apply(
    netbox: NetBoxGateway,
    networks: Networks,
    existing_devices: set[int],
    tally: Tally,
    settle: Settle = nothing_to_settle,
) -> dict[tuple[int, str], int]:
    """(device id, interface name) → id of every synced interface now in NetBox."""
    lookup = [device_id for device_id in networks if device_id in existing_devices]
    current = await netbox.device_interfaces(lookup) if lookup else []
    shape = plan(networks, current)
    await settle(shape)
    ids = await apply_plan(netbox.client, DEVICE_INTERFACES, shape, tally)
    links = plan_links(networks, current, ids)
    if not links.updates:
        return ids
    result = await netbox.client.bulk_update(
        DEVICE_INTERFACES, [{"id": u.id, **u.changes} for u in links.updates]
    )
    # Linking is part of shaping an interface: an interface created or updated above is
    # counted once already; one that was unchanged becomes updated.
    for position in result.succeeded:
        if links.updates[position].key in shape.unchanged:
            tally.add(OBJECT_TYPE, "unchanged", -1)
            tally.add(OBJECT_TYPE, "updated")
    for position, reason in result.failed.items():
        tally.fail(OBJECT_TYPE, links.updates[position].label, reason)
    return ids


# -- the stage -----------------------------------------------------------------------------


def networks_of(run: StageRun, device_ids: dict[str, int]) -> Networks:
    """The nodes' networks to sync: a node target refreshes that node's, a guest target
    no node's."""
    target = run.policy.target
    return {
        device_ids[name]: interfaces
        for name, interfaces in run.inventory.node_networks.items()
        if name in device_ids and (target is None or name == target.node)
    }


async def sync_node_interfaces(run: StageRun, gate: Gate) -> dict:
    networks = networks_of(run, gate.take("nodes.devices"))
    count = sum(len(interfaces) for interfaces in networks.values())
    gate.started(count)
    ids = await apply(run.netbox, networks, set(networks), run.tally, gate.settle)
    gate.finished(count)
    # The devices whose interfaces this run synced: their ids above are all there are.
    return {"node_interfaces.ids": ids, "node_interfaces.devices": frozenset(networks)}


STAGE = Stage(
    "node interfaces",
    sync_node_interfaces,
    starts_with=("inventory",),
    takes=("nodes.devices",),
    gives=("node_interfaces.ids", "node_interfaces.devices"),
    reads=frozenset({OBJECT_TYPE}),
    writes={OBJECT_TYPE: EVERY},
    effects=(
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, DELETE}),
            "dcim.device",
            whole_row=False,
            why="a device counts its interfaces",
        ),
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, UPDATE}),
            "dcim.macaddress",
            whole_row=True,
            why="saving an interface saves its primary MAC address",
        ),
    ),
    unreached=(
        Unreached(
            OBJECT_TYPE,
            frozenset({CREATE, UPDATE}),
            "dcim.cablepath",
            why="the sync cables no interface and makes none a channel: no path to retrace",
        ),
    ),
    left_out=lambda run: (
        None
        if run.known_devices is None
        else {"node_interfaces.ids": {}, "node_interfaces.devices": frozenset()}
    ),
    events="node interfaces",
)
