"""What the live-sync watcher sees change between two polls of Proxmox (pure).

Two cheap reads per poll: `/cluster/resources` (every guest's node, status, name, tags
and sizes, every node's status) and `/cluster/tasks` (per node its running tasks and
its newest finished ones). A guest or node whose resource entry differs from the last
poll's, and a guest or node named by a task that finished since the last poll, changed.

Neither read alone suffices on a real PVE: a guest's status and sizes in
`/cluster/resources` come from the status data pvestatd broadcasts every 10 s, so they
trail a stop or resize by up to that long, while a task shows the moment it ends; and a
config edited with a synchronous `PUT …/config` runs no task at all, but shows in the
resources once its name, tags or sizes change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

QEMU, LXC = "qemu", "lxc"

# Worker types (the `type` of a task) that change a guest, by the guest kind whose VMID
# the task's `id` is (qemu-server's and pve-container's fork_worker calls).
GUEST_TASKS = {
    QEMU: frozenset(
        {
            "qmcreate", "qmclone", "qmrestore", "qmconfig", "qmdestroy", "qmigrate",
            "qmstart", "qmstop", "qmshutdown", "qmreboot", "qmreset", "qmsuspend",
            "qmresume", "qmpause", "qmtemplate", "qmmove", "qmresize",
            "qmsnapshot", "qmdelsnapshot", "qmrollback",
        }
    ),
    LXC: frozenset(
        {
            "vzcreate", "vzclone", "vzrestore", "vzdestroy", "vzmigrate", "vzstart",
            "vzstop", "vzshutdown", "vzreboot", "vzsuspend", "vzresume", "vztemplate",
            "vzresize", "vzsnapshot", "vzdelsnapshot", "vzrollback",
        }
    ),
}  # fmt: skip
# Tasks of either kind (their `id` is a VMID; the resources say which kind): a backup,
# a disk resize or volume move (PVE 8 runs them as workers of these names), HA actions.
ANY_GUEST_TASKS = frozenset(
    {"vzdump", "resize", "move_volume", "hamigrate", "harelocate", "hastart", "hastop"}
)
# Node tasks that change what the sync reads of a node: its network applied.
NODE_TASKS = frozenset({"srvreload", "srvrestart"})
NODE_TASK_IDS = frozenset({"networking"})

# The fields of a guest's resource entry the sync's outcome depends on (not its load).
GUEST_FIELDS = ("node", "status", "name", "tags", "maxmem", "maxdisk", "maxcpu", "template")


@dataclass(frozen=True)
class Changes:
    """Guests (`qemu/100`) and nodes that changed, and why (for the run's trigger)."""

    guests: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.guests or self.nodes or self.reasons)

    def __or__(self, other: Changes) -> Changes:
        reasons = self.reasons + tuple(r for r in other.reasons if r not in self.reasons)
        return Changes(self.guests | other.guests, self.nodes | other.nodes, reasons)

    def as_dict(self, limit: int = 50) -> dict:
        return {
            "guests": sorted(self.guests)[:limit],
            "nodes": sorted(self.nodes),
            "reasons": list(self.reasons[:limit]),
        }


NOTHING = Changes()


@dataclass(frozen=True)
class Snapshot:
    """One poll's `/cluster/resources`, reduced to what the sync depends on."""

    guests: dict[str, tuple]  # `qemu/100` → GUEST_FIELDS values
    nodes: dict[str, str]  # node → status

    @classmethod
    def of(cls, resources: Iterable[dict]) -> Snapshot:
        guests, nodes = {}, {}
        for entry in resources:
            kind = entry.get("type")
            if kind in (QEMU, LXC) and entry.get("vmid") is not None:
                guests[f"{kind}/{int(entry['vmid'])}"] = tuple(
                    entry.get(name) for name in GUEST_FIELDS
                )
            elif kind == "node" and entry.get("node"):
                nodes[entry["node"]] = entry.get("status")
        return cls(guests, nodes)

    def kind_of(self, vmid: int) -> str | None:
        for kind in (QEMU, LXC):
            if f"{kind}/{vmid}" in self.guests:
                return kind
        return None


def resource_changes(before: Snapshot, after: Snapshot) -> Changes:
    """Guests that came, went or whose entry differs; nodes likewise."""
    guests = {
        ref
        for ref in before.guests.keys() | after.guests.keys()
        if before.guests.get(ref) != after.guests.get(ref)
    }
    nodes = {
        node
        for node in before.nodes.keys() | after.nodes.keys()
        if before.nodes.get(node) != after.nodes.get(node)
    }
    reasons = ("resources",) if guests or nodes else ()
    return Changes(frozenset(guests), frozenset(nodes), reasons)


def finished(task: dict) -> bool:
    """PVE gives a task its `status` (and `endtime`) when it has ended."""
    return "status" in task or "endtime" in task


def task_changes(task: dict, *snapshots: Snapshot) -> Changes:
    """What one finished task changed; NOTHING for tasks that change nothing synced."""
    kind, ident, node = task.get("type", ""), str(task.get("id") or ""), task.get("node")
    reason = (f"{kind} {ident}".strip(),)
    if kind in NODE_TASKS and ident in NODE_TASK_IDS and node:
        return Changes(nodes=frozenset({node}), reasons=reason)
    guest_kind = next((k for k, types in GUEST_TASKS.items() if kind in types), None)
    if guest_kind is None and kind not in ANY_GUEST_TASKS:
        return NOTHING
    if not ident.isdigit():
        # A backup job of several guests names none: the records changed all the same.
        return Changes(reasons=reason) if kind == "vzdump" else NOTHING
    vmid = int(ident)
    if guest_kind is None:
        guest_kind = next(filter(None, (s.kind_of(vmid) for s in snapshots)), None)
    if guest_kind is None:  # gone before and after: nothing of it to sync
        return Changes(reasons=reason)
    return Changes(guests=frozenset({f"{guest_kind}/{vmid}"}), reasons=reason)


@dataclass
class ChangeDetector:
    """The watcher's memory between polls: the last snapshot and the finished tasks seen.

    The first poll learns both and reports nothing (what happened before the watch began
    is the catch-up run's). A finished task is new when its UPID was not in the previous
    poll's list: PVE lists the newest 25 of each node, so a task seen once stays listed
    until newer ones push it out, and a UPID never comes back once gone.
    """

    snapshot: Snapshot | None = None
    seen: frozenset[str] = field(default_factory=frozenset)

    def observe(self, resources: list[dict], tasks: list[dict]) -> Changes:
        current = Snapshot.of(resources)
        done = [t for t in tasks if finished(t) and t.get("upid")]
        previous, self.snapshot = self.snapshot, current
        seen, self.seen = self.seen, frozenset(t["upid"] for t in done)
        if previous is None:
            return NOTHING
        changes = resource_changes(previous, current)
        for task in done:
            if task["upid"] not in seen:
                changes = changes | task_changes(task, current, previous)
        return changes


@dataclass
class Pending:
    """Changes found and not yet handed to a run: a burst found over several polls, or
    while a run was going, becomes one run."""

    changes: Changes = NOTHING
    since: float | None = None  # when the oldest pending change was found

    def add(self, changes: Changes, now: float) -> None:
        if not changes:
            return
        if self.since is None:
            self.since = now
        self.changes = self.changes | changes

    def take(self) -> tuple[Changes, float | None]:
        """The pending changes and when the oldest was found; nothing pending after."""
        taken = self.changes, self.since
        self.changes, self.since = NOTHING, None
        return taken

    def restore(self, changes: Changes, since: float | None) -> None:
        """Changes a run could not take (another run holds the endpoint): kept, with
        their age, for the next attempt."""
        self.changes = changes | self.changes
        if since is not None and (self.since is None or since < self.since):
            self.since = since
