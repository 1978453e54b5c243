"""Stage `prefixes` (opt-in, `prefixes_mode`): a prefix in the endpoint's VRF for each
network the synced guest addresses live in that has none (`domain.prefixes` says which
and when one goes).

It starts once the addresses are written (the ips stage gives them) and reads once the
SDN stage's prefixes are, so that an SDN subnet covers its network. A run that synced
every guest may also remove the sync's prefixes; a targeted or incremental run only
creates what its guests need (it cannot tell a network empty from a guest it left out).
An incremental run that synced no guest reads nothing; with the switch off (the default)
the stage is left out: nothing is read, written or removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxbox_backend.background import together
from proxbox_backend.domain import prefixes
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.policy import OFF
from proxbox_backend.gateways import netbox as nb
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.pipeline import CREATE, EVERY, Gate, Settle, Stage, nothing_to_settle
from proxbox_backend.stages.apply import apply_plan
from proxbox_backend.stages.context import StageRun


@dataclass
class PrefixState:
    """What the stage read. `living` None: the run may not remove (not every guest synced)."""

    found: list[str]  # the networks of this run's synced addresses, broadest first
    present: list[dict]  # the VRF's prefixes containing or equal to one of them / an own one
    own: list[dict]  # the cluster's own prefixes
    living: set[str] | None
    field_exists: bool


async def read(
    netbox: NetBoxGateway,
    cluster_id: int,
    vrf_id: int | None,
    addresses: list[str],
    complete: bool,
) -> PrefixState:
    """`addresses`: the synced addresses now in NetBox; `complete`: the run synced every
    guest (then the cluster's own prefixes are read, to remove what went)."""
    found = prefixes.networks(addresses)
    if not complete:
        if not found:
            return PrefixState(found, [], [], None, field_exists=False)
        present = await netbox.covering_prefixes(vrf_id, found)
        own = [p for p in present if prefixes.is_own(p, cluster_id)]
        # Unknown (the field is made with the first create, when missing).
        return PrefixState(found, present, own, None, field_exists=bool(own))
    exists, present = await together(
        netbox.prefix_field_exists(), netbox.covering_prefixes(vrf_id, found)
    )
    own = await netbox.own_prefixes(cluster_id) if exists else []
    own = [p for p in own if prefixes.is_own(p, cluster_id)]
    others = sorted({prefixes.network(p) for p in own} - set(found))
    living: set[str] = set()
    if others:
        more, within = await together(
            netbox.covering_prefixes(vrf_id, others), netbox.vm_addresses_within(vrf_id, others)
        )
        seen = {p["id"] for p in present}
        present += [p for p in more if p["id"] not in seen]
        living = {n for a in within if (n := prefixes.network_of(a["address"])) in others}
    return PrefixState(found, present, own, living, field_exists=exists)


async def apply(
    netbox: NetBoxGateway,
    cluster_id: int,
    vrf_id: int | None,
    site_id: int | None,
    state: PrefixState,
    tally: Tally,
    settle: Settle = nothing_to_settle,
) -> dict[str, int]:
    """Network → id of each prefix of the sync's now in NetBox."""
    desired, gone = prefixes.decide(cluster_id, state.found, state.present, state.own, state.living)
    the_plan = prefixes.plan(cluster_id, desired, state.own, vrf_id, site_id, gone=gone)
    if the_plan.creates and not state.field_exists:
        await netbox.ensure_prefix_field(tally)
    await settle(the_plan)
    return await apply_plan(netbox.client, nb.PREFIXES, the_plan, tally)


# -- the stage -------------------------------------------------------------------------------


def synced_every_guest(run: StageRun, gate: Gate) -> bool:
    selected = gate.take("guests.selected")
    synced = {(g.kind, g.vmid) for g in selected.guests}
    return run.policy.target is None and synced >= {(g.kind, g.vmid) for g in run.guests}


async def read_prefixes(run: StageRun, gate: Gate) -> PrefixState:
    addresses = [address for _interface, address in gate.take("ips.addresses")]
    return await read(
        run.netbox,
        run.cluster_id,
        run.endpoint.vrf_id,
        addresses,
        synced_every_guest(run, gate),
    )


async def sync_prefixes(run: StageRun, gate: Gate) -> None:
    state: PrefixState = gate.current
    if not state.found and not state.own:
        gate.skipped()
        return
    gate.started(len(state.found))
    await apply(
        run.netbox,
        run.cluster_id,
        run.endpoint.vrf_id,
        run.endpoint.site_id,
        state,
        run.tally,
        gate.settle,
    )
    gate.finished(len(state.found))


STAGE = Stage(
    "prefixes",
    sync_prefixes,
    read=read_prefixes,
    starts_with=("guests.selected", "ips.addresses"),
    # The addresses it counts, the SDN subnets' prefixes that cover a network, and its
    # source-key field.
    reads=frozenset({prefixes.OBJECT_TYPE, "ipam.ipaddress", "extras.customfield"}),
    writes={prefixes.OBJECT_TYPE: EVERY, "extras.customfield": frozenset({CREATE})},
    # Off unless the endpoint's policy switches it on (`SyncPolicy.family_mode`).
    left_out=lambda run: {} if run.policy.family_mode(prefixes.FAMILY) == OFF else None,
    events="prefixes",
)
