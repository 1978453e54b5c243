"""The contract-driven resource store, through the HTTP API a client uses.

Paths are ones no bespoke handler owns in this build (HA groups, SDN, cluster
options, Ceph pools); the store answers them from PostgreSQL state.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, create_database, drop_database, run
from test_api import Session

from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.domain import resource_shapes as shapes


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def root(client):
    return Session(client)


def test_collection_create_list_read_update_delete(root):
    created = root.post(
        "/cluster/ha/groups", data={"group": "edge", "nodes": "pve1,pve2", "comment": "first"}
    )
    assert created.status_code == 200, created.text
    assert created.json() == {"data": None}  # the method returns null
    listed = root.get("/cluster/ha/groups").json()["data"]
    assert {"group": "edge", "nodes": "pve1,pve2", "comment": "first"}.items() <= next(
        g for g in listed if g["group"] == "edge"
    ).items()
    item = root.get("/cluster/ha/groups/edge").json()["data"]
    assert item["nodes"] == "pve1,pve2" and item["comment"] == "first"

    again = root.post("/cluster/ha/groups", data={"group": "edge", "nodes": "pve3"})
    assert again.status_code == 500 and "already exists" in again.reason_phrase

    updated = root.put("/cluster/ha/groups/edge", data={"nofailback": 1, "delete": "comment"})
    assert updated.status_code == 200, updated.text
    item = root.get("/cluster/ha/groups/edge").json()["data"]
    assert item["nofailback"] == 1 and "comment" not in item and item["nodes"] == "pve1,pve2"

    assert root.delete("/cluster/ha/groups/edge").status_code == 200
    gone = root.get("/cluster/ha/groups/edge")
    assert gone.status_code == 500 and gone.reason_phrase == "group 'edge' does not exist"
    assert root.delete("/cluster/ha/groups/edge").status_code == 500


def test_writes_are_validated_against_the_method_and_nothing_is_half_written(root):
    before = root.get("/cluster/ha/groups").json()["data"]
    missing = root.post("/cluster/ha/groups", data={"group": "nonodes"})
    assert missing.status_code == 400
    assert missing.json()["errors"] == {"nodes": "property is missing and it is not optional"}
    wrong = root.post(
        "/cluster/ha/groups", data={"group": "bad", "nodes": "pve1", "restricted": "maybe"}
    )
    assert wrong.status_code == 400 and set(wrong.json()["errors"]) == {"restricted"}
    unknown = root.put("/cluster/options", data={"no-such-option": "1"})
    assert unknown.status_code == 400 and "no-such-option" in unknown.json()["errors"]
    assert root.get("/cluster/ha/groups").json()["data"] == before


def test_digest_detects_a_concurrent_change(root):
    assert (
        root.post("/cluster/sdn/zones", data={"zone": "dzone", "type": "simple"}).status_code == 200
    )
    seen = root.get("/cluster/sdn/zones/dzone").json()["data"]
    assert seen["digest"] == shapes.digest({"type": "simple"})
    assert root.put("/cluster/sdn/zones/dzone", data={"mtu": 1400}).status_code == 200
    stale = root.put("/cluster/sdn/zones/dzone", data={"mtu": 1300, "digest": seen["digest"]})
    assert stale.status_code == 500
    assert "file changed by other user" in stale.reason_phrase
    assert root.get("/cluster/sdn/zones/dzone").json()["data"]["mtu"] == 1400


def test_concurrent_writers_with_one_digest_only_one_wins(server):
    """Eight connections race to update one item from the same digest."""
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        setup = Session(c)
        assert (
            setup.post("/cluster/sdn/zones", data={"zone": "race", "type": "simple"}).status_code
            == 200
        )
        digest = setup.get("/cluster/sdn/zones/race").json()["data"]["digest"]
    results: list[int] = []
    barrier = threading.Barrier(8)

    def writer(mtu: int) -> None:
        with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as own:
            session = Session(own)
            barrier.wait()
            response = session.put("/cluster/sdn/zones/race", data={"mtu": mtu, "digest": digest})
            results.append(response.status_code)

    threads = [threading.Thread(target=writer, args=(1300 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [500] * 7


def test_concurrent_writers_of_different_fields_lose_nothing(server):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        Session(c).post("/cluster/sdn/zones", data={"zone": "merge", "type": "simple"})
    fields = ["mtu", "nodes", "ipam", "dns", "reversedns", "dnszone"]
    values = {
        "mtu": 1450,
        "nodes": "pve1",
        "ipam": "pve",
        "dns": "d",
        "reversedns": "r",
        "dnszone": "z",
    }
    barrier = threading.Barrier(len(fields))

    def writer(name: str) -> None:
        with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as own:
            session = Session(own)
            barrier.wait()
            assert (
                session.put("/cluster/sdn/zones/merge", data={name: values[name]}).status_code
                == 200
            )

    threads = [threading.Thread(target=writer, args=(f,)) for f in fields]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        zone = Session(c).get("/cluster/sdn/zones/merge").json()["data"]
    assert {k: str(zone[k]) for k in fields} == {k: str(v) for k, v in values.items()}


def test_children_need_their_parent_and_go_with_it(root):
    # Directory indexes below a store item check it too (and the item itself).
    assert (
        root.get("/cluster/sdn/vnets/nope/firewall").reason_phrase == "vnet 'nope' does not exist"
    )
    assert root.get("/nodes/pve1/ceph/pool/nope").reason_phrase == "name 'nope' does not exist"
    orphan = root.get("/cluster/sdn/vnets/nope/subnets")
    assert orphan.status_code == 500 and orphan.reason_phrase == "vnet 'nope' does not exist"
    no_node = root.get("/nodes/nosuchnode/ceph/pool")
    assert (
        no_node.status_code == 500
        and "hostname lookup 'nosuchnode' failed" in no_node.reason_phrase
    )

    assert root.post("/cluster/firewall/groups", data={"group": "web"}).status_code == 200
    for port in ("80", "443"):
        rule = root.post(
            "/cluster/firewall/groups/web", data={"action": "ACCEPT", "type": "in", "dport": port}
        )
        assert rule.status_code == 200, rule.text
    rules = root.get("/cluster/firewall/groups/web").json()["data"]
    assert [(r["pos"], r["dport"]) for r in rules] == [(0, "80"), (1, "443")]
    assert root.get("/cluster/firewall/groups/web/1").json()["data"]["dport"] == "443"
    assert root.delete("/cluster/firewall/groups/web").status_code == 200
    assert root.get("/cluster/firewall/groups/web/1").status_code == 500
    assert root.post("/cluster/firewall/groups", data={"group": "web"}).status_code == 200
    assert root.get("/cluster/firewall/groups/web").json()["data"] == []


def test_config_objects_merge_and_delete_keys(root):
    assert (
        root.put("/cluster/options", data={"keyboard": "de", "language": "en"}).status_code == 200
    )
    options = root.get("/cluster/options").json()["data"]
    assert options["keyboard"] == "de" and options["language"] == "en"
    assert root.put("/cluster/options", data={"delete": "keyboard"}).status_code == 200
    options = root.get("/cluster/options").json()["data"]
    assert "keyboard" not in options and options["language"] == "en"


def test_reads_follow_the_returns_schema(root):
    # A never-written config object still answers with every required field, typed.
    contract = sources.parse_artifact(
        sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION
    ).contract
    for path in (
        "/cluster/ceph/status",
        "/nodes/pve1/ceph/status",
        "/cluster/ha/status/manager_status",
    ):
        template = path.replace("pve1", "{node}")
        endpoint = contract.endpoint(template, "GET")
        data = root.get(path).json()["data"]
        assert shapes.schema_errors(endpoint.returns, data) == [], path


def test_permissions_come_from_the_contract(client, root):
    user = "storeaudit@pve"
    assert (
        root.post("/access/users", data={"userid": user, "password": "store-pw-1"}).status_code
        == 200
    )
    nobody = Session(client, user, "store-pw-1")
    denied = nobody.get("/cluster/ha/groups")
    assert (
        denied.status_code == 403
        and denied.reason_phrase == "Permission check failed (/, Sys.Audit)"
    )
    assert (
        root.put(
            "/access/acl", data={"path": "/", "users": user, "roles": "PVEAuditor"}
        ).status_code
        == 200
    )
    assert nobody.get("/cluster/ha/groups").status_code == 200
    refused = nobody.post("/cluster/ha/groups", data={"group": "x", "nodes": "pve1"})
    assert refused.status_code == 403


@pytest.fixture(scope="module")
def manual_server(tmp_path_factory):
    """A simulator on a manual clock: tasks finish only when the test advances it."""
    from proxmox_simulator.cli import seed_database
    from proxmox_simulator.server import SimulatorServer

    url = create_database("storeclock")
    settings = Settings(
        database_url=url,
        data_dir=tmp_path_factory.mktemp("storeclock"),
        contract="fakepve",
        clock="manual",
        task_workers=2,
        lease_seconds=10,
        pool_max_size=4,
    )
    run(seed_database(settings, "small", 3, ROOT_PASSWORD))
    try:
        with SimulatorServer(settings) as server:
            yield server
    finally:
        drop_database(url)


def test_upid_methods_apply_their_write_when_the_task_completes(manual_server):
    with httpx.Client(base_url=manual_server.base_url + "/api2/json", timeout=30) as c:
        root = Session(c)
        created = root.post("/nodes/pve1/ceph/pool", data={"name": "rbd", "size": 3})
        assert created.status_code == 200, created.text
        upid = created.json()["data"]
        assert upid.startswith("UPID:pve1:") and ":cephpool:rbd:root@pam:" in upid

        def pools():
            return {p["pool_name"]: p for p in root.get("/nodes/pve1/ceph/pool").json()["data"]}

        assert "rbd" not in pools()  # not before the task completed
        status = root.get(f"/nodes/pve1/tasks/{upid}/status").json()["data"]
        assert status["status"] == "running"
        assert root.post("/../../simulator/clock/advance", data={"seconds": 2}).status_code == 200
        finished = root.wait(upid)
        assert finished["exitstatus"] == "OK"
        assert pools()["rbd"]["size"] == 3
        log = root.get(f"/nodes/pve1/tasks/{upid}/log").json()["data"]
        assert log[-1]["t"] == "TASK OK"

        # A task stopped before it completes never applies its write.
        doomed = root.delete("/nodes/pve1/ceph/pool/rbd").json()["data"]
        assert root.delete(f"/nodes/pve1/tasks/{doomed}").status_code == 200
        root.post("/../../simulator/clock/advance", data={"seconds": 2})
        assert root.wait(doomed)["exitstatus"] != "OK"
        time.sleep(0.2)
        assert "rbd" in pools()


def test_a_destroyed_guest_takes_its_stored_configuration_along(root, unique_vmid):
    base = f"/nodes/pve1/qemu/{unique_vmid}"

    def create():
        upid = root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid}).json()["data"]
        assert root.wait(upid)["exitstatus"] == "OK"

    create()
    rule = root.post(f"{base}/firewall/rules", data={"action": "DROP", "type": "in"})
    assert rule.status_code == 200, rule.text
    assert root.put(f"{base}/firewall/options", data={"enable": 1}).status_code == 200
    assert len(root.get(f"{base}/firewall/rules").json()["data"]) == 1
    assert root.wait(root.delete(base).json()["data"])["exitstatus"] == "OK"
    create()
    assert root.get(f"{base}/firewall/rules").json()["data"] == []
    assert "enable" not in root.get(f"{base}/firewall/options").json()["data"]
    assert root.wait(root.delete(base).json()["data"])["exitstatus"] == "OK"


def test_guest_configuration_follows_a_migration(root, unique_vmid):
    upid = root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid}).json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    rules = f"/nodes/pve1/qemu/{unique_vmid}/firewall/rules"
    assert (
        root.post(rules, data={"action": "ACCEPT", "type": "in", "dport": "443"}).status_code == 200
    )
    moved = root.post(f"/nodes/pve1/qemu/{unique_vmid}/migrate", data={"target": "pve2"})
    assert root.wait(moved.json()["data"])["exitstatus"] == "OK"
    there = root.get(f"/nodes/pve2/qemu/{unique_vmid}/firewall/rules").json()["data"]
    assert [r["dport"] for r in there] == ["443"]
    assert root.get(rules).status_code == 500  # the guest is no longer on pve1
    assert (
        root.wait(root.delete(f"/nodes/pve2/qemu/{unique_vmid}").json()["data"])["exitstatus"]
        == "OK"
    )
