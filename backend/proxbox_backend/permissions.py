"""The NetBox permissions the backend's user needs: object type → actions, exactly.

Derived from what runs declare, so the list cannot drift from the code: every stage's
reads and writes (`stages.GRAPH`: a read needs `view`, a create `add`, an update
`change`, a delete `delete`) and, for what a run does outside the graph, RUN_PERMISSIONS.
Every feature a policy can switch on is included (SDN, prefixes, records), so a user
holding these never fails a run for want of a permission. `proxbox-sync permissions`
prints them; the dev stack's `proxbox-backend` user holds exactly these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proxbox_backend.pipeline import CREATE, DELETE, UPDATE
from proxbox_backend.stages import GRAPH

VIEW, ADD, CHANGE, REMOVE = "view", "add", "change", "delete"
# The plugin's custom action that lets a user read an endpoint's token secret.
REVEAL = "reveal_credentials"
ACTION_ORDER = (VIEW, ADD, CHANGE, REMOVE, REVEAL)
_ACTION_OF = {CREATE: ADD, UPDATE: CHANGE, DELETE: REMOVE}

# What a run does besides its stages, and why.
RUN_PERMISSIONS: Mapping[str, tuple[str, ...]] = {
    # The endpoint, its token through the credentials API, and its live runs and claim
    # (both take what Sync now takes: change on the endpoint).
    "netbox_proxbox.proxmoxendpoint": (VIEW, CHANGE, REVEAL),
    "netbox_proxbox.proxmoxassignmentrule": (VIEW,),
    # The claim creates (or keeps) the native cluster; the run updates its fields.
    "virtualization.cluster": (VIEW, ADD, CHANGE),
    # The tracking record and the typed sidecar the run records itself on.
    "netbox_proxbox.proxmoxcluster": (VIEW, CHANGE),
    "netbox_proxbox.proxboxclustersyncstate": (VIEW, CHANGE),
    # What every run ensures before its stages: its custom fields (an older source field
    # widened to devices), the proxbox tag, the cluster type and the node device type.
    "extras.customfield": (VIEW, ADD, CHANGE),
    "extras.tag": (VIEW, ADD),
    "virtualization.clustertype": (VIEW, ADD),
    "dcim.devicerole": (VIEW, ADD),
    "dcim.manufacturer": (VIEW, ADD),
    "dcim.devicetype": (VIEW, ADD),
    # NetBox keeps an interface's MAC as a MAC address object, which it creates with the
    # caller's permissions when the interface stages write `mac_address` (a new MAC is a
    # new object; the interface's deletion takes its own along). The IPAM checks read them.
    "dcim.macaddress": (VIEW, ADD),
    # The endpoint's scope, and NetBox's change log (incremental runs read what changed).
    "dcim.site": (VIEW,),
    "tenancy.tenant": (VIEW,),
    "core.objectchange": (VIEW,),
}


def _merge(into: dict[str, set[str]], object_type: str, actions: Iterable[str]) -> None:
    into.setdefault(object_type, set()).update(actions)


def required_permissions() -> dict[str, tuple[str, ...]]:
    """Object type (`app_label.model`) → actions, sorted by type, actions in NetBox's order."""
    needed: dict[str, set[str]] = {}
    for stage in GRAPH:
        for object_type in stage.reads:
            _merge(needed, object_type, (VIEW,))
        for object_type, operations in stage.writes.items():
            # What a stage writes it has read first (a run compares before it writes).
            _merge(needed, object_type, (VIEW, *(_ACTION_OF[op] for op in operations)))
    for object_type, actions in RUN_PERMISSIONS.items():
        _merge(needed, object_type, actions)
    return {
        object_type: tuple(a for a in ACTION_ORDER if a in needed[object_type])
        for object_type in sorted(needed)
    }


def grouped_by_actions() -> dict[tuple[str, ...], list[str]]:
    """The same, as NetBox's ObjectPermissions hold it: one per set of actions, each with
    the object types it covers."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for object_type, actions in required_permissions().items():
        groups.setdefault(actions, []).append(object_type)
    return groups
