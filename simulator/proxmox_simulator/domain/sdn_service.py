"""SDN zones, VNets and subnets with PVE's pending/apply model.

Edits change the configuration files at once; nodes keep running the last
applied configuration until ``PUT /cluster/sdn`` (a ``reloadnetworkall``
task) makes the current files the running ones.  ``pending=1`` shows what
an apply would change, ``running=1`` what is applied.
"""

from __future__ import annotations

import ipaddress
import re
import uuid

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as repo
from proxmox_simulator.tasks.service import enqueue

FILES = {
    "zones": "sdn/zones.cfg",
    "vnets": "sdn/vnets.cfg",
    "subnets": "sdn/subnets.cfg",
    "controllers": "sdn/controllers.cfg",
    "ipams": "sdn/ipams.cfg",
    "dns": "sdn/dns.cfg",
    "prefix-lists": "sdn/prefix-lists.cfg",
    "route-maps": "sdn/route-maps.cfg",
    "fabrics": "sdn/fabrics.cfg",
}
KEYS = {
    "zones": "zone",
    "vnets": "vnet",
    "subnets": "subnet",
    "controllers": "controller",
    "ipams": "ipam",
    "dns": "dns",
    "prefix-lists": "id",
    "route-maps": "route-map-id",
    "fabrics": "id",
}
# The built-in IPAM every cluster has.
BUILTIN_IPAM = {"pve": {"type": "pve"}}
_SECRETS = frozenset({"key", "token"})
# What each plugin type must be given.
_REQUIRED = {
    ("controllers", "evpn"): ("asn", "peers"),
    ("controllers", "bgp"): ("asn", "peers", "node"),
    ("controllers", "isis"): ("isis-domain", "isis-ifaces", "node"),
    ("ipams", "netbox"): ("url", "token"),
    ("ipams", "phpipam"): ("url", "token", "section"),
    ("dns", "powerdns"): ("url", "key"),
}
RUNNING_FILE, RUNNING_ID = "sdn/.running-config", "running"
_ID = re.compile(r"^[a-z][a-z0-9]{0,6}[a-z0-9]$")
_ZONE_TYPES = {"simple", "vlan", "qinq", "vxlan", "evpn"}
_TAGGED = {"vlan", "qinq", "vxlan", "evpn"}
_TAG_MAX = {"vlan": 4094, "qinq": 4094, "vxlan": 16777215, "evpn": 16777215}
_NOT_OPTIONS = frozenset({"type", "delete", "digest", "lock-token", "pending", "running"})


def _check_id(kind: str, value: str) -> None:
    if not _ID.match(value):
        raise ParameterError(
            {
                kind: f"invalid {kind} ID '{value}' (2-8 lowercase letters and digits, starting with a letter)"
            }
        )


async def _current(conn, what: str) -> dict[str, dict]:
    rows = await repo.sections(conn, FILES[what])
    found = {r["id"]: {"type": r["type"], **r["options"]} for r in rows}
    return {**BUILTIN_IPAM, **found} if what == "ipams" else found


async def _running(conn) -> dict:
    row = await repo.section(conn, RUNNING_FILE, RUNNING_ID)
    return row["options"] if row else {"zones": {}, "vnets": {}, "subnets": {}}


async def running_vnets(conn) -> set[str]:
    """VNets of the applied SDN configuration: each is a bridge on every node."""
    return set((await _running(conn))["vnets"])


def _render(
    what: str, section_id: str, current: dict | None, running: dict | None, digest: str, mode: str
) -> dict:
    key = KEYS[what]
    if current:
        current = {k: v for k, v in current.items() if k not in _SECRETS}
    if running:
        running = {k: v for k, v in running.items() if k not in _SECRETS}
    if mode == "running":
        return {key: section_id, **(running or {})}
    if mode != "pending":
        return {key: section_id, **(current or {}), "digest": digest}
    # PVE's pending view: the running values at the top, what an apply would change
    # under `pending` (a removed option as 'deleted'), list options compared and shown
    # joined; `type` and a subnet's `vnet` are the configuration's at the top.
    entry: dict = {key: section_id, **(running or {})}
    state, pending = None, {}
    for option, value in (running or {}).items():
        if current is None:
            state = "deleted"
        elif option not in current:
            pending[option], state = "deleted", "changed"
        elif _encoded(option, value) != _encoded(option, current[option]):
            state = "changed"
    for option, value in (current or {}).items():
        if option in ("type", "vnet"):
            entry[option] = value
        elif running is None or _encoded(option, value) != _encoded(option, running.get(option)):
            pending[option] = _encoded(option, value)
            if running is not None and option not in running:
                state = "changed"
    if current is not None and running is None:
        state = "new"
    if state:
        entry.update(state=state, pending=pending)
    entry["digest"] = digest
    return entry


def _encoded(option: str, value):
    """How PVE compares and shows a list option in the pending view: joined, sorted."""
    if option in ("nodes", "exitnodes", "dhcp-range") and isinstance(value, list):
        return ",".join(sorted(str(v) for v in value))
    return value


def _mode(params: dict) -> str:
    if params.get("running"):
        return "running"
    return "pending" if params.get("pending") else "current"


async def list_sections(rt, what: str, params: dict, *, vnet: str | None = None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        if vnet is not None:
            await _vnet_zone(conn, vnet)  # a missing vnet has no subnets to list
        current = await _current(conn, what)
        running = (await _running(conn)).get(what, {})
        digest = await _file_digest(conn, what)
    mode = _mode(params)
    ids = (
        set(running)
        if mode == "running"
        else set(current) | (set(running) if mode == "pending" else set())
    )
    out = []
    for section_id in sorted(ids):
        cur, run = current.get(section_id), running.get(section_id)
        owner = (cur or run or {}).get("vnet")
        if vnet is not None and owner != vnet:
            continue
        if what != "subnets" and params.get("type") and (cur or run)["type"] != params["type"]:
            continue
        entry = _render(what, section_id, cur, run, digest, mode)
        out.append(_subnet_entry(entry) if what == "subnets" else entry)
    return out


def _dhcp_range(spec: str) -> dict:
    """One ``pve-sdn-dhcp-range`` property string as the object PVE returns."""
    return dict(part.split("=", 1) for part in str(spec).split(",") if "=" in part)


def _subnet_entry(entry: dict) -> dict:
    """What PVE adds to every subnet it returns: the fields its ID encodes
    (``<zone>-<network>-<mask>``) and the DHCP ranges parsed into objects
    (always a list, empty when the subnet has none)."""
    zone, network, mask = entry["subnet"].split("-", 2)
    ranges = entry.get("dhcp-range") or []
    ranges = [ranges] if isinstance(ranges, str) else ranges
    if "pending" in entry:
        # The CIDR is the simulator's own record of the ID, no option PVE keeps.
        entry["pending"] = {k: v for k, v in entry["pending"].items() if k != "cidr"}
    return {
        **entry,
        "id": entry["subnet"],
        "cidr": f"{network}/{mask}",
        "zone": zone,
        "network": network,
        "mask": mask,
        "dhcp-range": [_dhcp_range(spec) for spec in ranges],
    }


async def _file_digest(conn, what: str) -> str:
    rows = await repo.sections(conn, FILES[what])
    return sections.digest(
        FILES[what], ",".join(f"{r['id']}:{r['version']}" for r in rows), len(rows)
    )


async def get_section(
    rt, what: str, section_id: str, params: dict, *, vnet: str | None = None
) -> dict:
    for entry in await list_sections(rt, what, params, vnet=vnet):
        if entry.get(KEYS[what]) == section_id:
            return entry
    raise PveError(f"sdn {what[:-1]} '{section_id}' does not exist")


async def _write(
    rt,
    what: str,
    section_id: str,
    kind: str | None,
    options: dict | None,
    digest: str | None,
    check,
    token: str | None = None,
) -> None:
    """Create (kind given), update (options given) or delete (neither) one section."""
    verb = "create" if kind is not None else "update" if options is not None else "delete"
    async with rt.pool.acquire() as conn, conn.transaction():
        await _lock_domain(conn, token, f"{verb} sdn {KEYS[what]} object failed")
        sections.check_digest(digest, await _file_digest(conn, what))
        existing = await repo.section(conn, FILES[what], section_id, for_update=True)
        await check(conn, existing)
        if kind is not None:
            if existing is not None:
                raise PveError(f"sdn {what[:-1]} '{section_id}' already exists")
            await repo.insert(conn, FILES[what], section_id, kind, options)
        elif options is not None:
            if existing is None:
                raise PveError(f"sdn {what[:-1]} '{section_id}' does not exist")
            sections.require_saved(
                await repo.update(conn, FILES[what], section_id, existing["version"], options)
            )
        else:
            if existing is None:
                raise PveError(f"sdn {what[:-1]} '{section_id}' does not exist")
            await repo.delete(conn, FILES[what], section_id)


def _options(params: dict, declared: set[str], what: str) -> dict:
    return {k: v for k, v in params.items() if k in _settable(declared, what)}


def _settable(declared: set[str], what: str) -> frozenset[str]:
    """Declared parameters that are options of a ``what`` section (not its IDs)."""
    ids = {KEYS[what]} | ({"vnet"} if what == "subnets" else set())
    return frozenset(declared) - _NOT_OPTIONS - ids


# -- the global SDN lock (PVE 8.4+: ``lock-token``) --------------------------------

LOCK_FILE, LOCK_ID = "sdn/.lock", "lock"
# The files an apply commits, so the ones whose changes count as pending.
_COMMITTED = ("zones", "vnets", "subnets", "controllers", "fabrics")


async def _lock_domain(conn, token: str | None, errmsg: str) -> None:
    """Take the SDN domain lock; while a client holds the global lock, only
    requests carrying its token may change the configuration."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pvesim:sdn'))")
    row = await repo.section(conn, LOCK_FILE, LOCK_ID)
    if row is not None and row["options"]["token"] != token:
        raise PveError(f"{errmsg}: invalid lock token provided!")


async def _has_pending_changes(conn) -> bool:
    running = await _running(conn)
    for what in _COMMITTED:
        if await _current(conn, what) != running.get(what, {}):
            return True
    return False


async def acquire_lock(rt, allow_pending: bool) -> str:
    errmsg = "could not acquire lock for SDN config"
    async with rt.pool.acquire() as conn, conn.transaction():
        await _lock_domain(conn, None, errmsg)
        if not allow_pending and await _has_pending_changes(conn):
            raise PveError(f"{errmsg}: configuration has pending changes")
        token = str(uuid.uuid4())
        await repo.insert(conn, LOCK_FILE, LOCK_ID, "lock", {"token": token})
        return token


async def release_lock(rt, token: str | None, force: bool) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not force:
            await _lock_domain(conn, token, "could not release lock")
        await repo.delete(conn, LOCK_FILE, LOCK_ID)


async def rollback(rt, token: str | None, release: bool) -> None:
    """The configuration files go back to the running (last applied) config."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await _lock_domain(conn, token, "could not rollback SDN configuration")
        running = await _running(conn)
        for what in _COMMITTED:
            applied = running.get(what, {})
            for row in await repo.sections(conn, FILES[what]):
                if row["id"] not in applied:
                    await repo.delete(conn, FILES[what], row["id"])
            for section_id, options in applied.items():
                fields = {k: v for k, v in options.items() if k != "type"}
                row = await repo.section(conn, FILES[what], section_id, for_update=True)
                if row is None:
                    await repo.insert(conn, FILES[what], section_id, options["type"], fields)
                elif row["options"] != fields:
                    sections.require_saved(
                        await repo.update(conn, FILES[what], section_id, row["version"], fields)
                    )
        if token and release:
            await repo.delete(conn, LOCK_FILE, LOCK_ID)


# -- zones ------------------------------------------------------------------------


def _check_zone(kind: str, options: dict) -> None:
    if kind not in _ZONE_TYPES:
        raise ParameterError({"type": f"zone type '{kind}' is not supported by the simulator"})
    if kind in ("vlan", "qinq") and not options.get("bridge"):
        raise ParameterError({"bridge": f"a {kind} zone needs a bridge"})
    if kind == "vxlan" and not options.get("peers"):
        raise ParameterError({"peers": "a vxlan zone needs peers"})
    if kind == "evpn" and not options.get("controller"):
        raise ParameterError({"controller": "an evpn zone needs a controller"})


async def _check_zone_refs(conn, options: dict) -> None:
    """Controllers, IPAMs and DNS plugins a zone names must exist."""
    for what in ("controllers", "ipams", "dns"):
        key = KEYS[what]
        if options.get(key) and options[key] not in await _current(conn, what):
            raise ParameterError({key: f"{key} '{options[key]}' does not exist"})


async def _check_nodes(conn, options: dict) -> None:
    known = {n["node"] for n in await inventory.nodes(conn)}
    for node in sections.split_list(options.get("nodes")):
        if node not in known:
            raise ParameterError({"nodes": f"no such node '{node}'"})


async def create_zone(rt, params: dict, declared: set[str]) -> None:
    zone = params["zone"]
    _check_id("zone", zone)
    options = _options(params, declared, "zones")
    _check_zone(params["type"], options)

    async def check(conn, existing) -> None:
        await _check_nodes(conn, options)
        await _check_zone_refs(conn, options)

    await _write(
        rt, "zones", zone, params["type"], options, None, check, token=params.get("lock-token")
    )


async def update_zone(rt, zone: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, FILES["zones"], zone)
    if row is None:
        raise PveError(f"sdn zone '{zone}' does not exist")
    options = sections.updated_options(row["options"], params, _settable(declared, "zones"))
    _check_zone(row["type"], options)

    async def check(conn, existing) -> None:
        await _check_nodes(conn, options)
        await _check_zone_refs(conn, options)

    await _write(
        rt,
        "zones",
        zone,
        None,
        options,
        params.get("digest"),
        check,
        token=params.get("lock-token"),
    )


async def delete_zone(rt, zone: str, token: str | None = None) -> None:
    async def check(conn, existing) -> None:
        for vnet, options in (await _current(conn, "vnets")).items():
            if options.get("zone") == zone:
                raise PveError(f"cannot delete zone '{zone}', it is used by vnet '{vnet}'")

    await _write(rt, "zones", zone, None, None, None, check, token=token)


# -- vnets ------------------------------------------------------------------------


async def _check_vnet(conn, options: dict) -> None:
    zones = await _current(conn, "zones")
    zone = zones.get(options.get("zone"))
    if zone is None:
        raise ParameterError({"zone": f"zone '{options.get('zone')}' does not exist"})
    tag = options.get("tag")
    if zone["type"] in _TAGGED:
        if tag is None:
            raise ParameterError({"tag": f"a vnet in a {zone['type']} zone needs a tag"})
        if not 1 <= int(tag) <= _TAG_MAX[zone["type"]]:
            raise ParameterError(
                {"tag": f"tag must be 1-{_TAG_MAX[zone['type']]} in a {zone['type']} zone"}
            )
        for name, other in (await _current(conn, "vnets")).items():
            if (
                other.get("zone") == options["zone"]
                and other.get("tag") == tag
                and name != options.get("_self")
            ):
                raise ParameterError({"tag": f"tag {tag} is already used by vnet '{name}'"})
    elif tag is not None:
        raise ParameterError({"tag": "a simple zone does not use tags"})


async def create_vnet(rt, params: dict, declared: set[str]) -> None:
    vnet = params["vnet"]
    _check_id("vnet", vnet)
    options = {**_options(params, declared, "vnets"), "zone": params["zone"]}

    async def check(conn, existing) -> None:
        await _check_vnet(conn, options)

    await _write(rt, "vnets", vnet, "vnet", options, None, check, token=params.get("lock-token"))


async def update_vnet(rt, vnet: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, FILES["vnets"], vnet)
    if row is None:
        raise PveError(f"sdn vnet '{vnet}' does not exist")
    settable = _settable(declared, "vnets")
    options = sections.updated_options(row["options"], params, settable)

    async def check(conn, existing) -> None:
        await _check_vnet(conn, {**options, "_self": vnet})

    await _write(
        rt,
        "vnets",
        vnet,
        None,
        options,
        params.get("digest"),
        check,
        token=params.get("lock-token"),
    )


async def delete_vnet(rt, vnet: str, token: str | None = None) -> None:
    async def check(conn, existing) -> None:
        for subnet, options in (await _current(conn, "subnets")).items():
            if options.get("vnet") == vnet:
                raise PveError(f"cannot delete vnet '{vnet}', it has subnet '{subnet}'")

    await _write(rt, "vnets", vnet, None, None, None, check, token=token)


# -- subnets ----------------------------------------------------------------------


def _subnet_options(options: dict, network) -> dict:
    gateway = options.get("gateway")
    if gateway:
        try:
            address = ipaddress.ip_address(gateway)
        except ValueError:
            raise ParameterError({"gateway": f"invalid gateway '{gateway}'"}) from None
        if address not in network:
            raise ParameterError({"gateway": f"gateway {gateway} is not in subnet {network}"})
    ranges = options.get("dhcp-range") or []
    for spec in [ranges] if isinstance(ranges, str) else ranges:
        props = _dhcp_range(spec)
        for key in ("start-address", "end-address"):
            if key not in props:
                raise ParameterError({"dhcp-range": f"'{spec}' lacks {key}"})
            try:
                address = ipaddress.ip_address(props[key])
            except ValueError:
                raise ParameterError({"dhcp-range": f"invalid {key} '{props[key]}'"}) from None
            if address not in network:
                raise ParameterError({"dhcp-range": f"{props[key]} is not in subnet {network}"})
    return options


async def _vnet_zone(conn, vnet: str) -> str:
    vnets = await _current(conn, "vnets")
    if vnet not in vnets:
        raise PveError(f"sdn vnet '{vnet}' does not exist")
    return vnets[vnet]["zone"]


async def create_subnet(rt, vnet: str, params: dict, declared: set[str]) -> None:
    try:
        network = ipaddress.ip_network(params["subnet"], strict=True)
    except ValueError:
        raise ParameterError(
            {"subnet": f"'{params['subnet']}' is not a network address in CIDR form"}
        ) from None
    async with rt.pool.acquire() as conn:
        zone = await _vnet_zone(conn, vnet)
    subnet_id = f"{zone}-{network.network_address}-{network.prefixlen}"
    options = {
        **_subnet_options(_options(params, declared, "subnets"), network),
        "vnet": vnet,
        "cidr": str(network),
    }

    async def check(conn, existing) -> None:
        for other_id, other in (await _current(conn, "subnets")).items():
            if (
                other_id != subnet_id
                and ipaddress.ip_network(other["cidr"]).overlaps(network)
                and other.get("vnet") == vnet
            ):
                raise ParameterError({"subnet": f"overlaps subnet '{other_id}'"})

    await _write(
        rt, "subnets", subnet_id, "subnet", options, None, check, token=params.get("lock-token")
    )


async def update_subnet(rt, vnet: str, subnet_id: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, FILES["subnets"], subnet_id)
    if row is None or row["options"].get("vnet") != vnet:
        raise PveError(f"sdn subnet '{subnet_id}' does not exist")
    options = sections.updated_options(row["options"], params, _settable(declared, "subnets"))
    _subnet_options(options, ipaddress.ip_network(row["options"]["cidr"]))

    async def check(conn, existing) -> None:
        return None

    await _write(
        rt,
        "subnets",
        subnet_id,
        None,
        options,
        params.get("digest"),
        check,
        token=params.get("lock-token"),
    )


async def delete_subnet(rt, vnet: str, subnet_id: str, token: str | None = None) -> None:
    async def check(conn, existing) -> None:
        if existing is not None and existing["options"].get("vnet") != vnet:
            raise PveError(f"sdn subnet '{subnet_id}' does not exist")
        if existing is not None:
            cidr = existing["options"]["cidr"]
            zone = subnet_id.split("-", 1)[0]
            if any(m[:2] == (zone, cidr) for m in await _mappings(conn)):
                raise PveError(f"cannot delete subnet '{cidr}', not empty")

    await _write(rt, "subnets", subnet_id, None, None, None, check, token=token)


# -- apply ------------------------------------------------------------------------


async def apply(rt, principal, token: str | None = None, release: bool = True) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await _lock_domain(conn, token, "could not commit SDN config")
        if token and release:
            await repo.delete(conn, LOCK_FILE, LOCK_ID)
        nodes = await inventory.nodes(conn)
        return await enqueue(
            conn,
            rt.clock,
            node=nodes[0]["node"],
            task_type="reloadnetworkall",
            task_id="",
            principal=principal,
            payload={},
            lock="sdn-apply",
        )


def _fabric_since(previous: dict, applied: dict, now: float) -> dict[str, float]:
    """When each applied fabric came up: an apply that leaves it unchanged keeps the time."""
    before, since = previous.get("fabrics", {}), previous.get("fabric-since", {})

    def sections_of(config: dict, fabric_id: str) -> dict:
        return {k: v for k, v in config.items() if k.split("_", 1)[0] == fabric_id}

    return {
        fabric_id: since.get(fabric_id, now)
        if sections_of(before, fabric_id) == sections_of(applied, fabric_id)
        else now
        for fabric_id in applied
        if "_" not in fabric_id
    }


async def make_running(conn, now: float) -> list[str]:
    """The apply task's effect: the current SDN files become the running config."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pvesim:sdn'))")
    snapshot: dict = {what: await _current(conn, what) for what in FILES}
    existing = await repo.section(conn, RUNNING_FILE, RUNNING_ID, for_update=True)
    previous = existing["options"] if existing else {}
    snapshot["fabric-since"] = _fabric_since(previous, snapshot["fabrics"], now)
    if existing is None:
        await repo.insert(conn, RUNNING_FILE, RUNNING_ID, "running", snapshot)
    else:
        sections.require_saved(
            await repo.update(conn, RUNNING_FILE, RUNNING_ID, existing["version"], snapshot)
        )
    return [
        f"apply sdn configuration: {len(snapshot['zones'])} zones, {len(snapshot['vnets'])} vnets, {len(snapshot['subnets'])} subnets"
    ]


# -- controllers, IPAMs, DNS plugins ---------------------------------------------------


def _check_plugin(what: str, kind: str, options: dict) -> None:
    for key in _REQUIRED.get((what, kind), ()):
        if options.get(key) in (None, ""):
            raise ParameterError({key: f"a {kind} {KEYS[what]} needs '{key}'"})


async def create_plugin(rt, what: str, params: dict, declared: set[str]) -> None:
    section_id = params[KEYS[what]]
    _check_id(KEYS[what], section_id)
    options = _options(params, declared, what)
    _check_plugin(what, params["type"], options)

    async def check(conn, existing) -> None:
        if section_id in await _current(conn, what):
            raise PveError(f"sdn {KEYS[what]} '{section_id}' already exists")
        if "node" in options:
            await _check_nodes(conn, {"nodes": options["node"]})

    await _write(
        rt, what, section_id, params["type"], options, None, check, token=params.get("lock-token")
    )


async def update_plugin(rt, what: str, section_id: str, params: dict, declared: set[str]) -> None:
    async with rt.pool.acquire() as conn:
        row = await repo.section(conn, FILES[what], section_id)
    if row is None:
        raise PveError(f"sdn {KEYS[what]} '{section_id}' does not exist")
    options = sections.updated_options(row["options"], params, _settable(declared, what))
    _check_plugin(what, row["type"], options)

    async def check(conn, existing) -> None:
        return None

    await _write(
        rt,
        what,
        section_id,
        None,
        options,
        params.get("digest"),
        check,
        token=params.get("lock-token"),
    )


async def delete_plugin(rt, what: str, section_id: str, token: str | None = None) -> None:
    async def check(conn, existing) -> None:
        for zone, options in (await _current(conn, "zones")).items():
            if options.get(KEYS[what]) == section_id:
                raise PveError(
                    f"cannot delete {KEYS[what]} '{section_id}', it is used by zone '{zone}'"
                )

    if what == "ipams" and section_id in BUILTIN_IPAM:
        raise PveError("cannot delete the built-in ipam 'pve'")
    await _write(rt, what, section_id, None, None, None, check, token=token)


async def ipam_status(rt, ipam: str) -> list[dict]:
    """Addresses the IPAM holds: each subnet's gateway in the zones using it."""
    async with rt.pool.acquire() as conn:
        ipams = await _current(conn, "ipams")
        if ipam not in ipams:
            raise PveError(f"sdn ipam '{ipam}' does not exist")
        zones = await _current(conn, "zones")
        vnets = await _current(conn, "vnets")
        subnets = await _current(conn, "subnets")
        mappings = await _mappings(conn)
    out = []
    for zone, cidr, ip, options in mappings:
        if _zone_ipam(zones.get(zone)) != ipam:
            continue
        vnet = next(
            (s["vnet"] for s in subnets.values() if s["cidr"] == cidr and s.get("vnet")), None
        )
        entry = {"subnet": cidr, "zone": zone, "ip": ip, **options}
        if "vmid" in entry:
            entry["vmid"] = int(entry["vmid"])
        out.append({"vnet": vnet, **entry} if vnet else entry)
    for _subnet_id, subnet in sorted(subnets.items()):
        vnet = subnet.get("vnet")
        zone = vnets.get(vnet, {}).get("zone")
        if zones.get(zone, {}).get("ipam", "pve") != ipam or not subnet.get("gateway"):
            continue
        out.append(
            {
                "subnet": subnet["cidr"],
                "vnet": vnet,
                "zone": zone,
                "ip": subnet["gateway"],
                "gateway": 1,
            }
        )
    return out


# -- IP mappings in a VNet (``/cluster/sdn/vnets/{vnet}/ips``) ------------------------

# The built-in IPAM's database: one section per mapped address, ``zone/cidr/ip``.
IPAM_FILE = "sdn/pve-ipam-state"


def _zone_ipam(zone: dict) -> str | None:
    return zone.get("ipam", "pve") if zone else None


def _parse_ip(value: str):
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise ParameterError({"ip": "value does not look like a valid IP address"}) from None


async def _ip_home(conn, vnet: str, ip) -> tuple[str, dict] | None:
    """(zone, applied subnet) that ``ip`` of ``vnet`` belongs to, when the
    vnet's zone has an IPAM; PVE silently skips addresses outside them."""
    zone_id = (await _current(conn, "vnets")).get(vnet, {}).get("zone")
    zone = (await _current(conn, "zones")).get(zone_id)
    if not _zone_ipam(zone):
        return None
    for subnet in (await _running(conn)).get("subnets", {}).values():
        if subnet.get("vnet") == vnet and ip in ipaddress.ip_network(subnet["cidr"]):
            return zone_id, subnet
    return None


def _ip_key(zone: str, subnet: dict, ip) -> str:
    return f"{zone}/{subnet['cidr']}/{ip}"


async def _add_ip(conn, zone: str, subnet: dict, ip, mac, vmid) -> None:
    key = _ip_key(zone, subnet, ip)
    if subnet.get("gateway") == str(ip) or await repo.section(conn, IPAM_FILE, key):
        raise PveError(f"IP '{ip}' already exist")
    options = {k: v for k, v in (("mac", mac), ("vmid", vmid)) if v not in (None, "")}
    await repo.insert(conn, IPAM_FILE, key, "ip", options)


async def add_ip(rt, vnet: str, params: dict) -> None:
    ip = _parse_ip(params["ip"])
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, IPAM_FILE)
        home = await _ip_home(conn, vnet, ip)
        if home is not None:
            await _add_ip(conn, *home, ip, params.get("mac"), None)


async def delete_ip(rt, vnet: str, params: dict) -> None:
    ip = _parse_ip(params["ip"])
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, IPAM_FILE)
        home = await _ip_home(conn, vnet, ip)
        if home is not None and not await repo.delete(conn, IPAM_FILE, _ip_key(*home, ip)):
            raise PveError(f"IP '{ip}' does not exist in IPAM DB")


async def update_ip(rt, vnet: str, params: dict) -> None:
    """The MAC's address of the same IP version moves to ``ip``; a failure keeps the old one."""
    ip, mac = _parse_ip(params["ip"]), params.get("mac")
    async with rt.pool.acquire() as conn, conn.transaction():
        await repo.lock_file(conn, IPAM_FILE)
        home = await _ip_home(conn, vnet, ip)
        if home is None:
            return
        zone = home[0]
        for row in await repo.sections(conn, IPAM_FILE):
            old = ipaddress.ip_address(row["id"].rsplit("/", 1)[1])
            if (
                mac
                and row["id"].startswith(f"{zone}/")
                and row["options"].get("mac") == mac
                and old.version == ip.version
            ):
                await repo.delete(conn, IPAM_FILE, row["id"])
        await _add_ip(conn, *home, ip, mac, params.get("vmid"))


async def _mappings(conn) -> list[tuple[str, str, str, dict]]:
    """(zone, cidr, ip, options) of every mapped address."""
    out = []
    for row in await repo.sections(conn, IPAM_FILE):
        zone, rest = row["id"].split("/", 1)
        cidr, ip = rest.rsplit("/", 1)
        out.append((zone, cidr, ip, row["options"]))
    return out
