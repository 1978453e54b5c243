"""Guest network prefixes (opt-in `prefixes_mode`) against a real NetBox and simulator:
off by default, nothing is made; switched on through REST, a preview lists the prefixes
and a sync makes one in the endpoint's VRF for each network of the guests' addresses
(marked as the sync's, scoped to the site); a prefix an operator made covering a network
keeps the sync from making one, and once it covers one the sync made, the sync's goes;
a network its guests left loses the sync's prefix; an operator's prefix is never touched.
With the switch on, a no-op incremental run writes nothing.

The tests run in file order and build on each other (one simulator).
"""

import pytest
from sync_fixtures import (
    Simulator,
    assert_only_reflection_written,
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    run_sync,
)

from proxbox_backend.baselines import MemoryBaselines
from proxbox_backend.domain.prefixes import KEY_FIELD

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
# Every guest is renumbered into 10.102.0.0/24; one QEMU guest gets a second NIC in LONE,
# another a host route (/32: no network) on a second NIC.
GUESTS, LONE = "10.102.0.0/24", "10.102.50.0/24"
LONE_ADDRESS, HOST_ROUTE = "10.102.50.5/24", "10.102.70.9/32"


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("prefixes", "pair", 23, sync_workdir)
    try:
        sim.start().renumber("10.102.0")
        yield sim
    finally:
        sim.stop()


def qemu_guests(simulator) -> list[dict]:
    return [
        g["resource"]
        for _key, g in sorted(simulator.inventory()["guests"].items())
        if g["resource"]["type"] == "qemu" and not g["resource"].get("template")
    ]


def configure(simulator, guest: dict, **change) -> None:
    with simulator.api() as pve:
        path = f"/nodes/{guest['node']}/qemu/{guest['vmid']}/config"
        response = pve.put(path, data=change)
        assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def scene(netbox_server, simulator):
    """The endpoint in a VRF of its own (the prefixes switch left as it comes: off), two
    QEMU guests with a second NIC each."""
    site = create_site(netbox_server, "pbsync-prefixes")
    endpoint = create_endpoint(netbox_server, "pve-prefixes", simulator, site=site)
    with netbox_server.api() as api:
        vrf = api.post("/ipam/vrfs/", json={"name": "pbsync-prefixes"})
        assert vrf.status_code == 201, vrf.text
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json={"vrf": vrf.json()["id"]})
        assert response.status_code == 200, response.text
    lone, routed = qemu_guests(simulator)[:2]
    configure(simulator, lone, net1="virtio=BC:24:11:02:00:01,bridge=vmbr0",
              ipconfig1=f"ip={LONE_ADDRESS}")  # fmt: skip
    configure(simulator, routed, net1="virtio=BC:24:11:02:00:02,bridge=vmbr0",
              ipconfig1=f"ip={HOST_ROUTE}")  # fmt: skip
    return {
        "endpoint": endpoint,
        "site": site,
        "vrf": vrf.json()["id"],
        "lone": lone,
        "routed": routed,
    }


def sync(netbox_server, simulator, scene, **kwargs):
    report = run_sync(netbox_server, simulator, scene["endpoint"]["id"], **kwargs)
    answer = report.as_dict()
    assert report.ok, (report.error, answer["failures"], answer["read_failures"])
    return report


def vrf_prefixes(netbox, scene) -> dict[str, dict]:
    """Every prefix in the endpoint's VRF, whoever made it."""
    return {p["prefix"]: p for p in list_all(netbox, "/ipam/prefixes/", vrf_id=scene["vrf"])}


def operator_prefix(netbox, scene, network: str) -> dict:
    with netbox.api() as api:
        response = api.post("/ipam/prefixes/", json={"prefix": network, "vrf": scene["vrf"]})
    assert response.status_code == 201, response.text
    return response.json()


def test_switched_off_by_default_no_prefix_is_made(netbox_server, simulator, scene):
    with netbox_server.api() as api:
        endpoint = api.get(f"{ENDPOINTS}{scene['endpoint']['id']}/").json()
    assert endpoint["prefixes_mode"]["value"] == "off"
    assert endpoint["sync_policy"]["modes"]["prefixes"] == "off"
    report = sync(netbox_server, simulator, scene)
    addresses = list_all(netbox_server, "/ipam/ip-addresses/", vrf_id=scene["vrf"])
    assert LONE_ADDRESS in {a["address"] for a in addresses}  # the addresses are synced
    assert vrf_prefixes(netbox_server, scene) == {}
    assert "ipam.prefix" not in report.tally.counters
    assert not list_all(netbox_server, "/extras/custom-fields/", name=KEY_FIELD)


def test_switched_on_through_rest_a_preview_lists_the_prefixes(netbox_server, simulator, scene):
    with netbox_server.api() as api:
        response = api.patch(
            f"{ENDPOINTS}{scene['endpoint']['id']}/", json={"prefixes_mode": "always"}
        )
    assert response.status_code == 200, response.text
    assert response.json()["sync_policy"]["modes"]["prefixes"] == "always"
    report = run_sync(netbox_server, simulator, scene["endpoint"]["id"], dry_run=True)
    assert report.ok, (report.error, report.as_dict())
    plan = report.plan.as_dict()["object_types"]["ipam.prefix"]
    assert plan["create"] == 2
    assert {c["payload"]["prefix"] for c in plan["creates"]} == {GUESTS, LONE}
    assert vrf_prefixes(netbox_server, scene) == {}


def test_a_sync_makes_a_marked_prefix_for_each_guest_network(netbox_server, simulator, scene):
    report = sync(netbox_server, simulator, scene)
    cluster_id = report.cluster["id"]
    found = vrf_prefixes(netbox_server, scene)
    assert set(found) == {GUESTS, LONE}  # none for the host route
    for network, prefix in found.items():
        assert {t["slug"] for t in prefix["tags"]} == {"proxbox"}
        assert prefix["custom_fields"][KEY_FIELD] == f"{cluster_id}/{network}"
        assert (prefix["scope_type"], prefix["scope_id"]) == ("dcim.site", scene["site"])
        assert prefix["status"]["value"] == "active"
    # A second run finds them as it left them.
    again = sync(netbox_server, simulator, scene)
    counter = again.tally.counters["ipam.prefix"]
    assert (counter.created, counter.updated, counter.deleted, counter.unchanged) == (0, 0, 0, 2)


def test_a_noop_incremental_run_writes_nothing(netbox_server, simulator, scene):
    baselines = MemoryBaselines()
    sync(netbox_server, simulator, scene, baselines=baselines)
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, scene, baselines=baselines)
    assert report.run_mode["mode"] == "incremental"
    assert_only_reflection_written(object_changes_since(netbox_server, since))


def test_an_operators_covering_prefix_keeps_the_sync_from_making_one(
    netbox_server, simulator, scene
):
    covering = operator_prefix(netbox_server, scene, "10.102.64.0/18")
    configure(simulator, scene["routed"], ipconfig1="ip=10.102.80.9/24")
    sync(netbox_server, simulator, scene)
    found = vrf_prefixes(netbox_server, scene)
    assert set(found) == {GUESTS, LONE, "10.102.64.0/18"}
    assert found["10.102.64.0/18"]["id"] == covering["id"]
    assert found["10.102.64.0/18"]["tags"] == []


def test_a_network_its_guests_left_loses_the_syncs_prefix(netbox_server, simulator, scene):
    empty = operator_prefix(netbox_server, scene, "10.102.90.0/24")  # the operator's: stays
    configure(simulator, scene["lone"], delete="ipconfig1")
    sync(netbox_server, simulator, scene)
    found = vrf_prefixes(netbox_server, scene)
    assert set(found) == {GUESTS, "10.102.64.0/18", "10.102.90.0/24"}
    assert found["10.102.90.0/24"]["id"] == empty["id"]


def test_an_operators_prefix_covering_the_syncs_replaces_it(netbox_server, simulator, scene):
    """Decided: the network has a prefix then, so the sync's (a duplicate or a redundant
    child) goes; the operator's stays, and the sync makes none while it covers."""
    broader = operator_prefix(netbox_server, scene, "10.102.0.0/23")
    sync(netbox_server, simulator, scene)
    found = vrf_prefixes(netbox_server, scene)
    assert set(found) == {"10.102.0.0/23", "10.102.64.0/18", "10.102.90.0/24"}
    assert found["10.102.0.0/23"]["id"] == broader["id"]
    again = sync(netbox_server, simulator, scene)
    assert again.tally.counters["ipam.prefix"].writes == 0
