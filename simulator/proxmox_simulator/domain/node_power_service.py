"""Node power and bulk guest power: reboot/shutdown of a node, startall, stopall.

PVE's ``POST /nodes/{node}/status`` runs ``shutdown``/``reboot`` and answers
at once; systemd then stops ``pve-guests``, whose ``stopall`` task (as
``root@pam``) shuts every running guest down in reverse startup order, and
after a reboot ``startall`` starts the guests marked ``onboot``.  Here the
node power change is the completion of that ``stopall`` task: a shut-down
node is offline, a rebooted node comes back with a new boot time and queues
its ``startall``.
"""

from __future__ import annotations

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import ROOT, AccessState, Principal
from proxmox_simulator.domain.errors import PermissionDenied, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

PVE_GUESTS = Principal(ROOT)
# PVE's default ``startup`` order for guests without one: after every ordered guest.
_UNORDERED = 1 << 31


def _vmid_filter(vms: str | None) -> set[int] | None:
    if not vms:
        return None
    return {int(v) for v in str(vms).replace(";", ",").split(",") if v.strip()}


def require_bulk_permission(
    state: AccessState, principal: Principal, vms: str | None, privilege: str
) -> None:
    """PVE: the privilege on ``/``, or on ``/vms/<ID>`` for each ID passed in ``vms``."""
    if state.has(principal, "/", [privilege]):
        return
    wanted = _vmid_filter(vms)
    if not wanted:
        raise PermissionDenied(f"Permission check failed (/, {privilege})")
    for vmid in sorted(wanted):
        if not state.has(principal, f"/vms/{vmid}", [privilege]):
            raise PermissionDenied(f"Permission check failed (/vms/{vmid}, {privilege})")


def startup_order(config: dict) -> int:
    startup = config.get("startup")
    if not startup:
        return _UNORDERED
    order = rules.parse_property_string(str(startup), "order").get("order")
    return int(order) if order and order.isdigit() else _UNORDERED


async def _require_online(conn, node: str):
    row = await require_node(conn, node)
    if not row["online"]:
        # What PVE's proxy answers for a node it cannot reach.
        raise PveError(f"node '{node}' is offline", status=595)
    return row


async def node_power(rt, node: str, command: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await _require_online(conn, node)
        await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="stopall",
            task_id="",
            principal=PVE_GUESTS,
            payload={"node": node, "then": command, "force-stop": 1, "timeout": 180},
            lock=f"node-power:{node}",
        )


async def start_all(rt, principal: Principal, node: str, params: dict) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await _require_online(conn, node)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="startall",
            task_id="",
            principal=principal,
            payload={
                "node": node,
                "vms": params.get("vms"),
                "force": int(params.get("force") or 0),
            },
        )


async def stop_all(rt, principal: Principal, node: str, params: dict) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await _require_online(conn, node)
        force_stop = params.get("force-stop")
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="stopall",
            task_id="",
            principal=principal,
            payload={
                "node": node,
                "vms": params.get("vms"),
                "force-stop": 1 if force_stop is None else int(force_stop),
                "timeout": int(params.get("timeout") or 180),
            },
        )


async def stop_guests(conn, payload: dict) -> list[str]:
    """Shut the node's running guests down (reverse startup order); the task's log lines."""
    wanted = _vmid_filter(payload.get("vms"))
    guests = [
        g
        for g in await guest_repo.list_all(conn, payload["node"])
        if g["status"] != rules.STOPPED and (wanted is None or g["vmid"] in wanted)
    ]
    guests.sort(key=lambda g: (startup_order(g["config"]), g["vmid"]), reverse=True)
    lines = []
    for guest in guests:
        row = await guest_repo.get(conn, guest["vmid"], for_update=True)
        if row is None or row["status"] == rules.STOPPED or row["node"] != payload["node"]:
            continue
        who = f"{rules.noun(row['type'])} {row['vmid']}"
        if row["status"] == rules.PAUSED:
            # A paused guest cannot shut down cleanly; PVE's stopall then stops it.
            if not payload.get("force-stop"):
                lines.append(f"{who} is paused - cannot shutdown, left running")
                continue
            lines.append(f"Stopping {who} (paused, hard stop)")
        else:
            lines.append(f"Stopping {who} (timeout = {payload.get('timeout', 180)} seconds)")
        await guest_repo.set_status(conn, row["vmid"], rules.STOPPED, None)
    if not guests:
        lines.append("no running guests on this node")
    return lines


async def start_guests(conn, now: int, payload: dict) -> list[str]:
    """Start the node's stopped guests with ``onboot=1`` (all listed ones with ``force``)."""
    wanted = _vmid_filter(payload.get("vms"))
    force = bool(payload.get("force"))
    guests = [
        g
        for g in await guest_repo.list_all(conn, payload["node"])
        if not g["template"]
        and (wanted is None or g["vmid"] in wanted)
        and (force or str(g["config"].get("onboot", "0")) == "1")
    ]
    guests.sort(key=lambda g: (startup_order(g["config"]), g["vmid"]))
    lines = []
    for guest in guests:
        row = await guest_repo.get(conn, guest["vmid"], for_update=True)
        if row is None or row["node"] != payload["node"]:
            continue
        who = f"{rules.noun(row['type'])} {row['vmid']}"
        if row["status"] != rules.STOPPED:
            lines.append(f"{who} already running")
            continue
        await guest_repo.set_status(conn, row["vmid"], rules.RUNNING, now)
        lines.append(f"Starting {who}")
    return lines


async def finish_power(conn, clock, payload: dict) -> list[str]:
    """After ``stopall`` of a node reboot/shutdown: the node goes down (and comes back)."""
    node, command = payload["node"], payload.get("then")
    if command == "shutdown":
        await inventory.set_node_power(conn, node, online=False, boot_epoch=None)
        return [f"node '{node}' powered off"]
    if command == "reboot":
        await inventory.set_node_power(conn, node, online=True, boot_epoch=int(clock.now()))
        await enqueue(
            conn,
            clock,
            node=node,
            task_type="startall",
            task_id="",
            principal=PVE_GUESTS,
            payload={"node": node, "vms": None, "force": 0},
        )
        return [f"node '{node}' rebooted"]
    return []
