"""A node's host hardware as PVE reads it from sysfs: PCI and USB devices, mediated
device types, and the CPU models QEMU offers guests.

PVE answers these from the host (``lspci``/sysfs, ``/sys/bus/usb``, QEMU's model
list), never from a configuration the API writes, so each seeded node is one fixed
server (an AMD EPYC host, as its ``cpuinfo`` says) and only what guests change on it
is state: a running guest's mediated device takes one instance of its type.  Old and
new paths (6.x ``/nodes/{node}/scan/usb`` and ``/nodes/{node}/cpu``, 7.x+
``/hardware/usb`` and ``/capabilities/qemu/cpu``) read the same devices.
"""

from __future__ import annotations

import re

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import guests as guest_repo

# (id, class, vendor, device, vendor name, device name, iommu group, subsystem
# vendor/device, mdev types {type: (description, instances)}).
_PCI = (
    ("0000:00:00.0", "0x060000", "0x1022", "0x1480", "Advanced Micro Devices, Inc. [AMD]",
     "Starship/Matisse Root Complex", 0, ("0x1022", "0x1480"), None),
    ("0000:00:01.0", "0x060000", "0x1022", "0x1482", "Advanced Micro Devices, Inc. [AMD]",
     "Starship/Matisse PCIe Dummy Host Bridge", 1, None, None),
    ("0000:00:14.0", "0x0c0500", "0x1022", "0x790b", "Advanced Micro Devices, Inc. [AMD]",
     "FCH SMBus Controller", 2, ("0x15d9", "0x1b84"), None),
    ("0000:02:00.0", "0x010802", "0x144d", "0xa808", "Samsung Electronics Co Ltd",
     "NVMe SSD Controller SM981/PM981/PM983", 16, ("0x144d", "0xa801"), None),
    ("0000:03:00.0", "0x030000", "0x102b", "0x0522", "Matrox Electronics Systems Ltd.",
     "MGA G200e [Pilot] ServerEngines (SEP1)", 17, ("0x15d9", "0x1b84"), None),
    ("0000:21:00.0", "0x020000", "0x8086", "0x1521", "Intel Corporation",
     "I350 Gigabit Network Connection", 24, ("0x15d9", "0x1521"), None),
    ("0000:21:00.1", "0x020000", "0x8086", "0x1521", "Intel Corporation",
     "I350 Gigabit Network Connection", 25, ("0x15d9", "0x1521"), None),
    ("0000:23:00.3", "0x0c0330", "0x1022", "0x148c", "Advanced Micro Devices, Inc. [AMD]",
     "Starship USB 3.0 Host Controller", 27, ("0x15d9", "0x1b84"), None),
    ("0000:24:00.0", "0x010601", "0x1022", "0x7901", "Advanced Micro Devices, Inc. [AMD]",
     "FCH SATA Controller [AHCI mode]", 28, ("0x15d9", "0x1b84"), None),
    ("0000:41:00.0", "0x030200", "0x10de", "0x1eb8", "NVIDIA Corporation",
     "TU104GL [Tesla T4]", 32, ("0x10de", "0x12a2"),
     {"nvidia-222": ("num_heads=4, frl_config=45, framebuffer=1024M", 16),
      "nvidia-223": ("num_heads=4, frl_config=45, framebuffer=2048M", 8),
      "nvidia-230": ("num_heads=1, frl_config=60, framebuffer=16384M", 1)}),
)  # fmt: skip

# busnum, devnum, port, level, class, vendid, prodid, speed, manufacturer, product, serial
_USB = (
    (1, 2, 1, 1, 0, "046b", "ff10", "480", "American Megatrends Inc.", "Virtual Keyboard and Mouse", None),
    (2, 2, 3, 1, 0, "0781", "5583", "5000", "SanDisk", "Ultra Fit", "4C530001120716103384"),
)  # fmt: skip

_HOSTPCI = re.compile(r"^hostpci\d+$")


def _pci_entry(device: tuple, verbose: bool) -> dict:
    pciid, cls, vendor, dev, vendor_name, dev_name, group, subsystem, mdev = device
    entry = {"id": pciid, "class": cls, "vendor": vendor, "device": dev, "iommugroup": group}
    if subsystem:
        entry["subsystem_vendor"], entry["subsystem_device"] = subsystem
    if mdev:
        entry["mdev"] = 1
    if verbose:
        entry["vendor_name"] = vendor_name
        entry["device_name"] = dev_name
        if subsystem:
            entry["subsystem_vendor_name"] = vendor_name
            entry["subsystem_device_name"] = ""
    return entry


async def pci_devices(rt, node: str, class_blacklist: str | None, verbose) -> list[dict]:
    """``GET /nodes/{node}/hardware/pci``: classes whose leading digits match an entry of
    ``pci-class-blacklist`` (default ``05;06;0b``: memory, bridges, processors) are left out."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    # Absent: the default list; given empty: nothing is left out.
    chosen = "05;06;0b" if class_blacklist is None else class_blacklist
    blacklist = [c for c in re.split(r"[;,\s]+", chosen) if c]
    verbose = verbose in (None, 1, "1", True)
    return [
        _pci_entry(device, verbose)
        for device in _PCI
        if not any(device[1][2:].startswith(prefix) for prefix in blacklist)
    ]


def _pci_device(pciid: str) -> tuple:
    # A bare "41:00.0" names domain 0000, as lspci prints it.
    full = pciid if pciid.count(":") == 2 else f"0000:{pciid}"
    for device in _PCI:
        if device[0] == full or device[0].startswith(f"{full}."):
            return device
    raise PveError(f"Invalid PCI ID '{pciid}'", status=400)


_PCI_ID = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?$")


async def _mapped_pci(rt, node: str, mapping_id: str) -> str:
    """8.x+: a PCI resource mapping's device on ``node``."""
    from proxmox_simulator.domain import mapping_service

    mapping = await mapping_service.get_mapping(rt, "pci", mapping_id)
    for entry in mapping.get("map") or []:
        fields = rules.parse_property_string(entry)
        if fields.get("node") == node and fields.get("path"):
            return fields["path"].split(";")[0]
    raise PveError(f"mapping '{mapping_id}' has no entry for node '{node}'")


async def mdev_types(rt, node: str, pciid: str, *, mapping: bool = False) -> list[dict]:
    """``GET …/hardware/pci/{id}/mdev``: each type with the instances left; a running guest
    whose ``hostpciN`` uses the device with ``mdev=<type>`` holds one.  With ``mapping``
    (8.x+) the ID may name a PCI resource mapping instead."""
    if mapping and not _PCI_ID.match(pciid):
        pciid = await _mapped_pci(rt, node, pciid)
    device = _pci_device(pciid)
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        guests = await guest_repo.list_all(conn, node)
    types = device[8]
    if not types:
        raise PveError(f"Device '{pciid}' is not a PCI device that supports mediated devices")
    used: dict[str, int] = {}
    for guest in guests:
        if guest["type"] != "qemu" or guest["status"] != "running":
            continue
        for key, value in (guest["config"] or {}).items():
            if not _HOSTPCI.match(key):
                continue
            options = rules.parse_property_string(value, "host")
            host = options.get("host", "")
            if host and device[0].endswith(host.split(";")[0]) and options.get("mdev"):
                used[options["mdev"]] = used.get(options["mdev"], 0) + 1
    return [
        {"type": name, "description": description, "available": max(total - used.get(name, 0), 0)}
        for name, (description, total) in types.items()
    ]


async def usb_devices(rt, node: str) -> list[dict]:
    """``GET /nodes/{node}/hardware/usb`` (6.x: ``/scan/usb``); hubs are not listed."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    devices = []
    for bus, dev, port, level, cls, vendid, prodid, speed, maker, product, serial in _USB:
        entry = {
            "busnum": bus,
            "devnum": dev,
            "port": port,
            "level": level,
            "class": cls,
            "vendid": vendid,
            "prodid": prodid,
            "speed": speed,
            "usbpath": f"{bus}-{port}",
            "manufacturer": maker,
            "product": product,
        }
        if serial:
            entry["serial"] = serial
        devices.append(entry)
    return devices


def model_vendor(model: str) -> str:
    if model.startswith(("EPYC", "Opteron", "athlon", "phenom")):
        return "AuthenticAMD"
    if model.startswith("x86-64-v") or model in (
        "host",
        "kvm32",
        "kvm64",
        "qemu32",
        "qemu64",
        "max",
    ):
        return "default"  # the guest sees the host's vendor
    return "GenuineIntel"


async def cpu_models(rt, state, principal, node: str) -> list[dict]:
    """``GET /nodes/{node}/capabilities/qemu/cpu`` (6.x: ``/nodes/{node}/cpu``): the models
    the major's QEMU offers (``rt.adapter.cpu_models``); the ``x86-64-v*`` models report
    themselves as ``qemu64`` and so the host's vendor.  Then the custom models of
    cpu-models.conf, with their reported model's vendor; 9.x shows a user only those
    it may see (any Mapping privilege on ``/mapping/cpu/<name>``, or Sys.Audit on /nodes)."""
    from proxmox_simulator.domain import qemu_cpu_service

    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        custom = await qemu_cpu_service.custom_models(conn)
    if rt.adapter.major >= 9 and not state.has(principal, "/nodes", ["Sys.Audit"]):
        custom = [
            c
            for c in custom
            if qemu_cpu_service.can_see(state, principal, c["name"].removeprefix("custom-"))
        ]
    builtin = [
        {"name": model, "custom": 0, "vendor": model_vendor(model)}
        for model in sorted(rt.adapter.cpu_models, key=str.lower)
    ]
    return builtin + custom
