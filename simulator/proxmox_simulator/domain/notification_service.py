"""Notification endpoints (sendmail, smtp, gotify, webhook), matchers and targets.

Endpoints and matchers share notifications.cfg, so their names are unique
across both.  Secrets (token, password, secret) are write-only, as PVE keeps
them in priv/notifications.cfg.  The built-in ``mail-to-root`` endpoint and
``default-matcher`` always exist; editing one marks it ``modified-builtin``
and deleting it restores the built-in.
"""

from __future__ import annotations

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import backups as backup_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo

FILE = "notifications.cfg"
ENDPOINT_TYPES = ("sendmail", "smtp", "gotify", "webhook")
MATCHER = "matcher"
_SECRETS = frozenset({"token", "password", "secret"})
_NOT_OPTIONS = frozenset({"name", "delete", "digest"})
BUILTINS = {
    "mail-to-root": (
        "sendmail",
        {"mailto-user": ["root@pam"], "comment": "Send mails to root@pam's email address"},
    ),
    "default-matcher": (
        MATCHER,
        {
            "mode": "all",
            "target": ["mail-to-root"],
            "comment": "Route all notifications to mail-to-root",
        },
    ),
}
_SEVERITIES = {"info", "notice", "warning", "error", "unknown"}


async def _all(conn) -> dict[str, tuple[str, dict, str, int]]:
    """name → (type, options, origin, version), built-ins included."""
    out = {name: (kind, dict(options), "builtin", 0) for name, (kind, options) in BUILTINS.items()}
    for row in await repo.sections(conn, FILE):
        origin = "modified-builtin" if row["id"] in BUILTINS else "user-created"
        out[row["id"]] = (row["type"], dict(row["options"]), origin, row["version"])
    return out


def _render(name: str, kind: str, options: dict, origin: str, version: int) -> dict:
    entry = {
        "name": name,
        **{k: v for k, v in options.items() if k not in _SECRETS},
        "origin": origin,
    }
    entry["digest"] = sections.digest(FILE, name, version)
    return entry


async def list_of(rt, kind: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        items = await _all(conn)
    return [
        _render(n, k, o, origin, v) for n, (k, o, origin, v) in sorted(items.items()) if k == kind
    ]


async def get_one(rt, kind: str, name: str) -> dict:
    async with rt.pool.acquire() as conn:
        items = await _all(conn)
    if name not in items or items[name][0] != kind:
        raise PveError(f"{kind} '{name}' does not exist")
    item_kind, options, origin, version = items[name]
    return _render(name, item_kind, options, origin, version)


async def targets(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        items = await _all(conn)
    out = []
    for name, (kind, options, origin, _version) in sorted(items.items()):
        if kind == MATCHER:
            continue
        entry = {"name": name, "type": kind, "origin": origin}
        for key in ("comment", "disable"):
            if key in options:
                entry[key] = options[key]
        out.append(entry)
    return out


async def _check(conn, kind: str, options: dict, items: dict) -> None:
    if kind == MATCHER:
        for target in sections.split_list(options.get("target")):
            if target not in items or items[target][0] == MATCHER:
                raise ParameterError({"target": f"notification target '{target}' does not exist"})
        for severity in sections.split_list(options.get("match-severity")):
            if severity not in _SEVERITIES:
                raise ParameterError({"match-severity": f"unknown severity '{severity}'"})
    elif kind in ("sendmail", "smtp"):
        if not options.get("mailto") and not options.get("mailto-user"):
            raise ParameterError(
                {"mailto": "at least one of 'mailto' and 'mailto-user' is required"}
            )
    elif kind == "webhook" and not str(options.get("url", "")).startswith(("http://", "https://")):
        raise ParameterError({"url": "the URL must start with http:// or https://"})


async def create(rt, kind: str, params: dict, declared: set[str]) -> None:
    name = params["name"]
    options = {k: v for k, v in params.items() if k in frozenset(declared) - _NOT_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        items = await _all(conn)
        if name in items:
            raise PveError(f"notification endpoint or matcher '{name}' already exists")
        await _check(conn, kind, options, items)
        await repo.insert(conn, FILE, name, kind, options)


async def update(rt, kind: str, name: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        items = await _all(conn)
        if name not in items or items[name][0] != kind:
            raise PveError(f"{kind} '{name}' does not exist")
        _kind, current, _origin, version = items[name]
        sections.check_digest(params.get("digest"), sections.digest(FILE, name, version))
        options = sections.updated_options(current, params, frozenset(declared) - _NOT_OPTIONS)
        await _check(conn, kind, options, items)
        if version == 0:  # first change of a built-in
            await repo.insert(conn, FILE, name, kind, options)
        else:
            sections.require_saved(await repo.update(conn, FILE, name, version, options))


async def delete(rt, kind: str, name: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        items = await _all(conn)
        if name not in items or items[name][0] != kind:
            raise PveError(f"{kind} '{name}' does not exist")
        if items[name][2] == "builtin":
            raise PveError(f"cannot delete built-in {kind} '{name}'")
        if kind != MATCHER and items[name][2] != "modified-builtin":
            for other, (other_kind, options, _o, _v) in items.items():
                if other_kind == MATCHER and name in sections.split_list(options.get("target")):
                    raise PveError(f"cannot delete '{name}', it is used by matcher '{other}'")
        await repo.delete(conn, FILE, name)


async def test_target(rt, name: str) -> None:
    """Sendmail delivers locally; network endpoints cannot be reached from the simulator."""
    async with rt.pool.acquire() as conn:
        items = await _all(conn)
    if name not in items or items[name][0] == MATCHER:
        raise PveError(f"notification target '{name}' does not exist")
    kind, options, _origin, _version = items[name]
    if options.get("disable"):
        raise PveError(f"notification target '{name}' is disabled")
    if kind != "sendmail":
        raise PveError(
            f"could not notify via target '{name}': the simulator sends nothing over the network"
        )


def matcher_fields() -> list[dict]:
    return [{"name": "type"}, {"name": "hostname"}, {"name": "job-id"}]


async def matcher_field_values(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        jobs = await backup_repo.jobs(conn)
    values = [
        {"field": "type", "value": t}
        for t in ("fencing", "package-updates", "replication", "system-mail", "vzdump")
    ]
    values += [{"field": "hostname", "value": n["node"]} for n in nodes]
    values += [{"field": "job-id", "value": j["id"]} for j in jobs]
    return values
