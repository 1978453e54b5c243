"""Stage `nodes`: Proxmox nodes → NetBox devices in the claimed cluster.

The role is set when a device is created and left alone afterwards. The device type is
the endpoint's: a node's override, else the endpoint's node device type, kept on every
run; with neither configured, the generic "Proxmox VE node" type at creation, left alone
afterwards (an operator may set the node's real hardware model by hand). The node's
hardware facts (/nodes/{node}/status: CPU, memory, kernel, release) are custom fields
of the device; a node whose status could not be read keeps the ones it has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import NodeFacts, ProxmoxNode
from proxbox_backend.domain.plan import Create, Plan, PlanningFailure, Update, diff
from proxbox_backend.gateways.netbox import (
    DEVICES,
    NODE_FACT_FIELDS,
    SOURCE_FIELD,
    NetBoxGateway,
    nested_id,
)
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
    device_type_id: int  # the generic type a device gets when none is configured
    adopt: bool = False  # the endpoint's opt-in: take over marked devices at its site
    # node name → the device type configured for it (the endpoint's or its override):
    # kept on every run. A node missing here keeps whatever type its device has.
    device_types: dict[str, int] = field(default_factory=dict)

    def device_type_of(self, node: str) -> int:
        """The type a new device of `node` gets."""
        return self.device_types.get(node, self.device_type_id)


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
        "device_type": nested_id(device.get("device_type")),
    }


def fact_fields(facts: NodeFacts | None) -> dict:
    """The custom fields of a node's facts (a fact it did not report is left out)."""
    if facts is None:
        return {}
    return {
        name: value
        for attribute, (name, *_rest) in NODE_FACT_FIELDS.items()
        if (value := getattr(facts, attribute)) is not None
    }


def _with_facts(changes: dict, facts: dict, device: dict) -> dict:
    """`changes` plus the facts that differ from the device's custom fields (NetBox keeps
    the custom fields a write does not name)."""
    current = device.get("custom_fields") or {}
    differing = diff(facts, current)
    if not differing:
        return changes
    return {**changes, "custom_fields": {**changes.get("custom_fields", {}), **differing}}


# The next run finds a node's device by its name among the cluster's devices.
DEVICE_IDENTITY = frozenset({"name", "cluster"})


def plan(
    nodes: list[ProxmoxNode],
    current: list[dict],
    placement: NodePlacement,
    site_devices: list[dict] = (),
    facts: dict[str, NodeFacts] | None = None,
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
        if node.name in placement.device_types:
            desired["device_type"] = placement.device_types[node.name]
        known = fact_fields((facts or {}).get(node.name))
        existing = by_name.get(node.name)
        if existing is None and node.name in marked:
            # Adopted: it joins the cluster, gets `proxbox`, loses `proxbox-adopt`.
            device = marked[node.name]
            # The node's name too: a device marked by its key may be named otherwise, and
            # the next run finds the node's device by name.
            wanted = {**desired, "name": node.name}
            changes = _with_facts(diff(wanted, _current(device)), known, device)
            changes = tags.with_sync_tags(changes, device, MANAGED)
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
            changes = _with_facts(diff(desired, _current(existing)), known, existing)
            changes = tags.with_sync_tags(changes, existing, MANAGED)
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
                **desired,
                "device_type": placement.device_type_of(node.name),
            }
            if known:
                payload["custom_fields"] = known
            payload = tags.with_sync_tags(payload, None, MANAGED)
            result.creates.append(Create(node.name, node.name, payload))
    return result


async def apply(
    netbox: NetBoxGateway,
    nodes: list[ProxmoxNode],
    placement: NodePlacement,
    tally: Tally,
    settle: Settle = nothing_to_settle,
    facts: dict[str, NodeFacts] | None = None,
) -> tuple[dict[str, int], VmOutcomes]:
    """(node name → device id for every node that has a device now, what this did to them)."""
    current = await netbox.devices(placement.cluster_id)
    site_devices = []
    if placement.adopt and placement.site_id is not None:
        site_devices = await netbox.site_devices(placement.site_id)
    the_plan = plan(nodes, current, placement, site_devices, facts)
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
        device_types={
            node.name: type_id
            for node in run.nodes
            if (type_id := endpoint.node_device_type(node.name)) is not None
        },
    )
    facts = run.inventory.node_facts if run.inventory is not None else {}
    device_ids, outcomes = await apply(
        run.netbox, run.nodes, placement, run.tally, gate.settle, facts
    )
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
            frozenset({CREATE, UPDATE, DELETE}),
            "dcim.devicetype",
            whole_row=False,
            # An update moves a device to its configured type: both types recount.
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
