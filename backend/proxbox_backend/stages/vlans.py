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
from proxbox_backend.pipeline import CREATE, UPDATE, Gate, Settle, Stage, nothing_to_settle
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun

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
    settle: Settle = nothing_to_settle,
    current: tuple[int | None, list[dict]] | None = None,
) -> dict[int, int]:
    """VLAN id → NetBox VLAN id for every VLAN the guests' NICs use. `current`: the
    group's id (None: no group yet) and VLANs read ahead (`read`), else read now."""
    vids = wanted_vids(guests)
    if not vids:
        return {}
    slug = group_slug(cluster_id)
    payload = group_payload(cluster_id, endpoint_name)
    if current is None:
        # The group's VLANs are read by its slug while the group is looked up (or created).
        group_id, vlans = await together(
            netbox.vlan_group(slug, payload, tally), netbox.vlans(slug)
        )
    else:
        found, vlans = current
        group_id = found if found is not None else await netbox.create_vlan_group(payload, tally)
    the_plan = plan(vids, group_id, vlans)
    await settle(the_plan)
    return await apply_plan(netbox.client, VLANS, the_plan, tally)


async def read(netbox: NetBoxGateway, cluster_id: int) -> tuple[int | None, list[dict]]:
    slug = group_slug(cluster_id)
    return tuple(await together(netbox.vlan_group_id(slug), netbox.vlans(slug)))


# -- the stage -----------------------------------------------------------------------------
GROUP_TYPE = "ipam.vlangroup"


async def read_vlans(run: StageRun, gate: Gate) -> tuple[int | None, list[dict]] | None:
    """The group and its VLANs, when a guest that stays has a VLAN (none: nothing read)."""
    if not wanted_vids(gate.take("guests.kept").guests):
        return None
    return await read(run.netbox, run.cluster_id)


async def sync_vlans(run: StageRun, gate: Gate) -> dict:
    guests = [g for _, g in gate.take("guests.owned").owned]
    vids = wanted_vids(guests)
    gate.started(len(vids))
    ids = await apply(
        run.netbox, run.cluster_id, run.endpoint.name, guests, run.tally, gate.settle, gate.current
    )
    gate.finished(len(vids))
    return {"vlans.ids": ids}


STAGE = Stage(
    "vlans",
    sync_vlans,
    read=read_vlans,
    starts_with=("guests.kept",),
    takes=("guests.owned",),
    gives=("vlans.ids",),
    reads=frozenset({OBJECT_TYPE, GROUP_TYPE}),
    writes={GROUP_TYPE: frozenset({CREATE}), OBJECT_TYPE: frozenset({CREATE, UPDATE})},
    events="vlans",
)
