"""The target side of a remote migration (``POST /nodes/{node}/{qemu,lxc}/{vmid}/mtunnel``
and their ``mtunnelwebsocket``), as qemu-server and pve-container run it.

``mtunnel`` is answered by the node that receives the request (``localhost`` or its own
name): it checks the storages and bridges the source will use, reserves the VMID with an
empty config locked ``create``, and starts a ``qmtunnel`` task listening on
``/run/qemu-server/<vmid>.mtunnel`` (a container: ``vzmtunnel`` on
``/run/pve/ct-<vmid>.mtunnel``, its storages must hold ``rootdir``).  The caller gets that socket, the task's UPID and a
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
TASK_TYPES = {rules.QEMU: "qmtunnel", rules.LXC: "vzmtunnel"}
ACCEPT_TIMEOUT = 300.0


def socket_path(kind: str, vmid: int) -> str:
    if kind == rules.LXC:
        return f"/run/pve/ct-{vmid}.mtunnel"
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


async def check_storage(
    conn, state: AccessState, principal: Principal, kind: str, storage: str, node: str
):
    """qemu-server's / pve-container's storage check for an incoming migration."""
    row = await inventory.storage(conn, storage)
    if row is None:
        raise PveError(f"storage '{storage}' does not exist")
    if not row["enabled"]:
        raise PveError(f"storage '{storage}' is disabled")
    if row["nodes"] and node not in row["nodes"]:
        raise PveError(f"storage '{storage}' is not available on node '{node}'")
    state.require(principal, f"/storage/{storage}", ["Datastore.AllocateSpace"])
    content = split_list(row["content"])
    if kind == rules.QEMU and "images" not in content:
        raise PveError(f"storage '{storage}' does not support vm images")
    if kind == rules.LXC and "rootdir" not in content:
        raise PveError(f"storage '{storage}' does not support CT rootdirs")


async def open_tunnel(
    rt, state: AccessState, principal: Principal, kind: str, node: str, vmid: int, params: dict
) -> dict:
    async with rt.pool.acquire() as conn, conn.transaction():
        nodename = await _receiving_node(conn, node)
        for storage in split_list(params.get("storages")):
            await check_storage(conn, state, principal, kind, storage, nodename)
        bridges = await node_system_service.guest_bridges(conn, nodename)
        for bridge in split_list(params.get("bridges")):
            if bridge not in bridges:
                raise PveError(f"bridge '{bridge}' does not exist")
        existing = await guest_repo.get(conn, vmid)
        if existing is not None:
            held = "VM" if existing["type"] == rules.QEMU else "CT"
            ours = "VM" if kind == rules.QEMU else "CT"
            raise ParameterError(
                {
                    "vmid": f"unable to create empty {ours} config - {held} {vmid} already exists on node '{existing['node']}'"
                }
            )
        await insert_creating_guest(
            conn,
            kind=kind,
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
            task_type=TASK_TYPES[kind],
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind},
        )
    socket = socket_path(kind, vmid)
    ticket = rt.tickets.issue_scoped(TICKET_PREFIX, principal.auth_id, f"/socket/{socket}")
    return {"ticket": ticket, "upid": upid, "socket": socket}


async def tunnel_websocket(
    rt, principal: Principal, kind: str, node: str, vmid: int, socket: str, ticket: str
) -> dict:
    """PVE checks the node, then that the guest's config exists, then the ticket."""
    async with rt.pool.acquire() as conn:
        nodename = await _receiving_node(conn, node)
        await load_guest(conn, kind, nodename, vmid)
    rt.tickets.verify_scoped(ticket, TICKET_PREFIX, principal.auth_id, f"/socket/{socket}")
    return {"socket": socket}


async def give_up(conn, kind: str, vmid: int) -> None:
    """No source connected: the config reserved for the incoming guest goes again."""
    row = await guest_repo.get(conn, vmid, for_update=True)
    if row is not None and row["type"] == kind and row["config"].get("lock") == "create":
        await guest_repo.delete(conn, vmid)
