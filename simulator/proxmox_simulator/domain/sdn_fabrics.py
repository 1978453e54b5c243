"""SDN fabrics (PVE 9.x ``/cluster/sdn/fabrics``): routed underlay networks between
the cluster's nodes, kept in ``sdn/fabrics.cfg`` and pending until an SDN apply.

One file holds both kinds of sections: a fabric (``<fabric>``, its type the
protocol) and each of its nodes (``<fabric>_<node>``).  As in PVE (whose Rust
side validates the whole file before it is written), every change is checked
against the complete configuration:

- OpenFabric needs an IPv4 or IPv6 prefix, and each node an address in it;
- OSPF needs an IPv4 prefix and an area (an IPv4 address or a 32-bit number),
  no two OSPF fabrics share an area, and OSPF has no IPv6;
- prefixes of different fabrics must not overlap, node addresses are unique in a
  fabric, and a node's interface belongs to one fabric only.

What a node runs of it (``/nodes/{node}/sdn/fabrics/{fabric}``) follows from the
*applied* configuration and the cluster: each member node that is online and has
interfaces in the fabric is an adjacent neighbour (the simulator wires the
members as a full mesh) and contributes a route to its router address.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import property_strings
from proxmox_simulator.domain import sdn_service as sdn
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo

WHAT = "fabrics"
FILE = sdn.FILES[WHAT]
PROTOCOLS = ("openfabric", "ospf")
_FABRIC_OPTIONS = {
    "openfabric": ("ip_prefix", "ip6_prefix", "hello_interval", "csnp_interval", "route_filter"),
    "ospf": ("ip_prefix", "ip6_prefix", "area", "route_filter", "redistribute"),
}
# What ``delete`` may name, per protocol (PVE 9.2's fabric_properties(1)).
_FABRIC_DELETABLE = {
    "openfabric": ("ip_prefix", "ip6_prefix", "hello_interval", "csnp_interval", "route_filter"),
    "ospf": ("area", "redistribute", "route_filter"),
}
_NODE_OPTIONS = ("ip", "ip6", "interfaces")
_NODE_DELETABLE = ("interfaces", "ip", "ip6")
_IFACE = {"type": "string", "format": "pve-iface"}
_CIDR4 = {"type": "string", "format": "CIDRv4", "optional": 1}
# Interface property strings, in the order PVE prints their keys.
_INTERFACE_FORMATS = {
    "openfabric": {
        "name": _IFACE,
        "hello_multiplier": {"type": "integer", "minimum": 2, "maximum": 100, "optional": 1},
        "ip": _CIDR4,
        "ip6": {"type": "string", "format": "CIDRv6", "optional": 1},
    },
    "ospf": {
        "name": _IFACE,
        "ip": _CIDR4,
        "network_type": {
            "type": "string",
            "enum": ["broadcast", "non-broadcast", "point-to-multipoint", "point-to-point"],
            "optional": 1,
        },
    },
}
_REDISTRIBUTE_FORMAT = {
    "source": {"type": "string", "enum": ["bgp", "connected", "kernel", "static"]},
    "route-map": {"type": "string", "optional": 1},
}
_NUMBER_OPTIONS = ("hello_interval", "csnp_interval")
_FAMILY = {"ip_prefix": 4, "ip6_prefix": 6}
_FABRIC_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-]{0,6}[a-zA-Z0-9]?$")


# -- the configuration as PVE's Rust side models it -----------------------------------


def _fabric_entry(fabric_id: str, section: dict) -> dict:
    return {"id": fabric_id, "protocol": section["type"], **_fields(section)}


def _node_entry(section_id: str, section: dict) -> dict:
    fabric_id, node_id = section_id.split("_", 1)
    entry = {"fabric_id": fabric_id, "node_id": node_id, "protocol": section["type"]}
    return {**entry, **_fields(section), "interfaces": list(section.get("interfaces") or [])}


def _fields(section: dict) -> dict:
    return {k: v for k, v in section.items() if k != "type"}


def build(sections_: dict[str, dict]) -> dict[str, dict]:
    """fabric id → {"fabric": entry, "nodes": {node id: entry}} from the file's sections."""
    config: dict[str, dict] = {}
    for section_id, section in sorted(sections_.items()):
        if "_" not in section_id:
            config[section_id] = {"fabric": _fabric_entry(section_id, section), "nodes": {}}
    for section_id, section in sorted(sections_.items()):
        if "_" in section_id:
            node = _node_entry(section_id, section)
            if node["fabric_id"] in config:
                config[node["fabric_id"]]["nodes"][node["node_id"]] = node
    return config


def _to_sections(config: dict[str, dict]) -> dict[str, tuple[str, dict]]:
    out: dict[str, tuple[str, dict]] = {}
    for fabric_id, entry in config.items():
        fabric = entry["fabric"]
        out[fabric_id] = (fabric["protocol"], _strip(fabric, ("id", "protocol")))
        for node_id, node in entry["nodes"].items():
            options = _strip(node, ("fabric_id", "node_id", "protocol"))
            out[f"{fabric_id}_{node_id}"] = (node["protocol"], options)
    return out


def _strip(entry: dict, keys) -> dict:
    return {k: v for k, v in entry.items() if k not in keys}


def digest(config: dict[str, dict]) -> str:
    """PVE hashes the serialised configuration with SHA-256."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


async def _config(conn, *, running: bool = False) -> dict[str, dict]:
    if running:
        return build((await sdn._running(conn)).get(WHAT, {}))
    return build(await sdn._current(conn, WHAT))


# -- validation (proxmox-ve-config's FabricConfig::validate) ---------------------------


def _network(value: str | None):
    return ipaddress.ip_network(value, strict=False) if value else None


def _area_key(area) -> str:
    """An OSPF area as dotted quad: ``0`` and ``0.0.0.0`` are the same area."""
    text = str(area)
    if re.fullmatch(r"\d+", text) and int(text) <= 0xFFFFFFFF:
        return str(ipaddress.IPv4Address(int(text)))
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise PveError(
            f"invalid OSPF area '{text}': neither an IPv4 address nor a 32-bit number"
        ) from None


def _check_entry(entry: dict) -> None:
    fabric = entry["fabric"]
    fabric_id, protocol = fabric["id"], fabric["protocol"]
    prefixes = {4: _network(fabric.get("ip_prefix")), 6: _network(fabric.get("ip6_prefix"))}
    seen: dict[int, set] = {4: set(), 6: set()}
    for node_id, node in entry["nodes"].items():
        for version, key in ((4, "ip"), (6, "ip6")):
            prefix, address = prefixes[version], node.get(key)
            if prefix is None and address:
                raise PveError(
                    f"fabric '{fabric_id}' does not have an IP prefix configured for the node IP {address}"
                )
            if prefix is not None and not address:
                raise PveError(
                    f"node '{fabric_id}_{node_id}' does not have an IP configured for this fabric prefix {prefix}"
                )
            if prefix is not None and ipaddress.ip_address(address) not in prefix:
                raise PveError(f"node IP {address} is outside the IP prefix {prefix} of the fabric")
        for version, key in ((4, "ip"), (6, "ip6")):
            if node.get(key):
                if node[key] in seen[version]:
                    raise PveError(f"fabric {fabric_id} contains nodes with duplicated IPs")
                seen[version].add(node[key])
        if protocol == "openfabric" and not (node.get("ip") or node.get("ip6")):
            raise PveError(f"node '{fabric_id}_{node_id}' does not have an IP configured")
        if protocol == "ospf":
            if not node.get("ip"):
                raise PveError(f"node '{fabric_id}_{node_id}' does not have an IP configured")
            if node.get("ip6"):
                raise PveError("IPv6 is currently not supported for protocol ospf")
    if protocol == "openfabric" and prefixes[4] is None and prefixes[6] is None:
        raise PveError(f"fabric '{fabric_id}' does not have an IP prefix configured")
    if protocol == "ospf":
        if prefixes[4] is None:
            raise PveError(f"fabric '{fabric_id}' does not have an IP prefix configured")
        if prefixes[6] is not None:
            raise PveError("IPv6 is currently not supported for protocol ospf")


def validate(config: dict[str, dict]) -> None:
    fabrics = [entry["fabric"] for entry in config.values()]
    for i, first in enumerate(fabrics):
        for second in fabrics[i + 1 :]:
            for key, label, family in (
                ("ip_prefix", "IP prefix", "IPv4"),
                ("ip6_prefix", "IPv6 prefix", "IPv6"),
            ):
                one, two = _network(first.get(key)), _network(second.get(key))
                if one is not None and two is not None and one.overlaps(two):
                    raise PveError(
                        f"{label} {two} in fabric '{second['id']}' overlaps with {family} prefix {one} in fabric '{first['id']}'"
                    )
    areas: set[str] = set()
    used: set[tuple[str, str]] = set()
    for entry in config.values():
        fabric = entry["fabric"]
        if fabric["protocol"] == "ospf":
            if fabric.get("area") in (None, ""):
                raise PveError("missing field `area`")
            area = _area_key(fabric["area"])
            if area in areas:
                raise PveError("duplicate OSPF area")
            areas.add(area)
        for node_id, node in entry["nodes"].items():
            for interface in node["interfaces"]:
                name = _interface(interface)["name"]
                if (node_id, name) in used:
                    raise PveError("interface is already in use by another fabric")
                used.add((node_id, name))
        _check_entry(entry)


def _interface(text: str) -> dict[str, str]:
    """A stored interface property string (always written as ``name=...,key=value``)."""
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


# -- parameters ---------------------------------------------------------------------


def _protocol(params: dict) -> str:
    protocol = params.get("protocol")
    if protocol not in PROTOCOLS:
        raise ParameterError(
            {"protocol": f"fabric protocol '{protocol}' is not supported by the simulator"}
        )
    return protocol


def check_fabric_id(fabric_id: str) -> None:
    if not _FABRIC_ID.match(fabric_id):
        raise ParameterError({"id": f"Fabric ID '{fabric_id}' contains illegal characters"})


def _number(value):
    number = float(value)
    return int(number) if number.is_integer() else number


def _fabric_options(protocol: str, params: dict) -> dict:
    """The protocol's options among ``params``, checked; another protocol's are refused."""
    allowed = _FABRIC_OPTIONS[protocol]
    foreign = {
        key
        for other, keys in _FABRIC_OPTIONS.items()
        if other != protocol
        for key in keys
        if key not in allowed and key in params
    }
    foreign |= {k for k in ("persistent_keepalive",) if k in params}
    if foreign:
        raise ParameterError(
            {k: f"property is not allowed for protocol '{protocol}'" for k in sorted(foreign)}
        )
    options: dict = {}
    for key in allowed:
        value = params.get(key)
        if value in (None, ""):
            continue
        if key in _NUMBER_OPTIONS:
            value = _number(value)
        elif key == "area":
            try:
                _area_key(value)
            except PveError as exc:
                raise ParameterError({"area": exc.message}) from None
            value = str(value)
        elif key == "redistribute":
            value = _property_list(key, value, _REDISTRIBUTE_FORMAT)
        elif key in _FAMILY and _network(value).version != _FAMILY[key]:
            raise ParameterError({key: f"value does not look like a valid IPv{_FAMILY[key]} CIDR"})
        options[key] = value
    return options


def _property_list(name: str, value, fmt: dict) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out = []
    for index, item in enumerate(items):
        try:
            parsed = property_strings.parse(fmt, str(item), name)
        except property_strings.FormatError as exc:
            raise ParameterError(
                {f"{name}[{index}]" if len(items) > 1 else name: str(exc)}
            ) from None
        out.append(",".join(f"{k}={parsed[k]}" for k in fmt if k in parsed))
    return out


def _node_options(protocol: str, params: dict) -> dict:
    options: dict = {}
    for key in ("ip", "ip6"):
        if params.get(key) not in (None, ""):
            options[key] = str(ipaddress.ip_address(params[key]))
    if "interfaces" in params and params["interfaces"] not in (None, ""):
        options["interfaces"] = _property_list(
            "interfaces", params["interfaces"], _INTERFACE_FORMATS[protocol]
        )
    return options


def _deletions(params: dict, deletable: tuple[str, ...]) -> list[str]:
    keys = sections.split_list(params.get("delete"))
    for key in keys:
        if key not in deletable:
            raise ParameterError(
                {
                    "delete": f"value '{key}' does not have a value in the enumeration '{', '.join(deletable)}'"
                }
            )
    return keys


# -- writes -------------------------------------------------------------------------


async def _mutate(rt, errmsg: str, params: dict, change) -> None:
    """PVE's lock_sdn_config: the SDN lock (and its token), then the change, checked
    against the whole configuration; any failure is reported as ``errmsg: why``."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await sdn._lock_domain(conn, params.get("lock-token"), errmsg)
        rows = {r["id"]: r for r in await repo.sections(conn, FILE)}
        config = build({i: {"type": r["type"], **r["options"]} for i, r in rows.items()})
        try:
            sections.check_digest(params.get("digest"), digest(config))
            await change(conn, config)
            validate(config)
        except ParameterError:
            raise
        except PveError as exc:
            raise PveError(f"{errmsg}: {exc.message}") from None
        wanted = _to_sections(config)
        for section_id in rows.keys() - wanted.keys():
            await repo.delete(conn, FILE, section_id)
        for section_id, (kind, options) in wanted.items():
            row = rows.get(section_id)
            if row is None:
                await repo.insert(conn, FILE, section_id, kind, options)
            elif row["options"] != options:
                sections.require_saved(
                    await repo.update(conn, FILE, section_id, row["version"], options)
                )


def _fabric(config: dict, fabric_id: str) -> dict:
    if fabric_id not in config:
        raise PveError(f"fabric '{fabric_id}' does not exist in configuration")
    return config[fabric_id]


async def add_fabric(rt, params: dict) -> None:
    fabric_id = params["id"]
    check_fabric_id(fabric_id)
    protocol = _protocol(params)
    options = _fabric_options(protocol, params)
    for key in ("ip_prefix", "ip6_prefix"):
        if key in options:  # PVE stores the prefix's network address
            options[key] = str(_network(options[key]))

    async def change(conn, config) -> None:
        if fabric_id in config:
            raise PveError(f"fabric '{fabric_id}' already exists in config")
        config[fabric_id] = {
            "fabric": {"id": fabric_id, "protocol": protocol, **options},
            "nodes": {},
        }

    await _mutate(rt, "adding fabric failed", params, change)


async def update_fabric(rt, fabric_id: str, params: dict) -> None:
    protocol = _protocol(params)
    options = _fabric_options(protocol, params)
    deleted = _deletions(params, _FABRIC_DELETABLE[protocol])

    async def change(conn, config) -> None:
        fabric = _fabric(config, fabric_id)["fabric"]
        if fabric["protocol"] != protocol:
            raise PveError("node has a different protocol than the referenced fabric")
        fabric.update(options)
        for key in deleted:
            fabric.pop(key, None)

    await _mutate(rt, "updating fabric failed", params, change)


async def delete_fabric(rt, fabric_id: str, params: dict, may_modify_node) -> None:
    async def change(conn, config) -> None:
        entry = config.get(fabric_id)
        for node_id in sorted(entry["nodes"]) if entry else ():
            if not may_modify_node(node_id):
                raise PveError(f"permission check failed: missing 'Sys.Modify' on node {node_id}")
        for controller_id, controller in (await sdn._current(conn, "controllers")).items():
            if controller["type"] == "evpn" and controller.get("fabric") == fabric_id:
                raise PveError(
                    f'this fabric is still used in the EVPN controller "{controller_id}"'
                )
        for zone_id, zone in (await sdn._current(conn, "zones")).items():
            if zone["type"] == "vxlan" and zone.get("fabric") == fabric_id:
                raise PveError(f'this fabric is still used in the VXLAN zone "{zone_id}"')
        _fabric(config, fabric_id)
        del config[fabric_id]  # its nodes go with it

    await _mutate(rt, "deleting fabric failed", params, change)


def _check_node_id(node_id: str) -> None:
    if not re.fullmatch(r"[a-zA-Z0-9]([a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?", node_id):
        raise ParameterError(
            {"node_id": "invalid format - value does not look like a valid node name"}
        )


async def add_node(rt, fabric_id: str, params: dict) -> None:
    node_id = params["node_id"]
    _check_node_id(node_id)
    protocol = _protocol(params)
    options = _node_options(protocol, params)

    async def change(conn, config) -> None:
        entry = _fabric(config, fabric_id)
        if entry["fabric"]["protocol"] != protocol:
            raise PveError("node has a different protocol than the referenced fabric")
        if node_id in entry["nodes"]:
            raise PveError(f"node '{node_id}' already exists in config for fabric {fabric_id}")
        entry["nodes"][node_id] = {
            "fabric_id": fabric_id,
            "node_id": node_id,
            "protocol": protocol,
            **options,
            "interfaces": options.get("interfaces", []),
        }

    await _mutate(rt, "adding node failed", params, change)


def _node(entry: dict, fabric_id: str, node_id: str) -> dict:
    if node_id not in entry["nodes"]:
        raise PveError(f"node '{node_id}' does not exist in fabric '{fabric_id}'")
    return entry["nodes"][node_id]


async def update_node(rt, fabric_id: str, node_id: str, params: dict) -> None:
    protocol = _protocol(params)
    options = _node_options(protocol, params)
    deleted = _deletions(params, _NODE_DELETABLE)

    async def change(conn, config) -> None:
        node = _node(_fabric(config, fabric_id), fabric_id, node_id)
        if node["protocol"] != protocol:
            raise PveError("node has a different protocol than the referenced fabric")
        node.update(options)
        for key in deleted:
            if key == "interfaces":
                node["interfaces"] = []
            else:
                node.pop(key, None)

    await _mutate(rt, "updating node failed", params, change)


async def delete_node(rt, fabric_id: str, node_id: str, params: dict) -> None:
    async def change(conn, config) -> None:
        entry = _fabric(config, fabric_id)
        _node(entry, fabric_id, node_id)
        del entry["nodes"][node_id]

    await _mutate(rt, "deleting node failed", params, change)


# -- reads: current, running (applied) or pending ---------------------------------------


def _pending(running: dict[str, dict], current: dict[str, dict]) -> dict[str, dict]:
    """PVE's pending_config: each object with what an apply would change of it."""
    out: dict[str, dict] = {}
    for key, applied in running.items():
        now = current.get(key)
        entry = dict(applied)
        if now is None:
            entry["state"] = "deleted"
        else:
            removed = {k: "deleted" for k in applied if k not in now}
            if removed or any(now.get(k) != v for k, v in applied.items()):
                entry["state"] = "changed"
                entry["pending"] = removed
        out[key] = entry
    for key, now in current.items():
        applied = running.get(key)
        entry = out.setdefault(key, {})
        for field, value in now.items():
            if applied is None:
                entry.setdefault("pending", {})[field] = value
                entry["state"] = "new"
            elif applied.get(field) != value:
                entry.setdefault("pending", {})[field] = value
                entry["state"] = "changed"
    return out


async def _views(rt, params: dict, pick) -> tuple[dict[str, dict], str | None]:
    """``pick(config)`` → {key: entry} for the mode ``params`` asks for, and the digest."""
    async with rt.pool.acquire() as conn:
        current = await _config(conn)
        running = (
            await _config(conn, running=True)
            if params.get("pending") or params.get("running")
            else None
        )
    if params.get("pending"):
        return _pending(pick(running), pick(current)), digest(current)
    if params.get("running"):
        return pick(running), None
    return pick(current), digest(current)


def _fabrics_of(config: dict) -> dict[str, dict]:
    return {fabric_id: entry["fabric"] for fabric_id, entry in config.items()}


def _nodes_of(config: dict, fabric_id: str | None = None) -> dict[str, dict]:
    if fabric_id is not None:
        _fabric(config, fabric_id)
    return {
        f"{entry['fabric']['id']}_{node_id}": node
        for entry in config.values()
        if fabric_id is None or entry["fabric"]["id"] == fabric_id
        for node_id, node in entry["nodes"].items()
    }


def _with_digest(entries, value: str | None) -> list[dict]:
    return [{**entry, "digest": value} if value else dict(entry) for entry in entries]


def _owner(entry: dict, key: str):
    return entry.get(key) or (entry.get("pending") or {}).get(key)


async def list_fabrics(rt, params: dict, can) -> list[dict]:
    fabrics, value = await _views(rt, params, _fabrics_of)
    visible = [
        fabrics[k]
        for k in sorted(fabrics)
        if can(f"/sdn/fabrics/{k}", ("SDN.Audit", "SDN.Allocate"))
    ]
    return _with_digest(visible, value)


def _visible_nodes(nodes: dict[str, dict], can) -> list[dict]:
    out = []
    for key in sorted(nodes):
        node = nodes[key]
        fabric_id, node_id = _owner(node, "fabric_id"), _owner(node, "node_id")
        if fabric_id is None:
            fabric_id, node_id = key.split("_", 1)
        if can(f"/sdn/fabrics/{fabric_id}", ("SDN.Audit", "SDN.Allocate")) and can(
            f"/nodes/{node_id}", ("Sys.Audit", "Sys.Modify")
        ):
            out.append(node)
    return out


async def list_nodes(rt, params: dict, can, fabric_id: str | None = None) -> list[dict]:
    nodes, value = await _views(rt, params, lambda c: _nodes_of(c, fabric_id))
    return _with_digest(_visible_nodes(nodes, can), value)


async def list_all(rt, params: dict, can) -> dict:
    return {
        "fabrics": await list_fabrics(rt, params, can),
        "nodes": await list_nodes(rt, params, can),
    }


async def get_fabric(rt, fabric_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        config = await _config(conn)
    return {**_fabric(config, fabric_id)["fabric"], "digest": digest(config)}


async def get_node(rt, fabric_id: str, node_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        config = await _config(conn)
    node = _node(_fabric(config, fabric_id), fabric_id, node_id)
    return {**node, "digest": digest(config)}


# -- what a node runs: FRR's view of the applied fabrics --------------------------------

_OSPF_TYPES = {
    "broadcast": "Broadcast",
    "non-broadcast": "NBMA",
    "point-to-multipoint": "Point-To-Multipoint",
    "point-to-point": "Point-To-Point",
}


async def _applied_fabric(conn, node: str, fabric_id: str) -> tuple[dict, dict | None]:
    await require_node(conn, node)
    running = await sdn._running(conn)
    if WHAT not in running:
        raise PveError("no fabrics configured")
    entry = _fabric(build(running[WHAT]), fabric_id)
    return entry, entry["nodes"].get(node)


async def _peers(rt, conn, entry: dict, local: dict | None) -> list[dict]:
    """Members adjacent to ``local``: online cluster nodes (a fault scenario can take
    one down) with interfaces in the fabric."""
    if local is None or not local["interfaces"]:
        return []
    down = rt.faults.offline_nodes()
    online = {n["node"] for n in await inventory.nodes(conn) if n["online"]} - down
    return [
        node
        for node_id, node in sorted(entry["nodes"].items())
        if node_id != local["node_id"] and node_id in online and node["interfaces"]
    ]


def _uptime(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60}m{rest % 60}s"


async def _since(conn, fabric_id: str) -> float | None:
    return (await sdn._running(conn)).get("fabric-since", {}).get(fabric_id)


def _link_network(local: dict, address: str):
    """The network of ``local``'s interface that ``address`` is on."""
    for text in local["interfaces"]:
        ip = _interface(text).get("ip")
        if ip and _in(address, ipaddress.ip_interface(ip).network):
            return ipaddress.ip_interface(ip).network
    return None


def _in(address: str | None, network) -> bool:
    return address is not None and network is not None and ipaddress.ip_address(address) in network


def _link_address(local: dict, peer: dict) -> str | None:
    """The peer's address on a numbered link shared with ``local``, if any."""
    mine = [_interface(i).get("ip") for i in local["interfaces"]]
    networks = [ipaddress.ip_interface(ip).network for ip in mine if ip]
    for interface in peer["interfaces"]:
        ip = _interface(interface).get("ip")
        if ip and any(ipaddress.ip_interface(ip).ip in network for network in networks):
            return str(ipaddress.ip_interface(ip).ip)
    return None


async def interfaces(rt, node: str, fabric_id: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        entry, local = await _applied_fabric(conn, node, fabric_id)
    if local is None:
        return []
    protocol = entry["fabric"]["protocol"]
    out = []
    for text in local["interfaces"]:
        interface = _interface(text)
        if protocol == "openfabric":
            out.append({"name": interface["name"], "state": "Up", "type": "Point-To-Point"})
        else:
            default = "broadcast" if interface.get("ip") else "point-to-point"
            kind = _OSPF_TYPES[interface.get("network_type") or default]
            out.append({"name": interface["name"], "state": "up", "type": kind})
    dummy = {"name": f"dummy_{fabric_id}", "type": "Loopback"}
    out.append({**dummy, "state": "Up" if protocol == "openfabric" else "up"})
    return sorted(out, key=lambda i: i["name"])


async def neighbors(rt, node: str, fabric_id: str, now: float) -> list[dict]:
    async with rt.pool.acquire() as conn:
        entry, local = await _applied_fabric(conn, node, fabric_id)
        peers = await _peers(rt, conn, entry, local)
        since = await _since(conn, fabric_id)
    uptime = _uptime(now - since) if since else "0h0m0s"
    if entry["fabric"]["protocol"] == "openfabric":
        return [{"neighbor": p["node_id"], "status": "Up", "uptime": uptime} for p in peers]
    out = []
    for peer in peers:
        link = _link_address(local, peer)
        role = "-"  # an unnumbered point-to-point link has no designated router
        if link is not None:
            network = _link_network(local, link)
            segment = [local, *(p for p in peers if _in(_link_address(local, p), network))]
            ranked = sorted(segment, key=lambda n: ipaddress.ip_address(n["ip"]), reverse=True)
            place = [n["node_id"] for n in ranked].index(peer["node_id"])
            role = "DR" if place == 0 else "Backup" if place == 1 else "DROther"
        out.append({"neighbor": link or peer["ip"], "status": f"Full/{role}", "uptime": uptime})
    return out


async def routes(rt, node: str, fabric_id: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        entry, local = await _applied_fabric(conn, node, fabric_id)
        peers = await _peers(rt, conn, entry, local)
    out = []
    for peer in peers:
        if peer.get("ip") and local.get("ip"):
            via = _link_address(local, peer) or peer["ip"]
            out.append({"route": f"{peer['ip']}/32", "via": [via]})
        if peer.get("ip6") and local.get("ip6"):
            out.append({"route": f"{peer['ip6']}/128", "via": [peer["ip6"]]})
    return sorted(out, key=lambda r: ipaddress.ip_network(r["route"]).compressed)


# -- what an apply writes on a node (dry-run) ------------------------------------------


def interfaces_lines(config: dict, node: str) -> list[str]:
    """Each fabric a node is in gets a dummy interface holding its router address."""
    out: list[str] = []
    for fabric_id, entry in sorted(build(config.get(WHAT, {})).items()):
        member = entry["nodes"].get(node)
        if member is None:
            continue
        out += [f"auto dummy_{fabric_id}", f"iface dummy_{fabric_id} inet static"]
        out += [f"\taddress {member['ip']}/32"] if member.get("ip") else []
        out += [f"\taddress {member['ip6']}/128"] if member.get("ip6") else []
        out += ["\tlink-type dummy", "\tip-forward 1", ""]
        for text in member["interfaces"]:
            interface = _interface(text)
            out += [f"auto {interface['name']}", f"iface {interface['name']} inet manual"]
            out += [f"\taddress {interface['ip']}"] if interface.get("ip") else []
            out += [f"\taddress {interface['ip6']}"] if interface.get("ip6") else []
            out += ["\tip-forward 1", ""]
    return out


def frr_lines(config: dict, node: str) -> list[str]:
    out: list[str] = []
    for fabric_id, entry in sorted(build(config.get(WHAT, {})).items()):
        member, fabric = entry["nodes"].get(node), entry["fabric"]
        if member is None:
            continue
        if fabric["protocol"] == "openfabric":
            out += [f"router openfabric {fabric_id}", f" net {_net(member)}", "exit", "!"]
            for name in [
                f"dummy_{fabric_id}",
                *(_interface(i)["name"] for i in member["interfaces"]),
            ]:
                out += [f"interface {name}", f" ip router openfabric {fabric_id}"]
                out += [" openfabric passive"] if name.startswith("dummy_") else []
                out += ["exit", "!"]
        else:
            out += ["router ospf", f" ospf router-id {member['ip']}", "exit", "!"]
            area = fabric.get("area")
            for name in [
                f"dummy_{fabric_id}",
                *(_interface(i)["name"] for i in member["interfaces"]),
            ]:
                out += [f"interface {name}", f" ip ospf area {area}"]
                out += [" ip ospf passive"] if name.startswith("dummy_") else []
                out += ["exit", "!"]
    return out


def _net(member: dict) -> str:
    """The IS-IS NET FRR derives from the router's IPv4 (or IPv6) address."""
    address = ipaddress.ip_address(member.get("ip") or member.get("ip6"))
    digits = "".join(f"{b:03d}" for b in address.packed[-4:])
    return f"49.0001.{digits[0:4]}.{digits[4:8]}.{digits[8:12]}.00"
