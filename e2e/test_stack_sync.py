"""`proxbox up` with the demo: the simulator and the sync backend run under the
supervisor, the demo endpoint is registered and synced once, NetBox's "Sync now"
reaches the backend, and `proxbox down` stops them all; a rival stack beside it keeps
to Redis databases of its own and, its supervisor killed, is cleaned up by the next `up`.

It runs on the session's shared stack (conftest.py), after test_stack.py; starting a
stack of its own would cost a `proxbox up` (minutes on CI)."""

from __future__ import annotations

import json
import os
import signal
import ssl

import httpx
import pytest
from proxbox_processes import wait_until
from stack_support import processes_using

from proxbox_backend.permissions import required_permissions

ENDPOINTS = "/api/plugins/proxbox/endpoints/proxmox/"


@pytest.fixture(scope="module")
def rival(start_stack):
    """Another stack on the same PostgreSQL and Redis servers, running meanwhile.

    NetBox's queue names are fixed, so without a Redis database pair of each
    stack's own, the rival's RQ workers would take the demo stack's jobs. Its workers
    are what matters: no demo of its own (simulator, backend, first sync).
    """
    rival = start_stack("rival", "--no-demo")
    yield rival
    rival.stop()


def _pve(stack) -> httpx.Client:
    demo = json.loads((stack.home / "simulator" / "demo.json").read_text())
    state = json.loads((stack.home / "stack.json").read_text())
    return httpx.Client(
        base_url=state["urls"]["proxmox simulator"],
        headers={"Authorization": f"PVEAPIToken={demo['token_id']}={demo['token_secret']}"},
        verify=ssl.create_default_context(cafile=stack.home / "simulator" / "tls" / "pve-ssl.pem"),
        timeout=30,
    )


def _demo_endpoint(stack) -> dict:
    with stack.client() as client:
        results = client.get(ENDPOINTS, params={"name": "demo-pve"}).json()["results"]
    assert len(results) == 1, results
    return results[0]


def test_up_prints_where_to_look(stack):
    endpoint = _demo_endpoint(stack)
    cluster = endpoint["netbox_cluster"]["id"]
    assert f"{stack.url}/plugins/proxbox/endpoints/{endpoint['id']}/" in stack.up_output
    assert f"{stack.url}/virtualization/clusters/{cluster}/" in stack.up_output
    assert f"{stack.url}/virtualization/virtual-machines/?cluster_id={cluster}" in stack.up_output


def test_demo_endpoint_is_linked_to_its_synced_cluster(stack):
    endpoint = _demo_endpoint(stack)
    assert endpoint["verify_tls"] is True
    assert endpoint["site"]["slug"] == "proxbox-demo"
    cluster = endpoint["netbox_cluster"]
    assert cluster is not None
    with _pve(stack) as pve:
        guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
    with stack.client() as client:
        vms = client.get(
            "/api/virtualization/virtual-machines/",
            params={"cluster_id": cluster["id"], "limit": 1000},
        ).json()["results"]
    assert guests
    assert {vm["name"] for vm in vms} == {guest["name"] for guest in guests}


def test_demo_tags_and_node_interfaces_reach_netbox(stack):
    """The backend's own (restricted) user may write what the sync's breadth needs."""
    cluster = _demo_endpoint(stack)["netbox_cluster"]["id"]
    with _pve(stack) as pve:
        guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
    with stack.client() as client:
        vms = client.get(
            "/api/virtualization/virtual-machines/",
            params={"cluster_id": cluster, "limit": 1000},
        ).json()["results"]
        devices = client.get("/api/dcim/devices/", params={"cluster_id": cluster}).json()
        interfaces = client.get(
            "/api/dcim/interfaces/", params={"device_id": devices["results"][0]["id"]}
        ).json()
    proxmox_tags = {t for g in guests for t in (g.get("tags") or "").split(";") if t}
    netbox_tags = {t["slug"] for vm in vms for t in vm["tags"]}
    assert proxmox_tags, "the demo guests carry Proxmox tags"
    assert {"proxbox"} | {f"pve-{t}" for t in proxmox_tags} <= netbox_tags
    assert all(vm["platform"] for vm in vms)
    assert interfaces["count"] > 0


def _netbox_all(client: httpx.Client, path: str, **params) -> list[dict]:
    response = client.get(path, params={"limit": 1000, **params})
    assert response.status_code == 200, (path, response.text)
    return response.json()["results"]


def test_demo_breadth_reaches_netbox(stack):
    """Each kind of object the demo cluster seeds is in NetBox after `proxbox up`, as
    Proxmox reports it: VLANs of tagged NICs, node addresses with a primary, storages,
    backups, snapshots, replication and HA; a stopped VM keeps its configured address."""
    cluster = _demo_endpoint(stack)["netbox_cluster"]["id"]
    with _pve(stack) as pve:
        guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
        nodes = [n["node"] for n in pve.get("/nodes").json()["data"]]
        configs = {
            g["name"]: pve.get(f"/nodes/{g['node']}/{g['type']}/{g['vmid']}/config").json()["data"]
            for g in guests
        }
        snapshots = {
            (g["name"], s["name"])
            for g in guests
            for s in pve.get(f"/nodes/{g['node']}/{g['type']}/{g['vmid']}/snapshot").json()["data"]
            if s["name"] != "current"
        }
        node_cidrs = {
            (node, entry["iface"], entry["cidr"])
            for node in nodes
            for entry in pve.get(f"/nodes/{node}/network").json()["data"]
            if entry.get("cidr")
        }
        storages = {s["storage"] for s in pve.get("/storage").json()["data"]}
        backups = {
            item["volid"]
            for node in nodes
            for item in pve.get(
                f"/nodes/{node}/storage/local/content", params={"content": "backup"}
            ).json()["data"]
        }
        replication = {j["id"] for j in pve.get("/cluster/replication").json()["data"]}
        ha_resources = {r["sid"] for r in pve.get("/cluster/ha/resources").json()["data"]}
    vlan_of = {
        name: int(option.split("=", 1)[1])
        for name, config in configs.items()
        for option in config["net0"].split(",")
        if option.startswith("tag=")
    }
    vlan_tags = set(vlan_of.values())
    assert vlan_tags and snapshots and replication and ha_resources and backups

    def records(kind: str) -> list[dict]:
        return _netbox_all(client, f"/api/plugins/proxbox/inventory/{kind}/", cluster_id=cluster)

    with stack.client() as client:
        vlans = _netbox_all(client, "/api/ipam/vlans/", group=f"proxbox-cluster-{cluster}")
        vm_interfaces = _netbox_all(client, "/api/virtualization/interfaces/", cluster_id=cluster)
        devices = _netbox_all(client, "/api/dcim/devices/", cluster_id=cluster)
        device_ips = _netbox_all(
            client, "/api/ipam/ip-addresses/", device_id=[d["id"] for d in devices]
        )
        vms = _netbox_all(client, "/api/virtualization/virtual-machines/", cluster_id=cluster)
        netbox_storages = {s["name"] for s in records("storages")}
        netbox_backups = {b["volume"] for b in records("backups")}
        netbox_snapshots = {(s["virtual_machine"]["name"], s["name"]) for s in records("snapshots")}
        netbox_replication = {j["job_id"] for j in records("replication-jobs")}
        netbox_ha = {r["sid"] for r in records("ha-resources")}
    assert {v["vid"] for v in vlans} == vlan_tags
    tagged = {
        i["virtual_machine"]["name"]: i["untagged_vlan"]["vid"]
        for i in vm_interfaces
        if i["untagged_vlan"]
    }
    assert tagged == vlan_of
    on_nodes = {
        (ip["assigned_object"]["device"]["name"], ip["assigned_object"]["name"], ip["address"])
        for ip in device_ips
    }
    assert node_cidrs and on_nodes == node_cidrs
    assert all(d["primary_ip4"] for d in devices), [d["name"] for d in devices]
    assert netbox_storages == storages
    assert netbox_backups == backups
    assert netbox_snapshots == snapshots
    assert netbox_replication == replication and netbox_ha == ha_resources
    stopped = {g["name"] for g in guests if g["status"] == "stopped" and g["type"] == "qemu"}
    assert stopped, "the demo has a stopped VM"
    assert all(vm["primary_ip4"] for vm in vms if vm["name"] in stopped)


def test_first_sync_is_a_netbox_job_listed_on_the_endpoint(stack):
    endpoint = _demo_endpoint(stack)
    with stack.client() as client:
        jobs = client.get(
            "/api/core/jobs/",
            params={
                "object_type": "netbox_proxbox.proxmoxendpoint",
                "object_id": endpoint["id"],
                "name": "Proxbox sync",
            },
        ).json()["results"]
        tracking = client.get(
            "/api/plugins/proxbox/clusters/", params={"endpoint_id": endpoint["id"]}
        ).json()["results"]
    # `proxbox up` synced once, through the same Job an operator's "Sync now" starts.
    assert len(jobs) >= 1, jobs
    first = min(jobs, key=lambda job: job["id"])
    assert first["status"]["value"] == "completed", (first.get("error"), first.get("data"))
    counters = first["data"]["report"]["counters"]
    assert counters["virtualization.virtualmachine"]["created"] > 0
    assert len(tracking) == 1 and tracking[0]["last_seen"] is not None


def test_backend_user_holds_only_its_grants(stack):
    backend = json.loads((stack.home / "backend-credentials.json").read_text())
    assert (stack.home / "backend-credentials.json").stat().st_mode & 0o777 == 0o600
    assert (stack.home / "secrets.json").stat().st_mode & 0o777 == 0o600
    headers = {"Authorization": f"Bearer {backend['token']}", "Accept": "application/json"}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as client:
        endpoint = _demo_endpoint(stack)
        revealed = client.get(f"{ENDPOINTS}{endpoint['id']}/credentials/")
        users = client.get("/api/users/users/")
        racks = client.get("/api/dcim/racks/")
        # Incremental runs read the change log.
        changes = client.get("/api/core/object-changes/", params={"limit": 1})
    assert revealed.status_code == 200
    assert changes.status_code == 200, changes.text
    assert revealed.json()["token_id"] == endpoint["token_id"]
    # Not a superuser: nothing outside its grants.
    assert users.status_code == 403
    assert racks.status_code == 403
    # Its grants are exactly what `proxbox-sync permissions` lists.
    with stack.client() as admin:
        (user,) = admin.get("/api/users/users/", params={"username": "proxbox-backend"}).json()[
            "results"
        ]
        grants = admin.get("/api/users/permissions/", params={"user_id": user["id"]}).json()
    held: dict[str, set[str]] = {}
    for grant in grants["results"]:
        assert grant["enabled"] and grant["constraints"] is None, grant
        for object_type in grant["object_types"]:
            held.setdefault(object_type, set()).update(grant["actions"])
    assert held == {t: set(actions) for t, actions in required_permissions().items()}


def test_stacks_sharing_a_redis_server_use_databases_of_their_own(stack, rival):
    assert stack.env["PROXBOX_REDIS_URL"] == rival.env["PROXBOX_REDIS_URL"]
    ours, theirs = stack.redis_databases(), rival.redis_databases()
    assert len(set(ours)) == 2 and not set(ours) & set(theirs) and not {0, 1} & set(ours)
    status = stack.proxbox("status")
    assert f"database {ours[0]} tasks, {ours[1]} caching" in status.stdout


def test_sync_now_reaches_the_backend(stack, rival):
    # Workers that must not take our job (Sync now goes to the sync queue's).
    rivals = rival.recorded_processes()["rqworkers"].process()
    assert rivals is not None and len(rivals.children()) == 2
    endpoint = _demo_endpoint(stack)
    with stack.client() as client:
        job = client.post(f"{ENDPOINTS}{endpoint['id']}/sync/")
        assert job.status_code in (200, 201, 202), job.text

        def finished() -> bool:
            status = client.get(f"/api/core/jobs/{job.json()['id']}/").json()["status"]["value"]
            return status in ("completed", "errored", "failed")

        wait_until(finished, 120, "the first sync Job to finish", interval=0.5)
        done = client.get(f"/api/core/jobs/{job.json()['id']}/").json()
    assert done["status"]["value"] == "completed", (
        done.get("error"),
        done.get("data"),
        done.get("log_entries"),
    )
    assert "POST /sync/" in (stack.home / "logs" / "backend.log").read_text()
    # The backend's user reads the change log, so this run could be incremental.
    run_mode = done["data"]["report"]["run_mode"]
    assert "may not read the change log" not in str(run_mode.get("reason")), run_mode


def test_down_stops_simulator_and_backend(stack):
    records = stack.recorded_processes()
    assert {"proxbox up", "netbox", "rqworkers", "simulator", "backend"} <= set(records)
    result = stack.stop()
    assert result.returncode == 0, result.stderr
    assert not any(record.alive() for record in records.values())
    assert processes_using(stack.home) == []


def test_next_up_stops_what_a_killed_supervisor_left_behind(rival):
    """Last, on the rival stack once the tests that share it are done (one `up` fewer):
    its supervisor killed, the next `up` on its home stops the orphans it left."""
    crashed = rival
    records = crashed.recorded_processes()
    leased = crashed.redis_databases()
    os.kill(records["proxbox up"].pid, signal.SIGKILL)
    wait_until(lambda: not records["proxbox up"].alive(), 10, "proxbox up to die", interval=0.5)
    assert records["netbox"].alive() and records["rqworkers"].alive()  # orphans now
    workers = records["rqworkers"].process().children()
    assert len(workers) == 2

    again = crashed.proxbox("up", "-d", "--no-demo", "--port", str(crashed.port), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not records["netbox"].alive()
    assert not records["rqworkers"].alive()
    assert not any(worker.is_running() for worker in workers)
    # The data dir gets its Redis databases back rather than leaking a pair.
    assert crashed.redis_databases() == leased
    with crashed.client() as client:
        assert client.get("/api/status/").status_code == 200
    assert crashed.stop().returncode == 0
