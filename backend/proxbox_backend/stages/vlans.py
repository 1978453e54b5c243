"""Stage `vlans`: the VLAN ids of guest NICs (`tag=`, `trunks=`) → NetBox VLANs in the
endpoint's own VLAN group (scoped to its cluster), so that clusters reusing a VLAN id
never share a VLAN object.

VLANs are created on demand and never deleted: a VLAN no guest uses this run may still
be a network an operator documents. Nothing is read or written when no NIC has a VLAN.
"""

from __future__ import annotations

from proxbox_backend.background import together
from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.plan import Create, Plan, Update
from proxbox_backend.gateways.netbox import VLANS, NetBoxGateway
from proxbox_backend.stages.apply import apply_plan

OBJECT_TYPE = "ipam.vlan"
MANAGED = {tags.PROXBOX.slug}


def group_slug(cluster_id: int) -> str:
    return f"proxbox-cluster-{cluster_id}"


def group_payload(cluster_id: int, endpoint_name: str) -> dict:
    return {
        "name": f"Proxbox {endpoint_name}"[:100],
        "slug": group_slug(cluster_id),
        "scope_type": "virtualization.cluster",
        "scope_id": cluster_id,
        "description": "VLANs of this Proxmox endpoint's guest NICs, kept by the Proxbox sync.",
        "tags": tags.tags_field([tags.PROXBOX.slug]),
    }


def wanted_vids(guests: list[Guest]) -> set[int]:
    return {
        vid
        for guest in guests
        for nic in guest.nics
        for vid in ((nic.vlan,) if nic.vlan else ()) + nic.trunks
    }


def plan(vids: set[int], group_id: int, current: list[dict]) -> Plan:
    result = Plan(OBJECT_TYPE)
    by_vid = {vlan["vid"]: vlan for vlan in current}
    for vid in sorted(vids):
        found = by_vid.get(vid)
        label = f"VLAN {vid}"
        if found is None:
            payload = {"vid": vid, "name": label, "group": group_id, "status": "active"}
            result.creates.append(Create(vid, label, tags.with_sync_tags(payload, None, MANAGED)))
        elif changes := tags.with_sync_tags({}, found, MANAGED):
            result.updates.append(Update(vid, label, found["id"], changes))
        else:
            result.unchanged[vid] = found["id"]
    return result


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    endpoint_name: str,
    guests: list[Guest],
    tally: Tally,
) -> dict[int, int]:
    """VLAN id → NetBox VLAN id for every VLAN the guests' NICs use."""
    vids = wanted_vids(guests)
    if not vids:
        return {}
    # The group's VLANs are read by its slug while the group is looked up (or created).
    slug = group_slug(cluster_id)
    group_id, current = await together(
        netbox.vlan_group(slug, group_payload(cluster_id, endpoint_name), tally),
        netbox.vlans(slug),
    )
    return await apply_plan(netbox.client, VLANS, plan(vids, group_id, current), tally)
