"""Proxmox inventory as the planners see it, normalized to NetBox's units (MB, CIDR)."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxbox_backend.domain.capabilities import Capabilities

QEMU, LXC = "qemu", "lxc"
CLUSTER, STANDALONE = "cluster", "standalone"


@dataclass(frozen=True)
class ClusterIdentity:
    """Who the endpoint is, from /cluster/status: a cluster's name, or a standalone node's."""

    name: str
    mode: str  # cluster | standalone
    nodes: tuple[str, ...]
    quorate: bool
    version: str = ""  # the PVE release the endpoint reports (/version)

    @property
    def capabilities(self) -> Capabilities:
        """What this release answers (`domain.capabilities`): the one place majors differ."""
        return Capabilities(self.version)


@dataclass(frozen=True)
class ProxmoxNode:
    name: str
    online: bool
    ip: str | None = None


@dataclass(frozen=True)
class NodeFacts:
    """A node's hardware and software as /nodes/{node}/status reports them; None: not
    reported (that fact stays as it is on the device)."""

    cpu_model: str | None = None
    cpu_sockets: int | None = None
    cpu_cores: int | None = None  # physical cores, all sockets
    cpu_threads: int | None = None  # logical CPUs (PVE's `cpus`)
    memory_mb: int | None = None
    kernel: str | None = None  # the running kernel's release (6.8.12-8-pve)
    pve_version: str | None = None  # pve-manager/<version>/<repoid>


@dataclass(frozen=True)
class NodeInterface:
    """One entry of a node's /nodes/{node}/network, in NetBox's terms."""

    name: str
    type: str  # NetBox interface type: bridge, lag, virtual, other
    enabled: bool
    mtu: int | None = None
    description: str = ""
    parent: str | None = None  # a VLAN interface's raw device
    lag: str | None = None  # the bond this interface is a member of
    bridge: str | None = None  # the bridge this interface is a port of
    addresses: tuple[str, ...] = ()  # its CIDRs, IPv4 first, normalized (10.0.0.5/24)
    gateways: frozenset[int] = frozenset()  # the IP versions whose default gateway it holds


@dataclass(frozen=True)
class GuestNic:
    key: str  # net0
    name: str  # NetBox interface name: the container's own name (eth0) or the config key
    mac: str | None  # upper case, colon separated
    enabled: bool
    description: str = ""
    vlan: int | None = None  # `tag=`: the access VLAN the bridge port puts the NIC in
    trunks: tuple[int, ...] = ()  # `trunks=`: further VLANs passed through, tagged
    bridge: str | None = None  # `bridge=`: the node bridge the NIC plugs into (vmbr0)
    # The interface's name inside the guest (ens18): a container's `name=`, or what the
    # QEMU guest agent reports for the NIC's MAC; None: the guest names none.
    guest_name: str | None = None


@dataclass(frozen=True)
class GuestDisk:
    key: str  # scsi0, rootfs, mp0
    size_mb: int
    volume: str


@dataclass(frozen=True)
class GuestAddress:
    nic: str  # GuestNic.name the address belongs to
    address: str  # CIDR, normalized ("10.0.0.5/24")


@dataclass(frozen=True)
class Platform:
    """A NetBox platform the sync refers to by slug and creates when missing."""

    slug: str
    name: str


@dataclass(frozen=True)
class Guest:
    kind: str  # qemu | lxc
    vmid: int
    name: str
    node: str
    status: str  # Proxmox: running | stopped | paused
    vcpus: float | None
    memory_mb: int | None
    # Survives config edits but not re-creation, so a reused VMID is a new guest.
    creation_id: str | None = None
    nics: tuple[GuestNic, ...] = ()
    disks: tuple[GuestDisk, ...] = ()
    addresses: tuple[GuestAddress, ...] = ()
    template: bool = False
    # True when the running guest itself (QEMU agent, container runtime) reported its
    # addresses this run, so an address missing from `addresses` is really gone.  False
    # for a stopped guest or a silent agent: its earlier addresses are kept, not deleted.
    addresses_reported: bool = False
    tags: tuple[str, ...] = ()  # Proxmox's tags of the guest, as written there
    platform: Platform | None = None
    # True when the platform comes from the running guest's agent (get-osinfo); False
    # when it is only the config's `ostype` hint, which never replaces a platform set.
    platform_reported: bool = False
    description: str = ""  # the guest's Proxmox notes (config `description`)
    pool: str | None = None  # the resource pool /cluster/resources names, if any
    # The guest's own DNS name: a container's `hostname` (with its search domain), or the
    # host name the QEMU guest agent reports. None: unknown this run (a stopped VM, a
    # silent agent), so the DNS name its addresses carry stays as it is.
    dns_name: str | None = None
    # True when `GuestNic.guest_name` is known this run (a container's config; a QEMU
    # guest whose agent answered): a NIC the guest does not name then has no such name.
    guest_names_known: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind}/{self.vmid})"

    @property
    def disk_mb(self) -> int | None:
        return sum(d.size_mb for d in self.disks) or None


@dataclass
class ProxmoxInventory:
    identity: ClusterIdentity
    nodes: list[ProxmoxNode]
    guests: list[Guest]
    # Things Proxmox would not tell us (agent down, config unreadable): reported, not fatal.
    warnings: list[str] = field(default_factory=list)
    # Reads that failed after the client's retries (a guest's config, a node's network):
    # the run is degraded, not clean.
    read_failures: list[str] = field(default_factory=list)
    # (kind, vmid) of guests Proxmox listed but whose config could not be read.
    unreadable: set[tuple[str, int]] = field(default_factory=set)
    # node name → its network interfaces; a node missing here could not be read.
    node_networks: dict[str, list[NodeInterface]] = field(default_factory=dict)
    # node name → its hardware facts (/nodes/{node}/status); a node missing here could
    # not be read (offline, refused) and its device keeps the facts it has.
    node_facts: dict[str, NodeFacts] = field(default_factory=dict)
    # node name → the search domains of its DNS settings ("" when it has none), read for
    # the nodes holding containers: a container without `searchdomain` inherits them.
    node_search_domains: dict[str, str] = field(default_factory=dict)
    # Proxmox tag → background colour (six hex digits) from the cluster's tag style.
    tag_colors: dict[str, str] = field(default_factory=dict)
    # vmid → the `digest` Proxmox gave with the guest's config: a SHA-1 of its whole
    # config file, snapshot sections included, so it changes with any of its snapshots.
    config_digests: dict[int, str] = field(default_factory=dict)
