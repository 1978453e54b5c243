"""Live sync against a real NetBox, the simulator and `proxbox-sync serve`: with the
endpoint's watch on (a 1 s poll), guests created, stopped, resized, re-addressed, migrated
and destroyed through Proxmox's API show in NetBox within seconds, while nobody starts a
sync; each run the watcher starts is a sync Job of the endpoint in NetBox.
"""

from __future__ import annotations

import pytest
from chaos_support import watching_backend
from proxbox_processes import wait_until
from sync_fixtures import (
    Simulator,
    create_watched_endpoint,
    expected_inventory,
    list_all,
    netbox_inventory,
)

# Seconds NetBox may take to follow one change: a poll (1 s) and an incremental run,
# on a loaded two-core machine.
DEADLINE = 90
PARTS = ("vms", "disks")  # name, status, vCPUs, memory, node; each disk's size


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    # /cluster/resources as fresh as PVE's: a guest's status and sizes there are those of
    # the last status broadcast, every 10 s (pvestatd's cycle).
    simulator = Simulator(
        "watch", "small", 13, sync_workdir, PROXMOX_SIMULATOR_STATUS_INTERVAL="10"
    )
    try:
        simulator.start().renumber("10.96.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    return create_watched_endpoint(
        netbox_server, "watch", simulator, watch_interval=1, removed_guests="delete"
    )


@pytest.fixture(scope="module")
def backend(netbox_server, simulator, endpoint, sync_workdir):
    with watching_backend(netbox_server, simulator, sync_workdir, "watch") as server:
        yield server


def in_step(netbox_server, simulator, cluster_id: int) -> bool:
    """NetBox shows what Proxmox's API says now. Not in step yet: a guest created since
    the last status broadcast has no name in /cluster/resources, and the run its
    creation started gave its VM no vCPUs (nothing said how many until the broadcast)."""
    try:
        expected = expected_inventory(simulator.inventory())
        actual = netbox_inventory(netbox_server, cluster_id, PARTS)
    except (KeyError, TypeError):
        return False
    return all(actual[part] == expected[part] for part in PARTS)


def follows(netbox_server, simulator, cluster_id: int, what: str, done=lambda: True) -> None:
    """Until `done()` holds — the change itself — and NetBox shows Proxmox's inventory
    (which alone can be in step with a broadcast that does not show the change yet)."""
    wait_until(
        lambda: done() and in_step(netbox_server, simulator, cluster_id),
        DEADLINE,
        what,
        interval=0.5,
    )


def task(simulator: Simulator, answer) -> None:
    assert answer.status_code == 200, answer.text
    simulator.wait_task(answer.json()["data"])


def vm(netbox_server, cluster_id: int, name: str) -> dict:
    found = list_all(
        netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=name
    )
    return found[0] if found else {}


def addresses(netbox_server, record: dict) -> dict[str, bool]:
    """The IP addresses NetBox holds on the VM's interfaces → whether the sync marked
    each unconfirmed (kept although the guest did not report it)."""
    if not record:
        return {}
    found = list_all(netbox_server, "/ipam/ip-addresses/", virtual_machine_id=record["id"])
    return {
        ip["address"]: "proxbox-unconfirmed" in {tag["slug"] for tag in ip["tags"]} for ip in found
    }


def test_netbox_follows_proxmox_with_nobody_starting_a_sync(
    netbox_server, simulator, endpoint, backend
):
    def cluster():
        with netbox_server.api() as api:
            record = api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/").json()
        return record["netbox_cluster"]

    # The watch's first run (nobody watched before) syncs the whole inventory.
    cluster_id = wait_until(
        cluster, DEADLINE, "the watch's first run to claim the cluster", interval=0.5
    )["id"]
    follows(netbox_server, simulator, cluster_id, "the first run to sync every guest")
    guests = simulator.inventory()["guests"]
    nodes = sorted({g["resource"]["node"] for g in guests.values()})
    running = next(
        g["resource"]
        for (kind, _), g in sorted(guests.items())
        if kind == "qemu" and g["resource"]["status"] == "running"
    )

    def new_vm() -> dict:
        return vm(netbox_server, cluster_id, "watch-new")

    with simulator.api() as pve:
        task(
            simulator,
            pve.post(
                f"/nodes/{nodes[0]}/qemu",
                data={
                    "vmid": 993,
                    "name": "watch-new",
                    "memory": 1024,
                    "net0": "virtio,bridge=vmbr0",
                    "scsi0": "local-lvm:4",
                },
            ),
        )
        follows(
            netbox_server, simulator, cluster_id, "a created guest",
            lambda: new_vm().get("memory") == 1024,
        )  # fmt: skip

        path = f"/nodes/{running['node']}/qemu/{running['vmid']}"
        task(simulator, pve.post(f"{path}/status/stop"))
        follows(
            netbox_server, simulator, cluster_id, "a stopped guest",
            lambda: vm(netbox_server, cluster_id, running["name"])["status"]["value"]
            == "offline",
        )  # fmt: skip

        task(simulator, pve.post(f"/nodes/{nodes[0]}/qemu/993/config", data={"memory": 3072}))
        task(
            simulator,
            pve.put(f"/nodes/{nodes[0]}/qemu/993/resize", data={"disk": "scsi0", "size": "+1G"}),
        )
        follows(
            netbox_server, simulator, cluster_id, "a guest's memory and disk resized",
            lambda: new_vm().get("memory") == 3072,
        )  # fmt: skip

        # Re-addressed as PVE does it: the cloud-init `ipconfig0` of its first NIC, edited
        # through the asynchronous config call (a `qmconfig` task). The stopped guest
        # cannot confirm what its OS still holds until cloud-init runs at its next boot:
        # the address it had stays, marked unconfirmed, beside the new one.
        for address, held in (
            ("10.96.200.7/24", {"10.96.200.7/24": False}),
            ("10.96.200.8/24", {"10.96.200.7/24": True, "10.96.200.8/24": False}),
        ):
            task(
                simulator,
                pve.post(
                    f"/nodes/{nodes[0]}/qemu/993/config",
                    data={"ipconfig0": f"ip={address},gw=10.96.200.1"},
                ),
            )
            follows(
                netbox_server, simulator, cluster_id, f"a guest re-addressed to {address}",
                lambda held=held: addresses(netbox_server, new_vm()) == held,
            )  # fmt: skip

        task(simulator, pve.post(f"/nodes/{nodes[0]}/qemu/993/migrate", data={"target": nodes[1]}))
        follows(
            netbox_server, simulator, cluster_id, "a migrated guest",
            lambda: (new_vm().get("device") or {}).get("name") == nodes[1],
        )  # fmt: skip

        task(simulator, pve.delete(f"/nodes/{nodes[1]}/qemu/993"))
        follows(netbox_server, simulator, cluster_id, "a destroyed guest", lambda: not new_vm())

    # Every run was the watcher's, recorded as a sync Job of the endpoint with what it saw.
    jobs = list_all(netbox_server, "/core/jobs/", object_id=endpoint["id"], name="Proxbox sync")
    assert jobs, "the watcher's runs are sync Jobs of the endpoint"
    triggers = [job["data"]["trigger"]["watch"] for job in jobs]
    assert all(job["status"]["value"] == "completed" for job in jobs), [
        (job["id"], job["error"]) for job in jobs
    ]
    assert ["watch started"] in [t["reasons"] for t in triggers]
    seen = {guest for t in triggers for guest in t["guests"]}
    assert {"qemu/993", f"qemu/{running['vmid']}"} <= seen
