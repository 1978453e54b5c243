"""Rules shared by PVE's section-config style objects (jobs.cfg, ha/*.cfg, *.fw).

Each object is a versioned row; PVE's ``digest`` is derived from that version so
a client's stale digest is refused exactly where a concurrent writer would
otherwise be overwritten.  ``delete`` lists options to remove, as in PVE.
"""

from __future__ import annotations

import hashlib
import re

from proxmox_simulator.domain.errors import PveError, StaleWrite

MODIFIED = "detected modified configuration - file changed by other user? Try again."
_LIST_SEPARATORS = re.compile(r"[,;\s]+")


def digest(kind: str, key: str, version: int) -> str:
    return hashlib.sha1(f"{kind}\0{key}\0{version}".encode()).hexdigest()


def check_digest(supplied: str | None, current: str) -> None:
    if supplied and supplied != current:
        raise PveError(MODIFIED)


def split_list(value) -> list[str]:
    """PVE's ``-list`` formats: comma, semicolon or whitespace separated (or a JSON list)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    return [v for v in _LIST_SEPARATORS.split(str(value)) if v]


def updated_options(current: dict, params: dict, settable: frozenset[str]) -> dict:
    """``current`` with ``params``' settable keys applied and ``delete``'s keys removed."""
    options = dict(current)
    deleted = split_list(params.get("delete"))
    for key in deleted:
        if key not in settable:
            raise PveError(f"unable to delete '{key}' - not a settable option", status=400)
        if key in params:
            raise PveError(f"cannot set and delete '{key}' at the same time", status=400)
        options.pop(key, None)
    for key in settable:
        if key in params:
            options[key] = params[key]
    return options


def require_saved(new_version: int | None) -> int:
    """A compare-and-swap that matched no row lost the race to another writer."""
    if new_version is None:
        raise StaleWrite(MODIFIED)
    return new_version
