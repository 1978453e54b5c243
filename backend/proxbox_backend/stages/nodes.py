"""Stage `nodes`: Proxmox nodes → NetBox devices in the claimed cluster.

Role and type are set when a device is created and left alone afterwards, so an
operator can give a node its real hardware model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import ProxmoxNode
from proxbox_backend.domain.plan import Create, Plan, PlanningFailure, Update, diff
from proxbox_backend.gateways.netbox import DEVICES, SOURCE_FIELD, NetBoxGateway, nested_id
from proxbox_backend.pipeline import (
    CREATE,
    DELETE,
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
from proxbox_backend.stages.primary_ips import VmOutcomes, current_primaries

OBJECT_TYPE = "dcim.device"
MANAGED = {tags.PROXBOX.slug}


@dataclass(frozen=True)
class NodePlacement:
    cluster_id: int
    site_id: int | None
    tenant_id: int | None
    role_id: int
    device_type_id: int
    adopt: bool = False  # the endpoint's opt-in: take over marked devices at its site


def node_key(cluster_id: int, name: str) -> str:
    """The source key an operator writes on a device to have that node adopt it."""
    return f"cluster-{cluster_id}/node/{name}"


def adoptable(site_devices: list[dict], placement: NodePlacement) -> dict[str, dict]:
    """Node name → a device at the endpoint's site that the node may take over: only with
    adoption on, only in no cluster (or this one), not the sync's, and marked: by the
    `proxbox-adopt` tag and the node's exact name, or by its source field naming this
    cluster's node (any name; that mark wins). A key naming anything else never adopts."""
    if not placement.adopt or placement.site_id is None:
        return {}
    prefix = node_key(placement.cluster_id, "")
    tagged: dict[str, dict] = {}
    keyed: dict[str, dict] = {}
    for device in site_devices:
        slugs = tags.tag_slugs(device)
        if (
            nested_id(device.get("site")) != placement.site_id
            or nested_id(device.get("cluster")) not in (None, placement.cluster_id)
            or tags.PROXBOX.slug in slugs
        ):
            continue
        if source := (device.get("custom_fields") or {}).get(SOURCE_FIELD):
            if source.startswith(prefix) and source[len(prefix) :]:
                keyed.setdefault(source[len(prefix) :], device)
        elif device.get("name") and tags.ADOPT.slug in slugs:
            tagged.setdefault(device["name"], device)
    return {**tagged, **keyed}


def _current(device: dict) -> dict:
    status = device.get("status")
    return {
        "name": device.get("name"),
        "status": status.get("value") if isinstance(status, dict) else status,
        "site": nested_id(device.get("site")),
        "tenant": nested_id(device.get("tenant")),
        "cluster": nested_id(device.get("cluster")),
    }


# The next run finds a node's device by its name among the cluster's devices.
DEVICE_IDENTITY = frozenset({"name", "cluster"})


def plan(
    nodes: list[ProxmoxNode],
    current: list[dict],
    placement: NodePlacement,
    site_devices: list[dict] = (),
) -> Plan:
    result = Plan(OBJECT_TYPE)
    by_name = {d["name"]: d for d in current if d.get("name")}
    marked = adoptable(site_devices, placement)
    for node in nodes:
        desired = {
            "status": "active" if node.online else "offline",
            "site": placement.site_id,
            "tenant": placement.tenant_id,
            "cluster": placement.cluster_id,
        }
        existing = by_name.get(node.name)
        if existing is None and node.name in marked:
            # Adopted: it joins the cluster, gets `proxbox`, loses `proxbox-adopt`.
            device = marked[node.name]
            # The node's name too: a device marked by its key may be named otherwise, and
            # the next run finds the node's device by name.
            wanted = {**desired, "name": node.name}
            changes = tags.with_sync_tags(diff(wanted, _current(device)), device, MANAGED)
            result.updates.append(
                Update(
                    node.name,
                    f"{node.name} (adopted)",
                    device["id"],
                    changes,
                    adopts=True,
                    identity=DEVICE_IDENTITY,
                )
            )
        elif existing is not None:
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
    netbox: NetBoxGateway,
    nodes: list[ProxmoxNode],
    placement: NodePlacement,
    tally: Tally,
    settle: Settle = nothing_to_settle,
) -> tuple[dict[str, int], VmOutcomes]:
    """(node name → device id for every node that has a device now, what this did to them)."""
    current = await netbox.devices(placement.cluster_id)
    site_devices = []
    if placement.adopt and placement.site_id is not None:
        site_devices = await netbox.site_devices(placement.site_id)
    the_plan = plan(nodes, current, placement, site_devices)
    await settle(the_plan)
    ids = await apply_plan(netbox.client, DEVICES, the_plan, tally)
    outcomes = VmOutcomes(
        existing=frozenset(d["id"] for d in current) | {u.id for u in the_plan.updates},
        unchanged=frozenset(the_plan.unchanged.values()),
        primaries=current_primaries([*site_devices, *current]),
    )
    return ids, outcomes


# -- the stage -----------------------------------------------------------------------------


async def sync_nodes(run: StageRun, gate: Gate) -> dict:
    """Node name → device id; a node target learns its device."""
    endpoint, policy = run.endpoint, run.policy
    gate.started(len(run.nodes))
    placement = NodePlacement(
        run.cluster_id,
        endpoint.site_id,
        endpoint.tenant_id,
        run.prerequisites.device_role_id,
        run.prerequisites.device_type_id,
        adopt=policy.adopt_existing,
    )
    device_ids, outcomes = await apply(run.netbox, run.nodes, placement, run.tally, gate.settle)
    gate.finished(len(run.nodes))
    if policy.target is not None and policy.target.node is not None:
        run.policy = dataclasses.replace(policy, target=policy.target.with_device(device_ids))
    return {"nodes.devices": device_ids, "nodes.outcomes": outcomes}


STAGE = Stage(
    "nodes",
    sync_nodes,
    starts_with=("inventory",),
    gives=("nodes.devices", "nodes.outcomes"),
    reads=frozenset({OBJECT_TYPE}),
    writes={OBJECT_TYPE: frozenset({CREATE, UPDATE})},
    effects=(
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, DELETE}),
            "dcim.devicetype",
            whole_row=False,
            why="a device type counts its devices",
        ),
    ),
    unreached=(
        Unreached(
            OBJECT_TYPE,
            frozenset({CREATE, DELETE}),
            "dcim.virtualchassis",
            why="the sync puts no device in a virtual chassis",
        ),
    ),
    # An incremental run whose nodes are the baseline's keeps the baseline's devices.
    left_out=lambda run: (
        None
        if run.known_devices is None
        else {"nodes.devices": run.known_devices, "nodes.outcomes": None}
    ),
    events="nodes",
)
