"""Adoption against a real NetBox and the simulator: with the endpoint's opt-in, a VM an
operator already keeps in the endpoint's cluster is taken over only when it carries the
`proxbox-adopt` tag; a VM of a guest's name without it is never adopted. The preview lists
the adoption (an update that sets the sync's source key and tag) before the sync applies it.

The tests run in file order and build on each other (one endpoint, one small simulator).
"""

import asyncio

import pytest
import sync_fixtures as fixtures
from sync_fixtures import create_endpoint, create_site, list_all, run_sync, settings_for

from proxbox_backend.service import SyncService

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
VMS = "/virtualization/virtual-machines/"
VM_TYPE = "virtualization.virtualmachine"


@pytest.fixture(scope="module")
def adopt_simulator(sync_workdir):
    simulator = fixtures.Simulator("adopt", "single", 7, sync_workdir)
    try:
        simulator.start().renumber("10.84.0")
        yield simulator
    finally:
        simulator.stop()


def set_policy(netbox, endpoint, **policy) -> None:
    with netbox.api() as api:
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json=policy)
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def scene(netbox_server, adopt_simulator):
    """The endpoint's cluster (a first sync writing no guests), and in it two VMs an
    operator made by hand with the names of two guests: one marked for adoption."""
    site = create_site(netbox_server, "pbsync-adopt")
    endpoint = create_endpoint(netbox_server, "pve-adopt", adopt_simulator, site=site)
    set_policy(netbox_server, endpoint, guests_mode="off")
    first = run_sync(netbox_server, adopt_simulator, endpoint["id"])
    assert first.ok, first.as_dict()
    cluster_id = first.cluster["id"]
    guests = sorted(adopt_simulator.inventory()["guests"].items())
    assert len(guests) >= 2, "the profile has at least two guests"
    names = [g["resource"]["name"] for _, g in guests[:2]]
    with netbox_server.api() as api:
        tag = api.get("/extras/tags/", params={"slug": "proxbox-adopt"}).json()["results"]
        if not tag:
            created = api.post(
                "/extras/tags/", json={"name": "proxbox: adopt", "slug": "proxbox-adopt"}
            )
            assert created.status_code == 201, created.text
        made = []
        for name, tags in zip(names, ([{"slug": "proxbox-adopt"}], []), strict=True):
            vm = api.post(
                VMS,
                json={
                    "name": name,
                    "cluster": cluster_id,
                    "site": site,
                    "status": "planned",
                    "tags": tags,
                },
            )
            assert vm.status_code == 201, vm.text
            made.append(vm.json())
    set_policy(netbox_server, endpoint, guests_mode="always", adopt_existing=True)
    return {"endpoint": endpoint, "cluster_id": cluster_id, "marked": made[0], "plain": made[1]}


def vm(netbox, vm_id) -> dict:
    with netbox.api() as api:
        return api.get(f"{VMS}{vm_id}/").json()


def test_the_preview_lists_the_adoption_and_writes_nothing(netbox_server, adopt_simulator, scene):
    service = SyncService(settings_for(netbox_server, adopt_simulator))
    preview = asyncio.run(service.run(scene["endpoint"]["id"], dry_run=True))
    assert preview.netbox_requests["writes"] == 0
    vms = preview.as_dict()["plan"]["object_types"][VM_TYPE]
    updates = {u["id"]: u["changes"] for u in vms["updates"]}
    marked, plain = scene["marked"], scene["plain"]
    adoption = updates[marked["id"]]
    assert adoption["custom_fields"]["old"].get("proxbox_source") is None
    assert adoption["custom_fields"]["new"]["proxbox_source"].startswith(
        f"cluster-{scene['cluster_id']}/"
    )
    assert "proxbox" in adoption["tags"]["new"]
    assert "proxbox-adopt" not in adoption["tags"]["new"]
    assert plain["id"] not in updates  # not marked: planned as a new VM, not adopted
    assert plain["name"] in {c["label"] for c in vms["creates"]}
    # Nothing was written: the marked VM is still the operator's.
    assert vm(netbox_server, marked["id"])["custom_fields"]["proxbox_source"] is None


def test_only_the_marked_vm_is_adopted(netbox_server, adopt_simulator, scene):
    report = run_sync(netbox_server, adopt_simulator, scene["endpoint"]["id"])
    marked = vm(netbox_server, scene["marked"]["id"])  # the same NetBox id, now managed
    assert marked["custom_fields"]["proxbox_source"].startswith(f"cluster-{scene['cluster_id']}/")
    assert {t["slug"] for t in marked["tags"]} >= {"proxbox"}
    assert "proxbox-adopt" not in {t["slug"] for t in marked["tags"]}
    assert marked["status"]["value"] != "planned"  # its fields now follow Proxmox
    plain = vm(netbox_server, scene["plain"]["id"])
    assert plain["custom_fields"]["proxbox_source"] is None
    assert plain["status"]["value"] == "planned" and plain["tags"] == []
    # The unmarked namesake stays the operator's: the guest's own VM cannot take its name
    # (NetBox names are unique per cluster), which the run reports instead of adopting.
    failures = [f for f in report.tally.failures if f.object_type == VM_TYPE]
    assert [plain["name"] in f.label for f in failures] == [True], report.as_dict()
    named = [
        v
        for v in list_all(netbox_server, VMS, cluster_id=scene["cluster_id"])
        if v["name"].lower() in {marked["name"].lower(), plain["name"].lower()}
    ]
    assert sorted(v["id"] for v in named) == sorted([marked["id"], plain["id"]])
