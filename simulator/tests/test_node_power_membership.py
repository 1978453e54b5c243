"""Node reboot/shutdown (stopall/startall tasks), corosync membership changes,
joining a cluster, and copying volumes — through HTTP.

These change nodes themselves, so they run on a simulator and database of
their own instead of the session's shared one.
"""

from __future__ import annotations

import httpx
import pytest
from simtest_support import (
    ROOT_PASSWORD,
    Session,
    create_database,
    drop_database,
    expect_data,
    expect_error,
    make_vm,
    run,
)

from proxmox_simulator.config import Settings


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    from proxmox_simulator.cli import seed_database
    from proxmox_simulator.server import SimulatorServer

    url = create_database("power")
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("power"),
        contract="fakepve",
        clock="instant",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
    )
    try:
        run(seed_database(settings, "small", 3, ROOT_PASSWORD))
        with (
            SimulatorServer(settings) as server,
            httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
        ):
            yield Session(client)
    finally:
        drop_database(url)


def _status(session, node: str, vmid: int) -> str:
    return expect_data(session.get(f"/nodes/{node}/qemu/{vmid}/status/current"))["status"]


def _last_task(session, node: str, kind: str) -> dict:
    tasks = expect_data(
        session.get(f"/nodes/{node}/tasks", params={"typefilter": kind, "source": "all"})
    )
    assert tasks, f"no {kind} task on {node}"
    return max(tasks, key=lambda t: (t["starttime"], t["upid"]))


def _guests_on(session, node: str) -> list[dict]:
    return expect_data(session.get(f"/nodes/{node}/qemu")) + expect_data(
        session.get(f"/nodes/{node}/lxc")
    )


def test_node_reboot_stops_guests_then_starts_the_onboot_ones(own):
    node = "pve3"
    assert any(g["status"] == "running" for g in _guests_on(own, node))  # seeded ones too
    onboot = make_vm(own, node, 991001, onboot=1, start=1)
    manual = make_vm(own, node, 991002, start=1)
    stopped_onboot = make_vm(own, node, 991003, onboot=1)
    boot_before = expect_data(own.get(f"/nodes/{node}/status"))["uptime"]

    assert expect_data(own.post(f"/nodes/{node}/status", data={"command": "reboot"}), None) is None
    stopall = _last_task(own, node, "stopall")
    assert own.wait(stopall["upid"])["exitstatus"] == "OK"
    assert stopall["user"] == "root@pam"
    log = [line["t"] for line in expect_data(own.get(f"/nodes/{node}/tasks/{stopall['upid']}/log"))]
    assert f"Stopping VM {manual} (timeout = 180 seconds)" in log
    startall = _last_task(own, node, "startall")
    assert own.wait(startall["upid"])["exitstatus"] == "OK"
    assert _status(own, node, onboot) == "running"
    assert _status(own, node, stopped_onboot) == "running"
    assert _status(own, node, manual) == "stopped"
    assert expect_data(own.get(f"/nodes/{node}/status"))["uptime"] <= max(boot_before, 1)

    # stopall / startall on their own, narrowed to listed guests.
    upid = expect_data(
        own.post(f"/nodes/{node}/stopall", data={"vms": str(onboot)}),
        "/nodes/{node}/stopall",
        "POST",
    )
    assert own.wait(upid)["exitstatus"] == "OK"
    assert (_status(own, node, onboot), _status(own, node, stopped_onboot)) == (
        "stopped",
        "running",
    )
    upid = expect_data(own.post(f"/nodes/{node}/startall", data={"vms": str(manual)}))
    own.wait(upid)
    assert _status(own, node, manual) == "stopped"  # not onboot: needs force
    upid = expect_data(own.post(f"/nodes/{node}/startall", data={"vms": str(manual), "force": 1}))
    own.wait(upid)
    assert _status(own, node, manual) == "running"

    # A shutdown stops everything and leaves the node offline.
    expect_data(own.post(f"/nodes/{node}/status", data={"command": "shutdown"}))
    assert own.wait(_last_task(own, node, "stopall")["upid"])["exitstatus"] == "OK"
    assert {g["status"] for g in _guests_on(own, node)} == {"stopped"}
    nodes = {n["node"]: n for n in expect_data(own.get("/nodes"))}
    assert nodes[node]["status"] == "offline"
    expect_error(own.post(f"/nodes/{node}/status", data={"command": "reboot"}), 595, "offline")
    expect_error(own.post(f"/nodes/{node}/status", data={"command": "halt"}), 400, "command")


def test_cluster_members_are_added_and_removed(own):
    before = expect_data(own.get("/cluster/status"))[0]["version"]
    added = expect_data(
        own.post("/cluster/config/nodes/pve9", data={"link0": "10.99.0.9", "votes": 2}),
        "/cluster/config/nodes/{node}",
        "POST",
    )
    assert (
        "name: pve9" in added["corosync_conf"] and "ring0_addr: 10.99.0.9" in added["corosync_conf"]
    )
    assert len(added["corosync_authkey"]) > 100 and added["warnings"] == []
    members = {n["node"]: n for n in expect_data(own.get("/cluster/config/nodes"))}
    assert members["pve9"]["quorum_votes"] == "2" and members["pve9"]["ring0_addr"] == "10.99.0.9"
    assert "pve9" in {n["node"] for n in expect_data(own.get("/nodes"))}
    assert expect_data(own.get("/cluster/status"))[0]["version"] == before + 1
    expect_error(
        own.post("/cluster/config/nodes/pve9", data={"link0": "10.99.0.10"}), 500, "exists"
    )
    expect_error(
        own.post("/cluster/config/nodes/pve8", data={"new_node_ip": "10.99.0.9"}), 500, "used by"
    )
    expect_error(
        own.post("/cluster/config/nodes/pve8", data={"link0": "10.99.0.8", "nodeid": 1}),
        500,
        "already used",
    )
    expect_error(own.post("/cluster/config/nodes/pve8", data={}), 400, "link0")

    vmid = make_vm(own, "pve9", 991010)
    expect_error(own.delete("/cluster/config/nodes/pve9"), 500, "still hosts guests")
    own.wait(expect_data(own.delete(f"/nodes/pve9/qemu/{vmid}")))
    expect_data(own.delete("/cluster/config/nodes/pve9"), "/cluster/config/nodes/{node}", "DELETE")
    assert "pve9" not in {n["node"] for n in expect_data(own.get("/cluster/config/nodes"))}
    assert "pve9" not in {n["node"] for n in expect_data(own.get("/nodes"))}
    expect_error(own.delete("/cluster/config/nodes/pve9"), 500, "not a known host")
    expect_error(own.delete("/cluster/config/nodes/pve1"), 500, "Cannot delete myself")


def test_joining_another_cluster(own):
    fingerprint = ":".join(["AB"] * 32)
    join = {"hostname": "192.0.2.50", "fingerprint": fingerprint, "password": "secret"}
    expect_error(own.post("/cluster/config/join", data=join), 500, "corosync.conf' already exists")
    upid = expect_data(
        own.post("/cluster/config/join", data={**join, "force": 1}),
        "/cluster/config/join",
        "POST",
    )
    assert "no outgoing connections" in own.wait(upid)["exitstatus"]


def _content(session, node: str, storage: str) -> dict[str, dict]:
    listed = expect_data(session.get(f"/nodes/{node}/storage/{storage}/content"))
    return {v["volid"]: v for v in listed}


def test_volume_copy_is_a_task_that_accounts_space(own):
    source = "local:iso/debian-12.9.0-amd64-netinst.iso"
    assert source in _content(own, "pve1", "local")
    used = expect_data(own.get("/nodes/pve1/storage/local/status"))["used"]
    upid = expect_data(
        own.post(
            f"/nodes/pve1/storage/local/content/{source}",
            data={"target": "iso/copy.iso"},
        ),
        "/nodes/{node}/storage/{storage}/content/{volume}",
        "POST",
    )
    assert upid.split(":")[5] == "imgcopy" and own.wait(upid)["exitstatus"] == "OK"
    content = _content(own, "pve1", "local")
    assert content["local:iso/copy.iso"]["size"] == content[source]["size"]
    after = expect_data(own.get("/nodes/pve1/storage/local/status"))["used"]
    assert after == used + content[source]["size"]
    expect_error(
        own.post(f"/nodes/pve1/storage/local/content/{source}", data={"target": "iso/copy.iso"}),
        500,
        "already exists",
    )
    expect_error(
        own.post(
            f"/nodes/pve1/storage/local/content/{source}", data={"target": "local-lvm:iso/x.iso"}
        ),
        400,
        "storage ID mismatch",
    )
    expect_error(
        own.post(f"/nodes/pve1/storage/local/content/{source}", data={"target": "vztmpl/x.iso"}),
        400,
        "iso/<file>",
    )

    disk = expect_data(
        own.post(
            "/nodes/pve1/storage/local-lvm/content",
            data={"vmid": 991020, "filename": "vm-991020-disk-5", "size": "1G"},
        )
    )
    upid = expect_data(
        own.post(
            f"/nodes/pve1/storage/local-lvm/content/{disk}",
            data={"target": "vm-991021-disk-0", "target_node": "pve2"},
        )
    )
    assert own.wait(upid)["exitstatus"] == "OK"
    copied = _content(own, "pve2", "local-lvm")["local-lvm:vm-991021-disk-0"]
    assert (copied["vmid"], copied["size"]) == (991021, 1024**3)
    assert "local-lvm:vm-991021-disk-0" not in _content(own, "pve1", "local-lvm")
    expect_error(
        own.post(f"/nodes/pve1/storage/local-lvm/content/{disk}", data={"target": "disk-copy"}),
        400,
        "unable to parse volume name",
    )
