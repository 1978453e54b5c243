"""PVE firewall configuration: options, ordered rules, security groups, aliases, IP sets.

A scope is one firewall file: ``cluster`` (cluster.fw), ``node/<node>``
(host.fw), ``vm/<vmid>`` (<vmid>.fw), ``vnet/<vnet>`` (sdn/firewall/<vnet>.fw)
and ``group/<name>`` (a security group's rules inside cluster.fw).  Every write locks the scope's row, checks the
client's digest and bumps the version, like PVE's locked file rewrite.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import firewall_macros
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import load_guest, require_node
from proxmox_simulator.repositories import firewall as fw_repo
from proxmox_simulator.repositories import section_configs as section_repo

CLUSTER = "cluster"
_RULE_ACTIONS = {"ACCEPT", "DROP", "REJECT"}
# Parameters that address or guard a rule rather than being part of it.
_NOT_RULE_DATA = frozenset({"pos", "digest", "delete", "moveto", "node", "vmid", "group", "vnet"})


@dataclass(frozen=True)
class Scope:
    key: str

    @property
    def kind(self) -> str:
        return self.key.split("/", 1)[0]


async def cluster_scope(rt) -> Scope:
    return Scope(CLUSTER)


async def node_scope(rt, node: str) -> Scope:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return Scope(f"node/{node}")


async def guest_scope(rt, kind: str, node: str, vmid: int) -> Scope:
    async with rt.pool.acquire() as conn:
        await load_guest(conn, kind, node, vmid)
    return Scope(f"vm/{vmid}")


async def vnet_scope(rt, vnet: str) -> Scope:
    async with rt.pool.acquire() as conn:
        row = await section_repo.section(conn, "sdn/vnets.cfg", vnet)
    if row is None:
        raise PveError(f"sdn vnet '{vnet}' does not exist")
    return Scope(f"vnet/{vnet}")


async def group_scope(rt, group: str) -> Scope:
    async with rt.pool.acquire() as conn:
        row = await fw_repo.get(conn, f"group/{group}")
    if row is None:
        raise PveError(f"no such security group '{group}'")
    return Scope(f"group/{group}")


def _digest(scope: Scope, version: int) -> str:
    # Security groups live in cluster.fw in PVE, but each has its own row here.
    return sections.digest("firewall", scope.key, version)


class _Config:
    """A scope's file contents while its row is locked."""

    def __init__(self, row) -> None:
        self.version = row["version"]
        self.options = dict(row["options"])
        self.rules = [dict(r) for r in row["rules"]]
        self.aliases = dict(row["aliases"])
        self.ipsets = {k: dict(v) for k, v in row["ipsets"].items()}


async def _read(rt, scope: Scope):
    async with rt.pool.acquire() as conn:
        row = await fw_repo.get(conn, scope.key)
    if row is None:
        return None, _digest(scope, 0)
    return _Config(row), _digest(scope, row["version"])


async def _write(rt, scope: Scope, digest: str | None, change) -> None:
    """Lock the scope's row, verify ``digest``, apply ``change(config)``, save."""
    async with rt.pool.acquire() as conn, conn.transaction():
        existed = await fw_repo.get(conn, scope.key) is not None
        row = await fw_repo.lock(conn, scope.key)
        current = _digest(scope, row["version"] if existed else 0)
        sections.check_digest(digest, current)
        config = _Config(row)
        await change(conn, config)
        sections.require_saved(
            await fw_repo.save(
                conn,
                scope.key,
                row["version"],
                options=config.options,
                rules=config.rules,
                aliases=config.aliases,
                ipsets=config.ipsets,
            )
        )


# -- rules ------------------------------------------------------------------------


def _ip_version(value: str | None) -> int | None:
    if not value:
        return None
    first = value.split(",", 1)[0].split("-", 1)[0]
    try:
        return ipaddress.ip_network(first, strict=False).version
    except ValueError:
        return None  # an alias or IP set name


def _render_rule(rule: dict, pos: int, digest: str) -> dict:
    entry = {"pos": pos, **rule, "digest": digest}
    version = _ip_version(rule.get("source")) or _ip_version(rule.get("dest"))
    if version:
        entry["ipversion"] = version
    return entry


async def list_rules(rt, scope: Scope) -> list[dict]:
    config, digest = await _read(rt, scope)
    rules = config.rules if config else []
    return [_render_rule(rule, pos, digest) for pos, rule in enumerate(rules)]


def _rule_at(config: _Config | None, pos: int) -> dict:
    if config is None or not 0 <= pos < len(config.rules):
        raise PveError(f"no rule at position {pos}", status=400)
    return config.rules[pos]


async def get_rule(rt, scope: Scope, pos: int) -> dict:
    config, digest = await _read(rt, scope)
    return _render_rule(_rule_at(config, pos), pos, digest)


async def _verify_rule(conn, scope: Scope, rule: dict) -> None:
    kind = rule.get("type")
    action = rule.get("action")
    if kind == "group":
        if scope.kind == "group":
            raise PveError("security groups cannot reference other security groups", status=400)
        if await fw_repo.get(conn, f"group/{action}") is None:
            raise ParameterError({"action": f"security group '{action}' does not exist"})
    elif action not in _RULE_ACTIONS:
        raise ParameterError({"action": f"unknown action '{action}'"})
    if rule.get("macro"):
        rule["macro"] = firewall_macros.canonical(rule["macro"])
    for key in ("source", "dest"):
        await _verify_address(conn, scope, key, rule.get(key))


async def _verify_address(conn, scope: Scope, key: str, value: str | None) -> None:
    """Addresses are IPs/CIDRs/ranges, or names of aliases or IP sets that exist."""
    if not value:
        return
    for part in value.split(","):
        candidates = part.split("-", 1)
        if all(_ip_version(c) for c in candidates):
            continue
        name = part.lstrip("+").split("/", 1)[-1].lower()
        if not await _name_defined(conn, scope, name, ipset=part.startswith("+")):
            raise ParameterError(
                {key: f"no such {'ipset' if part.startswith('+') else 'alias'} '{part}'"}
            )


async def _name_defined(conn, scope: Scope, name: str, *, ipset: bool) -> bool:
    keys = [scope.key, CLUSTER] if scope.kind == "vm" else [CLUSTER]
    for key in keys:
        row = await fw_repo.get(conn, key)
        if row is None:
            continue
        table = row["ipsets"] if ipset else row["aliases"]
        if name in {k.lower() for k in table}:
            return True
    return False


def rule_keys(parameter_names) -> frozenset[str]:
    """The rule fields a contract's rule method accepts (version-dependent)."""
    return frozenset(parameter_names) - _NOT_RULE_DATA


async def create_rule(rt, scope: Scope, params: dict, keys: frozenset[str]) -> None:
    rule = {k: params[k] for k in sorted(keys) if k in params and params[k] not in (None, "")}
    # PVE stores new rules disabled unless asked, and always at the top (pos is ignored).
    rule.setdefault("enable", 0)

    async def change(conn, config: _Config) -> None:
        await _verify_rule(conn, scope, rule)
        config.rules.insert(0, rule)

    await _write(rt, scope, params.get("digest"), change)


async def update_rule(rt, scope: Scope, pos: int, params: dict, keys: frozenset[str]) -> None:
    async def change(conn, config: _Config) -> None:
        rule = _rule_at(config, pos)
        moveto = params.get("moveto")
        if moveto is not None:
            # PVE: the rule lands before the rule now at ``moveto``; other arguments are ignored.
            rest = [r for i, r in enumerate(config.rules) if i != pos]
            target = moveto if moveto <= pos else moveto - 1
            rest.insert(min(max(target, 0), len(rest)), rule)
            config.rules = rest
            return
        updated = sections.updated_options(rule, params, keys)
        await _verify_rule(conn, scope, updated)
        config.rules[pos] = updated

    await _write(rt, scope, params.get("digest"), change)


async def delete_rule(rt, scope: Scope, pos: int, digest: str | None) -> None:
    async def change(conn, config: _Config) -> None:
        _rule_at(config, pos)
        del config.rules[pos]

    await _write(rt, scope, digest, change)


# -- options ------------------------------------------------------------------------


async def get_options(rt, scope: Scope) -> dict:
    config, digest = await _read(rt, scope)
    return {**(config.options if config else {}), "digest": digest}


async def set_options(rt, scope: Scope, params: dict, keys: frozenset[str]) -> None:
    async def change(conn, config: _Config) -> None:
        config.options = sections.updated_options(config.options, params, keys)

    await _write(rt, scope, params.get("digest"), change)


# -- aliases ------------------------------------------------------------------------


def _check_cidr(value: str) -> str:
    try:
        if "/" in value:
            ipaddress.ip_network(value, strict=False)
        else:
            ipaddress.ip_address(value)
    except ValueError:
        raise ParameterError(
            {"cidr": f"value '{value}' does not look like a valid CIDR network"}
        ) from None
    return value


def _find(table: dict, name: str) -> str | None:
    for key in table:
        if key.lower() == name.lower():
            return key
    return None


async def list_aliases(rt, scope: Scope) -> list[dict]:
    config, digest = await _read(rt, scope)
    aliases = config.aliases if config else {}
    return [
        {"name": name, **aliases[name], "digest": digest} for name in sorted(aliases, key=str.lower)
    ]


async def get_alias(rt, scope: Scope, name: str) -> dict:
    config, digest = await _read(rt, scope)
    key = _find(config.aliases, name) if config else None
    if key is None:
        raise PveError(f"no such alias '{name}'")
    return {"name": key, **config.aliases[key], "digest": digest}


async def create_alias(rt, scope: Scope, params: dict) -> None:
    name = params["name"]
    entry = {"cidr": _check_cidr(params["cidr"])}
    if params.get("comment"):
        entry["comment"] = params["comment"]

    async def change(conn, config: _Config) -> None:
        if _find(config.aliases, name):
            raise PveError(f"alias '{name}' already exists")
        config.aliases[name] = entry

    await _write(rt, scope, params.get("digest"), change)


async def update_alias(rt, scope: Scope, name: str, params: dict) -> None:
    async def change(conn, config: _Config) -> None:
        key = _find(config.aliases, name)
        if key is None:
            raise PveError(f"no such alias '{name}'")
        entry = {"cidr": _check_cidr(params["cidr"])}
        if params.get("comment"):
            entry["comment"] = params["comment"]
        new_name = params.get("rename") or key
        if new_name.lower() != key.lower() and _find(config.aliases, new_name):
            raise PveError(f"alias '{new_name}' already exists")
        del config.aliases[key]
        config.aliases[new_name] = entry

    await _write(rt, scope, params.get("digest"), change)


async def delete_alias(rt, scope: Scope, name: str, digest: str | None) -> None:
    async def change(conn, config: _Config) -> None:
        key = _find(config.aliases, name)
        if key is not None:  # PVE deletes idempotently
            del config.aliases[key]

    await _write(rt, scope, digest, change)


# -- IP sets ------------------------------------------------------------------------


async def list_ipsets(rt, scope: Scope) -> list[dict]:
    config, digest = await _read(rt, scope)
    ipsets = config.ipsets if config else {}
    out = []
    for name in sorted(ipsets, key=str.lower):
        entry = {"name": name, "digest": digest}
        if ipsets[name].get("comment"):
            entry["comment"] = ipsets[name]["comment"]
        out.append(entry)
    return out


async def create_ipset(rt, scope: Scope, params: dict) -> None:
    name = params["name"]

    async def change(conn, config: _Config) -> None:
        rename = params.get("rename")
        if rename:
            key = _find(config.ipsets, rename)
            if key is None:
                raise PveError(f"no such IPSet '{rename}'")
            if _find(config.ipsets, name) and name.lower() != key.lower():
                raise PveError(f"IPSet '{name}' already exists")
            ipset = config.ipsets.pop(key)
        else:
            if _find(config.ipsets, name):
                raise PveError(f"IPSet '{name}' already exists")
            ipset = {"entries": []}
        if "comment" in params:
            ipset["comment"] = params["comment"] or ""
        config.ipsets[name] = ipset

    await _write(rt, scope, params.get("digest"), change)


def _ipset(config: _Config | None, name: str) -> tuple[str, dict]:
    key = _find(config.ipsets, name) if config else None
    if key is None:
        raise PveError(f"no such IPSet '{name}'")
    return key, config.ipsets[key]


async def ipset_entries(rt, scope: Scope, name: str) -> list[dict]:
    config, digest = await _read(rt, scope)
    _key, ipset = _ipset(config, name)
    return [{**entry, "digest": digest} for entry in ipset["entries"]]


async def delete_ipset(rt, scope: Scope, name: str, force: bool, digest: str | None) -> None:
    async def change(conn, config: _Config) -> None:
        key, ipset = _ipset(config, name)
        if ipset["entries"] and not force:
            raise PveError(f"IPSet '{name}' is not empty")
        del config.ipsets[key]

    await _write(rt, scope, digest, change)


def _entry_index(ipset: dict, cidr: str) -> int | None:
    for index, entry in enumerate(ipset["entries"]):
        if entry["cidr"] == cidr:
            return index
    return None


async def add_ipset_entry(rt, scope: Scope, name: str, params: dict) -> None:
    cidr = params["cidr"]
    if not cidr.startswith(("+", "dc/", "guest/")) and _ip_version(cidr) is None:
        _check_cidr(cidr)

    async def change(conn, config: _Config) -> None:
        _key, ipset = _ipset(config, name)
        if _entry_index(ipset, cidr) is not None:
            raise PveError(f"entry '{cidr}' already exists")
        entry = {"cidr": cidr}
        if params.get("nomatch"):
            entry["nomatch"] = 1
        if params.get("comment"):
            entry["comment"] = params["comment"]
        ipset["entries"].append(entry)

    await _write(rt, scope, params.get("digest"), change)


async def get_ipset_entry(rt, scope: Scope, name: str, cidr: str) -> dict:
    config, digest = await _read(rt, scope)
    _key, ipset = _ipset(config, name)
    index = _entry_index(ipset, cidr)
    if index is None:
        raise PveError(f"no such IP/Network '{cidr}'")
    return {**ipset["entries"][index], "digest": digest}


async def update_ipset_entry(rt, scope: Scope, name: str, cidr: str, params: dict) -> None:
    async def change(conn, config: _Config) -> None:
        _key, ipset = _ipset(config, name)
        index = _entry_index(ipset, cidr)
        if index is None:
            raise PveError(f"no such IP/Network '{cidr}'")
        entry = {"cidr": cidr}
        if params.get("nomatch"):
            entry["nomatch"] = 1
        if params.get("comment"):
            entry["comment"] = params["comment"]
        ipset["entries"][index] = entry

    await _write(rt, scope, params.get("digest"), change)


async def delete_ipset_entry(rt, scope: Scope, name: str, cidr: str, digest: str | None) -> None:
    async def change(conn, config: _Config) -> None:
        _key, ipset = _ipset(config, name)
        index = _entry_index(ipset, cidr)
        if index is not None:
            del ipset["entries"][index]

    await _write(rt, scope, digest, change)


# -- security groups ------------------------------------------------------------------


async def list_groups(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await fw_repo.scopes_with_prefix(conn, "group/")
    out = []
    for row in rows:
        scope = Scope(row["scope"])
        entry = {"group": scope.key.split("/", 1)[1], "digest": _digest(scope, row["version"])}
        if row["options"].get("comment"):
            entry["comment"] = row["options"]["comment"]
        out.append(entry)
    return out


async def create_group(rt, params: dict) -> None:
    group = params["group"]
    rename = params.get("rename")
    async with rt.pool.acquire() as conn, conn.transaction():
        if rename:
            old = await fw_repo.get(conn, f"group/{rename}")
            if old is None:
                raise PveError(f"no such security group '{rename}'")
            await fw_repo.delete(conn, f"group/{rename}")
            rules = old["rules"]
        else:
            rules = []
        if await fw_repo.get(conn, f"group/{group}") is not None:
            raise PveError(f"security group '{group}' already exists")
        row = await fw_repo.lock(conn, f"group/{group}")
        options = {"comment": params["comment"]} if params.get("comment") else {}
        sections.require_saved(
            await fw_repo.save(
                conn,
                row["scope"],
                row["version"],
                options=options,
                rules=rules,
                aliases={},
                ipsets={},
            )
        )


async def delete_group(rt, group: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await fw_repo.lock(conn, f"group/{group}")
        if row["rules"]:
            raise PveError("security group is not empty")
        await fw_repo.delete(conn, f"group/{group}")


# -- refs and log -----------------------------------------------------------------------


async def refs(rt, scope: Scope, ref_type: str | None) -> list[dict]:
    """Names usable as ``source``/``dest``: this scope's and the cluster's aliases and IP sets."""
    keys = [scope.key, CLUSTER] if scope.kind == "vm" else [CLUSTER]
    out = []
    for key in keys:
        config, _digest_ = await _read(rt, Scope(key))
        if config is None:
            continue
        where = "dc" if key == CLUSTER else "guest"
        if ref_type in (None, "alias"):
            for name, alias in config.aliases.items():
                out.append(
                    {
                        "type": "alias",
                        "name": name,
                        "ref": f"{where}/{name}",
                        "scope": where,
                        **({"comment": alias["comment"]} if alias.get("comment") else {}),
                    }
                )
        if ref_type in (None, "ipset"):
            for name, ipset in config.ipsets.items():
                out.append(
                    {
                        "type": "ipset",
                        "name": name,
                        "ref": f"+{where}/{name}",
                        "scope": where,
                        **({"comment": ipset["comment"]} if ipset.get("comment") else {}),
                    }
                )
    return out


def log_lines() -> list[dict]:
    """The simulator carries no packets, so no firewall ever logs one."""
    return []
