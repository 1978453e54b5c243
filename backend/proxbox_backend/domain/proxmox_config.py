"""Reading guest configs and status entries into the domain models (pure functions).

PVE stores NICs and disks as property strings (`virtio=BC:24:11:..,bridge=vmbr0`,
`local-lvm:vm-101-disk-0,size=32G`); sizes carry K/M/G/T suffixes or are bytes.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace

from proxbox_backend.domain.capabilities import Capabilities
from proxbox_backend.domain.models import (
    CLUSTER,
    LXC,
    QEMU,
    STANDALONE,
    ClusterIdentity,
    Guest,
    GuestAddress,
    GuestDisk,
    GuestNic,
    NodeFacts,
    NodeInterface,
    Platform,
    ProxmoxNode,
)

QEMU_NIC_MODELS = frozenset(
    {
        "virtio", "e1000", "e1000e", "rtl8139", "vmxnet3", "ne2k_pci", "pcnet", "i82551",
        "i82557b", "i82559er", "ne2k_isa", "e1000-82540em", "e1000-82544gc", "e1000-82545em",
    }
)  # fmt: skip
QEMU_DISK_KEY = re.compile(r"^(?:scsi|virtio|sata|ide)\d+$")
LXC_DISK_KEY = re.compile(r"^(?:rootfs|mp\d+)$")
NET_KEY = re.compile(r"^net(\d+)$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$", re.IGNORECASE)
_UNIT_MB = {"": 1 / 1024**2, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}


class ConfigError(ValueError):
    pass


def property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in str(value).split(","):
        if not item:
            continue
        key, sep, val = item.partition("=")
        if sep:
            out[key.strip()] = val.strip()
        elif default_key:
            out[default_key] = key.strip()
    return out


def size_mb(value: str) -> int:
    match = _SIZE.match(str(value).strip())
    if not match:
        raise ConfigError(f"unreadable size {value!r}")
    return round(float(match[1]) * _UNIT_MB[match[2].upper()])


def normalize_mac(mac: str | None) -> str | None:
    if not mac:
        return None
    cleaned = mac.strip().upper().replace("-", ":")
    return cleaned if re.fullmatch(r"(?:[0-9A-F]{2}:){5}[0-9A-F]{2}", cleaned) else None


def normalize_cidr(value: str) -> str | None:
    try:
        return str(ipaddress.ip_interface(value.strip()))
    except ValueError:
        return None


def is_reportable_address(cidr: str) -> bool:
    """Loopback and link-local addresses describe no reachable service."""
    ip = ipaddress.ip_interface(cidr).ip
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)


# -- cluster ------------------------------------------------------------------------------


def cluster_identity(status: list[dict]) -> ClusterIdentity:
    """Cluster name and quorum from the `cluster` entry; without one, the standalone node."""
    cluster = next((e for e in status if e.get("type") == "cluster"), None)
    nodes = tuple(sorted(e["name"] for e in status if e.get("type") == "node"))
    if cluster is not None and cluster.get("name"):
        return ClusterIdentity(cluster["name"], CLUSTER, nodes, bool(cluster.get("quorate")))
    if len(nodes) != 1:
        raise ConfigError(f"no cluster entry and {len(nodes)} nodes in /cluster/status")
    return ClusterIdentity(nodes[0], STANDALONE, nodes, True)


def nodes_from_status(status: list[dict]) -> list[ProxmoxNode]:
    return sorted(
        (
            ProxmoxNode(e["name"], bool(e.get("online", 1)), e.get("ip"))
            for e in status
            if e.get("type") == "node"
        ),
        key=lambda n: n.name,
    )


# -- node hardware --------------------------------------------------------------------------


def _count(value) -> int | None:
    """A positive count as PVE renders it (a number, or its digits as a string)."""
    text = str(value if value is not None else "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def kernel_release(status: dict, capabilities: Capabilities) -> str | None:
    """The running kernel's release: `current-kernel.release` where the release has it,
    else the second word of `kversion` ("Linux 5.15.158-2-pve #1 SMP ...")."""
    if capabilities.current_kernel:
        current = status.get("current-kernel")
        if isinstance(current, dict) and str(current.get("release") or "").strip():
            return str(current["release"]).strip()
    words = str(status.get("kversion") or "").split()
    return words[1] if len(words) > 1 else None


def node_facts(status: dict, capabilities: Capabilities) -> NodeFacts:
    """/nodes/{node}/status → the node's hardware facts (CPU, memory, kernel, release)."""
    status = status if isinstance(status, dict) else {}
    cpu = status.get("cpuinfo") if isinstance(status.get("cpuinfo"), dict) else {}
    memory = status.get("memory") if isinstance(status.get("memory"), dict) else {}
    total = _count(memory.get("total"))
    model = str(cpu.get("model") or "").strip()
    return NodeFacts(
        # read_cpuinfo's placeholder when /proc/cpuinfo names no model
        cpu_model=model if model and model != "unknown" else None,
        cpu_sockets=_count(cpu.get("sockets")),
        cpu_cores=_count(cpu.get("cores")),
        cpu_threads=_count(cpu.get("cpus")),
        memory_mb=total // 1024**2 if total else None,
        kernel=kernel_release(status, capabilities),
        pve_version=str(status.get("pveversion") or "").strip() or None,
    )


# -- node networking ----------------------------------------------------------------------

NODE_INTERFACE_TYPES = {
    "eth": "other",  # PVE does not say the speed or media of a physical NIC
    "bond": "lag",
    "OVSBond": "lag",
    "bridge": "bridge",
    "OVSBridge": "bridge",
    "vlan": "virtual",
    "OVSIntPort": "virtual",
}


def _names(value) -> list[str]:
    return [n for n in re.split(r"[\s,;]+", str(value or "")) if n]


def node_interfaces(entries: list[dict]) -> list[NodeInterface]:
    """/nodes/{node}/network → interfaces (aliases, SDN fabrics and unknown types are
    left out), with bond members, bridge ports and VLAN parents linked by name."""
    kept = {
        e["iface"]: e for e in entries if e.get("iface") and e.get("type") in NODE_INTERFACE_TYPES
    }
    lag_of, bridge_of = {}, {}
    for name, entry in kept.items():
        for member in _names(entry.get("slaves") or entry.get("ovs_bonds")):
            lag_of[member] = name
        for port in _names(entry.get("bridge_ports") or entry.get("ovs_ports")):
            bridge_of[port] = name
    out = []
    for name, entry in sorted(kept.items()):
        parent = entry.get("vlan-raw-device")
        if entry.get("type") == "vlan" and not parent and "." in name:
            parent = name.rsplit(".", 1)[0]
        mtu = str(entry.get("mtu") or "")
        out.append(
            NodeInterface(
                name=name,
                type=NODE_INTERFACE_TYPES[entry["type"]],
                enabled=bool(int(entry.get("active") or 0)),
                mtu=int(mtu) if mtu.isdigit() else None,
                description=str(entry.get("comments") or "").strip()[:200],
                parent=parent if parent in kept else None,
                lag=lag_of.get(name) if lag_of.get(name) in kept else None,
                bridge=bridge_of.get(name) if bridge_of.get(name) in kept else None,
                addresses=node_addresses(entry),
                gateways=frozenset(
                    v for v, key in ((4, "gateway"), (6, "gateway6")) if entry.get(key)
                ),
            )
        )
    return out


def node_addresses(entry: dict) -> tuple[str, ...]:
    """An interface's `cidr`/`cidr6`, else `address`+`netmask` (older majors list only
    those; the v4 mask may be dotted); an unparsable one is left out."""
    out = []
    for cidr, address, netmask in (
        ("cidr", "address", "netmask"),
        ("cidr6", "address6", "netmask6"),
    ):
        value = entry.get(cidr)
        if not value and entry.get(address) and entry.get(netmask):
            value = f"{entry[address]}/{entry[netmask]}"
        try:
            if value:
                out.append(str(ipaddress.ip_interface(str(value).strip())))
        except ValueError:
            continue
    return tuple(out)


# -- guests -------------------------------------------------------------------------------


def creation_id(kind: str, config: dict) -> str | None:
    """PVE ≥7.2 stamps `meta: ctime=…` at creation; SMBIOS UUIDs are per-VM otherwise."""
    if kind != QEMU:
        return None
    meta = property_string(config.get("meta", ""))
    if meta.get("ctime"):
        return f"ctime:{meta['ctime']}"
    smbios = property_string(config.get("smbios1", ""))
    if smbios.get("uuid"):
        return f"uuid:{smbios['uuid'].lower()}"
    return None


def nics(kind: str, config: dict) -> list[GuestNic]:
    out = []
    for key in sorted(config, key=lambda k: (len(k), k)):
        match = NET_KEY.match(key)
        if not match:
            continue
        if kind == QEMU:
            props = property_string(config[key], "model")
            model = next((k for k in props if k in QEMU_NIC_MODELS), props.get("model", ""))
            mac = props.get(model) if model in props else props.get("macaddr")
            name = key
            description = f"{model} on {props['bridge']}" if props.get("bridge") else model
        else:
            props = property_string(config[key])
            mac = props.get("hwaddr")
            name = props.get("name") or key
            description = f"on {props['bridge']}" if props.get("bridge") else ""
        out.append(
            GuestNic(
                key,
                name,
                normalize_mac(mac),
                props.get("link_down") != "1",
                description,
                vlan=vlan_id(props.get("tag")),
                trunks=vlan_ids(props.get("trunks")),
                bridge=props.get("bridge") or None,
                guest_name=(props.get("name") or None) if kind == LXC else None,
            )
        )
    return out


def vlan_id(value: str | None) -> int | None:
    """A VLAN id (1-4094), or None for anything else."""
    text = (value or "").strip()
    return int(text) if text.isdigit() and 1 <= int(text) <= 4094 else None


def vlan_ids(value: str | None) -> tuple[int, ...]:
    """`trunks=10;20;30-32` → (10, 20, 30, 31, 32): sorted, each once, ranges expanded."""
    out: set[int] = set()
    for item in re.split(r"[;\s]+", value or ""):
        low, sep, high = item.partition("-")
        first, last = vlan_id(low), vlan_id(high) if sep else vlan_id(low)
        if first is not None and last is not None and first <= last:
            out.update(range(first, last + 1))
    return tuple(sorted(out))


def disks(kind: str, config: dict) -> list[GuestDisk]:
    pattern = QEMU_DISK_KEY if kind == QEMU else LXC_DISK_KEY
    out = []
    for key in sorted(config):
        if not pattern.match(key):
            continue
        props = property_string(config[key], "file" if kind == QEMU else "volume")
        volume = props.get("file") or props.get("volume") or ""
        if props.get("media") == "cdrom" or volume == "none" or "size" not in props:
            continue
        out.append(GuestDisk(key, size_mb(props["size"]), volume))
    return out


def _static_addresses(props: dict[str, str]) -> list[str]:
    """The CIDRs of `ip=`/`ip6=` (`dhcp`, `auto` and `manual` name no address)."""
    out = []
    for field in ("ip", "ip6"):
        value = props.get(field, "")
        cidr = normalize_cidr(value) if "/" in value else None
        if cidr and is_reportable_address(cidr):
            out.append(cidr)
    return out


def config_addresses(kind: str, config: dict, guest_nics: list[GuestNic]) -> list[GuestAddress]:
    """Static addresses the config declares, known even while the guest is stopped.

    Containers carry `ip=`/`ip6=` on the `netN` line itself; QEMU guests carry them in
    the cloud-init `ipconfigN` line that belongs to `netN`.
    """
    out = []
    for nic in guest_nics:
        source = nic.key if kind == LXC else f"ipconfig{nic.key.removeprefix('net')}"
        for cidr in _static_addresses(property_string(config.get(source, ""))):
            out.append(GuestAddress(nic.name, cidr))
    return out


def agent_addresses(agent: list[dict], guest_nics: list[GuestNic]) -> list[GuestAddress]:
    """Addresses the QEMU guest agent reports, attached to the NIC with the same MAC."""
    by_mac = {n.mac: n for n in guest_nics if n.mac}
    out = []
    for iface in agent:
        nic = by_mac.get(normalize_mac(iface.get("hardware-address")))
        if nic is None:
            continue
        for address in iface.get("ip-addresses") or []:
            cidr = normalize_cidr(f"{address.get('ip-address')}/{address.get('prefix')}")
            if cidr and is_reportable_address(cidr):
                out.append(GuestAddress(nic.name, cidr))
    return out


# The longest guest interface name kept (Linux allows 15 characters, Windows far more).
GUEST_NAME_MAX = 100


def agent_nic_names(agent: list[dict], guest_nics: list[GuestNic]) -> tuple[GuestNic, ...]:
    """The NICs with the name the QEMU guest agent reports for their MAC (`ens18`); a NIC
    the guest does not list gets none. A VLAN, bond or bridge inside the guest may share
    the MAC: the interface the agent lists first (the kernel's oldest) names it."""
    names: dict[str, str] = {}
    for iface in agent:
        mac = normalize_mac(iface.get("hardware-address"))
        name = str(iface.get("name") or "").strip()
        if mac and name:
            names.setdefault(mac, name[:GUEST_NAME_MAX])
    return tuple(replace(nic, guest_name=names.get(nic.mac or "")) for nic in guest_nics)


# NetBox's rule for an IP address's DNS name (ipam.validators.DNSValidator), without the
# wildcard label a guest never has.
_DNS_NAME = re.compile(r"^[0-9a-z_-]+(\.[0-9a-z_-]+)*$")
DNS_NAME_MAX = 255


def fqdn(hostname: str | None, search_domains: str | None) -> str | None:
    """A guest's DNS name, as PVE writes it into a container's /etc/hosts (and cloud-init
    into a VM): a dotted host name is whole already; a short one gets the first search
    domain, if there is one. Lower case; None when it is no valid DNS name."""
    name = str(hostname or "").strip().rstrip(".").lower()
    if name and "." not in name:
        domain = next(iter(_names(search_domains)), "").strip(".").lower()
        if domain:
            name = f"{name}.{domain}"
    if not name or len(name) > DNS_NAME_MAX or not _DNS_NAME.match(name):
        return None
    return name


def container_dns_name(config: dict, node_search_domains: str | None) -> str | None:
    """A container's DNS name: its `hostname` with its `searchdomain`, which PVE takes
    from the node's DNS settings when the config has none (`node_search_domains`; None:
    the node's could not be read, so a short name's domain is unknown)."""
    hostname = str(config.get("hostname") or "").strip()
    search = config.get("searchdomain", node_search_domains)
    if not hostname or ("." not in hostname and search is None):
        return None
    return fqdn(hostname, search)


def agent_dns_name(host_name: str | None, config: dict) -> str | None:
    """A QEMU guest's DNS name: the host name its agent reports (`get-host-name`), with
    the config's cloud-init `searchdomain` when that name is short."""
    return fqdn(host_name, config.get("searchdomain")) if host_name else None


def lxc_runtime_addresses(entries: list[dict], guest_nics: list[GuestNic]) -> list[GuestAddress]:
    """`/nodes/{n}/lxc/{vmid}/interfaces`: `inet`/`inet6` per interface name."""
    names = {n.name for n in guest_nics}
    out = []
    for entry in entries:
        if entry.get("name") not in names:
            continue
        for family in ("inet", "inet6"):
            cidr = normalize_cidr(entry.get(family) or "") if entry.get(family) else None
            if cidr and is_reportable_address(cidr):
                out.append(GuestAddress(entry["name"], cidr))
    return out


_HEX_COLOR = re.compile(r"^[0-9a-fA-F]{6}$")


def tag_colors(options: dict) -> dict[str, str]:
    """`/cluster/options` → tag → colour, from `tag-style: color-map=prod:ff0000:ffffff;…`
    (the background colour; the optional text colour has no NetBox counterpart)."""
    style = property_string(str(options.get("tag-style") or ""))
    out = {}
    for item in (style.get("color-map") or "").split(";"):
        tag, _, rest = item.partition(":")
        background = rest.split(":", 1)[0]
        if tag and _HEX_COLOR.match(background):
            out[tag] = background.lower()
    return out


def guest_tags(value: str | None) -> tuple[str, ...]:
    """PVE's `tags` list: separated by `;` (also `,` or spaces), each tag once."""
    return tuple(dict.fromkeys(t for t in re.split(r"[;,\s]+", value or "") if t))


# PVE's `ostype` values (QEMU, then LXC) as platforms; `other`/`unmanaged` say nothing.
OSTYPE_PLATFORMS = {
    "l26": Platform("linux", "Linux"),
    "l24": Platform("linux-2-4", "Linux 2.4"),
    "win11": Platform("mswindows-11", "Microsoft Windows 11"),
    "win10": Platform("mswindows-10", "Microsoft Windows 10"),
    "win8": Platform("mswindows-8", "Microsoft Windows 8"),
    "win7": Platform("mswindows-7", "Microsoft Windows 7"),
    "wvista": Platform("mswindows-vista", "Microsoft Windows Vista"),
    "wxp": Platform("mswindows-xp", "Microsoft Windows XP"),
    "w2k8": Platform("mswindows-2008", "Microsoft Windows Server 2008"),
    "w2k3": Platform("mswindows-2003", "Microsoft Windows Server 2003"),
    "w2k": Platform("mswindows-2000", "Microsoft Windows 2000"),
    "solaris": Platform("solaris", "Solaris"),
    "debian": Platform("debian", "Debian GNU/Linux"),
    "ubuntu": Platform("ubuntu", "Ubuntu"),
    "centos": Platform("centos", "CentOS"),
    "fedora": Platform("fedora", "Fedora"),
    "opensuse": Platform("opensuse", "openSUSE"),
    "archlinux": Platform("arch", "Arch Linux"),
    "alpine": Platform("alpine", "Alpine Linux"),
    "gentoo": Platform("gentoo", "Gentoo"),
    "nixos": Platform("nixos", "NixOS"),
}
_PLATFORM_SLUG_UNSAFE = re.compile(r"[^a-z0-9]+")


def agent_platform(osinfo: dict) -> Platform | None:
    """`get-osinfo`'s OS id and version (`debian`, `12`) → platform `debian-12`."""
    os_id = str(osinfo.get("id") or "").strip()
    if not os_id:
        return None
    version = str(osinfo.get("version-id") or "").strip()
    slug = _PLATFORM_SLUG_UNSAFE.sub("-", f"{os_id} {version}".lower()).strip("-")
    name = " ".join(p for p in (str(osinfo.get("name") or os_id).strip(), version) if p)
    return Platform(slug[:100], name[:100])


def reported(
    draft: Guest,
    addresses: list[GuestAddress],
    platform: Platform | None,
    *,
    nics: tuple[GuestNic, ...] | None = None,
    dns_name: str | None = None,
) -> Guest:
    """The guest parsed from its config (`guest` without a report), with what the running
    guest reported: `guest(resource, config, addresses, platform)` without parsing the
    config again. `nics`: its NICs with the names the guest gives them (None: it named
    none); `dns_name`: the DNS name it reported (None: it said none)."""
    return replace(
        draft,
        addresses=tuple(dict.fromkeys((*draft.addresses, *addresses))),
        addresses_reported=True,
        platform=platform or draft.platform,
        platform_reported=platform is not None,
        nics=draft.nics if nics is None else nics,
        guest_names_known=draft.guest_names_known or nics is not None,
        dns_name=dns_name or draft.dns_name,
    )


def guest(
    resource: dict,
    config: dict,
    reported: list[GuestAddress] | None = None,
    reported_platform: Platform | None = None,
    node_search_domains: str | None = None,
) -> Guest:
    """One guest from its /cluster/resources entry, its config and, when the running
    guest answered, the addresses it `reported` (None: it did not, or was not asked)
    and the platform its agent named. `node_search_domains`: its node's DNS search
    domains, which a container without its own inherits (None: not read)."""
    kind = resource["type"]
    guest_nics = nics(kind, config)
    addresses = config_addresses(kind, config, guest_nics) + list(reported or ())
    memory = config.get("memory", resource.get("maxmem", 0) // 1024**2 or None)
    if kind == QEMU:
        # qemu-server's defaults: 1 core, 1 socket; `vcpus` (hotplug) caps them when set.
        # Never /cluster/resources' maxcpu, which is sockets × cores already and, right
        # after a create, not broadcast yet.
        vcpus = config.get("vcpus") or float(config.get("cores", 1)) * float(
            config.get("sockets", 1)
        )
    else:
        # A container without `cores` may use every core of its node (maxcpu).
        vcpus = config.get("cores") or resource.get("maxcpu")
    return Guest(
        kind=kind,
        vmid=int(resource["vmid"]),
        name=resource.get("name")
        or config.get("name")
        or config.get("hostname")
        or f"{kind}-{resource['vmid']}",
        node=resource["node"],
        status=resource.get("status", "unknown"),
        vcpus=float(vcpus) if vcpus else None,
        memory_mb=int(memory) if memory else None,
        creation_id=creation_id(kind, config),
        nics=tuple(guest_nics),
        disks=tuple(disks(kind, config)),
        addresses=tuple(dict.fromkeys(addresses)),
        template=bool(resource.get("template")),
        addresses_reported=reported is not None,
        tags=guest_tags(config.get("tags", resource.get("tags"))),
        platform=reported_platform or OSTYPE_PLATFORMS.get(str(config.get("ostype", ""))),
        platform_reported=reported_platform is not None,
        description=str(config.get("description") or "").strip(),
        pool=resource.get("pool") or None,
        dns_name=container_dns_name(config, node_search_domains) if kind == LXC else None,
        guest_names_known=kind == LXC,
    )
