"""HTTP behaviour: envelopes, errors, auth, CSRF, tokens, permissions, handlers."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, Session, run

import proxbox_redaction
from proxmox_simulator.api.logging import JsonFormatter, install_redaction, redact
from proxmox_simulator.domain.auth import TicketAuthority
from proxmox_simulator.repositories import db
from proxmox_simulator.repositories import settings as settings_repo


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def root(client):
    return Session(client)


def cookie(ticket):
    return {"Cookie": f"PVEAuthCookie={ticket}"}


def token_header(full_id, secret):
    return {"Authorization": f"PVEAPIToken={full_id}={secret}"}


# -- envelope and errors -----------------------------------------------------------


def test_envelope_headers_and_version(root):
    response = root.get("/version", headers={"X-Request-ID": "trace-42"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "trace-42"
    generated = root.get("/version", headers={"X-Request-ID": "bad id\twith spaces"})
    assert len(generated.headers["x-request-id"]) == 32
    assert response.headers["server"] == "pve-api-daemon/3.0"
    assert response.headers["cache-control"] == "max-age=0"
    assert response.json() == {
        "data": {"version": "9.2.12", "release": "9.2", "repoid": response.json()["data"]["repoid"]}
    }


def test_parameter_errors_have_pve_shape_and_reason(root):
    response = root.get("/nodes/pve1/qemu", params={"full": "perhaps", "bogus": "1"})
    assert response.status_code == 400
    assert response.reason_phrase == "Parameter verification failed."
    body = response.json()
    assert body["data"] is None
    assert set(body["errors"]) == {"full", "bogus"}


def test_undeclared_paths_authenticate_first_then_answer_501(client, root):
    anonymous = client.get("/nodes/pve1/definitely-not-a-path")
    assert anonymous.status_code == 401
    # Refused by the authentication step, before any formatter: no envelope, and
    # (9.x) the message as the whole body.
    assert (anonymous.reason_phrase, anonymous.content) == ("No ticket", b"No ticket\n")
    response = root.get("/nodes/pve1/definitely-not-a-path")
    assert response.status_code == 501
    assert (
        response.reason_phrase == "Method 'GET /nodes/pve1/definitely-not-a-path' not implemented"
    )
    # A declared path with an undeclared method is the same to PVE.
    assert root.delete("/version").reason_phrase == "Method 'DELETE /version' not implemented"


def test_declared_method_without_a_handler_answers_501(settings, seeded):
    """The store does not answer a collection a bespoke handler owns (``GET /nodes``):
    a ``POST /nodes`` declared by a contract stays unhandled and says so."""
    from proxmox_simulator.api.app import create_app
    from proxmox_simulator.config import Settings
    from proxmox_simulator.contracts import sources
    from proxmox_simulator.contracts.model import Contract, Endpoint
    from proxmox_simulator.server import SimulatorServer

    base = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract
    contract = Contract(base.version, (*base.endpoints, Endpoint("/nodes", "POST")))
    quiet = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract="fakepve",
        task_workers=0,
        pool_max_size=2,
    )
    with (
        SimulatorServer(quiet, app=create_app(quiet, contract=contract)) as server,
        httpx.Client(base_url=server.base_url + "/api2/json") as other,
    ):
        session = Session(other)
        response = session.post("/nodes")
        assert session.get("/nodes").status_code == 200
    assert response.status_code == 501
    message = "Method 'POST /nodes' not implemented by the simulator (CONTRACT_FALLBACK=error)"
    assert response.reason_phrase == message
    assert response.json() == {"data": None, "message": message}


def test_extjs_format_wraps_errors_in_a_200(client, root):
    response = client.get(
        "/../extjs/nodes/pve1/qemu/999999/status/current", headers=cookie(root.ticket)
    )
    assert response.status_code == 200
    body = response.json()
    assert body["success"] == 0 and body["status"] == 500
    assert "does not exist" in body["message"] and body["message"].endswith("\n")


def test_missing_guest_reports_missing_config_file(root):
    response = root.get("/nodes/pve1/qemu/999999/config")
    assert response.status_code == 500
    assert (
        response.reason_phrase
        == "Configuration file 'nodes/pve1/qemu-server/999999.conf' does not exist"
    )


def test_directory_index_from_contract(root, seeded):
    vmid = _first_guest(root, "pve1", "qemu")
    subdirs = {e["subdir"] for e in root.get(f"/nodes/pve1/qemu/{vmid}").json()["data"]}
    assert {"config", "status", "snapshot", "agent"} <= subdirs
    assert root.get("/nodes/pve1/qemu/999999").status_code == 500


def _first_guest(session, node, kind):
    guests = session.get(f"/nodes/{node}/{kind}").json()["data"]
    assert guests, f"seed has {kind} guests on {node}"
    return guests[0]["vmid"]


# -- authentication ------------------------------------------------------------------


def test_requests_without_credentials_are_refused(client):
    response = client.get("/nodes")
    assert response.status_code == 401
    assert response.reason_phrase == "No ticket"


def test_wrong_password_is_authentication_failure(client):
    response = client.post("/access/ticket", data={"username": "root@pam", "password": "nope"})
    assert response.status_code == 401
    assert response.reason_phrase == "authentication failure"
    realm_form = client.post(
        "/access/ticket", data={"username": "root", "realm": "pam", "password": ROOT_PASSWORD}
    )
    assert realm_form.status_code == 200


def test_ticket_format_and_renewal(client, root):
    user, stamp = root.ticket.split(":")[1:3]
    assert root.ticket.startswith("PVE:root@pam:") and len(stamp) == 8 and user == "root@pam"
    renewed = client.post("/access/ticket", data={"username": "root@pam", "password": root.ticket})
    assert renewed.status_code == 200
    assert renewed.json()["data"]["ticket"].startswith("PVE:root@pam:")


def test_forged_expired_and_wrong_user_tickets_are_refused(client, root, settings):
    forged = root.ticket[:-8] + ("AAAAAAA=" if not root.ticket.endswith("AAAAAAA=") else "BBBBBBB=")
    assert client.get("/nodes", headers=cookie(forged)).status_code == 401
    swapped = root.ticket.replace("root@pam", "alice@pve")
    assert client.get("/nodes", headers=cookie(swapped)).status_code == 401

    async def authority():
        conn = await db.connect(settings.database_url)
        try:
            return TicketAuthority(await settings_repo.auth_keys(conn))
        finally:
            await conn.close()

    old = run(authority()).issue("root@pam", time.time() - 7300)
    response = client.get("/nodes", headers=cookie(old))
    assert response.status_code == 401 and "expired" in response.reason_phrase
    # An expired ticket cannot be renewed either.
    assert (
        client.post("/access/ticket", data={"username": "root@pam", "password": old}).status_code
        == 401
    )


def test_writes_with_a_ticket_need_the_matching_csrf_token(client, root, alice):
    vmid = _first_guest(root, "pve1", "qemu")
    path = f"/nodes/pve1/qemu/{vmid}/config"
    no_csrf = client.put(path, data={"description": "x"}, headers=cookie(root.ticket))
    assert no_csrf.status_code == 401
    assert no_csrf.reason_phrase == "Permission denied - invalid csrf token"
    # alice's CSRF token does not validate root's ticket.
    other = client.put(
        path,
        data={"description": "x"},
        headers={**cookie(root.ticket), "CSRFPreventionToken": alice.csrf},
    )
    assert other.status_code == 401
    # A renewal with another user's ticket is refused.
    assert (
        client.post(
            "/access/ticket", data={"username": "root@pam", "password": alice.ticket}
        ).status_code
        == 401
    )
    assert root.put(path, data={"description": "x"}).status_code == 200


# -- users, tokens, permissions --------------------------------------------------------


@pytest.fixture(scope="module")
def alice(client, root):
    """alice@pve may operate one VM (PVEVMUser on /vms/<vmid>), nothing else."""
    userid = "alice@pve"
    created = root.post(
        "/access/users", data={"userid": userid, "password": "alice-pw", "comment": "tester"}
    )
    assert created.status_code == 200, created.text
    vmid = _first_guest(root, "pve1", "qemu")
    acl = root.put(
        "/access/acl", data={"path": f"/vms/{vmid}", "users": userid, "roles": "PVEVMUser"}
    )
    assert acl.status_code == 200, acl.text
    session = Session(client, userid, "alice-pw")
    session.vmid = vmid
    return session


def test_lists_are_filtered_by_privileges(alice, root):
    visible = [g["vmid"] for g in alice.get("/nodes/pve1/qemu").json()["data"]]
    assert visible == [alice.vmid]
    assert len(root.get("/nodes/pve1/qemu").json()["data"]) >= 1
    resources = alice.get("/cluster/resources", params={"type": "vm"}).json()["data"]
    assert [r["vmid"] for r in resources] == [alice.vmid]
    forbidden = alice.get("/nodes/pve1/status")
    assert forbidden.status_code == 403
    assert forbidden.reason_phrase == "Permission check failed (/nodes/pve1, Sys.Audit)"


def test_token_privilege_separation_cannot_escalate(client, alice, root):
    created = alice.post("/access/users/alice@pve/token/ci", data={"privsep": 1})
    assert created.status_code == 200, created.text
    token = created.json()["data"]
    assert token["full-tokenid"] == "alice@pve!ci" and len(token["value"]) == 36
    # Even root granting the token Administrator on / gives it only alice's rights.
    granted = root.put(
        "/access/acl", data={"path": "/", "tokens": "alice@pve!ci", "roles": "Administrator"}
    )
    assert granted.status_code == 200
    headers = token_header("alice@pve!ci", token["value"])
    listed = client.get("/nodes/pve1/qemu", headers=headers)
    assert [g["vmid"] for g in listed.json()["data"]] == [alice.vmid]
    assert client.get("/nodes/pve1/status", headers=headers).status_code == 403
    assert (
        client.post("/access/users", headers=headers, data={"userid": "mallory@pve"}).status_code
        == 403
    )
    self_grant = client.put(
        "/access/acl",
        headers=headers,
        data={"path": "/", "users": "alice@pve", "roles": "Administrator"},
    )
    assert self_grant.status_code == 403
    mint = client.post("/access/users/alice@pve/token/more", headers=headers, data={"privsep": 0})
    assert mint.status_code == 403
    unseparate = client.put(
        "/access/users/alice@pve/token/ci", headers=headers, data={"privsep": 0}
    )
    assert unseparate.status_code == 403
    assert root.get("/access/users/alice@pve/token/ci").json()["data"]["privsep"] == 1
    create_vm = client.post("/nodes/pve1/qemu", headers=headers, data={"vmid": 4242})
    assert create_vm.status_code == 403
    # Tokens need no CSRF token for writes they are allowed to make (VM.PowerMgmt).
    vm = f"/nodes/pve1/qemu/{alice.vmid}"
    state = client.get(f"{vm}/status/current", headers=headers).json()["data"]["status"]
    allowed = client.post(
        f"{vm}/status/{'stop' if state == 'running' else 'start'}", headers=headers
    )
    assert allowed.status_code == 200, allowed.text
    upid = allowed.json()["data"]
    assert upid.endswith(":alice@pve!ci:")
    finished = root.wait(upid)
    assert finished["user"] == "alice@pve" and finished["tokenid"] == "ci"
    # A wrong secret fails, also after the right one was cached.
    assert (
        client.get("/version", headers=token_header("alice@pve!ci", str(uuid.uuid4()))).status_code
        == 401
    )
    # Deleting the token invalidates cached verifications at once.
    assert root.delete("/access/users/alice@pve/token/ci").status_code == 200
    assert client.get("/version", headers=headers).status_code == 401


def test_password_and_token_secrets_are_stored_hashed(settings):
    async def rows():
        conn = await db.connect(settings.database_url)
        try:
            return await conn.fetch(
                "SELECT password_hash FROM users UNION ALL SELECT secret_hash FROM api_tokens"
            )
        finally:
            await conn.close()

    hashes = [r[0] for r in run(rows()) if r[0]]
    assert hashes and all(h.startswith("$scrypt$") for h in hashes)


def test_log_redaction():
    line = (
        "cookie PVEAuthCookie=PVE:root@pam:65A1B2C3::c2lnbmF0dXJl; Authorization: "
        "PVEAPIToken=root@pam!sync=11111111-2222-3333-4444-555555555555 password=hunter2"
    )
    cleaned = redact(line)
    assert (
        "c2lnbmF0dXJl" not in cleaned and "555555555555" not in cleaned and "hunter2" not in cleaned
    )
    assert "root@pam!sync" in cleaned
    # Installed, the redactor scrubs records of any logger before any handler sees them.
    install_redaction("postgresql://sim:dbpw-9f3k@127.0.0.1/sim")
    try:
        stream = io.StringIO()
        logger = logging.getLogger("proxmox_simulator.tasks.worker")
        handler = logging.StreamHandler(stream)
        logger.addHandler(handler)
        logger.propagate = False
        logger.warning("login %s", "password=hunter2")
        logger.warning("pool lost: %s", "connection to dbpw-9f3k refused")
        logger.removeHandler(handler)
        logger.propagate = True
    finally:
        proxbox_redaction.uninstall()
    assert "hunter2" not in stream.getvalue() and "dbpw-9f3k" not in stream.getvalue()
    request = logging.LogRecord(
        "proxmox_simulator.api",
        logging.INFO,
        __file__,
        1,
        "GET %s",
        ("/nodes?t=PVE:a@pve:65A1B2C3::c2ln",),
        None,
    )
    request.request_id, request.route, request.status, request.identity = (
        "r1",
        "/nodes",
        200,
        "a@pve",
    )
    entry = json.loads(JsonFormatter().format(request))
    assert entry["request_id"] == "r1" and entry["route"] == "/nodes" and entry["status"] == 200
    assert "c2ln" not in entry["msg"] and entry["identity"] == "a@pve"


def test_an_unhandled_error_is_logged_with_its_type_and_redacted_traceback(
    server, root, monkeypatch, capsys
):
    """The dispatcher's last resort logs the exception, not only "request … failed"."""
    from proxmox_simulator.api import app as app_module
    from proxmox_simulator.api.logging import configure_logging

    async def broken_handler(ctx):
        raise LookupError("storage pool lost, password=sekret-pool-pw")

    monkeypatch.setattr(app_module, "semantic_handler", lambda contract, endpoint: broken_handler)
    logger = logging.getLogger("proxmox_simulator")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    install_redaction()
    configure_logging("info")  # the JSON lines `serve` writes, here on captured stderr
    try:
        response = root.get("/version")
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        proxbox_redaction.uninstall()
    assert response.status_code == 500 and response.reason_phrase == "internal error"
    request_id = response.headers["x-request-id"]
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    failure = next(e for e in entries if e["msg"] == f"request {request_id} failed")
    assert failure["level"] == "error"
    assert failure["exc"].startswith("Traceback (most recent call last):")
    assert "in broken_handler" in failure["exc"]
    assert failure["exc"].endswith("LookupError: storage pool lost, password=***")
    assert "sekret-pool-pw" not in json.dumps(entries)


# -- resources ---------------------------------------------------------------------------


def test_cluster_and_nodes(root, seeded):
    status = root.get("/cluster/status").json()["data"]
    assert status[0]["type"] == "cluster" and status[0]["name"] == "pvesim"
    assert [e["name"] for e in status if e["type"] == "node"] == ["pve1", "pve2", "pve3"]
    nodes = root.get("/nodes").json()["data"]
    assert {n["node"] for n in nodes} == {"pve1", "pve2", "pve3"}
    node = root.get("/nodes/pve2/status").json()["data"]
    assert node["cpuinfo"]["cpus"] > 0 and node["memory"]["total"] > 0
    assert root.get("/nodes/pve2/version").json()["data"]["version"] == "9.2.12"
    nextid = int(root.get("/cluster/nextid").json()["data"])
    assert root.get(f"/nodes/pve1/qemu/{nextid}/config").status_code == 500
    taken = _first_guest(root, "pve1", "qemu")
    assert root.get("/cluster/nextid", params={"vmid": taken}).status_code == 400
    resources = root.get("/cluster/resources").json()["data"]
    assert {"node", "storage", "qemu", "lxc", "pool"} <= {r["type"] for r in resources}
    pools = [r for r in resources if r["type"] == "pool"]
    assert all(r["id"] == f"pool/{r['pool']}" for r in pools)


def test_cluster_rename_through_the_admin_endpoint(client, root, server):
    admin = httpx.Client(base_url=server.base_url, verify=False)
    try:
        headers = {"CSRFPreventionToken": root.csrf, **cookie(root.ticket)}
        renamed = admin.put("/simulator/cluster", data={"name": "renamed"}, headers=headers)
        assert renamed.status_code == 200
        assert root.get("/cluster/status").json()["data"][0]["name"] == "renamed"
        assert admin.put("/simulator/cluster", data={"name": "x"}).status_code == 401
    finally:
        admin.put("/simulator/cluster", data={"name": "pvesim"}, headers=headers)
        admin.close()
    assert admin.is_closed


def test_guest_list_reflects_committed_changes_immediately(root):
    guests = root.get("/nodes/pve1/qemu").json()["data"]
    vmid = guests[-1]["vmid"]
    new_name = f"renamed-{uuid.uuid4().hex[:6]}"
    assert root.put(f"/nodes/pve1/qemu/{vmid}/config", data={"name": new_name}).status_code == 200
    # Same clock second, same node: the rendered-list cache must not serve the old name.
    after = {g["vmid"]: g for g in root.get("/nodes/pve1/qemu").json()["data"]}
    assert after[vmid]["name"] == new_name
    for entry in after.values():
        assert {"vmid", "status", "uptime", "cpus", "maxmem", "mem", "maxdisk"} <= set(entry)
        assert entry["uptime"] >= 0 and (entry["status"] == "running" or entry["uptime"] == 0)


def test_storage_content_and_volume_with_slash(root):
    storages = {s["storage"] for s in root.get("/nodes/pve1/storage").json()["data"]}
    assert {"local", "local-lvm"} <= storages
    content = root.get("/nodes/pve1/storage/local/content", params={"content": "iso"}).json()[
        "data"
    ]
    volid = content[0]["volid"]
    assert volid.startswith("local:iso/")
    info = root.get(f"/nodes/pve1/storage/local/content/{volid}").json()["data"]
    assert info["format"] == "iso" and info["size"] > 0
    images = root.get("/nodes/pve1/storage/local-lvm/content").json()["data"]
    assert all(v["content"] in ("images", "rootdir") and "vmid" in v for v in images)


def test_guest_lifecycle_with_json_bodies_snapshots_and_agent(root, unique_vmid):
    vmid = unique_vmid
    created = root.post(
        "/nodes/pve1/qemu",
        json={
            "vmid": vmid,
            "name": "api-test",
            "memory": 2048,
            "cores": 2,
            "agent": "1",
            "scsi0": "local-lvm:4",
            "net0": "virtio,bridge=vmbr0",
            "ipconfig0": "ip=10.77.0.5/24",
        },
    )
    assert created.status_code == 200, created.text
    upid = created.json()["data"]
    assert upid.startswith("UPID:pve1:") and f":qmcreate:{vmid}:root@pam:" in upid
    assert root.wait(upid)["exitstatus"] == "OK"
    duplicate = root.post("/nodes/pve1/qemu", data={"vmid": vmid})
    assert duplicate.status_code == 500 and "already exists" in duplicate.reason_phrase
    config = root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]
    assert (
        config["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0") and "size=4G" in config["scsi0"]
    )
    assert config["net0"].startswith("virtio=BC:24:11:")
    assert "lock" not in config
    stale = root.put(f"/nodes/pve1/qemu/{vmid}/config", data={"memory": 4096, "digest": "0" * 40})
    assert stale.status_code == 500 and "file changed by other user" in stale.reason_phrase
    updated = root.put(
        f"/nodes/pve1/qemu/{vmid}/config",
        data={"memory": 4096, "digest": config["digest"], "delete": "ipconfig0"},
    )
    assert updated.status_code == 200
    assert str(root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]["memory"]) == "4096"
    assert (
        root.get(f"/nodes/pve1/qemu/{vmid}/agent/network-get-interfaces").status_code == 500
    )  # stopped
    assert (
        root.wait(root.post(f"/nodes/pve1/qemu/{vmid}/status/start").json()["data"])["exitstatus"]
        == "OK"
    )
    again = root.post(f"/nodes/pve1/qemu/{vmid}/status/start")
    assert again.status_code == 500 and again.reason_phrase == f"VM {vmid} already running"
    current = root.get(f"/nodes/pve1/qemu/{vmid}/status/current").json()["data"]
    assert (
        current["status"] == "running"
        and current["qmpstatus"] == "running"
        and current["agent"] == 1
    )
    nics = root.get(f"/nodes/pve1/qemu/{vmid}/agent/network-get-interfaces").json()["data"][
        "result"
    ]
    assert [n["name"] for n in nics] == ["lo", "ens18"]
    assert (
        root.wait(root.post(f"/nodes/pve1/qemu/{vmid}/status/suspend").json()["data"])["exitstatus"]
        == "OK"
    )
    assert (
        root.get(f"/nodes/pve1/qemu/{vmid}/status/current").json()["data"]["qmpstatus"] == "paused"
    )
    assert (
        root.wait(root.post(f"/nodes/pve1/qemu/{vmid}/status/resume").json()["data"])["exitstatus"]
        == "OK"
    )
    snap = root.post(
        f"/nodes/pve1/qemu/{vmid}/snapshot", data={"snapname": "before", "description": "d"}
    )
    assert root.wait(snap.json()["data"])["exitstatus"] == "OK"
    snaps = root.get(f"/nodes/pve1/qemu/{vmid}/snapshot").json()["data"]
    as_of = root.get(f"/nodes/pve1/qemu/{vmid}/config", params={"snapshot": "before"}).json()[
        "data"
    ]
    assert as_of["description"] == "d" and str(as_of["memory"]) == "4096"
    assert [s["name"] for s in snaps] == ["before", "current"] and snaps[1]["parent"] == "before"
    root.put(f"/nodes/pve1/qemu/{vmid}/config", data={"memory": 8192})
    rollback = root.post(f"/nodes/pve1/qemu/{vmid}/snapshot/before/rollback")
    assert root.wait(rollback.json()["data"])["exitstatus"] == "OK"
    assert str(root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]["memory"]) == "4096"
    delete_snap = root.delete(f"/nodes/pve1/qemu/{vmid}/snapshot/before")
    assert root.wait(delete_snap.json()["data"])["exitstatus"] == "OK"
    # The snapshot holds no RAM state, so rolling back stopped the VM (as PVE does)
    # and it can be destroyed right away.
    status = root.get(f"/nodes/pve1/qemu/{vmid}/status/current").json()["data"]
    assert status["status"] == "stopped"
    destroy = root.delete(f"/nodes/pve1/qemu/{vmid}")
    assert destroy.status_code == 200, destroy.text
    assert root.wait(destroy.json()["data"])["exitstatus"] == "OK"
    assert root.get(f"/nodes/pve1/qemu/{vmid}/config").status_code == 500


def test_the_config_digest_covers_the_snapshot_sections(root, unique_vmid):
    """PVE's digest hashes the whole config file: describing a snapshot changes it though
    no config value changed (clients skip rereading snapshots while it stays)."""
    vmid = unique_vmid
    created = root.post("/nodes/pve1/qemu", data={"vmid": vmid, "name": "digest", "memory": 512})
    assert root.wait(created.json()["data"])["exitstatus"] == "OK"
    snap = root.post(f"/nodes/pve1/qemu/{vmid}/snapshot", data={"snapname": "s1"})
    assert root.wait(snap.json()["data"])["exitstatus"] == "OK"
    before = root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]
    described = root.put(
        f"/nodes/pve1/qemu/{vmid}/snapshot/s1/config", data={"description": "before upgrade"}
    )
    assert described.status_code == 200, described.text
    after = root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]
    assert {k: v for k, v in after.items() if k != "digest"} == {
        k: v for k, v in before.items() if k != "digest"
    }
    assert after["digest"] != before["digest"]
    current = root.get(f"/nodes/pve1/qemu/{vmid}/snapshot").json()["data"][-1]
    assert current["name"] == "current" and current["digest"] == after["digest"]
    # A write against the digest read before the snapshot changed is refused.
    stale = root.put(
        f"/nodes/pve1/qemu/{vmid}/config", data={"memory": 1024, "digest": before["digest"]}
    )
    assert stale.status_code == 500 and "file changed by other user" in stale.reason_phrase
    fresh = root.put(
        f"/nodes/pve1/qemu/{vmid}/config", data={"memory": 1024, "digest": after["digest"]}
    )
    assert fresh.status_code == 200, fresh.text


def test_lxc_interfaces_and_power(root, unique_vmid):
    vmid = unique_vmid
    upid = root.post(
        "/nodes/pve2/lxc",
        data={
            "vmid": vmid,
            "hostname": "ct-test",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "rootfs": "local-lvm:2",
            "net0": "name=eth0,bridge=vmbr0,ip=10.88.0.9/24",
            "start": 1,
        },
    ).json()["data"]
    assert ":vzcreate:" in upid and root.wait(upid)["exitstatus"] == "OK"
    interfaces = root.get(f"/nodes/pve2/lxc/{vmid}/interfaces").json()["data"]
    eth0 = next(i for i in interfaces if i["name"] == "eth0")
    assert eth0["inet"] == "10.88.0.9/24" and eth0["hwaddr"].startswith("bc:24:11")
    assert root.get(f"/nodes/pve1/lxc/{vmid}/status/current").status_code == 500  # wrong node
    assert (
        root.wait(root.post(f"/nodes/pve2/lxc/{vmid}/status/shutdown").json()["data"])["exitstatus"]
        == "OK"
    )
    assert root.get(f"/nodes/pve2/lxc/{vmid}/interfaces").status_code == 500
    assert root.wait(root.delete(f"/nodes/pve2/lxc/{vmid}").json()["data"])["exitstatus"] == "OK"


def test_task_status_fields_list_and_log_paging(root):
    vmid = _first_guest(root, "pve3", "qemu")
    current = root.get(f"/nodes/pve3/qemu/{vmid}/status/current").json()["data"]["status"]
    action = "stop" if current == "running" else "start"
    upid = root.post(f"/nodes/pve3/qemu/{vmid}/status/{action}").json()["data"]
    status = root.wait(upid)
    assert set(status) == {
        "upid",
        "node",
        "pid",
        "pstart",
        "starttime",
        "type",
        "id",
        "user",
        "status",
        "exitstatus",
    }
    log = root.get(f"/nodes/pve3/tasks/{upid}/log", params={"start": 0, "limit": 1}).json()
    assert log["total"] >= 1 and len(log["data"]) == 1 and log["data"][0]["n"] == 1
    assert (
        root.get(f"/nodes/pve3/tasks/{upid}/log", params={"start": log["total"]}).json()["data"]
        == []
    )
    # PVE reads its log with Perl numbers: positions past what storage holds are past
    # the end (an empty page and the total), a limit past it reads to the end.
    for start in (2**31, 2**63, 2**64, "9" * 5000):
        page = root.get(f"/nodes/pve3/tasks/{upid}/log", params={"start": start})
        assert page.status_code == 200, page.text
        assert page.json() == {"data": [], "total": log["total"]}
    whole = root.get(f"/nodes/pve3/tasks/{upid}/log", params={"limit": 2**63}).json()
    assert [line["n"] for line in whole["data"]] == list(range(1, log["total"] + 1))
    tasks = root.get("/nodes/pve3/tasks", params={"vmid": vmid}).json()["data"]
    assert tasks[0]["upid"] == upid and tasks[0]["status"] == "OK"
    assert root.get("/nodes/pve3/tasks", params={"vmid": vmid, "start": 2**63}).json() == {
        "data": []
    }
    unbounded = root.get("/nodes/pve3/tasks", params={"vmid": vmid, "limit": 2**64}).json()
    assert unbounded["data"][0]["upid"] == upid
    assert root.get("/nodes/pve1/tasks/" + upid + "/status").status_code == 500  # wrong node
    assert root.get("/nodes/pve3/tasks/UPID:garbage/status").status_code == 400


def test_pools(root):
    vmid = _first_guest(root, "pve1", "qemu")
    assert root.post("/pools", data={"poolid": "apitest", "comment": "c"}).status_code == 200
    assert (
        root.put(
            "/pools/apitest", data={"vms": str(vmid), "storage": "local", "allow-move": 1}
        ).status_code
        == 200
    )
    members = root.get("/pools/apitest").json()["data"]["members"]
    # Storage members are listed per node that has the storage, as PVE does.
    assert {m["id"] for m in members} == {f"qemu/{vmid}"} | {
        f"storage/{node}/local" for node in ("pve1", "pve2", "pve3")
    }
    assert root.delete("/pools/apitest").status_code == 500  # not empty
    root.put("/pools/apitest", data={"vms": str(vmid), "storage": "local", "delete": 1})
    assert root.delete("/pools/apitest").status_code == 200


def test_readiness_checks_the_latest_migration(server):
    response = httpx.get(server.base_url + "/readyz", verify=False)
    assert response.status_code == 200 and response.json()["ready"] is True


def test_disabled_users_lose_their_tickets_and_tokens(client, root):
    userid = f"carol{uuid.uuid4().hex[:6]}@pve"
    assert (
        root.post("/access/users", data={"userid": userid, "password": "carol-pw"}).status_code
        == 200
    )
    carol = Session(client, userid, "carol-pw")
    assert carol.get("/version").status_code == 200
    token = carol.post(f"/access/users/{userid}/token/t1", data={"privsep": 0}).json()["data"][
        "value"
    ]
    assert client.get("/version", headers=token_header(f"{userid}!t1", token)).status_code == 200
    assert root.put(f"/access/users/{userid}", data={"enable": 0}).status_code == 200
    assert carol.get("/version").status_code == 401
    assert client.get("/version", headers=token_header(f"{userid}!t1", token)).status_code == 401
    refused = client.post("/access/ticket", data={"username": userid, "password": "carol-pw"})
    assert refused.status_code == 401
    assert root.delete(f"/access/users/{userid}").status_code == 200


def test_methods_declaring_allowtoken_0_refuse_tokens(client, settings):
    from proxmox_simulator.cli import create_token

    secret = run(create_token(settings, "root@pam!pwchange", privsep=False, comment=""))["value"]
    response = client.put(
        "/access/password",
        headers=token_header("root@pam!pwchange", secret),
        data={"userid": "root@pam", "password": "new-password-1"},
    )
    assert response.status_code == 401
    assert "not allowed" in response.reason_phrase


def test_token_management_follows_allowtoken_and_permissions(client, settings, alice):
    """Token methods declare tokens allowed: a token may manage tokens when its
    privileges allow it; "self" is the token itself, not its owner (as in PVE)."""
    from proxmox_simulator.cli import create_token

    root_secret = run(create_token(settings, "root@pam!admin", privsep=False, comment=""))
    root_token = token_header("root@pam!admin", root_secret["value"])
    minted = client.post("/access/users/alice@pve/token/bytoken", headers=root_token)
    assert minted.status_code == 200, minted.text
    assert minted.json()["data"]["full-tokenid"] == "alice@pve!bytoken"
    alice_token = token_header("alice@pve!bytoken", minted.json()["data"]["value"])
    # alice's own token lacks User.Modify, so it cannot manage alice's tokens.
    refused = client.post("/access/users/alice@pve/token/more", headers=alice_token)
    assert refused.status_code == 403
    assert refused.reason_phrase.startswith("Permission check failed")
    assert client.get("/access/users/alice@pve/token", headers=alice_token).status_code == 403
    assert (
        client.delete("/access/users/alice@pve/token/bytoken", headers=root_token).status_code
        == 200
    )
    assert client.get("/version", headers=alice_token).status_code == 401


def test_access_another_process_changed_counts_before_its_notification_arrives(
    client, settings, root, alice
):
    """The ``token create`` CLI and API replicas write access data and tell the
    server by NOTIFY; a request that depends on the change may come first. PVE
    answers it with the change applied, so a refusal is decided again on what the
    database holds now (here: rows written without any notification): a grant, a
    token, a user logging in, a user enabled again. Permissions a handler checks
    itself still follow the notification."""
    from proxmox_simulator.domain.auth import hash_secret

    assert alice.get("/nodes/pve2/dns").status_code == 403  # the state is cached
    tokenid, secret = f"silent{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    userid = f"dave{uuid.uuid4().hex[:8]}@pve"

    async def write_silently(sql, *args):
        conn = await db.connect(settings.database_url)
        try:
            await conn.execute(sql, *args)
        finally:
            await conn.close()

    try:
        # Each check comes right after its own silent write, the other's reload before it.
        run(
            write_silently(
                "INSERT INTO acl (path, ugid_type, ugid, roleid, propagate)"
                " VALUES ('/nodes/pve2', 'user', 'alice@pve', 'PVEAuditor', true)"
            )
        )
        assert alice.get("/nodes/pve2/dns").status_code == 200
        run(
            write_silently(
                "INSERT INTO api_tokens (userid, tokenid, secret_hash, privsep, expire, comment)"
                " VALUES ('root@pam', $1, $2, false, 0, '')",
                tokenid,
                hash_secret(secret),
            )
        )
        token = token_header(f"root@pam!{tokenid}", secret)
        assert client.get("/version", headers=token).status_code == 200
        wrong = token_header(f"root@pam!{tokenid}", str(uuid.uuid4()))
        assert client.get("/version", headers=wrong).status_code == 401
        run(
            write_silently(
                "INSERT INTO users (userid, realm, password_hash) VALUES ($1, 'pve', $2)",
                userid,
                hash_secret("dave-password"),
            )
        )
        dave = Session(client, userid, "dave-password")  # a login right after the write
        assert root.put(f"/access/users/{userid}", data={"enable": 0}).status_code == 200
        assert dave.get("/version").status_code == 401
        run(write_silently("UPDATE users SET enable = true WHERE userid = $1", userid))
        assert dave.get("/version").status_code == 200  # the ticket, right after the write
    finally:
        # Through the API: the server that answers next drops its cache at once.
        assert root.delete(f"/access/users/root@pam/token/{tokenid}").status_code == 200
        revoked = root.put(
            "/access/acl",
            data={"path": "/nodes/pve2", "users": "alice@pve", "roles": "PVEAuditor", "delete": 1},
        )
        assert revoked.status_code == 200
        root.delete(f"/access/users/{userid}")
    assert alice.get("/nodes/pve2/dns").status_code == 403


def test_idempotency_key_makes_task_creation_retry_safe(root, unique_vmid):
    headers = {"Idempotency-Key": f"create-{unique_vmid}"}
    first = root.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": 512}, headers=dict(headers)
    )
    assert first.status_code == 200
    retry = root.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": 512}, headers=dict(headers)
    )
    assert retry.status_code == 200 and retry.json()["data"] == first.json()["data"]
    root.wait(first.json()["data"])
    # Without the key the same request is a new (and here failing) operation.
    assert root.post("/nodes/pve1/qemu", data={"vmid": unique_vmid}).status_code == 500
    assert (
        root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])["exitstatus"]
        == "OK"
    )


def test_node_network_and_backups(root, alice):
    bridges = root.get("/nodes/pve2/network", params={"type": "any_bridge"}).json()["data"]
    assert {b["iface"] for b in bridges} == {"vmbr0", "vmbr1"}
    vmbr0 = root.get("/nodes/pve2/network/vmbr0").json()["data"]
    assert vmbr0["cidr"] == "192.168.100.12/24" and vmbr0["bridge_ports"] == "eno1"
    assert root.get("/nodes/pve2/network/nope").status_code == 500
    assert alice.get("/nodes/pve2/network").status_code == 403
    backups = root.get("/nodes/pve1/storage/local/content", params={"content": "backup"}).json()[
        "data"
    ]
    assert backups and all(
        b["volid"].startswith("local:backup/vzdump-") and "vmid" in b for b in backups
    )


def test_pool_acls_extend_to_member_guests(client, root):
    guests = root.get("/nodes/pve2/qemu").json()["data"]
    member, outsider = guests[0]["vmid"], guests[1]["vmid"]
    pool = f"team{uuid.uuid4().hex[:6]}"
    userid = f"bob{uuid.uuid4().hex[:6]}@pve"
    assert root.post("/pools", data={"poolid": pool}).status_code == 200
    assert root.put(f"/pools/{pool}", data={"vms": str(member), "allow-move": 1}).status_code == 200
    assert (
        root.post("/access/users", data={"userid": userid, "password": "bob-password"}).status_code
        == 200
    )
    assert (
        root.put(
            "/access/acl", data={"path": f"/pool/{pool}", "users": userid, "roles": "PVEVMUser"}
        ).status_code
        == 200
    )
    bob = Session(client, userid, "bob-password")
    assert [g["vmid"] for g in bob.get("/nodes/pve2/qemu").json()["data"]] == [member]
    assert bob.get(f"/nodes/pve2/qemu/{member}/status/current").status_code == 200
    assert bob.get(f"/nodes/pve2/qemu/{outsider}/status/current").status_code == 403
    # Leaving the pool takes the access away.
    root.put(f"/pools/{pool}", data={"vms": str(member), "delete": 1})
    assert bob.get(f"/nodes/pve2/qemu/{member}/status/current").status_code == 403
    root.delete(f"/access/users/{userid}")
    root.delete(f"/pools/{pool}")


def test_concurrent_config_writes_are_serialized_not_lost(root, unique_vmid):
    from concurrent.futures import ThreadPoolExecutor

    upid = root.post("/nodes/pve3/qemu", data={"vmid": unique_vmid, "memory": 512}).json()["data"]
    root.wait(upid)
    path = f"/nodes/pve3/qemu/{unique_vmid}/config"

    def add_nic(index):
        return root.put(path, data={f"net{index}": "virtio,bridge=vmbr0"}).status_code

    writers = 16
    with ThreadPoolExecutor(max_workers=writers) as pool:
        statuses = list(pool.map(add_nic, range(writers)))
    assert statuses == [200] * writers
    config = root.get(path).json()["data"]
    assert {f"net{i}" for i in range(writers)} <= set(config)
    root.wait(root.delete(f"/nodes/pve3/qemu/{unique_vmid}").json()["data"])


def test_sizes_past_32_and_64_bits_are_kept_as_pve_keeps_them(root, unique_vmid):
    """PVE bounds `cores` and `memory` only below: a config takes any larger number and
    keeps it as written; the guest's list entry is still answered (found by `nox -s soak`'s
    fuzzing: such a write answered 500)."""
    path = f"/nodes/pve3/qemu/{unique_vmid}"
    root.wait(root.post("/nodes/pve3/qemu", data={"vmid": unique_vmid}).json()["data"])
    assert root.put(f"{path}/config", data={"cores": 2**31}).status_code == 200
    assert root.get(f"{path}/config").json()["data"]["cores"] == 2**31
    listed = {g["vmid"]: g for g in root.get("/nodes/pve3/qemu").json()["data"]}
    assert listed[unique_vmid]["cpus"] == 2**31
    huge = str(2**64)
    assert root.put(f"{path}/config", data={"cores": huge, "memory": huge}).status_code == 200
    config = root.get(f"{path}/config").json()["data"]
    assert (str(config["cores"]), str(config["memory"])) == (huge, huge)
    assert root.get(f"{path}/status/current").json()["data"]["maxmem"] >= 2**62
    root.wait(root.delete(path).json()["data"])
    # A running container takes a new memory size at once; its list entry shows the use.
    container = f"/nodes/pve1/lxc/{unique_vmid}"
    template = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    created = root.post(
        "/nodes/pve1/lxc",
        data={"vmid": unique_vmid, "ostemplate": template, "storage": "local-lvm", "rootfs": "1"},
    )
    root.wait(created.json()["data"])
    root.wait(root.post(f"{container}/status/start").json()["data"])
    assert root.put(f"{container}/config", data={"memory": huge}).status_code == 200
    listed = {g["vmid"]: g for g in root.get("/nodes/pve1/lxc").json()["data"]}
    assert listed[unique_vmid]["maxmem"] >= 2**62 and listed[unique_vmid]["mem"] > 0
    root.wait(root.post(f"{container}/status/stop").json()["data"])
    root.wait(root.delete(container).json()["data"])


def test_lxc_root_disk_defaults_and_property_string_memory(root, unique_vmid):
    upid = root.post(
        "/nodes/pve1/lxc",
        data={
            "vmid": unique_vmid,
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "storage": "local-lvm",
            "rootfs": "3",
        },
    ).json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    config = root.get(f"/nodes/pve1/lxc/{unique_vmid}/config").json()["data"]
    assert (
        config["rootfs"].startswith(f"local-lvm:vm-{unique_vmid}-disk-0")
        and "size=3G" in config["rootfs"]
    )
    assert config["hostname"] == f"CT{unique_vmid}"
    root.wait(root.delete(f"/nodes/pve1/lxc/{unique_vmid}").json()["data"])
    qemu = root.post(
        "/nodes/pve1/qemu", data={"vmid": unique_vmid, "memory": "current=3072"}
    ).json()["data"]
    assert root.wait(qemu)["exitstatus"] == "OK"
    current = root.get(f"/nodes/pve1/qemu/{unique_vmid}/status/current").json()["data"]
    assert current["maxmem"] == 3072 * 1024 * 1024
    root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])


def test_migrate_clone_and_template(root, unique_vmid):
    vmid, copy = unique_vmid, unique_vmid + 1
    created = root.post(
        "/nodes/pve1/qemu",
        data={"vmid": vmid, "name": "mover", "scsi0": "local-lvm:2", "net0": "virtio,bridge=vmbr0"},
    ).json()["data"]
    assert root.wait(created)["exitstatus"] == "OK"
    assert (
        root.post(f"/nodes/pve1/qemu/{vmid}/migrate", data={"target": "pve1"}).reason_phrase
        == "target is local node."
    )
    root.wait(root.post(f"/nodes/pve1/qemu/{vmid}/status/start").json()["data"])
    offline = root.post(f"/nodes/pve1/qemu/{vmid}/migrate", data={"target": "pve2"})
    assert offline.status_code == 500 and "without --online" in offline.reason_phrase
    moved = root.post(
        f"/nodes/pve1/qemu/{vmid}/migrate", data={"target": "pve2", "online": 1}
    ).json()["data"]
    assert ":qmigrate:" in moved and root.wait(moved)["exitstatus"] == "OK"
    assert root.get(f"/nodes/pve1/qemu/{vmid}/config").status_code == 500
    assert root.get(f"/nodes/pve2/qemu/{vmid}/status/current").json()["data"]["status"] == "running"
    local = root.get("/nodes/pve2/storage/local-lvm/content", params={"vmid": vmid}).json()["data"]
    assert [v["volid"] for v in local] == [f"local-lvm:vm-{vmid}-disk-0"]

    cloned = root.post(
        f"/nodes/pve2/qemu/{vmid}/clone", data={"newid": copy, "name": "copy", "full": 1}
    ).json()["data"]
    assert ":qmclone:" in cloned and root.wait(cloned)["exitstatus"] == "OK"
    original = root.get(f"/nodes/pve2/qemu/{vmid}/config").json()["data"]
    duplicate = root.get(f"/nodes/pve2/qemu/{copy}/config").json()["data"]
    assert duplicate["name"] == "copy" and duplicate["scsi0"].startswith(
        f"local-lvm:vm-{copy}-disk-0"
    )
    assert duplicate["net0"] != original["net0"] and duplicate["net0"].startswith(
        "virtio=BC:24:11:"
    )
    taken = root.post(f"/nodes/pve2/qemu/{vmid}/clone", data={"newid": copy})
    assert taken.status_code == 500 and "already exists" in taken.reason_phrase

    running = root.post(f"/nodes/pve2/qemu/{vmid}/template")
    assert running.status_code == 500 and "running" in running.reason_phrase
    templated = root.post(f"/nodes/pve2/qemu/{copy}/template").json()["data"]
    assert root.wait(templated)["exitstatus"] == "OK"
    listed = {g["vmid"]: g for g in root.get("/nodes/pve2/qemu").json()["data"]}
    assert listed[copy]["template"] == 1 and "template" not in listed[vmid]

    root.wait(root.post(f"/nodes/pve2/qemu/{vmid}/status/stop").json()["data"])
    for guest in (vmid, copy):
        assert (
            root.wait(root.delete(f"/nodes/pve2/qemu/{guest}").json()["data"])["exitstatus"] == "OK"
        )


def test_lxc_migrate_clone_and_template(root, unique_vmid):
    vmid, copy = unique_vmid, unique_vmid + 1
    template = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    upid = root.post(
        "/nodes/pve3/lxc",
        data={
            "vmid": vmid,
            "ostemplate": template,
            "rootfs": "local-lvm:2",
            "start": 1,
            "net0": "name=eth0,bridge=vmbr0,ip=10.99.0.5/24",
        },
    ).json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    refused = root.post(f"/nodes/pve3/lxc/{vmid}/migrate", data={"target": "pve1"})
    assert refused.status_code == 500 and "restart" in refused.reason_phrase
    moved = root.post(
        f"/nodes/pve3/lxc/{vmid}/migrate", data={"target": "pve1", "restart": 1}
    ).json()["data"]
    assert ":vzmigrate:" in moved and root.wait(moved)["exitstatus"] == "OK"
    cloned = root.post(
        f"/nodes/pve1/lxc/{vmid}/clone", data={"newid": copy, "hostname": "ct-copy"}
    ).json()["data"]
    assert ":vzclone:" in cloned and root.wait(cloned)["exitstatus"] == "OK"
    duplicate = root.get(f"/nodes/pve1/lxc/{copy}/config").json()["data"]
    assert duplicate["hostname"] == "ct-copy" and duplicate["rootfs"].startswith(
        f"local-lvm:vm-{copy}-disk-0"
    )
    assert "hwaddr=BC:24:11" in duplicate["net0"] and "ip=10.99.0.5/24" in duplicate["net0"]
    # Containers are converted synchronously: the method returns null.
    converted = root.post(f"/nodes/pve1/lxc/{copy}/template")
    assert converted.status_code == 200 and converted.json()["data"] is None
    assert root.get(f"/nodes/pve1/lxc/{copy}/status/current").json()["data"]["template"] == 1
    root.wait(root.post(f"/nodes/pve1/lxc/{vmid}/status/stop").json()["data"])
    for guest in (vmid, copy):
        assert (
            root.wait(root.delete(f"/nodes/pve1/lxc/{guest}").json()["data"])["exitstatus"] == "OK"
        )


def test_disk_resize_and_pending(root, unique_vmid):
    vmid = unique_vmid
    root.wait(
        root.post(
            "/nodes/pve1/qemu", data={"vmid": vmid, "scsi0": "local-lvm:2,iothread=1"}
        ).json()["data"]
    )
    shrink = root.put(f"/nodes/pve1/qemu/{vmid}/resize", data={"disk": "scsi0", "size": "1G"})
    assert shrink.status_code == 500 and "shrinking" in shrink.reason_phrase
    assert (
        root.put(
            f"/nodes/pve1/qemu/{vmid}/resize", data={"disk": "scsi9", "size": "+1G"}
        ).status_code
        == 500
    )
    grow = root.put(
        f"/nodes/pve1/qemu/{vmid}/resize", data={"disk": "scsi0", "size": "+3G"}
    ).json()["data"]
    assert ":resize:" in grow and root.wait(grow)["exitstatus"] == "OK"
    config = root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]
    assert "size=5G" in config["scsi0"] and "iothread=1" in config["scsi0"]
    volume = root.get("/nodes/pve1/storage/local-lvm/content", params={"vmid": vmid}).json()[
        "data"
    ][0]
    assert volume["size"] == 5 * 1024**3
    pending = {
        e["key"]: e["value"] for e in root.get(f"/nodes/pve1/qemu/{vmid}/pending").json()["data"]
    }
    assert pending["scsi0"] == config["scsi0"]
    root.wait(root.delete(f"/nodes/pve1/qemu/{vmid}").json()["data"])


def test_guest_agent_answers_follow_the_config(root, unique_vmid):
    vmid = unique_vmid
    created = root.post(
        "/nodes/pve2/qemu",
        data={
            "vmid": vmid,
            "name": "win-agent",
            "ostype": "win11",
            "agent": "enabled=1",
            "start": 1,
        },
    ).json()["data"]
    assert root.wait(created)["exitstatus"] == "OK"
    base = f"/nodes/pve2/qemu/{vmid}/agent"
    assert root.get(f"{base}/get-osinfo").json()["data"]["result"]["id"] == "mswindows"
    assert root.get(f"{base}/get-host-name").json()["data"]["result"] == {"host-name": "win-agent"}
    assert root.post(f"{base}/ping").json()["data"] == {"result": {}}
    commands = {
        c["name"] for c in root.get(f"{base}/info").json()["data"]["result"]["supported_commands"]
    }
    assert "guest-network-get-interfaces" in commands
    root.wait(root.post(f"/nodes/pve2/qemu/{vmid}/status/stop").json()["data"])
    stopped = root.get(f"{base}/get-osinfo")
    assert stopped.status_code == 500 and stopped.reason_phrase == f"VM {vmid} is not running"
    root.wait(root.delete(f"/nodes/pve2/qemu/{vmid}").json()["data"])


def test_guest_agent_calls_are_refused_as_pve_refuses_them(root, unique_vmid):
    """qemu-server's order: no `agent` option at all; the VM not running; then an agent
    that does not answer (disabled, so no agent device, or the VM paused)."""
    vmid = unique_vmid
    base = f"/nodes/pve2/qemu/{vmid}/agent"
    created = root.post(
        "/nodes/pve2/qemu",
        data={"vmid": vmid, "name": "quiet-agent", "net0": "virtio,bridge=vmbr0", "start": 1},
    ).json()["data"]
    assert root.wait(created)["exitstatus"] == "OK"
    unset = root.get(f"{base}/get-host-name")
    assert unset.status_code == 500 and unset.reason_phrase == "No QEMU guest agent configured"
    assert root.put(f"/nodes/pve2/qemu/{vmid}/config", data={"agent": "0"}).status_code == 200
    disabled = root.get(f"{base}/network-get-interfaces")
    assert disabled.status_code == 500
    assert disabled.reason_phrase == "QEMU guest agent is not running"
    assert root.put(f"/nodes/pve2/qemu/{vmid}/config", data={"agent": "1"}).status_code == 200
    mac = root.get(f"/nodes/pve2/qemu/{vmid}/config").json()["data"]["net0"].split(",")[0]
    nics = root.get(f"{base}/network-get-interfaces").json()["data"]["result"]
    assert [(n["name"], n["hardware-address"]) for n in nics[1:]] == [
        ("ens18", mac.split("=")[1].lower())
    ]
    assert root.get(f"{base}/get-host-name").json()["data"] == {
        "result": {"host-name": "quiet-agent"}
    }
    assert (
        root.wait(root.post(f"/nodes/pve2/qemu/{vmid}/status/suspend").json()["data"])["exitstatus"]
        == "OK"
    )
    paused = root.get(f"{base}/get-host-name")
    assert paused.status_code == 500 and paused.reason_phrase == "QEMU guest agent is not running"
    root.wait(root.post(f"/nodes/pve2/qemu/{vmid}/status/stop").json()["data"])
    stopped = root.get(f"{base}/get-host-name")
    assert stopped.status_code == 500 and stopped.reason_phrase == f"VM {vmid} is not running"
    root.wait(root.delete(f"/nodes/pve2/qemu/{vmid}").json()["data"])


def test_groups_roles_domains_and_permissions(client, root, alice):
    suffix = uuid.uuid4().hex[:6]
    group, role = f"ops{suffix}", f"Restarter{suffix}"
    assert (
        root.post("/access/groups", data={"groupid": group, "comment": "operators"}).status_code
        == 200
    )
    assert root.post("/access/groups", data={"groupid": group}).status_code == 500  # duplicate
    assert (
        root.post(
            "/access/roles", data={"roleid": role, "privs": "VM.Audit,VM.PowerMgmt"}
        ).status_code
        == 200
    )
    bogus = root.post("/access/roles", data={"roleid": f"x{suffix}", "privs": "VM.Fly"})
    assert bogus.status_code == 400 and "VM.Fly" in bogus.json()["errors"]["privs"]
    assert root.get(f"/access/roles/{role}").json()["data"] == {"VM.Audit": 1, "VM.PowerMgmt": 1}
    assert (
        root.put(f"/access/roles/{role}", data={"privs": "VM.Console", "append": 1}).status_code
        == 200
    )
    assert set(root.get(f"/access/roles/{role}").json()["data"]) == {
        "VM.Audit",
        "VM.PowerMgmt",
        "VM.Console",
    }
    assert (
        root.put("/access/roles/Administrator", data={"privs": "VM.Audit"}).status_code == 500
    )  # built-in
    assert root.put("/access/users/alice@pve", data={"groups": group}).status_code == 200
    assert root.get(f"/access/groups/{group}").json()["data"]["members"] == ["alice@pve"]
    assert (
        root.put("/access/acl", data={"path": "/vms", "groups": group, "roles": role}).status_code
        == 200
    )
    perms = alice.get("/access/permissions", params={"path": "/vms/123456"}).json()["data"]
    assert set(perms["/vms/123456"]) == {"VM.Audit", "VM.PowerMgmt", "VM.Console"}
    # Only with Sys.Audit on /access may one look at somebody else's permissions.
    assert alice.get("/access/permissions", params={"userid": "root@pam"}).status_code == 403
    realms = {d["realm"]: d for d in client.get("/access/domains").json()["data"]}  # world-readable
    assert realms["pam"]["type"] == "pam" and realms["pve"]["type"] == "pve"
    root.put("/access/acl", data={"path": "/vms", "groups": group, "roles": role, "delete": 1})
    assert root.delete(f"/access/groups/{group}").status_code == 200
    assert root.delete(f"/access/roles/{role}").status_code == 200
    assert root.get("/access/users/alice@pve").json()["data"]["groups"] == []  # membership cascaded
