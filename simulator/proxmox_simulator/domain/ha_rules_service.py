"""PVE 9 HA rules (/etc/pve/ha/rules.cfg): node-affinity and resource-affinity.

The contract's per-type parameter sets are checked before this code runs; here
the rules are stored, listed with their defaults, ordinal and the file digest,
and checked for feasibility against each other as PVE's HA manager does.
"""

from __future__ import annotations

import hashlib

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import ha as ha_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as section_repo

RULES_FILE = "ha/rules.cfg"
NODE_AFFINITY, RESOURCE_AFFINITY = "node-affinity", "resource-affinity"
# Options each rule type keeps, and whether ``delete`` may remove them.
OPTIONS = {
    NODE_AFFINITY: {
        "resources": False,
        "nodes": False,
        "affinity": True,
        "strict": True,
        "disable": True,
        "comment": True,
    },
    RESOURCE_AFFINITY: {"resources": False, "affinity": False, "disable": True, "comment": True},
}
# Defaults PVE fills in when a rule is read (only truthy ones, as it does).
_READ_DEFAULTS = {NODE_AFFINITY: {"affinity": "positive"}, RESOURCE_AFFINITY: {}}


def _file_digest(rows) -> str:
    state = "\0".join(f"{r['id']}:{r['version']}" for r in sorted(rows, key=lambda r: r["id"]))
    return hashlib.sha1(f"ha-rules\0{state}".encode()).hexdigest()


def _resources(value) -> list[str]:
    return sorted(set(sections.split_list(value)))


def _nodes(value) -> dict[str, int]:
    """``node[:priority]`` entries → node → priority (0 when not given)."""
    nodes = {}
    for entry in sections.split_list(value):
        name, _, priority = entry.partition(":")
        nodes[name] = int(priority) if priority.isascii() and priority.isdigit() else 0
    return nodes


def _encode_nodes(nodes: dict[str, int]) -> str:
    return ",".join(f"{n}:{p}" if p else n for n, p in sorted(nodes.items()))


def _canonical(kind: str, options: dict) -> dict:
    """Stored form: sorted lists, as PVE writes them back."""
    out = dict(options)
    if "resources" in out:
        out["resources"] = ",".join(_resources(out["resources"]))
    if "nodes" in out:
        out["nodes"] = _encode_nodes(_nodes(out["nodes"]))
    return out


def _entry(row, digest: str, errors: dict | None) -> dict:
    options = dict(row["options"])
    order = options.pop("order")
    entry = {**_READ_DEFAULTS[row["type"]], **options}
    entry.update(rule=row["id"], type=row["type"], digest=digest, order=order)
    if errors:
        entry["errors"] = errors
    return entry


def _is_enabled(options: dict) -> bool:
    return not options.get("disable")


def feasibility_errors(rules: dict[str, tuple[str, dict]], node_count: int) -> dict:
    """Rule id → option → messages, for enabled rules that cannot all hold at once."""
    errors: dict[str, dict[str, list[str]]] = {}

    def blame(rule_id: str, message: str) -> None:
        errors.setdefault(rule_id, {}).setdefault("resources", []).append(message)

    enabled = {rid: (kind, opts) for rid, (kind, opts) in rules.items() if _is_enabled(opts)}
    users: dict[str, list[str]] = {}
    for rule_id, (kind, options) in sorted(enabled.items()):
        if kind == NODE_AFFINITY:
            for sid in _resources(options.get("resources")):
                users.setdefault(sid, []).append(rule_id)
    for sid, rule_ids in sorted(users.items()):
        if len(rule_ids) > 1:
            for rule_id in rule_ids:
                blame(rule_id, f"resource '{sid}' is already used in another node affinity rule")
    affinity = {
        rid: (opts.get("affinity"), set(_resources(opts.get("resources"))))
        for rid, (kind, opts) in sorted(enabled.items())
        if kind == RESOURCE_AFFINITY
    }
    for rule_id, (sign, members) in affinity.items():
        if len(members) < 2:
            blame(rule_id, "rule is ineffective as there are less than two resources")
        if sign == "negative" and len(members) > node_count:
            blame(rule_id, "rule defines more resources than available nodes")
    for positive_id, (sign, members) in affinity.items():
        if sign != "positive":
            continue
        for negative_id, (other_sign, others) in affinity.items():
            if other_sign == "negative" and len(members & others) >= 2:
                blame(
                    positive_id,
                    "rule shares two or more resources with a negative resource affinity rule",
                )
                blame(
                    negative_id,
                    "rule shares two or more resources with a positive resource affinity rule",
                )
    return errors


async def _state(conn):
    rows = await section_repo.sections(conn, RULES_FILE)
    nodes = await inventory.nodes(conn)
    rules = {r["id"]: (r["type"], dict(r["options"])) for r in rows}
    return rows, rules, len(nodes)


async def list_rules(rt, type_filter: str | None, resource: str | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows, rules, node_count = await _state(conn)
    digest = _file_digest(rows)
    errors = feasibility_errors(rules, node_count)
    return [
        _entry(row, digest, errors.get(row["id"]))
        for row in sorted(rows, key=lambda r: (r["options"]["order"], r["id"]))
        if type_filter in (None, row["type"])
        and (resource is None or resource in _resources(row["options"].get("resources")))
    ]


async def get_rule(rt, rule_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        rows, rules, node_count = await _state(conn)
    row = next((r for r in rows if r["id"] == rule_id), None)
    if row is None:
        raise PveError(f"no such ha rule '{rule_id}'")
    errors = feasibility_errors(rules, node_count).get(rule_id)
    return _entry(row, _file_digest(rows), errors)


async def _check_references(conn, options: dict) -> None:
    """Rules may only name HA-managed resources and cluster nodes."""
    unmanaged = [
        sid
        for sid in _resources(options.get("resources"))
        if await ha_repo.resource(conn, sid) is None
    ]
    if unmanaged:
        raise PveError(f"cannot use unmanaged resource(s) {', '.join(unmanaged)}.")
    if "nodes" in options:
        known = {n["node"] for n in await inventory.nodes(conn)}
        missing = sorted(n for n in _nodes(options["nodes"]) if n not in known)
        if missing:
            raise PveError(f"cannot use non-existant node(s) {', '.join(missing)}.")


def _assert_feasible(rules: dict, node_count: int, rule_id: str) -> None:
    errors = feasibility_errors(rules, node_count).get(rule_id)
    if errors:
        raise PveError(
            f"Rule '{rule_id}' is invalid.",
            status=400,
            errors={option: ", ".join(messages) for option, messages in errors.items()},
        )


async def create_rule(rt, params: dict) -> None:
    rule_id, kind = params["rule"], params["type"]
    options = _canonical(kind, {k: v for k, v in params.items() if k in OPTIONS[kind]})
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, RULES_FILE)
        rows, rules, node_count = await _state(conn)
        if rule_id in rules:
            raise PveError(f"HA rule '{rule_id}' already defined")
        await _check_references(conn, options)
        options["order"] = max((r["options"]["order"] for r in rows), default=0) + 1
        rules[rule_id] = (kind, options)
        _assert_feasible(rules, node_count, rule_id)
        await section_repo.insert(conn, RULES_FILE, rule_id, kind, options)


def _apply_update(kind: str, current: dict, params: dict) -> dict:
    options = dict(current)
    schema = OPTIONS[kind]
    for key in sections.split_list(params.get("delete")):
        if key not in schema:
            raise PveError(f"no such option '{key}'")
        if not schema[key]:
            raise PveError(f"unable to delete required option '{key}'")
        if key in params:
            raise PveError(f"cannot set and delete property '{key}' at the same time!")
        options.pop(key, None)
    options.update({k: v for k, v in params.items() if k in schema})
    return _canonical(kind, options)


async def update_rule(rt, rule_id: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, RULES_FILE)
        rows, rules, node_count = await _state(conn)
        sections.check_digest(params.get("digest"), _file_digest(rows))
        row = next((r for r in rows if r["id"] == rule_id), None)
        if row is None:
            raise PveError(f"HA rule '{rule_id}' does not exist")
        kind = row["type"]
        if params["type"] != kind:
            # The stored rule's type owns no ``type`` option to change.
            raise PveError("unexpected property 'type'")
        options = _apply_update(kind, dict(row["options"]), params)
        # Only what this request names is checked, as PVE does.
        await _check_references(conn, {k: params[k] for k in ("resources", "nodes") if k in params})
        rules[rule_id] = (kind, options)
        _assert_feasible(rules, node_count, rule_id)
        sections.require_saved(
            await section_repo.update(conn, RULES_FILE, rule_id, row["version"], options)
        )


async def delete_rule(rt, rule_id: str) -> None:
    # PVE deletes whatever is there and answers success for an unknown rule too.
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, RULES_FILE)
        await section_repo.delete(conn, RULES_FILE, rule_id)
