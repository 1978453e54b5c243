"""One cluster endpoint over its life: first sync equals the simulator's inventory,
a no-change resync writes nothing, guests come, change and go, the cluster is renamed.

The tests run in file order and build on each other (one NetBox, one simulator).
"""

import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    assert_only_reflection_written,
    change_marker,
    create_endpoint,
    create_site,
    expected_inventory,
    list_all,
    netbox_inventory,
    object_changes_since,
    run_sync,
)

# The session's live servers (pytest finds fixtures among module globals).
cluster_simulator = fixtures.cluster_simulator


@pytest.fixture(scope="module")
def site(netbox_server):
    return create_site(netbox_server, "pbsync-dc1")


@pytest.fixture(scope="module")
def endpoint(netbox_server, cluster_simulator, site):
    return create_endpoint(netbox_server, "pve-cluster-a", cluster_simulator, site=site)


@pytest.fixture(scope="module")
def first_run(netbox_server, cluster_simulator, endpoint):
    return run_sync(netbox_server, cluster_simulator, endpoint["id"])


def test_first_sync_equals_simulator_inventory(
    netbox_server, cluster_simulator, endpoint, first_run, site
):
    report = first_run
    assert report.ok, (report.error, report.as_dict())
    # Declared "cluster" and Proxmox reports a cluster: nothing to warn about.
    assert not [w for w in report.warnings if "is declared" in w], report.warnings
    assert report.cluster["claim_status"] == 201
    assert (report.cluster["created"], report.cluster["changed"]) == (True, False)
    cluster_id = report.cluster["id"]

    expected = expected_inventory(cluster_simulator.inventory())
    actual = netbox_inventory(netbox_server, cluster_id)
    for part in ("nodes", "vms", "interfaces", "ips", "disks"):
        assert actual[part] == expected[part], part
    # Every VM's total disk equals its virtual disks (NetBox keeps it so).
    for vm in actual["raw_vms"]:
        assert vm["site"]["id"] == site and vm["cluster"]["id"] == cluster_id
        assert vm["custom_fields"]["proxbox_source"].startswith(f"cluster-{cluster_id}/")

    counters = report.tally.counters
    assert counters["virtualization.cluster"].created == 1
    assert counters["dcim.device"].created == len(expected["nodes"])
    assert counters["virtualization.virtualmachine"].created == len(expected["vms"])
    assert counters["virtualization.vminterface"].created == len(expected["interfaces"])
    # The guests' addresses, and each node's from its network (on its device interfaces)
    with cluster_simulator.api() as pve:
        node_cidrs = {
            (node, entry["iface"], entry[key])
            for node in expected["nodes"]
            for entry in pve.get(f"/nodes/{node}/network").json()["data"]
            for key in ("cidr", "cidr6")
            if entry.get(key)
        }
    assert node_cidrs and actual["node_ips"] == node_cidrs
    assert counters["ipam.ipaddress"].created == len(expected["ips"]) + len(node_cidrs)
    assert counters["virtualization.virtualdisk"].created == len(expected["disks"])
    assert report.tally.failed == 0


def test_first_sync_shows_the_seeded_replication_and_ha(
    netbox_server, cluster_simulator, first_run
):
    cluster_id = first_run.cluster["id"]
    with cluster_simulator.api() as pve:
        (job,) = pve.get("/cluster/replication").json()["data"]
        (group,) = pve.get("/cluster/ha/groups").json()["data"]
        (resource,) = pve.get("/cluster/ha/resources").json()["data"]

    def records(kind: str) -> list[dict]:
        return list_all(netbox_server, f"/plugins/proxbox/inventory/{kind}/", cluster_id=cluster_id)

    (replicated,) = records("replication-jobs")
    vm = vm_by_name(netbox_server, cluster_id, replicated["virtual_machine"]["name"])
    assert (replicated["job_id"], replicated["target"]) == (job["id"], job["target"])
    assert replicated["target_device"]["name"] == job["target"]
    assert replicated["vmid"] == job["guest"] and vm is not None
    (ha_group,) = records("ha-groups")
    (ha_resource,) = records("ha-resources")
    assert (ha_group["name"], ha_group["nodes"]) == (group["group"], group["nodes"])
    assert ha_resource["sid"] == resource["sid"] == f"vm:{job['guest']}"
    assert ha_resource["group"]["id"] == ha_group["id"]
    assert ha_resource["virtual_machine"]["id"] == vm["id"]


def test_each_vm_has_its_first_synced_address_as_primary(netbox_server, first_run):
    cluster_id = first_run.cluster["id"]
    inventory = netbox_inventory(netbox_server, cluster_id)
    first_by_family: dict[tuple[str, int], str] = {}
    # Proxmox's order: net0 before net1 (one address per interface in this profile).
    for vm, _interface, address in sorted(inventory["ips"], key=lambda ip: (ip[0], ip[1])):
        family = 6 if ":" in address else 4
        first_by_family.setdefault((vm, family), address)
    assert first_by_family, "the profile has guests with addresses"
    for vm in inventory["raw_vms"]:
        for family in (4, 6):
            primary = vm[f"primary_ip{family}"]
            expected = first_by_family.get((vm["name"], family))
            assert (primary["address"] if primary else None) == expected, (vm["name"], family)
    vms = first_run.tally.of("virtualization.virtualmachine")
    assert vms.updated == 0  # a new VM's primary address is part of its creation


def test_endpoint_and_cluster_point_at_each_other(netbox_server, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    with netbox_server.api() as api:
        stored = api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/").json()
        tracking = api.get(f"/plugins/proxbox/clusters/{first_run.cluster['tracking_id']}/").json()
        sidecars = api.get(
            "/plugins/proxbox/cluster-sync-states/", params={"cluster_id": cluster_id}
        ).json()["results"]
    assert stored["netbox_cluster"]["id"] == cluster_id
    assert tracking["endpoint"]["id"] == endpoint["id"]
    assert tracking["netbox_cluster"]["id"] == cluster_id
    assert (tracking["quorate"], tracking["node_count"]) == (True, 3)
    assert tracking["last_seen"] is not None
    assert len(sidecars) == 1 and sidecars[0]["status"]["value"] == "succeeded"
    assert sidecars[0]["last_sync"] is not None
    created = sum(c.created for c in first_run.tally.counters.values())
    assert sidecars[0]["objects_created"] == created


def test_second_sync_writes_nothing(netbox_server, cluster_simulator, endpoint, first_run):
    since = change_marker(netbox_server)
    report = run_sync(netbox_server, cluster_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.cluster["claim_status"] == 200
    assert (report.cluster["created"], report.cluster["changed"]) == (False, False)
    assert report.tally.writes == 0
    for object_type, counters in report.tally.counters.items():
        assert counters.created == counters.updated == counters.deleted == 0, object_type
    assert report.tally.of("virtualization.virtualmachine").unchanged == len(
        cluster_simulator.inventory()["guests"]
    )
    # NetBox's change log agrees: only the run's own reflection metadata was written.
    assert_only_reflection_written(object_changes_since(netbox_server, since))


def vm_by_name(netbox, cluster_id: int, name: str) -> dict | None:
    found = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=name)
    return found[0] if found else None


def test_guests_created_changed_and_deleted_between_syncs(
    netbox_server, cluster_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    guests = cluster_simulator.inventory()["guests"]
    running_qemu = next(
        g
        for (k, _), g in sorted(guests.items())
        if k == "qemu" and g["resource"]["status"] == "running"
    )
    stopped = next(
        g for (_, _), g in sorted(guests.items()) if g["resource"]["status"] == "stopped"
    )
    changed_name, gone_name = running_qemu["resource"]["name"], stopped["resource"]["name"]
    with cluster_simulator.api() as pve:
        created = pve.post(
            "/nodes/pve2/qemu",
            data={
                "vmid": 990,
                "name": "churn-new",
                "memory": 1024,
                "cores": 1,
                "net0": "virtio,bridge=vmbr0",
                "scsi0": "local-lvm:4",
            },
        )
        assert created.status_code == 200, created.text
        cluster_simulator.wait_task(created.json()["data"])
        r = running_qemu["resource"]
        resized = pve.put(
            f"/nodes/{r['node']}/qemu/{r['vmid']}/config", data={"memory": 3072, "cores": 3}
        )
        assert resized.status_code == 200, resized.text
        s = stopped["resource"]
        destroyed = pve.delete(f"/nodes/{s['node']}/{s['type']}/{s['vmid']}")
        assert destroyed.status_code == 200, destroyed.text
        cluster_simulator.wait_task(destroyed.json()["data"])

    report = run_sync(netbox_server, cluster_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    vms = report.tally.of("virtualization.virtualmachine")
    # created: churn-new; updated: the resized guest and the destroyed one (marked offline,
    # unless it was offline already)
    assert vms.created == 1 and vms.deleted == 0 and vms.failed == 0
    new = vm_by_name(netbox_server, cluster_id, "churn-new")
    assert new["memory"] == 1024 and float(new["vcpus"]) == 1.0 and new["disk"] == 4096
    assert new["device"]["name"] == "pve2"
    changed = vm_by_name(netbox_server, cluster_id, changed_name)
    assert changed["memory"] == 3072 and float(changed["vcpus"]) == 3.0
    gone = vm_by_name(netbox_server, cluster_id, gone_name)
    assert gone is not None and gone["status"]["value"] == "offline"

    # The same departure under the delete policy removes the VM (and its components).
    report = run_sync(netbox_server, cluster_simulator, endpoint["id"], disappeared="delete")
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("virtualization.virtualmachine").deleted == 1
    assert report.tally.of("virtualization.virtualmachine").created == 0
    assert vm_by_name(netbox_server, cluster_id, gone_name) is None
    assert (
        netbox_inventory(netbox_server, cluster_id)["vms"]
        == expected_inventory(cluster_simulator.inventory())["vms"]
    )


def test_a_removed_nic_takes_its_addresses_and_nothing_fails(
    netbox_server, cluster_simulator, endpoint, first_run
):
    """NetBox deletes an interface's addresses with it; the address stage, whose read
    started before the interface stage, still sees them and must leave them alone."""
    cluster_id = first_run.cluster["id"]
    before = netbox_inventory(netbox_server, cluster_id)
    vm_name, nic, _ = min(before["ips"])
    assert nic.startswith("net"), before["ips"]
    guest = next(
        g
        for g in cluster_simulator.inventory()["guests"].values()
        if g["resource"]["name"] == vm_name
    )
    node, kind = guest["resource"]["node"], guest["resource"]["type"]
    vmid = guest["resource"]["vmid"]
    with cluster_simulator.api() as pve:
        removed = pve.put(f"/nodes/{node}/{kind}/{vmid}/config", data={"delete": nic})
        assert removed.status_code == 200, removed.text

    report = run_sync(netbox_server, cluster_simulator, endpoint["id"])
    assert report.ok and not report.tally.failures, report.as_dict()
    assert report.tally.of("virtualization.vminterface").deleted == 1
    after = netbox_inventory(netbox_server, cluster_id)
    assert not {ip for ip in after["ips"] if ip[:2] == (vm_name, nic)}
    expected = expected_inventory(cluster_simulator.inventory())
    assert (after["interfaces"], after["ips"]) == (expected["interfaces"], expected["ips"])


def test_reused_vmid_is_a_new_guest(netbox_server, cluster_simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    before = vm_by_name(netbox_server, cluster_id, "churn-new")
    with cluster_simulator.api() as pve:
        destroyed = pve.delete("/nodes/pve2/qemu/990")
        assert destroyed.status_code == 200, destroyed.text
        cluster_simulator.wait_task(destroyed.json()["data"])
        created = pve.post(
            "/nodes/pve2/qemu",
            data={
                "vmid": 990,
                "name": "churn-new",
                "memory": 2048,
                "cores": 2,
                "smbios1": "uuid=6f1d2c7e-0000-4000-8000-000000000990",
                "net0": "virtio,bridge=vmbr0",
                "scsi0": "local-lvm:8",
            },
        )
        assert created.status_code == 200, created.text
        cluster_simulator.wait_task(created.json()["data"])

    report = run_sync(netbox_server, cluster_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    vms = report.tally.of("virtualization.virtualmachine")
    assert (vms.created, vms.updated, vms.deleted) == (1, 1, 0)
    new = vm_by_name(netbox_server, cluster_id, "churn-new")
    assert new["id"] != before["id"] and new["memory"] == 2048 and new["disk"] == 8192
    kept = vm_by_name(netbox_server, cluster_id, "churn-new (gone qemu/990)")
    assert kept["id"] == before["id"] and kept["status"]["value"] == "offline"
    assert new["custom_fields"]["proxbox_source"].endswith(
        "/qemu/990#uuid:6f1d2c7e-0000-4000-8000-000000000990"
    )

    report = run_sync(netbox_server, cluster_simulator, endpoint["id"], disappeared="delete")
    assert report.ok and report.tally.of("virtualization.virtualmachine").deleted == 1
    assert vm_by_name(netbox_server, cluster_id, "churn-new (gone qemu/990)") is None


def test_renamed_cluster_keeps_native_cluster_and_tracking_record(
    netbox_server, cluster_simulator, endpoint, first_run
):
    cluster_simulator.rename("pvesim-renamed")
    report = run_sync(netbox_server, cluster_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.cluster["id"] == first_run.cluster["id"]
    assert report.cluster["tracking_id"] == first_run.cluster["tracking_id"]
    assert report.cluster["claim_status"] == 200
    assert (report.cluster["created"], report.cluster["changed"]) == (False, True)
    assert report.tally.of("virtualization.cluster").updated == 1
    with netbox_server.api() as api:
        cluster = api.get(f"/virtualization/clusters/{report.cluster['id']}/").json()
        tracking = api.get(f"/plugins/proxbox/clusters/{report.cluster['tracking_id']}/").json()
    assert cluster["name"] == tracking["name"] == "pvesim-renamed"
    # Guests keep their identity: the cluster's rename is the only write.
    assert report.tally.writes == 1
    assert report.tally.of("virtualization.virtualmachine").unchanged == len(
        cluster_simulator.inventory()["guests"]
    )
