"""Pools (8.x style), vzdump, retention, backup jobs, restore and storage through HTTP."""

from __future__ import annotations

import time
import uuid

from simtest_support import expect_data, expect_error, make_vm


def _archives(root, node: str, vmid: int) -> list[dict]:
    content = root.get(
        f"/nodes/{node}/storage/local/content", params={"content": "backup", "vmid": vmid}
    )
    return expect_data(content, "/nodes/{node}/storage/{storage}/content")


def test_pool_membership_through_put_and_delete_on_the_collection(root, unique_vmid):
    poolid = f"p{uuid.uuid4().hex[:8]}"
    vmid = make_vm(root, "pve1", unique_vmid)
    expect_data(root.post("/pools", data={"poolid": poolid, "comment": "team"}))
    expect_data(root.put("/pools", data={"poolid": poolid, "vms": str(vmid), "storage": "local"}))
    [pool] = expect_data(root.get("/pools", params={"poolid": poolid}), "/pools")
    members = {(m["type"], m.get("vmid") or m.get("storage")) for m in pool["members"]}
    assert members == {("qemu", vmid), ("storage", "local")}
    expect_error(root.delete("/pools", params={"poolid": poolid}), 500, "pool is not empty")
    expect_data(root.put("/pools", data={"poolid": poolid, "vms": str(vmid), "delete": 1}))
    expect_data(root.put("/pools", data={"poolid": poolid, "storage": "local", "delete": 1}))
    assert expect_data(root.get(f"/pools/{poolid}"), "/pools/{poolid}")["members"] == []
    expect_data(root.delete("/pools", params={"poolid": poolid}))
    expect_error(root.get(f"/pools/{poolid}"), 500, "does not exist")


def test_vzdump_writes_archives_that_content_lists_show(root, unique_vmid):
    vmid = make_vm(root, "pve2", unique_vmid, name="web01")
    upid = expect_data(
        root.post(
            "/nodes/pve2/vzdump",
            data={
                "vmid": vmid,
                "storage": "local",
                "compress": "zstd",
                "mode": "snapshot",
                "notes-template": "{{guestname}} on {{node}}",
                "protected": 1,
            },
        ),
        "/nodes/{node}/vzdump",
        "POST",
    )
    assert upid.split(":")[5:7] == ["vzdump", str(vmid)]
    assert root.wait(upid)["exitstatus"] == "OK"
    log = [line["t"] for line in expect_data(root.get(f"/nodes/pve2/tasks/{upid}/log"))]
    assert any("creating vzdump archive" in line for line in log)
    [archive] = _archives(root, "pve2", vmid)
    assert archive["volid"].startswith(f"local:backup/vzdump-qemu-{vmid}-")
    assert archive["volid"].endswith(".vma.zst") and archive["format"] == "vma.zst"
    assert archive["notes"] == "web01 on pve2" and archive["protected"] == 1
    assert archive["size"] > 0
    # Archives on local storage belong to the node that wrote them.
    assert _archives(root, "pve1", vmid) == []

    volume = f"/nodes/pve2/storage/local/content/{archive['volid']}"
    expect_error(root.delete(volume), 500, "is protected")
    expect_data(root.put(volume, data={"protected": 0, "notes": "keep me"}))
    attributes = expect_data(root.get(volume), "/nodes/{node}/storage/{storage}/content/{volume}")
    assert attributes["notes"] == "keep me" and "protected" not in attributes
    upid = expect_data(root.delete(volume))
    assert root.wait(upid)["exitstatus"] == "OK"
    assert _archives(root, "pve2", vmid) == []


def test_vzdump_refuses_storage_without_backup_content_and_answers_ok_for_nothing(
    root, unique_vmid
):
    vmid = make_vm(root, "pve1", unique_vmid)
    expect_error(
        root.post("/nodes/pve1/vzdump", data={"vmid": vmid, "storage": "local-lvm"}),
        500,
        "does not support backups",
    )
    # A guest on another node is not this node's to back up: PVE answers "OK".
    assert expect_data(root.post("/nodes/pve3/vzdump", data={"vmid": vmid})) == "OK"
    expect_error(root.post("/nodes/pve1/vzdump", data={"storage": "local"}), 400, "vmid")


def test_retention_keeps_the_newest_and_prune_removes_the_rest(root, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    for index in range(3):
        if index:
            time.sleep(1.05)  # vzdump names archives to the second (the clock is real time)
        upid = expect_data(root.post("/nodes/pve1/vzdump", data={"vmid": vmid}))
        assert root.wait(upid)["exitstatus"] == "OK"
    archives = _archives(root, "pve1", vmid)
    assert len(archives) == 3
    newest = max(archives, key=lambda a: (a["ctime"], a["volid"]))
    preview = expect_data(
        root.get(
            "/nodes/pve1/storage/local/prunebackups",
            params={"prune-backups": "keep-last=1", "vmid": vmid},
        ),
        "/nodes/{node}/storage/{storage}/prunebackups",
    )
    marks = {p["volid"]: p["mark"] for p in preview}
    assert marks[newest["volid"]] == "keep"
    assert sorted(marks.values()) == ["keep", "remove", "remove"]
    upid = expect_data(
        root.delete(
            "/nodes/pve1/storage/local/prunebackups",
            params={"prune-backups": "keep-last=1", "vmid": vmid},
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    assert [a["volid"] for a in _archives(root, "pve1", vmid)] == [newest["volid"]]
    expect_error(
        root.get(
            "/nodes/pve1/storage/local/prunebackups", params={"prune-backups": "keep-often=2"}
        ),
        400,
        "prune-backups",
    )


def test_backup_jobs_crud_with_digest_and_coverage(root, unique_vmid):
    vmid = make_vm(root, "pve3", unique_vmid)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    expect_data(
        root.post(
            "/cluster/backup",
            data={"id": job_id, "vmid": str(vmid), "storage": "local", "schedule": "02:30"},
        )
    )
    expect_error(
        root.post("/cluster/backup", data={"id": job_id, "vmid": str(vmid)}),
        500,
        "already exists",
    )
    jobs = expect_data(root.get("/cluster/backup"), "/cluster/backup")
    job = expect_data(root.get(f"/cluster/backup/{job_id}"), "/cluster/backup/{id}")
    assert job in jobs and job["schedule"] == "02:30" and job["type"] == "vzdump"
    uncovered = expect_data(
        root.get("/cluster/backup-info/not-backed-up"), "/cluster/backup-info/not-backed-up"
    )
    assert vmid not in {g["vmid"] for g in uncovered}
    tree = expect_data(
        root.get(f"/cluster/backup/{job_id}/included_volumes"),
        "/cluster/backup/{id}/included_volumes",
    )
    [guest] = tree["children"]
    assert guest["id"] == vmid and [v["id"] for v in guest["children"]] == ["scsi0"]

    expect_data(root.put(f"/cluster/backup/{job_id}", data={"enabled": 0, "comment": "paused"}))
    job = expect_data(root.get(f"/cluster/backup/{job_id}"))
    assert (job["enabled"], job["comment"], job["schedule"]) == (0, "paused", "02:30")
    uncovered = expect_data(root.get("/cluster/backup-info/not-backed-up"))
    assert vmid in {g["vmid"] for g in uncovered}
    expect_error(
        root.put(f"/cluster/backup/{job_id}", data={"delete": "vmid"}), 400, "VMID, 'all' or a pool"
    )
    expect_data(root.delete(f"/cluster/backup/{job_id}"))
    expect_error(root.get(f"/cluster/backup/{job_id}"), 404, "does not exist")


def test_storage_config_crud_with_content_rules_and_digest(root):
    storage = f"nfs{uuid.uuid4().hex[:6]}"
    created = expect_data(
        root.post(
            "/storage",
            data={
                "storage": storage,
                "type": "nfs",
                "server": "192.0.2.10",
                "export": "/srv/pve",
                "content": "iso,backup",
                "nodes": "pve1,pve2",
            },
        ),
        "/storage",
        "POST",
    )
    assert created == {"storage": storage, "type": "nfs"}
    expect_error(
        root.post(
            "/storage", data={"storage": storage, "type": "nfs", "server": "x", "export": "/y"}
        ),
        500,
        "already defined",
    )
    expect_error(
        root.post(
            "/storage",
            data={"storage": f"{storage}b", "type": "lvm", "vgname": "v", "content": "iso"},
        ),
        400,
        "does not support content type 'iso'",
    )
    expect_error(root.post("/storage", data={"storage": f"{storage}c", "type": "dir"}), 400, "path")
    config = expect_data(root.get(f"/storage/{storage}"), "/storage/{storage}")
    assert (config["server"], config["export"], config["shared"], config["nodes"]) == (
        "192.0.2.10",
        "/srv/pve",
        1,
        "pve1,pve2",
    )
    assert config in expect_data(root.get("/storage"), "/storage")
    listed = expect_data(root.get("/nodes/pve1/storage"), "/nodes/{node}/storage")
    assert storage in {s["storage"] for s in listed}
    assert storage not in {s["storage"] for s in expect_data(root.get("/nodes/pve3/storage"))}

    expect_data(
        root.put(
            f"/storage/{storage}",
            data={"content": "iso,backup,vztmpl", "delete": "nodes", "digest": config["digest"]},
        ),
        "/storage/{storage}",
        "PUT",
    )
    expect_error(
        root.put(f"/storage/{storage}", data={"content": "iso", "digest": config["digest"]}),
        500,
        "changed by other user",
    )
    config = expect_data(root.get(f"/storage/{storage}"))
    assert config["content"] == "iso,backup,vztmpl" and "nodes" not in config
    status = expect_data(
        root.get(f"/nodes/pve3/storage/{storage}/status"), "/nodes/{node}/storage/{storage}/status"
    )
    assert status["total"] > 0 and status["used"] == 0 and status["avail"] == status["total"]
    expect_data(root.delete(f"/storage/{storage}"))
    expect_error(root.get(f"/storage/{storage}"), 500, "does not exist")
    expect_error(root.delete("/storage/local-lvm"), 500, "still holds guest volumes")


def test_volume_allocation_and_download_account_for_space(root, unique_vmid):
    vmid = unique_vmid
    before = expect_data(root.get("/nodes/pve2/storage/local-lvm/status"))
    volid = expect_data(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid}-disk-9", "size": "3G"},
        ),
        "/nodes/{node}/storage/{storage}/content",
        "POST",
    )
    assert volid == f"local-lvm:vm-{vmid}-disk-9"
    after = expect_data(root.get("/nodes/pve2/storage/local-lvm/status"))
    assert after["used"] - before["used"] == 3 * 1024**3
    expect_error(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid + 1}-disk-0", "size": "1G"},
        ),
        400,
        "does not match",
    )
    expect_error(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid}-disk-8", "size": "900000G"},
        ),
        500,
        "not enough space",
    )
    contents = expect_data(root.get("/nodes/pve2/storage/local-lvm/content", params={"vmid": vmid}))
    assert [c["volid"] for c in contents] == [volid]
    upid = expect_data(root.delete(f"/nodes/pve2/storage/local-lvm/content/{volid}"))
    assert root.wait(upid)["exitstatus"] == "OK"

    # Downloads themselves: test_iac_storage_transfer.py.
    expect_error(
        root.post(
            "/nodes/pve2/storage/shared-nfs/download-url",
            data={
                "url": "http://127.0.0.1/x.tar.zst",
                "filename": "x.tar.zst",
                "content": "vztmpl",
            },
        ),
        500,
        "not configured for content-type 'vztmpl'",
    )


def test_restore_from_a_vzdump_archive_allocates_fresh_disks(root, unique_vmid):
    vmid = make_vm(root, "pve2", unique_vmid, name="restoreme", memory=1536, cores=2)
    upid = expect_data(root.post("/nodes/pve2/vzdump", data={"vmid": vmid, "compress": "zstd"}))
    assert root.wait(upid)["exitstatus"] == "OK"
    [archive] = _archives(root, "pve2", vmid)
    text = expect_data(
        root.get("/nodes/pve2/vzdump/extractconfig", params={"volume": archive["volid"]}),
        "/nodes/{node}/vzdump/extractconfig",
    )
    assert "name: restoreme" in text and "memory: 1536" in text

    target = vmid + 1
    upid = expect_data(
        root.post(
            "/nodes/pve2/qemu",
            data={"vmid": target, "archive": archive["volid"], "storage": "local-lvm"},
        )
    )
    assert upid.split(":")[5] == "qmrestore"
    assert root.wait(upid)["exitstatus"] == "OK"
    config = expect_data(root.get(f"/nodes/pve2/qemu/{target}/config"))
    assert (config["name"], str(config["memory"]), str(config["cores"])) == (
        "restoreme",
        "1536",
        "2",
    )
    assert config["scsi0"].startswith(f"local-lvm:vm-{target}-disk-0")
    # The original keeps its own disk; the restored guest got a new one.
    original = expect_data(root.get(f"/nodes/pve2/qemu/{vmid}/config"))
    assert original["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0")
    expect_error(
        root.post("/nodes/pve2/qemu", data={"vmid": target, "archive": archive["volid"]}),
        500,
        "already exists",
    )
    expect_error(
        root.post(
            "/nodes/pve2/lxc",
            data={"vmid": target + 1, "ostemplate": archive["volid"], "restore": 1},
        ),
        500,
        "from a qemu archive",
    )


def test_coverage_reads_a_stored_exclude_list_that_holds_no_vmids(root):
    """The fuzzer stored `exclude` text that is no VMID list; coverage still answers."""
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    expect_data(
        root.post("/cluster/backup", data={"id": job_id, "all": 1, "exclude": "\u008c\u00a8"})
    )
    try:
        expect_data(
            root.get("/cluster/backup-info/not-backed-up"), "/cluster/backup-info/not-backed-up"
        )
    finally:
        expect_data(root.delete(f"/cluster/backup/{job_id}"))
