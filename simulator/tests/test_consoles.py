"""Consoles through proxmoxer: vncproxy / termproxy / spiceproxy answer PVE's fields, and
the vncwebsocket endpoints accept exactly the ticket issued for that user and resource."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from cryptography import x509
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import ROOT_PASSWORD


def _api(server, user="root@pam", password=ROOT_PASSWORD) -> ProxmoxAPI:
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    return ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        timeout=30,
        user=user,
        password=password,
    )


def _wait(prox, upid) -> dict:
    return Tasks.blocking_status(prox, upid, polling_interval=0.05)


def _guest(prox, kind: str, status: str | None = "running") -> int:
    guests = [g for g in getattr(prox.nodes("pve1"), kind).get() if status in (None, g["status"])]
    assert guests, f"the seed has a {status or ''} {kind} guest on pve1"
    return int(sorted(guests, key=lambda g: int(g["vmid"]))[0]["vmid"])


def _container(prox) -> tuple[str, int]:
    containers = sorted(
        (g for g in prox.cluster.resources.get(type="vm") if g["type"] == "lxc"),
        key=lambda g: int(g["vmid"]),
    )
    assert containers, "the seed has a container"
    return containers[0]["node"], int(containers[0]["vmid"])


def _refused(call) -> ResourceException:
    with pytest.raises(ResourceException) as refused:
        call()
    return refused.value


def test_qemu_vncproxy_ticket_opens_only_its_own_websocket(server):
    prox = _api(server)
    vmid = _guest(prox, "qemu")
    console = prox.nodes("pve1").qemu(vmid).vncproxy.post(websocket=1)

    assert set(console) == {"user", "ticket", "cert", "port", "upid"}
    assert console["user"] == "root@pam"
    assert re.fullmatch(r"PVEVNC:[0-9A-F]{8}::\S+", console["ticket"])
    assert "root@pam" not in console["ticket"]  # the user and path are signed, not shown
    assert 5900 <= console["port"] <= 5999
    ca = x509.load_pem_x509_certificate(console["cert"].encode())
    assert ca.subject == ca.issuer  # the cluster's self-signed CA
    task = Tasks.decode_upid(console["upid"])
    assert (task["type"], task["id"], task["user"]) == ("vncproxy", str(vmid), "root@pam")

    ws = (
        prox.nodes("pve1")
        .qemu(vmid)
        .vncwebsocket.get(vncticket=console["ticket"], port=console["port"])
    )
    assert ws == {"port": str(console["port"])}

    # A tampered signature, and a ticket for another guest, are refused with PVE's 401.
    stamp, _, signature = console["ticket"].rpartition("::")
    forged = f"{stamp}::{signature[:-4]}AAA="
    wrong = _refused(
        lambda: (
            prox.nodes("pve1").qemu(vmid).vncwebsocket.get(vncticket=forged, port=console["port"])
        )
    )
    assert wrong.status_code == 401
    assert "permission denied - invalid PVEVNC ticket" in str(wrong)
    other_node, other = _container(prox)
    elsewhere = _refused(
        lambda: (
            prox.nodes(other_node)
            .lxc(other)
            .vncwebsocket.get(vncticket=console["ticket"], port=console["port"])
        )
    )
    assert elsewhere.status_code == 401

    # The proxy is a real task: it ends after PVE's connect timeout, logging its port.
    assert _wait(prox, console["upid"])["exitstatus"] == "OK"
    log = Tasks.decode_log(prox.nodes("pve1").tasks(console["upid"]).log.get())
    assert f"port {console['port']}" in log


def _vm_user(server, root, vmid: int) -> tuple[str, ProxmoxAPI]:
    """A new user with PVEVMUser (VM.Console, not VM.Allocate) on the VM, logged in."""
    userid = f"simfid{uuid.uuid4().hex[:8]}@pve"
    root.access.users.post(userid=userid, password="console-pass-1")
    root.access.acl.put(path=f"/vms/{vmid}", users=userid, roles="PVEVMUser")
    return userid, _api(server, user=userid, password="console-pass-1")


def test_a_ticket_is_bound_to_the_user_it_was_issued_to(server):
    root = _api(server)
    vmid = _guest(root, "qemu")
    userid, user = _vm_user(server, root, vmid)

    theirs = user.nodes("pve1").qemu(vmid).vncproxy.post(websocket=1)
    assert theirs["user"] == userid
    assert user.nodes("pve1").qemu(vmid).vncwebsocket.get(
        vncticket=theirs["ticket"], port=theirs["port"]
    ) == {"port": str(theirs["port"])}
    # root presenting the user's ticket is refused: the ticket signs the user's id.
    refused = _refused(
        lambda: (
            root.nodes("pve1")
            .qemu(vmid)
            .vncwebsocket.get(vncticket=theirs["ticket"], port=theirs["port"])
        )
    )
    assert refused.status_code == 401
    # And the user may not open a node shell (Sys.Console on /nodes/pve1).
    assert _refused(lambda: user.nodes("pve1").termproxy.post()).status_code == 403


def _verify_vnc(server, **data) -> httpx.Response:
    """``POST /access/vncticket`` as vncterm/termproxy call it: with no login of their own."""
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        return c.post("/access/vncticket", data=data)


def test_vncticket_verifies_a_console_ticket_for_its_user_path_port_and_privileges(server):
    root = _api(server)
    vmid = _guest(root, "qemu")
    userid, user = _vm_user(server, root, vmid)
    console = user.nodes("pve1").qemu(vmid).vncproxy.post(websocket=1)
    ticket, port = console["ticket"], console["port"]
    good = {"authid": userid, "vncticket": ticket, "path": f"/vms/{vmid}", "privs": "VM.Console"}

    verified = _verify_vnc(server, **good, port=port)
    assert verified.status_code == 200 and verified.json() == {"data": None}
    # PVE's path normalisation: doubled and trailing slashes name the same path.
    slashes = {**good, "port": port, "path": f"//vms/{vmid}/"}
    assert _verify_vnc(server, **slashes).status_code == 200
    refusals = [
        {"port": port + 1},  # 9.x signs the proxy's port into the ticket
        {},  # ... so a check without it is another ticket
        {"port": port, "path": f"/vms/{vmid + 1}"},
        {"port": port, "authid": "root@pam"},
        {"port": port, "privs": "VM.Allocate"},  # PVEVMUser lacks it on the VM
        {"port": port, "vncticket": ticket[:-4] + "AAA="},
        {"port": port, "path": "/vms/<bad>"},
    ]
    for change in refusals:
        refused = _verify_vnc(server, **{**good, **change})
        assert (refused.status_code, refused.reason_phrase) == (401, "authentication failure"), (
            change
        )


def test_qemu_vncproxy_generates_a_one_time_password_on_request(server):
    prox = _api(server)
    vmid = _guest(prox, "qemu")
    console = prox.nodes("pve1").qemu(vmid).vncproxy.post(websocket=1, **{"generate-password": 1})
    assert len(console["password"]) == 8 and console["password"] != console["ticket"]


def test_lxc_termproxy_has_no_certificate_and_its_ticket_opens_the_websocket(server):
    prox = _api(server)
    node, vmid = _container(prox)
    term = prox.nodes(node).lxc(vmid).termproxy.post()
    assert set(term) == {"user", "ticket", "port", "upid"}
    assert Tasks.decode_upid(term["upid"])["type"] == "vncproxy"
    assert prox.nodes(node).lxc(vmid).vncwebsocket.get(
        vncticket=term["ticket"], port=term["port"]
    ) == {"port": str(term["port"])}
    missing = _refused(lambda: prox.nodes(node).lxc(999999).termproxy.post())
    assert "does not exist" in str(missing)


def test_node_shell_tickets_are_for_the_node_only(server):
    prox = _api(server)
    shell = prox.nodes("pve2").vncshell.post(websocket=1)
    assert set(shell) == {"user", "ticket", "cert", "port", "upid"}
    task = Tasks.decode_upid(shell["upid"])
    assert (task["type"], task["node"]) == ("vncshell", "pve2")
    assert prox.nodes("pve2").vncwebsocket.get(vncticket=shell["ticket"], port=shell["port"]) == {
        "port": str(shell["port"])
    }
    # The ticket names /nodes/pve2: another node's websocket, or a guest's, refuses it.
    assert (
        _refused(
            lambda: prox.nodes("pve3").vncwebsocket.get(
                vncticket=shell["ticket"], port=shell["port"]
            )
        ).status_code
        == 401
    )
    vmid = _guest(prox, "qemu")
    assert (
        _refused(
            lambda: (
                prox.nodes("pve1")
                .qemu(vmid)
                .vncwebsocket.get(vncticket=shell["ticket"], port=shell["port"])
            )
        ).status_code
        == 401
    )
    term = prox.nodes("pve2").termproxy.post(cmd="login")
    assert set(term) == {"user", "ticket", "port", "upid"}


def test_only_root_may_open_the_upgrade_shell(server):
    # PVE 8+ no longer restricts a node's shell to realm 'pam' (the schema says so).
    root = _api(server)
    userid = f"simfid{uuid.uuid4().hex[:8]}@pve"
    root.access.users.post(userid=userid, password="shell-pass-1")
    root.access.acl.put(path="/nodes/pve1", users=userid, roles="PVEAdmin")
    admin = _api(server, user=userid, password="shell-pass-1")
    assert admin.nodes("pve1").termproxy.post()["user"] == userid
    denied = _refused(lambda: admin.nodes("pve1").termproxy.post(cmd="upgrade"))
    assert denied.status_code == 403
    assert "user != root@pam" in str(denied)
    assert root.nodes("pve1").termproxy.post(cmd="upgrade")["user"] == "root@pam"


def test_spiceproxy_answers_a_remote_viewer_config_for_a_running_guest(server, unique_vmid):
    prox = _api(server)
    vmid = _guest(prox, "qemu")
    name = prox.nodes("pve1").qemu(vmid).config.get().get("name")
    spice = prox.nodes("pve1").qemu(vmid).spiceproxy.post()
    assert spice["type"] == "spice"
    assert spice["title"] == f"VM {vmid}" + (f" - {name}" if name else "")
    assert re.fullmatch(rf"pvespiceproxy:[0-9a-f]{{8}}:{vmid}:pve1::[0-9a-f]{{40}}", spice["host"])
    assert spice["proxy"] == "http://pve1:3128"
    assert isinstance(spice["tls-port"], int)
    assert spice["host-subject"].endswith("CN=pve1")
    assert "-----BEGIN CERTIFICATE-----\\n" in spice["ca"]
    assert spice["password"] and spice["delete-this-file"] == 1
    assert prox.nodes("pve1").qemu(vmid).spiceproxy.post(proxy="10.0.0.5")["proxy"] == (
        "http://10.0.0.5:3128"
    )

    upid = prox.nodes("pve1").qemu.post(vmid=unique_vmid, name="spice-off", memory=512)
    assert _wait(prox, upid)["exitstatus"] == "OK"
    stopped = _refused(lambda: prox.nodes("pve1").qemu(unique_vmid).spiceproxy.post())
    assert f"VM {unique_vmid} not running" in str(stopped)
    _wait(prox, prox.nodes("pve1").qemu(unique_vmid).delete())

    shell = prox.nodes("pve1").spiceshell.post()
    assert shell["title"] == "Shell on 'pve1'" and shell["type"] == "spice"


def test_pve6_restricts_a_node_shell_to_realm_pam(server, settings):
    """6.4's schema says "Restricted to users on realm 'pam'"; 9.x lets a pve user in."""
    from simtest_support import Session, official_apidoc

    from proxmox_simulator.config import Settings
    from proxmox_simulator.server import SimulatorServer

    root = _api(server)
    userid = f"simfid{uuid.uuid4().hex[:8]}@pve"
    root.access.users.post(userid=userid, password="shell-pass-6")
    root.access.acl.put(path="/nodes/pve1", users=userid, roles="PVEAdmin")
    assert _api(server, user=userid, password="shell-pass-6").nodes("pve1").termproxy.post()
    legacy = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract=str(official_apidoc("6.4-15")),
        clock="instant",
        task_workers=1,
        pool_max_size=3,
    )
    with (
        SimulatorServer(legacy) as pve6,
        httpx.Client(base_url=pve6.base_url + "/api2/json", timeout=30) as client,
    ):
        user = Session(client, userid, "shell-pass-6")
        for path in ("/nodes/pve1/termproxy", "/nodes/pve1/vncshell"):
            refused = user.post(path)
            assert (refused.status_code, refused.reason_phrase) == (
                403,
                "Permission check failed (realm != pam)",
            )
        admin = Session(client)
        shell = admin.post("/nodes/pve1/vncshell", data={"upgrade": 1}).json()["data"]
        assert shell["user"] == "root@pam"
