"""Semantic diff between two contract snapshots."""

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

    def to_dict(self) -> dict:
        return {
            "old": self.old,
            "new": self.new,
            "added_paths": self.added_paths,
            "removed_paths": self.removed_paths,
            "added_methods": self.added_methods,
            "removed_methods": self.removed_methods,
            "parameters": self.parameters,
        }


def diff_contracts(old: Contract, new: Contract) -> ContractDiff:
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
        if added or removed or changed:
            result.parameters[f"{key[1]} {key[0]}"] = {
                "added": added,
                "removed": removed,
                "changed": changed,
            }
    return result
