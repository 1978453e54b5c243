"""The names guests' VMs get in NetBox.

Proxmox lets two guests of a cluster share a name; NetBox does not (a VM's name is unique
per cluster and tenant, compared case-insensitively). Among guests whose names are equal
that way, the one with the lowest VMID keeps its name and every other one is named
`<name> (<vmid>)`, cut so the whole fits NetBox's 64 characters. The choice depends only
on the cluster's guests, so every run (full, incremental or targeted) names a guest the
same way, and the first guest of a name is not renamed when a newer one takes it too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from proxbox_backend.domain.models import Guest

NAME_LENGTH = 64  # NetBox's VirtualMachine.name


def suffixed(name: str, suffix: str) -> str:
    return name[: NAME_LENGTH - len(suffix)] + suffix


def distinct_names(guests: Iterable[Guest]) -> dict[tuple[str, int], str]:
    """(kind, VMID) → the VM name of each guest that cannot keep its own (the others keep
    theirs). A suffixed name another guest already holds gets the guest's kind too."""
    by_name: dict[str, list[Guest]] = defaultdict(list)
    for guest in guests:
        by_name[guest.name.lower()].append(guest)
    taken = set(by_name)
    renamed: dict[tuple[str, int], str] = {}
    for sharing in by_name.values():
        for guest in sorted(sharing, key=lambda g: g.vmid)[1:]:
            name = suffixed(guest.name, f" ({guest.vmid})")
            if name.lower() in taken:
                name = suffixed(guest.name, f" ({guest.kind}/{guest.vmid})")
            taken.add(name.lower())
            renamed[(guest.kind, guest.vmid)] = name
    return renamed
