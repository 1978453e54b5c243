"""What one node runs of the SDN (``/nodes/{node}/sdn``): derived from the
applied configuration, never from pending edits.

A zone is on a node unless its ``nodes`` list leaves the node out; its VNets
are the node's bridges, and the running guests' NICs on them are the ports.
EVPN zones carry their subnets in an IP VRF and their guests' MAC/IP pairs in
each VNet's MAC VRF.  A dry-run compares the node's files rendered from the
applied and from the pending configuration.
"""

from __future__ import annotations

import difflib
import ipaddress

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import sdn_fabrics, sdn_prefix_lists, sdn_route_maps, sdn_service
from proxmox_simulator.domain.errors import ParameterError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.guests import NET_KEY, parse_property_string
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory


def _on_node(zone: dict, node: str) -> bool:
    listed = sections.split_list(zone.get("nodes"))
    return not listed or node in listed


async def _applied(conn, node: str) -> dict:
    await require_node(conn, node)
    return await sdn_service._running(conn)


async def zones(rt, node: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
    return [
        {"zone": zone_id, "status": "available", "type": zone["type"]}
        for zone_id, zone in sorted(running.get("zones", {}).items())
        if _on_node(zone, node)
    ]


async def zone_content(rt, node: str, zone_id: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
    zone = running.get("zones", {}).get(zone_id)
    if zone is None or not _on_node(zone, node):
        return []
    return [
        {"vnet": vnet_id, "status": "available"}
        for vnet_id, vnet in sorted(running.get("vnets", {}).items())
        if vnet.get("zone") == zone_id
    ]


def _nics(guest) -> list[tuple[int, dict]]:
    config = guest["config"] or {}
    out = []
    for key, value in config.items():
        match = NET_KEY.match(key)
        if match:
            out.append((int(match.group(1)), parse_property_string(value, "model")))
    return sorted(out, key=lambda item: item[0])


def _port(guest, index: int, nic: dict, vlan_aware: bool) -> dict:
    prefix = "veth" if guest["type"] == "lxc" else "tap"
    port = {
        "name": f"{prefix}{guest['vmid']}i{index}",
        "vmid": guest["vmid"],
        "index": f"net{index}",
    }
    if vlan_aware:
        port["primary_vlan"] = int(nic.get("tag") or 1)
        trunks = [t for t in str(nic.get("trunks") or "").split(";") if t]
        port["vlans"] = trunks or ([] if nic.get("tag") else ["2-4094"])
    return port


async def zone_bridges(rt, node: str, zone_id: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
        guests = await guest_repo.list_all(conn, node)
    zone = running.get("zones", {}).get(zone_id)
    if zone is None:
        raise ParameterError({"zone": "zone does not exist"})
    bridges = {
        vnet_id: {
            "name": vnet_id,
            "vlan_filtering": "1" if vnet.get("vlanaware") else "0",
            "ports": [],
        }
        for vnet_id, vnet in sorted(running.get("vnets", {}).items())
        if vnet.get("zone") == zone_id
    }
    if not _on_node(zone, node):
        return []  # the node has no such bridges
    for guest in guests:
        if guest["status"] != "running":
            continue  # a stopped guest has no tap/veth device
        for index, nic in _nics(guest):
            bridge = bridges.get(nic.get("bridge"))
            if bridge is not None:
                bridge["ports"].append(_port(guest, index, nic, bridge["vlan_filtering"] == "1"))
    return list(bridges.values())


def _evpn_zone(running: dict, zone_id: str, node: str, *, missing: str, wrong: str, absent: str):
    zone = running.get("zones", {}).get(zone_id)
    if zone is None:
        raise ParameterError({"zone": missing})
    if zone["type"] != "evpn":
        raise ParameterError({"zone": wrong})
    if not _on_node(zone, node):
        raise ParameterError({"zone": absent})
    return zone


async def ip_vrf(rt, node: str, zone_id: str) -> list[dict]:
    """The zone's VRF: each applied subnet with a gateway is a connected route on its VNet."""
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
    _evpn_zone(
        running,
        zone_id,
        node,
        missing="zone does not exist",
        wrong="zone is not an EVPN zone",
        absent=f"zone does not exist on node {node}",
    )
    vnets = running.get("vnets", {})
    routes = []
    for subnet in running.get("subnets", {}).values():
        vnet = subnet.get("vnet")
        if vnets.get(vnet, {}).get("zone") == zone_id and subnet.get("gateway"):
            routes.append(
                {"ip": subnet["cidr"], "metric": 0, "protocol": "connected", "nexthops": [vnet]}
            )
    return sorted(routes, key=lambda r: ipaddress.ip_network(r["ip"]).compressed)


async def mac_vrf(rt, node: str, vnet_id: str) -> list[dict]:
    """MAC/IP pairs of the guests on the VNet, each reached through its host node."""
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
        vnet = running.get("vnets", {}).get(vnet_id)
        if vnet is None:
            raise ParameterError({"vnet": "vnet does not exist"})
        zone_id = vnet["zone"]
        _evpn_zone(
            running,
            zone_id,
            node,
            missing=f"zone {zone_id} does not exist",
            wrong=f"zone {zone_id} is not an EVPN zone.",
            absent=f"zone {zone_id} of vnet {vnet_id} does not exist on node {node}",
        )
        guests = await guest_repo.list_all(conn, None)
        hosts = {n["node"]: n["ip"] for n in await inventory.nodes(conn)}
        mappings = await sdn_service._mappings(conn)
    ips_by_mac = {
        options["mac"].lower(): ip
        for zone, _cidr, ip, options in mappings
        if zone == zone_id and options.get("mac")
    }
    entries = []
    for guest in guests:
        if guest["status"] != "running":
            continue
        for _index, nic in _nics(guest):
            mac = next((v for k, v in nic.items() if k not in ("bridge",) and _is_mac(v)), None)
            if nic.get("bridge") != vnet_id or mac is None:
                continue
            entry = {"mac": mac.lower(), "nexthop": hosts.get(guest["node"])}
            if mac.lower() in ips_by_mac:
                entry["ip"] = ips_by_mac[mac.lower()]
            entries.append(entry)
    return entries


def _is_mac(value) -> bool:
    parts = str(value).split(":")
    return len(parts) == 6 and all(len(p) == 2 for p in parts)


# -- dry-run: what an apply would change in a node's files ---------------------------


def _interfaces(config: dict, node: str) -> str:
    """The node's /etc/network/interfaces.d/sdn for one SDN configuration."""
    zones, subnets = config.get("zones", {}), config.get("subnets", {}).values()
    out: list[str] = []
    for vnet_id, vnet in sorted(config.get("vnets", {}).items()):
        zone = zones.get(vnet.get("zone"))
        if zone is None or not _on_node(zone, node):
            continue
        kind, tag = zone["type"], vnet.get("tag")
        ports = "none"
        if kind in ("vlan", "qinq"):
            ports = f"{zone.get('bridge')}.{tag}" if tag else zone.get("bridge", "none")
        elif kind in ("vxlan", "evpn"):
            ports = f"vxlan_{vnet_id}"
            out += [f"auto {ports}", f"iface {ports}", f"\tvxlan-id {tag}", ""]
        out += [f"auto {vnet_id}", f"iface {vnet_id}"]
        for subnet in sorted(subnets, key=lambda s: s["cidr"]):
            if subnet.get("vnet") == vnet_id and subnet.get("gateway"):
                prefix = subnet["cidr"].split("/")[1]
                out.append(f"\taddress {subnet['gateway']}/{prefix}")
        out += [f"\tbridge_ports {ports}", "\tbridge_stp off", "\tbridge_fd 0"]
        if vnet.get("vlanaware"):
            out.append("\tbridge-vlan-aware yes")
        if zone.get("mtu"):
            out.append(f"\tmtu {zone['mtu']}")
        out.append("")
    out += sdn_fabrics.interfaces_lines(config, node)
    return "\n".join(out)


def _frr(config: dict, node: str) -> str:
    """The SDN part of the node's frr.conf: each EVPN controller's BGP peers and its
    VRFs, the prefix lists and the route maps."""
    out: list[str] = []
    for controller_id, controller in sorted(config.get("controllers", {}).items()):
        if controller["type"] != "evpn":
            continue
        out += [f"router bgp {controller.get('asn')}", f" ! controller {controller_id}"]
        out += [
            f" neighbor {peer} remote-as {controller.get('asn')}"
            for peer in sections.split_list(controller.get("peers"))
        ]
        for zone_id, zone in sorted(config.get("zones", {}).items()):
            if zone.get("controller") == controller_id and _on_node(zone, node):
                out.append(f" vrf vrf_{zone_id}")
        out.append("!")
    out += sdn_prefix_lists.frr_lines(config)
    out += sdn_route_maps.frr_lines(config)
    out += sdn_fabrics.frr_lines(config, node)
    return "\n".join(out)


def _diff(name: str, before: str, after: str) -> str | None:
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), name, f"{name}.new", lineterm=""
        )
    )
    return "\n".join(lines) + "\n" if lines else None


async def dry_run(rt, node: str) -> dict:
    async with rt.pool.acquire() as conn:
        running = await _applied(conn, node)
        pending = {w: await sdn_service._current(conn, w) for w in sdn_service.FILES}
    result = {
        "interfaces-diff": _diff(
            "/etc/network/interfaces.d/sdn", _interfaces(running, node), _interfaces(pending, node)
        ),
        "frr-diff": _diff("/etc/frr/frr.conf", _frr(running, node), _frr(pending, node)),
    }
    return {k: v for k, v in result.items() if v is not None}
