"""Guest network prefixes (opt-in: the policy's `prefixes` switch, off unless set).

Each network a synced guest address lives in (the address with its own prefix length:
`10.0.0.5/24` lives in `10.0.0.0/24`) gets a prefix in the endpoint's VRF when NetBox has
none there that contains or equals it. Host routes (/32, /128), loopback and link-local
addresses name no network and get none.

A prefix the sync makes carries the `proxbox` tag and the `proxbox_prefix` custom field,
its source key `<cluster id>/<network>`: only a prefix with this cluster's key is ever
changed or removed. It goes (in a full run) when

* no address lives in it any more: none of this run's synced addresses, nor any other
  address on a VM interface in the VRF with that very network (a guest the run did not
  sync, excluded or unreadable, keeps it; `10.0.5.9/28` lies in `10.0.5.0/24` but lives
  in `10.0.5.0/28`), or
* another prefix now covers it: one the sync did not make for this cluster (an
  operator's, an SDN subnet's) equal to it or broader, or one of its own that is broader.
  The network has a prefix then, which is all this feature promises; keeping the sync's
  would leave a duplicate or a redundant child.

Anything covering counts, whoever owns it: an operator's prefix, an SDN subnet's
(`domain.sdn`), another cluster's, or the sync's own broader one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from proxbox_backend.domain import tags
from proxbox_backend.domain.plan import Plan, diff, reconcile

FAMILY = "prefixes"  # the policy's switch (`prefixes_mode`), off by default
KEY_FIELD = "proxbox_prefix"
OBJECT_TYPE = "ipam.prefix"
MANAGED = {tags.PROXBOX.slug}
SITE = "dcim.site"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def network_of(address: str) -> str | None:
    """The network an address lives in (`10.0.0.5/24` → `10.0.0.0/24`); None for a host
    route, a loopback or link-local address, or what is not an address."""
    try:
        interface = ipaddress.ip_interface(address)
    except ValueError:
        return None
    network = interface.network
    if network.prefixlen == network.max_prefixlen:
        return None
    if interface.ip.is_link_local or interface.ip.is_loopback:
        return None
    return str(network)


def networks(addresses: Iterable[str]) -> list[str]:
    """The networks the addresses live in, broadest first, each once."""
    found = {n for a in addresses if (n := network_of(a)) is not None}
    return sorted(found, key=_order)


def _order(network: str) -> tuple[int, int, Any]:
    parsed = ipaddress.ip_network(network)
    return (parsed.version, parsed.prefixlen, parsed.network_address)


def supernets(found: Iterable[str]) -> list[str]:
    """Every prefix that contains or equals one of the networks (down to /0): asking
    NetBox for these by exact prefix tells which networks already have one."""
    out: set[str] = set()
    for network in found:
        parsed = ipaddress.ip_network(network)
        out.update(str(parsed.supernet(new_prefix=length)) for length in range(parsed.prefixlen))
        out.add(str(parsed))
    return sorted(out, key=_order)


def key(cluster_id: int, network: str) -> str:
    return f"{cluster_id}/{network}"


def key_prefix(cluster_id: int) -> str:
    return f"{cluster_id}/"


def key_of(obj: dict) -> str | None:
    return (obj.get("custom_fields") or {}).get(KEY_FIELD)


def is_own(obj: dict, cluster_id: int) -> bool:
    return (key_of(obj) or "").startswith(key_prefix(cluster_id))


def _covered(network: Network, by: Iterable[Network]) -> bool:
    return any(network.version == other.version and network.subnet_of(other) for other in by)


def network(obj: dict) -> str:
    """A prefix as NetBox answers it, in the one spelling the planner compares."""
    return str(ipaddress.ip_network(obj["prefix"]))


def decide(
    cluster_id: int,
    found: list[str],
    present: list[dict],
    own: list[dict],
    living: set[str] | None,
) -> tuple[list[str], set[str] | None]:
    """(networks that have a prefix of the sync's, own networks whose prefix goes).

    `found`: the networks of this run's synced addresses; `present`: the VRF's prefixes
    containing or equal to one of them or to an own one; `own`: the cluster's own prefixes
    (marked with its key); `living`: the own networks some address still lives in (an
    address with that very network, on a VM interface in the VRF). None: the run did not
    sync every guest (targeted, incremental), so nothing goes and what the sync has stays.

    A network gets (or keeps) a prefix when nothing covers it but the sync's own prefix of
    that very network: no prefix of anyone else equal or broader, no broader own one that
    stays. Broadest first, so a broader network kept covers the narrower ones.
    """
    own_networks = {network(o) for o in own if is_own(o, cluster_id)}
    leaving = set() if living is None else {n for n in own_networks - set(found) - living}
    candidates = set(found) | (own_networks - leaving if living is not None else set())
    kept: list[Network] = []
    for candidate in sorted(candidates, key=_order):
        parsed = ipaddress.ip_network(candidate)
        others = [
            ipaddress.ip_network(network(p))
            for p in present
            if not (is_own(p, cluster_id) and network(p) in leaving | {candidate})
        ]
        if not _covered(parsed, others) and not _covered(parsed, kept):
            kept.append(parsed)
    desired = [str(n) for n in kept]
    return desired, None if living is None else own_networks - set(desired)


def payload(network: str, vrf_id: int | None, site_id: int | None) -> dict:
    """A prefix in the endpoint's VRF, scoped like the cluster (to the endpoint's site)."""
    return {
        "prefix": network,
        "vrf": vrf_id,
        "scope_type": SITE if site_id is not None else None,
        "scope_id": site_id,
        "status": "active",
        "description": "Network of synced Proxmox guest addresses, kept by the Proxbox sync.",
    }


def _compared(name: str, value: Any) -> Any:
    """A field as NetBox answers it, as the payload spells it: nested objects by id,
    choices by value, a prefix in its one spelling (NetBox compresses IPv6)."""
    if isinstance(value, dict):
        value = value.get("id", value.get("value"))
    if name == "prefix" and value:
        return str(ipaddress.ip_network(value))
    return value


def plan(
    cluster_id: int,
    desired: list[str],
    own: list[dict],
    vrf_id: int | None,
    site_id: int | None,
    gone: set[str] | None = None,
) -> Plan:
    """The `desired` networks' prefixes against the cluster's own (`own`, marked with its
    key); an own prefix not desired is deleted when its network is among `gone`
    (`decide`; None: none is, in a targeted or incremental run), else it stays as it is."""
    existing = {}
    for obj in own:
        if is_own(obj, cluster_id):
            existing.setdefault(network(obj), obj)

    def changes(fields: dict, found: dict) -> dict:
        now = {name: _compared(name, found.get(name)) for name in fields}
        return tags.with_sync_tags(diff(fields, now), found, MANAGED)

    return reconcile(
        Plan(OBJECT_TYPE, family=FAMILY),
        {n: payload(n, vrf_id, site_id) for n in desired},
        existing,
        label=lambda n: f"prefix {n}",
        payload=lambda n, fields: tags.with_sync_tags(
            {**fields, "custom_fields": {KEY_FIELD: key(cluster_id, n)}}, None, MANAGED
        ),
        changes=changes,
        gone=lambda n, _obj: gone is not None and n in gone,
    )
