"""The seeded Ceph cluster through proxmoxer: reads agree with each other, and OSD, pool and
flag writes change what status, lists and health show."""

from __future__ import annotations

import uuid

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import ROOT_PASSWORD


def _api(server) -> ProxmoxAPI:
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    return ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        timeout=30,
        user="root@pam",
        password=ROOT_PASSWORD,
    )


def _ok(prox, upid: str) -> None:
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"


def _osds(prox) -> dict[int, dict]:
    tree = prox.nodes("pve1").ceph.osd.get()
    (root,) = tree["root"]["children"]
    return {osd["id"]: osd for host in root["children"] for osd in host["children"]}


def _refused(call) -> str:
    with pytest.raises(ResourceException) as refused:
        call()
    return str(refused.value)


def test_seeded_cluster_reads_agree(server):
    prox = _api(server)
    nodes = sorted(n["node"] for n in prox.nodes.get())
    status = prox.cluster.ceph.status.get()
    assert prox.nodes("pve2").ceph.status.get()["fsid"] == status["fsid"]
    mons = prox.nodes("pve1").ceph.mon.get()
    assert [m["name"] for m in mons] == nodes[:3] == status["quorum_names"]
    assert status["monmap"]["num_mons"] == len(mons)
    managers = prox.nodes("pve1").ceph.mgr.get()
    active = [m["name"] for m in managers if m["state"] == "active"]
    assert active == [status["mgrmap"]["active_name"]]

    osds = _osds(prox)
    assert status["osdmap"]["num_osds"] == len(osds)
    # Every node's NVMe disk carries its seeded OSD, and its disk list says so.
    for node in nodes:
        seeded = [o for o in osds.values() if o["host"] == node and o["blfsdev"] == "/dev/nvme0n1"]
        assert len(seeded) == 1
        disks = {d["devpath"]: d for d in prox.nodes(node).disks.list.get()}
        assert disks["/dev/nvme0n1"]["osdid"] == seeded[0]["id"]
        assert disks["/dev/nvme0n1"]["used"] == "LVM"

    pools = {p["pool_name"]: p for p in prox.nodes("pve1").ceph.pool.get()}
    assert ".mgr" in pools and status["pgmap"]["num_pools"] == len(pools)


def test_flags_show_in_health_and_the_osd_tree(server):
    prox = _api(server)
    prox.cluster.ceph.flags("noout").put(value=1)
    try:
        health = prox.cluster.ceph.status.get()["health"]
        assert health["status"] == "HEALTH_WARN"
        assert "noout" in health["checks"]["OSDMAP_FLAGS"]["summary"]["message"]
        assert "noout" in prox.nodes("pve1").ceph.osd.get()["flags"].split(",")
    finally:
        prox.cluster.ceph.flags("noout").put(value=0)
    health = prox.cluster.ceph.status.get()["health"]
    assert "OSDMAP_FLAGS" not in health["checks"]


def test_a_created_osd_is_listed_and_destroyed_only_when_out_and_down(server):
    prox = _api(server)
    node = prox.nodes("pve3")
    before = _osds(prox)
    _ok(prox, node.ceph.osd.post(dev="/dev/sdc", **{"crush-device-class": "ssd"}))
    after = _osds(prox)
    (new_id,) = set(after) - set(before)
    created = after[new_id]
    assert (created["host"], created["status"], created["in"], created["device_class"]) == (
        "pve3",
        "up",
        1,
        "ssd",
    )
    assert prox.cluster.ceph.status.get()["osdmap"]["num_osds"] == len(before) + 1
    disks = {d["devpath"]: d for d in node.disks.list.get()}
    assert (disks["/dev/sdc"]["used"], disks["/dev/sdc"]["osdid"]) == ("LVM", new_id)
    assert "already in use" in _refused(lambda: node.ceph.osd.post(dev="/dev/sdc"))
    assert "unable to get device info" in _refused(lambda: node.ceph.osd.post(dev="/dev/sdz"))

    assert "osd is in use (in == 1)" in _refused(lambda: node.ceph.osd(new_id).delete())
    node.ceph.osd(new_id).out.post()
    assert _osds(prox)[new_id]["in"] == 0
    assert "osd is still running (up == 1)" in _refused(lambda: node.ceph.osd(new_id).delete())
    _ok(prox, node.ceph.stop.post(service=f"osd.{new_id}"))
    assert _osds(prox)[new_id]["status"] == "down"
    assert "OSD_DOWN" in prox.cluster.ceph.status.get()["health"]["checks"]

    _ok(prox, node.ceph.osd(new_id).delete(cleanup=1))
    assert new_id not in _osds(prox)
    assert "used" not in {d["devpath"]: d for d in node.disks.list.get()}["/dev/sdc"]
    assert "OSD_DOWN" not in prox.cluster.ceph.status.get()["health"]["checks"]


def test_pools_are_created_listed_and_removed(server):
    prox = _api(server)
    ceph = prox.nodes("pve1").ceph
    name = f"simfid{uuid.uuid4().hex[:6]}"
    _ok(prox, ceph.pool.post(name=name, size=2, min_size=1, pg_num=32, application="rbd"))
    listed = {p["pool_name"]: p for p in ceph.pool.get()}
    assert (listed[name]["size"], listed[name]["min_size"], listed[name]["pg_num"]) == (2, 1, 32)
    assert ceph.pool(name).status.get()["size"] == 2
    assert prox.cluster.ceph.status.get()["pgmap"]["num_pools"] == len(listed)
    assert "already exists" in _refused(lambda: ceph.pool.post(name=name))
    _ok(prox, ceph.pool(name).delete())
    assert name not in {p["pool_name"] for p in ceph.pool.get()}
    assert "does not exist" in _refused(lambda: ceph.pool(name).status.get())


def test_pool_settings_and_monitor_manager_changes_show_in_status(server):
    prox = _api(server)
    ceph = prox.nodes("pve1").ceph
    name = f"simfid{uuid.uuid4().hex[:6]}"
    _ok(prox, ceph.pool.post(name=name, size=3, min_size=2))
    _ok(prox, ceph.pool(name).put(size=2, min_size=1))
    assert (ceph.pool(name).status.get()["size"], ceph.pool(name).status.get()["min_size"]) == (
        2,
        1,
    )
    # Ceph refuses a min_size above size inside the worker: the task fails naming it.
    failed = Tasks.blocking_status(prox, ceph.pool(name).put(min_size=3), polling_interval=0.05)
    assert failed["exitstatus"] == "Could not set: min_size"
    _ok(prox, ceph.pool(name).delete())

    status = prox.cluster.ceph.status.get()
    active = status["mgrmap"]["active_name"]
    # Removing the active manager hands over to a standby.
    _ok(prox, prox.nodes(active).ceph.mgr(active).delete())
    after = prox.cluster.ceph.status.get()["mgrmap"]
    assert after["active_name"] not in ("", active)
    assert active not in {m["name"] for m in ceph.mgr.get()}
    _ok(prox, prox.nodes(active).ceph.mgr(active).post())
    assert {m["name"]: m["state"] for m in ceph.mgr.get()}[active] == "standby"

    mons = [m["name"] for m in ceph.mon.get()]
    _ok(prox, prox.nodes(mons[-1]).ceph.mon(mons[-1]).delete())
    assert prox.cluster.ceph.status.get()["monmap"]["num_mons"] == len(mons) - 1
    assert "no such monitor id" in _refused(
        lambda: prox.nodes(mons[-1]).ceph.mon(mons[-1]).delete()
    )
    _ok(prox, prox.nodes(mons[-1]).ceph.mon(mons[-1]).post())
    assert sorted(prox.cluster.ceph.status.get()["quorum_names"]) == sorted(mons)


def test_crush_map_and_ceph_conf_follow_the_cluster(server):
    prox = _api(server)
    ceph = prox.nodes("pve1").ceph
    osds = _osds(prox)
    crush = ceph.crush.get()
    for osdid, osd in osds.items():
        assert f"device {osdid} osd.{osdid} class" in crush
        assert f"host {osd['host']} {{" in crush
    assert [r["name"] for r in ceph.rules.get()] == ["replicated_rule"]
    conf = ceph.cfg.raw.get()
    status = prox.cluster.ceph.status.get()
    assert f"fsid = {status['fsid']}" in conf
    for mon in status["monmap"]["mons"]:
        assert f"[mon.{mon['name']}]" in conf and mon["addr"].rsplit(":", 1)[0] in conf
    ceph.osd(min(osds)).scrub.post(deep=1)
    assert "does not exist" in _refused(lambda: ceph.osd(999).scrub.post())
