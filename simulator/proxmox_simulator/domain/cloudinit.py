"""The cloud-init drive of a QEMU guest: its volume and the files PVE writes on it.

``ide2=<storage>:cloudinit`` (or any IDE/SCSI/SATA slot) asks PVE to allocate a
4 MiB volume named ``vm-<vmid>-cloudinit`` (``.qcow2`` on path-based storages);
the config then names that volume with ``media=cdrom``. The image is generated
from the config at start and by ``PUT …/cloudinit``; what it last held is kept
so ``GET …/cloudinit`` can show pending changes. The files follow PVE's
generators (qemu-server's Cloudinit.pm): NoCloud for Linux, ConfigDrive2 for
Windows or ``citype=configdrive2``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from urllib.parse import unquote

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import inventory

DISK_SIZE = 4 * 1024 * 1024
# The options PVE regenerates the drive from (its cloud-init pending properties).
KEYS = (
    "cicustom",
    "cipassword",
    "citype",
    "ciupgrade",
    "ciuser",
    "nameserver",
    "searchdomain",
    "sshkeys",
)
_DRIVE_KEY = re.compile(r"^(ide|scsi|sata)\d+$")
_WINDOWS = re.compile(r"^(wxp|w2k|w2k3|w2k8|wvista|win7|win8|win10|win11)$")


def requested_storage(key: str, value) -> str | None:
    """``<storage>:cloudinit`` on a drive slot asks for a new cloud-init volume."""
    if not _DRIVE_KEY.match(key):
        return None
    file = rules.parse_property_string(str(value), "file").get("file", "")
    storage, sep, volname = file.partition(":")
    return storage if sep and volname == "cloudinit" else None


def is_drive(vmid: int, value) -> bool:
    """Whether a drive value names this guest's cloud-init volume."""
    file = rules.parse_property_string(str(value), "file").get("file", "")
    return f"vm-{vmid}-cloudinit" in file.partition(":")[2]


def attached_at(vmid: int, config: dict, skip: str) -> str | None:
    for key, value in config.items():
        if key != skip and _DRIVE_KEY.match(key) and is_drive(vmid, value):
            return key
    return None


def values(config: dict) -> dict:
    """What the drive is generated from (PVE also tracks the name and the NICs)."""
    return {
        k: str(v)
        for k, v in config.items()
        if k in KEYS or k == "name" or k.startswith("ipconfig") or rules.NET_KEY.match(k)
    }


def has_drive(vmid: int, config: dict) -> bool:
    return attached_at(vmid, config, "") is not None


async def allocate(conn, clock, node: str, vmid: int, config: dict, key: str) -> str:
    """Create ``vm-<vmid>-cloudinit`` for ``config[key]``; answer the drive's new value."""
    props = rules.parse_property_string(str(config[key]), "file")
    storage_name = props.pop("file").partition(":")[0]
    other = attached_at(vmid, config, key)
    if other is not None:
        raise PveError(f"{key} - cloud-init drive is already attached at '{other}'")
    storage = await inventory.storage(conn, storage_name)
    if storage is None:
        raise PveError(f"storage '{storage_name}' does not exist")
    name = f"vm-{vmid}-cloudinit"
    if storage["path"] or storage["type"] in ("dir", "nfs", "cifs", "btrfs", "glusterfs"):
        fmt = props.pop("format", None) or "qcow2"
        volid = f"{storage_name}:{vmid}/{name}.{fmt}"
    else:
        fmt = props.pop("format", None) or "raw"
        volid = f"{storage_name}:{name}"
    if await inventory.volume(conn, volid) is not None:
        raise PveError(f"volume '{volid}' already exists")
    await inventory.insert_volume(
        conn,
        volid=volid,
        storage_name=storage_name,
        node_name=None if storage["shared"] else node,
        vmid=vmid,
        content="images",
        fmt=fmt,
        size=DISK_SIZE,
        ctime=int(clock.now()),
    )
    props.pop("size", None)
    props["media"] = "cdrom"
    return rules.format_property_string({"file": volid, **props}, "file")


async def allocate_requested(conn, clock, node: str, vmid: int, config: dict) -> list[str]:
    """Allocate every requested cloud-init drive of ``config`` in place; log lines."""
    lines = []
    for key in sorted(config):
        if requested_storage(key, config[key]) is not None:
            config[key] = await allocate(conn, clock, node, vmid, config, key)
            lines.append(f"{key}: successfully created disk '{config[key]}'")
    return lines


# -- the generated files ---------------------------------------------------------------


def _format(config: dict) -> str:
    if config.get("citype"):
        return str(config["citype"])
    if _WINDOWS.match(str(config.get("ostype", ""))):
        return "configdrive2"
    return "nocloud"


def _hostname(config: dict, vmid: int) -> tuple[str, str]:
    hostname = str(config.get("name") or f"VM{vmid}")
    if "." in hostname:
        return hostname.split(".", 1)[0], hostname
    if config.get("searchdomain"):
        return hostname, f"{hostname}.{config['searchdomain']}"
    return hostname, hostname


def _dns(config: dict, node_dns: dict) -> tuple[list[str], list[str]]:
    search = str(config.get("searchdomain") or node_dns.get("search") or "").split()
    if config.get("nameserver") is not None:
        servers = str(config["nameserver"]).split()
    else:
        servers = [node_dns[k] for k in ("dns1", "dns2", "dns3") if node_dns.get(k)]
    return search, servers


def _ssh_keys(config: dict) -> list[str]:
    return [k.strip() for k in unquote(str(config["sshkeys"])).split("\n") if k.strip()]


def user_data(config: dict, vmid: int) -> str:
    hostname, fqdn = _hostname(config, vmid)
    lines = ["#cloud-config", f"hostname: {hostname}", "manage_etc_hosts: true", f"fqdn: {fqdn}"]
    user = config.get("ciuser")
    if user is not None:
        lines.append(f"user: {user}")
        if user == "root":
            lines.append("disable_root: False")
    if config.get("cipassword") is not None:
        lines.append(f"password: {config['cipassword']}")
    if config.get("sshkeys") is not None:
        lines.append("ssh_authorized_keys:")
        lines += [f"  - {k}" for k in _ssh_keys(config)]
    lines += ["chpasswd:", "  expire: False"]
    if user != "root":
        lines += ["users:", "  - default"]
    if str(config.get("ciupgrade", "1")) not in ("0", "false"):
        lines.append("package_upgrade: true")
    return "\n".join(lines) + "\n"


def _nics(config: dict):
    for key in sorted(config):
        match = rules.NET_KEY.match(key)
        if match and config.get(f"ipconfig{match.group(1)}"):
            props = rules.parse_property_string(str(config[key]), "model")
            mac = next((v for k, v in props.items() if k in rules.NIC_MODELS), None)
            ipcfg = rules.parse_property_string(str(config[f"ipconfig{match.group(1)}"]))
            yield match.group(1), (mac or props.get("macaddr") or ""), ipcfg


def _split_ip4(ip: str) -> tuple[str, str]:
    if "/" not in ip:
        raise PveError(f"not a CIDR: {ip}")
    network = ipaddress.IPv4Interface(ip)
    return str(network.ip), str(network.netmask)


def _nocloud_network(config: dict, node_dns: dict) -> str:
    lines = ["version: 1", "config:"]
    for index, mac, ipcfg in _nics(config):
        if not mac:
            raise PveError(f"network interface 'net{index}' has no mac address")
        lines += [
            "    - type: physical",
            f"      name: eth{index}",
            f"      mac_address: '{mac.lower()}'",
            "      subnets:",
        ]
        ip = ipcfg.get("ip")
        if ip == "dhcp":
            lines.append("      - type: dhcp4")
        elif ip:
            addr, mask = _split_ip4(ip)
            lines += ["      - type: static", f"        address: '{addr}'"]
            lines.append(f"        netmask: '{mask}'")
            if ipcfg.get("gw"):
                lines.append(f"        gateway: '{ipcfg['gw']}'")
        ip6 = ipcfg.get("ip6")
        if ip6 == "dhcp":
            lines.append("      - type: dhcp6")
        elif ip6 == "auto":
            lines.append("      - type: ipv6_slaac")
        elif ip6:
            lines += ["      - type: static6", f"        address: '{ip6}'"]
            if ipcfg.get("gw6"):
                lines.append(f"        gateway: '{ipcfg['gw6']}'")
    search, servers = _dns(config, node_dns)
    lines.append("    - type: nameserver")
    if servers:
        lines += ["      address:"] + [f"      - '{s}'" for s in servers]
    if search:
        lines += ["      search:"] + [f"      - '{d}'" for d in search]
    return "\n".join(lines) + "\n"


def _configdrive2_network(config: dict, node_dns: dict) -> str:
    lines = ["auto lo", "iface lo inet loopback", ""]
    search, servers = _dns(config, node_dns)
    if servers:
        lines.append(f"        dns_nameservers {' '.join(servers)}")
    if search:
        lines.append(f"        dns_search {' '.join(search)}")
    for index, _mac, ipcfg in _nics(config):
        lines.append(f"auto eth{index}")
        ip = ipcfg.get("ip")
        if ip == "dhcp":
            lines.append(f"iface eth{index} inet dhcp")
        elif ip:
            addr, mask = _split_ip4(ip)
            lines += [
                f"iface eth{index} inet static",
                f"        address {addr}",
                f"        netmask {mask}",
            ]
            if ipcfg.get("gw"):
                lines.append(f"        gateway {ipcfg['gw']}")
        ip6 = ipcfg.get("ip6")
        if ip6 in ("auto", "dhcp"):
            lines.append(f"iface eth{index} inet6 {ip6}")
        elif ip6:
            addr, _, mask = ip6.partition("/")
            lines += [
                f"iface eth{index} inet6 static",
                f"        address {addr}",
                f"        netmask {mask}",
            ]
            if ipcfg.get("gw6"):
                lines.append(f"        gateway {ipcfg['gw6']}")
    return "\n".join(lines) + "\n"


def network_data(config: dict, node_dns: dict) -> str:
    if _format(config) == "nocloud":
        return _nocloud_network(config, node_dns)
    return _configdrive2_network(config, node_dns)


def meta_data(config: dict, vmid: int, node_dns: dict) -> str:
    """The instance ID changes whenever the user or network data do."""
    seed = (user_data(config, vmid) + network_data(config, node_dns)).encode()
    digest = hashlib.sha1(seed).hexdigest()
    if _format(config) == "nocloud":
        return f"instance-id: {digest}\n"
    return (
        "{\n"
        f'     "uuid": "{digest}",\n'
        '     "network_config": { "content_path": "/content/0000" }\n'
        "}\n"
    )


def dump(config: dict, vmid: int, kind: str, node_dns: dict) -> str:
    if kind == "user":
        return user_data(config, vmid)
    if kind == "network":
        return network_data(config, node_dns)
    return meta_data(config, vmid, node_dns)
