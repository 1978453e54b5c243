"""PVE privilege names and built-in roles (facts from the PVE admin guide)."""

from __future__ import annotations

PRIVILEGES = frozenset(
    {
        "Datastore.Allocate",
        "Datastore.AllocateSpace",
        "Datastore.AllocateTemplate",
        "Datastore.Audit",
        "Group.Allocate",
        "Mapping.Audit",
        "Mapping.Modify",
        "Mapping.Use",
        "Permissions.Modify",
        "Pool.Allocate",
        "Pool.Audit",
        "Realm.Allocate",
        "Realm.AllocateUser",
        "SDN.Allocate",
        "SDN.Audit",
        "SDN.Use",
        "Sys.AccessNetwork",
        "Sys.Audit",
        "Sys.Console",
        "Sys.Incoming",
        "Sys.Modify",
        "Sys.PowerMgmt",
        "Sys.Syslog",
        "User.Modify",
        "VM.Allocate",
        "VM.Audit",
        "VM.Backup",
        "VM.Clone",
        "VM.Config.CDROM",
        "VM.Config.CPU",
        "VM.Config.Cloudinit",
        "VM.Config.Disk",
        "VM.Config.HWType",
        "VM.Config.Memory",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.Console",
        "VM.GuestAgent.Audit",
        "VM.GuestAgent.FileRead",
        "VM.GuestAgent.FileSystemMgmt",
        "VM.GuestAgent.FileWrite",
        "VM.GuestAgent.Unrestricted",
        "VM.Migrate",
        "VM.Monitor",
        "VM.PowerMgmt",
        "VM.Replicate",
        "VM.Snapshot",
        "VM.Snapshot.Rollback",
    }
)

_VM_ALL = {p for p in PRIVILEGES if p.startswith("VM.")}

BUILTIN_ROLES: dict[str, frozenset[str]] = {
    "Administrator": PRIVILEGES,
    "NoAccess": frozenset(),
    "PVEAdmin": PRIVILEGES
    - {"Permissions.Modify", "Realm.Allocate", "Sys.Modify", "Sys.PowerMgmt"},
    "PVEAuditor": frozenset(
        {
            "Datastore.Audit",
            "Mapping.Audit",
            "Pool.Audit",
            "SDN.Audit",
            "Sys.Audit",
            "VM.Audit",
            "VM.GuestAgent.Audit",
        }
    ),
    "PVEDatastoreAdmin": frozenset(
        {
            "Datastore.Allocate",
            "Datastore.AllocateSpace",
            "Datastore.AllocateTemplate",
            "Datastore.Audit",
        }
    ),
    "PVEDatastoreUser": frozenset({"Datastore.AllocateSpace", "Datastore.Audit"}),
    "PVEMappingAdmin": frozenset({"Mapping.Audit", "Mapping.Modify", "Mapping.Use"}),
    "PVEMappingUser": frozenset({"Mapping.Audit", "Mapping.Use"}),
    "PVEPoolAdmin": frozenset({"Pool.Allocate", "Pool.Audit"}),
    "PVEPoolUser": frozenset({"Pool.Audit"}),
    "PVESDNAdmin": frozenset({"SDN.Allocate", "SDN.Audit", "SDN.Use"}),
    "PVESDNUser": frozenset({"SDN.Audit", "SDN.Use"}),
    "PVESysAdmin": frozenset(
        {
            "Permissions.Modify",
            "Sys.Audit",
            "Sys.Console",
            "Sys.Incoming",
            "Sys.Modify",
            "Sys.PowerMgmt",
            "Sys.Syslog",
            "Sys.AccessNetwork",
        }
    ),
    "PVETemplateUser": frozenset({"VM.Audit", "VM.Clone"}),
    "PVEUserAdmin": frozenset({"Group.Allocate", "Realm.AllocateUser", "User.Modify"}),
    "PVEVMAdmin": frozenset(_VM_ALL),
    "PVEVMUser": frozenset(
        {
            "VM.Audit",
            "VM.Backup",
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.PowerMgmt",
            "VM.GuestAgent.Audit",
        }
    ),
}


_KNOWN: dict[int, tuple[object, frozenset[str]]] = {}


def known_privileges(contract) -> frozenset[str]:
    """The privileges a major knows: the ones its ``GET /access/roles/{roleid}`` declares
    (every major spells each privilege out there); all of them when it does not."""
    cached = _KNOWN.get(id(contract))
    if cached is not None and cached[0] is contract:
        return cached[1]
    endpoint = contract.endpoint("/access/roles/{roleid}", "GET")
    declared = (endpoint.returns.get("properties") if endpoint is not None else None) or {}
    known = frozenset(declared) & PRIVILEGES if declared else PRIVILEGES
    _KNOWN[id(contract)] = (contract, known)
    return known
