"""The privileges a QEMU config write needs, option by option.

The schema of ``PUT``/``POST …/qemu/{vmid}/config`` only asks for *any*
``VM.Config.*`` privilege; qemu-server then checks each option set or
deleted against the privilege of its group (memory needs
``VM.Config.Memory``, a NIC ``VM.Config.Network``, …) and leaves options
outside every group to root.  Drives, serial/USB/PCI devices and tags are
checked by their own value-dependent rules and are skipped here, as in PVE.
"""

from __future__ import annotations

import re

from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import PermissionDenied, PveError

_GROUPS: dict[str, frozenset[str]] = {
    "VM.Config.CPU": frozenset(
        {"affinity", "cores", "cpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus"}
    ),
    "VM.Config.Memory": frozenset({"memory", "balloon", "shares"}),
    "VM.Config.HWType": frozenset(
        {"acpi", "hotplug", "kvm", "machine", "scsihw", "smbios1", "tablet", "vga", "watchdog"}
    ),
    "VM.Config.Options": frozenset(
        {
            "agent",
            "autostart",
            "bios",
            "description",
            "keyboard",
            "localtime",
            "migrate_downtime",
            "migrate_speed",
            "name",
            "onboot",
            "ostype",
            "protection",
            "reboot",
            "startdate",
            "startup",
            "tdf",
            "template",
        }
    ),
    "VM.PowerMgmt": frozenset({"freeze"}),
    "VM.Config.Disk": frozenset({"boot", "bootdisk", "vmstatestorage"}),
}
_CLOUDINIT = frozenset(
    {
        "cicustom",
        "cipassword",
        "citype",
        "ciuser",
        "ciupgrade",
        "nameserver",
        "searchdomain",
        "sshkeys",
    }
)
# Checked elsewhere (drives by their volumes, devices by their values).
_SKIPPED = re.compile(
    r"^(?:(?:ide|sata|scsi|virtio|unused|serial|usb|hostpci|virtiofs)\d+"
    r"|efidisk0|tpmstate0|rng0|cdrom|tags)$"
)


def check_qemu_options(
    state: AccessState, principal: Principal, vmid: int, pool: str | None, options
) -> None:
    """Raise like qemu-server when ``principal`` may not set or delete one of ``options``."""
    if principal.is_root:
        return
    path = f"/vms/{vmid}"

    def require(privs: list[str], *, any_of: bool = False) -> None:
        if not state.has(principal, path, privs, any_of=any_of, pool=pool):
            raise PermissionDenied(f"Permission check failed ({path}, {'|'.join(privs)})")

    for option in sorted(set(options)):
        if _SKIPPED.match(option):
            continue
        group = next((priv for priv, names in _GROUPS.items() if option in names), None)
        if option.startswith("numa") and option[4:].isdigit():
            group = "VM.Config.CPU"
        if group is not None:
            require([group])
            if option == "startup" and not state.has(principal, "/", ["Sys.Modify"]):
                # Start order changes how the host boots: Sys.Modify on / as well.
                raise PermissionDenied("Permission check failed (/, Sys.Modify)")
        elif re.fullmatch(r"net\d+", option):
            require(["VM.Config.Network"])
        elif option in _CLOUDINIT or re.fullmatch(r"ipconfig\d+", option):
            require(["VM.Config.Cloudinit", "VM.Config.Network"], any_of=True)
        elif option == "vmstate":
            require(["VM.Config.Disk"])
            require(["VM.PowerMgmt"])
        else:
            raise PveError(f"only root can set '{option}' config")
