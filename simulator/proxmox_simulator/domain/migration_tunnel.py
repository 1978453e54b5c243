"""The target side of a remote migration (``POST /nodes/{node}/qemu/{vmid}/mtunnel`` and
its ``mtunnelwebsocket``), as qemu-server runs it.

``mtunnel`` is answered by the node that receives the request (``localhost`` or its own
name): it checks the storages and bridges the source will use, reserves the VMID with an
empty config locked ``create``, and starts a ``qmtunnel`` task listening on
``/run/qemu-server/<vmid>.mtunnel``.  The caller gets that socket, the task's UPID and a
``PVETUNNEL`` ticket bound to the user and the socket; ``mtunnelwebsocket`` accepts only
that ticket, from that user, for that socket (of any VM whose config exists there).

The simulator has no tunnel socket for a client to reach: the task waits PVE's five
minutes (simulated time) for the connection, then removes the reserved config and fails,
which is what qemu-server's tunnel does when no source connects.
"""

from __future__ import annotations

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain import node_system_service
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.config_sections import split_list
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import insert_creating_guest, load_guest
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

TICKET_PREFIX = "PVETUNNEL"
TASK_TYPE = "qmtunnel"
ACCEPT_TIMEOUT = 300.0


def socket_path(vmid: int) -> str:
    return f"/run/qemu-server/{vmid}.mtunnel"


async def _receiving_node(conn, node: str) -> str:
    """The node that answers: the cluster's local one (``cluster/status``), which a
    request must name or call ``localhost``."""
    nodename = (await inventory.nodes(conn))[0]["node"]
    if node not in ("localhost", nodename):
        raise ParameterError(
            {"node": f"node needs to be 'localhost' or local hostname '{nodename}'"}
        )
    return nodename


async def _check_storage(conn, state: AccessState, principal: Principal, storage: str, node: str):
    """qemu-server's storage check for an incoming migration."""
    row = await inventory.storage(conn, storage)
    if row is None:
        raise PveError(f"storage '{storage}' does not exist")
    if not row["enabled"]:
        raise PveError(f"storage '{storage}' is disabled")
    if row["nodes"] and node not in row["nodes"]:
        raise PveError(f"storage '{storage}' is not available on node '{node}'")
    state.require(principal, f"/storage/{storage}", ["Datastore.AllocateSpace"])
    if "images" not in split_list(row["content"]):
        raise PveError(f"storage '{storage}' does not support vm images")


async def open_tunnel(
    rt, state: AccessState, principal: Principal, node: str, vmid: int, params: dict
) -> dict:
    async with rt.pool.acquire() as conn, conn.transaction():
        nodename = await _receiving_node(conn, node)
        for storage in split_list(params.get("storages")):
            await _check_storage(conn, state, principal, storage, nodename)
        bridges = await node_system_service.guest_bridges(conn, nodename)
        for bridge in split_list(params.get("bridges")):
            if bridge not in bridges:
                raise PveError(f"bridge '{bridge}' does not exist")
        existing = await guest_repo.get(conn, vmid)
        if existing is not None:
            kind = "VM" if existing["type"] == rules.QEMU else "CT"
            raise ParameterError(
                {
                    "vmid": f"unable to create empty VM config - {kind} {vmid} already exists on node '{existing['node']}'"
                }
            )
        await insert_creating_guest(
            conn,
            kind=rules.QEMU,
            vmid=vmid,
            node=nodename,
            name="",
            pool=None,
            config={},
            maxmem=0,
            cpus=1,
        )
        upid = await enqueue(
            conn,
            rt.clock,
            node=nodename,
            task_type=TASK_TYPE,
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid},
        )
    socket = socket_path(vmid)
    ticket = rt.tickets.issue_scoped(TICKET_PREFIX, principal.auth_id, f"/socket/{socket}")
    return {"ticket": ticket, "upid": upid, "socket": socket}


async def tunnel_websocket(
    rt, principal: Principal, node: str, vmid: int, socket: str, ticket: str
) -> dict:
    """PVE checks the node, then that the VM's config exists, then the ticket."""
    async with rt.pool.acquire() as conn:
        nodename = await _receiving_node(conn, node)
        await load_guest(conn, rules.QEMU, nodename, vmid)
    rt.tickets.verify_scoped(ticket, TICKET_PREFIX, principal.auth_id, f"/socket/{socket}")
    return {"socket": socket}


async def give_up(conn, vmid: int) -> None:
    """No source connected: the config reserved for the incoming VM goes again."""
    row = await guest_repo.get(conn, vmid, for_update=True)
    if row is not None and row["type"] == rules.QEMU and row["config"].get("lock") == "create":
        await guest_repo.delete(conn, vmid)
