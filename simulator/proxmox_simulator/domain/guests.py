"""Guest (QEMU VM / LXC container) rules: power state machine and config parsing."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from proxmox_simulator.domain.errors import PveError

QEMU, LXC = "qemu", "lxc"
STOPPED, RUNNING, PAUSED = "stopped", "running", "paused"


def noun(kind: str) -> str:
    """PVE says "VM 100" for QEMU guests and "CT 100" for containers."""
    return "VM" if kind == QEMU else "CT"


@dataclass(frozen=True)
class Transition:
    action: str
    allowed_from: frozenset[str]
    target: str
    task_type_qemu: str
    task_type_lxc: str
    # State in which the action is a successful no-op instead of an error.
    noop_from: frozenset[str] = frozenset()

    def task_type(self, kind: str) -> str:
        return self.task_type_qemu if kind == QEMU else self.task_type_lxc


TRANSITIONS: dict[str, Transition] = {
    "start": Transition("start", frozenset({STOPPED}), RUNNING, "qmstart", "vzstart"),
    "stop": Transition(
        "stop", frozenset({RUNNING, PAUSED}), STOPPED, "qmstop", "vzstop", frozenset({STOPPED})
    ),
    "shutdown": Transition("shutdown", frozenset({RUNNING}), STOPPED, "qmshutdown", "vzshutdown"),
    "reboot": Transition("reboot", frozenset({RUNNING}), RUNNING, "qmreboot", "vzreboot"),
    "suspend": Transition(
        "suspend", frozenset({RUNNING}), PAUSED, "qmsuspend", "vzsuspend", frozenset({PAUSED})
    ),
    "resume": Transition(
        "resume", frozenset({PAUSED}), RUNNING, "qmresume", "vzresume", frozenset({RUNNING})
    ),
    # A hard reset restarts a running (or paused) QEMU guest; LXC has no reset.
    "reset": Transition("reset", frozenset({RUNNING, PAUSED}), RUNNING, "qmreset", "vzreset"),
}

# Simulated durations in seconds; the clock decides how long that really is.
DURATIONS = {
    "create": 2.0,
    "start": 1.5,
    "stop": 0.5,
    "shutdown": 3.0,
    "reboot": 4.0,
    "suspend": 0.5,
    "resume": 0.5,
    "reset": 0.5,
    "destroy": 1.0,
    "snapshot": 1.0,
    "delsnapshot": 0.5,
    "rollback": 1.0,
    "config": 0.2,
    "migrate": 5.0,
    "clone": 3.0,
    "template": 1.0,
    "resize": 1.0,
    "move": 3.0,
}


def check_transition(kind: str, vmid: int, status: str, action: str) -> bool:
    """True if the action changes state, False if it is a no-op; raise if illegal."""
    transition = TRANSITIONS[action]
    if status in transition.noop_from:
        return False
    if status in transition.allowed_from:
        return True
    who = f"{noun(kind)} {vmid}"
    if action == "start":
        raise PveError(f"{who} already running")
    if status == PAUSED and action == "shutdown":
        raise PveError(f"{who} is paused - cannot shutdown")
    raise PveError(f"{who} not running")


def require_stopped_for_destroy(kind: str, vmid: int, status: str) -> None:
    if status != STOPPED:
        raise PveError(f"{noun(kind)} {vmid} is running - destroy failed")


def config_digest(config: dict, snapshots=()) -> str:
    """PVE's digest is a SHA-1 of the whole config file, its snapshot sections included
    (a snapshot taken, removed or described changes it); ours hashes the canonical
    config with the snapshots' rows (name, parent, description, time, vmstate, config)."""
    sections = [
        [s["name"], s["parent"], s["description"], s["snaptime"], s["vmstate"], s["config"]]
        for s in snapshots
    ]
    text = json.dumps({"config": config, "snapshots": sections}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


QEMU_DISK_KEY = re.compile(r"^(?:scsi|virtio|sata|ide)\d+$|^(?:efidisk0|tpmstate0)$")
LXC_DISK_KEY = re.compile(r"^(?:rootfs|mp\d+)$")
NIC_MODELS = frozenset(
    {
        "virtio",
        "e1000",
        "e1000e",
        "rtl8139",
        "vmxnet3",
        "ne2k_pci",
        "pcnet",
        "i82551",
        "i82557b",
        "i82559er",
        "ne2k_isa",
        "e1000-82540em",
        "e1000-82544gc",
        "e1000-82545em",
    }
)
NET_KEY = re.compile(r"^net(\d+)$")
_NEW_DISK = re.compile(r"^(?P<storage>[A-Za-z][A-Za-z0-9._-]*):(?P<size>\d+(?:\.\d+)?)$")


def parse_property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """``virtio=AA:..,bridge=vmbr0`` → dict; a bare first item goes to ``default_key``."""
    out: dict[str, str] = {}
    for item in str(value).split(","):
        if not item:
            continue
        key, sep, val = item.partition("=")
        if sep:
            out[key] = val
        elif default_key:
            out[default_key] = key
    return out


def format_property_string(items: dict[str, str], first: str | None = None) -> str:
    parts = [items[first]] if first and first in items else []
    parts += [f"{k}={v}" for k, v in items.items() if k != first]
    return ",".join(parts)


def is_disk_key(kind: str, key: str) -> bool:
    return bool((QEMU_DISK_KEY if kind == QEMU else LXC_DISK_KEY).match(key))


@dataclass(frozen=True)
class DiskRequest:
    key: str
    storage: str
    size_gib: float
    options: dict[str, str]


def new_disk_requests(kind: str, config: dict) -> list[DiskRequest]:
    """Disk entries of the form ``STORAGE:SIZE`` ask PVE to allocate a new volume."""
    requests = []
    for key in sorted(config):
        if not is_disk_key(kind, key):
            continue
        props = parse_property_string(config[key], "file" if kind == QEMU else "volume")
        volume = props.pop("file", None) or props.pop("volume", None) or ""
        match = _NEW_DISK.match(volume)
        if match and props.get("media") != "cdrom":
            requests.append(DiskRequest(key, match["storage"], float(match["size"]), props))
    return requests


_VOLUME_STORAGE = re.compile(r"^(?P<storage>[a-z][a-z0-9\-_.]*[a-z0-9]):", re.I)


def disk_volumes(kind: str, config: dict) -> list[tuple[str, str]]:
    """(key, volume) of every disk in ``config``: ``local-lvm:vm-100-disk-0``, ``none``, a path."""
    found = []
    for key in sorted(config):
        if is_disk_key(kind, key):
            props = parse_property_string(config[key], "file" if kind == QEMU else "volume")
            found.append((key, props.get("file") or props.get("volume") or ""))
    return found


def volume_storage(volume: str) -> str | None:
    """The storage a volume ID lives on; None for ``none``, ``cdrom`` and device paths."""
    match = _VOLUME_STORAGE.match(volume)
    return match["storage"] if match else None


def bridges(kind: str, config: dict) -> list[tuple[str, str]]:
    """(key, bridge) of every NIC attached to a bridge (a QEMU NIC may have none: NAT)."""
    found = []
    for key in sorted(config):
        if NET_KEY.match(key):
            props = parse_property_string(config[key], "model" if kind == QEMU else None)
            if props.get("bridge"):
                found.append((key, props["bridge"]))
    return found


def mac_for(vmid: int, index: int) -> str:
    """A stable MAC under PVE's ``BC:24:11`` prefix.

    Encoding (vmid, NIC index) directly instead of hashing keeps MACs unique
    for every VMID below 524,288 (32 NICs each), so large seeds never collide.
    """
    value = (vmid * 32 + index) & 0xFFFFFF
    return f"BC:24:11:{value >> 16:02X}:{(value >> 8) & 0xFF:02X}:{value & 0xFF:02X}"


def ensure_macs(kind: str, vmid: int, config: dict) -> dict:
    """Fill in MAC addresses for network devices that were declared without one."""
    out = dict(config)
    for key, value in config.items():
        match = NET_KEY.match(key)
        if not match:
            continue
        index = int(match.group(1))
        if kind == QEMU:
            props = parse_property_string(value, "model")
            model = props.get("model") or next((k for k in props if k in NIC_MODELS), "virtio")
            if props.get(model):
                continue  # "e1000=AA:BB:..": the MAC is already there
            mac = props.pop("macaddr", None) or mac_for(vmid, index)
            rest = {k: v for k, v in props.items() if k not in ("model", model)}
            out[key] = format_property_string({"model": f"{model}={mac}", **rest}, "model")
        else:
            props = parse_property_string(value)
            if not props.get("hwaddr"):
                props["hwaddr"] = mac_for(vmid, index)
            out[key] = format_property_string(props, None)
    return out


def guest_interfaces(kind: str, config: dict) -> list[dict]:
    """What the guest agent / container reports, derived from the configured NICs.

    Static addresses come from cloud-init ``ipconfigN`` (QEMU) or ``ip=`` (LXC);
    DHCP interfaces report no IPv4 address, like a guest without a lease yet.
    """
    nics = []
    for key in sorted(config, key=lambda k: (len(k), k)):
        match = NET_KEY.match(key)
        if not match:
            continue
        index = int(match.group(1))
        if kind == QEMU:
            props = parse_property_string(config[key], "model")
            mac = next((v for k, v in props.items() if k in NIC_MODELS), "")
            ipcfg = parse_property_string(config.get(f"ipconfig{index}", ""))
            ip = ipcfg.get("ip", "")
            name = f"ens{18 + index}"
        else:
            props = parse_property_string(config[key])
            mac = props.get("hwaddr", "")
            ip = props.get("ip", "")
            name = props.get("name", f"eth{index}")
        addresses = []
        if ip and ip not in ("dhcp", "manual") and "/" in ip:
            address, prefix = ip.split("/", 1)
            addresses.append(
                {"ip-address-type": "ipv4", "ip-address": address, "prefix": int(prefix)}
            )
        nics.append({"name": name, "hardware-address": mac.lower(), "ip-addresses": addresses})
    return nics
