"""Stages `sdn` and `sdn links`: Proxmox SDN → NetBox VLAN groups, VLANs, L2VPNs,
prefixes, gateway addresses and DHCP ranges (`domain.sdn` says what becomes what), and
the guest interfaces plugged into a VNet → L2VPN terminations.

`sdn` runs before the interfaces stage: it gives each VNet's VLAN or L2VPN as soon as
they are written (before the subnets; after its deletions when a VLAN or L2VPN goes),
so that an interface on a VLAN VNet gets it as its untagged VLAN in the interfaces
stage's own write. `sdn links` terminates the interfaces on VXLAN/EVPN VNets once they exist.

Objects are created parents first and deleted children first (NetBox protects a VLAN
group's VLANs and a VLAN's prefixes from deletion). `sdn_mode` off leaves both stages
out: nothing is read, written or removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from proxbox_backend.background import together
from proxbox_backend.domain import sdn
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.plan import Plan
from proxbox_backend.gateways import netbox as nb
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.pipeline import (
    CREATE,
    DELETE,
    EVERY,
    Effect,
    Gate,
    Settle,
    Stage,
    Unreached,
    nothing_to_settle,
)
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun


@dataclass(frozen=True)
class Kind:
    object_type: str
    path: str
    fields: str  # what the planner compares


GROUPS = Kind(sdn.VLAN_GROUP, nb.VLAN_GROUPS, "id,name,slug,scope_type,scope_id,description")
VLANS = Kind(sdn.VLAN, nb.VLANS, "id,vid,name,group,status,description")
L2VPNS = Kind(sdn.L2VPN, nb.L2VPNS, "id,name,slug,type,identifier,description")
PREFIXES = Kind(sdn.PREFIX, nb.PREFIXES, "id,prefix,vrf,vlan,status,description")
GATEWAYS = Kind(sdn.IP_ADDRESS, nb.IP_ADDRESSES, "id,address,vrf,status,role,description")
RANGES = Kind(sdn.IP_RANGE, nb.IP_RANGES, "id,start_address,end_address,vrf,status,description")
KINDS = (GROUPS, VLANS, L2VPNS, PREFIXES, GATEWAYS, RANGES)


@dataclass
class SdnState:
    """What the stage read: Proxmox's SDN, whether NetBox has the source-key field yet,
    and this cluster's SDN objects in NetBox (by object type)."""

    sdn: sdn.Sdn
    warnings: list[str]
    field_exists: bool
    current: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        found = self.sdn.zones or self.sdn.vnets or self.sdn.subnets
        return not found and not any(self.current.values())


async def read(netbox: NetBoxGateway, proxmox, cluster_id: int) -> SdnState:
    warnings: list[str] = []
    found, fields = await together(
        proxmox.sdn(warnings),
        netbox.client.list(nb.CUSTOM_FIELDS, {"name": sdn.KEY_FIELD, "fields": "id"}),
    )
    state = SdnState(found, warnings, bool(fields))
    if state.field_exists:
        answers = await together(
            *(
                netbox.sdn_objects(k.path, cluster_id, f"{k.fields},tags,custom_fields")
                for k in KINDS
            )
        )
        prefix = sdn.key_prefix(cluster_id)
        state.current = {
            k.object_type: [o for o in objs if (sdn.key_of(o) or "").startswith(prefix)]
            for k, objs in zip(KINDS, answers, strict=True)
        }
    return state


def _split(the_plan: Plan) -> tuple[Plan, Plan]:
    """The plan's creates and updates, and its deletes (written later: children first)."""
    return replace(the_plan, deletes=[]), replace(
        the_plan, creates=[], updates=[], unchanged={}, failures=[]
    )


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    endpoint_name: str,
    vrf_id: int | None,
    state: SdnState,
    tally: Tally,
    settle: Settle = nothing_to_settle,
    linked: Callable[[sdn.VNetLinks], None] = lambda _links: None,
) -> sdn.VNetLinks:
    """Write the cluster's SDN; each VNet's VLAN or L2VPN id (for its guests' NICs),
    told to `linked` as soon as they exist when none goes, before the subnets are written."""
    found, answered = state.sdn, state.sdn.answered
    if state.empty:
        return sdn.VNetLinks()
    if not state.field_exists:
        await netbox.ensure_sdn_field(tally)

    def planned(kind: Kind, desired: dict[str, dict]) -> Plan:
        return sdn.plan(
            kind.object_type, desired, state.current.get(kind.object_type, []), answered
        )

    async def write(kind: Kind, the_plan: Plan) -> dict:
        await settle(the_plan)
        return await apply_plan(netbox.client, kind.path, the_plan, tally)

    groups, groups_gone = _split(planned(GROUPS, sdn.desired_vlan_groups(cluster_id, found)))
    group_ids = await write(GROUPS, groups)
    vlans, vlans_gone = _split(planned(VLANS, sdn.desired_vlans(cluster_id, found, group_ids)))
    l2vpns, l2vpns_gone = _split(
        planned(L2VPNS, sdn.desired_l2vpns(cluster_id, endpoint_name, found))
    )
    vlan_ids, l2vpn_ids = await together(write(VLANS, vlans), write(L2VPNS, l2vpns))
    links = sdn.links(cluster_id, found, vlan_ids, l2vpn_ids)
    if not (vlans_gone.deletes or l2vpns_gone.deletes):
        # Nothing of what guest interfaces link to goes: they may be written while the
        # subnets are. A deletion cascades into interfaces (a VLAN's untagged ports) and
        # L2VPN terminations, which the interfaces stage deletes with their interfaces:
        # then the interfaces wait until it is done.
        linked(links)
    await together(
        write(
            PREFIXES, planned(PREFIXES, sdn.desired_prefixes(cluster_id, found, vrf_id, vlan_ids))
        ),
        write(GATEWAYS, planned(GATEWAYS, sdn.desired_gateways(cluster_id, found, vrf_id))),
        write(RANGES, planned(RANGES, sdn.desired_ranges(cluster_id, found, vrf_id))),
    )
    # Children first: a VLAN's prefixes are gone now, a group's VLANs next.
    await together(write(VLANS, vlans_gone), write(L2VPNS, l2vpns_gone))
    await write(GROUPS, groups_gone)
    return links


# -- the stages -------------------------------------------------------------------------------


async def read_sdn(run: StageRun, gate: Gate) -> SdnState:
    return await read(run.netbox, run.proxmox, run.cluster_id)


async def sync_sdn(run: StageRun, gate: Gate) -> dict:
    state = gate.current
    run.report.read_failures.extend(state.warnings)
    if state.empty:
        gate.skipped()
        return {"sdn.links": sdn.VNetLinks()}
    total = len(state.sdn.zones) + len(state.sdn.vnets) + len(state.sdn.subnets)
    gate.started(total)
    links = await apply(
        run.netbox,
        run.cluster_id,
        run.endpoint.name,
        run.endpoint.vrf_id,
        state,
        run.tally,
        gate.settle,
        # The interfaces stage need not wait for the subnets and the deletions: a VNet's
        # VLAN or L2VPN it links to is written by then, one it no longer wants goes later.
        lambda links: gate.give("sdn.links", links),
    )
    gate.finished(total)
    return {"sdn.links": links}


STAGE = Stage(
    "sdn",
    sync_sdn,
    read=read_sdn,
    gives=("sdn.links",),
    # Its source-key field is asked for too, which no other stage creates.
    reads=frozenset(k.object_type for k in KINDS),
    writes={
        **{k.object_type: EVERY for k in KINDS},
        "extras.customfield": frozenset({CREATE}),
    },
    # A deleted VLAN is cleared from interfaces that carried it (the foreign key's SET
    # NULL), which is no signal: the interfaces stage writes only after this stage gave
    # its links, and never wants a VLAN this stage deleted.
    effects=(
        Effect(
            sdn.L2VPN,
            frozenset({DELETE}),
            sdn.TERMINATION,
            whole_row=False,
            why="a deleted L2VPN takes its terminations with it",
        ),
    ),
    # A gateway address is assigned to no interface, so it is nobody's primary or
    # out-of-band address (NetBox refuses an unassigned one there).
    unreached=tuple(
        Unreached(
            sdn.IP_ADDRESS,
            frozenset({DELETE}),
            owner,
            why="an SDN gateway address is on no interface: never a primary or OOB address",
        )
        for owner in ("dcim.device", "virtualization.virtualmachine")
    ),
    policy=sdn.L2VPN,
    events="sdn",
)


async def sync_links(run: StageRun, gate: Gate) -> None:
    """L2VPN terminations of the owned guests' NICs on a VXLAN/EVPN VNet."""
    links: sdn.VNetLinks = gate.take("sdn.links")
    owned = gate.take("guests.owned").owned
    interfaces = gate.take("interfaces.ids")
    wanted, known = {}, set()
    for vm_id, guest in owned:
        for nic in guest.nics:
            interface = interfaces.get((vm_id, nic.name))
            if interface is None:
                continue
            known.add(interface)
            if nic.bridge in links.l2vpns:
                wanted[interface] = links.l2vpns[nic.bridge]
    if not links.l2vpns:
        gate.skipped()
        return
    gate.started(len(wanted))
    current = await run.netbox.l2vpn_terminations(sorted(links.l2vpns.values()))
    the_plan = sdn.plan_terminations(wanted, current, known)
    await gate.settle(the_plan)
    await apply_plan(run.netbox.client, nb.L2VPN_TERMINATIONS, the_plan, run.tally)
    gate.finished(len(wanted))


LINKS = Stage(
    "sdn links",
    sync_links,
    takes=("sdn.links", "guests.owned", "interfaces.ids"),
    reads=frozenset({sdn.TERMINATION}),
    writes={sdn.TERMINATION: EVERY},
    policy=sdn.TERMINATION,
    events="sdn links",
)
