"""Incremental runs against a real NetBox and simulator: after a full run, a run reads
NetBox's change log and syncs only the guests that changed, in Proxmox or in NetBox,
and ends where a full run would.

The tests run in file order and build on each other (one simulator, one baseline store).
"""

import asyncio

import pytest
from sync_fixtures import (
    Simulator,
    assert_only_reflection_written,
    change_marker,
    create_endpoint,
    create_site,
    expected_inventory,
    list_all,
    netbox_inventory,
    object_changes_since,
    settings_for,
)

from proxbox_backend.baselines import MemoryBaselines
from proxbox_backend.service import SyncService


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    simulator = Simulator("incremental", "pair", 9, sync_workdir)
    try:
        simulator.start().renumber("10.86.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    site = create_site(netbox_server, "pbsync-incremental")
    return create_endpoint(netbox_server, "pve-incremental", simulator, site=site)


@pytest.fixture(scope="module")
def baselines():
    return MemoryBaselines()


@pytest.fixture(scope="module")
def sync(netbox_server, simulator, endpoint, baselines):
    def run(**overrides):
        service = SyncService(
            settings_for(netbox_server, simulator, **overrides), baselines=baselines
        )
        report = asyncio.run(service.run(endpoint["id"]))
        assert report.ok, (report.error, report.as_dict())
        return report

    return run


@pytest.fixture(scope="module")
def first_run(sync):
    return sync()


def converged(netbox, simulator, cluster_id: int) -> None:
    expected = expected_inventory(simulator.inventory())
    actual = netbox_inventory(netbox, cluster_id)
    for part in ("vms", "interfaces", "ips", "disks"):
        assert actual[part] == expected[part], part


def guest(simulator, kind: str = "qemu", status: str = "running") -> dict:
    return next(
        g["resource"]
        for (k, _), g in sorted(simulator.inventory()["guests"].items())
        if k == kind and g["resource"]["status"] == status
    )


def vm_named(netbox, cluster_id: int, name: str) -> dict:
    (vm,) = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=name)
    return vm


def test_the_first_run_is_full_and_the_next_reads_only_the_change_log(
    netbox_server, simulator, first_run, sync
):
    assert first_run.run_mode == {
        "mode": "full",
        "reason": "no baseline of an earlier successful run",
    }
    converged(netbox_server, simulator, first_run.cluster["id"])

    since = change_marker(netbox_server)
    report = sync()
    guests = len(simulator.inventory()["guests"])
    assert report.run_mode == {
        "mode": "incremental",
        "guests_synced": 0,
        "guests_unchanged": guests,
        "guests_gone": 0,
    }
    assert report.tally.writes == 0
    assert_only_reflection_written(object_changes_since(netbox_server, since))
    # Not one VM, VM interface, disk, address or record was read.
    with netbox_server.api() as api:
        full = asyncio.run(_full_run_requests(netbox_server, simulator, api))
    assert report.netbox_requests["total"] < full


async def _full_run_requests(netbox, simulator, api) -> int:
    endpoint = api.get("/plugins/proxbox/endpoints/proxmox/", params={"name": "pve-incremental"})
    service = SyncService(settings_for(netbox, simulator))  # no baselines: a full run
    report = await service.run(endpoint.json()["results"][0]["id"])
    assert report.run_mode == {} and report.tally.writes == 0
    return report.netbox_requests["total"]


def test_a_guest_changed_in_proxmox_is_the_only_one_synced(
    netbox_server, simulator, first_run, sync
):
    cluster_id = first_run.cluster["id"]
    resource = guest(simulator)
    with simulator.api() as pve:
        path = f"/nodes/{resource['node']}/qemu/{resource['vmid']}/config"
        assert pve.put(path, data={"memory": 3584}).status_code == 200

    report = sync()
    assert report.run_mode["mode"] == "incremental"
    assert report.run_mode["guests_synced"] == 1
    vms = report.tally.of("virtualization.virtualmachine")
    assert (vms.updated, vms.created, vms.deleted) == (1, 0, 0)
    assert report.tally.writes == 1
    assert vm_named(netbox_server, cluster_id, resource["name"])["memory"] == 3584
    converged(netbox_server, simulator, cluster_id)


def test_snapshots_are_read_again_only_when_their_guests_config_digest_changes(
    netbox_server, simulator, first_run, sync
):
    """Proxmox's config digest covers the config file's snapshot sections: an incremental
    run reads the snapshot list of a guest whose digest changed, and of no other."""
    cluster_id = first_run.cluster["id"]
    resource = guest(simulator)
    base = f"/nodes/{resource['node']}/qemu/{resource['vmid']}"
    with simulator.api() as pve:
        taken = pve.post(f"{base}/snapshot", data={"snapname": "pre-patch"})
        assert taken.status_code == 200, taken.text
        simulator.wait_task(taken.json()["data"])
    report = sync()
    assert report.run_mode["mode"] == "incremental"
    assert report.tally.of("netbox_proxbox.proxmoxsnapshot").created == 1
    vm = vm_named(netbox_server, cluster_id, resource["name"])

    unchanged = sync()
    assert unchanged.run_mode["mode"] == "incremental" and unchanged.tally.writes == 0
    reads = unchanged.proxmox_requests["by_method"]["GET"]

    with simulator.api() as pve:
        described = pve.put(f"{base}/snapshot/pre-patch/config", data={"description": "kernel"})
        assert described.status_code == 200, described.text
    report = sync()
    assert report.run_mode["mode"] == "incremental"
    assert report.tally.of("netbox_proxbox.proxmoxsnapshot").updated == 1
    assert report.tally.writes == 1
    # That guest's snapshot list, and no other guest's.
    assert report.proxmox_requests["by_method"]["GET"] == reads + 1
    (record,) = list_all(
        netbox_server, "/plugins/proxbox/inventory/snapshots/", virtual_machine_id=vm["id"]
    )
    assert (record["name"], record["description"]) == ("pre-patch", "kernel")

    # A full run reads every synced guest's list.
    full = sync(full_sync_interval=0.0)
    synced = [
        g for g in simulator.inventory()["guests"].values() if not g["resource"].get("template")
    ]
    assert full.proxmox_requests["by_method"]["GET"] == reads + len(synced)
    assert full.tally.writes == 0


def test_an_operators_edits_in_netbox_are_undone_for_those_vms_only(
    netbox_server, simulator, first_run, sync
):
    cluster_id = first_run.cluster["id"]
    before = netbox_inventory(netbox_server, cluster_id)
    vm_ids = sorted(vm["id"] for vm in before["raw_vms"])
    disk = list_all(netbox_server, "/virtualization/virtual-disks/", virtual_machine_id=vm_ids[0])[
        0
    ]
    interface = list_all(
        netbox_server, "/virtualization/interfaces/", virtual_machine_id=vm_ids[1]
    )[0]
    (address, *_) = list_all(netbox_server, "/ipam/ip-addresses/", virtual_machine_id=vm_ids[2])
    with netbox_server.api() as api:
        assert api.delete(f"/virtualization/virtual-disks/{disk['id']}/").status_code == 204
        changed = api.patch(
            f"/virtualization/interfaces/{interface['id']}/", json={"enabled": False}
        )
        assert changed.status_code == 200, changed.text
        untagged = api.patch(f"/ipam/ip-addresses/{address['id']}/", json={"tags": []})
        assert untagged.status_code == 200, untagged.text
        resized = api.patch(f"/virtualization/virtual-machines/{vm_ids[3]}/", json={"vcpus": 17})
        assert resized.status_code == 200, resized.text

    report = sync()
    assert report.run_mode["mode"] == "incremental"
    assert report.run_mode["guests_synced"] == 4
    assert report.tally.of("virtualization.virtualdisk").created == 1
    assert report.tally.of("virtualization.vminterface").updated == 1
    assert report.tally.of("virtualization.virtualmachine").updated == 1
    assert report.tally.of("ipam.ipaddress").updated == 1
    converged(netbox_server, simulator, cluster_id)
    with netbox_server.api() as api:
        assert api.get(f"/virtualization/interfaces/{interface['id']}/").json()["enabled"]
        tags = api.get(f"/ipam/ip-addresses/{address['id']}/").json()["tags"]
        vm = api.get(f"/virtualization/virtual-machines/{vm_ids[3]}/").json()
    assert "proxbox" in {tag["slug"] for tag in tags}
    assert float(vm["vcpus"]) != 17


def test_an_operators_edit_of_a_nodes_interface_is_undone(
    netbox_server, simulator, first_run, sync
):
    cluster_id = first_run.cluster["id"]
    devices = list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
    interface = list_all(netbox_server, "/dcim/interfaces/", device_id=devices[0]["id"])[0]
    with netbox_server.api() as api:
        changed = api.patch(f"/dcim/interfaces/{interface['id']}/", json={"enabled": False})
        assert changed.status_code == 200, changed.text
    report = sync()
    assert report.run_mode["mode"] == "incremental"
    assert report.run_mode["guests_synced"] == 0
    assert report.tally.of("dcim.interface").updated == 1
    with netbox_server.api() as api:
        assert api.get(f"/dcim/interfaces/{interface['id']}/").json()["enabled"] is True
    # Nothing changed since: the node stages are left out again.
    assert sync().tally.of("dcim.interface").unchanged == 0


def create_guest(simulator, node: str, vmid: int, name: str, memory: int) -> None:
    with simulator.api() as pve:
        created = pve.post(
            f"/nodes/{node}/qemu",
            data={
                "vmid": vmid,
                "name": name,
                "memory": memory,
                "net0": "virtio,bridge=vmbr0",
                "scsi0": "local-lvm:4",
            },
        )
        assert created.status_code == 200, created.text
        simulator.wait_task(created.json()["data"])


def destroy_guest(simulator, node: str, kind: str, vmid: int) -> None:
    with simulator.api() as pve:
        destroyed = pve.delete(f"/nodes/{node}/{kind}/{vmid}")
        assert destroyed.status_code == 200, destroyed.text
        simulator.wait_task(destroyed.json()["data"])


def test_guests_created_and_destroyed_in_proxmox(netbox_server, simulator, first_run, sync):
    cluster_id = first_run.cluster["id"]
    stopped = guest(simulator, status="stopped")
    create_guest(simulator, "pve1", 991, "incremental-new", 1024)
    destroy_guest(simulator, stopped["node"], stopped["type"], stopped["vmid"])

    report = sync(disappeared="delete")
    # The disappeared-guest policy is part of what the baseline vouches for.
    assert report.run_mode["mode"] == "full"
    report = sync(disappeared="delete")
    assert report.run_mode["mode"] == "incremental" and report.tally.writes == 0

    create_guest(simulator, "pve2", 992, "incremental-newer", 512)
    destroy_guest(simulator, "pve1", "qemu", 991)
    report = sync(disappeared="delete")
    assert report.run_mode["mode"] == "incremental"
    assert (report.run_mode["guests_synced"], report.run_mode["guests_gone"]) == (1, 1)
    vms = report.tally.of("virtualization.virtualmachine")
    assert (vms.created, vms.deleted) == (1, 1)
    converged(netbox_server, simulator, cluster_id)


def test_an_edit_of_a_shared_object_makes_a_full_run(netbox_server, simulator, first_run, sync):
    (tag,) = list_all(netbox_server, "/extras/tags/", slug="proxbox")
    with netbox_server.api() as api:
        changed = api.patch(f"/extras/tags/{tag['id']}/", json={"description": "edited"})
        assert changed.status_code == 200, changed.text
    report = sync()
    assert report.run_mode == {
        "mode": "full",
        "reason": f"extras.tag {tag['id']} was updated in NetBox",
    }
    assert sync().run_mode["mode"] == "incremental"


def test_the_periodic_full_run(netbox_server, simulator, first_run, sync):
    report = sync(full_sync_interval=0.0)
    assert report.run_mode == {
        "mode": "full",
        "reason": "incremental runs are off (interval 0)",
    }
