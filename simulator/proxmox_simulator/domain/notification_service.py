"""Notification endpoints (sendmail, smtp, gotify, webhook), matchers and targets,
and the sending of notifications through them.

Endpoints and matchers share notifications.cfg, so their names are unique
across both.  Secrets (token, password, secret) are write-only, as PVE keeps
them in priv/notifications.cfg: a webhook's ``secret`` entries read back by name
only, and an entry given by name only keeps its stored value.  The built-in
``mail-to-root`` endpoint and ``default-matcher`` always exist; editing one marks
it ``modified-builtin`` and deleting it restores the built-in.

``send`` routes a notification (``domain/notify.py``) as proxmox-notify does and
delivers to webhook targets in the background, outside the task that sent it,
within DELIVERY_TIMEOUT; a failed delivery is logged, never the sender's failure.
Mail and gotify targets are matched and logged, not delivered: the simulator
sends no mail and reaches no gotify server.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import notify
from proxmox_simulator.domain.corosync_service import local_node
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
log = logging.getLogger("proxmox_simulator.notify")
# Seconds a webhook delivery may take (connect and answer).
DELIVERY_TIMEOUT = 5.0
# Deliveries under way: kept referenced until they end.
_deliveries: set[asyncio.Task] = set()


async def _all(conn) -> dict[str, tuple[str, dict, str, int]]:
    """name → (type, options, origin, version), built-ins included."""
    out = {name: (kind, dict(options), "builtin", 0) for name, (kind, options) in BUILTINS.items()}
    for row in await repo.sections(conn, FILE):
        origin = "modified-builtin" if row["id"] in BUILTINS else "user-created"
        out[row["id"]] = (row["type"], dict(row["options"]), origin, row["version"])
    return out


def _secret_names(options: dict) -> list[str]:
    return [
        f"name={notify.key_value(e, 'secret')[0]}" for e in notify.as_list(options.get("secret"))
    ]


def _render(name: str, kind: str, options: dict, origin: str, version: int) -> dict:
    entry = {
        "name": name,
        **{k: v for k, v in options.items() if k not in _SECRETS},
        "origin": origin,
    }
    if kind == "webhook" and options.get("secret"):
        # The names are readable, the values never (PVE's priv/notifications.cfg).
        entry["secret"] = _secret_names(options)
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


def _checked(option: str, check, *args) -> None:
    try:
        check(*args)
    except notify.NotifyError as exc:
        raise ParameterError({option: str(exc)}) from None


async def _check(conn, kind: str, options: dict, items: dict) -> None:
    if kind == MATCHER:
        for target in sections.split_list(options.get("target")):
            if target not in items or items[target][0] == MATCHER:
                raise ParameterError({"target": f"notification target '{target}' does not exist"})
        for option, parse in (
            ("match-field", notify.field_matcher),
            ("match-severity", notify.severity_matcher),
            ("match-calendar", notify.calendar_matcher),
        ):
            for entry in notify.as_list(options.get(option)):
                _checked(option, parse, entry)
    elif kind in ("sendmail", "smtp"):
        if not options.get("mailto") and not options.get("mailto-user"):
            raise ParameterError(
                {"mailto": "at least one of 'mailto' and 'mailto-user' is required"}
            )
    elif kind == "webhook":
        if not str(options.get("url", "")).startswith(("http://", "https://")):
            raise ParameterError({"url": "the URL must start with http:// or https://"})
        for option in ("header", "secret"):
            for entry in notify.as_list(options.get(option)):
                _checked(option, notify.key_value, entry, option)
        if options.get("body"):
            _checked("body", notify.decode_base64, options["body"], "body")


def _kept_secrets(options: dict, current: dict) -> dict:
    """A webhook's ``secret`` entries given by name only keep their stored values."""
    if "secret" not in options:
        return options
    stored = dict(notify.key_value(e, "secret") for e in notify.as_list(current.get("secret")))
    entries = []
    for entry in notify.as_list(options["secret"]):
        try:
            name, value = notify.key_value(entry, "secret")
        except notify.NotifyError as exc:
            raise ParameterError({"secret": str(exc)}) from None
        if value is None:
            if stored.get(name) is None:
                raise ParameterError({"secret": f"secret '{name}' has no value"})
            value = stored[name]
        entries.append(f"name={name},value={value}")
    return {**options, "secret": entries}


async def create(rt, kind: str, params: dict, declared: set[str]) -> None:
    name = params["name"]
    options = {k: v for k, v in params.items() if k in frozenset(declared) - _NOT_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        items = await _all(conn)
        if name in items:
            raise PveError(f"notification endpoint or matcher '{name}' already exists")
        await _check(conn, kind, options, items)
        if kind == "webhook":
            options = _kept_secrets(options, {})
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
        if kind == "webhook":
            options = _kept_secrets(options, current)
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
    """PVE's test notification, sent to this target alone and at once: a webhook gets
    the request, and its failure is the answer's; sendmail delivers locally; smtp and
    gotify servers cannot be reached from the simulator."""
    async with rt.pool.acquire() as conn:
        items = await _all(conn)
        hostname = local_node(await inventory.nodes(conn))
    if name not in items or items[name][0] == MATCHER:
        raise PveError(f"notification target '{name}' does not exist")
    kind, options, _origin, _version = items[name]
    if options.get("disable"):
        raise PveError(f"notification target '{name}' is disabled")
    if kind == "webhook":
        note = notify.Notification(
            severity="info",
            title="Test notification",
            message=f"This is a test of the notification target '{name}'.",
            timestamp=int(rt.clock.now()),
            fields={"hostname": hostname},
        )
        try:
            await _deliver(name, options, note)
        except (notify.NotifyError, httpx.HTTPError) as exc:
            raise PveError(f"could not notify via target `{name}`: {_why(exc, options)}") from None
    elif kind != "sendmail":
        raise PveError(
            f"could not notify via target '{name}': the simulator sends nothing over the network"
        )


# ---------------------------------------------------------------- sending


def _why(exc: Exception, options: dict) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.HTTPStatusError):
        text = f"HTTP status code: {exc.response.status_code}"
    return notify.mask(text, options)


async def _deliver(name: str, options: dict, note: notify.Notification) -> None:
    request = notify.webhook_request(options, note)
    async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT) as client:
        answer = await client.request(
            request.method.upper(),
            request.url,
            headers=request.headers,
            content=request.body.encode("utf-8") if request.body else None,
        )
        answer.raise_for_status()


async def _deliver_logged(name: str, options: dict, note: notify.Notification) -> None:
    try:
        await _deliver(name, options, note)
    except (notify.NotifyError, httpx.HTTPError) as exc:
        log.error("could not notify via target `%s`: %s", name, _why(exc, options))
    else:
        log.info("notified via target `%s`", name)


def route(items: dict, note: notify.Notification) -> list[str]:
    """The targets the enabled matchers pick for ``note`` (a failing matcher is
    logged and skipped, as PVE's)."""
    targets: set[str] = set()
    for name, (kind, options, _origin, _version) in sorted(items.items()):
        if kind != MATCHER:
            continue
        if str(options.get("disable", 0)) in ("1", "true"):
            log.info("skipping disabled matcher '%s'", name)
            continue
        try:
            targets.update(notify.matched_targets(options, note))
        except notify.NotifyError as exc:
            log.error("matcher '%s' failed: %s", name, exc)
    return sorted(targets)


async def send(pool, note: notify.Notification) -> list[asyncio.Task]:
    """Route ``note`` and start its webhook deliveries; answers them (tests wait)."""
    async with pool.acquire() as conn:
        items = await _all(conn)
    started = []
    for target in route(items, note):
        if target not in items or items[target][0] == MATCHER:
            log.error("could not notify via target `%s`: it does not exist", target)
            continue
        kind, options, _origin, _version = items[target]
        if str(options.get("disable", 0)) in ("1", "true"):
            log.info("skipping disabled target '%s'", target)
            continue
        if kind != "webhook":
            log.info("target `%s` (%s): not delivered, the simulator sends no %s", target,
                     kind, "notifications to gotify" if kind == "gotify" else "mail")  # fmt: skip
            continue
        task = asyncio.create_task(_deliver_logged(target, options, note))
        _deliveries.add(task)
        task.add_done_callback(_deliveries.discard)
        started.append(task)
    return started


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
