"""Suspend to disk (hibernation) of a QEMU guest, as qemu-server does it.

The guest's RAM goes to a state volume on its state storage (``vmstatestorage``, else
a storage one of its disks is on, shared ones first, file-based preferred, else
``local``); the config records it as ``vmstate`` and is locked ``suspended``; the VM is
then off.  The next start resumes from that state: the volume is freed and the lock
and ``vmstate`` are dropped.
"""

from __future__ import annotations

import time

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory

SUSPENDED = "suspended"
# qemu-server reserves twice the RAM (the state is saved live) plus 500 MiB of
# device state.
_DEVICE_STATE = 500 * 1024 * 1024


async def state_storage(conn, config: dict, requested: str | None) -> str:
    """qemu-server's find_vmstate_storage (a requested ``statestorage`` first)."""
    if requested:
        return requested
    if config.get("vmstatestorage"):
        return str(config["vmstatestorage"])
    shared = local = None
    for _key, volume in rules.disk_volumes(rules.QEMU, config):
        storage_id = rules.volume_storage(volume)
        row = await inventory.storage(conn, storage_id) if storage_id else None
        if row is None:
            continue
        if row["shared"]:
            if shared is None or row["path"]:
                shared = storage_id
        elif local is None or row["path"]:
            local = storage_id
    return shared or local or "local"


async def hibernate(conn, now: float, row, storage_id: str) -> list[str]:
    """Save the guest's state and power it off; the task's log lines."""
    vmid = row["vmid"]
    storage = await inventory.storage(conn, storage_id)
    if storage is None:
        raise PveError(f"storage '{storage_id}' does not exist")
    stamp = time.strftime("%Y-%m-%d", time.gmtime(now))
    volname = f"vm-{vmid}-state-suspend-{stamp}"
    volid = f"{storage_id}:{vmid}/{volname}.raw" if storage["path"] else f"{storage_id}:{volname}"
    await inventory.insert_volume(
        conn,
        volid=volid,
        storage_name=storage_id,
        node_name=None if storage["shared"] else row["node"],
        vmid=vmid,
        content="images",
        fmt="raw",
        size=int(row["maxmem"]) * 2 + _DEVICE_STATE,
        ctime=int(now),
    )
    config = {**row["config"], "vmstate": volid, "lock": SUSPENDED}
    await guest_repo.save_config(conn, row, config)
    await guest_repo.set_status(conn, vmid, rules.STOPPED, None)
    return [f"saving VM state and RAM using storage '{storage_id}'", "VM suspended to disk"]


def is_hibernated(config: dict) -> bool:
    return config.get("lock") == SUSPENDED and bool(config.get("vmstate"))


async def resume_from_disk(conn, row) -> list[str]:
    """A start of a hibernated guest: its state is loaded, then the state volume goes."""
    config = dict(row["config"])
    volid = config.pop("vmstate")
    config.pop("lock", None)
    await inventory.delete_volume(conn, volid)
    await guest_repo.save_config(conn, row, config)
    return [f"resuming VM from state '{volid}'"]
