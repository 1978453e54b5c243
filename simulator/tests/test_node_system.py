"""A node's own configuration through HTTP: network, DNS, hosts, time, disks,
services, subscription, apt, scans and node config."""

from __future__ import annotations

import uuid

from simtest_support import expect_data, expect_error


def test_node_network_changes_stay_pending_until_reload(root):
    node = "pve3"
    bridge = f"vmbr{uuid.uuid4().int % 9000 + 100}"
    path = f"/nodes/{node}/network"
    expect_data(
        root.post(
            path,
            data={
                "iface": bridge,
                "type": "bridge",
                "cidr": "10.77.0.1/24",
                "bridge_ports": "",
                "autostart": 1,
                "comments": "lab",
            },
        )
    )
    listing = root.get(path)
    entries = expect_data(listing, "/nodes/{node}/network")
    # Pending like PVE: the new bridge is listed (not active) and the diff is reported.
    new = next(e for e in entries if e["iface"] == bridge)
    assert (new["address"], new["netmask"], new.get("active")) == ("10.77.0.1", "24", None)
    assert f"+iface {bridge} inet static" in listing.json()["changes"]
    expect_error(root.post(path, data={"iface": bridge, "type": "bridge"}), 500, "already exists")
    expect_error(
        root.post(path, data={"iface": f"{bridge}x", "type": "bridge", "bridge_ports": "eno9"}),
        400,
        "does not exist",
    )
    expect_error(root.post(path, data={"iface": "eno7", "type": "eth"}), 400, "cannot create")
    expect_data(
        root.put(f"{path}/{bridge}", data={"type": "bridge", "mtu": 9000, "delete": "comments"})
    )
    iface = expect_data(root.get(f"{path}/{bridge}"), "/nodes/{node}/network/{iface}")
    assert iface["mtu"] == 9000 and "comments" not in iface

    upid = expect_data(root.put(path), "/nodes/{node}/network", "PUT")
    assert upid.split(":")[5:7] == ["srvreload", "networking"]
    assert root.wait(upid)["exitstatus"] == "OK"
    after = root.get(path)
    assert "changes" not in after.json()
    assert next(e for e in after.json()["data"] if e["iface"] == bridge)["active"] == 1
    # PVE reloads (ifreload -a) with nothing pending too: a task that changes nothing.
    again = expect_data(root.put(path))
    assert root.wait(again)["exitstatus"] == "OK"
    log = expect_data(root.get(f"/nodes/{again.split(':')[1]}/tasks/{again}/log"))
    assert any(line["t"] == "nothing to apply" for line in log)

    expect_data(root.delete(f"{path}/{bridge}"))
    assert bridge not in {e["iface"] for e in expect_data(root.get(path))}
    expect_data(root.delete(path))  # revert: the deletion was only pending
    assert bridge in {e["iface"] for e in expect_data(root.get(path))}
    expect_error(root.delete(f"{path}/eno1"), 500, "is used by 'vmbr0'")


def test_node_dns_hosts_time_and_index(root):
    dns = expect_data(root.get("/nodes/pve2/dns"), "/nodes/{node}/dns")
    assert dns["search"]
    expect_data(root.put("/nodes/pve2/dns", data={"search": "lab.example", "dns1": "192.0.2.53"}))
    assert expect_data(root.get("/nodes/pve2/dns")) == {
        "search": "lab.example",
        "dns1": "192.0.2.53",
    }
    expect_error(
        root.put("/nodes/pve2/dns", data={"search": "x", "dns1": "not-an-ip"}), 400, "dns1"
    )

    hosts = expect_data(root.get("/nodes/pve2/hosts"), "/nodes/{node}/hosts")
    assert "pve2" in hosts["data"]
    expect_data(
        root.post(
            "/nodes/pve2/hosts",
            data={"data": hosts["data"] + "192.0.2.9 nas\n", "digest": hosts["digest"]},
        )
    )
    expect_error(
        root.post("/nodes/pve2/hosts", data={"data": "x", "digest": hosts["digest"]}),
        500,
        "changed by other user",
    )
    assert "192.0.2.9 nas" in expect_data(root.get("/nodes/pve2/hosts"))["data"]

    expect_data(root.put("/nodes/pve2/time", data={"timezone": "Europe/Berlin"}))
    clock = expect_data(root.get("/nodes/pve2/time"), "/nodes/{node}/time")
    assert clock["timezone"] == "Europe/Berlin" and clock["localtime"] - clock["time"] in (
        3600,
        7200,
    )
    expect_error(root.put("/nodes/pve2/time", data={"timezone": "Mars/Olympus"}), 400, "timezone")
    expect_data(root.put("/nodes/pve2/time", data={"timezone": "UTC"}))

    index = expect_data(root.get("/nodes/pve2"), "/nodes/{node}")
    assert {"qemu", "lxc", "storage", "network", "vzdump"} <= {e["name"] for e in index}
    expect_error(root.get("/nodes/nosuchnode"), 500, "hostname lookup")


def test_node_disks_build_zfs_and_lvm_thin_storages(root):
    node = "pve3"
    disks = expect_data(root.get(f"/nodes/{node}/disks/list"), "/nodes/{node}/disks/list")
    unused = [d["devpath"] for d in disks if "used" not in d]
    assert unused == ["/dev/sdb", "/dev/sdc", "/dev/sdd"] or len(unused) >= 2
    smart = expect_data(
        root.get(f"/nodes/{node}/disks/smart", params={"disk": "/dev/sda"}),
        "/nodes/{node}/disks/smart",
    )
    assert smart["health"] == "PASSED"
    name = f"tank{uuid.uuid4().hex[:4]}"
    expect_error(
        root.post(
            f"/nodes/{node}/disks/zfs",
            data={"name": name, "raidlevel": "mirror", "devices": unused[0]},
        ),
        400,
        "at least 2",
    )
    expect_error(
        root.post(
            f"/nodes/{node}/disks/zfs",
            data={"name": name, "raidlevel": "single", "devices": "/dev/sda"},
        ),
        500,
        "already in use",
    )
    upid = expect_data(
        root.post(
            f"/nodes/{node}/disks/zfs",
            data={
                "name": name,
                "raidlevel": "mirror",
                "devices": ",".join(unused[:2]),
                "add_storage": 1,
            },
        ),
        "/nodes/{node}/disks/zfs",
        "POST",
    )
    assert upid.split(":")[5] == "zfscreate" and root.wait(upid)["exitstatus"] == "OK"
    pools = expect_data(root.get(f"/nodes/{node}/disks/zfs"), "/nodes/{node}/disks/zfs")
    assert any(p["name"] == name and p["size"] == 1024**4 for p in pools)
    detail = expect_data(
        root.get(f"/nodes/{node}/disks/zfs/{name}"), "/nodes/{node}/disks/zfs/{name}"
    )
    assert len(detail["children"][0]["children"]) == 2
    storage = expect_data(root.get(f"/storage/{name}"))
    assert (storage["type"], storage["nodes"], storage["pool"]) == ("zfspool", node, name)
    used = {d["devpath"]: d.get("used") for d in expect_data(root.get(f"/nodes/{node}/disks/list"))}
    assert used[unused[0]] == "ZFS" and used[unused[1]] == "ZFS"
    upid = expect_data(
        root.delete(
            f"/nodes/{node}/disks/zfs/{name}", params={"cleanup-disks": 1, "cleanup-config": 1}
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    expect_error(root.get(f"/storage/{name}"), 500, "does not exist")
    expect_error(root.delete(f"/nodes/{node}/disks/lvm/pve"), 500, "system")
    assert (
        expect_data(root.get(f"/nodes/{node}/disks/lvm"), "/nodes/{node}/disks/lvm")["children"][0][
            "name"
        ]
        == "pve"
    )
    assert (
        expect_data(root.get(f"/nodes/{node}/disks/lvmthin"), "/nodes/{node}/disks/lvmthin")[0][
            "lv"
        ]
        == "data"
    )


def test_local_storage_scans_follow_the_disks(root):
    assert {"vg": "pve"}.items() <= expect_data(
        root.get("/nodes/pve2/scan/lvm"), "/nodes/{node}/scan/lvm"
    )[0].items()
    assert expect_data(
        root.get("/nodes/pve2/scan/lvmthin", params={"vg": "pve"}), "/nodes/{node}/scan/lvmthin"
    ) == [{"lv": "data"}]
    before = expect_data(root.get("/nodes/pve2/scan/zfs"), "/nodes/{node}/scan/zfs")
    name = f"scan{uuid.uuid4().hex[:4]}"
    free = [
        d["devpath"]
        for d in expect_data(root.get("/nodes/pve2/disks/list", params={"type": "unused"}))
    ]
    upid = expect_data(
        root.post(
            "/nodes/pve2/disks/zfs", data={"name": name, "raidlevel": "single", "devices": free[0]}
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    assert expect_data(root.get("/nodes/pve2/scan/zfs")) == sorted(
        [*before, {"pool": name}], key=lambda p: p["pool"]
    )
    assert (
        root.wait(
            expect_data(root.delete(f"/nodes/pve2/disks/zfs/{name}", params={"cleanup-disks": 1}))
        )["exitstatus"]
        == "OK"
    )


def test_node_services_and_subscription(root):
    services = expect_data(root.get("/nodes/pve1/services"), "/nodes/{node}/services")
    assert {"service": "pveproxy", "active-state": "active"}.items() <= next(
        s for s in services if s["service"] == "pveproxy"
    ).items()
    upid = expect_data(
        root.post("/nodes/pve1/services/postfix/stop"),
        "/nodes/{node}/services/{service}/stop",
        "POST",
    )
    assert upid.split(":")[5:7] == ["srvstop", "postfix"] and root.wait(upid)["exitstatus"] == "OK"
    state = expect_data(
        root.get("/nodes/pve1/services/postfix/state"), "/nodes/{node}/services/{service}/state"
    )
    assert (state["state"], state["active-state"]) == ("dead", "inactive")
    assert (
        root.wait(expect_data(root.post("/nodes/pve1/services/postfix/start")))["exitstatus"]
        == "OK"
    )
    assert expect_data(root.get("/nodes/pve1/services/postfix/state"))["state"] == "running"

    sub = expect_data(root.get("/nodes/pve2/subscription"), "/nodes/{node}/subscription")
    assert sub["status"] == "notfound"
    expect_error(root.put("/nodes/pve2/subscription", data={"key": "not-a-key"}), 400, "key")
    expect_data(root.put("/nodes/pve2/subscription", data={"key": "pve2c-0123456789"}))
    sub = expect_data(root.get("/nodes/pve2/subscription"), "/nodes/{node}/subscription")
    assert (sub["status"], sub["level"], sub["sockets"]) == ("active", "c", 2)
    expect_data(root.post("/nodes/pve2/subscription"))
    expect_data(root.delete("/nodes/pve2/subscription"))
    assert expect_data(root.get("/nodes/pve2/subscription"))["status"] == "notfound"


def test_apt_versions_update_and_changelog(root):
    versions = expect_data(root.get("/nodes/pve1/apt/versions"), "/nodes/{node}/apt/versions")
    assert versions[0]["Package"] == "proxmox-ve" and versions[0]["RunningKernel"]
    assert expect_data(root.get("/nodes/pve1/apt/update"), "/nodes/{node}/apt/update") == []
    upid = expect_data(root.post("/nodes/pve1/apt/update"), "/nodes/{node}/apt/update", "POST")
    assert upid.split(":")[5] == "aptupdate" and root.wait(upid)["exitstatus"] == "OK"
    text = expect_data(
        root.get("/nodes/pve1/apt/changelog", params={"name": "qemu-server"}),
        "/nodes/{node}/apt/changelog",
    )
    assert text.startswith("qemu-server (")
    expect_error(
        root.get("/nodes/pve1/apt/changelog", params={"name": "nosuchpkg"}), 500, "not available"
    )


def test_node_config_description_and_acme_domains(root):
    config = expect_data(root.get("/nodes/pve3/config"), "/nodes/{node}/config")
    expect_data(
        root.put(
            "/nodes/pve3/config",
            data={
                "description": "rack 4",
                "acmedomain0": "pve3.example.invalid",
                "digest": config["digest"],
            },
        )
    )
    expect_error(
        root.put("/nodes/pve3/config", data={"description": "x", "digest": config["digest"]}),
        500,
        "changed by other user",
    )
    assert expect_data(root.get("/nodes/pve3/config", params={"property": "description"})) == {
        "description": "rack 4"
    }
    assert expect_data(root.get("/nodes/pve3/config"))["acmedomain0"] == "pve3.example.invalid"
    expect_data(root.put("/nodes/pve3/config", data={"delete": "description,acmedomain0"}))
    assert "description" not in expect_data(root.get("/nodes/pve3/config"))
