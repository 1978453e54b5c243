"""Guest operations beyond lifecycle: cloud-init drive, feature checks, RRD
statistics, key presses and the QEMU monitor."""

from __future__ import annotations

from proxmox_simulator.domain import cloudinit, node_system_service
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import (
    NET_RATES,
    load_guest,
    require_node,
    traffic_wave,
)
from proxmox_simulator.domain.rrd_service import RRD_STEPS
from proxmox_simulator.repositories import guest_agent as agent_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory

_MASKED = "**********"


def _shown(key: str, value: str) -> str:
    return _MASKED if key == "cipassword" else value


async def cloudinit_pending(rt, node: str, vmid: int) -> list[dict]:
    """What the drive was last generated from (``value``) against the config (``pending``).

    Like PVE, a guest whose drive was never regenerated shows its config as current.
    """
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.QEMU, node, vmid)
        state = await agent_repo.state(conn, vmid)
    current = cloudinit.values(row["config"])
    generated = state["cloudinit"] if state["cloudinit"] is not None else current
    out = []
    for key in sorted(set(current) | set(generated)):
        entry: dict = {"key": key}
        if key in generated:
            entry["value"] = _shown(key, generated[key])
        if key not in current:
            entry["delete"] = 1
        elif generated.get(key) != current[key]:
            entry["pending"] = _shown(key, current[key])
        out.append(entry)
    return out


async def cloudinit_regenerate(rt, node: str, vmid: int) -> None:
    """``PUT …/cloudinit``: rewrite the drive from the config (nothing without a drive)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, rules.QEMU, node, vmid, for_update=True)
        if cloudinit.has_drive(vmid, row["config"]):
            await agent_repo.set_cloudinit(conn, vmid, cloudinit.values(row["config"]))


async def cloudinit_dump(rt, node: str, vmid: int, kind: str) -> str:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.QEMU, node, vmid)
    node_dns = await node_system_service.get_dns(rt, row["node"])
    return cloudinit.dump(row["config"], vmid, kind, node_dns)


# -- feature -------------------------------------------------------------------------

# Plugins whose volumes can be snapshotted / linked-cloned (PVE's volume_has_feature).
_SNAPSHOT_TYPES = {"lvmthin", "zfspool", "rbd", "zfs", "btrfs"}
_CLONE_TYPES = {"lvmthin", "zfspool", "rbd", "zfs", "btrfs"}


async def feature(rt, kind: str, node: str, vmid: int, name: str, snapname: str | None) -> dict:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
        if (
            snapname
            and snapname != "current"
            and await guest_repo.snapshot(conn, vmid, snapname) is None
        ):
            raise PveError(f"snapshot '{snapname}' does not exist")
        storages = {s["storage"]: s for s in await inventory.storages(conn)}
        nodes = [n["node"] for n in await inventory.nodes(conn)]
    first = "file" if kind == rules.QEMU else "volume"
    has = True
    shared = True
    for key, value in row["config"].items():
        if not rules.is_disk_key(kind, key) or "media=cdrom" in str(value):
            continue
        volid = rules.parse_property_string(str(value), first).get(first, "")
        storage = storages.get(volid.split(":", 1)[0])
        if storage is None:
            continue
        shared = shared and storage["shared"]
        qcow2 = volid.endswith(".qcow2")
        if name == "snapshot" and not (storage["type"] in _SNAPSHOT_TYPES or qcow2):
            has = False
        if name == "clone" and not (row["template"] and (storage["type"] in _CLONE_TYPES or qcow2)):
            has = False
    return {"hasFeature": 1 if has else 0, "nodes": nodes if shared else [node]}


# -- RRD -----------------------------------------------------------------------------


async def rrddata(
    rt, kind: str, node: str, vmid: int, timeframe: str, cf: str | None
) -> list[dict]:
    """Deterministic statistics consistent with the guest's state: zero while stopped."""
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
    step, count = RRD_STEPS[timeframe]
    now = int(rt.clock.now()) // step * step
    started = row["started_at"] or now + 1
    running = row["status"] != rules.STOPPED
    factor = 1.0 if cf != "MAX" else 1.25
    points = []
    for i in range(count):
        t = now - (count - 1 - i) * step
        up = running and t >= started
        wave = traffic_wave(t, step, vmid)
        point = {
            "time": t,
            "maxcpu": row["cpus"],
            "maxmem": row["maxmem"],
            "maxdisk": row["maxdisk"],
        }
        if up:
            point.update(
                {
                    "cpu": round(min(1.0, 0.01 + 0.05 * wave * factor), 6),
                    "mem": int(row["maxmem"] * (0.35 + 0.1 * wave)),
                    "disk": 0,
                    "netin": round(NET_RATES[0] * wave * factor, 3),
                    "netout": round(NET_RATES[1] * wave * factor, 3),
                    "diskread": round(4096 * wave * factor, 3),
                    "diskwrite": round(8192 * wave * factor, 3),
                }
            )
        points.append(point)
    return points


async def rrd(rt, kind: str, node: str, vmid: int, ds: str, timeframe: str) -> dict:
    """PVE renders a PNG and answers its file name; the simulator names the image it would draw."""
    known = {
        "cpu",
        "mem",
        "maxmem",
        "maxcpu",
        "disk",
        "maxdisk",
        "netin",
        "netout",
        "diskread",
        "diskwrite",
    }
    wanted = [d for d in ds.split(",") if d]
    unknown = [d for d in wanted if d not in known]
    if unknown:
        raise ParameterError({"ds": f"unknown data source '{unknown[0]}'"})
    await rrddata(rt, kind, node, vmid, timeframe, None)
    return {"filename": f"/var/tmp/rrd-{kind}-{vmid}-{'_'.join(wanted)}-{timeframe}.png"}


# -- keys and monitor ----------------------------------------------------------------------

_KEY_PART = {
    *"abcdefghijklmnopqrstuvwxyz0123456789",
    "ctrl",
    "alt",
    "alt_r",
    "shift",
    "shift_r",
    "meta_l",
    "meta_r",
    "delete",
    "esc",
    "tab",
    "ret",
    "spc",
    "backspace",
    "up",
    "down",
    "left",
    "right",
    "home",
    "end",
    "pgup",
    "pgdn",
    "insert",
    *(f"f{i}" for i in range(1, 13)),
    "minus",
    "equal",
    "comma",
    "dot",
    "slash",
    "print",
    "sysrq",
}


async def _running_qemu(rt, node: str, vmid: int):
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.QEMU, node, vmid)
    if row["status"] == rules.STOPPED:
        raise PveError(f"VM {vmid} not running")
    return row


async def dbus_vmstate(rt, node: str, vmid: int) -> None:
    """``POST .../dbus-vmstate`` (start or stop the conntrack-state helper QEMU migrates
    with): PVE runs it on the node the VM runs on and refuses anywhere else.  The
    helper itself shows in no API answer, so the check is all a client sees."""
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        row = await guest_repo.get(conn, vmid)
    if (
        row is None
        or row["type"] != rules.QEMU
        or row["node"] != node
        or row["status"] == rules.STOPPED
    ):
        raise ParameterError({"node": f"VM {vmid} not running locally on node '{node}'"})


async def sendkey(rt, node: str, vmid: int, key: str, skiplock: bool) -> None:
    for part in key.split("-"):
        if part not in _KEY_PART:
            raise ParameterError({"key": f"unknown key '{part}'"})
    row = await _running_qemu(rt, node, vmid)
    if row["config"].get("lock") and not skiplock:
        raise PveError(f"VM is locked ({row['config']['lock']})")


async def monitor(rt, node: str, vmid: int, command: str) -> str:
    row = await _running_qemu(rt, node, vmid)
    words = command.split()
    if words[:2] == ["info", "status"]:
        return f"VM status: {'paused' if row['status'] == rules.PAUSED else 'running'}\n"
    if words[:2] == ["info", "version"]:
        return "9.2.0pve-qemu-kvm-9.2.0-2\n"
    if words[:2] == ["info", "name"]:
        return f"{row['name']}\n"
    if words[:2] == ["info", "uuid"]:
        return f"{row['config'].get('smbios1', 'uuid=00000000-0000-0000-0000-000000000000').split('uuid=')[-1].split(',')[0]}\n"
    if words[:2] == ["info", "cpus"]:
        return "".join(
            f"* CPU #{i}: thread_id={10000 + row['vmid'] + i}\n" for i in range(row["cpus"])
        )
    if words[:1] == ["help"]:
        return "info cpus -- show infos for each CPU\ninfo name -- show the current VM name\ninfo status -- show the current VM status\ninfo uuid -- show the current VM UUID\ninfo version -- show the version of QEMU\n"
    return f"unknown command: '{words[0] if words else ''}'\n"
