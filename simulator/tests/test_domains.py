"""Backup, HA, firewall and 8.x-style pool endpoints through HTTP.

Every response body checked here must also validate against the method's
``returns`` schema in each major (6.4, 7.4, 8.4, 9.2) that declares it.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from simtest_support import Session, assert_conforms


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def root(client):
    return Session(client)


def _data(response, path: str | None = None, method: str = "GET"):
    assert response.status_code == 200, (response.status_code, response.text)
    data = response.json()["data"]
    if path is not None:
        assert_conforms(path, method, data)
    return data


def _fails(response, status: int, fragment: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert fragment in (response.reason_phrase + response.text), response.text


def _vm(root, node: str, vmid: int, **extra) -> int:
    upid = _data(
        root.post(
            f"/nodes/{node}/qemu",
            data={"vmid": vmid, "name": f"vm{vmid}", "scsi0": "local-lvm:2", **extra},
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    return vmid


# -- pools (8.x style) ---------------------------------------------------------------------


def test_pool_membership_through_put_and_delete_on_the_collection(root, unique_vmid):
    poolid = f"p{uuid.uuid4().hex[:8]}"
    vmid = _vm(root, "pve1", unique_vmid)
    _data(root.post("/pools", data={"poolid": poolid, "comment": "team"}))
    _data(root.put("/pools", data={"poolid": poolid, "vms": str(vmid), "storage": "local"}))
    [pool] = _data(root.get("/pools", params={"poolid": poolid}), "/pools")
    members = {(m["type"], m.get("vmid") or m.get("storage")) for m in pool["members"]}
    assert members == {("qemu", vmid), ("storage", "local")}
    _fails(root.delete("/pools", params={"poolid": poolid}), 500, "pool is not empty")
    _data(root.put("/pools", data={"poolid": poolid, "vms": str(vmid), "delete": 1}))
    _data(root.put("/pools", data={"poolid": poolid, "storage": "local", "delete": 1}))
    assert _data(root.get(f"/pools/{poolid}"), "/pools/{poolid}")["members"] == []
    _data(root.delete("/pools", params={"poolid": poolid}))
    _fails(root.get(f"/pools/{poolid}"), 500, "does not exist")


# -- vzdump, archives, prune, jobs ---------------------------------------------------------


def _archives(root, node: str, vmid: int) -> list[dict]:
    path = "/nodes/{node}/storage/{storage}/content"
    content = root.get(
        f"/nodes/{node}/storage/local/content", params={"content": "backup", "vmid": vmid}
    )
    return _data(content, path)


def test_vzdump_writes_archives_that_content_lists_show(root, unique_vmid):
    vmid = _vm(root, "pve2", unique_vmid, name="web01")
    upid = _data(
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
    log = [line["t"] for line in _data(root.get(f"/nodes/pve2/tasks/{upid}/log"))]
    assert any("creating vzdump archive" in line for line in log)
    [archive] = _archives(root, "pve2", vmid)
    assert archive["volid"].startswith(f"local:backup/vzdump-qemu-{vmid}-")
    assert archive["volid"].endswith(".vma.zst") and archive["format"] == "vma.zst"
    assert archive["notes"] == "web01 on pve2" and archive["protected"] == 1
    assert archive["size"] > 0
    # Archives on local storage belong to the node that wrote them.
    assert _archives(root, "pve1", vmid) == []

    volume = f"/nodes/pve2/storage/local/content/{archive['volid']}"
    _fails(root.delete(volume), 500, "is protected")
    _data(root.put(volume, data={"protected": 0, "notes": "keep me"}))
    attributes = _data(root.get(volume), "/nodes/{node}/storage/{storage}/content/{volume}")
    assert attributes["notes"] == "keep me" and "protected" not in attributes
    upid = _data(root.delete(volume))
    assert root.wait(upid)["exitstatus"] == "OK"
    assert _archives(root, "pve2", vmid) == []


def test_vzdump_refuses_storage_without_backup_content_and_answers_ok_for_nothing(
    root, unique_vmid
):
    vmid = _vm(root, "pve1", unique_vmid)
    _fails(
        root.post("/nodes/pve1/vzdump", data={"vmid": vmid, "storage": "local-lvm"}),
        500,
        "does not support backups",
    )
    # A guest on another node is not this node's to back up: PVE answers "OK".
    assert _data(root.post("/nodes/pve3/vzdump", data={"vmid": vmid})) == "OK"
    _fails(root.post("/nodes/pve1/vzdump", data={"storage": "local"}), 400, "vmid")


def test_retention_keeps_the_newest_and_prune_removes_the_rest(root, unique_vmid):
    vmid = _vm(root, "pve1", unique_vmid)
    for index in range(3):
        if index:
            time.sleep(1.05)  # vzdump names archives to the second (the clock is real time)
        upid = _data(root.post("/nodes/pve1/vzdump", data={"vmid": vmid}))
        assert root.wait(upid)["exitstatus"] == "OK"
    archives = _archives(root, "pve1", vmid)
    assert len(archives) == 3
    newest = max(archives, key=lambda a: (a["ctime"], a["volid"]))
    preview = _data(
        root.get(
            "/nodes/pve1/storage/local/prunebackups",
            params={"prune-backups": "keep-last=1", "vmid": vmid},
        ),
        "/nodes/{node}/storage/{storage}/prunebackups",
    )
    marks = {p["volid"]: p["mark"] for p in preview}
    assert marks[newest["volid"]] == "keep"
    assert sorted(marks.values()) == ["keep", "remove", "remove"]
    upid = _data(
        root.delete(
            "/nodes/pve1/storage/local/prunebackups",
            params={"prune-backups": "keep-last=1", "vmid": vmid},
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    assert [a["volid"] for a in _archives(root, "pve1", vmid)] == [newest["volid"]]
    _fails(
        root.get(
            "/nodes/pve1/storage/local/prunebackups", params={"prune-backups": "keep-often=2"}
        ),
        400,
        "prune-backups",
    )


def test_backup_jobs_crud_with_digest_and_coverage(root, unique_vmid):
    vmid = _vm(root, "pve3", unique_vmid)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    _data(
        root.post(
            "/cluster/backup",
            data={"id": job_id, "vmid": str(vmid), "storage": "local", "schedule": "02:30"},
        )
    )
    _fails(
        root.post("/cluster/backup", data={"id": job_id, "vmid": str(vmid)}),
        500,
        "already exists",
    )
    jobs = _data(root.get("/cluster/backup"), "/cluster/backup")
    job = _data(root.get(f"/cluster/backup/{job_id}"), "/cluster/backup/{id}")
    assert job in jobs and job["schedule"] == "02:30" and job["type"] == "vzdump"
    uncovered = _data(
        root.get("/cluster/backup-info/not-backed-up"), "/cluster/backup-info/not-backed-up"
    )
    assert vmid not in {g["vmid"] for g in uncovered}
    tree = _data(
        root.get(f"/cluster/backup/{job_id}/included_volumes"),
        "/cluster/backup/{id}/included_volumes",
    )
    [guest] = tree["children"]
    assert guest["id"] == vmid and [v["id"] for v in guest["children"]] == ["scsi0"]

    _data(root.put(f"/cluster/backup/{job_id}", data={"enabled": 0, "comment": "paused"}))
    job = _data(root.get(f"/cluster/backup/{job_id}"))
    assert (job["enabled"], job["comment"], job["schedule"]) == (0, "paused", "02:30")
    uncovered = _data(root.get("/cluster/backup-info/not-backed-up"))
    assert vmid in {g["vmid"] for g in uncovered}
    _fails(
        root.put(f"/cluster/backup/{job_id}", data={"delete": "vmid"}), 400, "VMID, 'all' or a pool"
    )
    _data(root.delete(f"/cluster/backup/{job_id}"))
    _fails(root.get(f"/cluster/backup/{job_id}"), 404, "does not exist")


# -- HA ---------------------------------------------------------------------------------


def test_ha_groups_resources_and_status(root, unique_vmid):
    vmid = _vm(root, "pve1", unique_vmid)
    group = f"g{uuid.uuid4().hex[:8]}"
    _data(root.post("/cluster/ha/groups", data={"group": group, "nodes": "pve1:2,pve2"}))
    _fails(
        root.post("/cluster/ha/groups", data={"group": f"{group}x", "nodes": "nowhere"}),
        500,
        "no such node",
    )
    groups = _data(root.get("/cluster/ha/groups"), "/cluster/ha/groups")
    assert {"group": group, "nodes": "pve1:2,pve2"}.items() <= next(
        g for g in groups if g["group"] == group
    ).items()

    _data(
        root.post(
            "/cluster/ha/resources",
            data={"sid": str(vmid), "group": group, "max_restart": 2, "comment": "db"},
        )
    )
    _fails(root.post("/cluster/ha/resources", data={"sid": f"vm:{vmid}"}), 500, "already defined")
    _fails(root.post("/cluster/ha/resources", data={"sid": f"ct:{vmid}"}), 500, "not a ct")
    sid = f"vm:{vmid}"
    resources = _data(root.get("/cluster/ha/resources"), "/cluster/ha/resources")
    resource = _data(root.get(f"/cluster/ha/resources/{sid}"), "/cluster/ha/resources/{sid}")
    assert resource in resources
    assert (resource["state"], resource["group"], resource["max_restart"]) == ("started", group, 2)

    status = _data(root.get("/cluster/ha/status/current"), "/cluster/ha/status/current")
    service = next(s for s in status if s["id"] == f"service:{sid}")
    assert service["node"] == "pve1" and service["request_state"] == "started"
    manager = _data(
        root.get("/cluster/ha/status/manager_status"), "/cluster/ha/status/manager_status"
    )
    assert sid in manager["manager_status"]["service_status"]

    _fails(root.delete(f"/cluster/ha/groups/{group}"), 500, "is used by")
    _fails(root.delete(f"/nodes/pve1/qemu/{vmid}"), 500, "used in HA resources")
    _data(root.put(f"/cluster/ha/resources/{sid}", data={"state": "disabled", "delete": "group"}))
    resource = _data(root.get(f"/cluster/ha/resources/{sid}"))
    assert resource["state"] == "disabled" and "group" not in resource
    _data(root.delete(f"/cluster/ha/groups/{group}"))
    # purge removes the guest from HA along with the guest.
    upid = _data(root.delete(f"/nodes/pve1/qemu/{vmid}", params={"purge": 1}))
    assert root.wait(upid)["exitstatus"] == "OK"
    assert sid not in {r["sid"] for r in _data(root.get("/cluster/ha/resources"))}


# -- firewall ---------------------------------------------------------------------------


def test_guest_firewall_rules_keep_pve_order_and_digests(root, unique_vmid):
    vmid = _vm(root, "pve2", unique_vmid)
    rules = f"/nodes/pve2/qemu/{vmid}/firewall/rules"
    template = "/nodes/{node}/qemu/{vmid}/firewall/rules"
    assert _data(root.get(rules), template) == []
    for port in ("22", "80", "443"):
        _data(
            root.post(
                rules,
                data={"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": port, "pos": 5},
            )
        )
    listed = _data(root.get(rules), template)
    # New rules go to the top regardless of pos, disabled unless asked (as PVE does).
    assert [(r["pos"], r["dport"], r["enable"]) for r in listed] == [
        (0, "443", 0),
        (1, "80", 0),
        (2, "22", 0),
    ]
    _data(root.put(f"{rules}/0", data={"moveto": 3}))
    assert [r["dport"] for r in _data(root.get(rules))] == ["80", "22", "443"]
    rule = _data(root.get(f"{rules}/1"), template + "/{pos}")
    assert rule["dport"] == "22"
    _data(root.put(f"{rules}/1", data={"enable": 1, "digest": rule["digest"]}))
    _fails(
        root.put(f"{rules}/1", data={"comment": "late", "digest": rule["digest"]}),
        500,
        "changed by other user",
    )
    _fails(root.get(f"{rules}/7"), 400, "no rule at position 7")
    _fails(
        root.post(rules, data={"type": "group", "action": "nosuchgroup"}),
        400,
        "security group 'nosuchgroup' does not exist",
    )
    _fails(root.post(rules, data={"type": "in", "action": "ALLOW"}), 400, "action")
    _data(root.delete(f"{rules}/0"))
    assert [r["dport"] for r in _data(root.get(rules))] == ["22", "443"]
    # The firewall file goes with the guest.
    upid = _data(root.delete(f"/nodes/pve2/qemu/{vmid}"))
    assert root.wait(upid)["exitstatus"] == "OK"
    _vm(root, "pve2", vmid)
    assert _data(root.get(rules)) == []


def test_security_groups_aliases_ipsets_refs_and_options(root, unique_vmid):
    vmid = _vm(root, "pve3", unique_vmid)
    group = f"sg{uuid.uuid4().hex[:6]}"
    alias = f"net{uuid.uuid4().hex[:6]}"
    ipset = f"set{uuid.uuid4().hex[:6]}"
    _data(root.post("/cluster/firewall/groups", data={"group": group, "comment": "web"}))
    _data(root.post(f"/cluster/firewall/groups/{group}", data={"type": "in", "action": "ACCEPT"}))
    groups = _data(root.get("/cluster/firewall/groups"), "/cluster/firewall/groups")
    assert {"group": group, "comment": "web"}.items() <= next(
        g for g in groups if g["group"] == group
    ).items()
    assert len(_data(root.get(f"/cluster/firewall/groups/{group}"))) == 1

    _data(root.post("/cluster/firewall/aliases", data={"name": alias, "cidr": "10.1.0.0/16"}))
    _fails(
        root.post("/cluster/firewall/aliases", data={"name": alias.upper(), "cidr": "10.2.0.1"}),
        500,
        "already exists",
    )
    _fails(
        root.post("/cluster/firewall/aliases", data={"name": "bad", "cidr": "10.300.0.0/16"}),
        400,
        "cidr",
    )
    aliases = _data(root.get("/cluster/firewall/aliases"), "/cluster/firewall/aliases")
    assert any(a["name"] == alias and a["cidr"] == "10.1.0.0/16" for a in aliases)
    base = f"/nodes/pve3/qemu/{vmid}/firewall"
    _data(root.post(f"{base}/ipset", data={"name": ipset, "comment": "clients"}))
    _data(root.post(f"{base}/ipset/{ipset}", data={"cidr": "192.0.2.0/24", "nomatch": 1}))
    entries = _data(
        root.get(f"{base}/ipset/{ipset}"), "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}"
    )
    assert [(e["cidr"], e.get("nomatch")) for e in entries] == [("192.0.2.0/24", 1)]
    _fails(root.delete(f"{base}/ipset/{ipset}"), 500, "is not empty")

    refs = _data(root.get(f"{base}/refs"), "/nodes/{node}/qemu/{vmid}/firewall/refs")
    names = {(r["type"], r["name"]) for r in refs}
    assert {("alias", alias), ("ipset", ipset)} <= names
    # Rules may name aliases, IP sets and security groups that exist, nothing else.
    _data(root.post(f"{base}/rules", data={"type": "group", "action": group, "enable": 1}))
    _data(
        root.post(
            f"{base}/rules",
            data={"type": "in", "action": "DROP", "source": f"+{ipset}", "dest": alias},
        )
    )
    _fails(
        root.post(f"{base}/rules", data={"type": "in", "action": "DROP", "source": "nosuchalias"}),
        400,
        "no such alias",
    )
    _fails(root.delete(f"/cluster/firewall/groups/{group}"), 500, "not empty")

    options = _data(root.get(f"{base}/options"), "/nodes/{node}/qemu/{vmid}/firewall/options")
    _data(
        root.put(
            f"{base}/options", data={"enable": 1, "policy_in": "DROP", "digest": options["digest"]}
        )
    )
    options = _data(root.get(f"{base}/options"))
    assert (options["enable"], options["policy_in"]) == (1, "DROP")
    _data(root.put(f"{base}/options", data={"delete": "policy_in"}))
    assert "policy_in" not in _data(root.get(f"{base}/options"))
    assert _data(root.get(f"{base}/log"), "/nodes/{node}/qemu/{vmid}/firewall/log") == []
    cluster = _data(root.get("/cluster/firewall/options"), "/cluster/firewall/options")
    assert "digest" in cluster


def test_concurrent_rule_writers_are_serialized_not_lost(client, root, unique_vmid):
    vmid = _vm(root, "pve1", unique_vmid)
    rules = f"/nodes/pve1/qemu/{vmid}/firewall/rules"
    errors: list[str] = []

    def add(port: int) -> None:
        with httpx.Client(base_url=str(client.base_url), verify=False, timeout=30) as own:
            session = Session(own)
            response = session.post(rules, data={"type": "in", "action": "ACCEPT", "dport": port})
            if response.status_code != 200:
                errors.append(response.text)

    threads = [threading.Thread(target=add, args=(2000 + i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(r["dport"] for r in _data(root.get(rules))) == [str(2000 + i) for i in range(8)]


# -- storage ------------------------------------------------------------------------


def test_storage_config_crud_with_content_rules_and_digest(root):
    storage = f"nfs{uuid.uuid4().hex[:6]}"
    created = _data(
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
    _fails(
        root.post(
            "/storage", data={"storage": storage, "type": "nfs", "server": "x", "export": "/y"}
        ),
        500,
        "already defined",
    )
    _fails(
        root.post(
            "/storage",
            data={"storage": f"{storage}b", "type": "lvm", "vgname": "v", "content": "iso"},
        ),
        400,
        "does not support content type 'iso'",
    )
    _fails(root.post("/storage", data={"storage": f"{storage}c", "type": "dir"}), 400, "path")
    config = _data(root.get(f"/storage/{storage}"), "/storage/{storage}")
    assert (config["server"], config["export"], config["shared"], config["nodes"]) == (
        "192.0.2.10",
        "/srv/pve",
        1,
        "pve1,pve2",
    )
    assert config in _data(root.get("/storage"), "/storage")
    listed = _data(root.get("/nodes/pve1/storage"), "/nodes/{node}/storage")
    assert storage in {s["storage"] for s in listed}
    assert storage not in {s["storage"] for s in _data(root.get("/nodes/pve3/storage"))}

    _data(
        root.put(
            f"/storage/{storage}",
            data={"content": "iso,backup,vztmpl", "delete": "nodes", "digest": config["digest"]},
        ),
        "/storage/{storage}",
        "PUT",
    )
    _fails(
        root.put(f"/storage/{storage}", data={"content": "iso", "digest": config["digest"]}),
        500,
        "changed by other user",
    )
    config = _data(root.get(f"/storage/{storage}"))
    assert config["content"] == "iso,backup,vztmpl" and "nodes" not in config
    status = _data(
        root.get(f"/nodes/pve3/storage/{storage}/status"), "/nodes/{node}/storage/{storage}/status"
    )
    assert status["total"] > 0 and status["used"] == 0 and status["avail"] == status["total"]
    _data(root.delete(f"/storage/{storage}"))
    _fails(root.get(f"/storage/{storage}"), 500, "does not exist")
    _fails(root.delete("/storage/local-lvm"), 500, "still holds guest volumes")


def test_volume_allocation_and_download_account_for_space(root, unique_vmid):
    vmid = unique_vmid
    before = _data(root.get("/nodes/pve2/storage/local-lvm/status"))
    volid = _data(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid}-disk-9", "size": "3G"},
        ),
        "/nodes/{node}/storage/{storage}/content",
        "POST",
    )
    assert volid == f"local-lvm:vm-{vmid}-disk-9"
    after = _data(root.get("/nodes/pve2/storage/local-lvm/status"))
    assert after["used"] - before["used"] == 3 * 1024**3
    _fails(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid + 1}-disk-0", "size": "1G"},
        ),
        400,
        "does not match",
    )
    _fails(
        root.post(
            "/nodes/pve2/storage/local-lvm/content",
            data={"vmid": vmid, "filename": f"vm-{vmid}-disk-8", "size": "900000G"},
        ),
        500,
        "not enough space",
    )
    contents = _data(root.get("/nodes/pve2/storage/local-lvm/content", params={"vmid": vmid}))
    assert [c["volid"] for c in contents] == [volid]
    upid = _data(root.delete(f"/nodes/pve2/storage/local-lvm/content/{volid}"))
    assert root.wait(upid)["exitstatus"] == "OK"

    name = f"tools-{vmid}.iso"
    upid = _data(
        root.post(
            "/nodes/pve2/storage/local/download-url",
            data={"url": f"https://example.invalid/{name}", "filename": name, "content": "iso"},
        ),
        "/nodes/{node}/storage/{storage}/download-url",
        "POST",
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    isos = _data(root.get("/nodes/pve2/storage/local/content", params={"content": "iso"}))
    assert f"local:iso/{name}" in {i["volid"] for i in isos}
    _fails(
        root.post(
            "/nodes/pve2/storage/local/download-url",
            data={"url": f"https://example.invalid/{name}", "filename": name, "content": "iso"},
        ),
        500,
        "refusing to override",
    )
    _fails(
        root.post(
            "/nodes/pve2/storage/local-lvm/download-url",
            data={"url": "https://example.invalid/x.iso", "filename": "x.iso", "content": "iso"},
        ),
        500,
        "not configured for content-type 'iso'",
    )


def test_restore_from_a_vzdump_archive_allocates_fresh_disks(root, unique_vmid):
    vmid = _vm(root, "pve2", unique_vmid, name="restoreme", memory=1536, cores=2)
    upid = _data(root.post("/nodes/pve2/vzdump", data={"vmid": vmid, "compress": "zstd"}))
    assert root.wait(upid)["exitstatus"] == "OK"
    [archive] = _archives(root, "pve2", vmid)
    text = _data(
        root.get("/nodes/pve2/vzdump/extractconfig", params={"volume": archive["volid"]}),
        "/nodes/{node}/vzdump/extractconfig",
    )
    assert "name: restoreme" in text and "memory: 1536" in text

    target = vmid + 1
    upid = _data(
        root.post(
            "/nodes/pve2/qemu",
            data={"vmid": target, "archive": archive["volid"], "storage": "local-lvm"},
        )
    )
    assert upid.split(":")[5] == "qmrestore"
    assert root.wait(upid)["exitstatus"] == "OK"
    config = _data(root.get(f"/nodes/pve2/qemu/{target}/config"))
    assert (config["name"], str(config["memory"]), str(config["cores"])) == (
        "restoreme",
        "1536",
        "2",
    )
    assert config["scsi0"].startswith(f"local-lvm:vm-{target}-disk-0")
    # The original keeps its own disk; the restored guest got a new one.
    original = _data(root.get(f"/nodes/pve2/qemu/{vmid}/config"))
    assert original["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0")
    _fails(
        root.post("/nodes/pve2/qemu", data={"vmid": target, "archive": archive["volid"]}),
        500,
        "already exists",
    )
    _fails(
        root.post(
            "/nodes/pve2/lxc",
            data={"vmid": target + 1, "ostemplate": archive["volid"], "restore": 1},
        ),
        500,
        "from a qemu archive",
    )


# -- node network, DNS, hosts, time -----------------------------------------------------


def test_node_network_changes_stay_pending_until_reload(root):
    node = "pve3"
    bridge = f"vmbr{uuid.uuid4().int % 9000 + 100}"
    path = f"/nodes/{node}/network"
    _data(
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
    entries = _data(listing, "/nodes/{node}/network")
    # Pending like PVE: the new bridge is listed (not active) and the diff is reported.
    new = next(e for e in entries if e["iface"] == bridge)
    assert (new["address"], new["netmask"], new.get("active")) == ("10.77.0.1", "24", None)
    assert f"+iface {bridge} inet static" in listing.json()["changes"]
    _fails(root.post(path, data={"iface": bridge, "type": "bridge"}), 500, "already exists")
    _fails(
        root.post(path, data={"iface": f"{bridge}x", "type": "bridge", "bridge_ports": "eno9"}),
        400,
        "does not exist",
    )
    _fails(root.post(path, data={"iface": "eno7", "type": "eth"}), 400, "cannot create")
    _data(root.put(f"{path}/{bridge}", data={"type": "bridge", "mtu": 9000, "delete": "comments"}))
    iface = _data(root.get(f"{path}/{bridge}"), "/nodes/{node}/network/{iface}")
    assert iface["mtu"] == 9000 and "comments" not in iface

    upid = _data(root.put(path), "/nodes/{node}/network", "PUT")
    assert upid.split(":")[5:7] == ["srvreload", "networking"]
    assert root.wait(upid)["exitstatus"] == "OK"
    after = root.get(path)
    assert "changes" not in after.json()
    assert next(e for e in after.json()["data"] if e["iface"] == bridge)["active"] == 1
    _fails(root.put(path), 500, "no changes")

    _data(root.delete(f"{path}/{bridge}"))
    assert bridge not in {e["iface"] for e in _data(root.get(path))}
    _data(root.delete(path))  # revert: the deletion was only pending
    assert bridge in {e["iface"] for e in _data(root.get(path))}
    _fails(root.delete(f"{path}/eno1"), 500, "is used by 'vmbr0'")


def test_node_dns_hosts_time_and_index(root):
    dns = _data(root.get("/nodes/pve2/dns"), "/nodes/{node}/dns")
    assert dns["search"]
    _data(root.put("/nodes/pve2/dns", data={"search": "lab.example", "dns1": "192.0.2.53"}))
    assert _data(root.get("/nodes/pve2/dns")) == {"search": "lab.example", "dns1": "192.0.2.53"}
    _fails(root.put("/nodes/pve2/dns", data={"search": "x", "dns1": "not-an-ip"}), 400, "dns1")

    hosts = _data(root.get("/nodes/pve2/hosts"), "/nodes/{node}/hosts")
    assert "pve2" in hosts["data"]
    _data(
        root.post(
            "/nodes/pve2/hosts",
            data={"data": hosts["data"] + "192.0.2.9 nas\n", "digest": hosts["digest"]},
        )
    )
    _fails(
        root.post("/nodes/pve2/hosts", data={"data": "x", "digest": hosts["digest"]}),
        500,
        "changed by other user",
    )
    assert "192.0.2.9 nas" in _data(root.get("/nodes/pve2/hosts"))["data"]

    _data(root.put("/nodes/pve2/time", data={"timezone": "Europe/Berlin"}))
    clock = _data(root.get("/nodes/pve2/time"), "/nodes/{node}/time")
    assert clock["timezone"] == "Europe/Berlin" and clock["localtime"] - clock["time"] in (
        3600,
        7200,
    )
    _fails(root.put("/nodes/pve2/time", data={"timezone": "Mars/Olympus"}), 400, "timezone")
    _data(root.put("/nodes/pve2/time", data={"timezone": "UTC"}))

    index = _data(root.get("/nodes/pve2"), "/nodes/{node}")
    assert {"qemu", "lxc", "storage", "network", "vzdump"} <= {e["name"] for e in index}
    _fails(root.get("/nodes/nosuchnode"), 500, "hostname lookup")


# -- replication, datacenter options, cluster log ---------------------------------------


def test_replication_jobs_run_only_with_replicable_volumes(root, unique_vmid):
    vmid = _vm(root, "pve1", unique_vmid)
    job = f"{vmid}-0"
    _data(root.post("/cluster/replication", data={"id": job, "target": "pve2", "type": "local"}))
    _fails(
        root.post(
            "/cluster/replication", data={"id": f"{vmid}-1", "target": "pve2", "type": "local"}
        ),
        500,
        "already exists",
    )
    _fails(
        root.post(
            "/cluster/replication", data={"id": f"{vmid}-2", "target": "pve1", "type": "local"}
        ),
        500,
        "already on target",
    )
    jobs = _data(root.get("/cluster/replication"), "/cluster/replication")
    entry = _data(root.get(f"/cluster/replication/{job}"), "/cluster/replication/{id}")
    assert entry in jobs and (entry["guest"], entry["target"]) == (vmid, "pve2")

    upid = _data(
        root.post(f"/nodes/pve1/replication/{job}/schedule_now"),
        "/nodes/{node}/replication/{id}/schedule_now",
        "POST",
    )
    assert "missing replicate feature" in root.wait(upid)["exitstatus"]
    status = _data(
        root.get(f"/nodes/pve1/replication/{job}/status"), "/nodes/{node}/replication/{id}/status"
    )
    assert status["fail_count"] == 1 and "missing replicate feature" in status["error"]
    assert _data(root.get("/nodes/pve1/replication"), "/nodes/{node}/replication")
    _fails(root.get(f"/nodes/pve2/replication/{job}/status"), 500, "not local")

    zfs = f"zfs{uuid.uuid4().hex[:6]}"
    _data(root.post("/storage", data={"storage": zfs, "type": "zfspool", "pool": "rpool/data"}))
    moved = _data(
        root.post(
            f"/nodes/pve1/qemu/{vmid}/move_disk",
            data={"disk": "scsi0", "storage": zfs, "delete": 1},
        )
    )
    assert root.wait(moved)["exitstatus"] == "OK"
    assert (
        root.wait(_data(root.post(f"/nodes/pve1/replication/{job}/schedule_now")))["exitstatus"]
        == "OK"
    )
    status = _data(root.get(f"/nodes/pve1/replication/{job}/status"))
    assert status["fail_count"] == 0 and status["last_sync"] > 0 and "error" not in status
    log = _data(
        root.get(f"/nodes/pve1/replication/{job}/log"), "/nodes/{node}/replication/{id}/log"
    )
    assert any("replicating volume" in line["t"] for line in log)
    _data(
        root.put(f"/cluster/replication/{job}", data={"schedule": "*/5", "digest": entry["digest"]})
    )
    _fails(
        root.put(f"/cluster/replication/{job}", data={"rate": 10, "digest": entry["digest"]}),
        500,
        "changed by other user",
    )
    _data(root.delete(f"/cluster/replication/{job}"))
    _fails(root.get(f"/cluster/replication/{job}"), 500, "does not exist")


def test_cluster_options_and_log(root):
    options = _data(root.get("/cluster/options"), "/cluster/options")
    _data(root.put("/cluster/options", data={"keyboard": "de", "registered-tags": "prod;lab"}))
    options = _data(root.get("/cluster/options"), "/cluster/options")
    assert options["keyboard"] == "de" and options["allowed-tags"] == ["prod", "lab"]
    _data(root.put("/cluster/options", data={"delete": "keyboard,registered-tags"}))
    assert "keyboard" not in _data(root.get("/cluster/options"))
    entries = _data(root.get("/cluster/log", params={"max": 5}), "/cluster/log")
    assert 0 < len(entries) <= 5 and entries[0]["msg"].split()[0] in ("starting", "end")
    assert [e["time"] for e in entries] == sorted((e["time"] for e in entries), reverse=True)


# -- metrics servers and resource mappings ---------------------------------------------


def test_metrics_servers_keep_secrets_out_of_reads(root):
    server = f"m{uuid.uuid4().hex[:6]}"
    path = f"/cluster/metrics/server/{server}"
    _data(
        root.post(
            path,
            data={
                "type": "influxdb",
                "server": "192.0.2.20",
                "port": 8086,
                "token": "s3cret",
                "bucket": "pve",
            },
        )
    )
    _fails(
        root.post(path, data={"type": "graphite", "server": "x", "port": 1}), 500, "already exists"
    )
    listed = _data(root.get("/cluster/metrics/server"), "/cluster/metrics/server")
    assert {
        "id": server,
        "type": "influxdb",
        "server": "192.0.2.20",
        "port": 8086,
        "disable": 0,
    } in listed
    config = _data(root.get(path), "/cluster/metrics/server/{id}")
    assert config["bucket"] == "pve" and "token" not in config
    _data(root.put(path, data={"server": "192.0.2.21", "port": 8087, "digest": config["digest"]}))
    _fails(
        root.put(path, data={"server": "x", "port": 1, "digest": config["digest"]}),
        500,
        "changed by other user",
    )
    _data(root.delete(path))
    _fails(root.get(path), 500, "does not exist")


def test_resource_mappings_name_one_device_per_node(root):
    mapping = f"gpu{uuid.uuid4().hex[:6]}"
    _data(
        root.post(
            "/cluster/mapping/pci",
            json={
                "id": mapping,
                "map": ["node=pve1,path=0000:01:00.0,id=10de:1eb8"],
                "description": "T4",
            },
        )
    )
    _fails(
        root.post(
            "/cluster/mapping/pci",
            json={"id": f"{mapping}x", "map": ["node=nowhere,path=0000:01:00.0"]},
        ),
        400,
        "no such node",
    )
    _fails(
        root.post(
            "/cluster/mapping/pci",
            json={
                "id": f"{mapping}y",
                "map": ["node=pve1,path=0000:01:00.0", "node=pve1,path=0000:02:00.0"],
            },
        ),
        400,
        "more than once",
    )
    listed = _data(
        root.get("/cluster/mapping/pci", params={"check-node": "pve2"}), "/cluster/mapping/pci"
    )
    entry = next(m for m in listed if m["id"] == mapping)
    assert entry["checks"][0]["message"] == "no mapping for node 'pve2'"
    config = _data(root.get(f"/cluster/mapping/pci/{mapping}"), "/cluster/mapping/pci/{id}")
    _data(
        root.put(
            f"/cluster/mapping/pci/{mapping}",
            json={
                "map": ["node=pve1,path=0000:01:00.0", "node=pve2,path=0000:03:00.0"],
                "digest": config["digest"],
            },
        )
    )
    assert len(_data(root.get(f"/cluster/mapping/pci/{mapping}"))["map"]) == 2
    _data(root.delete(f"/cluster/mapping/pci/{mapping}"))
    _data(
        root.post(
            "/cluster/mapping/dir", json={"id": mapping, "map": ["node=pve3,path=/srv/share"]}
        )
    )
    assert mapping in {
        m["id"] for m in _data(root.get("/cluster/mapping/dir"), "/cluster/mapping/dir")
    }
    _data(root.delete(f"/cluster/mapping/dir/{mapping}"))


# -- SDN --------------------------------------------------------------------------------


def test_sdn_zones_vnets_subnets_stay_pending_until_applied(root):
    tag = uuid.uuid4().hex[:5]
    zone, vnet = f"z{tag}", f"v{tag}"
    _data(root.post("/cluster/sdn/zones", data={"zone": zone, "type": "vlan", "bridge": "vmbr1"}))
    _fails(root.post("/cluster/sdn/zones", data={"zone": f"y{tag}", "type": "vlan"}), 400, "bridge")
    _fails(
        root.post("/cluster/sdn/zones", data={"zone": "Bad_Zone", "type": "simple"}), 400, "zone"
    )
    _data(root.post("/cluster/sdn/vnets", data={"vnet": vnet, "zone": zone, "tag": 120}))
    _fails(
        root.post("/cluster/sdn/vnets", data={"vnet": f"w{tag}", "zone": zone, "tag": 120}),
        400,
        "already used",
    )
    _fails(
        root.post("/cluster/sdn/vnets", data={"vnet": f"u{tag}", "zone": zone}), 400, "needs a tag"
    )
    _data(
        root.post(
            f"/cluster/sdn/vnets/{vnet}/subnets",
            data={"subnet": "10.120.0.0/24", "type": "subnet", "gateway": "10.120.0.1", "snat": 1},
        )
    )
    _fails(
        root.post(
            f"/cluster/sdn/vnets/{vnet}/subnets",
            data={"subnet": "10.121.0.0/24", "type": "subnet", "gateway": "10.9.9.9"},
        ),
        400,
        "not in subnet",
    )
    subnet_id = f"{zone}-10.120.0.0-24"
    subnets = _data(
        root.get(f"/cluster/sdn/vnets/{vnet}/subnets"), "/cluster/sdn/vnets/{vnet}/subnets"
    )
    assert [s["subnet"] for s in subnets] == [subnet_id]

    # 8.4's schema declares the list's ``pending`` a boolean; PVE (and 9.2's
    # schema) answer the pending values as an object, so only 9.2 is checked here.
    pending = _data(root.get("/cluster/sdn/zones", params={"pending": 1}))
    assert_conforms("/cluster/sdn/zones", "GET", pending, majors=(9,))
    mine = next(z for z in pending if z["zone"] == zone)
    assert mine["state"] == "new" and mine["pending"]["bridge"] == "vmbr1"
    assert zone not in {
        z["zone"] for z in _data(root.get("/cluster/sdn/zones", params={"running": 1}))
    }
    upid = _data(root.put("/cluster/sdn"), "/cluster/sdn", "PUT")
    assert upid.split(":")[5] == "reloadnetworkall" and root.wait(upid)["exitstatus"] == "OK"
    running = _data(root.get("/cluster/sdn/vnets", params={"running": 1}), "/cluster/sdn/vnets")
    assert {"vnet": vnet, "type": "vnet", "zone": zone, "tag": 120}.items() <= next(
        v for v in running if v["vnet"] == vnet
    ).items()
    assert "state" not in _data(root.get(f"/cluster/sdn/zones/{zone}", params={"pending": 1}))

    current = _data(root.get(f"/cluster/sdn/vnets/{vnet}"), "/cluster/sdn/vnets/{vnet}")
    _data(
        root.put(f"/cluster/sdn/vnets/{vnet}", data={"alias": "lab", "digest": current["digest"]})
    )
    _fails(
        root.put(f"/cluster/sdn/vnets/{vnet}", data={"alias": "x", "digest": current["digest"]}),
        500,
        "changed by other user",
    )
    changed = _data(root.get(f"/cluster/sdn/vnets/{vnet}", params={"pending": 1}))
    assert changed["state"] == "changed" and changed["pending"] == {"alias": "lab"}
    _fails(root.delete(f"/cluster/sdn/zones/{zone}"), 500, "used by vnet")
    _fails(root.delete(f"/cluster/sdn/vnets/{vnet}"), 500, "has subnet")
    _data(root.delete(f"/cluster/sdn/vnets/{vnet}/subnets/{subnet_id}"))
    _data(root.delete(f"/cluster/sdn/vnets/{vnet}"))
    _data(root.delete(f"/cluster/sdn/zones/{zone}"))
    gone = _data(root.get("/cluster/sdn/zones", params={"pending": 1}))
    assert next(z for z in gone if z["zone"] == zone)["state"] == "deleted"
    assert root.wait(_data(root.put("/cluster/sdn")))["exitstatus"] == "OK"
    assert zone not in {
        z["zone"] for z in _data(root.get("/cluster/sdn/zones", params={"pending": 1}))
    }


def test_vnet_firewall_rules_need_the_vnet(root):
    tag = uuid.uuid4().hex[:5]
    zone, vnet = f"f{tag}", f"n{tag}"
    _data(root.post("/cluster/sdn/zones", data={"zone": zone, "type": "simple"}))
    _data(root.post("/cluster/sdn/vnets", data={"vnet": vnet, "zone": zone}))
    rules = f"/cluster/sdn/vnets/{vnet}/firewall/rules"
    _data(
        root.post(
            rules, data={"type": "forward", "action": "ACCEPT", "proto": "tcp", "dport": "443"}
        )
    )
    listed = _data(root.get(rules), "/cluster/sdn/vnets/{vnet}/firewall/rules")
    assert [(r["type"], r["dport"]) for r in listed] == [("forward", "443")]
    _fails(root.get("/cluster/sdn/vnets/nosuch/firewall/rules"), 500, "does not exist")
    _data(root.put(f"/cluster/sdn/vnets/{vnet}/firewall/options", data={"enable": 1}))
    assert _data(root.get(f"/cluster/sdn/vnets/{vnet}/firewall/options"))["enable"] == 1


# -- notifications --------------------------------------------------------------------


def test_notification_endpoints_matchers_and_targets(root):
    name = f"hook{uuid.uuid4().hex[:6]}"
    base = "/cluster/notifications"
    builtin = _data(
        root.get(f"{base}/endpoints/sendmail/mail-to-root"),
        "/cluster/notifications/endpoints/sendmail/{name}",
    )
    assert builtin["origin"] == "builtin"
    _fails(root.delete(f"{base}/endpoints/sendmail/mail-to-root"), 500, "built-in")
    _data(
        root.post(
            f"{base}/endpoints/gotify",
            data={"name": name, "server": "https://gotify.example.invalid", "token": "t0ken"},
        )
    )
    _fails(
        root.post(f"{base}/endpoints/sendmail", data={"name": name, "mailto": "a@example.invalid"}),
        500,
        "already exists",
    )
    gotify = _data(
        root.get(f"{base}/endpoints/gotify/{name}"),
        "/cluster/notifications/endpoints/gotify/{name}",
    )
    assert gotify["origin"] == "user-created" and "token" not in gotify
    targets = _data(root.get(f"{base}/targets"), "/cluster/notifications/targets")
    assert {"name": name, "type": "gotify", "origin": "user-created"} in targets
    _fails(root.post(f"{base}/targets/{name}/test"), 500, "sends nothing over the network")
    _data(root.post(f"{base}/targets/mail-to-root/test"))

    matcher = f"m{name}"
    _data(
        root.post(
            f"{base}/matchers",
            json={"name": matcher, "target": [name], "match-severity": ["error"]},
        )
    )
    _fails(
        root.post(f"{base}/matchers", json={"name": f"x{matcher}", "target": ["nosuch"]}),
        400,
        "does not exist",
    )
    matchers = _data(root.get(f"{base}/matchers"), "/cluster/notifications/matchers")
    assert {"default-matcher", matcher} <= {m["name"] for m in matchers}
    _fails(root.delete(f"{base}/endpoints/gotify/{name}"), 500, "used by matcher")
    _data(root.put(f"{base}/matchers/default-matcher", data={"comment": "edited"}))
    assert _data(root.get(f"{base}/matchers/default-matcher"))["origin"] == "modified-builtin"
    _data(root.delete(f"{base}/matchers/default-matcher"))  # restores the built-in
    assert _data(root.get(f"{base}/matchers/default-matcher"))["origin"] == "builtin"
    _data(root.delete(f"{base}/matchers/{matcher}"))
    _data(root.delete(f"{base}/endpoints/gotify/{name}"))
    fields = _data(
        root.get(f"{base}/matcher-field-values"), "/cluster/notifications/matcher-field-values"
    )
    assert {"field": "hostname", "value": "pve1"} in fields
    assert _data(root.get(f"{base}/matcher-fields"), "/cluster/notifications/matcher-fields")


def test_ha_migrate_moves_the_service_and_arming(root, unique_vmid):
    vmid = _vm(root, "pve1", unique_vmid)
    sid = f"vm:{vmid}"
    _data(root.post("/cluster/ha/resources", data={"sid": sid, "state": "stopped"}))
    answer = _data(root.post(f"/cluster/ha/resources/{sid}/migrate", data={"node": "pve3"}))
    # The suite serves 9.2, which describes the request; 6.4-8.4 declare null here.
    assert_conforms("/cluster/ha/resources/{sid}/migrate", "POST", answer, majors=(9,))
    assert answer == {"sid": sid, "requested-node": "pve3"}
    tasks = _data(
        root.get(
            "/nodes/pve1/tasks", params={"vmid": vmid, "typefilter": "qmigrate", "source": "all"}
        )
    )
    assert tasks and tasks[0]["user"] == "root@pam"
    root.wait(tasks[0]["upid"])
    assert _data(root.get(f"/nodes/pve3/qemu/{vmid}/status/current"))["ha"]["managed"] == 1
    _fails(
        root.post(f"/cluster/ha/resources/{sid}/migrate", data={"node": "pve3"}),
        500,
        "already on node",
    )

    _data(root.post("/cluster/ha/status/disarm-ha", data={"resource-mode": "freeze"}))
    _fails(
        root.post("/cluster/ha/status/disarm-ha", data={"resource-mode": "freeze"}),
        500,
        "already disarmed",
    )
    master = next(s for s in _data(root.get("/cluster/ha/status/current")) if s["id"] == "master")
    assert master["armed-state"] == "disarmed"
    _data(root.post("/cluster/ha/status/arm-ha"))
    _data(root.delete(f"/cluster/ha/resources/{sid}"))


def test_sdn_controllers_ipams_and_dns_plugins(root):
    tag = uuid.uuid4().hex[:5]
    ctl, ipam, dns, zone = f"c{tag}", f"i{tag}", f"d{tag}", f"e{tag}"
    _fails(
        root.post("/cluster/sdn/controllers", data={"controller": ctl, "type": "evpn"}), 400, "asn"
    )
    _data(
        root.post(
            "/cluster/sdn/controllers",
            data={"controller": ctl, "type": "evpn", "asn": 65000, "peers": "10.0.0.1,10.0.0.2"},
        )
    )
    _data(
        root.post(
            "/cluster/sdn/ipams",
            data={
                "ipam": ipam,
                "type": "netbox",
                "url": "https://netbox.example.invalid/api",
                "token": "tok",
            },
        )
    )
    _data(
        root.post(
            "/cluster/sdn/dns",
            data={
                "dns": dns,
                "type": "powerdns",
                "url": "https://pdns.example.invalid",
                "key": "k",
            },
        )
    )
    ipams = _data(root.get("/cluster/sdn/ipams"), "/cluster/sdn/ipams")
    assert {"pve", ipam} <= {i["ipam"] for i in ipams}
    assert "token" not in _data(root.get(f"/cluster/sdn/ipams/{ipam}"), "/cluster/sdn/ipams/{ipam}")
    assert "key" not in _data(root.get(f"/cluster/sdn/dns/{dns}"), "/cluster/sdn/dns/{dns}")
    controllers = _data(root.get("/cluster/sdn/controllers"), "/cluster/sdn/controllers")
    assert any(c["controller"] == ctl and c["asn"] == 65000 for c in controllers)
    _fails(
        root.post(
            "/cluster/sdn/zones",
            data={"zone": zone, "type": "evpn", "controller": "nosuch", "vrf-vxlan": 10000},
        ),
        400,
        "does not exist",
    )
    _data(
        root.post(
            "/cluster/sdn/zones",
            data={
                "zone": zone,
                "type": "evpn",
                "controller": ctl,
                "ipam": ipam,
                "vrf-vxlan": 10000,
            },
        )
    )
    _data(root.post("/cluster/sdn/vnets", data={"vnet": f"q{tag}", "zone": zone, "tag": 11000}))
    _data(
        root.post(
            f"/cluster/sdn/vnets/q{tag}/subnets",
            data={"subnet": "10.131.0.0/24", "type": "subnet", "gateway": "10.131.0.1"},
        )
    )
    status = _data(
        root.get(f"/cluster/sdn/ipams/{ipam}/status"), "/cluster/sdn/ipams/{ipam}/status"
    )
    assert status == [
        {
            "subnet": "10.131.0.0/24",
            "vnet": f"q{tag}",
            "zone": zone,
            "ip": "10.131.0.1",
            "gateway": 1,
        }
    ]
    _fails(root.delete(f"/cluster/sdn/controllers/{ctl}"), 500, "used by zone")
    _fails(root.delete("/cluster/sdn/ipams/pve"), 500, "built-in")
    _data(root.delete(f"/cluster/sdn/vnets/q{tag}/subnets/{zone}-10.131.0.0-24"))
    _data(root.delete(f"/cluster/sdn/vnets/q{tag}"))
    _data(root.delete(f"/cluster/sdn/zones/{zone}"))
    for what, name in (("controllers", ctl), ("ipams", ipam), ("dns", dns)):
        _data(root.delete(f"/cluster/sdn/{what}/{name}"))


# -- node disks ------------------------------------------------------------------------


def test_node_disks_build_zfs_and_lvm_thin_storages(root):
    node = "pve3"
    disks = _data(root.get(f"/nodes/{node}/disks/list"), "/nodes/{node}/disks/list")
    unused = [d["devpath"] for d in disks if "used" not in d]
    assert unused == ["/dev/sdb", "/dev/sdc", "/dev/sdd"] or len(unused) >= 2
    smart = _data(
        root.get(f"/nodes/{node}/disks/smart", params={"disk": "/dev/sda"}),
        "/nodes/{node}/disks/smart",
    )
    assert smart["health"] == "PASSED"
    name = f"tank{uuid.uuid4().hex[:4]}"
    _fails(
        root.post(
            f"/nodes/{node}/disks/zfs",
            data={"name": name, "raidlevel": "mirror", "devices": unused[0]},
        ),
        400,
        "at least 2",
    )
    _fails(
        root.post(
            f"/nodes/{node}/disks/zfs",
            data={"name": name, "raidlevel": "single", "devices": "/dev/sda"},
        ),
        500,
        "already in use",
    )
    upid = _data(
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
    pools = _data(root.get(f"/nodes/{node}/disks/zfs"), "/nodes/{node}/disks/zfs")
    assert any(p["name"] == name and p["size"] == 1024**4 for p in pools)
    detail = _data(root.get(f"/nodes/{node}/disks/zfs/{name}"), "/nodes/{node}/disks/zfs/{name}")
    assert len(detail["children"][0]["children"]) == 2
    storage = _data(root.get(f"/storage/{name}"))
    assert (storage["type"], storage["nodes"], storage["pool"]) == ("zfspool", node, name)
    used = {d["devpath"]: d.get("used") for d in _data(root.get(f"/nodes/{node}/disks/list"))}
    assert used[unused[0]] == "ZFS" and used[unused[1]] == "ZFS"
    upid = _data(
        root.delete(
            f"/nodes/{node}/disks/zfs/{name}", params={"cleanup-disks": 1, "cleanup-config": 1}
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    _fails(root.get(f"/storage/{name}"), 500, "does not exist")
    _fails(root.delete(f"/nodes/{node}/disks/lvm/pve"), 500, "system")
    assert (
        _data(root.get(f"/nodes/{node}/disks/lvm"), "/nodes/{node}/disks/lvm")["children"][0][
            "name"
        ]
        == "pve"
    )
    assert (
        _data(root.get(f"/nodes/{node}/disks/lvmthin"), "/nodes/{node}/disks/lvmthin")[0]["lv"]
        == "data"
    )


def test_node_services_and_subscription(root):
    services = _data(root.get("/nodes/pve1/services"), "/nodes/{node}/services")
    assert {"service": "pveproxy", "active-state": "active"}.items() <= next(
        s for s in services if s["service"] == "pveproxy"
    ).items()
    upid = _data(
        root.post("/nodes/pve1/services/postfix/stop"),
        "/nodes/{node}/services/{service}/stop",
        "POST",
    )
    assert upid.split(":")[5:7] == ["srvstop", "postfix"] and root.wait(upid)["exitstatus"] == "OK"
    state = _data(
        root.get("/nodes/pve1/services/postfix/state"), "/nodes/{node}/services/{service}/state"
    )
    assert (state["state"], state["active-state"]) == ("dead", "inactive")
    assert root.wait(_data(root.post("/nodes/pve1/services/postfix/start")))["exitstatus"] == "OK"
    assert _data(root.get("/nodes/pve1/services/postfix/state"))["state"] == "running"

    sub = _data(root.get("/nodes/pve2/subscription"), "/nodes/{node}/subscription")
    assert sub["status"] == "notfound"
    _fails(root.put("/nodes/pve2/subscription", data={"key": "not-a-key"}), 400, "key")
    _data(root.put("/nodes/pve2/subscription", data={"key": "pve2c-0123456789"}))
    sub = _data(root.get("/nodes/pve2/subscription"), "/nodes/{node}/subscription")
    assert (sub["status"], sub["level"], sub["sockets"]) == ("active", "c", 2)
    _data(root.post("/nodes/pve2/subscription"))
    _data(root.delete("/nodes/pve2/subscription"))
    assert _data(root.get("/nodes/pve2/subscription"))["status"] == "notfound"


def test_acme_plugins_directories_and_schema(root):
    plugin = f"dns{uuid.uuid4().hex[:6]}"
    directories = _data(root.get("/cluster/acme/directories"), "/cluster/acme/directories")
    assert directories[0]["url"].startswith("https://acme-v02.")
    schema = _data(root.get("/cluster/acme/challenge-schema"), "/cluster/acme/challenge-schema")
    assert {"standalone", "cf"} <= {s["id"] for s in schema}
    _fails(root.post("/cluster/acme/plugins", data={"id": plugin, "type": "dns"}), 400, "api")
    _data(
        root.post(
            "/cluster/acme/plugins",
            data={"id": plugin, "type": "dns", "api": "cf", "data": "CF_Token=x"},
        )
    )
    plugins = _data(root.get("/cluster/acme/plugins"), "/cluster/acme/plugins")
    assert {"standalone", plugin} <= {p["plugin"] for p in plugins}
    current = _data(root.get(f"/cluster/acme/plugins/{plugin}"), "/cluster/acme/plugins/{id}")
    _data(
        root.put(
            f"/cluster/acme/plugins/{plugin}",
            data={"validation-delay": 60, "digest": current["digest"]},
        )
    )
    assert _data(root.get(f"/cluster/acme/plugins/{plugin}"))["validation-delay"] == 60
    _fails(root.delete("/cluster/acme/plugins/standalone"), 500, "built-in")
    _data(root.delete(f"/cluster/acme/plugins/{plugin}"))


def test_apt_versions_update_and_changelog(root):
    versions = _data(root.get("/nodes/pve1/apt/versions"), "/nodes/{node}/apt/versions")
    assert versions[0]["Package"] == "proxmox-ve" and versions[0]["RunningKernel"]
    assert _data(root.get("/nodes/pve1/apt/update"), "/nodes/{node}/apt/update") == []
    upid = _data(root.post("/nodes/pve1/apt/update"), "/nodes/{node}/apt/update", "POST")
    assert upid.split(":")[5] == "aptupdate" and root.wait(upid)["exitstatus"] == "OK"
    text = _data(
        root.get("/nodes/pve1/apt/changelog", params={"name": "qemu-server"}),
        "/nodes/{node}/apt/changelog",
    )
    assert text.startswith("qemu-server (")
    _fails(
        root.get("/nodes/pve1/apt/changelog", params={"name": "nosuchpkg"}), 500, "not available"
    )


def test_local_storage_scans_follow_the_disks(root):
    assert {"vg": "pve"}.items() <= _data(
        root.get("/nodes/pve2/scan/lvm"), "/nodes/{node}/scan/lvm"
    )[0].items()
    assert _data(
        root.get("/nodes/pve2/scan/lvmthin", params={"vg": "pve"}), "/nodes/{node}/scan/lvmthin"
    ) == [{"lv": "data"}]
    before = _data(root.get("/nodes/pve2/scan/zfs"), "/nodes/{node}/scan/zfs")
    name = f"scan{uuid.uuid4().hex[:4]}"
    free = [
        d["devpath"] for d in _data(root.get("/nodes/pve2/disks/list", params={"type": "unused"}))
    ]
    upid = _data(
        root.post(
            "/nodes/pve2/disks/zfs", data={"name": name, "raidlevel": "single", "devices": free[0]}
        )
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    assert _data(root.get("/nodes/pve2/scan/zfs")) == sorted(
        [*before, {"pool": name}], key=lambda p: p["pool"]
    )
    assert (
        root.wait(_data(root.delete(f"/nodes/pve2/disks/zfs/{name}", params={"cleanup-disks": 1})))[
            "exitstatus"
        ]
        == "OK"
    )


def test_node_config_description_and_acme_domains(root):
    config = _data(root.get("/nodes/pve3/config"), "/nodes/{node}/config")
    _data(
        root.put(
            "/nodes/pve3/config",
            data={
                "description": "rack 4",
                "acmedomain0": "pve3.example.invalid",
                "digest": config["digest"],
            },
        )
    )
    _fails(
        root.put("/nodes/pve3/config", data={"description": "x", "digest": config["digest"]}),
        500,
        "changed by other user",
    )
    assert _data(root.get("/nodes/pve3/config", params={"property": "description"})) == {
        "description": "rack 4"
    }
    assert _data(root.get("/nodes/pve3/config"))["acmedomain0"] == "pve3.example.invalid"
    _data(root.put("/nodes/pve3/config", data={"delete": "description,acmedomain0"}))
    assert "description" not in _data(root.get("/nodes/pve3/config"))


def test_corosync_views_of_the_seeded_cluster(root):
    assert _data(root.get("/cluster/config/apiversion"), "/cluster/config/apiversion") == 1
    nodes = _data(root.get("/cluster/config/nodes"), "/cluster/config/nodes")
    assert [n["node"] for n in nodes] == ["pve1", "pve2", "pve3"]
    join = _data(root.get("/cluster/config/join", params={"node": "pve2"}), "/cluster/config/join")
    assert join["preferred_node"] == "pve2" and len(join["nodelist"]) == 3
    assert (
        join["totem"]["cluster_name"]
        == _data(root.get("/cluster/config/totem"), "/cluster/config/totem")["cluster_name"]
    )
    _fails(root.get("/cluster/config/join", params={"node": "pve9"}), 500, "no node")
    assert _data(root.get("/cluster/config/qdevice"), "/cluster/config/qdevice") == {}
