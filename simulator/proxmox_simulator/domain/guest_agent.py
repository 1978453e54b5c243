"""What the QEMU guest agent inside a simulated VM answers.

PVE refuses agent calls when the VM has no agent configured or is not
running; otherwise the answers derive from the guest's config (NICs and
addresses, OS type, name), so they stay consistent with everything else.
"""

from __future__ import annotations

import base64

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_placement import size_gib
from proxmox_simulator.domain.guest_service import load_guest
from proxmox_simulator.repositories import guest_agent as agent_repo
from proxmox_simulator.repositories import guests as guest_repo

AGENT_VERSION = "8.1.3"
AGENT_COMMANDS = (
    "guest-ping",
    "guest-info",
    "guest-get-host-name",
    "guest-get-osinfo",
    "guest-network-get-interfaces",
    "guest-exec",
    "guest-exec-status",
    "guest-file-open",
    "guest-file-read",
    "guest-file-write",
    "guest-fsfreeze-freeze",
    "guest-fsfreeze-status",
    "guest-fsfreeze-thaw",
    "guest-fstrim",
    "guest-get-fsinfo",
    "guest-get-users",
    "guest-get-time",
    "guest-get-timezone",
    "guest-get-vcpus",
    "guest-get-memory-blocks",
    "guest-get-memory-block-info",
    "guest-set-user-password",
    "guest-shutdown",
    "guest-suspend-disk",
    "guest-suspend-hybrid",
    "guest-suspend-ram",
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
    """PVE's checks, in its order: an `agent` option at all, a running QEMU process, then
    an agent answering its ping (none without the agent's device, or in a paused VM)."""
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.QEMU, node, vmid)
    if "agent" not in row["config"]:
        raise PveError("No QEMU guest agent configured")
    if row["status"] == rules.STOPPED:
        raise PveError(f"VM {vmid} is not running")
    agent = rules.parse_property_string(row["config"]["agent"], "enabled")
    if agent.get("enabled") not in ("1", "yes", "on", "true") or row["status"] != rules.RUNNING:
        raise PveError("QEMU guest agent is not running")
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


# -- calls with state (exec, files, freeze) and the guest's resources --------------------

FILE_READ_LIMIT = 16 * 1024 * 1024


def _is_windows(row) -> bool:
    return str(row["config"].get("ostype", "l26")).startswith("w")


def _exec_result(row, command: list[str], input_data: str | None) -> dict:
    """What a handful of commands print in the simulated guest; others are missing."""
    if not command:
        raise ParameterError({"command": "no command given"})
    program, args = command[0].rsplit("/", 1)[-1], command[1:]
    name = row["name"] or f"vm{row['vmid']}"
    os_info = _OS.get(row["config"].get("ostype", "l26"), _OS["l26"])
    outputs = {
        "hostname": f"{name}\n",
        "true": "",
        "echo": " ".join(args) + "\n",
        "uname": f"{os_info['kernel-release']}\n" if args == ["-r"] else "Linux\n",
        "cat": input_data or "",
    }
    if _is_windows(row) or program not in outputs:
        return {"exited": 1, "exitcode": 127, "err-data": f"{program}: command not found\n"}
    if program == "cat" and args:
        return {"exited": 1, "exitcode": 1, "err-data": f"cat: {args[0]}: use file-read\n"}
    result = {"exited": 1, "exitcode": 0}
    if outputs[program]:
        result["out-data"] = outputs[program]
    return result


async def execute(rt, node: str, vmid: int, command, input_data: str | None) -> dict:
    row = await _agent_guest(rt, node, vmid)
    argv = command if isinstance(command, list) else str(command).split()
    result = _exec_result(row, [str(a) for a in argv], input_data)
    async with rt.pool.acquire() as conn, conn.transaction():
        pid = await agent_repo.next_pid(conn, vmid)
        await agent_repo.insert_exec(conn, vmid, pid, argv, result)
    return {"pid": pid}


async def exec_status(rt, node: str, vmid: int, pid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    async with rt.pool.acquire() as conn:
        row = await agent_repo.exec_result(conn, vmid, pid)
    if row is None:
        raise PveError(f"Agent error: Invalid parameter 'pid': no such process {pid}")
    return row["result"]


async def file_write(rt, node: str, vmid: int, path: str, content: str, encode: bool) -> None:
    await _agent_guest(rt, node, vmid)
    data = content.encode() if encode in (None, 1, True) else base64.b64decode(content)
    async with rt.pool.acquire() as conn, conn.transaction():
        state = await agent_repo.state(conn, vmid, for_update=True)
        if state["frozen"]:
            raise PveError(
                "Agent error: Command guest-file-open has been disabled: the file system is frozen"
            )
        await agent_repo.write_file(conn, vmid, path, data)


async def file_read(rt, node: str, vmid: int, params: dict) -> dict:
    row = await _agent_guest(rt, node, vmid)
    path = params["file"]
    async with rt.pool.acquire() as conn:
        data = await agent_repo.read_file(conn, vmid, path)
    if data is None and path == "/etc/hostname" and not _is_windows(row):
        data = f"{row['name'] or f'vm{vmid}'}\n".encode()
    if data is None:
        raise PveError(f"Agent error: Failed to open file '{path}': No such file or directory")
    offset = int(params.get("offset") or 0)
    count = int(params.get("count") or FILE_READ_LIMIT)
    chunk = data[offset : offset + min(count, FILE_READ_LIMIT)]
    decode = params.get("decode")
    content = (
        chunk.decode("utf-8", "replace")
        if decode in (None, 1, True)
        else base64.b64encode(chunk).decode()
    )
    result = {"content": content}
    if offset + len(chunk) < len(data):
        result["truncated"] = 1
    return result


def _filesystems(row) -> list[dict]:
    windows = _is_windows(row)
    out = []
    for index, (key, value) in enumerate(
        sorted((k, v) for k, v in row["config"].items() if rules.is_disk_key(rules.QEMU, k))
    ):
        if "media=cdrom" in str(value) or "cloudinit" in str(value):
            continue
        size_text = rules.parse_property_string(str(value), "file").get("size", "0G")
        total = int(size_gib(size_text) * 1024**3)
        device = f"sd{chr(ord('a') + index)}"
        out.append(
            {
                "name": f"{device}1" if not windows else f"Volume{index}",
                "mountpoint": ("/" if index == 0 else f"/mnt/{device}")
                if not windows
                else f"{chr(67 + index)}:\\",
                "type": "ntfs" if windows else "ext4",
                "total-bytes": total,
                "used-bytes": total // 5,
                "disk": [
                    {
                        "bus-type": key.rstrip("0123456789"),
                        "bus": 0,
                        "target": 0,
                        "unit": index,
                        "dev": f"/dev/{device}",
                    }
                ],
            }
        )
    return out


async def fsinfo(rt, node: str, vmid: int) -> dict:
    return {"result": _filesystems(await _agent_guest(rt, node, vmid))}


async def fsfreeze(rt, node: str, vmid: int, action: str) -> dict:
    row = await _agent_guest(rt, node, vmid)
    count = len(_filesystems(row))
    async with rt.pool.acquire() as conn, conn.transaction():
        state = await agent_repo.state(conn, vmid, for_update=True)
        if action == "status":
            return {"result": "frozen" if state["frozen"] else "thawed"}
        if action == "freeze":
            if state["frozen"]:
                raise PveError(
                    "Agent error: The command guest-fsfreeze-freeze has been disabled for this instance"
                )
            await agent_repo.set_frozen(conn, vmid, True)
            return {"result": count}
        await agent_repo.set_frozen(conn, vmid, False)
        return {"result": count if state["frozen"] else 0}


async def fstrim(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    paths = [
        {"path": fs["mountpoint"], "trimmed": fs["total-bytes"] - fs["used-bytes"], "minimum": 0}
        for fs in _filesystems(row)
    ]
    return {"result": {"paths": paths}}


async def users(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    user = "Administrator" if _is_windows(row) else "root"
    return {"result": [{"user": user, "login-time": float(row["started_at"] or 0)}]}


async def guest_time(rt, node: str, vmid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    return {"result": int(rt.clock.now() * 1_000_000_000)}


async def timezone(rt, node: str, vmid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    return {"result": {"zone": "UTC", "offset": 0}}


async def vcpus(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    return {
        "result": [
            {"logical-id": i, "online": True, "can-offline": i > 0} for i in range(row["cpus"])
        ]
    }


_MEMORY_BLOCK = 128 * 1024**2


async def memory_block_info(rt, node: str, vmid: int) -> dict:
    await _agent_guest(rt, node, vmid)
    return {"result": {"size": _MEMORY_BLOCK}}


async def memory_blocks(rt, node: str, vmid: int) -> dict:
    row = await _agent_guest(rt, node, vmid)
    count = max(1, row["maxmem"] // _MEMORY_BLOCK)
    return {
        "result": [{"phys-index": i, "online": True, "can-offline": i > 0} for i in range(count)]
    }


async def set_user_password(rt, node: str, vmid: int, username: str) -> dict:
    row = await _agent_guest(rt, node, vmid)
    known = (
        {"Administrator"} if _is_windows(row) else {"root", row["config"].get("ciuser") or "root"}
    )
    if username not in known:
        raise PveError(f"Agent error: user '{username}' does not exist")
    return {"result": {}}


# Agent-driven power changes: the guest OS acts, no PVE task is involved.
_AGENT_POWER = {
    "shutdown": rules.STOPPED,
    "suspend-disk": rules.STOPPED,
    "suspend-ram": rules.PAUSED,
    "suspend-hybrid": rules.PAUSED,
}


async def power(rt, node: str, vmid: int, command: str) -> dict:
    await _agent_guest(rt, node, vmid)
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, rules.QEMU, node, vmid, for_update=True)
        if row["config"].get("lock"):
            raise PveError(f"VM is locked ({row['config']['lock']})")
        target = _AGENT_POWER[command]
        await guest_repo.set_status(
            conn, vmid, target, row["started_at"] if target == rules.PAUSED else None
        )
    return {"result": {}}


async def command(rt, node: str, vmid: int, name: str) -> dict:
    """``POST /nodes/{node}/qemu/{vmid}/agent`` with ``command``: the same calls by name."""
    simple = {
        "ping": ping,
        "info": info,
        "get-host-name": host_name,
        "get-osinfo": os_info,
        "network-get-interfaces": network_interfaces,
        "get-fsinfo": fsinfo,
        "fstrim": fstrim,
        "get-users": users,
        "get-time": guest_time,
        "get-timezone": timezone,
        "get-vcpus": vcpus,
        "get-memory-blocks": memory_blocks,
        "get-memory-block-info": memory_block_info,
    }
    if name in simple:
        return await simple[name](rt, node, vmid)
    if name.startswith("fsfreeze-"):
        return await fsfreeze(rt, node, vmid, name.removeprefix("fsfreeze-"))
    if name in _AGENT_POWER:
        return await power(rt, node, vmid, name)
    raise ParameterError({"command": f"unknown agent command '{name}'"})
