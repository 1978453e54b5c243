"""ACME challenge plugins (priv/acme/plugins.cfg), known directories and the
challenge schema.  Accounts, terms of service and directory metadata need the
CA's servers, which the simulator never contacts (acme_account_service)."""

from __future__ import annotations

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo

FILE = "priv/acme/plugins.cfg"
DIRECTORIES = [
    {"name": "Let's Encrypt V2", "url": "https://acme-v02.api.letsencrypt.org/directory"},
    {
        "name": "Let's Encrypt V2 Staging",
        "url": "https://acme-staging-v02.api.letsencrypt.org/directory",
    },
]
# PVE always has the built-in HTTP-01 plugin "standalone".
_BUILTIN = {"standalone": {"type": "standalone"}}
_NOT_OPTIONS = frozenset({"id", "type", "delete", "digest"})


def challenge_schema(dns_apis: tuple[str, ...]) -> list[dict]:
    """One entry per DNS API the contract's ``api`` enum names, plus standalone."""
    entries = [{"id": "standalone", "name": "standalone", "type": "standalone", "schema": {}}]
    for api in dns_apis:
        entries.append({"id": api, "name": api, "type": "dns", "schema": {"fields": {}}})
    return entries


def _entry(plugin_id: str, kind: str, options: dict, version: int) -> dict:
    return {
        "plugin": plugin_id,
        "type": kind,
        **options,
        "digest": sections.digest(FILE, plugin_id, version),
    }


async def list_plugins(rt, kind: str | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await repo.sections(conn, FILE)
    plugins = {pid: _entry(pid, o["type"], {}, 0) for pid, o in _BUILTIN.items()}
    for row in rows:
        plugins[row["id"]] = _entry(row["id"], row["type"], row["options"], row["version"])
    return [p for _pid, p in sorted(plugins.items()) if kind in (None, p["type"])]


async def get_plugin(rt, plugin_id: str) -> dict:
    for plugin in await list_plugins(rt, None):
        if plugin["plugin"] == plugin_id:
            return plugin
    raise PveError(f"ACME plugin '{plugin_id}' not defined")


async def _check(conn, kind: str, options: dict) -> None:
    if kind == "dns" and not options.get("api"):
        raise ParameterError({"api": "a dns plugin needs an 'api'"})
    if kind == "standalone" and (options.get("api") or options.get("data")):
        raise ParameterError({"api": "the standalone plugin takes no DNS API settings"})
    known = {n["node"] for n in await inventory.nodes(conn)}
    for node in sections.split_list(options.get("nodes")):
        if node not in known:
            raise ParameterError({"nodes": f"no such node '{node}'"})


async def create_plugin(rt, params: dict, declared: set[str]) -> None:
    plugin_id = params["id"]
    options = {k: v for k, v in params.items() if k in frozenset(declared) - _NOT_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        await _check(conn, params["type"], options)
        if plugin_id in _BUILTIN or not await repo.insert(
            conn, FILE, plugin_id, params["type"], options
        ):
            raise PveError(f"ACME plugin ID '{plugin_id}' already exists")


async def update_plugin(rt, plugin_id: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await repo.section(conn, FILE, plugin_id, for_update=True)
        if row is None:
            raise PveError(
                f"ACME plugin '{plugin_id}' not defined"
                + (" (built-in)" if plugin_id in _BUILTIN else "")
            )
        sections.check_digest(
            params.get("digest"), sections.digest(FILE, plugin_id, row["version"])
        )
        options = sections.updated_options(
            row["options"], params, frozenset(declared) - _NOT_OPTIONS
        )
        await _check(conn, row["type"], options)
        sections.require_saved(await repo.update(conn, FILE, plugin_id, row["version"], options))


async def delete_plugin(rt, plugin_id: str) -> None:
    if plugin_id in _BUILTIN:
        raise PveError(f"cannot delete the built-in ACME plugin '{plugin_id}'")
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await repo.delete(conn, FILE, plugin_id):
            raise PveError(f"ACME plugin '{plugin_id}' not defined")
