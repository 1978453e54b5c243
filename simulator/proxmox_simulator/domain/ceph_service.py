"""Ceph OSD map flags (``noout``, ``pause``, ...): one set of flags for the cluster.

Every flags endpoint reads and writes the same set, as PVE's all read ``osd dump``
and write ``osd set``/``osd unset``.  The flag names and their descriptions
are the ones the active contract declares.
"""

from __future__ import annotations

from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as section_repo
from proxmox_simulator.tasks.service import enqueue

OSDMAP_FILE, FLAGS_SECTION = "ceph/osdmap", "flags"
SET_FLAGS_TASK = "cephsetflags"


def declared_flags(contract: Contract) -> dict[str, str]:
    """Flag name → description, from the bulk writer's parameters."""
    writer = contract.endpoint("/cluster/ceph/flags", "PUT")
    params = writer.parameters if writer else ()
    return {
        p.name: str(p.extra.get("description", "")) for p in sorted(params, key=lambda p: p.name)
    }


async def _current(conn, *, for_update: bool = False) -> tuple[set[str], int | None]:
    row = await section_repo.section(conn, OSDMAP_FILE, FLAGS_SECTION, for_update=for_update)
    if row is None:
        return set(), None
    return set(row["options"].get("set", [])), row["version"]


async def _store(conn, flags: set[str], version: int | None) -> None:
    options = {"set": sorted(flags)}
    if version is None:
        await section_repo.insert(conn, OSDMAP_FILE, FLAGS_SECTION, "osdmap", options)
    else:
        await section_repo.update(conn, OSDMAP_FILE, FLAGS_SECTION, version, options)


async def current_flags(conn) -> set[str]:
    """The set flags, read inside the caller's transaction (a worker's effect)."""
    current, _version = await _current(conn)
    return current


async def list_flags(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        current, _version = await _current(conn)
    return [
        {"name": name, "description": description, "value": int(name in current)}
        for name, description in declared_flags(rt.contract).items()
    ]


async def get_flag(rt, flag: str) -> int:
    async with rt.pool.acquire() as conn:
        current, _version = await _current(conn)
    return int(flag in current)


async def apply_flags(conn, wanted: dict[str, int]) -> list[str]:
    """Set or unset flags; returns PVE's worker lines for the ones that changed."""
    await section_repo.lock_file(conn, OSDMAP_FILE)
    current, version = await _current(conn, for_update=True)
    updated = set(current)
    lines = []
    for flag, value in sorted(wanted.items()):
        if bool(value) == (flag in current):
            continue  # PVE leaves a flag already in the wanted state alone
        lines.append(f"{'set' if value else 'unset'} {flag}")
        if value:
            updated.add(flag)
        else:
            updated.discard(flag)
    if updated != current:
        await _store(conn, updated, version)
    return lines


async def update_flag(rt, flag: str, value: int) -> None:
    """The single-flag writer runs synchronously."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await apply_flags(conn, {flag: value})


# ``osd dump`` always lists these flags of a current OSD map beside the ones an admin sets.
OSDMAP_DEFAULT_FLAGS = ("sortbitwise", "recovery_deletes", "purged_snapdirs", "pglog_hardlimit")


# ``osd set pause`` sets both of these in the OSD map; PVE reads ``pause`` back from them.
REAL_FLAGS = {"pause": ("pauserd", "pausewr")}


async def osd_dump_flags(rt) -> str:
    """``osd dump``'s comma-joined ``flags``: what the OSD tree and the pre-7.0 node
    reader answer (Ceph's spelling, so ``pause`` shows as ``pauserd,pausewr``)."""
    async with rt.pool.acquire() as conn:
        current, _version = await _current(conn)
    real = sorted({name for flag in current for name in REAL_FLAGS.get(flag, (flag,))})
    return ",".join([*real, *OSDMAP_DEFAULT_FLAGS])


async def set_flags(rt, principal: Principal, params: dict) -> str:
    """The bulk writer runs as a ``cephsetflags`` worker task; omitted flags stay."""
    wanted = {k: int(v) for k, v in params.items() if k in declared_flags(rt.contract)}
    async with rt.pool.acquire() as conn, conn.transaction():
        node = (await inventory.nodes(conn))[0]["node"]
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=SET_FLAGS_TASK,
            task_id="",
            principal=principal,
            payload={"flags": wanted},
        )
