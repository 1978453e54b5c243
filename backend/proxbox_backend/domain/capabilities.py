"""What a Proxmox VE release answers differently from another, in one place.

The sync reads the release once (`/version`, in the endpoint's identity) and asks this
module what that release can answer; no other module tests a version. Each capability
names the first major that has it, learnt from the official API viewer schema of each
major (6.4, 7.4, 8.4, 9.2):

| capability | majors | without it |
|---|---|---|
| `ha_rules` | 9 on | no `/cluster/ha/rules`: HA placement is HA groups alone (a resource's `group`) |
| `lxc_interfaces` | 8 on | no `/nodes/{n}/lxc/{vmid}/interfaces`: a container's configured addresses |
| `current_kernel` | 8 on | `/nodes/{n}/status` has no `current-kernel`: the kernel release is `kversion`'s second word |

One capability is no release's but an installation's: SDN (`/cluster/sdn/*`) is part of
PVE from 8 on, an optional package (`libpve-network-perl`) before. Whether a cluster has
it is asked of the cluster (`sdn_absent`), never told from its release: without the
package PVE has no handler for the path (501, or 404 behind a proxy), so there is no SDN
to sync and nothing synced from it is removed; installed but unconfigured, the lists
answer empty.

Shape differences that need no release to tell apart stay where the answer is parsed,
accepting both shapes: a node interface's `cidr` or `address`+`netmask`
(`proxmox_config.node_addresses`), a guest's `meta: ctime` creation stamp or its SMBIOS
UUID (`proxmox_config.creation_id`), a cluster without a `tag-style` option.

A release this module cannot read (an empty or unknown `/version`) is taken as the
newest major it knows, as a release newer than it knows is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The newest major whose differences are declared here.
NEWEST_MAJOR = 9
# The first major that has each capability.
HA_RULES_FROM = 9  # PVE 9.0 replaced HA groups with HA rules (node and resource affinity)
LXC_INTERFACES_FROM = 8  # absent from 7.4's API, present in 8.4's
# pve-manager 8 added `current-kernel` (uname's fields) and `boot-info` to a node's
# status; 6.4 and 7.4 answer only `kversion` ("Linux <release> <version>").
CURRENT_KERNEL_FROM = 8

# How a PVE without the SDN package answers `/cluster/sdn/...`: no such handler.
SDN_ABSENT_STATUSES = frozenset({404, 501})

_MAJOR = re.compile(r"^\s*(\d+)")


def major_of(release: str) -> int | None:
    """`6.4-15`, `7.4-16`, `8.4.5`, `9.2.12` → 6, 7, 8, 9; None when it names none."""
    match = _MAJOR.match(release or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Capabilities:
    release: str = ""

    @property
    def major(self) -> int:
        return major_of(self.release) or NEWEST_MAJOR

    @property
    def ha_rules(self) -> bool:
        """HA rules are read from `/cluster/ha/rules` (beside `/cluster/ha/groups`)."""
        return self.major >= HA_RULES_FROM

    @property
    def current_kernel(self) -> bool:
        """A node's status names its kernel release in `current-kernel`."""
        return self.major >= CURRENT_KERNEL_FROM

    @property
    def lxc_interfaces(self) -> bool:
        """A running container's addresses can be asked of `/lxc/{vmid}/interfaces`."""
        return self.major >= LXC_INTERFACES_FROM


def sdn_absent(status: int) -> bool:
    """Whether an answer of `/cluster/sdn/...` with this HTTP status says the cluster has
    no SDN at all (as opposed to an error reading the SDN it has)."""
    return status in SDN_ABSENT_STATUSES
