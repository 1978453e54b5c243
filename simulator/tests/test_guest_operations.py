"""Guest operations: linked clones, reset, agent calls, cloud-init, feature, RRD,
sendkey, monitor and dbus-vmstate, each response checked against every major's schema."""

from __future__ import annotations

import base64

from simtest_support import expect_data, expect_error

Q = "/nodes/{node}/qemu/{vmid}"


def _ok(root, response) -> None:
    assert root.wait(expect_data(response))["exitstatus"] == "OK"


def _running_vm(root, node: str, vmid: int, **extra) -> str:
    _ok(
        root,
        root.post(
            f"/nodes/{node}/qemu",
            data={
                "vmid": vmid,
                "name": f"ops{vmid}",
                "scsi0": "local-lvm:4",
                "net0": "virtio,bridge=vmbr0",
                "agent": 1,
                "cores": 2,
                **extra,
            },
        ),
    )
    _ok(root, root.post(f"/nodes/{node}/qemu/{vmid}/status/start"))
    return f"/nodes/{node}/qemu/{vmid}"


def test_linked_clone_from_a_template_shares_its_base(root, unique_vmid):
    vmid, linked, full = unique_vmid, unique_vmid + 1, unique_vmid + 2
    _ok(root, root.post("/nodes/pve1/qemu", data={"vmid": vmid, "scsi0": "local-lvm:2"}))
    expect_error(
        root.post(f"/nodes/pve1/qemu/{vmid}/clone", data={"newid": linked, "full": 0}),
        500,
        "only available for templates",
    )
    _ok(root, root.post(f"/nodes/pve1/qemu/{vmid}/template"))
    expect_error(
        root.post(
            f"/nodes/pve1/qemu/{vmid}/clone",
            data={"newid": linked, "full": 0, "storage": "local-lvm"},
        ),
        400,
        "storage",
    )
    upid = expect_data(root.post(f"/nodes/pve1/qemu/{vmid}/clone", data={"newid": linked}))
    assert root.wait(upid)["exitstatus"] == "OK"
    log = [line["t"] for line in expect_data(root.get(f"/nodes/pve1/tasks/{upid}/log"))]
    assert "create linked clone of drive(s) from VM" in log[0]
    config = expect_data(root.get(f"/nodes/pve1/qemu/{linked}/config"))
    # The template's disk became a base volume; the linked clone is its child.
    assert config["scsi0"].startswith(f"local-lvm:base-{vmid}-disk-0/vm-{linked}-disk-0")
    _ok(root, root.post(f"/nodes/pve1/qemu/{vmid}/clone", data={"newid": full, "full": 1}))
    assert expect_data(root.get(f"/nodes/pve1/qemu/{full}/config"))["scsi0"].startswith(
        f"local-lvm:vm-{full}-disk-0,"
    )
    feature = expect_data(
        root.get(f"/nodes/pve1/qemu/{vmid}/feature", params={"feature": "clone"}),
        Q + "/feature",
    )
    assert feature["hasFeature"] == 1 and feature["nodes"] == ["pve1"]
    assert (
        expect_data(root.get(f"/nodes/pve1/qemu/{linked}/feature", params={"feature": "clone"}))[
            "hasFeature"
        ]
        == 0
    )


def test_reset_restarts_the_guest_and_needs_it_running(root, unique_vmid):
    base = _running_vm(root, "pve2", unique_vmid)
    upid = expect_data(root.post(f"{base}/status/reset"), Q + "/status/reset", "POST")
    assert upid.split(":")[5] == "qmreset" and root.wait(upid)["exitstatus"] == "OK"
    assert expect_data(root.get(f"{base}/status/current"))["status"] == "running"
    _ok(root, root.post(f"{base}/status/stop"))
    expect_error(root.post(f"{base}/status/reset"), 500, "not running")


def test_guest_agent_calls_follow_the_guest(root, unique_vmid):
    base = _running_vm(root, "pve3", unique_vmid, ostype="l26")
    agent = f"{base}/agent"
    started = expect_data(
        root.post(f"{agent}/exec", json={"command": ["hostname"]}), Q + "/agent/exec", "POST"
    )
    status = expect_data(
        root.get(f"{agent}/exec-status", params={"pid": started["pid"]}),
        Q + "/agent/exec-status",
    )
    assert status == {"exited": 1, "exitcode": 0, "out-data": f"ops{unique_vmid}\n"}
    missing = expect_data(root.post(f"{agent}/exec", json={"command": ["nmap", "-sS"]}))
    assert (
        expect_data(root.get(f"{agent}/exec-status", params={"pid": missing["pid"]}))["exitcode"]
        == 127
    )
    expect_error(root.get(f"{agent}/exec-status", params={"pid": 99999}), 500, "no such process")
    expect_error(root.get(f"{agent}/exec-status", params={"pid": 2**31}), 500, "no such process")

    expect_data(root.post(f"{agent}/file-write", data={"file": "/etc/motd", "content": "hello"}))
    read = expect_data(
        root.get(f"{agent}/file-read", params={"file": "/etc/motd"}), Q + "/agent/file-read"
    )
    assert read == {"content": "hello"}
    raw = base64.b64encode(b"\x00\x01binary").decode()
    expect_data(
        root.post(f"{agent}/file-write", data={"file": "/tmp/b", "content": raw, "encode": 0})
    )
    assert (
        expect_data(root.get(f"{agent}/file-read", params={"file": "/tmp/b", "decode": 0}))[
            "content"
        ]
        == raw
    )
    expect_error(root.get(f"{agent}/file-read", params={"file": "/nope"}), 500, "No such file")

    fsinfo = expect_data(root.get(f"{agent}/get-fsinfo"), Q + "/agent/get-fsinfo")["result"]
    assert [(fs["mountpoint"], fs["total-bytes"]) for fs in fsinfo] == [("/", 4 * 1024**3)]
    assert expect_data(root.post(f"{agent}/fsfreeze-freeze"))["result"] == 1
    assert (
        expect_data(root.post(f"{agent}/fsfreeze-status"), Q + "/agent/fsfreeze-status", "POST")[
            "result"
        ]
        == "frozen"
    )
    expect_error(
        root.post(f"{agent}/file-write", data={"file": "/etc/x", "content": "x"}), 500, "frozen"
    )
    assert expect_data(root.post(f"{agent}/fsfreeze-thaw"))["result"] == 1
    assert expect_data(root.post(agent, data={"command": "fsfreeze-status"}))["result"] == "thawed"
    assert len(expect_data(root.get(f"{agent}/get-vcpus"), Q + "/agent/get-vcpus")["result"]) == 2
    assert (
        expect_data(root.get(f"{agent}/get-users"), Q + "/agent/get-users")["result"][0]["user"]
        == "root"
    )
    assert expect_data(root.get(f"{agent}/get-time"), Q + "/agent/get-time")["result"] > 0
    expect_error(
        root.post(
            f"{agent}/set-user-password", data={"username": "nobody", "password": "secret12"}
        ),
        500,
        "does not exist",
    )

    # An agent-driven shutdown stops the VM; the agent then cannot answer.
    expect_data(root.post(f"{agent}/shutdown"), Q + "/agent/shutdown", "POST")
    assert expect_data(root.get(f"{base}/status/current"))["status"] == "stopped"
    expect_error(root.get(f"{agent}/get-users"), 500, "not running")


def test_cloudinit_pending_regenerate_and_dump(root, unique_vmid):
    vmid = unique_vmid
    base = _running_vm(
        root,
        "pve1",
        vmid,
        ciuser="ops",
        ipconfig0="ip=10.55.0.7/24,gw=10.55.0.1",
        nameserver="10.55.0.53",
        ide2="local-lvm:cloudinit",
    )
    # The drive was generated when the VM started: nothing is pending.
    pending = expect_data(root.get(f"{base}/cloudinit"), Q + "/cloudinit")
    assert {p["key"]: p.get("value") for p in pending if p["key"] != "net0"} == {
        "ciuser": "ops",
        "ipconfig0": "ip=10.55.0.7/24,gw=10.55.0.1",
        "name": f"ops{vmid}",
        "nameserver": "10.55.0.53",
    }
    assert all("pending" not in p for p in pending)
    expect_data(root.put(f"{base}/config", data={"ipconfig0": "ip=dhcp"}))
    [changed] = [p for p in expect_data(root.get(f"{base}/cloudinit")) if "pending" in p]
    assert (changed["key"], changed["value"], changed["pending"]) == (
        "ipconfig0",
        "ip=10.55.0.7/24,gw=10.55.0.1",
        "ip=dhcp",
    )
    expect_data(root.put(f"{base}/cloudinit"))
    assert all("pending" not in p for p in expect_data(root.get(f"{base}/cloudinit")))
    user = expect_data(
        root.get(f"{base}/cloudinit/dump", params={"type": "user"}), Q + "/cloudinit/dump"
    )
    assert user.startswith("#cloud-config") and "user: ops" in user
    network = expect_data(root.get(f"{base}/cloudinit/dump", params={"type": "network"}))
    assert "type: dhcp4" in network and "mac_address: 'bc:24:11:" in network
    meta = expect_data(root.get(f"{base}/cloudinit/dump", params={"type": "meta"}))
    assert meta.startswith("instance-id: ")


def test_rrd_sendkey_and_monitor(root, unique_vmid):
    base = _running_vm(root, "pve2", unique_vmid)
    points = expect_data(root.get(f"{base}/rrddata", params={"timeframe": "hour"}), Q + "/rrddata")
    assert len(points) == 70 and all(p["maxcpu"] == 2 for p in points)
    assert points[-1]["time"] - points[0]["time"] == 69 * 60
    image = expect_data(
        root.get(f"{base}/rrd", params={"timeframe": "day", "ds": "cpu,mem"}), Q + "/rrd"
    )
    assert image["filename"].endswith(".png")
    expect_error(root.get(f"{base}/rrd", params={"timeframe": "day", "ds": "bogus"}), 400, "ds")

    expect_data(root.put(f"{base}/sendkey", data={"key": "ctrl-alt-delete"}))
    expect_error(root.put(f"{base}/sendkey", data={"key": "ctrl-banana"}), 400, "unknown key")
    status = expect_data(
        root.post(f"{base}/monitor", data={"command": "info status"}), Q + "/monitor", "POST"
    )
    assert status == "VM status: running\n"
    assert "unknown command" in expect_data(
        root.post(f"{base}/monitor", data={"command": "frobnicate"})
    )
    _ok(root, root.post(f"{base}/status/stop"))
    expect_error(root.put(f"{base}/sendkey", data={"key": "ret"}), 500, "not running")
    stopped = expect_data(root.get(f"{base}/rrddata", params={"timeframe": "hour"}))
    assert "cpu" not in stopped[-1]


def test_dbus_vmstate_runs_only_where_the_vm_runs(root, unique_vmid):
    base = _running_vm(root, "pve2", unique_vmid)
    for action in ("start", "stop"):
        assert expect_data(root.post(f"{base}/dbus-vmstate", data={"action": action})) is None
    here = f"VM {unique_vmid} not running locally on node 'pve1'"
    expect_error(
        root.post(f"/nodes/pve1/qemu/{unique_vmid}/dbus-vmstate", data={"action": "start"}),
        400,
        here,
    )
    expect_error(root.post(f"{base}/dbus-vmstate", data={"action": "pause"}), 400, "action")
    _ok(root, root.post(f"{base}/status/stop"))
    expect_error(
        root.post(f"{base}/dbus-vmstate", data={"action": "stop"}),
        400,
        f"VM {unique_vmid} not running locally on node 'pve2'",
    )


def test_move_disk_and_unlink(root, unique_vmid):
    vmid = unique_vmid
    _ok(
        root,
        root.post(
            "/nodes/pve1/qemu",
            data={"vmid": vmid, "scsi0": "local-lvm:2", "scsi1": "local-lvm:1"},
        ),
    )
    base = f"/nodes/pve1/qemu/{vmid}"
    expect_error(
        root.post(f"{base}/move_disk", data={"disk": "scsi0", "storage": "local-lvm"}),
        500,
        "it is on",
    )
    expect_error(
        root.post(f"{base}/move_disk", data={"disk": "scsi9", "storage": "shared-nfs"}),
        500,
        "does not exist",
    )
    upid = expect_data(
        root.post(f"{base}/move_disk", data={"disk": "scsi0", "storage": "shared-nfs"}),
        Q + "/move_disk",
        "POST",
    )
    assert upid.split(":")[5] == "qmmove" and root.wait(upid)["exitstatus"] == "OK"
    config = expect_data(root.get(f"{base}/config"))
    assert (
        config["scsi0"].startswith(f"shared-nfs:vm-{vmid}-disk-") and "size=2G" in config["scsi0"]
    )
    assert config["unused0"] == f"local-lvm:vm-{vmid}-disk-0"
    _ok(
        root,
        root.post(
            f"{base}/move_disk", data={"disk": "scsi1", "storage": "shared-nfs", "delete": 1}
        ),
    )
    config = expect_data(root.get(f"{base}/config"))
    assert "unused1" not in config
    lvm = expect_data(root.get("/nodes/pve1/storage/local-lvm/content", params={"vmid": vmid}))
    assert [v["volid"] for v in lvm] == [f"local-lvm:vm-{vmid}-disk-0"]  # only the unused one

    expect_data(root.put(f"{base}/unlink", data={"idlist": "scsi1"}))
    config = expect_data(root.get(f"{base}/config"))
    assert "scsi1" not in config and config["unused1"].startswith("shared-nfs:")
    expect_data(root.put(f"{base}/unlink", data={"idlist": "unused0,unused1"}))
    config = expect_data(root.get(f"{base}/config"))
    assert not [k for k in config if k.startswith("unused")]
    assert (
        expect_data(root.get("/nodes/pve1/storage/local-lvm/content", params={"vmid": vmid})) == []
    )


def test_snapshot_rollback_restores_memory_and_cpus_everywhere(root, unique_vmid):
    vmid = unique_vmid
    _ok(
        root,
        root.post(
            "/nodes/pve2/qemu",
            data={
                "vmid": vmid,
                "name": f"rollback{vmid}",
                "memory": 1536,
                "cores": 1,
                "sockets": 1,
                "scsi0": "local-lvm:4",
            },
        ),
    )
    _ok(root, root.post(f"/nodes/pve2/qemu/{vmid}/snapshot", data={"snapname": "small-shape"}))
    expect_data(
        root.put(f"/nodes/pve2/qemu/{vmid}/config", data={"memory": 6144, "cores": 3, "sockets": 2})
    )

    def shape() -> dict:
        listed = next(
            g for g in expect_data(root.get("/nodes/pve2/qemu")) if int(g["vmid"]) == vmid
        )
        status = expect_data(root.get(f"/nodes/pve2/qemu/{vmid}/status/current"))
        resource = next(
            r
            for r in expect_data(root.get("/cluster/resources", params={"type": "vm"}))
            if r["id"] == f"qemu/{vmid}"
        )
        return {
            "list": (listed["maxmem"], listed["cpus"]),
            "status": (status["maxmem"], status["cpus"]),
            "resources": (resource["maxmem"], resource["maxcpu"]),
        }

    mib = 1024**2
    assert set(shape().values()) == {(6144 * mib, 6)}
    _ok(root, root.post(f"/nodes/pve2/qemu/{vmid}/snapshot/small-shape/rollback"))
    assert shape() == {k: (1536 * mib, 1) for k in ("list", "status", "resources")}
    config = expect_data(root.get(f"/nodes/pve2/qemu/{vmid}/config"))
    assert (int(config["memory"]), config["cores"], config["sockets"]) == (1536, 1, 1)
    assert config["parent"] == "small-shape"
