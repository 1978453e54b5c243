"""A stage's plan: what to create, update and delete in NetBox, and what already matches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Create:
    key: Any  # the planner's identity for the object, to link the created id back
    label: str
    payload: dict


@dataclass(frozen=True)
class Update:
    key: Any
    label: str
    id: int
    changes: dict  # only the fields that differ
    # Takes over an operator's object: until it is written, the object is not the sync's,
    # so no later stage may follow its id.
    adopts: bool = False
    # Fields by which the next run finds the adopted object again (a device: its name in
    # the cluster): written with the ownership marker whatever the policy holds back.
    identity: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Delete:
    key: Any
    label: str
    id: int


@dataclass(frozen=True)
class PlanningFailure:
    """An object the planner could not express (e.g. its host device failed)."""

    label: str
    reason: str


@dataclass
class Plan:
    object_type: str  # NetBox's app.model, e.g. virtualization.virtualmachine
    creates: list[Create] = field(default_factory=list)
    updates: list[Update] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    unchanged: dict[Any, int] = field(default_factory=dict)  # key → id of matching objects
    failures: list[PlanningFailure] = field(default_factory=list)
    # The policy switch this plan answers to when not its object type's own (the SDN
    # sync's VLANs and addresses follow `sdn_mode`, not `vlans_mode` or `ips_mode`).
    family: str | None = None

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.updates) + len(self.deletes)

    @property
    def size(self) -> int:
        return self.writes + len(self.unchanged) + len(self.failures)


def diff(desired: dict, current: dict) -> dict:
    """The desired fields whose normalized current value differs."""
    return {k: v for k, v in desired.items() if current.get(k) != v}


def reconcile(
    the_plan: Plan,
    desired: dict[Any, dict],
    existing: dict[Any, dict],
    *,
    label: Callable[[Any], str],
    payload: Callable[[Any, dict], dict],
    changes: Callable[[dict, dict], dict],
    gone: Callable[[Any, dict], bool],
) -> Plan:
    """Fill `the_plan` with desired objects (key → fields) against the existing ones
    (key → object as NetBox answers it): a create (`payload`) for each missing, an
    update of the `changes` each found needs, unchanged otherwise; an existing object
    desired no more is deleted when `gone` says its source was read without it, else
    kept as it is."""
    for key, fields in desired.items():
        found = existing.get(key)
        if found is None:
            the_plan.creates.append(Create(key, label(key), payload(key, fields)))
        elif wanted := changes(fields, found):
            the_plan.updates.append(Update(key, label(key), found["id"], wanted))
        else:
            the_plan.unchanged[key] = found["id"]
    for key, obj in existing.items():
        if key in desired:
            continue
        if gone(key, obj):
            the_plan.deletes.append(Delete(key, f"{label(key)} (gone from Proxmox)", obj["id"]))
        else:
            the_plan.unchanged[key] = obj["id"]
    return the_plan
