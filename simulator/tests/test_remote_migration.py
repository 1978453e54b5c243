"""Remote migration: the source side (``remote_migrate``) and the container's target side
(``mtunnel``/``mtunnelwebsocket``), through the HTTP API."""

from __future__ import annotations

from simtest_support import expect_data, expect_error

CT = "/nodes/{node}/lxc/{vmid}"


def _ok(root, response) -> None:
    assert root.wait(expect_data(response))["exitstatus"] == "OK"


def _container(root, node: str, vmid: int, **extra) -> None:
    data = {"vmid": vmid, "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    _ok(root, root.post(f"/nodes/{node}/lxc", data={**data, "rootfs": "local-lvm:1", **extra}))


def test_container_mtunnel_reserves_the_ctid_until_no_source_connects(root, unique_vmid):
    incoming, existing = unique_vmid, unique_vmid + 1
    tunnel = f"/nodes/localhost/lxc/{incoming}/mtunnel"
    expect_error(
        root.post(f"/nodes/pve2/lxc/{incoming}/mtunnel"),
        400,
        "node needs to be 'localhost' or local hostname 'pve1'",
    )
    expect_error(root.post(tunnel, data={"storages": "nosuch"}), 500, "'nosuch' does not exist")
    expect_error(root.post(tunnel, data={"storages": "local"}), 500, "does not support CT rootdirs")
    expect_error(
        root.post(tunnel, data={"bridges": "vmbr0,vmbr404"}), 500, "bridge 'vmbr404' does not"
    )
    _container(root, "pve2", existing)
    expect_error(
        root.post(f"/nodes/pve1/lxc/{existing}/mtunnel"),
        400,
        f"unable to create empty CT config - CT {existing} already exists on node 'pve2'",
    )

    answer = expect_data(
        root.post(tunnel, data={"storages": "local-lvm", "bridges": "vmbr0"}),
        CT + "/mtunnel",
        "POST",
    )
    socket = f"/run/pve/ct-{incoming}.mtunnel"
    assert answer["socket"] == socket and answer["ticket"].startswith("PVETUNNEL:")
    assert f":vzmtunnel:{incoming}:root@pam:" in answer["upid"]
    # The websocket takes that ticket for that socket, of a container configured here
    # (the instant clock may already have ended the tunnel task and its reservation).
    here = unique_vmid + 2
    _container(root, "pve1", here)
    websocket = f"/nodes/pve1/lxc/{here}/mtunnelwebsocket"
    ticket = answer["ticket"]
    assert expect_data(root.get(websocket, params={"socket": socket, "ticket": ticket})) == {
        "socket": socket
    }
    expect_error(
        root.get(websocket, params={"socket": "/run/pve/ct-1.mtunnel", "ticket": ticket}),
        401,
        "invalid PVETUNNEL ticket",
    )
    # the websocket of a container: a VM's config is not found under lxc/
    expect_error(
        root.get(
            f"/nodes/pve1/lxc/{existing}/mtunnelwebsocket",
            params={"socket": socket, "ticket": ticket},
        ),
        500,
        f"lxc/{existing}.conf' does not exist",
    )
    status = root.wait(answer["upid"])
    assert status["exitstatus"] == "Exiting mtunnel"
    log = [line["t"] for line in expect_data(root.get(f"/nodes/pve1/tasks/{answer['upid']}/log"))]
    assert log[0] == "mtunnel started" and "Removing temporary VM config.." in log
    expect_error(root.get(f"/nodes/pve1/lxc/{incoming}/config"), 500, "does not exist")
