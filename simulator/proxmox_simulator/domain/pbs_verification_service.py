"""Proxmox Backup Server verification of the snapshots on a ``pbs`` storage.

A verify job runs on the PBS side, never through PVE's API, so the simulator
takes its outcome from the laboratory (``POST /ui/api/pbs/verify``).  PVE's
content listing of the storage then carries ``verification: {state, upid}``
for the snapshot, as pve-storage's PBS plugin copies it from PBS's snapshot
list; archives on any other storage type are never verified.
"""

from __future__ import annotations

import re
import zlib

from proxmox_simulator.domain.errors import ParameterError
from proxmox_simulator.repositories import backups as backup_repo
from proxmox_simulator.repositories import inventory

STATES = ("ok", "failed")
_HOSTNAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
_SNAPSHOT = re.compile(r"^(vm|ct)/(\d+)/(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$")


def _volid(storage_name: str, volume: str) -> str:
    """A full volid from ``store:backup/vm/100/<time>``, ``backup/vm/...`` or ``vm/...``."""
    if ":" in volume.split("/", 1)[0]:
        return volume
    name = volume.removeprefix("backup/")
    return f"{storage_name}:backup/{name}"


def _escape(worker_id: str) -> str:
    """systemd unit-name escaping, as PBS writes a worker id into its UPID."""
    out = []
    for ch in worker_id:
        if ch == "/":
            out.append("-")
        elif ch.isascii() and (ch.isalnum() or ch in "_."):
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}")
    return "".join(out)


def verify_upid(server: str, datastore: str, snapshot: str, ctime: int, now: float) -> str:
    """The UPID of a PBS ``verify_snapshot`` task (PBS's UPID has a task counter field)."""
    node = server.split(".", 1)[0] if _HOSTNAME.match(server.split(".", 1)[0]) else "pbs"
    btype, bid, _stamp = snapshot.split("/")
    worker_id = _escape(f"{datastore}:{btype}/{bid}/{ctime:08X}")
    pid = 0x1000 + zlib.crc32(snapshot.encode()) % 0xF000
    started = int(now)
    return (
        f"UPID:{node}:{pid:08X}:{started % 0x1000000:08X}:{started % 0x10000:08X}:"
        f"{started:08X}:verify_snapshot:{worker_id}:root@pam:"
    )


async def verify(rt, params: dict) -> dict:
    """Record a verify job's outcome for one snapshot: ``storage``, ``volume``, ``state``."""
    missing = {
        field: "property is missing and it is not optional"
        for field in ("storage", "volume", "state")
        if not str(params.get(field) or "").strip()
    }
    if missing:
        raise ParameterError(missing)
    storage_name = str(params["storage"]).strip()
    state = str(params["state"]).strip()
    if state not in STATES:
        raise ParameterError(
            {"state": f"value '{state}' does not have a value in the enumeration 'ok, failed'"}
        )
    volid = _volid(storage_name, str(params["volume"]).strip())
    async with rt.pool.acquire() as conn, conn.transaction():
        storage = await inventory.storage(conn, storage_name)
        if storage is None:
            raise ParameterError({"storage": f"storage '{storage_name}' does not exist"})
        if storage["type"] != "pbs":
            raise ParameterError(
                {
                    "storage": f"storage '{storage_name}' is of type '{storage['type']}', "
                    "not a Proxmox Backup Server (pbs): nothing verifies its archives"
                }
            )
        row = await inventory.volume(conn, volid)
        snapshot = volid.split(":", 1)[1].removeprefix("backup/")
        if (
            row is None
            or row["storage"] != storage_name
            or row["content"] != "backup"
            or not _SNAPSHOT.match(snapshot)
        ):
            raise ParameterError({"volume": f"no backup snapshot '{volid}' on '{storage_name}'"})
        options = storage["options"] or {}
        upid = verify_upid(
            str(options.get("server") or "pbs"),
            str(options.get("datastore") or storage_name),
            snapshot,
            int(row["ctime"]),
            rt.clock.now(),
        )
        await backup_repo.set_verification(conn, volid, state, upid)
    return {"volid": volid, "verification": {"state": state, "upid": upid}}


def listing_entry(row) -> dict | None:
    """The ``verification`` a content listing carries for a backup row, if any (only a
    ``pbs`` storage's snapshots are ever verified: ``verify`` refuses the others)."""
    if not row["verify_state"]:
        return None
    return {"state": row["verify_state"], "upid": row["verify_upid"]}
