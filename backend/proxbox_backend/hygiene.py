"""IPAM hygiene checks of one run (`domain.hygiene` has the rules and their severities).

They run once the stage graph is done, in a preview (against what NetBox holds and what
the plan would write: the guests, their VMs as placeholders where the run would create
them) and after a real run (the same checks, as its report). They only read NetBox, a
bounded number of requests: one per 50 addresses, MACs, networks' supernets or VLAN ids
(plus one for the clusters of VMs holding a guest's MAC, when there are such), and they
check only the guests this run synced: a no-op incremental run synced none and reads
nothing. A check that cannot read NetBox leaves a warning, never fails the run.
"""

from __future__ import annotations

from proxbox_backend.background import together
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxError
from proxbox_backend.domain import hygiene, prefixes
from proxbox_backend.domain.models import Guest
from proxbox_backend.domain.policy import OFF
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.stages import vlans
from proxbox_backend.stages.context import StageRun

IPS = "ipam.ipaddress"
INTERFACES = "virtualization.vminterface"
VLANS = "ipam.vlan"


def facts(owned: list[tuple[int, Guest]], *, ips=True, macs=True, vids=True):
    """What the checks compare of the guests, of the families the policy syncs."""
    return [
        hygiene.GuestFacts(
            vm_id,
            guest.label,
            tuple((a.nic, a.address) for a in guest.addresses) if ips else (),
            tuple((nic.name, nic.mac) for nic in guest.nics if nic.mac) if macs else (),
            tuple(vlans.wanted_vids([guest])) if vids else (),
        )
        for vm_id, guest in owned
    ]


async def _nothing() -> list:
    return []


async def findings(
    netbox: NetBoxGateway,
    guests: list[hygiene.GuestFacts],
    *,
    vrf_id: int | None,
    cluster_id: int,
    creates_prefixes: bool,
) -> list[hygiene.Finding]:
    hosts, macs, vids = hygiene.hosts(guests), hygiene.macs(guests), hygiene.vids(guests)
    networks = hygiene.networks(guests)
    group = vlans.group_slug(cluster_id)
    addresses, mac_objects, covering, group_vlans = await together(
        netbox.addresses_at(vrf_id, hosts) if hosts else _nothing(),
        netbox.mac_address_objects(macs) if macs else _nothing(),
        netbox.covering_prefixes(vrf_id, networks) if networks else _nothing(),
        netbox.group_vlans(group, vids) if vids and cluster_id > 0 else _nothing(),
    )
    own_vms = {g.vm_id for g in guests}
    holders = sorted(
        {vm for obj in mac_objects if (vm := hygiene.vm_of(obj)) is not None and vm not in own_vms}
    )
    clusters = await netbox.vm_clusters(holders) if holders else {}
    table = "the global table" if vrf_id is None else f"VRF #{vrf_id}"
    return hygiene.ordered(
        [
            *hygiene.duplicate_addresses(guests, addresses, table),
            *hygiene.mac_collisions(guests, mac_objects, clusters),
            *hygiene.outside_prefixes(guests, covering, table, creates_prefixes),
            *hygiene.vlan_clashes(guests, group_vlans, group),
        ]
    )


async def check(run: StageRun) -> list[dict]:
    """The findings of the guests this run synced, as its report lists them."""
    owned = run.owned.owned if run.owned is not None else []
    if not owned:
        return []
    policy = run.policy
    guests = facts(
        owned,
        ips=policy.mode(IPS) != OFF,
        macs=policy.mode(INTERFACES) != OFF,
        vids=policy.mode(VLANS) != OFF,
    )
    try:
        found = await findings(
            run.netbox,
            guests,
            vrf_id=run.endpoint.vrf_id,
            cluster_id=run.cluster_id,
            creates_prefixes=policy.family_mode(prefixes.FAMILY) != OFF,
        )
    except (NetBoxError, TransportError) as exc:
        run.report.warnings.append(f"IPAM checks could not read NetBox: {exc}")
        return []
    return [finding.as_dict() for finding in found]
