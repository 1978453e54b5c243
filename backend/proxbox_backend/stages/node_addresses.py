"""Stage `node addresses`: each node interface's CIDRs → IPAddress on the device interface,
and the device's `primary_ip4` / `primary_ip6`.

The same planner as guest addresses (`ips.plan_assigned`), in the endpoint's VRF. A node
is hardware an operator documents further: an address Proxmox no longer lists is deleted
only if it carries `proxbox`, and a node whose network was unreadable is not planned at
all, so its addresses stay as they are.

The primary of each IP version is, like a VM's, kept while it exists; an empty slot (or
one whose address this run deleted) gets the node's management address: the one on the
interface carrying the address `/cluster/status` reports for the node, else the first
address of that version on the interface holding that version's default gateway.
"""

from __future__ import annotations

import ipaddress

from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import NodeInterface
from proxbox_backend.domain.plan import Plan, Update
from proxbox_backend.gateways.netbox import DEVICES, IP_ADDRESSES, NetBoxGateway
from proxbox_backend.pipeline import (
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
from proxbox_backend.stages import ips, primary_ips
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun
from proxbox_backend.stages.node_interfaces import Networks, networks_of
from proxbox_backend.stages.primary_ips import FIELDS, VmOutcomes

ASSIGNED_TYPE = "dcim.interface"
DEVICE_TYPE = "dcim.device"

InterfaceIds = dict[tuple[int, str], int]  # (device id, interface name) → interface id
IpIds = dict[tuple[int, str], int]  # (interface id, address) → address id


def plan(
    networks: Networks,
    interface_ids: InterfaceIds,
    current: list[dict],
    vrf_id: int | None = None,
) -> Plan:
    owners, wanted = {}, []
    for device_id, interfaces in networks.items():
        for interface in interfaces:
            interface_id = interface_ids.get((device_id, interface.name))
            if interface_id is None:
                continue  # its create failed
            owners[interface_id] = ips.Owner(f"device {device_id}", f"device {device_id}")
            wanted += [
                ips.Wanted(interface_id, a, f"{a} on {interface.name} of device {device_id}")
                for a in interface.addresses
            ]
    return ips.plan_assigned(ASSIGNED_TYPE, owners, wanted, current, vrf_id, only_tagged=True)


def _version(address: str) -> int:
    return ipaddress.ip_interface(address).version


def _management(interfaces: list[NodeInterface], cluster_ip: str | None, version: int):
    """(interface, address) candidates for the primary of `version`, best first."""
    carrying = [
        i for i in interfaces if cluster_ip and any(_ip(a) == cluster_ip for a in i.addresses)
    ]
    for interface in carrying:
        exact = [a for a in interface.addresses if _ip(a) == cluster_ip]
        rest = [a for a in interface.addresses if a not in exact]
        yield from ((interface, a) for a in [*exact, *rest] if _version(a) == version)
    for interface in interfaces:
        if version in interface.gateways:
            yield from ((interface, a) for a in interface.addresses if _version(a) == version)


def _ip(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip)


def plan_primaries(
    networks: Networks,
    cluster_ips: dict[int, str | None],
    interface_ids: InterfaceIds,
    ip_ids: IpIds,
    primaries: dict[int, dict[str, int | None]],
    removed_ip_ids: set[int],
) -> Plan:
    """`cluster_ips`: device id → the node's address in /cluster/status."""
    result = Plan(DEVICE_TYPE)
    for device_id, interfaces in networks.items():
        current = primaries.get(device_id, {})
        changes = {}
        for version, name in FIELDS.items():
            present = current.get(name)
            if present is not None and present not in removed_ip_ids:
                continue
            for interface, address in _management(interfaces, cluster_ips.get(device_id), version):
                interface_id = interface_ids.get((device_id, interface.name))
                if (chosen := ip_ids.get((interface_id, address))) is not None:
                    changes[name] = chosen
                    break
        if changes:
            result.updates.append(
                Update(device_id, f"device {device_id} primary IP", device_id, changes)
            )
    return result


async def apply(
    netbox: NetBoxGateway,
    networks: Networks,
    cluster_ips: dict[int, str | None],
    interface_ids: InterfaceIds,
    outcomes: VmOutcomes,
    tally: Tally,
    *,
    vrf_id: int | None = None,
    settle: Settle = nothing_to_settle,
) -> None:
    lookup = [device_id for device_id in networks if device_id in outcomes.existing]
    current = await netbox.device_ip_addresses(lookup) if lookup else []
    the_plan = plan(networks, interface_ids, current, vrf_id)
    await settle(the_plan)
    ip_ids = await apply_plan(netbox.client, IP_ADDRESSES, the_plan, tally)
    removed = {delete.id for delete in the_plan.deletes}
    primaries = plan_primaries(
        networks, cluster_ips, interface_ids, ip_ids, outcomes.primaries, removed
    )
    primaries = await primary_ips.restrict_primaries(netbox, DEVICES, primaries, outcomes)
    await primary_ips.write(netbox, DEVICES, primaries, outcomes, tally, settle)


# -- the stage -----------------------------------------------------------------------------


async def sync_node_addresses(run: StageRun, gate: Gate) -> None:
    device_ids = gate.take("nodes.devices")
    networks = networks_of(run, device_ids)
    count = sum(len(i.addresses) for interfaces in networks.values() for i in interfaces)
    gate.started(count)
    await apply(
        run.netbox,
        networks,
        {device_ids[n.name]: n.ip for n in run.nodes if n.name in device_ids},
        gate.take("node_interfaces.ids"),
        gate.take("nodes.outcomes"),
        run.tally,
        vrf_id=run.endpoint.vrf_id,
        settle=gate.settle,
    )
    gate.finished(count)


STAGE = Stage(
    "node addresses",
    sync_node_addresses,
    starts_with=("inventory",),
    takes=("nodes.devices", "nodes.outcomes", "node_interfaces.ids"),
    reads=frozenset({ips.OBJECT_TYPE}),
    writes={ips.OBJECT_TYPE: EVERY, DEVICE_TYPE: frozenset({UPDATE})},
    effects=(
        Effect(
            ips.OBJECT_TYPE,
            frozenset({DELETE}),
            DEVICE_TYPE,
            whole_row=True,
            why="deleting a device's primary or out-of-band address saves the device",
        ),
    ),
    unreached=(
        Unreached(
            ips.OBJECT_TYPE,
            frozenset({DELETE}),
            "virtualization.virtualmachine",
            why="an address on a device interface is never a VM's primary (NetBox refuses it)",
        ),
    ),
    left_out=lambda run: None if run.known_devices is None else {},
    events="node addresses",
)
