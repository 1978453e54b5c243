"""Semantic diff between two contract snapshots: paths, methods, parameters,
return shapes and permissions.

A snapshot made from observations (``ObservationSet.as_contract``) shows only
what one answer contained, so a declared *optional* field it lacks is not a
difference; a required one, an undeclared one or another type is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxmox_simulator.contracts.model import Contract


@dataclass
class ContractDiff:
    old: str
    new: str
    added_paths: list[str] = field(default_factory=list)
    removed_paths: list[str] = field(default_factory=list)
    added_methods: list[str] = field(default_factory=list)
    removed_methods: list[str] = field(default_factory=list)
    # "METHOD path" → {"added": [...], "removed": [...], "changed": [...]}
    parameters: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # "METHOD path" → {"added": [...], "removed": [...], "changed": [...]} of field paths
    returns: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # "METHOD path" → {"old": ..., "new": ...}
    permissions: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "old": self.old,
            "new": self.new,
            "added_paths": self.added_paths,
            "removed_paths": self.removed_paths,
            "added_methods": self.added_methods,
            "removed_methods": self.removed_methods,
            "parameters": self.parameters,
            "returns": self.returns,
            "permissions": self.permissions,
        }


def _shape(schema, where: str, out: dict[str, tuple[str, bool]], optional=False, depth=0):
    if not isinstance(schema, dict) or depth > 12:
        return
    kind = schema.get("type")
    out[where] = (str(kind) if kind else "any", optional)
    for name, sub in (schema.get("properties") or {}).items():
        opt = isinstance(sub, dict) and sub.get("optional") not in (None, 0, "0", False)
        _shape(sub, f"{where}.{name}", out, opt, depth + 1)
    if isinstance(schema.get("items"), dict):
        _shape(schema["items"], f"{where}[]", out, False, depth + 1)


def returns_diff(old: dict, new: dict, *, observed: bool = False) -> dict[str, list[str]]:
    before: dict[str, tuple[str, bool]] = {}
    after: dict[str, tuple[str, bool]] = {}
    _shape(old, "data", before)
    _shape(new, "data", after)
    added = sorted(set(after) - set(before))
    removed = sorted(
        k for k in set(before) - set(after) if not (observed and _optional_below(before, k))
    )
    changed = sorted(
        k
        for k in set(before) & set(after)
        if _type_differs(before[k][0], after[k][0])
        or (not observed and before[k][1] != after[k][1])
    )
    if observed:
        # A field of an optional object nobody observed would name every subfield.
        added = [k for k in added if not any(k.startswith(r + ".") for r in removed)]
    return {"added": added, "removed": removed, "changed": changed}


def _optional_below(shape: dict[str, tuple[str, bool]], key: str) -> bool:
    """The field, or an object or list containing it, is optional (or a list item)."""
    parts = key.split(".")
    for i in range(1, len(parts)):
        prefix = ".".join(parts[: i + 1])
        if prefix in shape and shape[prefix][1]:
            return True
    return "[]" in key


def _rule(permissions: dict | None) -> dict | None:
    """A permission declaration without its prose: only the rule is compared."""
    if permissions is None:
        return None
    return {k: v for k, v in permissions.items() if k != "description"}


def _type_differs(a: str, b: str) -> bool:
    if "any" in (a, b) or a == b:
        return False
    # PVE declares booleans it renders as 0/1, and numbers that happen to be whole.
    return {a, b} not in ({"boolean", "integer"}, {"integer", "number"})


def diff_contracts(
    old: Contract, new: Contract, *, compare_permissions: bool = True
) -> ContractDiff:
    result = ContractDiff(old.version, new.version)
    old_paths, new_paths = set(old.paths), set(new.paths)
    result.added_paths = sorted(new_paths - old_paths)
    result.removed_paths = sorted(old_paths - new_paths)
    old_keys = {e.key for e in old.endpoints}
    new_keys = {e.key for e in new.endpoints}
    result.added_methods = [f"{m} {p}" for p, m in sorted(new_keys - old_keys)]
    result.removed_methods = [f"{m} {p}" for p, m in sorted(old_keys - new_keys)]
    for key in sorted(old_keys & new_keys):
        before = {p.name: p for p in old.endpoint(*key).parameters}
        after = {p.name: p for p in new.endpoint(*key).parameters}
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = sorted(n for n in set(before) & set(after) if before[n] != after[n])
        label = f"{key[1]} {key[0]}"
        if added or removed or changed:
            result.parameters[label] = {"added": added, "removed": removed, "changed": changed}
        old_ep, new_ep = old.endpoint(*key), new.endpoint(*key)
        shapes = returns_diff(
            old_ep.returns, new_ep.returns, observed=new.version.startswith("observed:")
        )
        if any(shapes.values()):
            result.returns[label] = shapes
        if compare_permissions and _rule(old_ep.permissions) != _rule(new_ep.permissions):
            result.permissions[label] = {"old": old_ep.permissions, "new": new_ep.permissions}
    return result
