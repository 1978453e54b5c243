"""Per-major behaviour, in one place: what a PVE major reports differently.

Services ask the active contract's adapter (``rt.adapter``) instead of testing
version strings.  Each major subclasses the previous one and overrides only
what changed, so a difference is declared exactly once.
"""

from __future__ import annotations


class Pve6:
    major = 6
    # The QEMU release each major shipped with (``running-qemu``) and the
    # machine type a new VM gets (``running-machine``).
    qemu_version = "5.2.0"
    machine = "pc-i440fx-5.2"
    # The kernel every node runs (``uname -a`` as node status reports it).
    kversion = "Linux 5.4.203-1-pve #1 SMP PVE 5.4.203-1 (Fri, 26 Aug 2022 14:43:35 +0200)"

    @property
    def kernel_release(self) -> str:
        """``uname -r``: the running kernel's release."""
        return self.kversion.split()[1]

    def running_qemu(self) -> dict:
        return {"running-qemu": self.qemu_version, "running-machine": self.machine}

    def node_memory(self, total: int, used: int) -> dict:
        return {"total": total, "used": used, "free": total - used}

    def qemu_migrate_extras(self) -> dict:
        """Fields a major adds to ``GET .../qemu/{vmid}/migrate``."""
        return {}

    def lxc_interface(self, name: str, hwaddr: str, addresses: list[dict]) -> dict:
        entry = {"name": name, "hwaddr": hwaddr}
        for address in addresses:
            family = "inet" if address["ip-address-type"] == "ipv4" else "inet6"
            entry[family] = f"{address['ip-address']}/{address['prefix']}"
        return entry


class Pve7(Pve6):
    major = 7
    qemu_version = "7.2.0"
    machine = "pc-i440fx-7.2+pve0"
    kversion = "Linux 5.15.158-2-pve #1 SMP PVE 5.15.158-2 (2024-07-26T14:12Z)"


class Pve8(Pve7):
    major = 8
    qemu_version = "9.2.0"
    machine = "pc-i440fx-9.2+pve1"
    kversion = "Linux 6.8.12-8-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-8 (2025-01-24T12:32Z)"

    def lxc_interface(self, name: str, hwaddr: str, addresses: list[dict]) -> dict:
        # 8.x also reports the guest-agent style fields.
        entry = super().lxc_interface(name, hwaddr, addresses)
        entry["hardware-address"] = hwaddr
        entry["ip-addresses"] = [dict(a) for a in addresses]
        return entry


class Pve9(Pve8):
    major = 9
    qemu_version = "10.0.2"
    machine = "pc-i440fx-10.0+pve1"
    kversion = "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2 (2025-07-22T10:04Z)"

    def qemu_migrate_extras(self) -> dict:
        # 9.x reports whether the VM's state includes D-Bus VMstate (none simulated).
        return {"has-dbus-vmstate": 0}

    def node_memory(self, total: int, used: int) -> dict:
        # 9.x adds "available"; no page cache is simulated, so it equals "free".
        return {**super().node_memory(total, used), "available": total - used}


ADAPTERS = {adapter.major: adapter for adapter in (Pve6(), Pve7(), Pve8(), Pve9())}


def adapter_for(major: int) -> Pve6:
    """The adapter of ``major``; a newer major than known behaves like the newest."""
    if major in ADAPTERS:
        return ADAPTERS[major]
    return ADAPTERS[max(ADAPTERS)] if major > max(ADAPTERS) else ADAPTERS[min(ADAPTERS)]
