"""HA manager configuration and status: groups, resources, CRM/LRM view."""

from __future__ import annotations

import time

from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain import guest_placement as placement
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import ha as ha_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import section_configs as section_repo

RESOURCE_OPTIONS = frozenset(
    {"comment", "group", "max_relocate", "max_restart", "state", "failback", "auto-rebalance"}
)
GROUP_OPTIONS = frozenset({"comment", "nodes", "nofailback", "restricted"})
_STATE_ALIASES = {"enabled": "started"}


def _kind_prefix(guest_type: str) -> str:
    return "vm" if guest_type == rules.QEMU else "ct"


async def _resolve_sid(conn, raw: str, declared_type: str | None = None) -> tuple[str, str, int]:
    """``100``, ``vm:100`` or ``ct:100`` → (sid, type, vmid); the guest must exist."""
    prefix, _, number = raw.rpartition(":")
    if not (number.isascii() and number.isdigit()) or prefix not in ("", "vm", "ct"):
        raise ParameterError({"sid": f"unable to parse service id '{raw}'"})
    vmid = int(number)
    guest = await guest_repo.get(conn, vmid)
    if guest is None:
        raise PveError(f"no such VM/CT '{vmid}'")
    actual = _kind_prefix(guest["type"])
    wanted = prefix or declared_type or actual
    if wanted != actual:
        raise PveError(f"service '{wanted}:{vmid}' is a {actual}, not a {wanted}")
    return f"{actual}:{vmid}", actual, vmid


def _normalise(options: dict) -> dict:
    if "state" in options:
        options["state"] = _STATE_ALIASES.get(options["state"], options["state"])
    return options


def _resource_entry(row) -> dict:
    entry = {"sid": row["sid"], "type": row["type"], **row["options"]}
    entry.setdefault("state", "started")
    entry["digest"] = sections.digest("ha-resources", row["sid"], row["version"])
    return entry


async def list_resources(rt, type_filter: str | None) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await ha_repo.resources(conn)
    return [_resource_entry(r) for r in rows if type_filter in (None, r["type"])]


async def _require_resource(conn, raw: str):
    sid, _type, _vmid = await _resolve_sid(conn, raw)
    row = await ha_repo.resource(conn, sid)
    if row is None:
        raise PveError(f"service '{sid}' is not managed by ha", status=404)
    return row


async def get_resource(rt, raw: str) -> dict:
    async with rt.pool.acquire() as conn:
        return _resource_entry(await _require_resource(conn, raw))


async def _check_group(conn, options: dict) -> None:
    if options.get("group") and await ha_repo.group(conn, options["group"]) is None:
        raise PveError(f"HA group '{options['group']}' does not exist")


async def create_resource(rt, params: dict) -> None:
    options = _normalise({k: v for k, v in params.items() if k in RESOURCE_OPTIONS})
    async with rt.pool.acquire() as conn, conn.transaction():
        sid, kind, vmid = await _resolve_sid(conn, params["sid"], params.get("type"))
        await _check_group(conn, options)
        if not await ha_repo.insert_resource(conn, sid, kind, vmid, options):
            raise PveError(f"resource ID '{sid}' already defined")


async def update_resource(rt, raw: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await _require_resource(conn, raw)
        sections.check_digest(
            params.get("digest"), sections.digest("ha-resources", row["sid"], row["version"])
        )
        options = _normalise(sections.updated_options(row["options"], params, RESOURCE_OPTIONS))
        await _check_group(conn, options)
        sections.require_saved(
            await ha_repo.update_resource(conn, row["sid"], row["version"], options)
        )


async def delete_resource(rt, raw: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await _require_resource(conn, raw)
        await ha_repo.delete_resource(conn, row["sid"])


# -- groups -----------------------------------------------------------------------


def _group_entry(row) -> dict:
    return {
        "group": row["group_id"],
        "type": "group",
        **row["options"],
        "digest": sections.digest("ha-groups", row["group_id"], row["version"]),
    }


async def _check_nodes(conn, nodes_spec: str) -> None:
    known = {n["node"] for n in await inventory.nodes(conn)}
    for entry in sections.split_list(nodes_spec):
        name, _, priority = entry.partition(":")
        if name not in known:
            raise PveError(f"no such node '{name}'")
        if priority and not (priority.isascii() and priority.isdigit()):
            raise ParameterError({"nodes": f"invalid priority '{priority}' for node '{name}'"})


async def list_groups(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_group_entry(r) for r in await ha_repo.groups(conn)]


async def get_group(rt, group_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await ha_repo.group(conn, group_id)
    if row is None:
        raise PveError(f"no such ha group '{group_id}'", status=404)
    return _group_entry(row)


async def create_group(rt, params: dict) -> None:
    options = {k: v for k, v in params.items() if k in GROUP_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        await _check_nodes(conn, options["nodes"])
        if not await ha_repo.insert_group(conn, params["group"], options):
            raise PveError(f"ha group '{params['group']}' already defined")


async def update_group(rt, group_id: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await ha_repo.group(conn, group_id)
        if row is None:
            raise PveError(f"no such ha group '{group_id}'", status=404)
        sections.check_digest(
            params.get("digest"), sections.digest("ha-groups", group_id, row["version"])
        )
        options = sections.updated_options(row["options"], params, GROUP_OPTIONS)
        if "nodes" not in options:
            raise PveError("cannot delete 'nodes' - it is not optional", status=400)
        await _check_nodes(conn, options["nodes"])
        sections.require_saved(await ha_repo.update_group(conn, group_id, row["version"], options))


async def delete_group(rt, group_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if await ha_repo.group_in_use(conn, group_id):
            raise PveError(f"ha group '{group_id}' is used by a HA resource")
        if not await ha_repo.delete_group(conn, group_id):
            raise PveError(f"no such ha group '{group_id}'", status=404)


# -- status -------------------------------------------------------------------


def _service_state(row) -> tuple[str, str]:
    """(CRM state, status text) of a resource from its request state and the guest."""
    request = row["options"].get("state", "started")
    if request in ("disabled", "stopped"):
        crm = "stopped"
    elif request == "ignored":
        crm = "ignored"
    else:
        crm = "started" if row["status"] not in (None, rules.STOPPED) else "request_start"
    return crm, crm


async def current_status(rt) -> list[dict]:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        resources = await ha_repo.resources(conn)
        armed, _mode = await armed_state(conn)
    online = [n["node"] for n in nodes if n["online"]]
    master = online[0] if online else nodes[0]["node"]
    entries: list[dict] = [
        {
            "id": "quorum",
            "type": "quorum",
            "node": master,
            "quorate": 1,
            "status": "OK",
        },
        {
            "id": "master",
            "type": "master",
            "node": master,
            "status": f"{master} (active, {_ctime(now)})",
            "timestamp": now,
            "armed-state": armed,
        },
    ]
    active_nodes = {r["node"] for r in resources if r["node"]}
    for node in nodes:
        name = node["node"]
        mode = "active" if name in active_nodes else "idle"
        entries.append(
            {
                "id": f"lrm:{name}",
                "type": "lrm",
                "node": name,
                "status": f"{name} ({mode}, {_ctime(now)})"
                if node["online"]
                else f"{name} (old timestamp - dead?)",
                "timestamp": now,
            }
        )
    for row in resources:
        crm, _status = _service_state(row)
        options = row["options"]
        entries.append(
            {
                "id": f"service:{row['sid']}",
                "type": "service",
                "sid": row["sid"],
                "node": row["node"] or master,
                "state": crm,
                "crm_state": crm,
                "request_state": options.get("state", "started"),
                "max_restart": options.get("max_restart", 1),
                "max_relocate": options.get("max_relocate", 1),
                "status": f"{row['sid']} ({row['node']}, {crm})",
                **({"group": options["group"]} if options.get("group") else {}),
            }
        )
    return entries


async def manager_status(rt) -> dict:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        resources = await ha_repo.resources(conn)
    online = [n["node"] for n in nodes if n["online"]]
    master = online[0] if online else nodes[0]["node"]
    services = {}
    for row in resources:
        crm, _ = _service_state(row)
        services[row["sid"]] = {
            "node": row["node"],
            "state": crm,
            "uid": row["sid"].replace(":", ""),
        }
    return {
        "manager_status": {
            "master_node": master,
            "node_status": {n["node"]: "online" if n["online"] else "unknown" for n in nodes},
            "service_status": services,
            "timestamp": now,
        },
        "quorum": {"node": master, "quorate": "1"},
        "lrm_status": {
            n["node"]: {
                "mode": "active",
                "state": "active" if services else "wait_for_agent_lock",
                "timestamp": now,
            }
            for n in nodes
        },
    }


def _ctime(epoch: int) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(epoch))


# -- CRM requests: migrate / relocate -------------------------------------------------

HA_MANAGER = Principal("root@pam")


async def request_move(rt, raw: str, target: str, *, relocate: bool) -> dict:
    """The CRM moves the service: online migration (VMs) or restart mode (CTs).

    PVE queues the request for the HA manager, which then runs the migration
    as ``root@pam``; here the manager's task is created right away.
    """
    async with rt.pool.acquire() as conn:
        row = await _require_resource(conn, raw)
        await require_node(conn, target)
    if row["node"] == target:
        raise PveError(f"service '{row['sid']}' already on node '{target}'")
    kind = rules.QEMU if row["type"] == "vm" else rules.LXC
    running = row["status"] not in (None, rules.STOPPED)
    params = {"target": target}
    if running and kind == rules.QEMU and not relocate:
        params["online"] = 1
    if running and (kind == rules.LXC or relocate):
        # relocate = stop, move, start; containers always move that way.
        params["restart"] = 1
    await placement.migrate(rt, HA_MANAGER, kind, row["node"], row["vmid"], params)
    return {"sid": row["sid"], "requested-node": target}


# -- arming (9.x) -------------------------------------------------------------------

_MANAGER_FILE, _MANAGER_ID = "ha/manager_status", "state"


async def armed_state(conn) -> tuple[str, str | None]:
    row = await section_repo.section(conn, _MANAGER_FILE, _MANAGER_ID)
    if row is None:
        return "armed", None
    return row["options"]["armed-state"], row["options"].get("resource-mode")


async def set_armed(rt, armed: bool, resource_mode: str | None) -> None:
    options = {"armed-state": "armed" if armed else "disarmed"}
    if resource_mode:
        options["resource-mode"] = resource_mode
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await section_repo.section(conn, _MANAGER_FILE, _MANAGER_ID, for_update=True)
        current = row["options"]["armed-state"] if row else "armed"
        if current == options["armed-state"]:
            raise PveError(f"HA is already {current}")
        if row is None:
            await section_repo.insert(conn, _MANAGER_FILE, _MANAGER_ID, "state", options)
        else:
            sections.require_saved(
                await section_repo.update(conn, _MANAGER_FILE, _MANAGER_ID, row["version"], options)
            )
