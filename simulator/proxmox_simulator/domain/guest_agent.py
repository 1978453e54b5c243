"""What the QEMU guest agent inside a simulated VM answers.

PVE refuses agent calls when the VM has no agent configured or is not
running; otherwise the answers derive from the guest's config (NICs and
addresses, OS type, name), so they stay consistent with everything else.
"""

from __future__ import annotations

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import load_guest

AGENT_VERSION = "8.1.3"
AGENT_COMMANDS = (
    "guest-ping",
    "guest-info",
    "guest-get-host-name",
    "guest-get-osinfo",
    "guest-network-get-interfaces",
)

_OS = {
    "win11": {
        "id": "mswindows",
        "name": "Microsoft Windows",
        "pretty-name": "Windows 11 Pro",
        "version": "Microsoft Windows 11",
        "version-id": "11",
        "kernel-release": "22631",
        "kernel-version": "10.0",
        "machine": "x86_64",
        "variant": "client",
        "variant-id": "client",
    },
    "win10": {
        "id": "mswindows",
        "name": "Microsoft Windows",
        "pretty-name": "Windows 10 Pro",
        "version": "Microsoft Windows 10",
        "version-id": "10",
        "kernel-release": "19045",
        "kernel-version": "10.0",
        "machine": "x86_64",
        "variant": "client",
        "variant-id": "client",
    },
    "l26": {
        "id": "debian",
        "name": "Debian GNU/Linux",
        "pretty-name": "Debian GNU/Linux 12 (bookworm)",
        "version": "12 (bookworm)",
        "version-id": "12",
        "kernel-release": "6.1.0-28-amd64",
        "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)",
        "machine": "x86_64",
    },
}


async def _agent_guest(rt, node: str, vmid: int):
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.QEMU, node, vmid)
    agent = rules.parse_property_string(row["config"].get("agent", "0"), "enabled")
    if agent.get("enabled") not in ("1", "yes", "on", "true"):
        raise PveError("No QEMU guest agent configured")
    if row["status"] != rules.RUNNING:
        raise PveError(f"VM {vmid} is not running")
    return row


def _zero_stats() -> dict:
    keys = (
        "rx-bytes",
        "rx-dropped",
        "rx-errs",
        "rx-packets",
        "tx-bytes",
        "tx-dropped",
        "tx-errs",
        "tx-packets",
    )
    return dict.fromkeys(keys, 0)


async def network_interfaces(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    loopback = {
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [
            {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
            {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
        ],
        "statistics": _zero_stats(),
    }
    return {
        "result": [loopback, *({**nic, "statistics": _zero_stats()} for nic in row["interfaces"])]
    }


async def os_info(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    return {"result": dict(_OS.get(row["config"].get("ostype", "l26"), _OS["l26"]))}


async def host_name(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    return {"result": {"host-name": row["name"] or f"vm{vmid}"}}


async def ping(rt, node: str, vmid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    return {"result": {}}


async def info(rt, node: str, vmid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    commands = [{"name": c, "enabled": True, "success-response": True} for c in AGENT_COMMANDS]
    return {"result": {"version": AGENT_VERSION, "supported_commands": commands}}
