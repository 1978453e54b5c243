"""Nodes as hardware, against a real NetBox and the simulator: the device type an endpoint
configures for its nodes (one node overriding it) set through the plugin's REST API, the
nodes' /nodes/{node}/status facts as custom fields, and their network's interface types;
then the override changed and removed, previewed and resynced, and a resync that changes
nothing writes nothing.

The tests run in file order, each building on the NetBox the previous left.
"""

from __future__ import annotations

import pytest
from sync_fixtures import (
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    run_sync,
)

from proxbox_backend.baselines import MemoryBaselines

NAME = "pbsync-nodehw"
# PVE's interface types as the sync types them in NetBox. PVE reports no speed or media
# of a physical NIC (its network API has neither), so `eth` cannot be a physical type.
KINDS = {"eth": "other", "bridge": "bridge", "bond": "lag", "vlan": "virtual"}
FACTS = {
    "proxbox_cpu_model": lambda s: s["cpuinfo"]["model"],
    "proxbox_cpu_sockets": lambda s: s["cpuinfo"]["sockets"],
    "proxbox_cpu_cores": lambda s: s["cpuinfo"]["cores"],
    "proxbox_cpu_threads": lambda s: s["cpuinfo"]["cpus"],
    "proxbox_memory_mb": lambda s: s["memory"]["total"] // 1024**2,
    "proxbox_kernel": lambda s: s["current-kernel"]["release"],
    "proxbox_pve_version": lambda s: s["pveversion"],
}


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("nodehw", "pair", 3, sync_workdir)
    try:
        sim.start().renumber("10.99.0")
        # A bond and a VLAN interface on pve1 besides the seed's NICs and bridges, made
        # and applied through Proxmox's own API.
        with sim.api() as pve:
            for change in (
                {"iface": "bond0", "type": "bond", "bond_mode": "active-backup"},
                {"iface": "vlan50", "type": "vlan", "vlan-raw-device": "bond0"},
            ):
                made = pve.post("/nodes/pve1/network", data=change)
                assert made.status_code == 200, made.text
            applied = pve.put("/nodes/pve1/network")
            assert applied.status_code == 200, applied.text
            sim.wait_task(applied.json()["data"])
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def device_types(netbox_server):
    with netbox_server.api() as api:
        maker = api.post("/dcim/manufacturers/", json={"name": "Nodehw", "slug": "nodehw"})
        assert maker.status_code == 201, maker.text
        types = {}
        for model in ("R640", "R750", "R760"):
            made = api.post(
                "/dcim/device-types/",
                json={"manufacturer": maker.json()["id"], "model": model, "slug": model.lower()},
            )
            assert made.status_code == 201, made.text
            types[model] = made.json()["id"]
    return types


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator, device_types):
    """The endpoint: every node an R640, pve2 overridden to an R750 (through REST)."""
    created = create_endpoint(netbox_server, NAME, simulator, site=create_site(netbox_server, NAME))
    with netbox_server.api() as api:
        typed = api.patch(
            f"/plugins/proxbox/endpoints/proxmox/{created['id']}/",
            json={"node_device_type": device_types["R640"]},
        )
        assert typed.status_code == 200, typed.text
        override = api.post(
            "/plugins/proxbox/node-type-overrides/",
            json={"endpoint": created["id"], "node": "pve2", "device_type": device_types["R750"]},
        )
        assert override.status_code == 201, override.text
        # The same node twice is refused, naming the field.
        again = api.post(
            "/plugins/proxbox/node-type-overrides/",
            json={"endpoint": created["id"], "node": "pve2", "device_type": device_types["R760"]},
        )
        assert again.status_code == 400 and "node" in again.json(), again.text
    return {**typed.json(), "override": override.json()["id"]}


def sync(netbox_server, simulator, endpoint, **kwargs):
    report = run_sync(netbox_server, simulator, endpoint["id"], **kwargs)
    assert report.ok, (report.error, report.as_dict())
    assert not report.read_failures, report.read_failures
    return report


def devices(netbox_server, report) -> dict[str, dict]:
    found = list_all(netbox_server, "/dcim/devices/", cluster_id=report.cluster["id"])
    return {d["name"]: d for d in found}


def types_of(netbox_server, report) -> dict[str, int]:
    return {n: d["device_type"]["id"] for n, d in devices(netbox_server, report).items()}


@pytest.fixture(scope="module")
def first_run(netbox_server, simulator, endpoint):
    return sync(netbox_server, simulator, endpoint)


def test_each_node_gets_its_configured_type(netbox_server, first_run, device_types):
    assert types_of(netbox_server, first_run) == {
        "pve1": device_types["R640"],  # the endpoint's
        "pve2": device_types["R750"],  # its override
    }


def test_each_node_device_carries_the_nodes_status_facts(netbox_server, simulator, first_run):
    found = devices(netbox_server, first_run)
    with simulator.api() as pve:
        for name, device in found.items():
            status = pve.get(f"/nodes/{name}/status").json()["data"]
            expected = {field: read(status) for field, read in FACTS.items()}
            assert {f: device["custom_fields"][f] for f in FACTS} == expected, name
            assert all(value not in (None, "", 0) for value in expected.values()), expected


def test_node_interfaces_are_typed_from_the_node_network(netbox_server, simulator, first_run):
    found = devices(netbox_server, first_run)
    with simulator.api() as pve:
        for name, device in found.items():
            network = pve.get(f"/nodes/{name}/network").json()["data"]
            expected = {n["iface"]: KINDS[n["type"]] for n in network if n["type"] in KINDS}
            interfaces = {
                i["name"]: i
                for i in list_all(netbox_server, "/dcim/interfaces/", device_id=device["id"])
            }
            assert {n: i["type"]["value"] for n, i in interfaces.items()} == expected, name
    pve1 = {
        i["name"]: i
        for i in list_all(netbox_server, "/dcim/interfaces/", device_id=found["pve1"]["id"])
    }
    assert pve1["bond0"]["type"]["value"] == "lag"
    assert pve1["vlan50"]["type"]["value"] == "virtual"
    assert pve1["vlan50"]["parent"]["id"] == pve1["bond0"]["id"]


def test_a_resync_that_changes_nothing_writes_nothing(netbox_server, simulator, endpoint):
    # A full run plans every node again: its types and facts are what NetBox has.
    full = sync(netbox_server, simulator, endpoint)
    assert full.tally.writes == 0, full.as_dict()["counters"]
    assert full.tally.of("dcim.device").unchanged == 2
    baselines = MemoryBaselines()
    sync(netbox_server, simulator, endpoint, baselines=baselines)  # full: keeps a baseline
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint, baselines=baselines)
    assert report.tally.writes == 0, report.as_dict()["counters"]
    assert report.run_mode["mode"] == "incremental", report.run_mode
    written = {c["changed_object_type"] for c in object_changes_since(netbox_server, since)}
    assert "dcim.device" not in written and "dcim.interface" not in written, written


def test_a_changed_override_is_previewed_then_synced(
    netbox_server, simulator, endpoint, first_run, device_types
):
    with netbox_server.api() as api:
        changed = api.patch(
            f"/plugins/proxbox/node-type-overrides/{endpoint['override']}/",
            json={"device_type": device_types["R760"]},
        )
        assert changed.status_code == 200, changed.text
    pve2 = devices(netbox_server, first_run)["pve2"]

    since = change_marker(netbox_server)
    preview = sync(netbox_server, simulator, endpoint, dry_run=True)
    assert object_changes_since(netbox_server, since) == []
    updates = preview.as_dict()["plan"]["object_types"]["dcim.device"]["updates"]
    assert updates == [
        {
            "id": pve2["id"],
            "label": "pve2",
            "changes": {"device_type": {"old": device_types["R750"], "new": device_types["R760"]}},
        }
    ]

    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("dcim.device").updated == 1
    assert types_of(netbox_server, first_run) == {
        "pve1": device_types["R640"],
        "pve2": device_types["R760"],
    }


def test_without_its_override_a_node_gets_the_endpoint_type_and_without_one_keeps_it(
    netbox_server, simulator, endpoint, first_run, device_types
):
    with netbox_server.api() as api:
        gone = api.delete(f"/plugins/proxbox/node-type-overrides/{endpoint['override']}/")
        assert gone.status_code == 204, gone.text
    sync(netbox_server, simulator, endpoint)
    everywhere = {"pve1": device_types["R640"], "pve2": device_types["R640"]}
    assert types_of(netbox_server, first_run) == everywhere

    # None configured: today's behaviour, the devices keep the type they have.
    with netbox_server.api() as api:
        cleared = api.patch(
            f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/",
            json={"node_device_type": None},
        )
        assert cleared.status_code == 200, cleared.text
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("dcim.device").updated == 0
    assert types_of(netbox_server, first_run) == everywhere
