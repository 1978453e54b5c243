"""Several endpoints: clusters that share a name, a token without permissions, a
standalone node, a partial failure; and the two adapters (CLI, HTTP service).

The tests run in file order and build on each other.
"""

import json
import time

import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    change_marker,
    create_endpoint,
    create_site,
    expected_inventory,
    netbox_inventory,
    object_changes_since,
    run_cli,
    run_sync,
)

second_simulator = fixtures.second_simulator
third_simulator = fixtures.third_simulator


VIEW_ONLY_TYPES = [
    "netbox_proxbox.proxmoxendpoint", "netbox_proxbox.proxmoxcluster",
    "netbox_proxbox.proxboxclustersyncstate", "virtualization.cluster",
    "virtualization.clustertype", "virtualization.virtualmachine", "dcim.device",
    "dcim.devicerole", "dcim.devicetype", "dcim.manufacturer", "dcim.site",
    "extras.customfield", "extras.tag",
]  # fmt: skip


@pytest.fixture(scope="module")
def shared_site(netbox_server):
    return create_site(netbox_server, "pbsync-shared")


@pytest.fixture(scope="module")
def owner(netbox_server, second_simulator, shared_site):
    """Endpoint X owns the native cluster `pvesim` in the shared site."""
    endpoint = create_endpoint(netbox_server, "pve-owner", second_simulator, site=shared_site)
    report = run_sync(netbox_server, second_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.cluster["name"] == "pvesim" and report.cluster["created"]
    return endpoint, report


def test_shared_cluster_name_is_an_actionable_conflict(
    netbox_server, third_simulator, shared_site, owner
):
    _, owner_report = owner
    other = create_endpoint(netbox_server, "pve-other", third_simulator, site=shared_site)
    since = change_marker(netbox_server)
    report = run_sync(netbox_server, third_simulator, other["id"])

    assert not report.ok and "409" in report.error
    assert "pvesim" in report.error and "never establishes ownership" in report.error
    assert report.tally.of("virtualization.cluster").failed == 1
    assert report.tally.writes == 0
    with netbox_server.api() as api:
        stored = api.get(f"/plugins/proxbox/endpoints/proxmox/{other['id']}/").json()
        tracking = api.get("/plugins/proxbox/clusters/", params={"endpoint_id": other["id"]}).json()
        owned = api.get(f"/virtualization/clusters/{owner_report.cluster['id']}/").json()
    assert stored["netbox_cluster"] is None and tracking["count"] == 0
    assert owned["name"] == "pvesim"
    assert object_changes_since(netbox_server, since) == []


@pytest.fixture(scope="module")
def view_only_token(netbox_server):
    with netbox_server.api() as api:
        user = api.post(
            "/users/users/", json={"username": "pbsync-viewer", "password": "Pbsync-Viewer-Pass-1"}
        )
        assert user.status_code == 201, user.text
        permission = api.post(
            "/users/permissions/",
            json={
                "name": "pbsync view only",
                "object_types": VIEW_ONLY_TYPES,
                "actions": ["view"],
                "users": [user.json()["id"]],
            },
        )
        assert permission.status_code == 201, permission.text
    return netbox_server.provision_token("pbsync-viewer", "Pbsync-Viewer-Pass-1")


def test_token_without_permissions_is_refused_and_writes_nothing(
    netbox_server, second_simulator, owner, view_only_token
):
    endpoint, _ = owner
    since = change_marker(netbox_server)
    report = run_sync(netbox_server, second_simulator, endpoint["id"], token=view_only_token)
    assert not report.ok and "403" in report.error
    assert report.tally.writes == 0
    assert object_changes_since(netbox_server, since) == []


@pytest.fixture(scope="module")
def standalone(netbox_server, third_simulator):
    third_simulator.rename(None)
    site = create_site(netbox_server, "pbsync-edge")
    endpoint = create_endpoint(
        netbox_server, "pve-edge", third_simulator, site=site, mode="standalone"
    )
    return endpoint


def test_standalone_node_with_a_partial_failure(netbox_server, third_simulator, standalone):
    expected = expected_inventory(third_simulator.inventory())
    blocked = sorted(expected["ips"])[0][2]
    with netbox_server.api() as api:
        # Someone already recorded one guest's address: NetBox's global uniqueness refuses it.
        blocker = api.post("/ipam/ip-addresses/", json={"address": blocked})
        assert blocker.status_code == 201, blocker.text

    report = run_sync(netbox_server, third_simulator, standalone["id"])
    assert report.cluster["mode"] == "standalone" and report.cluster["name"] == "pve1"
    assert report.cluster["claim_status"] == 201
    assert not report.ok and report.error is None
    (failure,) = report.tally.failures
    assert failure.object_type == "ipam.ipaddress" and blocked in failure.label
    assert "Duplicate IP address" in failure.reason
    actual = netbox_inventory(netbox_server, report.cluster["id"])
    for part in ("nodes", "vms", "interfaces", "disks"):
        assert actual[part] == expected[part], part
    assert actual["ips"] == {ip for ip in expected["ips"] if ip[2] != blocked}
    with netbox_server.api() as api:
        sidecar = api.get(
            "/plugins/proxbox/cluster-sync-states/", params={"cluster_id": report.cluster["id"]}
        ).json()["results"][0]
        # The run went to its end with one write refused: degraded, not failed.
        assert sidecar["status"]["value"] == "degraded" and sidecar["errors"] == 1
        assert "0 Proxmox read(s) failed, 1 NetBox write(s) failed" in sidecar["message"]
        assert blocked in sidecar["message"]
        assert api.delete(f"/ipam/ip-addresses/{blocker.json()['id']}/").status_code == 204

    again = run_sync(netbox_server, third_simulator, standalone["id"])
    assert again.ok, (again.error, again.as_dict())
    # The address, then its VM's empty primary slot: two writes, nothing else.
    assert again.tally.of("ipam.ipaddress").created == 1
    assert again.tally.of("virtualization.virtualmachine").updated == 1
    assert again.tally.writes == 2
    after = netbox_inventory(netbox_server, report.cluster["id"])
    assert after["ips"] == expected["ips"]
    (owner_name,) = {ip[0] for ip in expected["ips"] if ip[2] == blocked}
    (vm,) = [vm for vm in after["raw_vms"] if vm["name"] == owner_name]
    family = 6 if ":" in blocked else 4
    assert vm[f"primary_ip{family}"]["address"] == blocked


def test_cli_json_and_exit_status(netbox_server, third_simulator, standalone, view_only_token):
    result = run_cli(netbox_server, third_simulator, "run", "--endpoint", "pve-edge", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["inventory_writes"] == 0
    assert report["cluster"]["claim_status"] == 200
    # Secrets never reach the output.
    assert third_simulator.token_secret not in result.stdout + result.stderr
    assert netbox_server.admin_token not in result.stdout + result.stderr

    refused = run_cli(
        netbox_server,
        third_simulator,
        "run",
        "--endpoint",
        str(standalone["id"]),
        token=view_only_token,
    )
    assert refused.returncode == 1
    assert "403" in refused.stdout and view_only_token not in refused.stdout + refused.stderr


def test_ticket_login_instead_of_a_token(netbox_server, third_simulator, standalone):
    result = run_cli(
        netbox_server,
        third_simulator,
        "run",
        "--endpoint",
        "pve-edge",
        "--json",
        PROXBOX_PROXMOX_USER="root@pam",
        PROXBOX_PROXMOX_PASSWORD="proxmox",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["inventory_writes"] == 0
    # one POST for the ticket, reads otherwise
    assert report["proxmox_requests"]["by_method"].get("POST") == 1, report


def test_http_service_runs_a_sync_and_streams_progress(netbox_server, third_simulator, standalone):
    from fastapi.testclient import TestClient

    from proxbox_backend.api import create_app

    settings = fixtures.settings_for(netbox_server, third_simulator)
    with TestClient(create_app(settings, api_token="pbsync-service-token")) as client:
        assert client.post(f"/sync/{standalone['id']}").status_code == 401
        auth = {"Authorization": "Bearer pbsync-service-token"}
        started = client.post(f"/sync/{standalone['id']}", headers=auth)
        assert started.status_code == 202
        run_id = started.json()["run_id"]
        with client.stream("GET", f"/runs/{run_id}/events", headers=auth) as stream:
            events = [
                json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")
            ]
        deadline = time.monotonic() + 60
        while (run := client.get(f"/runs/{run_id}", headers=auth).json())["state"] != "finished":
            assert time.monotonic() < deadline
            time.sleep(0.2)
    stages = [(e["stage"], e["state"]) for e in events if e["event"] == "stage"]
    for stage in ("cluster", "nodes", "guests", "interfaces", "ips", "disks"):
        assert (stage, "started") in stages and (stage, "finished") in stages
    assert events[-1]["event"] == "finished" and events[-1]["report"]["ok"]
    assert run["report"]["ok"] and run["report"]["inventory_writes"] == 0


# Last in the file: it grants the backend user `reveal_credentials`.
def test_credentials_come_from_the_plugin(netbox_server, second_simulator, owner):
    endpoint, _ = owner
    with netbox_server.api() as api:
        admin = api.get("/users/users/", params={"username": "admin"}).json()["results"][0]
        # Not implied by superuser status: the backend's user gets the action explicitly.
        granted = api.post(
            "/users/permissions/",
            json={
                "name": "pbsync reveal credentials",
                "actions": ["reveal_credentials"],
                "object_types": ["netbox_proxbox.proxmoxendpoint"],
                "users": [admin["id"]],
            },
        )
        assert granted.status_code == 201, granted.text
    # No fallback configured: the token must come from the endpoint record.
    report = run_sync(
        netbox_server, second_simulator, endpoint["id"], proxmox_token=None, proxmox_token_id=None
    )
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.writes == 0
