"""``GET /nodes/{node}/storage/{storage}/import-metadata``: importing a foreign guest.

Directory-like storages answer for ``import`` volumes in OVF/OVA format from the
descriptor an upload or download kept (an ``.ovf`` file's XML; the first ``*.ovf``
member of an ``.ova`` tar, with the archive's member names), as pve-storage's
DirPlugin and GuestImport::OVF read them. Other formats, content types and
storage types are refused with PVE's wording.
"""

from __future__ import annotations

import io
import re
import tarfile
import xml.etree.ElementTree as ET

from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.storage_service import node_storage
from proxmox_simulator.repositories import inventory

# A kept descriptor is bounded: OVF descriptors are a few KiB.
MAX_DESCRIPTOR = 1024 * 1024
# Storage types whose plugin implements the importer API (DirPlugin and its kin, ESXi).
IMPORTER_TYPES = frozenset({"dir", "nfs", "cifs", "cephfs", "btrfs", "glusterfs", "esxi"})
_DIR_IMPORT = re.compile(r"^import/([a-zA-Z0-9\-.+=_]+\.(ova|ovf|qcow2|raw|vmdk))$")
_OVA_MEMBER = re.compile(
    r"^import/([a-zA-Z0-9\-.+=_]+\.ova)/([a-zA-Z0-9\-.+=_]+\.(qcow2|raw|vmdk))$"
)
_NS = {
    "ovf": "http://schemas.dmtf.org/ovf/envelope/1",
    "rasd": "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData",
    "vmw": "http://www.vmware.com/schema/ovf",
}
# CIM resource types: controllers map to PVE buses.
_PROCESSOR, _MEMORY, _ETHERNET, _DISK = "3", "4", "10", "17"
_BUS = {"5": "ide", "6": "scsi", "20": "sata"}
_NIC_MODELS = ("e1000", "e1000e", "vmxnet3")
_VMX = re.compile(r"^[^/]+/.*\.vmx$")
_OTHER_CONTENT = (
    (re.compile(r"^iso/[^/]+\.(?:iso|img)$", re.I), "iso"),
    (re.compile(r"^vztmpl/[^/]+\.tar\.(?:gz|xz|zst|bz2)$"), "vztmpl"),
    (re.compile(r"^backup/[^/]+$"), "backup"),
    (re.compile(r"^snippets/[^/]+$"), "snippets"),
    (re.compile(r"^\d+/[^/]+\.(?:raw|qcow2|vmdk|subvol)$"), "images"),
)
_URI_CHARS = r"[A-Za-z0-9\-._~]"
_SAFE_FILE = re.compile(r"^[a-zA-Z0-9\-.+=_]+$")
# CIM_OperatingSystem ids → PVE ostype (others: "other").
_OSTYPES = {
    18: "winxp", 29: "solaris", 36: "l26", 58: "w2k", 67: "wxp", 69: "w2k3", 70: "w2k3",
    71: "wxp", 72: "wxp", 73: "wvista", 74: "wvista", 75: "wxp", 76: "w2k8", 77: "w2k8",
    79: "l26", 80: "l26", 81: "solaris", 82: "l26", 83: "l26", 84: "l26", 85: "l26",
    87: "l26", 89: "l26", 90: "l26", 91: "l26", 92: "l26", 93: "l26", 94: "l26", 95: "l26",
    96: "l26", 97: "l24", 98: "l24", 99: "l26", 100: "l26", 101: "l26", 103: "win7",
    105: "win7", 106: "l26", 107: "l26", 108: "l26", 109: "l26", 111: "win8", 112: "win8",
    113: "win8", 114: "win8", 115: "win8", 116: "win10", 117: "win8", 118: "win8",
    119: "win10", 120: "win10", 121: "win10", 122: "win11", 123: "win11",
}  # fmt: skip


def kept_contents(fmt: str, data: bytes) -> dict | None:
    """What an upload/download of an ``import`` file keeps for import-metadata: the
    OVF descriptor (an OVA's first ``*.ovf`` member), or None for disk images."""
    if fmt == "ovf":
        return {"descriptor": data[:MAX_DESCRIPTOR].decode("utf-8", "replace")}
    if fmt != "ova":
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if member.isfile() and member.name.endswith(".ovf"):
                    raw = archive.extractfile(member).read(MAX_DESCRIPTOR)
                    return {"descriptor": raw.decode("utf-8", "replace")}
    except tarfile.TarError:
        pass  # not a tar: PVE's tar fails on it when the metadata is read
    return {"descriptor": None}


async def import_metadata(
    rt, state: AccessState, principal: Principal, node: str, storage_name: str, volume: str
) -> dict:
    volid = f"{storage_name}:{volume}"
    async with rt.pool.acquire() as conn:
        storage = await node_storage(conn, node, storage_name)
        row = await inventory.volume(conn, volid)
        siblings = {
            r["volid"]: r for r in await inventory.volumes(conn, storage_name, node, "import", None)
        }
    kind = storage["type"]
    # PVE: Datastore.Allocate, or read access to the storage for import files.
    if not state.has(principal, f"/storage/{storage_name}", ["Datastore.Allocate"]):
        state.require(
            principal,
            f"/storage/{storage_name}",
            ["Datastore.AllocateSpace", "Datastore.Audit"],
            any_of=True,
        )
    if kind not in IMPORTER_TYPES:
        raise PveError("storage does not support the importer API")
    if kind == "esxi":
        if not _VMX.match(volume):
            raise PveError(f"volume '{volume}' does not look like an importable vm config")
        # Its VMs are read through a FUSE mount of the ESXi host, which the
        # simulator cannot reach: the storage never activates.
        raise PveError(f"storage '{storage_name}' is not activated")
    match = _DIR_IMPORT.match(volume) or _OVA_MEMBER.match(volume)
    if match is None:
        vtype = _other_content(volume)
        if vtype is None:
            raise PveError(f"unable to parse directory volume name '{volume}'")
        raise PveError(f"invalid content type '{vtype}'")
    fmt = match.group(2) if match.re is _DIR_IMPORT else match.group(3)
    if fmt not in ("ova", "ovf"):
        raise PveError("invalid format")
    path = f"{storage['path'] or f'/mnt/pve/{storage_name}'}/import/{match.group(1)}"
    kept = (row["guest_config"] or {}) if row is not None else None
    if fmt == "ova":
        if kept is None or not kept.get("descriptor"):
            raise PveError(
                f"command 'tar -xO --wildcards --occurrence=1 -f {path} '*.ovf'' failed: exit code 2"
            )
        warnings = [{"type": "ova-needs-extracting"}]
    else:
        if kept is None or kept.get("descriptor") is None:
            raise PveError(
                f'Could not create file parser context for file "{path}": No such file or directory'
            )
        warnings = []
    parsed = _parse_ovf(kept["descriptor"], path, fmt == "ova", siblings, storage_name)
    disks: dict = {}
    for address, (name, size) in parsed["disks"].items():
        disk = {"volid": f"{volid}/{name}" if fmt == "ova" else f"{storage_name}:import/{name}"}
        if size is not None:
            disk["size"] = size
        disks[address] = disk
    if parsed["qm"].get("bios") == "ovmf":
        disks["efidisk0"] = 1
        warnings.append({"type": "efi-state-lost", "key": "bios", "value": "ovmf"})
    return {
        "type": "vm",
        "source": volume,
        "create-args": parsed["qm"],
        "disks": disks,
        "warnings": warnings,
        "net": parsed["net"],
    }


def _other_content(volume: str) -> str | None:
    """The content type a directory volume name of another kind has, if it parses."""
    return next((vtype for pattern, vtype in _OTHER_CONTENT if pattern.match(volume)), None)


# -- the OVF descriptor ----------------------------------------------------------------


def _text(node, path: str) -> str:
    found = node.find(path, _NS) if node is not None else None
    return (found.text or "").strip() if found is not None else ""


def _attr(node, name: str) -> str:
    if node is None:
        return ""
    prefix, _, local = name.partition(":")
    return node.get(f"{{{_NS[prefix]}}}{local}", "")


def _capacity_factor(units: str) -> int | None:
    match = re.fullmatch(r"\s*byte\s*\*\s*([0-9]+)\s*\^\s*([0-9]+)\s*", units)
    return int(match.group(1)) ** int(match.group(2)) if match else None


def _parse_ovf(descriptor: str, path: str, is_ova: bool, siblings: dict, storage_name: str):
    try:
        root = ET.fromstring(descriptor)
    except ET.ParseError as exc:
        # As libxml2 reports it: the file, the line, then the parser's complaint.
        line = exc.position[0] if exc.position else 1
        reason = str(exc).split(":", 1)[0]
        raise PveError(f"{path}:{line}: parser error : {reason}") from None
    system = root.find("ovf:VirtualSystem", _NS)
    hardware = system.find("ovf:VirtualHardwareSection", _NS) if system is not None else None
    items = hardware.findall("ovf:Item", _NS) if hardware is not None else []

    def items_of(resource: str) -> list:
        return [i for i in items if _text(i, "rasd:ResourceType") == resource]

    def first(resource: str) -> str:
        found = items_of(resource)
        return _text(found[0], "rasd:VirtualQuantity") if found else ""

    qm: dict = {}
    name = _text(system, "ovf:Name")
    if name:
        qm["name"] = re.sub(r"[^a-zA-Z0-9\-.]", "", name)
    qm["cores"] = first(_PROCESSOR)
    qm["memory"] = first(_MEMORY)
    os_section = system.find("ovf:OperatingSystemSection", _NS) if system is not None else None
    os_id = _attr(os_section, "ovf:id")
    qm["ostype"] = _OSTYPES.get(int(os_id), "other") if os_id.isdigit() else "other"
    firmware = next(
        (
            _attr(c, "vmw:value")
            for c in (hardware.findall("vmw:Config", _NS) if hardware is not None else [])
            if _attr(c, "vmw:key") == "firmware"
        ),
        "",
    )
    if firmware == "efi":
        qm["bios"] = "ovmf"

    disk_section = {
        _attr(d, "ovf:diskId"): d for d in root.findall("ovf:DiskSection/ovf:Disk", _NS)
    }
    files = {
        _attr(f, "ovf:id"): _attr(f, "ovf:href")
        for f in root.findall("ovf:References/ovf:File", _NS)
    }
    disks: dict[str, tuple[str, int | None]] = {}
    for item in items_of(_DISK):
        host = _text(item, "rasd:HostResource")
        match = re.fullmatch(rf"ovf:/({_URI_CHARS}+)/({_URI_CHARS}+)", host)
        if not match:
            continue
        disk = disk_section.get(match.group(2))
        fileref = _attr(disk, "ovf:fileRef")
        factor = _capacity_factor(_attr(disk, "ovf:capacityAllocationUnits"))
        capacity = _attr(disk, "ovf:capacity")
        size = int(capacity) * factor if factor and capacity.isdigit() else None
        if not fileref or not re.fullmatch(rf"(?:{_URI_CHARS}|/)+", fileref):
            continue
        parent = _text(item, "rasd:Parent")
        controller = next((i for i in items if _text(i, "rasd:InstanceID") == parent), None)
        controller_type = _text(controller, "rasd:ResourceType")
        if not controller_type:
            continue
        address = _BUS.get(controller_type, "") + _text(item, "rasd:AddressOnParent")
        href = files.get(fileref, "")
        if not href:
            continue
        if not _SAFE_FILE.match(href) or href in (".", ".."):
            raise PveError(f"referenced path '{href}' is invalid")
        if not is_ova:
            image = siblings.get(f"{storage_name}:import/{href}")
            backing = f"{path.rsplit('/', 1)[0]}/{href}"
            if image is None:
                raise PveError(f"error parsing {href}, file seems not to exist at {backing}")
            size = image["virtual_size"] or image["size"]
        disks[address] = (href, size)
    if disks:
        qm["boot"] = "order=" + ";".join(disks)
    net = {}
    for index, item in enumerate(items_of(_ETHERNET)):
        model = _text(item, "rasd:ResourceSubType").lower()
        net[f"net{index}"] = {"model": model if model in _NIC_MODELS else "e1000"}
    return {"qm": qm, "disks": disks, "net": net}
