"""Incremental runs: what the last successful run saw, and what has changed since.

A full run reads NetBox's whole state of the cluster (every VM, interface, disk,
address and record) to compare it with Proxmox's.  Most runs find nothing to do, and
that read dominates them.  After a successful run the backend keeps a *baseline*: a
digest of each guest's Proxmox input with the VM it became, a digest of the run-wide
inputs (endpoint, policy, placement, backend release), a digest of the records' input,
and two positions in NetBox's change log: the newest change before the run began and
the newest one after it ended.

The next run reads Proxmox in full (Proxmox has no change feed), and of NetBox only the
change log between those positions.  A guest whose digest differs, that is new or gone,
or whose VM, interfaces, disks or addresses someone else changed in NetBox, is *dirty*;
only the dirty guests are read from NetBox, planned and written, exactly as a full run
would plan them.  Anything the baseline cannot vouch for makes the run a full one
(`Window.full_reason`): no baseline, another cluster, changed run-wide inputs, a change
log that no longer reaches back to the baseline, an edit of a shared object (a tag, a
platform, a VLAN, the cluster, …), or the periodic full run.

This module is pure: digests, the baseline's shape, and the change log's meaning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Bumped when a baseline written by an earlier release must not be trusted (3: its run
# did not ensure the VM interfaces' custom fields an incremental run now writes).
FORMAT = 3

VM = "virtualization.virtualmachine"
VM_INTERFACE = "virtualization.vminterface"
VIRTUAL_DISK = "virtualization.virtualdisk"
IP_ADDRESS = "ipam.ipaddress"
MAC_ADDRESS = "dcim.macaddress"
DEVICE = "dcim.device"
DEVICE_INTERFACE = "dcim.interface"

# Objects several guests share, or that stand behind a VM's fields without a change of
# the VM being logged (a deleted tag leaves its VMs untagged silently): an edit or a
# deletion of one makes the next run a full one.  Their creation changes nothing the
# sync already wrote.
SHARED = frozenset(
    {
        "extras.tag",
        "extras.customfield",
        "dcim.platform",
        "dcim.site",
        "dcim.devicerole",
        "dcim.devicetype",
        "dcim.manufacturer",
        "tenancy.tenant",
        "ipam.vlan",
        "ipam.vlangroup",
        "ipam.vrf",
        "virtualization.cluster",
        "virtualization.clustertype",
    }
)


def canonical(value: Any) -> Any:
    """`value` as plain JSON data, independent of set order and of hash randomisation."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda i: str(i[0]))}
    if isinstance(value, set | frozenset):
        return sorted((canonical(v) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def digest(value: Any) -> str:
    text = json.dumps(canonical(value), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def guest_ref(kind: str, vmid: int) -> str:
    return f"{kind}/{vmid}"


def guest_input(guest: Any, networks: dict[str, list]) -> Any:
    """What a guest's plan depends on: the guest, and which of the bridges its NICs name
    its node's network has (their interfaces are what its VM interfaces point at; None:
    the node's network was not read). A bridge appearing there makes the guest dirty."""
    bridges = {nic.bridge for nic in guest.nics if nic.bridge}
    if not bridges:
        return guest
    network = networks.get(guest.node)
    found = None if network is None else sorted(i.name for i in network if i.name in bridges)
    return {"guest": guest, "bridges": found}


@dataclass(frozen=True)
class GuestEntry:
    digest: str
    vm_id: int


@dataclass
class Baseline:
    cluster_id: int
    context: str  # digest of the run-wide inputs
    # The cluster type, device role and device type the run ensured (their ids).
    prerequisites: tuple[int, int, int]
    nodes: str  # digest of the nodes' input (status, network)
    device_ids: dict[str, int]  # node name → device id
    guests: dict[str, GuestEntry]  # `qemu/100` → its input's digest and its VM
    records: str | None  # digest of the records' input; None: not synced
    # The newest change-log entry (id, NetBox's time of it) before the run began, and
    # after it ended: the next run reads what lies between and after them.  The time
    # tells that entry from another NetBox's (or a restored one's) entry with its id.
    started_change: tuple[int, str] | None
    ended_change: tuple[int, str]
    user_id: int  # the NetBox user that wrote the run: others' changes are drift
    full_at: float  # when the last full run finished (epoch seconds)
    # VMID → (the digest Proxmox gave with its config, the digest of its snapshot list):
    # Proxmox's digest covers the config file's snapshot sections, so while it stays
    # the same the snapshots are the ones this run saw (`snapshots_known`).
    snapshots: dict[int, tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["guests"] = {ref: [e.digest, e.vm_id] for ref, e in self.guests.items()}
        return json.dumps({"format": FORMAT, **data}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes | None) -> Baseline | None:
        """None for nothing stored, another format, or anything unreadable: a full run."""
        if not text:
            return None
        try:
            data = json.loads(text)
            if data.pop("format", None) != FORMAT:
                return None
            data["guests"] = {ref: GuestEntry(d, int(v)) for ref, (d, v) in data["guests"].items()}
            started, ended = data["started_change"], data["ended_change"]
            data["started_change"] = (int(started[0]), str(started[1])) if started else None
            data["ended_change"] = (int(ended[0]), str(ended[1]))
            data["prerequisites"] = tuple(int(i) for i in data["prerequisites"])
            data["snapshots"] = {
                int(vmid): (str(config), str(snapshots))
                for vmid, (config, snapshots) in data["snapshots"].items()
            }
            return cls(**data)
        except (ValueError, TypeError, KeyError):
            return None

    def vm_ids(self, refs: Iterable[str]) -> set[int]:
        return {self.guests[ref].vm_id for ref in refs if ref in self.guests}


@dataclass(frozen=True)
class Change:
    """One entry of NetBox's change log, as far as the sync cares."""

    id: int
    action: str  # create | update | delete
    object_type: str  # `app_label.model`
    object_id: int | None
    before: dict | None = None
    after: dict | None = None

    @classmethod
    def from_api(cls, entry: dict) -> Change:
        action = entry.get("action")
        return cls(
            id=int(entry["id"]),
            action=action.get("value") if isinstance(action, dict) else str(action),
            object_type=str(entry.get("changed_object_type") or ""),
            object_id=entry.get("changed_object_id"),
            before=entry.get("prechange_data"),
            after=entry.get("postchange_data"),
        )

    def values(self, name: str) -> set:
        """The field's value before and after the change (either may be missing)."""
        return {data.get(name) for data in (self.before, self.after) if data and data.get(name)}

    def interfaces(self, interface_type: int | None) -> set[int]:
        """The VM interfaces an address or MAC address was assigned to, before or after.
        The change log stores a generic relation's type as its object type's id:
        `interface_type` is the id of `virtualization.vminterface`."""
        found = set()
        for data in (self.before, self.after):
            if (
                data
                and data.get("assigned_object_type") in (interface_type, VM_INTERFACE)
                and isinstance(data.get("assigned_object_id"), int)
            ):
                found.add(data["assigned_object_id"])
        return found

    @property
    def names_interfaces(self) -> bool:
        return self.object_type in (IP_ADDRESS, MAC_ADDRESS)


def interfaces_to_resolve(changes: Iterable[Change], interface_type: int | None) -> set[int]:
    """The VM interfaces whose VM the caller must look up to place address changes."""
    return {
        interface
        for change in changes
        if change.names_interfaces
        for interface in change.interfaces(interface_type)
    }


@dataclass(frozen=True)
class Drift:
    """What others changed in NetBox since the baseline."""

    full_reason: str | None = None
    vm_ids: frozenset[int] = frozenset()  # VMs whose own fields or components changed
    records: bool = False  # the plugin's inventory records changed
    nodes: bool = False  # the nodes' devices, their interfaces or addresses changed


def drift(
    changes: Iterable[Change],
    record_types: frozenset[str],
    interface_vms: dict[int, int],
    baseline: Baseline,
    interface_type: int | None = None,
) -> Drift:
    """The meaning of the change-log entries for the next run.  `interface_vms` maps the
    VM interfaces named by address changes to their VMs (`interfaces_to_resolve`)."""
    vm_ids: set[int] = set()
    records = nodes = False
    devices = set(baseline.device_ids.values())
    cluster_id = baseline.cluster_id
    for change in changes:
        kind = change.object_type
        if kind == VM and change.object_id is not None:
            vm_ids.add(change.object_id)
        elif kind in (VM_INTERFACE, VIRTUAL_DISK):
            vm_ids |= {v for v in change.values("virtual_machine") if isinstance(v, int)}
        elif kind in (IP_ADDRESS, MAC_ADDRESS):
            interfaces = change.interfaces(interface_type)
            vm_ids |= {interface_vms[i] for i in interfaces if i in interface_vms}
            # Assigned to something else (a node's interface, say): the nodes' business.
            nodes = nodes or bool(change.values("assigned_object_id") - interfaces)
        elif kind == DEVICE:
            nodes = nodes or change.object_id in devices
        elif kind == DEVICE_INTERFACE:
            nodes = nodes or bool(change.values("device") & devices)
        elif kind in record_types:
            records = True
        elif kind in SHARED and change.action != "create":
            if kind == "virtualization.cluster" and change.object_id not in (None, cluster_id):
                continue
            return Drift(full_reason=f"{kind} {change.object_id} was {change.action}d in NetBox")
    return Drift(vm_ids=frozenset(vm_ids), records=records, nodes=nodes)


@dataclass
class Scope:
    """The guests an incremental run syncs, and the VMs it reads from NetBox."""

    dirty: set[str] = field(default_factory=set)  # refs of the guests to plan and write
    gone: set[str] = field(default_factory=set)  # refs in the baseline Proxmox lost
    vm_ids: set[int] = field(default_factory=set)  # VMs to read by id
    new: set[str] = field(default_factory=set)  # dirty refs the baseline does not know


def scope(
    baseline: Baseline,
    digests: dict[str, str],
    unreadable: set[str],
    drifted: Drift,
) -> Scope:
    """Which guests differ from the baseline.  `digests`: every guest this run syncs;
    `unreadable`: guests left out of it (unreadable, excluded), never gone."""
    result = Scope()
    drifted_refs = {ref for ref, e in baseline.guests.items() if e.vm_id in drifted.vm_ids}
    for ref, value in digests.items():
        entry = baseline.guests.get(ref)
        if entry is None:
            result.dirty.add(ref)
            result.new.add(ref)
        elif entry.digest != value or ref in drifted_refs:
            result.dirty.add(ref)
    result.gone = {ref for ref in baseline.guests if ref not in digests and ref not in unreadable}
    known = baseline.vm_ids(result.dirty | result.gone)
    # A VM the baseline does not know but the change log names (a run that was stopped
    # after creating it, an operator's copy) is read too: the planner decides by its key.
    unknown = drifted.vm_ids - {e.vm_id for e in baseline.guests.values()}
    result.vm_ids = known | unknown
    return result


def snapshots_known(
    baseline: Baseline, config_digests: dict[int, str], drifted: Drift
) -> dict[int, str]:
    """VMID → its snapshot list's digest, for the guests whose config digest is the one
    the baseline's run saw: their snapshots are that run's, and need no read.  None of
    them when someone changed the inventory records in NetBox since (the records stage
    then compares every guest's snapshots with Proxmox's again)."""
    if drifted.records:
        return {}
    return {
        vmid: snapshots
        for vmid, (config, snapshots) in baseline.snapshots.items()
        if config_digests.get(vmid) == config
    }


def next_guests(
    baseline: Baseline | None,
    synced: dict[str, GuestEntry],
    scoped: Scope | None,
) -> dict[str, GuestEntry]:
    """The guests of the baseline a successful run leaves: a full run's are what it
    synced; an incremental run keeps the clean guests' entries and replaces the dirty
    and gone ones."""
    if baseline is None or scoped is None:
        return dict(synced)
    kept = {
        ref: entry
        for ref, entry in baseline.guests.items()
        if ref not in scoped.dirty and ref not in scoped.gone
    }
    return {**kept, **synced}
