"""Stage `nodes`: Proxmox nodes → NetBox devices in the claimed cluster.

Role and type are set when a device is created and left alone afterwards, so an
operator can give a node its real hardware model.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import ProxmoxNode
from proxbox_backend.domain.plan import Create, Plan, PlanningFailure, Update, diff
from proxbox_backend.gateways.netbox import DEVICES, NetBoxGateway, nested_id
from proxbox_backend.stages.apply import apply_plan

OBJECT_TYPE = "dcim.device"
MANAGED = {tags.PROXBOX.slug}


@dataclass(frozen=True)
class NodePlacement:
    cluster_id: int
    site_id: int | None
    tenant_id: int | None
    role_id: int
    device_type_id: int


def _current(device: dict) -> dict:
    status = device.get("status")
    return {
        "status": status.get("value") if isinstance(status, dict) else status,
        "site": nested_id(device.get("site")),
        "tenant": nested_id(device.get("tenant")),
        "cluster": nested_id(device.get("cluster")),
    }


def plan(nodes: list[ProxmoxNode], current: list[dict], placement: NodePlacement) -> Plan:
    result = Plan(OBJECT_TYPE)
    by_name = {d["name"]: d for d in current if d.get("name")}
    for node in nodes:
        desired = {
            "status": "active" if node.online else "offline",
            "site": placement.site_id,
            "tenant": placement.tenant_id,
            "cluster": placement.cluster_id,
        }
        existing = by_name.get(node.name)
        if existing is not None:
            changes = tags.with_sync_tags(diff(desired, _current(existing)), existing, MANAGED)
            if changes:
                result.updates.append(Update(node.name, node.name, existing["id"], changes))
            else:
                result.unchanged[node.name] = existing["id"]
        elif placement.site_id is None:
            result.failures.append(
                PlanningFailure(node.name, "NetBox devices need a site: set the endpoint's site")
            )
        else:
            payload = {
                "name": node.name,
                "role": placement.role_id,
                "device_type": placement.device_type_id,
                **desired,
            }
            payload = tags.with_sync_tags(payload, None, MANAGED)
            result.creates.append(Create(node.name, node.name, payload))
    return result


async def apply(
    netbox: NetBoxGateway, nodes: list[ProxmoxNode], placement: NodePlacement, tally: Tally
) -> dict[str, int]:
    """Node name → device id for every node that has a device now."""
    current = await netbox.devices(placement.cluster_id)
    return await apply_plan(netbox.client, DEVICES, plan(nodes, current, placement), tally)
