"""Scans of remote storage servers: the servers are those storage.cfg points at, and they
offer what their storages use; unknown names do not resolve, unknown addresses fail."""

from __future__ import annotations

import uuid

import httpx
import pytest
from simtest_support import Session, expect_data, expect_error, lab_simulator, swap_major

FINGERPRINT = ":".join(["AB"] * 32)


@pytest.fixture(scope="module")
def remote(root):
    """Storages on made-up servers (unique per run), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    names = {k: f"scan{k}{tag}" for k in ("nfs1", "nfs2", "cifs", "iscsi", "pbs")}
    hosts = {
        "nfs": f"nfs-{tag}.example.test",
        "cifs": "192.0.2.21",
        "iscsi": "192.0.2.31",
        "pbs": f"pbs-{tag}.example.test",
    }
    created = [
        {"storage": names["nfs1"], "type": "nfs", "server": hosts["nfs"], "export": "/srv/images"},
        {
            "storage": names["nfs2"],
            "type": "nfs",
            "server": hosts["nfs"],
            "export": "/srv/backup",
            "content": "backup",
        },
        {
            "storage": names["cifs"],
            "type": "cifs",
            "server": hosts["cifs"],
            "share": "pve",
            "username": "smbuser",
            "password": "smbpass",
        },
        {
            "storage": names["iscsi"],
            "type": "iscsi",
            "portal": hosts["iscsi"],
            "target": f"iqn.2025-01.test.example:{tag}",
        },
        {
            "storage": names["pbs"],
            "type": "pbs",
            "server": hosts["pbs"],
            "datastore": "store1",
            "username": "backup@pbs",
            "password": "pbspass",
            "fingerprint": FINGERPRINT,
        },
    ]
    for data in created:
        answer = root.post("/storage", data=data)
        assert answer.status_code == 200, answer.text
    yield hosts, tag
    for name in names.values():
        root.delete(f"/storage/{name}")


def test_nfs_scan_lists_the_exports_storages_mount(root, remote):
    hosts, _tag = remote
    listed = expect_data(
        root.get("/nodes/pve1/scan/nfs", params={"server": hosts["nfs"]}), "/nodes/{node}/scan/nfs"
    )
    assert listed == [
        {"path": "/srv/backup", "options": "*"},
        {"path": "/srv/images", "options": "*"},
    ]
    expect_error(
        root.get("/nodes/pve1/scan/nfs", params={"server": "nowhere.example.test"}),
        500,
        "unable to resolve address for server 'nowhere.example.test'",
    )
    expect_error(
        root.get("/nodes/pve1/scan/nfs", params={"server": "192.0.2.99"}),
        500,
        "command '/sbin/showmount --no-headers --exports 192.0.2.99' failed: exit code 1",
    )


def test_cifs_scan_needs_the_shares_credentials(root, remote):
    hosts, _tag = remote
    path, template = "/nodes/pve1/scan/cifs", "/nodes/{node}/scan/cifs"
    good = {"server": hosts["cifs"], "username": "smbuser", "password": "smbpass"}
    assert expect_data(root.get(path, params=good), template) == [
        {"share": "pve", "description": ""}
    ]
    expect_error(
        root.get(path, params={**good, "password": "wrong"}), 500, "NT_STATUS_LOGON_FAILURE"
    )
    expect_error(
        root.get(path, params={"server": "192.0.2.98"}), 500, "NT_STATUS_CONNECTION_REFUSED"
    )


def test_iscsi_scan_discovers_the_portals_targets(root, remote):
    hosts, tag = remote
    path, template = "/nodes/pve1/scan/iscsi", "/nodes/{node}/scan/iscsi"
    expected = [{"target": f"iqn.2025-01.test.example:{tag}", "portal": f"{hosts['iscsi']}:3260"}]
    assert expect_data(root.get(path, params={"portal": hosts["iscsi"]}), template) == expected
    assert expect_data(root.get(path, params={"portal": f"{hosts['iscsi']}:3260"})) == expected
    expect_error(root.get(path, params={"portal": f"{hosts['iscsi']}:3261"}), 500, "exit code 4")
    expect_error(root.get(path, params={"portal": "san.nowhere.test"}), 400, "portal")


def test_pbs_scan_checks_credentials_and_fingerprint(root, remote):
    hosts, _tag = remote
    path, template = "/nodes/pve1/scan/pbs", "/nodes/{node}/scan/pbs"
    good = {
        "server": hosts["pbs"],
        "username": "backup@pbs",
        "password": "pbspass",
        "fingerprint": FINGERPRINT,
    }
    assert expect_data(root.get(path, params=good), template) == [{"store": "store1"}]
    expect_error(root.get(path, params={**good, "password": "nope"}), 500, "401 Unauthorized")
    expect_error(
        root.get(path, params={k: v for k, v in good.items() if k != "fingerprint"}),
        500,
        "certificate verify failed",
    )
    expect_error(root.get(path, params={**good, "port": 8008}), 500, "Can't connect to")
    expect_error(root.get("/nodes/nosuch/scan/pbs", params=good), 500, "nosuch")


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """scan/glusterfs is 6.x-8.x only: a laboratory simulator serving 8.x."""
    with lab_simulator(tmp_path_factory.mktemp("gluster"), "gluster", "single", 3) as server:
        swap_major(server, 8)
        with httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client:
            yield Session(client)


def test_glusterfs_scan_lists_the_servers_volumes(eight):
    path, template = "/nodes/pve1/scan/glusterfs", "/nodes/{node}/scan/glusterfs"
    for data in (
        {
            "storage": "gl1",
            "type": "glusterfs",
            "server": "gluster1.example.test",
            "server2": "192.0.2.42",
            "volume": "vmstore",
        },
        {
            "storage": "gl2",
            "type": "glusterfs",
            "server": "gluster1.example.test",
            "volume": "isos",
            "content": "iso",
        },
        # showmount lists NFS exports too; only one-component paths are volumes
        {
            "storage": "nfsg",
            "type": "nfs",
            "server": "gluster1.example.test",
            "export": "/srv/nested",
        },
    ):
        answer = eight.post("/storage", data=data)
        assert answer.status_code == 200, answer.text
    listed = expect_data(eight.get(path, params={"server": "gluster1.example.test"}), template)
    assert listed == [{"volname": "isos"}, {"volname": "vmstore"}]
    # the backup server of a replica set serves the volumes it carries
    assert expect_data(eight.get(path, params={"server": "192.0.2.42"})) == [{"volname": "vmstore"}]
    expect_error(
        eight.get(path, params={"server": "nowhere.example.test"}),
        500,
        "unable to resolve address for server 'nowhere.example.test'",
    )
    expect_error(
        eight.get(path, params={"server": "192.0.2.43"}),
        500,
        "command '/sbin/showmount --no-headers --exports 192.0.2.43' failed: exit code 1",
    )
    # a removed storage's volume is no longer offered
    assert eight.delete("/storage/gl2").status_code == 200
    assert expect_data(eight.get(path, params={"server": "gluster1.example.test"})) == [
        {"volname": "vmstore"}
    ]
