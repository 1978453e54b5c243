"""Node network (pending changes + reload, as PVE), DNS, hosts and time."""

from __future__ import annotations

import datetime
import difflib
import hashlib
import ipaddress
import re
import zoneinfo

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import sdn_service
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.inventory_service import node_network
from proxmox_simulator.repositories import node_system as repo
from proxmox_simulator.tasks.service import enqueue

_CREATABLE = {"bridge", "bond", "vlan", "OVSBridge", "OVSBond", "OVSPort", "OVSIntPort", "fabric"}
_RUNTIME_KEYS = ("active", "exists", "families", "priority", "iface")
_NOT_OPTIONS = frozenset({"node", "iface", "delete", "digest"})
_BRIDGES = {"bridge", "OVSBridge"}


def _initial(node_row) -> dict:
    """The seeded interfaces file: iface → options without runtime-only fields."""
    return {
        entry["iface"]: {k: v for k, v in entry.items() if k not in _RUNTIME_KEYS}
        for entry in node_network(node_row)
    }


def _render_file(interfaces: dict) -> list[str]:
    """/etc/network/interfaces text, for the ``changes`` diff PVE reports."""
    lines: list[str] = []
    for name in sorted(interfaces):
        opts = interfaces[name]
        if opts.get("autostart"):
            lines.append(f"auto {name}")
        lines.append(f"iface {name} inet {opts.get('method', 'manual')}")
        for key in sorted(opts):
            if key in ("type", "method", "autostart", "families") or opts[key] in ("", None):
                continue
            lines.append(f"\t{key.replace('_', '-')} {opts[key]}")
        lines.append("")
    return lines


def _changes(applied: dict, pending: dict | None) -> str | None:
    if pending is None:
        return None
    diff = difflib.unified_diff(
        _render_file(applied),
        _render_file(pending),
        "/etc/network/interfaces",
        "/etc/network/interfaces.new",
        lineterm="",
    )
    return "\n".join(diff) + "\n"


def _entry(name: str, options: dict, applied: dict, index: int) -> dict:
    entry = {"iface": name, **options, "priority": index + 1}
    entry["families"] = (
        ["inet6"] if options.get("address6") and not options.get("address") else ["inet"]
    )
    entry.setdefault("method", "static" if options.get("address") else "manual")
    if name in applied and applied[name] == options:
        entry["active"] = 1
    if options.get("type") == "eth":
        entry["exists"] = 1
    return entry


async def _network_row(conn, node: str):
    node_row = await require_node(conn, node)
    return await repo.network(conn, node, _initial(node_row))


async def guest_bridges(conn, node: str) -> set[str]:
    """What a guest NIC on ``node`` can attach to: its applied Linux and OVS
    bridges (pending changes count only after a reload) and the applied SDN VNets."""
    row = await _network_row(conn, node)
    local = {name for name, options in row["applied"].items() if options.get("type") in _BRIDGES}
    return local | await sdn_service.running_vnets(conn)


async def list_network(rt, node: str, kind: str | None) -> tuple[list[dict], str | None]:
    async with rt.pool.acquire() as conn:
        row = await _network_row(conn, node)
    current = row["pending"] if row["pending"] is not None else row["applied"]
    entries = [
        _entry(name, current[name], row["applied"], index)
        for index, name in enumerate(sorted(current))
    ]
    if kind in ("any_bridge", "any_local_bridge"):
        entries = [e for e in entries if e.get("type") in _BRIDGES]
    elif kind and kind != "include_sdn":
        entries = [e for e in entries if e.get("type") == kind]
    return entries, _changes(row["applied"], row["pending"])


async def get_interface(rt, node: str, iface: str) -> dict:
    entries, _changes_ = await list_network(rt, node, None)
    for entry in entries:
        if entry["iface"] == iface:
            return {k: v for k, v in entry.items() if k != "iface"}
    raise PveError(f"interface '{iface}' does not exist")


def _normalise(options: dict) -> dict:
    """PVE splits ``cidr`` into address/netmask (and back) when it writes the file."""
    out = dict(options)
    for family, cidr_key, addr_key, mask_key in (
        (4, "cidr", "address", "netmask"),
        (6, "cidr6", "address6", "netmask6"),
    ):
        if out.get(cidr_key):
            try:
                network = ipaddress.ip_interface(out[cidr_key])
            except ValueError:
                raise ParameterError({cidr_key: f"invalid CIDR '{out[cidr_key]}'"}) from None
            if network.version != family:
                raise ParameterError({cidr_key: f"not an IPv{family} CIDR"})
            out[addr_key] = str(network.ip)
            out[mask_key] = str(network.network.prefixlen)
        elif out.get(addr_key):
            if not out.get(mask_key):
                raise ParameterError({mask_key: f"'{mask_key}' is required with '{addr_key}'"})
            out[cidr_key] = f"{out[addr_key]}/{out[mask_key]}"
    if out.get("netmask6") is not None:
        out["netmask6"] = str(out["netmask6"])
    out.setdefault("method", "static" if out.get("address") else "manual")
    return out


def _check_references(name: str, options: dict, interfaces: dict) -> None:
    for key in ("bridge_ports", "slaves", "ovs_ports", "ovs_bonds"):
        for port in sections.split_list(options.get(key)):
            if port not in interfaces:
                raise ParameterError({key: f"interface '{port}' does not exist"})
            if port == name:
                raise ParameterError({key: "an interface cannot be its own port"})
    raw = options.get("vlan-raw-device")
    if raw and raw not in interfaces:
        raise ParameterError({"vlan-raw-device": f"interface '{raw}' does not exist"})


async def _change_network(rt, node: str, change) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        node_row = await require_node(conn, node)
        row = await repo.lock_network(conn, node, _initial(node_row))
        pending = dict(row["pending"] if row["pending"] is not None else row["applied"])
        change(pending)
        sections.require_saved(
            await repo.save_network(conn, node, row["version"], row["applied"], pending)
        )


async def create_interface(rt, node: str, params: dict, declared: set[str]) -> None:
    name, kind = params["iface"], params["type"]
    if kind not in _CREATABLE:
        raise ParameterError({"type": f"cannot create interfaces of type '{kind}'"})
    options = _normalise({k: v for k, v in params.items() if k in declared - _NOT_OPTIONS})

    def change(pending: dict) -> None:
        if name in pending:
            raise PveError(f"interface '{name}' already exists")
        _check_references(name, options, pending)
        pending[name] = options

    await _change_network(rt, node, change)


async def update_interface(rt, node: str, iface: str, params: dict, declared: set[str]) -> None:
    settable = frozenset(declared) - _NOT_OPTIONS

    def change(pending: dict) -> None:
        if iface not in pending:
            raise PveError(f"interface '{iface}' does not exist")
        if pending[iface].get("type") != params["type"]:
            raise ParameterError(
                {"type": f"interface type mismatch ({pending[iface].get('type')})"}
            )
        updated = sections.updated_options(pending[iface], params, settable)
        if any(k in params for k in ("address", "netmask")) and "cidr" not in params:
            updated.pop("cidr", None)
        updated = _normalise(updated)
        _check_references(iface, updated, pending)
        pending[iface] = updated

    await _change_network(rt, node, change)


async def delete_interface(rt, node: str, iface: str) -> None:
    def change(pending: dict) -> None:
        if iface not in pending:
            raise PveError(f"interface '{iface}' does not exist")
        for other, opts in pending.items():
            for key in ("bridge_ports", "slaves", "ovs_ports", "ovs_bonds", "vlan-raw-device"):
                if iface in sections.split_list(opts.get(key)):
                    raise PveError(f"interface '{iface}' is used by '{other}' ({key})")
        del pending[iface]

    await _change_network(rt, node, change)


async def revert(rt, node: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        node_row = await require_node(conn, node)
        row = await repo.lock_network(conn, node, _initial(node_row))
        sections.require_saved(
            await repo.save_network(conn, node, row["version"], row["applied"], None)
        )


async def reload(rt, principal, node: str) -> str:
    """``PUT /nodes/{node}/network``: an ``srvreload`` task applies interfaces.new."""
    async with rt.pool.acquire() as conn, conn.transaction():
        node_row = await require_node(conn, node)
        # Serialises with pending edits; PVE reloads (ifreload -a) even with no
        # interfaces.new, so nothing pending is not a refusal.
        await repo.lock_network(conn, node, _initial(node_row))
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="srvreload",
            task_id="networking",
            principal=principal,
            payload={"node": node, "service": "networking", "action": "reload"},
            lock=f"network-{node}",
        )


async def apply_pending(conn, node: str) -> list[str]:
    row = await repo.lock_network(conn, node, {})
    if row["pending"] is None:
        return ["nothing to apply"]
    lines = (_changes(row["applied"], row["pending"]) or "").splitlines()
    sections.require_saved(
        await repo.save_network(conn, node, row["version"], row["pending"], None)
    )
    return lines


# -- DNS, hosts, time ---------------------------------------------------------------


def _default_dns(node_row) -> dict:
    gateway = ".".join([*node_row["ip"].split(".")[:3], "1"])
    return {"search": "pvesim.lan", "dns1": gateway}


async def get_dns(rt, node: str) -> dict:
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        row = await repo.setting(conn, node, "dns", _default_dns(node_row))
    return row["value"]


async def set_dns(rt, node: str, params: dict) -> None:
    for key in ("dns1", "dns2", "dns3"):
        if params.get(key):
            try:
                ipaddress.ip_address(params[key])
            except ValueError:
                raise ParameterError({key: f"value '{params[key]}' is not an IP address"}) from None
    value = {k: params[k] for k in ("search", "dns1", "dns2", "dns3") if params.get(k)}
    async with rt.pool.acquire() as conn, conn.transaction():
        node_row = await require_node(conn, node)
        row = await repo.lock_setting(conn, node, "dns", _default_dns(node_row))
        sections.require_saved(await repo.save_setting(conn, node, "dns", row["version"], value))


def _default_hosts(node_row) -> str:
    return (
        "127.0.0.1 localhost.localdomain localhost\n"
        f"{node_row['ip']} {node_row['node']}.pvesim.lan {node_row['node']}\n\n"
        "::1     ip6-localhost ip6-loopback\n"
    )


async def get_hosts(rt, node: str) -> dict:
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        row = await repo.setting(conn, node, "hosts", _default_hosts(node_row))
    return {"data": row["value"], "digest": sections.digest("hosts", node, row["version"])}


async def set_hosts(rt, node: str, data: str, digest: str | None) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        node_row = await require_node(conn, node)
        row = await repo.lock_setting(conn, node, "hosts", _default_hosts(node_row))
        sections.check_digest(digest, sections.digest("hosts", node, row["version"]))
        sections.require_saved(await repo.save_setting(conn, node, "hosts", row["version"], data))


async def get_time(rt, node: str) -> dict:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await repo.setting(conn, node, "timezone", "UTC")
    zone = zoneinfo.ZoneInfo(row["value"])
    offset = int(zone.utcoffset(_utc(now)).total_seconds())
    return {"timezone": row["value"], "time": now, "localtime": now + offset}


def _utc(epoch: int):
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).replace(tzinfo=None)


async def set_time(rt, node: str, timezone: str) -> None:
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ParameterError({"timezone": f"unknown time zone '{timezone}'"}) from None
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await repo.lock_setting(conn, node, "timezone", "UTC")
        sections.require_saved(
            await repo.save_setting(conn, node, "timezone", row["version"], timezone)
        )


# -- services -----------------------------------------------------------------------

SERVICE_DESCRIPTIONS = {
    "chrony": "chrony, an NTP client/server",
    "corosync": "Corosync Cluster Engine",
    "cron": "Regular background program processing daemon",
    "ksmtuned": "Kernel Samepage Merging (KSM) Tuning Daemon",
    "lxcfs": "FUSE filesystem for LXC",
    "postfix": "Postfix Mail Transport Agent (instance -)",
    "proxmox-firewall": "Proxmox nftables firewall",
    "pve-cluster": "The Proxmox VE cluster filesystem",
    "pve-firewall": "Proxmox VE firewall",
    "pve-ha-crm": "PVE Cluster HA Resource Manager Daemon",
    "pve-ha-lrm": "PVE Local HA Resource Manager Daemon",
    "pve-lxc-syscalld": "Proxmox VE LXC Syscall Daemon",
    "pvedaemon": "PVE API Daemon",
    "pvefw-logger": "Proxmox VE firewall logger",
    "pveproxy": "PVE API Proxy Server",
    "pvescheduler": "Proxmox VE scheduler",
    "pvestatd": "PVE Status Daemon",
    "qmeventd": "PVE Qemu Event Daemon",
    "spiceproxy": "PVE SPICE Proxy Server",
    "sshd": "OpenBSD Secure Shell server",
    "syslog": "System Logging Service",
    "systemd-journald": "Journal Service",
    "systemd-timesyncd": "Network Time Synchronization",
}
# Services a fresh node does not run: the firewall daemons until enabled,
# timesyncd (chrony replaces it).
_INACTIVE = {"proxmox-firewall", "systemd-timesyncd"}


def _service_entry(name: str, active: bool) -> dict:
    return {
        "service": name,
        "name": name,
        "desc": SERVICE_DESCRIPTIONS[name],
        "state": "running" if active else "dead",
        "active-state": "active" if active else "inactive",
        "unit-state": "enabled" if active else "disabled",
    }


async def _service_states(conn, node: str) -> dict[str, bool]:
    row = await repo.setting(conn, node, "services", {})
    return {name: row["value"].get(name, name not in _INACTIVE) for name in SERVICE_DESCRIPTIONS}


async def list_services(rt, node: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        states = await _service_states(conn, node)
    return [_service_entry(name, active) for name, active in sorted(states.items())]


async def service_state(rt, node: str, service: str) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        states = await _service_states(conn, node)
    return _service_entry(service, states[service])


async def service_action(rt, principal, node: str, service: str, action: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=f"srv{action}",
            task_id=service,
            principal=principal,
            payload={"node": node, "service": service, "action": action},
            lock=f"service-{node}-{service}",
        )


async def apply_service_action(conn, node: str, service: str, action: str) -> list[str]:
    if action == "reload" and service == "networking":
        return await apply_pending(conn, node)
    row = await repo.lock_setting(conn, node, "services", {})
    states = dict(row["value"])
    if action in ("start", "restart"):
        states[service] = True
    elif action == "stop":
        states[service] = False
    sections.require_saved(await repo.save_setting(conn, node, "services", row["version"], states))
    return [f"{action} service {service}"]


# -- subscription ---------------------------------------------------------------------

_KEY = re.compile(r"^pve([1248])([cbsp])-[0-9a-f]{10}$")
_LEVELS = {"c": "Community", "b": "Basic", "s": "Standard", "p": "Premium"}


def _server_id(node: str) -> str:
    return hashlib.md5(f"pvesim-{node}".encode()).hexdigest().upper()


async def subscription(rt, node: str) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await repo.setting(conn, node, "subscription", {})
    value = row["value"]
    if not value.get("key"):
        return {
            "status": "notfound",
            "message": "There is no subscription key",
            "serverid": _server_id(node),
            "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing",
        }
    return {**value, "serverid": _server_id(node)}


async def set_subscription(rt, node: str, key: str | None, *, refresh: bool = False) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await repo.lock_setting(conn, node, "subscription", {})
        now = int(rt.clock.now())
        if refresh:
            if not row["value"].get("key"):
                raise PveError("no subscription key configured")
            value = {**row["value"], "checktime": now}
        elif key is None:
            value = {}
        else:
            match = _KEY.match(key.strip())
            if not match:
                raise ParameterError({"key": "invalid subscription key format"})
            value = {
                "key": key.strip(),
                "status": "active",
                "level": match.group(2),
                "productname": f"Proxmox VE {_LEVELS[match.group(2)]} Subscription {match.group(1)} CPUs/year",
                "sockets": int(match.group(1)),
                "checktime": now,
                # The simulator never contacts the shop server.
                "message": "simulated subscription (not checked online)",
            }
        sections.require_saved(
            await repo.save_setting(conn, node, "subscription", row["version"], value)
        )


# -- node config (/etc/pve/nodes/<node>/config) ----------------------------------------


async def node_config(rt, node: str, prop: str | None) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await repo.setting(conn, node, "config", {})
    config = {**row["value"], "digest": sections.digest("node-config", node, row["version"])}
    if prop:
        return {prop: config[prop]} if prop in config else {}
    return config


async def set_node_config(rt, node: str, params: dict, declared: set[str]) -> None:
    settable = frozenset(n for n in declared if n not in ("node", "delete", "digest"))
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await repo.lock_setting(conn, node, "config", {})
        sections.check_digest(
            params.get("digest"), sections.digest("node-config", node, row["version"])
        )
        # acmedomain[n] is declared once for acmedomain0, acmedomain1, ...
        named = set(params) | set(sections.split_list(params.get("delete")))
        indexed = {k for k in named if re.fullmatch(r"acmedomain\d+", k)}
        value = sections.updated_options(row["value"], params, settable | indexed)
        sections.require_saved(await repo.save_setting(conn, node, "config", row["version"], value))
