"""External metrics servers (status.cfg): configuration only — the simulator
exports nothing, so a configured server never receives data."""

from __future__ import annotations

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import section_configs as repo

FILE = "status.cfg"
_TYPES = {"graphite", "influxdb", "opentelemetry"}
_SECRETS = frozenset({"token", "otel-headers"})
_NOT_OPTIONS = frozenset({"id", "type", "delete", "digest"})


def _entry(row, *, full: bool) -> dict:
    options = row["options"]
    if not full:
        return {
            "id": row["id"],
            "type": row["type"],
            "server": options["server"],
            "port": options["port"],
            "disable": options.get("disable", 0),
        }
    return {
        "id": row["id"],
        "type": row["type"],
        **{k: v for k, v in options.items() if k not in _SECRETS},
        "digest": sections.digest(FILE, row["id"], row["version"]),
    }


async def list_servers(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_entry(r, full=False) for r in await repo.sections(conn, FILE)]


async def get_server(rt, server_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, FILE, server_id)
    if row is None:
        raise PveError(f"metric server '{server_id}' does not exist")
    return _entry(row, full=True)


async def create_server(rt, params: dict, declared: set[str]) -> None:
    if params["type"] not in _TYPES:
        raise ParameterError({"type": f"unknown metric server type '{params['type']}'"})
    options = {k: v for k, v in params.items() if k in frozenset(declared) - _NOT_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await repo.insert(conn, FILE, params["id"], params["type"], options):
            raise PveError(f"metric server '{params['id']}' already exists")


async def update_server(rt, server_id: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await repo.section(conn, FILE, server_id, for_update=True)
        if row is None:
            raise PveError(f"metric server '{server_id}' does not exist")
        sections.check_digest(
            params.get("digest"), sections.digest(FILE, server_id, row["version"])
        )
        options = sections.updated_options(
            row["options"], params, frozenset(declared) - _NOT_OPTIONS
        )
        sections.require_saved(await repo.update(conn, FILE, server_id, row["version"], options))


async def delete_server(rt, server_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await repo.delete(conn, FILE, server_id):
            raise PveError(f"metric server '{server_id}' does not exist")
