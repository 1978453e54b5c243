"""A preview's plan: what a run would create, update (field: old → new) and delete in NetBox.

A dry run executes the planners as a real run does, but every write is recorded here
instead of being sent. An object the run would create gets a placeholder id (negative,
never a NetBox id) so that later stages can plan against it as they would against the
created object; the report names every placeholder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LABEL_FIELDS = (
    "name",
    "address",
    "prefix",
    "start_address",
    "slug",
    "vid",
    "vmid",
    "storage",
    "volid",
    "job_id",
    "sid",
)


def shown(value: Any) -> Any:
    """A field as an operator reads it: choices by value, tags by slug, nested objects by id."""
    if isinstance(value, dict):
        if "value" in value:
            return value["value"]
        if "slug" in value:
            return value["slug"]
        if "id" in value:
            return value["id"]
        return {k: shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown(v) for v in value]
    return value


def label_of(obj: dict, fallback: str = "") -> str:
    for name in LABEL_FIELDS:
        if obj.get(name) not in (None, ""):
            return str(shown(obj[name]))
    return fallback


def _before(current: dict, name: str, value: Any) -> Any:
    """A field's value before the update; of custom fields only those it writes (a
    write names some of them, NetBox keeps the others)."""
    if name == "custom_fields" and isinstance(value, dict):
        fields = current.get(name) or {}
        return {key: fields.get(key) for key in value}
    return current.get(name)


def _shown_before(before: Any, new: Any) -> Any:
    """The old value as the new one is written: a reference the run sets by id (a device
    type, a site) is shown by its id before too, not by the slug NetBox nests with it."""
    if isinstance(before, dict) and "id" in before and isinstance(new, int | None):
        return before["id"]
    return shown(before)


@dataclass
class TypePlan:
    # {placeholder, label, payload[, because]}
    creates: list[dict] = field(default_factory=list)
    # {id, label, changes: {f: {old, new}}[, because]}: `because` names what decided
    # some of the fields (an assignment rule)
    updates: list[dict] = field(default_factory=list)
    deletes: list[dict] = field(default_factory=list)  # {id, label}

    def as_dict(self) -> dict:
        return {
            "create": len(self.creates),
            "update": len(self.updates),
            "delete": len(self.deletes),
            "creates": self.creates,
            "updates": self.updates,
            "deletes": self.deletes,
        }


@dataclass
class PlanRecorder:
    """Collects the writes of a dry run, per NetBox object type."""

    types: dict[str, TypePlan] = field(default_factory=dict)
    placeholders: dict[int, dict] = field(default_factory=dict)  # id → {object_type, label}
    notes: list[str] = field(default_factory=list)
    _next: int = -1

    def of(self, object_type: str) -> TypePlan:
        return self.types.setdefault(object_type, TypePlan())

    def create(self, object_type: str, payload: dict, label: str | None = None) -> int:
        placeholder = self._next
        self._next -= 1
        label = label or label_of(payload, f"new {object_type}")
        self.placeholders[placeholder] = {"object_type": object_type, "label": label}
        self.of(object_type).creates.append(
            {"placeholder": placeholder, "label": label, "payload": shown(payload)}
        )
        return placeholder

    def update(self, object_type: str, obj_id: int, changes: dict, current: dict | None) -> None:
        """An update of an object this run would create amends its create instead."""
        if obj_id < 0:
            for create in self.of(object_type).creates:
                if create["placeholder"] == obj_id:
                    create["payload"].update(shown(changes))
                    return
        current = current or {}
        plan = self.of(object_type)
        fields = {
            name: {"old": _shown_before(_before(current, name, value), value), "new": shown(value)}
            for name, value in changes.items()
        }
        for update in plan.updates:
            if update["id"] == obj_id:  # a second pass over the same object (e.g. links)
                for name, change in fields.items():
                    update["changes"].setdefault(name, change)["new"] = change["new"]
                return
        plan.updates.append(
            {"id": obj_id, "label": label_of(current, f"#{obj_id}"), "changes": fields}
        )

    def explain(self, object_type: str, obj_id: int, fields: set[str], why: str) -> None:
        """Name `why` (an assignment rule) beside the create or update of object `obj_id`
        when it writes one of `fields`; an object the run leaves as it is gets nothing."""
        plan = self.of(object_type)
        for create in plan.creates:
            if create["placeholder"] == obj_id and fields & set(create["payload"]):
                create["because"] = why
        for update in plan.updates:
            if update["id"] == obj_id and fields & set(update["changes"]):
                update["because"] = why

    def delete(self, object_type: str, obj_id: int, current: dict | None) -> None:
        label = label_of(current or {}, f"#{obj_id}")
        self.of(object_type).deletes.append({"id": obj_id, "label": label})

    def as_dict(self) -> dict:
        return {
            "object_types": {
                name: plan.as_dict()
                for name, plan in self.types.items()
                if plan.creates or plan.updates or plan.deletes
            },
            "placeholders": {str(k): v for k, v in self.placeholders.items()},
            "notes": list(self.notes),
        }
