"""Remote migration: the source side (``remote_migrate``) and the container's target side
(``mtunnel``/``mtunnelwebsocket``), through the HTTP API."""

from __future__ import annotations

import hashlib
import ssl
import uuid
from urllib.parse import urlsplit

import pytest
from simtest_support import expect_data, expect_error

FAKE_FP = ":".join(["AB"] * 32)


@pytest.fixture(scope="module")
def endpoint(root, server):
    """This very simulator as a remote: loopback host and port, a root API token and the
    served certificate's SHA-256 fingerprint."""
    address = urlsplit(server.base_url)
    tokenid = f"rm{uuid.uuid4().hex[:8]}"
    made = expect_data(root.post(f"/access/users/root@pam/token/{tokenid}", data={"privsep": 0}))
    der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((address.hostname, address.port)))
    fingerprint = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    token = f"PVEAPIToken=root@pam!{tokenid}={made['value']}"
    yield {"host": address.hostname, "port": address.port, "token": token, "fp": fingerprint}
    root.delete(f"/access/users/root@pam/token/{tokenid}")


def _target(ep: dict, **override) -> str:
    values = {
        "host": ep["host"],
        "port": ep["port"],
        "apitoken": ep["token"],
        "fingerprint": ep["fp"],
        **override,
    }
    return ",".join(f"{k}={v}" for k, v in values.items() if v is not None)


def _vm(root, node: str, vmid: int, **extra) -> None:
    data = {"vmid": vmid, "scsi0": "local-lvm:1", "net0": "virtio,bridge=vmbr0", **extra}
    _ok(root, root.post(f"/nodes/{node}/qemu", data=data))


def _ok(root, response) -> None:
    assert root.wait(expect_data(response))["exitstatus"] == "OK"


def _container(root, node: str, vmid: int, **extra) -> None:
    data = {"vmid": vmid, "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    _ok(root, root.post(f"/nodes/{node}/lxc", data={**data, "rootfs": "local-lvm:1", **extra}))


_KINDS = {
    "qemu": ("VM", "does not support vm images", "qmtunnel", "/run/qemu-server/{}.mtunnel"),
    "lxc": ("CT", "does not support CT rootdirs", "vzmtunnel", "/run/pve/ct-{}.mtunnel"),
}


def _guest(root, kind: str, node: str, vmid: int) -> None:
    (_vm if kind == "qemu" else _container)(root, node, vmid)


def _log(root, upid: str) -> list[str]:
    node = upid.split(":")[1]
    return [line["t"] for line in expect_data(root.get(f"/nodes/{node}/tasks/{upid}/log"))]


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_mtunnel_reserves_the_vmid_until_no_source_connects(root, unique_vmid, kind):
    noun, no_content, task_type, socket_of = _KINDS[kind]
    incoming, existing, here = unique_vmid, unique_vmid + 1, unique_vmid + 2
    tunnel = f"/nodes/localhost/{kind}/{incoming}/mtunnel"
    # Answered by the node that receives it (cluster/status's local one): pve1.
    expect_error(
        root.post(f"/nodes/pve2/{kind}/{incoming}/mtunnel"),
        400,
        "node needs to be 'localhost' or local hostname 'pve1'",
    )
    expect_error(root.post(tunnel, data={"storages": "nosuch"}), 500, "'nosuch' does not exist")
    expect_error(root.post(tunnel, data={"storages": "local"}), 500, no_content)
    expect_error(
        root.post(tunnel, data={"bridges": "vmbr0,vmbr404"}), 500, "bridge 'vmbr404' does not"
    )
    _guest(root, kind, "pve2", existing)
    expect_error(
        root.post(f"/nodes/pve1/{kind}/{existing}/mtunnel"),
        400,
        f"unable to create empty {noun} config - {noun} {existing} already exists on node 'pve2'",
    )

    answer = expect_data(
        root.post(tunnel, data={"storages": "local-lvm", "bridges": "vmbr0"}),
        f"/nodes/{{node}}/{kind}/{{vmid}}/mtunnel",
        "POST",
    )
    socket = socket_of.format(incoming)
    assert answer["socket"] == socket and answer["ticket"].startswith("PVETUNNEL:")
    assert f":{task_type}:{incoming}:root@pam:" in answer["upid"]
    # The websocket takes that ticket, from that user, for that socket, of a guest whose
    # config is on the node (PVE checks the config first, then the ticket); the instant
    # clock may already have ended the tunnel task and its reservation.
    _guest(root, kind, "pve1", here)
    websocket = f"/nodes/pve1/{kind}/{here}/mtunnelwebsocket"
    ticket = answer["ticket"]
    opened = expect_data(root.get(websocket, params={"socket": socket, "ticket": ticket}))
    assert opened == {"socket": socket}
    expect_error(
        root.get(websocket, params={"socket": socket_of.format(1), "ticket": ticket}),
        401,
        "invalid PVETUNNEL ticket",
    )
    expect_error(
        root.get(
            f"/nodes/pve1/{kind}/{existing}/mtunnelwebsocket",
            params={"socket": socket, "ticket": ticket},
        ),
        500,
        f"{'qemu-server' if kind == 'qemu' else 'lxc'}/{existing}.conf' does not exist",
    )
    # No source ever connects: the task gives up and the reserved config goes.
    assert root.wait(answer["upid"])["exitstatus"] == "Exiting mtunnel"
    log = _log(root, answer["upid"])
    assert log[0] == "mtunnel started" and "Removing temporary VM config.." in log
    expect_error(root.get(f"/nodes/pve1/{kind}/{incoming}/config"), 500, "does not exist")
    again = expect_data(root.post(tunnel))
    assert root.wait(again["upid"])["exitstatus"] == "Exiting mtunnel"


def test_remote_migrate_checks_the_request_and_the_endpoint_before_a_task(
    root, endpoint, unique_vmid
):
    vmid = unique_vmid
    _vm(root, "pve1", vmid)
    path = f"/nodes/pve1/qemu/{vmid}/remote_migrate"
    base = {"target-storage": "local-lvm", "target-bridge": "vmbr0", "target-vmid": vmid + 1}
    # the endpoint property string: host and apitoken are required
    expect_error(
        root.post(path, data={**base, "target-endpoint": f"host={endpoint['host']}"}),
        400,
        "target-endpoint",
    )
    # nothing beyond loopback is reachable
    expect_error(
        root.post(
            path, data={**base, "target-endpoint": "host=192.0.2.10,apitoken=PVEAPIToken=a@pve!b=c"}
        ),
        500,
        "Can't connect to 192.0.2.10:8006 (Connection refused)",
    )
    # the served certificate must carry the pinned fingerprint (none pinned: not trusted)
    unverified = f"fingerprint '{endpoint['fp']}' not verified, abort!"
    for fingerprint in (FAKE_FP, None):
        answer = root.post(
            path, data={**base, "target-endpoint": _target(endpoint, fingerprint=fingerprint)}
        )
        expect_error(answer, 500, unverified)
    # the API token authenticates at the endpoint
    bad_token = _target(endpoint, apitoken="PVEAPIToken=root@pam!nosuch=00000000-0000")
    answer = root.post(path, data={**base, "target-endpoint": bad_token})
    assert answer.status_code == 500 and "invalid token" in answer.reason_phrase.lower(), (
        answer.status_code,
        answer.reason_phrase,
    )
    good = {**base, "target-endpoint": _target(endpoint)}
    expect_error(
        root.post(path, data={**good, "target-storage": "1"}),
        500,
        "remote migration requires explicit storage mapping!",
    )
    expect_error(
        root.post(path, data={**good, "target-storage": "local-lvm:a,local-lvm:b"}),
        400,
        "failed to parse storage map: duplicate mapping for source 'local-lvm'",
    )
    _ok(root, root.post(f"/nodes/pve1/qemu/{vmid}/status/start"))
    expect_error(root.post(path, data=good), 500, "can't migrate running VM without --online")
    _ok(root, root.post(f"/nodes/pve1/qemu/{vmid}/status/stop"))
    assert root.post("/cluster/ha/resources", data={"sid": f"vm:{vmid}"}).status_code == 200
    expect_error(
        root.post(path, data=good), 400, "cannot remote-migrate VM that is configured for HA"
    )
    assert root.delete(f"/cluster/ha/resources/vm:{vmid}").status_code == 200
    answer = root.put(f"/nodes/pve1/qemu/{vmid}/config", data={"lock": "backup"})
    assert answer.status_code == 200, answer.text
    expect_error(root.post(path, data=good), 500, "VM is locked (backup)")


def test_remote_migrate_to_this_simulator_opens_the_tunnel_then_aborts(root, endpoint, unique_vmid):
    vmid, incoming = unique_vmid, unique_vmid + 1
    _vm(root, "pve2", vmid)
    path = f"/nodes/pve2/qemu/{vmid}/remote_migrate"
    good = {
        "target-endpoint": _target(endpoint),
        "target-storage": "local-lvm",
        "target-bridge": "vmbr0",
        "target-vmid": incoming,
        "delete": 1,
    }
    upid = expect_data(
        root.post(path, data=good), "/nodes/{node}/qemu/{vmid}/remote_migrate", "POST"
    )
    assert f":qmigrate:{vmid}:root@pam:" in upid
    status = root.wait(upid)
    assert status["exitstatus"] == "migration aborted"
    log = _log(root, upid)
    assert log[0] == f"starting migration of VM {vmid} to node 'pve1' ({endpoint['host']})"
    started = next(line for line in log if line.startswith("remote: started migration tunnel"))
    tunnel_upid = started.split("'")[1]
    assert f":qmtunnel:{incoming}:root@pam!" in tunnel_upid
    assert any("failed to connect websocket tunnel" in line for line in log), log
    # the target's tunnel gives up and drops its reservation; the source stays, unlocked
    assert root.wait(tunnel_upid)["exitstatus"] == "Exiting mtunnel"
    expect_error(root.get(f"/nodes/pve1/qemu/{incoming}/config"), 500, "does not exist")
    assert "lock" not in expect_data(root.get(f"/nodes/pve2/qemu/{vmid}/config"))
    # the target VMID must be free on the endpoint: the tunnel is refused there
    upid = expect_data(root.post(path, data={**good, "target-vmid": vmid}))
    assert root.wait(upid)["exitstatus"] == "migration aborted"
    text = "\n".join(_log(root, upid))
    assert "ERROR: failed to start remote tunnel - Parameter verification failed." in text
    assert f"ERROR: vmid: unable to create empty VM config - VM {vmid} already exists" in text


def test_container_remote_migrate_refusals(root, endpoint, unique_vmid):
    vmid = unique_vmid
    _container(root, "pve1", vmid)
    path = f"/nodes/pve1/lxc/{vmid}/remote_migrate"
    good = {
        "target-endpoint": _target(endpoint),
        "target-storage": "local-lvm",
        "target-bridge": "vmbr0",
        "target-vmid": vmid + 1,
    }
    _ok(root, root.post(f"/nodes/pve1/lxc/{vmid}/status/start"))
    expect_error(
        root.post(path, data=good),
        500,
        "can't migrate running container without --online or --restart",
    )
    _ok(root, root.post(f"/nodes/pve1/lxc/{vmid}/status/stop"))
    assert root.post("/cluster/ha/resources", data={"sid": f"ct:{vmid}"}).status_code == 200
    expect_error(root.post(path, data=good), 400, "cannot migrate HA-managed CT to remote cluster")
    assert root.delete(f"/cluster/ha/resources/ct:{vmid}").status_code == 200
    upid = expect_data(root.post(path, data=good))
    assert f":vzmigrate:{vmid}:" in upid
    assert root.wait(upid)["exitstatus"] == "migration aborted"
    log = _log(root, upid)
    assert any(":vzmtunnel:" in line for line in log), log
