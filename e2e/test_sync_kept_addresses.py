"""Kept addresses: a guest that cannot report its addresses (stopped, agent silent) keeps
the ones synced earlier, with the same ids and as the VM's primary IP; only the running
guest's agent answering without an address removes it.

The tests run in file order and build on each other (one NetBox, one simulator).
"""

import psycopg
import pytest
from psycopg.types.json import Jsonb
from sync_fixtures import (
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    run_sync,
    server_dsn,
)

UNCONFIRMED = "proxbox-unconfirmed"
LEASE = "10.79.9.50"  # an address only the guest agent knows (DHCP), never in the config


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("kept", "single", 5, sync_workdir)
    try:
        sim.start().renumber("10.85.0")
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    site = create_site(netbox_server, "pbsync-kept")
    return create_endpoint(netbox_server, "pve-kept", simulator, site=site)


@pytest.fixture(scope="module")
def dhcp_guest(simulator):
    """A running QEMU VM with an agent, on DHCP: its only address is a lease the agent
    reports (the simulator has no DHCP server, so the lease is set in its store, where
    the agent's answers come from)."""
    inventory = simulator.inventory()
    resource = next(
        g["resource"] for (kind, _), g in sorted(inventory["guests"].items()) if kind == "qemu"
    )
    node, vmid = resource["node"], resource["vmid"]
    with simulator.api() as pve:
        answer = pve.put(
            f"/nodes/{node}/qemu/{vmid}/config", data={"agent": "1", "ipconfig0": "ip=dhcp"}
        )
        assert answer.status_code == 200, answer.text
    if resource["status"] != "running":
        power(simulator, resource, "start")
    set_lease(simulator, vmid, LEASE)
    return resource


def set_lease(simulator: Simulator, vmid: int, address: str | None) -> None:
    with psycopg.connect(server_dsn(simulator.database), autocommit=True) as conn:
        (interfaces,) = conn.execute(
            "SELECT interfaces FROM guests WHERE vmid = %s", (vmid,)
        ).fetchone()
        assigned = [{"ip-address-type": "ipv4", "ip-address": address, "prefix": 24}]
        interfaces[0]["ip-addresses"] = assigned if address else []
        conn.execute("UPDATE guests SET interfaces = %s WHERE vmid = %s", (Jsonb(interfaces), vmid))


def power(simulator: Simulator, resource: dict, action: str) -> None:
    path = f"/nodes/{resource['node']}/{resource['type']}/{resource['vmid']}/status/{action}"
    with simulator.api() as pve:
        answer = pve.post(path)
        assert answer.status_code == 200, answer.text
    simulator.wait_task(answer.json()["data"])


def vm_state(netbox, cluster_id: int, name: str) -> tuple[dict, dict[str, dict]]:
    """The VM and its addresses by CIDR."""
    (vm,) = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=name)
    ips = list_all(netbox, "/ipam/ip-addresses/", virtual_machine_id=vm["id"])
    return vm, {ip["address"]: ip for ip in ips}


def slugs(ip: dict) -> set[str]:
    return {t["slug"] for t in ip["tags"]}


def sync(netbox_server, simulator, endpoint):
    report = run_sync(netbox_server, simulator, endpoint["id"])
    summary = report.as_dict()
    assert report.ok, (summary["error"], summary["failures"], summary["warnings"])
    return report


@pytest.fixture(scope="module")
def first_run(netbox_server, simulator, endpoint, dhcp_guest):
    return sync(netbox_server, simulator, endpoint)


def test_learned_address_is_synced_as_primary(netbox_server, first_run, dhcp_guest):
    vm, ips = vm_state(netbox_server, first_run.cluster["id"], dhcp_guest["name"])
    assert list(ips) == [f"{LEASE}/24"]
    assert vm["primary_ip4"]["id"] == ips[f"{LEASE}/24"]["id"]
    assert slugs(ips[f"{LEASE}/24"]) == {"proxbox"}


def test_stopped_guests_keep_their_addresses_and_primary_ips(
    netbox_server, simulator, endpoint, first_run, dhcp_guest
):
    cluster_id = first_run.cluster["id"]
    guests = simulator.inventory()["guests"]
    running = [g["resource"] for g in guests.values() if g["resource"]["status"] == "running"]
    before = {r["name"]: vm_state(netbox_server, cluster_id, r["name"]) for r in running}
    # An operator's own tag on the learned address must survive the marking.
    lease = before[dhcp_guest["name"]][1][f"{LEASE}/24"]
    lease_id = lease["id"]
    with netbox_server.api() as api:
        tagged = api.post("/extras/tags/", json={"name": "dns-managed", "slug": "dns-managed"})
        assert tagged.status_code == 201, tagged.text
        answer = api.patch(
            f"/ipam/ip-addresses/{lease_id}/",
            json={"tags": [{"slug": s} for s in slugs(lease) | {"dns-managed"}]},
        )
        assert answer.status_code == 200, answer.text
    for resource in running:
        power(simulator, resource, "stop")

    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint)
    ips_counted = report.tally.of("ipam.ipaddress")
    assert ips_counted.deleted == 0 and ips_counted.created == 0
    # Only the learned address needed its mark: config (cloud-init, container) addresses
    # are still known from the config of a stopped guest.
    assert ips_counted.updated == 1
    for resource in running:
        vm_before, ips_before = before[resource["name"]]
        vm, ips = vm_state(netbox_server, cluster_id, resource["name"])
        assert vm["status"]["value"] == "offline"
        assert {a: ip["id"] for a, ip in ips.items()} == {
            a: ip["id"] for a, ip in ips_before.items()
        }, resource["name"]
        for family in ("primary_ip4", "primary_ip6"):
            assert (vm[family] or {}).get("id") == (vm_before[family] or {}).get("id")
    _, ips = vm_state(netbox_server, cluster_id, dhcp_guest["name"])
    assert slugs(ips[f"{LEASE}/24"]) == {"dns-managed", "proxbox", UNCONFIRMED}
    # NetBox's change log: the VMs went offline, one address got its mark; nothing deleted.
    changes = object_changes_since(netbox_server, since)
    assert not [c for c in changes if c["action"]["value"] == "delete"]
    ip_changes = [c for c in changes if c["changed_object_type"] == "ipam.ipaddress"]
    assert [(c["changed_object_id"], c["action"]["value"]) for c in ip_changes] == [
        (lease_id, "update")
    ]

    # A second run while they are still stopped writes nothing at all.
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.writes == 0, report.as_dict()["counters"]


def test_agent_reporting_again_confirms_the_address(
    netbox_server, simulator, endpoint, first_run, dhcp_guest
):
    power(simulator, dhcp_guest, "start")
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("ipam.ipaddress").updated == 1
    vm, ips = vm_state(netbox_server, first_run.cluster["id"], dhcp_guest["name"])
    assert slugs(ips[f"{LEASE}/24"]) == {"dns-managed", "proxbox"}
    assert vm["primary_ip4"]["id"] == ips[f"{LEASE}/24"]["id"]


def test_agent_answering_without_the_address_removes_it(
    netbox_server, simulator, endpoint, first_run, dhcp_guest
):
    set_lease(simulator, dhcp_guest["vmid"], None)
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("ipam.ipaddress").deleted == 1
    vm, ips = vm_state(netbox_server, first_run.cluster["id"], dhcp_guest["name"])
    assert ips == {} and vm["primary_ip4"] is None
