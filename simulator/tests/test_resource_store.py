"""The contract-driven resource store, through the HTTP API a client uses.

The store is driven by the contract alone, so these tests serve fakepve's
contract extended with ``/cluster/simstore/...`` paths (and one below each
QEMU guest), declared the way PVE declares its schema: no bespoke handler
will ever own them, whatever other handlers exist.  The probe covers the
real paths of every major.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, create_database, drop_database, run
from test_api import Session

from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import resource_shapes as shapes

AUDIT = {"check": ["perm", "/", ["Sys.Audit"]]}
MODIFY = {"check": ["perm", "/", ["Sys.Modify"]]}
GUEST_AUDIT = {"check": ["perm", "/vms/{vmid}", ["VM.Audit"]]}
GUEST_MODIFY = {"check": ["perm", "/vms/{vmid}", ["VM.Config.Options"]]}
NULL = {"type": "null"}
GROUP = {"type": "string", "format": "pve-configid"}
_NODE = {"type": "string", "format": "pve-node"}
_VMID = {"type": "integer", "format": "pve-vmid", "minimum": 100}


def _params(**props) -> dict:
    return {"additionalProperties": 0, "properties": props}


def _opt(schema: dict) -> dict:
    return {**schema, "optional": 1}


GROUP_FIELDS = {
    "nodes": {"type": "string"},
    "comment": {"type": "string", "maxLength": 64},
    "nofailback": {"type": "boolean"},
    "mtu": {"type": "integer", "minimum": 576, "maximum": 65520},
}
SYNTHETIC = {
    ("/cluster/simstore/groups", "GET"): {
        "permissions": AUDIT,
        "returns": {
            "type": "array",
            "items": {"type": "object", "properties": {"group": {"type": "string"}}},
            "links": [{"rel": "child", "href": "{group}"}],
        },
    },
    ("/cluster/simstore/groups", "POST"): {
        "permissions": MODIFY,
        "protected": 1,
        "parameters": _params(
            group=GROUP,
            nodes=GROUP_FIELDS["nodes"],
            comment=_opt(GROUP_FIELDS["comment"]),
            nofailback=_opt(GROUP_FIELDS["nofailback"]),
        ),
        "returns": NULL,
    },
    ("/cluster/simstore/groups/{group}", "GET"): {
        "permissions": AUDIT,
        "parameters": _params(group=GROUP),
        "returns": {"type": "object"},
    },
    ("/cluster/simstore/groups/{group}", "PUT"): {
        "permissions": MODIFY,
        "parameters": _params(
            group=GROUP,
            **{name: _opt(schema) for name, schema in GROUP_FIELDS.items()},
            delete=_opt({"type": "string", "format": "pve-configid-list"}),
            digest=_opt({"type": "string", "maxLength": 64}),
        ),
        "returns": NULL,
    },
    ("/cluster/simstore/groups/{group}", "DELETE"): {
        "permissions": MODIFY,
        "parameters": _params(group=GROUP),
        "returns": NULL,
    },
    ("/cluster/simstore/groups/{group}/rules", "GET"): {
        "permissions": AUDIT,
        "parameters": _params(group=GROUP),
        "returns": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"pos": {"type": "integer"}, "action": {"type": "string"}},
            },
            "links": [{"rel": "child", "href": "{pos}"}],
        },
    },
    ("/cluster/simstore/groups/{group}/rules", "POST"): {
        "permissions": MODIFY,
        "parameters": _params(
            group=GROUP,
            action={"type": "string", "enum": ["ACCEPT", "DROP"]},
            dport=_opt({"type": "string"}),
        ),
        "returns": NULL,
    },
    ("/cluster/simstore/groups/{group}/rules/{pos}", "GET"): {
        "permissions": AUDIT,
        "parameters": _params(group=GROUP, pos={"type": "integer", "minimum": 0}),
        "returns": {
            "type": "object",
            "properties": {"pos": {"type": "integer"}, "action": {"type": "string"}},
        },
    },
    ("/cluster/simstore/options", "GET"): {"permissions": AUDIT, "returns": {"type": "object"}},
    ("/cluster/simstore/options", "PUT"): {
        "permissions": MODIFY,
        "parameters": _params(
            keyboard=_opt({"type": "string", "enum": ["de", "en-us", "fr"]}),
            language=_opt({"type": "string"}),
            delete=_opt({"type": "string", "format": "pve-configid-list"}),
        ),
        "returns": NULL,
    },
    ("/cluster/simstore/jobs", "GET"): {
        "permissions": AUDIT,
        "returns": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
            },
            "links": [{"rel": "child", "href": "{name}"}],
        },
    },
    ("/cluster/simstore/jobs", "POST"): {
        "permissions": MODIFY,
        "parameters": _params(name=GROUP, size={"type": "integer", "minimum": 1}),
        "returns": {"type": "string"},
    },
    ("/cluster/simstore/jobs/{name}", "DELETE"): {
        "permissions": MODIFY,
        "parameters": _params(name=GROUP),
        "returns": {"type": "string", "description": "the task ID."},
    },
    ("/nodes/{node}/qemu/{vmid}/simstore-notes", "GET"): {
        "permissions": GUEST_AUDIT,
        "parameters": _params(node=_NODE, vmid=_VMID),
        "returns": {
            "type": "array",
            "items": {"type": "object", "properties": {"note": {"type": "string"}}},
            "links": [{"rel": "child", "href": "{note}"}],
        },
    },
    ("/nodes/{node}/qemu/{vmid}/simstore-notes", "POST"): {
        "permissions": GUEST_MODIFY,
        "parameters": _params(node=_NODE, vmid=_VMID, note=GROUP, text={"type": "string"}),
        "returns": NULL,
    },
}


def store_contract() -> Contract:
    base = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract
    added = tuple(
        Endpoint.from_source(path, method, info) for (path, method), info in SYNTHETIC.items()
    )
    return Contract(base.version, (*base.endpoints, *added))


def serve_store_contract(settings: Settings, *, tls: bool = False):
    from proxmox_simulator.api.app import create_app
    from proxmox_simulator.server import SimulatorServer

    app = create_app(settings, contract=store_contract())
    return SimulatorServer(settings, tls=tls, app=app)


@pytest.fixture(scope="module")
def store_server(settings, seeded):
    """A second simulator on the session database, serving the extended contract."""
    own = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract="fakepve",
        clock="instant",
        task_workers=1,
        lease_seconds=10,
        pool_max_size=10,
    )
    with serve_store_contract(own) as server:
        yield server


@pytest.fixture(scope="module")
def client(store_server):
    with httpx.Client(base_url=store_server.base_url + "/api2/json", timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def root(client):
    return Session(client)


def test_every_synthetic_method_is_answered_by_the_store():
    from proxmox_simulator.api.handlers.dispatch import handling

    contract = store_contract()
    for path, method in SYNTHETIC:
        assert handling(contract, contract.endpoint(path, method)) == "resource-store"


def test_collection_create_list_read_update_delete(root):
    created = root.post(
        "/cluster/simstore/groups", data={"group": "edge", "nodes": "pve1,pve2", "comment": "first"}
    )
    assert created.status_code == 200, created.text
    assert created.json() == {"data": None}  # the method returns null
    listed = root.get("/cluster/simstore/groups").json()["data"]
    assert {"group": "edge", "nodes": "pve1,pve2", "comment": "first"}.items() <= next(
        g for g in listed if g["group"] == "edge"
    ).items()
    item = root.get("/cluster/simstore/groups/edge").json()["data"]
    assert item["nodes"] == "pve1,pve2" and item["comment"] == "first"

    again = root.post("/cluster/simstore/groups", data={"group": "edge", "nodes": "pve3"})
    assert again.status_code == 500 and "already exists" in again.reason_phrase

    updated = root.put("/cluster/simstore/groups/edge", data={"nofailback": 1, "delete": "comment"})
    assert updated.status_code == 200, updated.text
    item = root.get("/cluster/simstore/groups/edge").json()["data"]
    assert item["nofailback"] == 1 and "comment" not in item and item["nodes"] == "pve1,pve2"

    assert root.delete("/cluster/simstore/groups/edge").status_code == 200
    gone = root.get("/cluster/simstore/groups/edge")
    assert gone.status_code == 500 and gone.reason_phrase == "group 'edge' does not exist"
    assert root.delete("/cluster/simstore/groups/edge").status_code == 500


def test_writes_are_validated_against_the_method_and_nothing_is_half_written(root):
    before = root.get("/cluster/simstore/groups").json()["data"]
    missing = root.post("/cluster/simstore/groups", data={"group": "nonodes"})
    assert missing.status_code == 400
    assert missing.json()["errors"] == {"nodes": "property is missing and it is not optional"}
    wrong = root.post(
        "/cluster/simstore/groups", data={"group": "bad", "nodes": "pve1", "nofailback": "maybe"}
    )
    assert wrong.status_code == 400
    assert wrong.json()["errors"] == {"nofailback": "type check ('boolean') failed - got 'maybe'"}
    too_small = root.put("/cluster/simstore/groups/bad", data={"mtu": 100})
    assert too_small.status_code == 400
    assert too_small.json()["errors"] == {"mtu": "value must have a minimum value of 576"}
    unknown = root.put("/cluster/simstore/options", data={"no-such-option": "1"})
    assert unknown.status_code == 400 and "no-such-option" in unknown.json()["errors"]
    assert root.get("/cluster/simstore/groups").json()["data"] == before


def test_digest_detects_a_concurrent_change(root):
    created = root.post("/cluster/simstore/groups", data={"group": "dgroup", "nodes": "pve1"})
    assert created.status_code == 200
    seen = root.get("/cluster/simstore/groups/dgroup").json()["data"]
    assert seen["digest"] == shapes.digest({"nodes": "pve1"})
    assert root.put("/cluster/simstore/groups/dgroup", data={"mtu": 1400}).status_code == 200
    stale = root.put(
        "/cluster/simstore/groups/dgroup", data={"mtu": 1300, "digest": seen["digest"]}
    )
    assert stale.status_code == 500
    assert "file changed by other user" in stale.reason_phrase
    assert root.get("/cluster/simstore/groups/dgroup").json()["data"]["mtu"] == 1400


@contextmanager
def _session(server):
    """Its own connection, logged in as root."""
    with httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client:
        yield Session(client)


def test_concurrent_writers_with_one_digest_only_one_wins(store_server):
    """Eight connections race to update one item from the same digest."""
    with _session(store_server) as setup:
        setup.post("/cluster/simstore/groups", data={"group": "race", "nodes": "pve1"})
        digest = setup.get("/cluster/simstore/groups/race").json()["data"]["digest"]
    results: list[int] = []
    barrier = threading.Barrier(8)

    def writer(mtu: int) -> None:
        with _session(store_server) as session:
            barrier.wait()
            response = session.put(
                "/cluster/simstore/groups/race", data={"mtu": mtu, "digest": digest}
            )
            results.append(response.status_code)

    threads = [threading.Thread(target=writer, args=(1300 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [500] * 7


def test_concurrent_writers_of_different_fields_lose_nothing(store_server):
    with _session(store_server) as setup:
        setup.post("/cluster/simstore/groups", data={"group": "merge", "nodes": "pve1"})
    values = {"mtu": 1450, "comment": "c", "nofailback": 1, "nodes": "pve2"}
    barrier = threading.Barrier(len(values))

    def writer(name: str) -> None:
        with _session(store_server) as session:
            barrier.wait()
            response = session.put("/cluster/simstore/groups/merge", data={name: values[name]})
            assert response.status_code == 200

    threads = [threading.Thread(target=writer, args=(name,)) for name in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with _session(store_server) as check:
        group = check.get("/cluster/simstore/groups/merge").json()["data"]
    assert {k: str(group[k]) for k in values} == {k: str(v) for k, v in values.items()}


def test_children_need_their_parent_and_go_with_it(root):
    orphan = root.get("/cluster/simstore/groups/nope/rules")
    assert orphan.status_code == 500 and orphan.reason_phrase == "group 'nope' does not exist"
    # Real paths too: a directory index below a store item, and a missing node.
    assert (
        root.get("/cluster/sdn/vnets/nope/firewall").reason_phrase
        == "sdn vnet 'nope' does not exist"
    )
    no_node = root.get("/nodes/nosuchnode/ceph/pool")
    assert no_node.status_code == 500
    assert "hostname lookup 'nosuchnode' failed" in no_node.reason_phrase

    assert (
        root.post("/cluster/simstore/groups", data={"group": "web", "nodes": "pve1"}).status_code
        == 200
    )
    for port in ("80", "443"):
        rule = root.post(
            "/cluster/simstore/groups/web/rules", data={"action": "ACCEPT", "dport": port}
        )
        assert rule.status_code == 200, rule.text
    rules = root.get("/cluster/simstore/groups/web/rules").json()["data"]
    assert [(r["pos"], r["dport"]) for r in rules] == [(0, "80"), (1, "443")]
    assert root.get("/cluster/simstore/groups/web/rules/1").json()["data"] == {
        "pos": 1,
        "action": "ACCEPT",
        "dport": "443",
    }
    assert root.delete("/cluster/simstore/groups/web").status_code == 200
    assert root.get("/cluster/simstore/groups/web/rules/1").status_code == 500
    assert (
        root.post("/cluster/simstore/groups", data={"group": "web", "nodes": "pve1"}).status_code
        == 200
    )
    assert root.get("/cluster/simstore/groups/web/rules").json()["data"] == []


def test_config_objects_merge_and_delete_keys(root):
    assert (
        root.put("/cluster/simstore/options", data={"keyboard": "de", "language": "en"}).status_code
        == 200
    )
    options = root.get("/cluster/simstore/options").json()["data"]
    assert options["keyboard"] == "de" and options["language"] == "en"
    assert root.put("/cluster/simstore/options", data={"delete": "keyboard"}).status_code == 200
    options = root.get("/cluster/simstore/options").json()["data"]
    assert "keyboard" not in options and options["language"] == "en"


def test_reads_follow_the_returns_schema(root):
    # Whoever answers them, these real reads must match what the contract declares.
    contract = store_contract()
    for path in (
        "/cluster/ceph/status",
        "/nodes/pve1/ceph/status",
        "/cluster/ha/status/manager_status",
    ):
        endpoint = contract.endpoint(path.replace("pve1", "{node}"), "GET")
        data = root.get(path).json()["data"]
        assert shapes.schema_errors(endpoint.returns, data) == [], path


def test_permissions_come_from_the_contract(client, root):
    user = "storeaudit@pve"
    assert (
        root.post("/access/users", data={"userid": user, "password": "store-pw-1"}).status_code
        == 200
    )
    nobody = Session(client, user, "store-pw-1")
    denied = nobody.get("/cluster/simstore/groups")
    assert denied.status_code == 403
    assert denied.reason_phrase == "Permission check failed (/, Sys.Audit)"
    granted = root.put("/access/acl", data={"path": "/", "users": user, "roles": "PVEAuditor"})
    assert granted.status_code == 200
    assert nobody.get("/cluster/simstore/groups").status_code == 200
    refused = nobody.post("/cluster/simstore/groups", data={"group": "x", "nodes": "pve1"})
    assert refused.status_code == 403


@pytest.fixture(scope="module")
def manual_server(tmp_path_factory):
    """A simulator on a manual clock: tasks finish only when the test advances it."""
    from proxmox_simulator.cli import seed_database

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
        with serve_store_contract(settings) as server:
            yield server
    finally:
        drop_database(url)


def test_upid_methods_apply_their_write_when_the_task_completes(manual_server):
    with httpx.Client(base_url=manual_server.base_url + "/api2/json", timeout=30) as c:
        root = Session(c)

        def jobs():
            return {j["name"]: j for j in root.get("/cluster/simstore/jobs").json()["data"]}

        created = root.post("/cluster/simstore/jobs", data={"name": "nightly", "size": 3})
        assert created.status_code == 200, created.text
        upid = created.json()["data"]
        # Cluster-wide tasks run on the first node; the type follows the path.
        assert upid.startswith("UPID:pve1:") and ":simstorejobs:nightly:root@pam:" in upid
        assert "nightly" not in jobs()  # not before the task completed
        status = root.get(f"/nodes/pve1/tasks/{upid}/status").json()["data"]
        assert status["status"] == "running"
        assert root.post("/../../simulator/clock/advance", data={"seconds": 2}).status_code == 200
        finished = root.wait(upid)
        assert finished["exitstatus"] == "OK"
        assert jobs()["nightly"]["size"] == 3
        log = root.get(f"/nodes/pve1/tasks/{upid}/log").json()["data"]
        assert log[-1]["t"] == "TASK OK"

        # A task stopped before it completes never applies its write.
        doomed = root.delete("/cluster/simstore/jobs/nightly").json()["data"]
        assert ":simstorejobsdestroy:nightly:" in doomed
        assert root.delete(f"/nodes/pve1/tasks/{doomed}").status_code == 200
        root.post("/../../simulator/clock/advance", data={"seconds": 2})
        assert root.wait(doomed)["exitstatus"] != "OK"
        time.sleep(0.2)
        assert "nightly" in jobs()


def test_a_destroyed_guest_takes_its_stored_configuration_along(root, unique_vmid):
    base = f"/nodes/pve1/qemu/{unique_vmid}"

    def create():
        upid = root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid}).json()["data"]
        assert root.wait(upid)["exitstatus"] == "OK"

    create()
    note = root.post(f"{base}/simstore-notes", data={"note": "owner", "text": "ops"})
    assert note.status_code == 200, note.text
    assert root.get(f"{base}/simstore-notes").json()["data"] == [{"note": "owner", "text": "ops"}]
    assert root.wait(root.delete(base).json()["data"])["exitstatus"] == "OK"
    assert root.get(f"{base}/simstore-notes").status_code == 500  # no guest, no notes
    create()
    assert root.get(f"{base}/simstore-notes").json()["data"] == []
    assert root.wait(root.delete(base).json()["data"])["exitstatus"] == "OK"


def test_guest_configuration_follows_a_migration(root, unique_vmid):
    upid = root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid}).json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    notes = f"/nodes/pve1/qemu/{unique_vmid}/simstore-notes"
    assert root.post(notes, data={"note": "owner", "text": "ops"}).status_code == 200
    moved = root.post(f"/nodes/pve1/qemu/{unique_vmid}/migrate", data={"target": "pve2"})
    assert root.wait(moved.json()["data"])["exitstatus"] == "OK"
    there = root.get(f"/nodes/pve2/qemu/{unique_vmid}/simstore-notes").json()["data"]
    assert [n["note"] for n in there] == ["owner"]
    assert root.get(notes).status_code == 500  # the guest is no longer on pve1
    destroy = root.delete(f"/nodes/pve2/qemu/{unique_vmid}").json()["data"]
    assert root.wait(destroy)["exitstatus"] == "OK"
