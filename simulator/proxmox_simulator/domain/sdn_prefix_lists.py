"""SDN prefix lists (PVE 9.x ``/cluster/sdn/prefix-lists``): FRR ``ip prefix-list``s
kept in ``sdn/prefix-lists.cfg``, pending until an apply like the rest of the SDN.

Entries keep the order they were written in (an updated one moves to the end;
FRR orders them by sequence number); one without a number gets the highest
existing number + 5 (FRR's rule).  An entry's ``ge``/``le`` must lie between the
prefix's mask and the address family's maximum, ``ge`` not above ``le``.
"""

from __future__ import annotations

import ipaddress
import re

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import sdn_service as sdn
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import section_configs as repo

WHAT = "prefix-lists"
FILE = sdn.FILES[WHAT]
KIND = "prefix-list"
_RESERVED = frozenset({"only_default", "only_default_v6", "loopbacks_ips"})
_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-_]{0,30}[a-zA-Z0-9]?$")
_FIELDS = ("action", "prefix", "le", "ge", "seq")  # PVE's property-string order


def check_id(list_id: str) -> None:
    if list_id in _RESERVED:
        raise ParameterError(
            {"id": f"prefix list ID '{list_id}' is currently reserved and cannot be used"}
        )
    if not _ID.match(list_id):
        raise ParameterError({"id": f"prefix list ID '{list_id}' contains illegal characters"})


def _int(name: str, value, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ParameterError({name: f"type check ('integer') failed - got '{value}'"}) from None
    if not low <= number <= high:
        raise ParameterError({name: f"value must be between {low} and {high}"})
    return number


def parse_entry(value, *, partial: bool = False) -> dict:
    """An entry from API input: a property string (``entries``) or the entry's own
    parameters; ``partial`` for an update, where every field is optional."""
    if isinstance(value, str):
        value = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
    entry: dict = {}
    action = value.get("action")
    if action is not None:
        if action not in ("permit", "deny"):
            raise ParameterError(
                {
                    "action": f"value '{action}' does not have a value in the enumeration 'permit, deny'"
                }
            )
        entry["action"] = action
    if value.get("prefix") is not None:
        try:
            entry["prefix"] = str(ipaddress.ip_network(value["prefix"], strict=False))
        except ValueError:
            raise ParameterError({"prefix": f"invalid CIDR '{value['prefix']}'"}) from None
    for name, high in (("le", 128), ("ge", 128), ("seq", 2**32 - 1)):
        if value.get(name) not in (None, ""):
            entry[name] = _int(name, value[name], 1 if name == "seq" else 0, high)
    if not partial:
        for name in ("action", "prefix"):
            if name not in entry:
                raise ParameterError({name: "property is missing and it is not optional"})
    return entry


def _validate(entry: dict) -> None:
    network = ipaddress.ip_network(entry["prefix"])
    top, mask = network.max_prefixlen, network.prefixlen
    le, ge = entry.get("le"), entry.get("ge")
    if le is not None:
        if le > top:
            raise PveError(f"Prefix <= must not be greater than {top}")
        if mask > le:
            raise PveError(f"Prefix <= must not be less than {mask}")
        if ge is not None and ge > le:
            raise PveError(f"Prefix >= ({ge}) must not be greater than Prefix <= ({le})")
    if ge is not None:
        if ge > top:
            raise PveError(f"Prefix >= must not be greater than {top}")
        if mask > ge:
            raise PveError(f"Prefix >= must not be less than {mask}")


def _next_seq(entries: list[dict]) -> int:
    return max((e["seq"] for e in entries), default=0) + 5


def _insert(entries: list[dict], entry: dict) -> list[dict]:
    """``entries`` with ``entry`` added: a given sequence number must be free."""
    if any(e["seq"] == entry.get("seq") for e in entries):
        raise PveError(f"entry with sequence number {entry['seq']} already exists!")
    entry = {**entry, "seq": entry.get("seq") or _next_seq(entries)}
    _validate(entry)
    return [*entries, {k: entry[k] for k in _FIELDS if k in entry}]


def _entries_param(value) -> list[dict]:
    items = value if isinstance(value, list) else [value] if value else []
    entries: list[dict] = []
    for item in items:
        entries = _insert(entries, parse_entry(item))
    return entries


def entry_string(entry: dict) -> str:
    return ",".join(f"{k}={entry[k]}" for k in _FIELDS if k in entry)


def _shown(section: dict | None) -> dict | None:
    if section is None:
        return None
    shown = {"type": section["type"]}
    if section.get("entries"):
        shown["entries"] = [entry_string(e) for e in section["entries"]]
    return shown


async def list_prefix_lists(rt, params: dict) -> list[dict]:
    async with rt.pool.acquire() as conn:
        current = await sdn._current(conn, WHAT)
        running = (await sdn._running(conn)).get(WHAT, {})
        digest = await sdn._file_digest(conn, WHAT)
    mode = sdn._mode(params)
    ids = set(running) if mode == "running" else set(current)
    if mode == "pending":
        ids |= set(running)
    return [
        sdn._render(WHAT, i, _shown(current.get(i)), _shown(running.get(i)), digest, mode)
        for i in sorted(ids)
    ]


async def _section(rt, list_id: str) -> dict | None:
    async with rt.pool.acquire() as conn:
        return (await sdn._current(conn, WHAT)).get(list_id)


async def get_prefix_list(rt, list_id: str) -> dict:
    section = await _section(rt, list_id)
    if section is None:
        raise ParameterError({"id": f"{list_id} doesn't exist"})
    return {"id": list_id, **_shown(section)}


async def _mutate(rt, list_id: str, errmsg: str, params: dict, change) -> None:
    """Run ``change(entries or None) -> entries | None | False`` on the list under the
    SDN lock: a list of entries is written (created if new), ``None`` deletes it."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await sdn._lock_domain(conn, params.get("lock-token"), errmsg)
        try:
            sections.check_digest(params.get("digest"), await sdn._file_digest(conn, WHAT))
            row = await repo.section(conn, FILE, list_id, for_update=True)
            entries = change(None if row is None else row["options"].get("entries", []))
        except ParameterError:
            raise
        except PveError as error:
            raise PveError(f"{errmsg}: {error.message}") from None
        if entries is None:
            await repo.delete(conn, FILE, list_id)
        elif row is None:
            await repo.insert(conn, FILE, list_id, KIND, {"entries": entries})
        else:
            saved = await repo.update(conn, FILE, list_id, row["version"], {"entries": entries})
            sections.require_saved(saved)


def _existing(entries, list_id: str, message: str) -> list[dict]:
    if entries is None:
        raise PveError(message.format(id=list_id))
    return entries


async def create_prefix_list(rt, params: dict) -> None:
    list_id = params["id"]
    check_id(list_id)

    def change(entries):
        if entries is not None:
            raise PveError(f"prefix list already exists in configuration: {list_id}")
        return _entries_param(params.get("entries"))

    await _mutate(rt, list_id, "creating prefix list failed", params, change)


async def update_prefix_list(rt, list_id: str, params: dict) -> None:
    deleted = sections.split_list(params.get("delete"))
    for key in deleted:
        if key != "entries":
            raise ParameterError(
                {"delete": f"value '{key}' does not have a value in the enumeration 'entries'"}
            )

    def change(entries):
        entries = _existing(entries, list_id, "Could not find prefix list with id: {id}")
        if params.get("entries") is not None:
            entries = _entries_param(params["entries"])
        return [] if deleted else entries

    await _mutate(rt, list_id, "updating prefix list failed", params, change)


async def delete_prefix_list(rt, list_id: str, params: dict) -> None:
    def change(entries):
        _existing(entries, list_id, "could not find prefix list with id: {id}")
        return None

    await _mutate(rt, list_id, "deleting prefix list failed", params, change)


async def list_entries(rt, list_id: str) -> list[dict]:
    section = await _section(rt, list_id)
    if section is None:
        raise PveError(f"could not find prefix list with id: {list_id}")
    return list(section.get("entries", []))


async def get_entry(rt, list_id: str, seq) -> dict:
    section = await _section(rt, list_id) or {}
    for entry in section.get("entries", []):
        if str(entry["seq"]) == str(seq):
            return entry
    raise ParameterError({"id": f"entry {seq} in prefix list {list_id} doesn't exist"})


async def create_entry(rt, list_id: str, params: dict) -> None:
    entry = parse_entry(params)

    def change(entries):
        entries = _existing(entries, list_id, "could not find prefix list with id {id}")
        return _insert(entries, entry)

    await _mutate(rt, list_id, "creating prefix list entry failed", params, change)


async def update_entry(rt, list_id: str, seq, params: dict) -> None:
    old_seq = _int("url_seq", seq, 0, 2**32 - 1)
    updates = parse_entry(params, partial=True)
    deleted = sections.split_list(params.get("delete"))
    for key in deleted:
        if key not in ("le", "ge", "seq"):
            raise ParameterError(
                {"delete": f"value '{key}' does not have a value in the enumeration 'le, ge, seq'"}
            )

    def change(entries):
        entries = _existing(entries, list_id, "could not find prefix list with id {id}")
        new_seq = updates.get("seq")
        if new_seq is not None and new_seq != old_seq and any(e["seq"] == new_seq for e in entries):
            raise PveError(f"entry with sequence number {new_seq} already exists!")
        original = next((e for e in entries if e["seq"] == old_seq), None)
        if original is None:
            raise PveError(f"entry with sequence number {old_seq} does not exist!")
        rest = [e for e in entries if e is not original]
        entry = {**original, **updates}
        for key in deleted:
            if key == "seq":
                entry["seq"] = _next_seq(rest)
            else:
                entry.pop(key, None)
        return _insert(rest, entry)

    await _mutate(rt, list_id, "updating prefix list entry failed", params, change)


async def delete_entry(rt, list_id: str, seq, params: dict) -> None:
    def change(entries):
        kept = [e for e in entries or [] if str(e["seq"]) != str(seq)]
        if entries is None or len(kept) == len(entries):
            raise PveError(f"could not find prefix list entry with seq {seq}")
        return kept

    await _mutate(rt, list_id, "deleting prefix list entry failed", params, change)


def frr_lines(config: dict) -> list[str]:
    """The ``ip prefix-list`` lines of frr.conf for one SDN configuration."""
    lines = []
    for list_id, section in sorted(config.get(WHAT, {}).items()):
        for entry in sorted(section.get("entries", []), key=lambda e: e["seq"]):
            family = "ipv6" if ":" in entry["prefix"] else "ip"
            line = f"{family} prefix-list {list_id} seq {entry['seq']} {entry['action']} {entry['prefix']}"
            line += "".join(f" {k} {entry[k]}" for k in ("ge", "le") if k in entry)
            lines.append(line)
    return lines
