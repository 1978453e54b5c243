"""Incremental runs, the application side: read the change log since the baseline,
decide what the run may leave out, and write the next baseline (`domain/baseline.py`
says what each piece means)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from dataclasses import dataclass

from proxbox_backend import __version__
from proxbox_backend.background import together
from proxbox_backend.baselines import BaselineStore, baseline_key
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxError
from proxbox_backend.domain import baseline as bl
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Guest
from proxbox_backend.gateways.netbox import (
    ChangeLogUnreadable,
    GuestScope,
    NetBoxGateway,
    Prerequisites,
)
from proxbox_backend.stages import records as records_stage
from proxbox_backend.stages.guests import cluster_source, source_key

# A change NetBox logged just before the baseline's run read its first entry may commit
# after that read (its transaction was still open): others' changes are read from this
# much earlier than the baseline's start, and seen twice at worst.
OVERLAP = dt.timedelta(minutes=5)

RECORD_TYPES = frozenset(kind.object_type for kind in records_stage.TYPES)


@dataclass
class History:
    """What the change log says since the baseline; `reason` set: a full run."""

    baseline: bl.Baseline | None
    started: tuple[int, str] | None  # the newest change before this run wrote anything
    drift: bl.Drift = dataclasses.field(default_factory=bl.Drift)
    reason: str | None = None


async def read_history(
    netbox: NetBoxGateway, store: BaselineStore, key: str, full_sync_interval: float
) -> History:
    """Read before the run writes anything: this run's starting position in the change
    log, the baseline, and what others changed since it."""
    if full_sync_interval <= 0:
        return await _full_run(netbox, None, "incremental runs are off (interval 0)")
    baseline = await store.load(key)
    if baseline is None:
        return await _full_run(netbox, None, "no baseline of an earlier successful run")
    if time.time() - baseline.full_at > full_sync_interval:
        return await _full_run(netbox, baseline, "periodic full run")
    ended_id, ended_time = baseline.ended_change
    # Anyone's changes after the baseline's run ended (the sync's own user included: an
    # operator sharing its token, a run that stopped half-way), starting with the entry
    # that ended it: if it is gone, the log was pruned or NetBox restored.  The newest of
    # them is where this run starts, so one read gives both.  And, at the same time,
    # others' changes while that run wrote.
    others_since = {}
    if baseline.started_change is not None:
        since = dt.datetime.fromisoformat(baseline.started_change[1]) - OVERLAP
        others_since = {"time_after": since.isoformat()}
    try:
        later, others = await together(
            netbox.changes(id__gte=ended_id),
            netbox.changes(user_id__n=baseline.user_id, id__lte=ended_id, **others_since),
        )
    except ChangeLogUnreadable as exc:
        return History(None, None, reason=str(exc))
    if not later or (later[0]["id"], later[0]["time"]) != (ended_id, ended_time):
        return await _full_run(netbox, baseline, "the change log does not reach the baseline")
    started = (later[-1]["id"], later[-1]["time"])
    changes = [bl.Change.from_api(entry) for entry in [*others, *later[1:]]]
    interface_type, interface_vms = None, {}
    if any(change.names_interfaces for change in changes):
        interface_type = await netbox.object_type_id(bl.VM_INTERFACE)
        interfaces = bl.interfaces_to_resolve(changes, interface_type)
        interface_vms = await netbox.interface_vms(sorted(interfaces)) if interfaces else {}
    drift = bl.drift(changes, RECORD_TYPES, interface_vms, baseline, interface_type)
    return History(baseline, started, drift, drift.full_reason)


async def _full_run(netbox: NetBoxGateway, baseline: bl.Baseline | None, reason: str) -> History:
    """A full run still starts from its position in the change log (the next baseline
    records it); a change log it may not read makes it one for that reason."""
    try:
        started = await netbox.newest_change()
    except ChangeLogUnreadable as exc:
        return History(None, None, reason=str(exc))
    return History(baseline, started, reason=reason)


def context_digest(
    endpoint: Endpoint,
    cluster_id: int,
    disappeared: str,
    templates: str,
    tag_colors: dict,
) -> str:
    """Everything outside the guests and nodes that shapes what the sync writes."""
    return bl.digest(
        {
            "release": __version__,
            "cluster": cluster_id,
            "endpoint": dataclasses.replace(endpoint, netbox_cluster_id=None),
            "disappeared": disappeared,
            "templates": templates,
            "tag_colors": tag_colors,
        }
    )


class Incremental:
    """One run's use of the baseline: whether it is incremental, which guests it syncs,
    and the baseline it leaves."""

    def __init__(self, store: BaselineStore, netbox: NetBoxGateway, endpoint: Endpoint):
        self.store, self.netbox = store, netbox
        self.key = baseline_key(str(netbox.client.base_url), endpoint.id)
        self.adopting = endpoint.policy.adopt_existing
        self.history = History(None, None, reason="not read")
        self.scope: bl.Scope | None = None
        self.context = ""
        self.nodes = ""
        self.digests: dict[str, str] = {}
        # VMID → (config digest, snapshot list digest) of the guests whose snapshots this
        # run knows: read, or known from the baseline.
        self.snapshots: dict[int, tuple[str, str]] = {}
        self.known_snapshots: dict[int, str] = {}
        self.config_digests: dict[int, str] = {}

    async def read(self, full_sync_interval: float) -> None:
        self.history = await read_history(self.netbox, self.store, self.key, full_sync_interval)

    def may_skip(self) -> bool:
        """Whether the run may turn out incremental (then nothing is read ahead)."""
        return self.history.reason is None

    def prerequisites(self) -> Prerequisites | None:
        """The objects the baseline's run ensured, while the change log shows none of them
        edited or deleted (those are shared: that would make a full run)."""
        if self.history.reason is not None:
            return None
        return Prerequisites(*self.history.baseline.prerequisites)

    def check(self, context: str, cluster_id: int) -> None:
        """Whether the run-wide inputs are still the baseline's."""
        history = self.history
        self.context = context
        if history.reason is not None:
            return
        if self.adopting:
            # Marked objects are the operator's, found by name or address among all.
            history.reason = "adoption is on (adopt_existing)"
        elif history.baseline.cluster_id != cluster_id:
            history.reason = "the endpoint's cluster changed"
        elif history.baseline.context != context:
            history.reason = "the endpoint, its policy, placement or the release changed"

    def snapshots_known(self, config_digests: dict[int, str]) -> dict[int, str]:
        """VMID → snapshot list digest of the guests whose snapshots need no read: their
        config is the baseline's (`baseline.snapshots_known`); none in a full run."""
        self.config_digests = config_digests
        history = self.history
        if history.reason is None:
            self.known_snapshots = bl.snapshots_known(
                history.baseline, config_digests, history.drift
            )
        return self.known_snapshots

    def snapshot_digests(self, records) -> dict[int, str]:
        """VMID → snapshot list digest of every guest whose snapshots this run knows: the
        ones it read, and the ones it left unread as known."""
        listed: dict[int, list] = {vmid: [] for vmid in records.snapshot_vmids}
        for snapshot in records.snapshots:
            listed.setdefault(snapshot.vmid, []).append(snapshot)
        digests = {**self.known_snapshots}
        digests.update({vmid: bl.digest(found) for vmid, found in listed.items()})
        self.snapshots = {
            vmid: (self.config_digests[vmid], digest)
            for vmid, digest in digests.items()
            if vmid in self.config_digests
        }
        return digests

    def unchanged_devices(self, nodes_digest: str) -> dict[str, int] | None:
        """The nodes' devices when the node stages may be left out: the nodes' input is
        the baseline's and nobody touched their devices, interfaces or addresses."""
        history = self.history
        if history.reason is not None or history.drift.nodes:
            return None
        if history.baseline.nodes != nodes_digest:
            return None
        return dict(history.baseline.device_ids)

    def decide(
        self,
        nodes_digest: str,
        device_ids: dict[str, int],
        guests: list[Guest],
        unreadable: set[tuple[str, int]],
        networks: dict[str, list] | None = None,
    ) -> list[Guest]:
        """The guests this run syncs: all of them in a full run, the dirty ones in an
        incremental run (the gateway then reads only their VMs). `networks`: the nodes'
        networks read this run (`bl.guest_input`)."""
        self.nodes = nodes_digest
        self.digests = {
            bl.guest_ref(g.kind, g.vmid): bl.digest(bl.guest_input(g, networks or {}))
            for g in guests
        }
        history = self.history
        if history.reason is None and history.baseline.device_ids != device_ids:
            history.reason = "the nodes' devices changed"
        if history.reason is not None:
            return guests
        skipped = {bl.guest_ref(kind, vmid) for kind, vmid in unreadable}
        self.scope = bl.scope(history.baseline, self.digests, skipped, history.drift)
        dirty = [g for g in guests if bl.guest_ref(g.kind, g.vmid) in self.scope.dirty]
        prefix = cluster_source(history.baseline.cluster_id)
        self.netbox.scope = GuestScope(
            frozenset(self.scope.vm_ids),
            frozenset(
                source_key(prefix, g)
                for g in dirty
                if bl.guest_ref(g.kind, g.vmid) in self.scope.new
            ),
        )
        return dirty

    def clean_vms(self) -> dict[int, int]:
        """VMID → VM of the guests an incremental run leaves out as unchanged."""
        if self.scope is None:
            return {}
        baseline = self.history.baseline
        return {
            int(ref.split("/")[1]): entry.vm_id
            for ref, entry in baseline.guests.items()
            if ref in self.digests and ref not in self.scope.dirty
        }

    def records_unchanged(self, records_digest: str | None) -> bool:
        """Whether an incremental run may leave the records stage out."""
        return (
            self.scope is not None
            and records_digest == self.history.baseline.records
            and not self.history.drift.records
        )

    def summary(self) -> dict:
        if self.scope is None:
            return {"mode": "full", "reason": self.history.reason}
        return {
            "mode": "incremental",
            "guests_synced": len(self.scope.dirty),
            "guests_unchanged": len(self.digests) - len(self.scope.dirty & set(self.digests)),
            "guests_gone": len(self.scope.gone),
        }

    async def finish(self, run) -> None:
        """At the end of `run` (a `stages.context.StageRun`): the run mode reported, and
        the baseline saved, unless the run had failures: then the previous baseline stays
        (the guests it could not sync still differ from it, and what it wrote is in the
        change log after it). A baseline that cannot be saved loses only the next run's
        shortcut."""
        report = run.report
        report.run_mode = self.summary()
        if report.tally.failed:
            return
        owned = run.owned.owned if run.owned is not None else []
        try:
            await self.save(
                run.cluster_id, run.prerequisites, run.device_ids, owned, run.records_digest
            )
        except (NetBoxError, TransportError, ChangeLogUnreadable) as exc:
            report.warnings.append(f"no baseline for the next run: {exc}")

    async def save(
        self,
        cluster_id: int,
        prerequisites: Prerequisites,
        device_ids: dict[str, int],
        owned: list[tuple[int, Guest]],
        records_digest: str | None,
    ) -> None:
        """After a run without failures: the baseline the next run compares against."""
        ended, user_id = await asyncio.gather(self.netbox.newest_change(), self.netbox.user_id())
        if ended is None:
            return
        synced = {
            ref: bl.GuestEntry(self.digests[ref], vm_id)
            for vm_id, guest in owned
            if (ref := bl.guest_ref(guest.kind, guest.vmid)) in self.digests
        }
        previous = self.history.baseline
        full = self.scope is None
        await self.store.save(
            self.key,
            bl.Baseline(
                cluster_id=cluster_id,
                context=self.context,
                prerequisites=(
                    prerequisites.cluster_type_id,
                    prerequisites.device_role_id,
                    prerequisites.device_type_id,
                ),
                nodes=self.nodes,
                device_ids=device_ids,
                guests=bl.next_guests(previous, synced, self.scope),
                records=records_digest,
                started_change=self.history.started,
                ended_change=ended,
                user_id=user_id,
                full_at=time.time() if full or previous is None else previous.full_at,
                snapshots=self.snapshots,
            ),
        )


def node_digest(nodes, networks, facts=None) -> str:
    """The nodes' input: their status, cluster address, network and hardware facts."""
    return bl.digest({"nodes": nodes, "networks": networks, "facts": facts or {}})


def records_digest(records, links, snapshot_digests: dict[int, str]) -> str | None:
    """The records' input (what Proxmox listed, what it links to); None: not synced.
    The guests' snapshots count by their lists' digests (`snapshot_digests`), so a run
    that left known lists unread digests the same input as one that read them."""
    if records is None:
        return None
    rest = dataclasses.replace(records, snapshots=[], snapshot_vmids=set(), warnings=[])
    return bl.digest({"records": rest, "snapshots": snapshot_digests, "links": links})
