"""Cluster-wide resource mappings (mapping/{pci,usb,dir}.cfg): one ID names a
device or directory per node, so guests can use it wherever they run."""

from __future__ import annotations

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo

KINDS = ("pci", "usb", "dir")
# What each map entry must name besides its node.
_REQUIRED = {"pci": ("path",), "usb": (), "dir": ("path",)}
_OPTIONS = {
    "pci": frozenset({"description", "map", "mdev", "live-migration-capable"}),
    "usb": frozenset({"description", "map"}),
    "dir": frozenset({"description", "map"}),
}


def _file(kind: str) -> str:
    return f"mapping/{kind}.cfg"


async def _check_map(conn, kind: str, entries) -> list[str]:
    entries = entries if isinstance(entries, list) else sections.split_list(entries)
    known = {n["node"] for n in await inventory.nodes(conn)}
    seen: set[str] = set()
    for entry in entries:
        props = rules.parse_property_string(entry)
        node = props.get("node")
        if node not in known:
            raise ParameterError({"map": f"no such node '{node}' in '{entry}'"})
        if node in seen:
            raise ParameterError({"map": f"node '{node}' is mapped more than once"})
        seen.add(node)
        for key in _REQUIRED[kind]:
            if not props.get(key):
                raise ParameterError({"map": f"'{key}' is missing in '{entry}'"})
        if kind == "usb" and not (props.get("id") or props.get("path")):
            raise ParameterError({"map": f"'id' or 'path' is missing in '{entry}'"})
    return list(entries)


def _entry(row, kind: str, check_node: str | None) -> dict:
    entry = {
        "id": row["id"],
        "description": row["options"].get("description", ""),
        "map": row["options"]["map"],
    }
    for key in ("mdev", "live-migration-capable"):
        if key in row["options"]:
            entry[key] = row["options"][key]
    # USB's schema requires ``error`` (PVE fills it only for ``check-node``):
    # an empty list when nothing was checked.
    if kind == "usb":
        entry["error"] = []
    if check_node:
        mapped = {rules.parse_property_string(m).get("node") for m in row["options"]["map"]}
        if check_node not in mapped:
            problem = {"severity": "warning", "message": f"no mapping for node '{check_node}'"}
            entry["checks" if kind != "usb" else "error"] = [problem]
    return entry


async def list_mappings(rt, kind: str, check_node: str | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_entry(r, kind, check_node) for r in await repo.sections(conn, _file(kind))]


async def get_mapping(rt, kind: str, mapping_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, _file(kind), mapping_id)
    if row is None:
        raise PveError(f"{kind} mapping '{mapping_id}' does not exist")
    return {
        "id": mapping_id,
        "type": kind,
        **row["options"],
        "digest": sections.digest(_file(kind), mapping_id, row["version"]),
    }


async def create_mapping(rt, kind: str, params: dict) -> None:
    options = {k: v for k, v in params.items() if k in _OPTIONS[kind]}
    async with rt.pool.acquire() as conn, conn.transaction():
        options["map"] = await _check_map(conn, kind, params["map"])
        if not await repo.insert(conn, _file(kind), params["id"], kind, options):
            raise PveError(f"{kind} mapping '{params['id']}' already exists")


async def update_mapping(rt, kind: str, mapping_id: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await repo.section(conn, _file(kind), mapping_id, for_update=True)
        if row is None:
            raise PveError(f"{kind} mapping '{mapping_id}' does not exist")
        sections.check_digest(
            params.get("digest"), sections.digest(_file(kind), mapping_id, row["version"])
        )
        options = sections.updated_options(row["options"], params, _OPTIONS[kind])
        if "map" not in options:
            raise PveError("cannot delete 'map' - it is not optional", status=400)
        options["map"] = await _check_map(conn, kind, options["map"])
        sections.require_saved(
            await repo.update(conn, _file(kind), mapping_id, row["version"], options)
        )


async def delete_mapping(rt, kind: str, mapping_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await repo.delete(conn, _file(kind), mapping_id):
            raise PveError(f"{kind} mapping '{mapping_id}' does not exist")
