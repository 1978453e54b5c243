"""Compatibility report of one major under one profile: declared, handled, observed, differing.

Shared by ``/admin/compatibility`` and ``proxmox-simulator contract report``.
"""

from __future__ import annotations

from pathlib import Path

from proxmox_simulator.api.handlers.dispatch import handling
from proxmox_simulator.contracts.diff import diff_contracts
from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.contracts.observations import ObservationSet, ObservationStore
from proxmox_simulator.contracts.selection import declared_for_major, effective_contract


def _label(key: tuple[str, str]) -> str:
    return f"{key[1]} {key[0]}"


def compatibility_report(
    declared: Contract, profile: str, observed: ObservationSet | None, *, with_lists: bool = False
) -> dict:
    effective = effective_contract(declared, observed, profile)
    declared_keys = {e.key for e in declared.endpoints}
    unhandled = sorted(_label(e.key) for e in effective.endpoints if handling(effective, e) is None)
    report: dict = {
        "version": declared.version,
        "major": declared.major,
        "profile": profile,
        "declared": {"methods": len(declared.endpoints), "paths": len(declared.paths)},
        "handled": {
            "methods": len(effective.endpoints) - len(unhandled),
            "of": len(effective.endpoints),
            "unhandled_501": unhandled,
        },
        "observed": None,
        "differing": None,
    }
    if observed is None:
        return report
    seen = observed.by_key()
    absent = sorted(_label(k) for k, o in seen.items() if not o.present and k in declared_keys)
    only_observed = sorted(
        _label(k) for k, o in seen.items() if o.present and k not in declared_keys
    )
    forbidden = sorted(_label(k) for k, o in seen.items() if not o.permitted)
    # Compare only what was observed: an unrecorded method is not a difference.
    common = Contract(
        version=declared.version,
        endpoints=tuple(e for e in declared.endpoints if e.key in seen and seen[e.key].present),
    )
    shapes = diff_contracts(common, observed.as_contract(), compare_permissions=False)
    report["observed"] = {
        "id": observed.id,
        "version": observed.version,
        "methods": len(seen),
        "present": sum(1 for o in seen.values() if o.present),
        "absent": len(absent),
        "forbidden": len(forbidden),
        "undeclared": len(only_observed),
    }
    report["differing"] = {
        "declared_but_absent": absent,
        "observed_not_declared": only_observed,
        "forbidden_for_recorder": forbidden,
        "returns": shapes.returns if with_lists else sorted(shapes.returns),
        "counts": {
            "declared_but_absent": len(absent),
            "observed_not_declared": len(only_observed),
            "returns": len(shapes.returns),
        },
    }
    return report


def report_for(
    major: int,
    profile: str,
    data_dir: Path,
    *,
    with_lists: bool = False,
    apidoc_dir: Path | None = None,
) -> dict:
    declared = declared_for_major(major, data_dir, apidoc_dir)
    observed = ObservationStore(data_dir).latest(major)
    return compatibility_report(declared, profile, observed, with_lists=with_lists)
