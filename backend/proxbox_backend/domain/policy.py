"""An endpoint's sync policy (the plugin's `sync_policy`), applied to the stages' plans.

The planners stay policy-free: they say what Proxmox implies. `restrict` then takes out
what the operator does not want written (object types switched off or create-only,
protected fields) before `apply_plan` executes a plan, and `excludes` keeps filtered
guests out of the run altogether (left in NetBox as they are, never counted as gone).

The run's policy travels in a context variable so that every stage's `apply_plan` sees it
without each stage's signature carrying it.
"""

from __future__ import annotations

import fnmatch
import re
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from proxbox_backend.domain.plan import Plan

ALWAYS, CREATE_ONLY, OFF = "always", "create_only", "off"
MODES = (ALWAYS, CREATE_ONLY, OFF)

# NetBox object type → the policy's object-type switch.
MODE_OF = {
    "virtualization.virtualmachine": "guests",
    "dcim.device": "nodes",
    "virtualization.vminterface": "interfaces",
    "dcim.interface": "interfaces",
    "ipam.ipaddress": "ips",
    "virtualization.virtualdisk": "disks",
    "ipam.vlan": "vlans",
    "extras.tag": "tags",
    # Written by the SDN sync alone (its VLANs and gateway addresses carry `Plan.family`).
    **{
        object_type: "sdn"
        for object_type in (
            "ipam.vlangroup",
            "vpn.l2vpn",
            "vpn.l2vpntermination",
            "ipam.prefix",
            "ipam.iprange",
        )
    },
    # The plugin's storage and data-protection records share one switch (`records_mode`).
    **{
        f"netbox_proxbox.{model}": "records"
        for model in (
            "proxmoxstorage",
            "proxmoxbackup",
            "proxmoxbackupjob",
            "proxmoxsnapshot",
            "proxmoxreplicationjob",
            "proxmoxhagroup",
            "proxmoxharesource",
            "proxmoxharule",
        )
    },
}
# A family's mode when the endpoint's policy does not say (an older plugin, no policy):
# the guest-network prefixes are opt-in, every other switch is on.
FAMILY_DEFAULTS = {"prefixes": OFF}
# A protected field → the NetBox fields it stands for.
PROTECTED = {
    "name": ("name",),
    "status": ("status",),
    "role": ("role",),
    "platform": ("platform",),
    "tenant": ("tenant",),
    "site": ("site",),
    "description": ("description",),
    "primary_ip": ("primary_ip4", "primary_ip6"),
    "dns_name": ("dns_name",),  # of a guest's primary addresses
}
# Components an operator adds to a synced VM or node by hand.
OPERATOR_COMPONENTS = frozenset(
    {"virtualization.vminterface", "dcim.interface", "virtualization.virtualdisk"}
)


# The removed-guest choice only an endpoint policy has (it needs a number of days): the
# VM goes offline at once and is deleted once gone `removed_guests_days` days.
OFFLINE_THEN_DELETE = "offline-then-delete"


class PolicyError(ValueError):
    """The endpoint's policy cannot be applied (the message names the setting)."""


@dataclass(frozen=True)
class SyncPolicy:
    removed_guests: str | None = None  # None: the backend's own setting decides
    removed_guests_days: int | None = None  # with "offline-then-delete": the days
    sync_templates: bool | None = None  # None: the backend's own setting decides
    modes: dict[str, str] = field(default_factory=dict)
    protected_fields: frozenset[str] = frozenset()
    keep_operator_objects: bool = True
    # Take over unmanaged objects an operator marked `proxbox-adopt` (exact match in scope).
    adopt_existing: bool = False
    vmids: tuple[tuple[int, int], ...] = ()
    names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    # A targeted sync ("Sync now" on one VM or node): only these guests / this node.
    target: Target | None = None

    @classmethod
    def from_api(cls, data: dict | None) -> SyncPolicy:
        """From the endpoint record's `sync_policy`; an old plugin without one: defaults."""
        if not data:
            return cls()
        modes = dict(data.get("modes") or {})
        for name, mode in modes.items():
            if mode not in MODES:
                raise PolicyError(f"sync policy: {name} mode {mode!r} is not one of {MODES}")
        unknown = set(data.get("protected_fields") or ()) - set(PROTECTED)
        if unknown:
            raise PolicyError(f"sync policy: unknown protected field(s) {sorted(unknown)}")
        exclude = data.get("exclude") or {}
        days = data.get("removed_guests_days")
        if data.get("removed_guests") == OFFLINE_THEN_DELETE and not (
            isinstance(days, int) and days > 0
        ):
            raise PolicyError(
                "sync policy: removed_guests offline-then-delete needs removed_guests_days"
                f" (a number of days > 0), not {days!r}"
            )
        return cls(
            removed_guests=data.get("removed_guests"),
            removed_guests_days=days,
            sync_templates=data.get("sync_templates"),
            modes=modes,
            protected_fields=frozenset(data.get("protected_fields") or ()),
            keep_operator_objects=bool(data.get("keep_operator_objects", True)),
            adopt_existing=data.get("adopt_existing") is True,
            vmids=tuple((int(low), int(high)) for low, high in exclude.get("vmids") or ()),
            names=tuple(exclude.get("names") or ()),
            tags=tuple(exclude.get("tags") or ()),
            nodes=tuple(exclude.get("nodes") or ()),
            pools=tuple(exclude.get("pools") or ()),
        )

    def mode(self, object_type: str) -> str:
        return self.family_mode(MODE_OF.get(object_type, ""))

    def family_mode(self, family: str) -> str:
        """The mode of one switch (`guests`, `sdn`, `prefixes`, …), its default unless set."""
        return self.modes.get(family, FAMILY_DEFAULTS.get(family, ALWAYS))

    def mode_of(self, plan: Plan) -> str:
        """The mode `plan` is written under: its family's switch, else its type's."""
        return self.family_mode(plan.family) if plan.family else self.mode(plan.object_type)

    def protected_names(self) -> set[str]:
        """The NetBox fields the protected fields stand for."""
        return {name for field_ in self.protected_fields for name in PROTECTED[field_]}

    def holds_back(self, object_type: str, field_: str) -> bool:
        """Whether `restrict` keeps this NetBox field of existing objects as it is."""
        return self.mode(object_type) != ALWAYS or field_ in self.protected_names()

    def targeting(self, target: Target | None) -> SyncPolicy:
        return self if target is None else replace(self, target=target)

    def excludes(self, guest) -> str | None:
        """Why the guest is left out of this run (None: it is synced)."""
        if self.target is not None and not self.target.covers(guest):
            return "not the target of this sync"
        if any(low <= guest.vmid <= high for low, high in self.vmids):
            return f"VMID {guest.vmid} excluded"
        if any(fnmatch.fnmatchcase(guest.name, pattern) for pattern in self.names):
            return f"name {guest.name!r} excluded"
        if self.nodes and guest.node in self.nodes:
            return f"node {guest.node!r} excluded"
        if self.tags and set(guest.tags) & set(self.tags):
            return "tag excluded"
        if self.pools and getattr(guest, "pool", None) in self.pools:
            return f"pool {guest.pool!r} excluded"
        return None

    def restrict(self, plan: Plan) -> Plan:
        """The part of `plan` this policy lets the sync write."""
        if self.target is not None:
            plan = self.target.restrict(plan)
        mode = self.mode_of(plan)
        adoptions = [u for u in plan.updates if u.adopts]
        plan = replace(plan, updates=[u for u in plan.updates if not u.adopts])
        if mode == OFF:
            # Nothing written; what exists keeps its id so later stages can still link it
            # (not what an adoption would have taken over: it stays the operator's).
            unchanged = dict(plan.unchanged)
            unchanged.update({u.key: u.id for u in plan.updates})
            unchanged.update({d.key: d.id for d in plan.deletes})
            return replace(plan, creates=[], updates=[], deletes=[], unchanged=unchanged)
        protected = self.protected_names()
        if self.mode("extras.tag") != ALWAYS:
            protected.add("tags")
        updates, unchanged = [], dict(plan.unchanged)
        if mode == ALWAYS:
            for update in plan.updates:
                changes = {k: v for k, v in update.changes.items() if k not in protected}
                if changes:
                    updates.append(replace(update, changes=changes))
                else:
                    unchanged[update.key] = update.id
        else:
            unchanged.update({u.key: u.id for u in plan.updates})
        # An adoption is the sync's first write of an object, like a create: it happens in
        # create-only mode too, there with the ownership marker alone (source key, tags).
        for adoption in adoptions:
            owned = OWNERSHIP | adoption.identity
            if mode == ALWAYS:
                kept = {k: v for k, v in adoption.changes.items() if k not in protected - owned}
            else:
                kept = {k: v for k, v in adoption.changes.items() if k in owned}
            updates.append(replace(adoption, changes=kept))
        creates = plan.creates
        if self.mode("extras.tag") == OFF:
            creates = [
                replace(c, payload={k: v for k, v in c.payload.items() if k != "tags"})
                for c in creates
            ]
        deletes = plan.deletes if mode == ALWAYS else []
        if mode != ALWAYS:
            unchanged.update({d.key: d.id for d in plan.deletes})
        return replace(plan, creates=creates, updates=updates, deletes=deletes, unchanged=unchanged)


# What makes an object the sync's: written on adoption whatever the field switches say
# (an address is the sync's by the interface it is assigned to).
OWNERSHIP = {"custom_fields", "tags", "assigned_object_type", "assigned_object_id"}


GUEST_REF = re.compile(r"^(qemu|lxc)/([1-9][0-9]{2,8})$")
# The backend API's one `target` parameter: a guest (`qemu/100`) or a node (`node/pve1`),
# so "a guest and a node at once" cannot be asked for.
TARGET_REF = r"^((qemu|lxc)/[1-9][0-9]{2,8}|node/[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)$"


@dataclass(frozen=True)
class Target:
    """What a targeted sync may write: one guest (`qemu/100`) or one node and its guests.

    Every other guest is left out like an excluded one; the stages' plans are cut down to
    the target's own objects (the node's device; never other nodes' or VMs' records).
    """

    guest: tuple[str, int] | None = None
    node: str | None = None
    # The guests on the targeted node, filled in once Proxmox's inventory is read.
    node_guests: frozenset[tuple[str, int]] = frozenset()
    # The targeted node's device, once the nodes stage has it: its interfaces, addresses
    # and primary IPs are the target's too.
    node_device: int | None = None

    @classmethod
    def parse(cls, guest: str | None = None, node: str | None = None) -> Target | None:
        if guest and node:
            raise PolicyError("a targeted sync names a guest or a node, not both")
        if guest:
            match = GUEST_REF.match(guest)
            if match is None:
                raise PolicyError(f"guest {guest!r} is not of the form qemu/<vmid> or lxc/<vmid>")
            return cls(guest=(match[1], int(match[2])))
        if node:
            return cls(node=node)
        return None

    @classmethod
    def from_ref(cls, ref: str | None) -> Target | None:
        """`qemu/100`, `lxc/105` or `node/pve1` (the backend API's `target`), or None."""
        if ref and ref.startswith("node/"):
            return cls.parse(node=ref.removeprefix("node/"))
        return cls.parse(guest=ref)

    def with_inventory(self, guests) -> Target:
        if self.node is None:
            return self
        return replace(
            self, node_guests=frozenset((g.kind, g.vmid) for g in guests if g.node == self.node)
        )

    def with_device(self, device_ids: dict[str, int]) -> Target:
        if self.node is None:
            return self
        return replace(self, node_device=device_ids.get(self.node))

    def covers(self, guest) -> bool:
        if self.guest is not None:
            return (guest.kind, guest.vmid) == self.guest
        return guest.node == self.node

    def guests(self) -> frozenset[tuple[str, int]]:
        return frozenset({self.guest}) if self.guest is not None else self.node_guests

    def restrict(self, plan: Plan) -> Plan:
        if plan.object_type == "virtualization.virtualmachine":
            # Keys are source keys `<cluster>/<kind>/<vmid>[#…]`: a VM whose guest is gone is
            # the target's business only when it is the target.
            wanted = self.guests()

            def mine(item) -> bool:
                parts = str(item.key).split("#", 1)[0].split("/")
                return (
                    len(parts) == 3 and parts[2].isdigit() and (parts[1], int(parts[2])) in wanted
                )

            return _keep(plan, mine)
        device = self.node_device
        if plan.object_type == "dcim.device":
            # Devices are keyed by node name; their primary IPs by device id.
            return _keep(
                plan,
                lambda item: self.node is not None and item.key in (self.node, device or ""),
            )
        if plan.object_type == "dcim.interface":
            # Keyed (device id, interface name): a node target refreshes its own interfaces.
            return _keep(plan, lambda item: device is not None and item.key[0] == device)
        if (
            plan.object_type == "ipam.vlan"
            or plan.family == "prefixes"
            or (plan.family == "sdn" and plan.object_type != "vpn.l2vpntermination")
        ):
            # VLANs, the SDN objects and the guest networks' prefixes are shared by the
            # whole cluster: a targeted run creates the ones its guests need, full syncs
            # keep them in shape.
            return _keep(plan, lambda item: False, keep_creates=True)
        return plan


def _keep(plan: Plan, mine, *, keep_creates: bool = False) -> Plan:
    unchanged = dict(plan.unchanged)
    unchanged.update({u.key: u.id for u in plan.updates if not mine(u)})
    unchanged.update({d.key: d.id for d in plan.deletes if not mine(d)})
    return replace(
        plan,
        creates=[c for c in plan.creates if keep_creates or mine(c)],
        updates=[u for u in plan.updates if mine(u)],
        deletes=[d for d in plan.deletes if mine(d)],
        unchanged=unchanged,
    )


DEFAULT = SyncPolicy()
ACTIVE: ContextVar[SyncPolicy] = ContextVar("proxbox_sync_policy", default=DEFAULT)
