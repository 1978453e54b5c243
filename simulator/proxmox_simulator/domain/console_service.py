"""Consoles: VNC and xterm.js proxies, SPICE viewer configs, and their websocket checks.

PVE starts a proxy process per console (a task of type ``vncproxy`` for guests,
``vncshell`` for a node's shell) listening on the first free port from 5900,
and hands the client a short-lived ticket bound to the user and the resource
path (``/vms/<vmid>`` or ``/nodes/<node>``).  The matching ``vncwebsocket``
endpoint accepts only that ticket, from that user, for that path.

The simulator has no display to stream: the proxy task holds its port for
PVE's 10-second connect timeout (in simulated time) and then ends, which is
what PVE's proxy does when no viewer connects.
"""

from __future__ import annotations

import re
import secrets
import string

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal, normalize_path, split_userid
from proxmox_simulator.domain.errors import AuthenticationFailed, PermissionDenied, PveError
from proxmox_simulator.domain.guest_service import load_guest, require_node
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.tasks.service import enqueue

VNC_TICKET_PREFIX = "PVEVNC"
VNC_PORTS = range(5900, 6000)
CONNECT_TIMEOUT = 10.0
GUEST_PROXY_TASK, NODE_SHELL_TASK = "vncproxy", "vncshell"
# PVE's SPICE ports: QEMU's own SPICE server (per VM) and spiceterm (containers, shells).
SPICE_PORT_BASE = 61000
# Shell commands PVE runs for a node shell (``cmd``); only root@pam may upgrade.
ROOT_ONLY_COMMANDS = {"upgrade"}


def guest_path(vmid: int) -> str:
    return f"/vms/{vmid}"


def node_path(node: str) -> str:
    return f"/nodes/{node}"


def _bound(rt, port):
    """The port a VNC ticket is bound to: PVE 9's proxies sign theirs in, older do not."""
    return port if rt.adapter.vnc_ticket_binds_port else None


def _acl_path(path: str | None) -> str | None:
    """PVE's path check: normalised, and None for characters no ACL path has."""
    if not path:
        return None
    normalized = normalize_path(path)
    return normalized if re.fullmatch(r"[A-Za-z0-9.\-_/]+", normalized) else None


async def verify_vnc_ticket(rt, state: AccessState, params: dict) -> None:
    """``POST /access/vncticket``: the ticket is the one issued to ``authid`` for ``path``
    (and ``port``), and ``authid`` holds ``privs`` there; any failure is PVE's plain
    authentication failure, so nothing tells a caller which part was wrong."""
    authid = str(params["authid"])
    path = _acl_path(params.get("path"))
    privs = [p for p in re.split(r"[,;\s]+", str(params.get("privs") or "")) if p]
    if path is None or not privs:
        raise AuthenticationFailed()
    try:
        rt.tickets.verify_scoped(
            str(params["vncticket"]), VNC_TICKET_PREFIX, authid, path, port=params.get("port")
        )
    except AuthenticationFailed:
        raise AuthenticationFailed() from None
    owner, _, tokenid = authid.partition("!")
    token = state.tokens.get((owner, tokenid)) if tokenid else None
    if tokenid and token is None:
        raise AuthenticationFailed()
    subject = Principal(owner, tokenid or None, privsep=bool(token and token.privsep))
    if not set(privs) <= state.privileges(subject, path):
        raise AuthenticationFailed()


async def _start_proxy(
    rt, principal: Principal, node: str, task_type: str, task_id: str, path: str, extra: dict
) -> dict:
    """Allocate a port, start the proxy task, and answer PVE's console fields."""
    async with rt.pool.acquire() as conn, conn.transaction():
        used = await task_repo.console_ports_in_use(conn, node)
        port = next((p for p in VNC_PORTS if p not in used), None)
        if port is None:
            raise PveError("unable to find free port (5900-5999)")
        upid = await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=task_type,
            task_id=task_id,
            principal=principal,
            payload={"console_port": port, "path": path, **extra},
        )
    return {
        "user": principal.auth_id,
        "ticket": rt.tickets.issue_scoped(
            VNC_TICKET_PREFIX, principal.auth_id, path, port=_bound(rt, port)
        ),
        "port": port,
        "upid": upid,
    }


async def open_guest_console(
    rt, principal: Principal, kind: str, node: str, vmid: int, params: dict, *, terminal: bool
) -> dict:
    """``vncproxy`` / ``termproxy`` of a VM or container."""
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
    extra: dict = {"console": "termproxy" if terminal else "vncproxy", "vmid": vmid}
    serial = params.get("serial")
    vga = str(row["config"].get("vga", ""))
    if kind == rules.QEMU and serial is None and vga.startswith("serial"):
        serial = vga.split(",")[0]  # PVE opens the serial port the display is routed to
    if serial:
        extra["serial"] = serial
    answer = await _start_proxy(
        rt, principal, node, GUEST_PROXY_TASK, str(vmid), guest_path(vmid), extra
    )
    if not terminal:
        answer["cert"] = rt.tickets.certificate_authority_pem()
        if params.get("generate-password"):
            # A one-time VNC password instead of the ticket (PVE: 8 printable characters).
            alphabet = string.ascii_letters + string.digits + string.punctuation
            answer["password"] = "".join(secrets.choice(alphabet) for _ in range(8))
    return answer


def _require_shell_user(principal: Principal, pam_only: bool, command: str | None) -> None:
    _name, realm = split_userid(principal.userid)
    if pam_only and realm != "pam":
        raise PermissionDenied("Permission check failed (realm != pam)")
    if command in ROOT_ONLY_COMMANDS and principal.userid != "root@pam":
        raise PermissionDenied("Permission check failed (user != root@pam)")


def _shell_command(params: dict) -> str | None:
    # 6.x still accepts the older boolean ``upgrade`` beside ``cmd``.
    return "upgrade" if params.get("upgrade") else params.get("cmd")


async def open_node_shell(
    rt, principal: Principal, node: str, params: dict, *, pam_only: bool, terminal: bool
) -> dict:
    """A node's ``vncshell`` / ``termproxy``; ``pam_only`` where the major restricts it."""
    command = _shell_command(params)
    _require_shell_user(principal, pam_only, command)
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    extra = {"console": "termproxy" if terminal else "vncshell", "cmd": command or "login"}
    answer = await _start_proxy(rt, principal, node, NODE_SHELL_TASK, "", node_path(node), extra)
    if not terminal:
        answer["cert"] = rt.tickets.certificate_authority_pem()
    return answer


async def guest_websocket(
    rt, principal: Principal, kind: str, node: str, vmid: int, ticket: str, port
) -> dict:
    """PVE checks the ticket first, then that the guest exists; it answers the port back."""
    rt.tickets.verify_scoped(
        ticket, VNC_TICKET_PREFIX, principal.auth_id, guest_path(vmid), port=_bound(rt, port)
    )
    async with rt.pool.acquire() as conn:
        await load_guest(conn, kind, node, vmid)
    return {"port": str(port)}


async def node_websocket(
    rt, principal: Principal, node: str, ticket: str, port, *, pam_only: bool
) -> dict:
    _require_shell_user(principal, pam_only, None)
    rt.tickets.verify_scoped(
        ticket, VNC_TICKET_PREFIX, principal.auth_id, node_path(node), port=_bound(rt, port)
    )
    return {"port": str(port)}


# -- SPICE ----------------------------------------------------------------------------


def _spice_config(rt, node: str, vmid: int, proxy, title, port) -> dict:
    """PVE's remote-viewer configuration (``remote_viewer_config``)."""
    password = secrets.token_hex(20)  # the one-time SPICE password PVE sets on the display
    proxy = proxy or node
    if ":" in proxy and not proxy.startswith("["):
        proxy = f"[{proxy}]"  # an IPv6 address
    host_ticket = rt.tickets.spice_proxy_ticket(vmid, node)
    ca = rt.tickets.certificate_authority_pem().replace("\n", "\\n")
    return {
        "type": "spice",
        "title": title,
        "host": host_ticket,
        "proxy": f"http://{proxy}:3128",
        "tls-port": port,
        "host-subject": f"OU=PVE Cluster Node,O=Proxmox Virtual Environment,CN={node}",
        "ca": ca,
        "password": password,
        "secure-attention": "Ctrl+Alt+Ins",
        "toggle-fullscreen": "Shift+F11",
        "release-cursor": "Ctrl+Alt+R",
        "delete-this-file": 1,
    }


async def guest_spice(
    rt, principal: Principal, kind: str, node: str, vmid: int, proxy: str | None
) -> dict:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
    if row["status"] != rules.RUNNING:
        raise PveError(f"{'VM' if kind == rules.QEMU else 'CT'} {vmid} not running")
    name = row["config"].get("name" if kind == rules.QEMU else "hostname")
    title = f"{'VM' if kind == rules.QEMU else 'CT'} {vmid}" + (f" - {name}" if name else "")
    # QEMU's SPICE server port is fixed per running VM; the simulator derives it from the VMID.
    port = SPICE_PORT_BASE + vmid % 1000
    return _spice_config(rt, node, vmid, proxy, title, port)


async def node_spice(rt, principal: Principal, node: str, params: dict, *, pam_only: bool) -> dict:
    _require_shell_user(principal, pam_only, _shell_command(params))
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return _spice_config(rt, node, 0, params.get("proxy"), f"Shell on '{node}'", SPICE_PORT_BASE)
