"""Proxmox Backup Server verification: the lab's verify-job control and the
``verification`` object PVE's content listing carries for a PBS snapshot."""

from __future__ import annotations

import re

import httpx
import pytest
from simtest_support import (
    ROOT_PASSWORD,
    create_database,
    drop_database,
    expect_data,
    run,
)

from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings

CONTENT = "/nodes/{node}/storage/{storage}/content"
PBS_UPID = re.compile(
    r"^UPID:pbs1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:verify_snapshot:"
    r"store1\\x3avm-(\d+)-[0-9A-F]{8}:root@pam:$"
)


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    from proxmox_simulator.server import SimulatorServer

    url = create_database("pbsverify")
    run(seed_database(Settings(database_url=url), "compact", 5, ROOT_PASSWORD))
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("pbsverify"),
        clock="instant",
        task_workers=1,
        lease_seconds=10,
        pool_max_size=4,
        lab_enabled=True,
    )
    try:
        with SimulatorServer(settings) as server:
            yield server
    finally:
        drop_database(url)


@pytest.fixture(scope="module")
def backups(pve):
    """One guest backed up to a PBS storage and to a directory storage: node, vmid, volids."""
    expect_data(
        pve.post(
            "/storage",
            data={
                "storage": "pbs-main",
                "type": "pbs",
                "server": "pbs1.example.test",
                "datastore": "store1",
                "username": "backup@pbs",
                "password": "secret",
            },
        )
    )
    guest = next(
        r
        for r in expect_data(pve.get("/cluster/resources", params={"type": "vm"}))
        if r["type"] == "qemu" and not r.get("template")
    )
    node, vmid = guest["node"], guest["vmid"]
    volids = {}
    for storage in ("pbs-main", "local"):
        seeded = {e["volid"] for e in _listing(pve, node, storage, vmid)}
        upid = expect_data(
            pve.post(f"/nodes/{node}/vzdump", data={"vmid": vmid, "storage": storage})
        )
        assert pve.wait(upid)["exitstatus"] == "OK"
        [volids[storage]] = {e["volid"] for e in _listing(pve, node, storage, vmid)} - seeded
    return {"node": node, "vmid": vmid, **volids}


def _listing(pve, node: str, storage: str, vmid: int) -> list[dict]:
    answer = pve.get(
        f"/nodes/{node}/storage/{storage}/content", params={"content": "backup", "vmid": vmid}
    )
    return expect_data(answer, CONTENT)


def _verify(lab, **body) -> httpx.Response:
    return lab.post("/ui/api/pbs/verify", json=body)


def test_a_pbs_snapshot_lists_its_verification_once_verified(lab, pve, backups):
    node, vmid = backups["node"], backups["vmid"]
    [before] = _listing(pve, node, "pbs-main", vmid)
    assert before["format"] == "pbs-vm" and "verification" not in before

    answer = _verify(lab, storage="pbs-main", volume=backups["pbs-main"], state="failed")
    assert answer.status_code == 200, answer.text
    failed = answer.json()["data"]["verification"]
    assert failed["state"] == "failed"
    assert PBS_UPID.match(failed["upid"]).group(1) == str(vmid)
    [after] = _listing(pve, node, "pbs-main", vmid)
    assert after["verification"] == failed

    # The snapshot's name without the storage (as PBS names it) works too; a newer
    # verify job's outcome replaces the older one.
    snapshot = backups["pbs-main"].split(":", 1)[1].removeprefix("backup/")
    answer = lab.post(
        "/ui/api/pbs/verify", data={"storage": "pbs-main", "volume": snapshot, "state": "ok"}
    )
    assert answer.status_code == 200, answer.text
    [again] = _listing(pve, node, "pbs-main", vmid)
    assert again["verification"]["state"] == "ok"
    # The PBS storage is shared: every node lists the same.
    other = next(n["node"] for n in expect_data(pve.get("/nodes")) if n["node"] != node)
    assert _listing(pve, other, "pbs-main", vmid) == [again]


def test_a_directory_archive_is_never_verified(lab, pve, backups):
    node, vmid = backups["node"], backups["vmid"]
    answer = _verify(lab, storage="local", volume=backups["local"], state="ok")
    assert answer.status_code == 400
    assert "not a Proxmox Backup Server" in answer.json()["errors"]["storage"]
    archives = _listing(pve, node, "local", vmid)
    assert backups["local"] in {a["volid"] for a in archives}
    assert not any("verification" in a for a in archives)


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"storage": "nowhere", "state": "ok"}, "storage", "does not exist"),
        ({"volume": "vm/999999/2020-01-01T00:00:00Z", "state": "ok"}, "volume", "no backup"),
        ({"volume": "local:backup/vzdump-qemu-1.vma", "state": "ok"}, "volume", "no backup"),
        ({"state": "corrupt"}, "state", "enumeration"),
        ({"state": ""}, "state", "missing"),
    ],
)
def test_bad_input_names_its_field_and_writes_nothing(lab, pve, backups, body, field, fragment):
    [before] = _listing(pve, backups["node"], "pbs-main", backups["vmid"])
    request = {"storage": "pbs-main", "volume": backups["pbs-main"], **body}
    answer = _verify(lab, **request)
    assert answer.status_code == 400, answer.text
    errors = answer.json()["errors"]
    assert list(errors) == [field] and fragment in errors[field], errors
    assert _listing(pve, backups["node"], "pbs-main", backups["vmid"]) == [before]


def test_the_control_refuses_a_cross_site_post(lab, backups):
    answer = lab.post(
        "/ui/api/pbs/verify",
        json={"storage": "pbs-main", "volume": backups["pbs-main"], "state": "failed"},
        headers={"Origin": "https://elsewhere.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert answer.status_code == 403
