"""IPAM hygiene: the conflicts a run would create or inherit in NetBox's IPAM, each with a
severity, found by comparing what the run syncs with what NetBox already holds.

Four rules (pure functions here; `proxbox_backend.hygiene` reads NetBox for them):

* `duplicate_address` (error): a guest address whose host address another IP address in
  the endpoint's VRF (None: the global table) already has, as NetBox's own duplicate check
  compares them (`IPAddress.get_duplicates`: same VRF, same host, any mask), or that two
  guests of the run share. NetBox refuses the second one where the VRF enforces unique
  space; elsewhere it stores two objects for one address.
* `mac_collision`: a guest NIC's MAC held by a MAC address object of something else: a
  device's interface (error: a guest never has hardware's MAC), or another virtual
  machine's interface (warning: a clone or a moved guest another cluster still documents).
* `outside_prefix` (warning): a guest address no prefix of the VRF contains, and the
  prefix the opt-in prefixes rule (`domain.prefixes`) would create for it (none for a host
  route or a link-local address); `info` when this run's policy creates that prefix.
* `vlan_clash` (warning): a VLAN id of a guest NIC that the VLAN group the sync uses
  already has under another name than the sync gives it (`VLAN <vid>`): the guests'
  VLAN would be documented as that VLAN.

Nothing here writes: the checks are reads and these functions.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from proxbox_backend.domain import prefixes

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
DUPLICATE_ADDRESS = "duplicate_address"
MAC_COLLISION = "mac_collision"
OUTSIDE_PREFIX = "outside_prefix"
VLAN_CLASH = "vlan_clash"
RULES = (DUPLICATE_ADDRESS, MAC_COLLISION, OUTSIDE_PREFIX, VLAN_CLASH)
VM_INTERFACE = "virtualization.vminterface"
DEVICE_INTERFACE = "dcim.interface"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    guest: str  # the guest's label: web-01 (qemu/101)
    value: str  # the address, MAC or VLAN id in conflict
    detail: str  # what is wrong, for an operator
    where: str = ""  # the other object: "VM db-02 (cluster pve-b) interface eth0"
    prefix: str | None = None  # outside_prefix: the prefix the opt-in rule would create

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GuestFacts:
    """What the run syncs of one guest: its VM (a placeholder id when the run would
    create it), its addresses and MACs by NIC, its VLAN ids."""

    vm_id: int
    label: str
    addresses: tuple[tuple[str, str], ...] = ()  # (nic, "10.0.0.5/24")
    macs: tuple[tuple[str, str], ...] = ()  # (nic, "BC:24:11:00:00:01")
    vids: tuple[int, ...] = ()


def host(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip)


def checked_address(address: str) -> bool:
    """Link-local and loopback addresses are per link / per host: never a conflict."""
    try:
        ip = ipaddress.ip_interface(address).ip
    except ValueError:
        return False
    return not (ip.is_link_local or ip.is_loopback)


def hosts(guests: Iterable[GuestFacts]) -> list[str]:
    return sorted({host(a) for g in guests for _nic, a in g.addresses if checked_address(a)})


def macs(guests: Iterable[GuestFacts]) -> list[str]:
    return sorted({mac.upper() for g in guests for _nic, mac in g.macs if mac})


def vids(guests: Iterable[GuestFacts]) -> list[int]:
    return sorted({vid for g in guests for vid in g.vids})


def networks(guests: Iterable[GuestFacts]) -> list[str]:
    """The network of each checked address (a host route's is itself): asking NetBox for
    their supernets by exact prefix finds every prefix that contains an address."""
    return sorted(
        {
            str(ipaddress.ip_interface(a).network)
            for g in guests
            for _nic, a in g.addresses
            if checked_address(a)
        }
    )


def _nested(value) -> dict:
    return value if isinstance(value, dict) else {}


def where(obj: dict, clusters: dict[int, str] | None = None) -> str:
    """The interface (and its VM or device) an IP or MAC address object is assigned to."""
    assigned = _nested(obj.get("assigned_object"))
    kind = obj.get("assigned_object_type")
    interface = assigned.get("name") or f"#{obj.get('assigned_object_id')}"
    if kind == VM_INTERFACE:
        vm = _nested(assigned.get("virtual_machine"))
        cluster = (clusters or {}).get(vm.get("id"))
        in_cluster = f" (cluster {cluster})" if cluster else ""
        return f"VM {vm.get('name') or vm.get('id')}{in_cluster} interface {interface}"
    if kind == DEVICE_INTERFACE:
        device = _nested(assigned.get("device"))
        return f"device {device.get('name') or device.get('id')} interface {interface}"
    if kind:
        return f"{kind} {interface}"
    return f"#{obj.get('id')}, not assigned to an interface"


def vm_of(obj: dict) -> int | None:
    if obj.get("assigned_object_type") != VM_INTERFACE:
        return None
    return _nested(_nested(obj.get("assigned_object")).get("virtual_machine")).get("id")


def duplicate_addresses(guests: list[GuestFacts], present: list[dict], table: str) -> list[Finding]:
    """`present`: the IP addresses of the VRF (`table` names it) with a host address of
    the guests'. An address on the guest's own VM is the one the sync keeps."""
    by_host: dict[str, list[dict]] = {}
    for ip in present:
        by_host.setdefault(host(ip["address"]), []).append(ip)
    first: dict[str, GuestFacts] = {}
    found = []
    for guest in guests:
        for nic, address in guest.addresses:
            if not checked_address(address):
                continue
            ip = host(address)
            named = set()  # the VMs named already: a guest of this run already in NetBox
            for other in by_host.get(ip, ()):
                if vm_of(other) != guest.vm_id:
                    named.add(vm_of(other))
                    found.append(
                        Finding(
                            DUPLICATE_ADDRESS,
                            ERROR,
                            guest.label,
                            address,
                            f"{address} on {nic} duplicates {other['address']} in {table}",
                            where(other),
                        )
                    )
            earlier = first.setdefault(ip, guest)
            if earlier is not guest and earlier.vm_id not in named | {guest.vm_id}:
                found.append(
                    Finding(
                        DUPLICATE_ADDRESS,
                        ERROR,
                        guest.label,
                        address,
                        f"{address} on {nic} is also an address of {earlier.label} in {table}",
                        f"guest {earlier.label}",
                    )
                )
    return found


def mac_collisions(
    guests: list[GuestFacts], present: list[dict], clusters: dict[int, str]
) -> list[Finding]:
    """`present`: MAC address objects with a MAC of the guests'; `clusters`: VM id → the
    name of its cluster, of the VMs they are assigned to. A MAC on the guest's own VM, or
    on no interface, is no collision."""
    by_mac: dict[str, list[dict]] = {}
    for obj in present:
        by_mac.setdefault(str(obj["mac_address"]).upper(), []).append(obj)
    found = []
    for guest in guests:
        for nic, mac in guest.macs:
            for other in by_mac.get((mac or "").upper(), ()):
                kind = other.get("assigned_object_type")
                if kind == DEVICE_INTERFACE:
                    severity, holder = ERROR, "a device's interface"
                elif kind == VM_INTERFACE and vm_of(other) != guest.vm_id:
                    severity, holder = WARNING, "another virtual machine's interface"
                else:
                    continue
                found.append(
                    Finding(
                        MAC_COLLISION,
                        severity,
                        guest.label,
                        mac.upper(),
                        f"the MAC of {nic} is already on {holder}",
                        where(other, clusters),
                    )
                )
    return found


def outside_prefixes(
    guests: list[GuestFacts], present: list[dict], table: str, creates: bool
) -> list[Finding]:
    """`present`: the VRF's prefixes containing one of the addresses' networks; `creates`:
    this run's policy has the prefixes rule on (the prefix is part of its plan)."""
    covering = [ipaddress.ip_network(p["prefix"]) for p in present]
    found = []
    for guest in guests:
        for nic, address in guest.addresses:
            if not checked_address(address):
                continue
            ip = ipaddress.ip_interface(address).ip
            if any(ip.version == n.version and ip in n for n in covering):
                continue
            would = prefixes.network_of(address)
            if would is None:
                rule = "no prefix would be created for a host route"
            elif creates:
                rule = f"this run creates prefix {would} (prefixes rule on)"
            else:
                rule = f"the prefixes rule (prefixes_mode) would create {would}"
            found.append(
                Finding(
                    OUTSIDE_PREFIX,
                    INFO if creates and would else WARNING,
                    guest.label,
                    address,
                    f"{address} on {nic} lies in no prefix of {table}; {rule}",
                    prefix=would,
                )
            )
    return found


def vlan_clashes(guests: list[GuestFacts], present: list[dict], group: str) -> list[Finding]:
    """`present`: the VLANs of the sync's group (`group`, its slug) with a guest's vid."""
    by_vid = {vlan["vid"]: vlan for vlan in present}
    found = []
    for guest in guests:
        for vid in sorted(set(guest.vids)):
            vlan = by_vid.get(vid)
            if vlan is None or vlan.get("name") == f"VLAN {vid}":
                continue
            found.append(
                Finding(
                    VLAN_CLASH,
                    WARNING,
                    guest.label,
                    str(vid),
                    f"VLAN id {vid} of the guest is {vlan.get('name')!r} in group {group}, "
                    f"not the sync's 'VLAN {vid}'",
                    f"VLAN {vlan.get('name')} (#{vlan.get('id')}) in group {group}",
                )
            )
    return found


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then by rule, guest and value."""
    return sorted(
        findings,
        key=lambda f: (SEVERITIES.index(f.severity), RULES.index(f.rule), f.guest, f.value),
    )


def summary(findings: list[Finding]) -> dict[str, int]:
    return {severity: sum(f.severity == severity for f in findings) for severity in SEVERITIES}
