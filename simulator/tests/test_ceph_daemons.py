"""Ceph daemons through proxmoxer: metadata servers and CephFS, service restarts, OSD
metadata and volumes, ``init``, the cluster log, the safety checks, the cluster
metadata, and the pre-7.0 node paths (flags, disks, configdb) of a 6.4 server.

PVE's behaviour (pve-manager's Ceph API) is the expectation; every write is read back
through the related lists, status, ceph.conf and metadata."""

from __future__ import annotations

import uuid

import httpx
import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import Session, close_proxmoxer, official_apidoc, proxmoxer_client

from proxmox_simulator.config import Settings


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _status(prox, upid: str) -> tuple[dict, str]:
    status = Tasks.blocking_status(prox, upid, polling_interval=0.02)
    log = Tasks.decode_log(prox.nodes(status["node"]).tasks(upid).log.get())
    return status, log


def _ok(prox, upid: str) -> str:
    status, log = _status(prox, upid)
    assert status["exitstatus"] == "OK", log
    return log


def _failed(prox, upid: str) -> str:
    status, _log = _status(prox, upid)
    assert status["exitstatus"] != "OK"
    return status["exitstatus"]


def _refused(call) -> str:
    with pytest.raises(ResourceException) as refused:
        call()
    return str(refused.value)


def _mds(prox) -> dict[str, dict]:
    return {m["name"]: m for m in prox.nodes("pve1").ceph.mds.get()}


def _osds(prox) -> dict[int, dict]:
    (root,) = prox.nodes("pve1").ceph.osd.get()["root"]["children"]
    return {osd["id"]: osd for host in root["children"] for osd in host["children"]}


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def test_an_mds_is_created_listed_configured_and_destroyed(prox):
    ceph = prox.nodes("pve2").ceph
    name = _name("mds")
    upid = ceph.mds(name).post(hotstandby=1)
    assert upid.split(":")[5:7] == ["cephcreatemds", f"mds.{name}"]
    _ok(prox, upid)
    listed = _mds(prox)[name]
    assert (listed["host"], listed["state"], listed["standby_replay"]) == ("pve2", "up:standby", 1)
    assert prox.cluster.ceph.status.get()["fsmap"]["up:standby"] >= 1
    conf = ceph.cfg.raw.get()
    assert f"[mds.{name}]\n\thost = pve2" in conf and "mds_standby_replay = true" in conf
    assert f"{name}@pve2" in prox.cluster.ceph.metadata.get()["mds"]

    # The id is checked before the worker; a second one of that id fails in it.
    assert "ID of the MDS cannot start with a number!" in _refused(lambda: ceph.mds("1a").post())
    assert "already referenced in ceph config, abort!" in _failed(prox, ceph.mds(name).post())

    _ok(prox, ceph.mds(name).delete())
    assert name not in _mds(prox)
    assert f"[mds.{name}]" not in ceph.cfg.raw.get()
    assert f"{name}@pve2" not in prox.cluster.ceph.metadata.get()["mds"]


def test_cephfs_takes_a_standby_mds_and_its_pools_until_destroyed(prox):
    ceph = prox.nodes("pve1").ceph
    fs, other = _name("fs"), _name("fs")
    assert "no running Metadata Server (MDS) found!" in _refused(lambda: ceph.fs(fs).post())
    mds = _name("mds")
    _ok(prox, ceph.mds(mds).post())

    upid = ceph.fs(fs).post(pg_num=64)
    assert upid.split(":")[5:7] == ["cephfscreate", fs]
    _ok(prox, upid)
    assert {"name": fs, "data_pool": f"{fs}_data", "metadata_pool": f"{fs}_metadata"} in (
        ceph.fs.get()
    )
    pools = {p["pool_name"]: p for p in ceph.pool.get()}
    assert (pools[f"{fs}_data"]["pg_num"], pools[f"{fs}_metadata"]["pg_num"]) == (64, 16)
    assert ceph.pool(f"{fs}_data").status.get()["application"] == "cephfs"
    # The MDS now serves the file system: rank 0, active, in status too.
    assert (_mds(prox)[mds]["state"], _mds(prox)[mds]["rank"]) == ("up:active", 0)
    assert mds in [r["name"] for r in prox.cluster.ceph.status.get()["fsmap"]["by_rank"]]

    assert f"ceph pools '{fs}_data' and/or '{fs}_metadata' already exist" in _refused(
        lambda: ceph.fs(fs).post()
    )
    assert "no standby Metadata Server (MDS) found!" in _refused(lambda: ceph.fs(other).post())
    assert "is in use by CephFS" in _failed(prox, ceph.pool(f"{fs}_data").delete())
    assert "all MDS daemons must be inactive/failed" in _failed(prox, ceph.fs(fs).delete())

    # Stopping the MDS fails the rank; then the file system and its pools can go.
    _ok(prox, ceph.stop.post(service=f"mds.{mds}"))
    assert _mds(prox)[mds]["state"] == "stopped"
    _ok(prox, ceph.fs(fs).delete(**{"remove-pools": 1}))
    assert fs not in {f["name"] for f in ceph.fs.get()}
    assert not {f"{fs}_data", f"{fs}_metadata"} & {p["pool_name"] for p in ceph.pool.get()}
    assert f"no such cephfs '{fs}'" in _refused(lambda: ceph.fs(fs).delete())

    upid = ceph.restart.post(service=f"mds.{mds}")
    assert upid.split(":")[5:7] == ["srvrestart", f"mds.{mds}"]
    _ok(prox, upid)
    assert _mds(prox)[mds]["state"] == "up:standby"
    _ok(prox, ceph.mds(mds).delete())


def test_restart_brings_a_stopped_osd_back_up(prox):
    ceph = prox.nodes("pve1").ceph
    osdid = min(i for i, o in _osds(prox).items() if o["host"] == "pve1")
    up_before = prox.cluster.ceph.status.get()["osdmap"]["num_up_osds"]
    _ok(prox, ceph.stop.post(service=f"osd.{osdid}"))
    assert _osds(prox)[osdid]["status"] == "down"
    assert prox.cluster.ceph.status.get()["osdmap"]["num_up_osds"] == up_before - 1
    _ok(prox, ceph.restart.post(service=f"osd.{osdid}"))
    assert _osds(prox)[osdid]["status"] == "up"
    assert prox.cluster.ceph.status.get()["osdmap"]["num_up_osds"] == up_before
    # Without a service PVE restarts the node's Ceph target; the task is named "ceph".
    assert ceph.restart.post().split(":")[5:7] == ["srvrestart", "ceph"]


def test_osd_metadata_and_volume_follow_the_osd(prox):
    ceph = prox.nodes("pve3").ceph
    before = set(_osds(prox))
    _ok(prox, ceph.osd.post(dev="/dev/sdb"))
    (osdid,) = set(_osds(prox)) - before
    meta = ceph.osd(osdid).metadata.get()
    assert (meta["osd"]["hostname"], meta["osd"]["id"]) == ("pve3", osdid)
    assert meta["osd"]["osd_data"] == f"/var/lib/ceph/osd/ceph-{osdid}"
    assert [(d["device"], d["physical_device"]) for d in meta["devices"]] == [("block", "sdb")]
    volume = ceph.osd(osdid)("lv-info").get()
    assert volume["lv_path"] == f"/dev/{volume['vg_name']}/{volume['lv_name']}"
    assert volume["lv_name"].startswith("osd-block-")
    assert f"volume type 'db' not found for OSD {osdid}" in _refused(
        lambda: ceph.osd(osdid)("lv-info").get(type="db")
    )
    wrong = prox.nodes("pve1").ceph.osd(osdid)
    assert f"OSD '{osdid}' does not exists on host 'pve1'" in _refused(wrong.metadata.get)
    assert "not found in 'ceph-volume lvm list' on node 'pve1'" in _refused(wrong("lv-info").get)
    listed = {o["id"]: o for o in prox.cluster.ceph.metadata.get()["osd"]}
    assert (listed[osdid]["hostname"], listed[osdid]["devices"]) == ("pve3", "sdb")

    ceph.osd(osdid).out.post()
    _ok(prox, ceph.stop.post(service=f"osd.{osdid}"))
    _ok(prox, ceph.osd(osdid).delete(cleanup=1))
    assert f"OSD '{osdid}' does not exists on host 'pve3'" in _refused(ceph.osd(osdid).metadata.get)
    assert osdid not in {o["id"] for o in prox.cluster.ceph.metadata.get()["osd"]}


def test_cluster_metadata_names_every_daemon_and_versions_scope_only_nodes(prox):
    nodes = sorted(n["node"] for n in prox.nodes.get())
    full = prox.cluster.ceph.metadata.get()
    mons = [m["name"] for m in prox.nodes("pve1").ceph.mon.get()]
    assert sorted(full["mon"]) == sorted(f"{m}@{m}" for m in mons)
    assert sorted(full["mgr"]) == sorted(
        f"{m['name']}@{m['host']}" for m in prox.nodes("pve1").ceph.mgr.get()
    )
    assert sorted(o["id"] for o in full["osd"]) == sorted(_osds(prox))
    assert sorted(full["node"]) == nodes
    assert set(prox.cluster.ceph.metadata.get(scope="versions")) == {"node"}


def test_init_writes_the_networks_into_ceph_conf(prox):
    ceph = prox.nodes("pve1").ceph
    fsid = prox.cluster.ceph.status.get()["fsid"]
    public = ceph.cfg.value.get(**{"config-keys": "global:public_network"})["global"][
        "public-network"
    ]
    assert "'network' is required" in _refused(
        lambda: ceph.init.post(**{"cluster-network": "10.98.0.0/24"})
    )
    try:
        assert ceph.init.post(network="10.99.0.0/24", **{"cluster-network": "10.98.0.0/24"}) is None
        conf = ceph.cfg.raw.get()
        assert "public_network = 10.99.0.0/24" in conf and "cluster_network = 10.98.0.0/24" in conf
        # An existing configuration keeps its fsid: init only adds what it was given.
        assert f"fsid = {fsid}" in conf
        values = ceph.cfg.value.get(
            **{"config-keys": "global:public_network;global:cluster-network"}
        )
        assert values == {
            "global": {"public-network": "10.99.0.0/24", "cluster-network": "10.98.0.0/24"}
        }
    finally:
        ceph.init.post(network=public)
    assert f"public_network = {public}" in ceph.cfg.raw.get()


def test_the_cluster_log_records_changes_and_pages_like_pve(server, prox):
    ceph = prox.nodes("pve1").ceph
    pool = _name("logpool")
    _ok(prox, ceph.pool.post(name=pool, pg_num=32))
    _ok(prox, ceph.pool(pool).delete())
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        body = Session(c).get("/nodes/pve1/ceph/log", params={"limit": 500}).json()
    lines = [entry["t"] for entry in body["data"]]
    assert any(f"pool {pool}: created" in t and "cluster [INF]" in t for t in lines)
    assert any(f"pool '{pool}' removed" in t for t in lines)
    total = body["total"]
    assert [e["n"] for e in body["data"]] == list(range(1, total + 1))
    page = ceph.log.get(start=total - 1, limit=5)
    assert [e["n"] for e in page] == [total]


def test_cmd_safety_follows_the_osds_mons_and_mdss(prox):
    ceph = prox.nodes("pve1").ceph
    osds = _osds(prox)
    by_host: dict[str, int] = {}
    for osdid, osd in sorted(osds.items()):
        if osd["status"] == "up" and osd["in"]:
            by_host.setdefault(osd["host"], osdid)
    # Pools keep one replica per host and need min_size (2) of them: with two hosts left,
    # stopping a third host's OSD is fine, but not one of the last two.
    keep, stop = list(by_host.values())[:2], list(by_host.values())[2:]
    assert ceph("cmd-safety").get(service="osd", id=keep[0], action="stop")["safe"] == 1
    stopped = []
    try:
        for osdid in stop:
            _ok(prox, prox.nodes(osds[osdid]["host"]).ceph.stop.post(service=f"osd.{osdid}"))
            stopped.append(osdid)
        answer = ceph("cmd-safety").get(service="osd", id=keep[0], action="stop")
        assert answer["safe"] == 0 and "unsafe to stop" in answer["status"]
    finally:
        for osdid in stopped:
            _ok(prox, prox.nodes(osds[osdid]["host"]).ceph.start.post(service=f"osd.{osdid}"))
    assert ceph("cmd-safety").get(service="osd", id=keep[0], action="destroy")["safe"] == 0

    mons = sorted(m["name"] for m in ceph.mon.get())
    expected = int(len(mons) - 1 > len(mons) / 2)
    assert ceph("cmd-safety").get(service="mon", id=mons[0], action="stop")["safe"] == expected

    mds = _name("mds")
    fs = _name("fs")
    _ok(prox, ceph.mds(mds).post())
    _ok(prox, ceph.fs(fs).post(pg_num=32))
    try:
        # The only MDS serving a file system: stopping it takes the file system down.
        assert ceph("cmd-safety").get(service="mds", id=mds, action="stop")["safe"] == 0
    finally:
        _ok(prox, ceph.stop.post(service=f"mds.{mds}"))
        _ok(prox, ceph.fs(fs).delete(**{"remove-pools": 1}))
        _ok(prox, ceph.mds(mds).delete())


@pytest.fixture(scope="module")
def legacy(settings, seeded):
    """A PVE 6.4 server on the session's database: the pre-7.0 node-scoped Ceph paths."""
    from proxmox_simulator.server import SimulatorServer

    six = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract=str(official_apidoc("6.4-15")),
        clock="instant",
        task_workers=1,
        pool_max_size=3,
    )
    with (
        SimulatorServer(six) as srv,
        httpx.Client(base_url=srv.base_url + "/api2/json", timeout=30) as client,
    ):
        yield Session(client)


def test_pre_7_node_flags_are_the_cluster_flags(legacy, root):
    assert legacy.post("/nodes/pve1/ceph/flags/noout").status_code == 200
    try:
        flags = legacy.get("/nodes/pve1/ceph/flags").json()["data"].split(",")
        assert "noout" in flags and "sortbitwise" in flags
        assert root.get("/cluster/ceph/flags/noout").json()["data"] == 1
        listed = {f["name"]: f["value"] for f in root.get("/cluster/ceph/flags").json()["data"]}
        assert listed["noout"] == 1
    finally:
        assert legacy.delete("/nodes/pve1/ceph/flags/noout").status_code == 200
    assert "noout" not in legacy.get("/nodes/pve2/ceph/flags").json()["data"].split(",")
    assert root.get("/cluster/ceph/flags/noout").json()["data"] == 0
    # Ceph spells "pause" as its two halves in the OSD map, in the OSD tree too.
    assert legacy.post("/nodes/pve1/ceph/flags/pause").status_code == 200
    try:
        flags = legacy.get("/nodes/pve1/ceph/flags").json()["data"].split(",")
        assert {"pauserd", "pausewr"} <= set(flags) and "pause" not in flags
        tree = root.get("/nodes/pve1/ceph/osd").json()["data"]["flags"].split(",")
        assert {"pauserd", "pausewr", "sortbitwise"} <= set(tree)
        assert root.get("/cluster/ceph/flags/pause").json()["data"] == 1
    finally:
        legacy.delete("/nodes/pve1/ceph/flags/pause")


def test_pre_7_disks_and_configdb(legacy):
    disks = {d["dev"]: d for d in legacy.get("/nodes/pve1/ceph/disks").json()["data"]}
    assert disks["/dev/nvme0n1"]["osdid"] >= 0 and disks["/dev/nvme0n1"]["used"] == "LVM"
    unused = {
        d["dev"]
        for d in legacy.get("/nodes/pve1/ceph/disks", params={"type": "unused"}).json()["data"]
    }
    assert "/dev/nvme0n1" not in unused and "/dev/sda" not in unused and unused
    journal = legacy.get("/nodes/pve1/ceph/disks", params={"type": "journal_disks"}).json()["data"]
    assert all(d["osdid"] < 0 and d["gpt"] for d in journal)
    db = legacy.get("/nodes/pve1/ceph/configdb").json()["data"]
    assert {"section": "mon", "name": "auth_allow_insecure_global_id_reclaim"}.items() <= db[
        0
    ].items()


def test_health_mutes_hide_a_check_until_it_clears(prox):
    flags = prox.cluster.ceph.flags
    flags("noout").put(value=1)
    try:
        assert prox.cluster.ceph.status.get()["health"]["status"] == "HEALTH_WARN"
        assert prox.cluster.ceph("health-mute")("OSDMAP_FLAGS").put(value=1) is None
        health = prox.cluster.ceph.status.get()["health"]
        assert health["status"] == "HEALTH_OK" and health["checks"]["OSDMAP_FLAGS"]["muted"]
        (mute,) = prox.cluster.ceph("health-mute").get()
        assert (mute["code"], mute["sticky"]) == ("OSDMAP_FLAGS", 0) and "noout" in mute["summary"]
    finally:
        flags("noout").put(value=0)
    # A mute that is not sticky ends with its check.
    assert prox.cluster.ceph("health-mute").get() == []
    prox.cluster.ceph("health-mute")("OSD_DOWN").put(value=1, sticky=1, ttl="1h")
    try:
        (mute,) = prox.cluster.ceph("health-mute").get()
        assert (mute["code"], mute["sticky"]) == ("OSD_DOWN", 1) and mute["ttl"]
    finally:
        prox.cluster.ceph("health-mute")("OSD_DOWN").put(value=0)
    assert prox.cluster.ceph("health-mute").get() == []


def test_releases_name_the_running_release_as_default(prox):
    (default,) = [r for r in prox.nodes("pve1").ceph.releases.get() if r["is-default"]]
    version = prox.cluster.ceph.metadata.get(scope="versions")["node"]["pve1"]["version"]["str"]
    assert version.startswith(default["version"] + ".")


def test_rolling_restarts_plan_check_health_and_bring_daemons_up(prox):
    ceph = prox.cluster.ceph
    upid = ceph("restart-bulk").post(**{"service-type": "mon", "dry-run": 1})
    assert upid.split(":")[5:7] == ["srvrestart", "cluster-mon"]
    log = _ok(prox, upid)
    assert "[DRY-RUN] planned rolling restart order:" in log
    for mon in prox.nodes("pve1").ceph.mon.get():
        assert f"{mon['name']}: mon.{mon['name']}" in log
    assert "only supported with service-type=osd" in _refused(
        lambda: ceph("restart-bulk").post(**{"service-type": "mon", "only-outdated": 1})
    )
    assert "no 'mds' daemons found in cluster" in _ok(
        prox, ceph("restart-bulk").post(**{"service-type": "mds"})
    )

    node = prox.nodes("pve2").ceph
    osdid = min(i for i, o in _osds(prox).items() if o["host"] == "pve2")
    _ok(prox, node.stop.post(service=f"osd.{osdid}"))
    try:
        refused = _failed(prox, node("restart-bulk").post(**{"service-type": "osd"}))
        assert "blocking HEALTH_WARN issues" in refused
        assert _osds(prox)[osdid]["status"] == "down"
        log = _ok(prox, node("restart-bulk").post(**{"service-type": "osd", "force": 1}))
        assert "set noout" in log and "unset noout" in log
        assert _osds(prox)[osdid]["status"] == "up"
    finally:
        _ok(prox, node.start.post(service=f"osd.{osdid}"))
    assert _osds(prox)[osdid]["status"] == "up"
    assert prox.cluster.ceph.flags("noout").get() == 0


def test_a_pool_with_add_storages_gets_its_rbd_storage_until_removed(prox, unique_vmid):
    ceph = prox.nodes("pve1").ceph
    assert "illegal for storage naming" in _refused(
        lambda: ceph.pool.post(name="9pool", add_storages=1)
    )
    name = _name("rbdpool")
    _ok(prox, ceph.pool.post(name=name, add_storages=1, pg_num=32))
    # pveceph's default autoscale mode is "warn" (Ceph's own would be "on").
    assert {p["pool_name"]: p for p in ceph.pool.get()}[name]["pg_autoscale_mode"] == "warn"
    storage = prox.storage(name).get()
    assert (storage["type"], storage["pool"], storage["content"]) == ("rbd", name, "rootdir,images")
    volid = (
        prox.nodes("pve1")
        .storage(name)
        .content.post(vmid=unique_vmid, filename=f"vm-{unique_vmid}-disk-0", size="1G")
    )
    refused = _failed(prox, ceph.pool(name).delete(remove_storages=1))
    assert f"ceph pool '{name}' still in use by storage '{name}'" in refused
    assert name in {p["pool_name"] for p in ceph.pool.get()}
    removed = prox.nodes("pve1").storage(name).content(volid).delete()
    if removed:  # a UPID where the major frees the volume in a worker
        _ok(prox, removed)
    _ok(prox, ceph.pool(name).delete(remove_storages=1))
    assert name not in {p["pool_name"] for p in ceph.pool.get()}
    assert name not in {s["storage"] for s in prox.storage.get()}


def test_pool_settings_apply_size_first_and_a_refused_one_fails_the_task(prox):
    ceph = prox.nodes("pve1").ceph
    name = _name("setpool")
    # The pool is created; Ceph then refuses min_size 3 above size 2 and the task fails.
    assert _failed(prox, ceph.pool.post(name=name, size=2, min_size=3)) == "Could not set: min_size"
    status = ceph.pool(name).status.get()
    assert (status["size"], status["min_size"]) == (2, 1)
    try:
        # Setting size resets min_size to Ceph's default for it; other settings still apply.
        log = _ok(prox, ceph.pool(name).put(size=4, pg_autoscale_mode="off"))
        assert log.index(f"pool {name}: applying size = 4") < log.index("pg_autoscale_mode = off")
        status = ceph.pool(name).status.get()
        assert (status["size"], status["min_size"], status["pg_autoscale_mode"]) == (4, 2, "off")
        assert _failed(prox, ceph.pool(name).put(min_size=5, pg_num=64)) == (
            "Could not set: min_size"
        )
        status = ceph.pool(name).status.get()
        assert (status["min_size"], status["pg_num"]) == (2, 64)
    finally:
        _ok(prox, ceph.pool(name).delete())
