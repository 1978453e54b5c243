"""SDN route maps (PVE 9.x ``/cluster/sdn/route-maps``): FRR route-map entries kept
in ``sdn/route-maps.cfg``, one section per entry (``<route-map-id>_<order>``),
pending until an apply like the rest of the SDN.  A route map exists while it
has entries.
"""

from __future__ import annotations

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import sdn_service as sdn
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import section_configs as repo

WHAT = "route-maps"
FILE = sdn.FILES[WHAT]
KIND = "route-map-entry"
_OPTIONAL = ("match", "set", "exit-action", "call")


def _entry_id(route_map: str, order) -> str:
    return f"{route_map}_{int(order)}"


def _lists(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in (value if isinstance(value, list) else [value]) if str(v)]


def _options(params: dict) -> dict:
    options = {"action": params["action"]} if params.get("action") else {}
    for key in ("match", "set"):
        if params.get(key) is not None:
            options[key] = _lists(params[key])
    for key in ("exit-action", "call"):
        if params.get(key) not in (None, ""):
            options[key] = params[key]
    return options


def _shown(section: dict | None, *, typed: bool = False) -> dict | None:
    """An entry as PVE shows it: no section type (kept for rendering pending state)."""
    if section is None:
        return None
    return {k: v for k, v in section.items() if (typed or k != "type") and v != []}


async def list_entries(rt, params: dict, route_map: str | None = None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        current = await sdn._current(conn, WHAT)
        running = (await sdn._running(conn)).get(WHAT, {})
        digest = await sdn._file_digest(conn, WHAT)
    mode = sdn._mode(params)
    ids = set(running) if mode == "running" else set(current)
    if mode == "pending":
        ids |= set(running)
    out = []
    for entry_id in sorted(ids):
        cur = _shown(current.get(entry_id), typed=True)
        run = _shown(running.get(entry_id), typed=True)
        owner = (cur or run)["route-map-id"]
        if route_map is not None and owner != route_map:
            continue
        entry = sdn._render(WHAT, entry_id, cur, run, digest, mode)
        entry.pop("type", None)
        entry["route-map-id"] = owner
        if "order" not in entry:  # a pending-new entry shows its fields under pending
            entry["order"] = (cur or run)["order"]
        out.append(entry)
    return out


async def list_route_maps(rt, params: dict) -> list[dict]:
    async with rt.pool.acquire() as conn:
        if params.get("running"):
            entries = (await sdn._running(conn)).get(WHAT, {})
        else:
            entries = await sdn._current(conn, WHAT)
    return [{"id": i} for i in sorted({e["route-map-id"] for e in entries.values()})]


async def get_entry(rt, route_map: str, order) -> dict:
    async with rt.pool.acquire() as conn:
        section = (await sdn._current(conn, WHAT)).get(_entry_id(route_map, order))
    if section is None:
        raise ParameterError({"route-map-id": f"{route_map}_{order} doesn't exist"})
    return _shown(section)


async def _mutate(rt, entry_id: str, errmsg: str, params: dict, change) -> None:
    """``change(options or None) -> options | None`` under the SDN lock; ``None`` deletes."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await sdn._lock_domain(conn, params.get("lock-token"), errmsg)
        try:
            sections.check_digest(params.get("digest"), await sdn._file_digest(conn, WHAT))
            row = await repo.section(conn, FILE, entry_id, for_update=True)
            options = change(None if row is None else dict(row["options"]))
        except PveError as error:
            raise PveError(f"{errmsg}: {error.message}") from None
        if options is None:
            await repo.delete(conn, FILE, entry_id)
        elif row is None:
            await repo.insert(conn, FILE, entry_id, KIND, options)
        else:
            saved = await repo.update(conn, FILE, entry_id, row["version"], options)
            sections.require_saved(saved)


async def create_entry(rt, params: dict) -> None:
    route_map, order = params["route-map-id"], int(params["order"])
    entry_id = _entry_id(route_map, order)

    def change(existing):
        if existing is not None:
            raise PveError(f"route map entry already exists in configuration: {entry_id}")
        return {"route-map-id": route_map, "order": order, **_options(params)}

    await _mutate(rt, entry_id, "creating route map entry failed", params, change)


async def update_entry(rt, route_map: str, order, params: dict) -> None:
    entry_id = _entry_id(route_map, order)
    updates = _options(params)
    deleted = sections.split_list(params.get("delete"))
    for key in deleted:
        if key not in _OPTIONAL:
            raise ParameterError(
                {
                    "delete": f"value '{key}' does not have a value in the enumeration 'set, match, exit-action, call'"
                }
            )

    def change(existing):
        if not updates and not deleted:
            return existing  # PVE: nothing to change is no error, even for a missing entry
        if existing is None:
            raise PveError(f"Could not find route map with id: {entry_id}")
        options = {**existing, **updates}
        for key in deleted:
            options.pop(key, None)
        return options

    await _mutate(rt, entry_id, "updating route map entry failed", params, change)


async def delete_entry(rt, route_map: str, order, params: dict) -> None:
    entry_id = _entry_id(route_map, order)

    def change(existing):
        if existing is None:
            raise PveError(f"could not find route map entry with id: {entry_id}")
        return None

    await _mutate(rt, entry_id, "deleting route map entry failed", params, change)


def frr_lines(config: dict) -> list[str]:
    """The ``route-map`` stanzas of frr.conf for one SDN configuration."""
    lines: list[str] = []
    entries = sorted(
        config.get(WHAT, {}).values(), key=lambda e: (e["route-map-id"], int(e["order"]))
    )
    for entry in entries:
        lines.append(f"route-map {entry['route-map-id']} {entry['action']} {entry['order']}")
        for key, verb in (("match", "match"), ("set", "set")):
            for item in entry.get(key, []):
                props = dict(p.split("=", 1) for p in item.split(",") if "=" in p)
                lines.append(f" {verb} {props.get('key', item)} {props.get('value', '')}".rstrip())
        if entry.get("call"):
            lines.append(f" call {entry['call']}")
        if entry.get("exit-action"):
            lines.append(f" {entry['exit-action'].replace('key=', '').replace(',value=', ' ')}")
        lines.append("exit")
    return lines
