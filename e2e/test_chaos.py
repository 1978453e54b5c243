"""Chaos that converges: a sync killed with SIGKILL half-way leaves NetBox without
duplicates or dangling relations, and the next run finishes the job, counts exactly
what it wrote, and reaches the state an undisturbed sync reaches.

Real processes: NetBox (gunicorn), the simulator (`serve --tls`) on a 100-guest
profile, and `proxbox-sync run` as a subprocess, killed once NetBox has some of the
run's objects but not all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    expected_inventory,
    list_all,
    netbox_inventory,
    object_changes_since,
)

sync_workdir = fixtures.sync_workdir
netbox_server = fixtures.netbox_server

INVENTORY_TYPES = {
    "dcim.device": "nodes",
    "virtualization.virtualmachine": "vms",
    "virtualization.vminterface": "interfaces",
    "ipam.ipaddress": "ips",
    "virtualization.virtualdisk": "disks",
}


@pytest.fixture(scope="module")
def chaos_simulator(sync_workdir):
    simulator = Simulator("chaos", "medium", 17, sync_workdir)
    try:
        simulator.start().renumber("10.91.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def chaos_endpoint(netbox_server, chaos_simulator):
    site = create_site(netbox_server, "pbsync-chaos")
    return create_endpoint(netbox_server, "pve-chaos", chaos_simulator, site=site)


def _sync_command(netbox, simulator, endpoint_name: str) -> tuple[list[str], dict]:
    env = dict(
        os.environ,
        PROXBOX_NETBOX_URL=netbox.url,
        PROXBOX_NETBOX_TOKEN=netbox.admin_token,
        PROXBOX_PROXMOX_URL=simulator.url,
        PROXBOX_PROXMOX_CA_BUNDLE=simulator.ca_bundle,
        PROXBOX_PROXMOX_TOKEN=simulator.token_secret,
    )
    argv = [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", endpoint_name]
    return argv + ["--json"], env


def _vm_creates(netbox, since: int) -> int:
    return sum(
        1
        for change in object_changes_since(netbox, since)
        if change["changed_object_type"] == "virtualization.virtualmachine"
        and change["action"]["value"] == "create"
    )


def _assert_consistent(netbox, cluster_id: int) -> dict:
    """No duplicates, nothing pointing at what is gone or at another VM's objects."""
    vms = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    names = Counter(vm["name"] for vm in vms)
    assert not [name for name, n in names.items() if n > 1], names
    vm_ids = {vm["id"] for vm in vms}
    interfaces = list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id)
    per_vm = Counter((i["virtual_machine"]["id"], i["name"]) for i in interfaces)
    assert not [key for key, n in per_vm.items() if n > 1], per_vm
    assert {i["virtual_machine"]["id"] for i in interfaces} <= vm_ids
    interface_vm = {i["id"]: i["virtual_machine"]["id"] for i in interfaces}
    ips = [
        ip
        for ip in list_all(netbox, "/ipam/ip-addresses/")
        if ip["assigned_object_type"] == "virtualization.vminterface"
        and ip["assigned_object_id"] in interface_vm
    ]
    addresses = Counter(ip["address"] for ip in ips)
    assert not [a for a, n in addresses.items() if n > 1], addresses
    ip_vm = {ip["id"]: interface_vm[ip["assigned_object_id"]] for ip in ips}
    for vm in vms:
        for family in ("primary_ip4", "primary_ip6"):
            if vm[family]:
                assert ip_vm.get(vm[family]["id"]) == vm["id"], (vm["name"], family)
    disks = list_all(netbox, "/virtualization/virtual-disks/", cluster_id=cluster_id)
    per_vm_disk = Counter((d["virtual_machine"]["id"], d["name"]) for d in disks)
    assert not [key for key, n in per_vm_disk.items() if n > 1], per_vm_disk
    assert {d["virtual_machine"]["id"] for d in disks} <= vm_ids
    return netbox_inventory(netbox, cluster_id)


def _sync_state(netbox, cluster_id: int) -> dict:
    with netbox.api() as api:
        states = api.get(
            "/plugins/proxbox/cluster-sync-states/", params={"cluster_id": cluster_id}
        ).json()["results"]
    assert len(states) == 1, states
    return states[0]


def test_sync_killed_midway_converges_on_rerun(netbox_server, chaos_simulator, chaos_endpoint):
    expected = expected_inventory(chaos_simulator.inventory())
    argv, env = _sync_command(netbox_server, chaos_simulator, chaos_endpoint["name"])
    since = change_marker(netbox_server)
    run = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while run.poll() is None and time.monotonic() < deadline:
        if _vm_creates(netbox_server, since) >= 5:
            os.kill(run.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL, "the run ended before it could be killed midway"

    with netbox_server.api() as api:
        endpoint = api.get(f"/plugins/proxbox/endpoints/proxmox/{chaos_endpoint['id']}/").json()
    cluster_id = endpoint["netbox_cluster"]["id"]
    partial = _assert_consistent(netbox_server, cluster_id)
    synced = {part: len(partial[part]) for part in INVENTORY_TYPES.values()}
    wanted = {part: len(expected[part]) for part in INVENTORY_TYPES.values()}
    assert 0 < sum(synced.values()) < sum(wanted.values()), (synced, wanted)
    # The killed run claims no success it did not have.
    assert _sync_state(netbox_server, cluster_id)["status"]["value"] != "succeeded"

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    report = json.loads(rerun.stdout)
    assert report["ok"], report

    converged = _assert_consistent(netbox_server, cluster_id)
    for part in ("nodes", "vms", "interfaces", "ips", "disks"):
        assert converged[part] == expected[part], part
    # Honest counters: the rerun created exactly what the killed run had not.
    for object_type, part in INVENTORY_TYPES.items():
        created = report["counters"].get(object_type, {}).get("created", 0)
        assert created == len(expected[part]) - len(partial[part]), object_type
    state = _sync_state(netbox_server, cluster_id)
    assert state["status"]["value"] == "succeeded", state
    assert state["objects_created"] == sum(c["created"] for c in report["counters"].values())
