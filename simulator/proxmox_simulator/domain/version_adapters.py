"""Per-major behaviour, in one place: what a PVE major reports differently.

Services ask the active contract's adapter (``rt.adapter``) instead of testing
version strings.  Each major subclasses the previous one and overrides only
what changed, so a difference is declared exactly once.
"""

from __future__ import annotations

import re


class Pve6:
    major = 6
    # The QEMU release each major shipped with (``running-qemu``) and the
    # machine type a new VM gets (``running-machine``).
    qemu_version = "5.2.0"
    machine = "pc-i440fx-5.2"
    # The kernel every node runs (``uname -a`` as node status reports it).
    kversion = "Linux 5.4.203-1-pve #1 SMP PVE 5.4.203-1 (Fri, 26 Aug 2022 14:43:35 +0200)"
    # Failed second factors lock a user out (TOTP after 8, everything after 100) and
    # an admin unlocks them (``unlock-tfa``): pve-access-control 8.0 on.
    tfa_lockout = False
    # A console proxy's VNC ticket is signed for its port too (9.x; checked by
    # ``vncwebsocket`` and ``POST /access/vncticket``).
    vnc_ticket_binds_port = False
    # The Debian release the major is built on and the Ceph release its
    # standard APT repositories offer (``/nodes/{node}/apt/repositories``).
    debian_suite = "buster"
    ceph_release = "octopus"
    # The release from which PVE's HTTP server (libpve-http-server-perl 5.2.0, first in
    # 8.4) writes an error's message into the body too: ``message`` beside ``data`` in a
    # JSON error, and the bare message where the answer had no body (a refused
    # ticket).  Before it, the reason phrase of the status line was the only place.
    error_message_in_body_since: tuple[int, int] | None = None
    # The notification system (matchers and targets; 8.1) with webhook targets (8.3):
    # vzdump and replication notify through it. Before 8.1 vzdump mailed its report
    # and replication mailed root; the simulator sends no mail.
    notification_system = False

    # The CPU models a guest may use: what the major's QEMU and qemu-server offer
    # (``/nodes/{node}/cpu``, later ``/capabilities/qemu/cpu``); newer majors add to it.
    cpu_models: tuple[str, ...] = (
        *("486", "pentium", "pentium2", "pentium3", "coreduo", "core2duo", "Conroe", "Penryn"),
        *("Nehalem", "Nehalem-IBRS", "Westmere", "Westmere-IBRS", "SandyBridge"),
        *("SandyBridge-IBRS", "IvyBridge", "IvyBridge-IBRS", "Haswell", "Haswell-IBRS"),
        *("Haswell-noTSX", "Haswell-noTSX-IBRS", "Broadwell", "Broadwell-IBRS"),
        *("Broadwell-noTSX", "Broadwell-noTSX-IBRS", "Skylake-Client", "Skylake-Client-IBRS"),
        *("Skylake-Client-noTSX-IBRS", "Skylake-Server", "Skylake-Server-IBRS"),
        *("Skylake-Server-noTSX-IBRS", "Cascadelake-Server", "Cascadelake-Server-noTSX"),
        *("Cooperlake", "KnightsMill", "Icelake-Client", "Icelake-Client-noTSX"),
        *("Icelake-Server", "Icelake-Server-noTSX"),
        *("athlon", "phenom", "Opteron_G1", "Opteron_G2", "Opteron_G3", "Opteron_G4"),
        *("Opteron_G5", "EPYC", "EPYC-IBPB", "EPYC-Rome"),
        *("host", "kvm32", "kvm64", "qemu32", "qemu64", "max"),
    )

    @property
    def kernel_release(self) -> str:
        """``uname -r``: the running kernel's release."""
        return self.kversion.split()[1]

    def error_message_in_body(self, version: str) -> bool:
        """Whether release ``version`` of this major puts error messages in the body."""
        since = self.error_message_in_body_since
        if since is None:
            return False
        numbers = re.findall(r"\d+", version)[:2]
        return tuple(int(n) for n in numbers) >= since

    def running_qemu(self) -> dict:
        return {"running-qemu": self.qemu_version, "running-machine": self.machine}

    def node_memory(self, total: int, used: int) -> dict:
        return {"total": total, "used": used, "free": total - used}

    def node_status_kernel(self, kversion: str) -> dict:
        """What a node's status says of its kernel and boot beyond ``kversion`` (which every
        major reports: ``uname``'s sysname, release and version in one string)."""
        return {}

    def qemu_migrate_extras(self, mapped: list[str]) -> dict:
        """Fields a major adds to ``GET .../qemu/{vmid}/migrate``; ``mapped`` names the
        guest's devices that go through a cluster resource mapping (8.x+)."""
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
    debian_suite = "bullseye"
    ceph_release = "quincy"
    # QEMU 7.x's versioned models.
    cpu_models = (
        *Pve6.cpu_models,
        *("Skylake-Client-v4", "Skylake-Server-v4", "Skylake-Server-v5"),
        *("Cascadelake-Server-v2", "Cascadelake-Server-v4", "Cascadelake-Server-v5"),
        *("Cooperlake-v2", "Icelake-Server-v3", "Icelake-Server-v4", "Icelake-Server-v5"),
        *("Icelake-Server-v6", "EPYC-v3", "EPYC-Rome-v2", "EPYC-Milan"),
    )


class Pve8(Pve7):
    major = 8
    tfa_lockout = True
    notification_system = True  # the simulated 8.x is 8.4: webhook targets included
    error_message_in_body_since = (8, 4)
    qemu_version = "9.2.0"
    machine = "pc-i440fx-9.2+pve1"
    kversion = "Linux 6.8.12-8-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-8 (2025-01-24T12:32Z)"
    debian_suite = "bookworm"
    ceph_release = "squid"
    # qemu-server 8's x86-64 micro-architecture levels and QEMU 8/9's new models; the
    # deprecated Icelake-Client models are gone with QEMU 7.1+.
    cpu_models = (
        *(m for m in Pve7.cpu_models if not m.startswith("Icelake-Client")),
        *("x86-64-v2", "x86-64-v2-AES", "x86-64-v3", "x86-64-v4"),
        *("Icelake-Server-v7", "SapphireRapids", "SapphireRapids-v2", "GraniteRapids"),
        *("EPYC-v4", "EPYC-Rome-v3", "EPYC-Rome-v4", "EPYC-Milan-v2", "EPYC-Genoa"),
    )

    def node_status_kernel(self, kversion: str) -> dict:
        # pve-manager 8 added uname's fields one by one, and how the node booted.
        sysname, release, version = kversion.split(" ", 2)
        return {
            "current-kernel": {
                "sysname": sysname,
                "release": release,
                "version": version,
                "machine": "x86_64",
            },
            "boot-info": {"mode": "efi", "secureboot": 0},
        }

    def qemu_migrate_extras(self, mapped: list[str]) -> dict:
        # Resource mappings came with 8.x: which devices are mapped, and (no mapped
        # device is live-migratable here) nothing about them per node.
        return {"mapped-resources": list(mapped), "mapped-resource-info": {}}

    def lxc_interface(self, name: str, hwaddr: str, addresses: list[dict]) -> dict:
        # 8.x also reports the guest-agent style fields.
        entry = super().lxc_interface(name, hwaddr, addresses)
        entry["hardware-address"] = hwaddr
        entry["ip-addresses"] = [dict(a) for a in addresses]
        return entry


class Pve9(Pve8):
    major = 9
    vnc_ticket_binds_port = True
    qemu_version = "10.0.2"
    machine = "pc-i440fx-10.0+pve1"
    kversion = "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2 (2025-07-22T10:04Z)"
    debian_suite = "trixie"
    cpu_models = (
        *Pve8.cpu_models,
        *("SapphireRapids-v3", "SapphireRapids-v4", "GraniteRapids-v2", "GraniteRapids-v3"),
        *("SierraForest", "SierraForest-v2", "SierraForest-v3", "ClearwaterForest"),
        *("EPYC-v5", "EPYC-Rome-v5", "EPYC-Milan-v3", "EPYC-Genoa-v2", "EPYC-Turin"),
    )

    def qemu_migrate_extras(self, mapped: list[str]) -> dict:
        # 9.x reports whether the VM's state includes D-Bus VMstate (none simulated).
        return {**super().qemu_migrate_extras(mapped), "has-dbus-vmstate": 0}

    def node_memory(self, total: int, used: int) -> dict:
        # 9.x adds "available"; no page cache is simulated, so it equals "free".
        return {**super().node_memory(total, used), "available": total - used}


ADAPTERS = {adapter.major: adapter for adapter in (Pve6(), Pve7(), Pve8(), Pve9())}


def adapter_for(major: int) -> Pve6:
    """The adapter of ``major``; a newer major than known behaves like the newest."""
    if major in ADAPTERS:
        return ADAPTERS[major]
    return ADAPTERS[max(ADAPTERS)] if major > max(ADAPTERS) else ADAPTERS[min(ADAPTERS)]
