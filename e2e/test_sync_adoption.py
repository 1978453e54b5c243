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
DEVICES = "/dcim/devices/"
IPS = "/ipam/ip-addresses/"
FIELDS = "/extras/custom-fields/"
NETWORK = "10.84.0"


@pytest.fixture(scope="module")
def adopt_simulator(sync_workdir):
    simulator = fixtures.Simulator("adopt", "single", 7, sync_workdir)
    try:
        simulator.start().renumber(NETWORK)
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
    set_policy(netbox_server, endpoint, guests_mode="off", nodes_mode="off")
    with netbox_server.api() as api:
        # As an earlier version left it (VMs only): the sync extends it to devices.
        only_vms = {"object_types": ["virtualization.virtualmachine"]}
        found = api.get(FIELDS, params={"name": "proxbox_source"}).json()["results"]
        if found:
            assert api.patch(f"{FIELDS}{found[0]['id']}/", json=only_vms).status_code == 200
        else:
            post(api, FIELDS, name="proxbox_source", type="text", **only_vms)
    first = run_sync(netbox_server, adopt_simulator, endpoint["id"])
    assert first.ok, (first.error, first.as_dict())
    with netbox_server.api() as api:
        (field,) = api.get(FIELDS, params={"name": "proxbox_source"}).json()["results"]
    assert "dcim.device" in field["object_types"]
    cluster_id = first.cluster["id"]
    inventory = adopt_simulator.inventory()
    guests = sorted(inventory["guests"].items())
    assert len(guests) >= 3, "the profile has at least three guests"
    node = next(n["name"] for n in inventory["status"] if n["type"] == "node")
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
        (kind, vmid), _ = guests[2]
        keyed = post(
            api,
            VMS,
            name=f"legacy-{vmid}",
            cluster=cluster_id,
            site=site,
            custom_fields={"proxbox_source": f"cluster-{cluster_id}/{kind}/{vmid}"},
        )
        device = post(
            api,
            DEVICES,
            name=node,
            site=site,
            role={"slug": "proxmox-ve-node"},
            device_type={"slug": "proxmox-ve-node"},
            status="planned",
            tags=[{"slug": "proxbox-adopt"}],
        )
        # `renumber` gave the n-th guest 10.84.0.(10 + n): the marked VM's address and the
        # keyed VM's, kept by hand in IPAM, one marked and one not.
        marked_ip = post(api, IPS, address=f"{NETWORK}.10/24", tags=[{"slug": "proxbox-adopt"}])
        plain_ip = post(api, IPS, address=f"{NETWORK}.12/24", description="operator's")
    set_policy(
        netbox_server, endpoint, guests_mode="always", nodes_mode="always", adopt_existing=True
    )
    return {
        "endpoint": endpoint,
        "cluster_id": cluster_id,
        "marked": made[0],
        "plain": made[1],
        "keyed": keyed,
        "device": device,
        "marked_ip": marked_ip,
        "plain_ip": plain_ip,
    }


def post(api, path, **body) -> dict:
    response = api.post(path, json=body)
    assert response.status_code == 201, response.text
    return response.json()


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
    keyed = updates[scene["keyed"]["id"]]  # marked by its source field
    assert keyed["name"]["new"] != scene["keyed"]["name"]
    devices = preview.as_dict()["plan"]["object_types"]["dcim.device"]
    device = {u["id"]: u["changes"] for u in devices["updates"]}[scene["device"]["id"]]
    assert device["cluster"]["new"] == scene["cluster_id"]
    ips = preview.as_dict()["plan"]["object_types"]["ipam.ipaddress"]
    ip_updates = {u["id"]: u for u in ips["updates"]}
    ip_adoption = ip_updates[scene["marked_ip"]["id"]]["changes"]
    assert ip_adoption["assigned_object_type"] == {
        "old": None,
        "new": "virtualization.vminterface",
    }
    assert "proxbox-adopt" in ip_adoption["tags"]["old"]
    assert "proxbox" in ip_adoption["tags"]["new"]
    assert scene["plain_ip"]["id"] not in ip_updates
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


def test_the_keyed_vm_the_marked_device_and_the_marked_address_are_adopted(netbox_server, scene):
    (kind, vmid) = scene["keyed"]["custom_fields"]["proxbox_source"].split("/")[1:3]
    keyed = vm(netbox_server, scene["keyed"]["id"])
    assert "proxbox" in {t["slug"] for t in keyed["tags"]}
    assert keyed["name"] != f"legacy-{vmid}"  # renamed to its guest's name
    with netbox_server.api() as api:
        device = api.get(f"{DEVICES}{scene['device']['id']}/").json()
        marked_ip = api.get(f"{IPS}{scene['marked_ip']['id']}/").json()
        plain_ip = api.get(f"{IPS}{scene['plain_ip']['id']}/").json()
        marked_vm = scene["marked"]["id"]
        interfaces = api.get(
            "/virtualization/interfaces/", params={"virtual_machine_id": marked_vm}
        )
    assert device["cluster"]["id"] == scene["cluster_id"]
    assert {t["slug"] for t in device["tags"]} == {"proxbox"}
    # The same IPAM object, now on the adopted VM's synced interface.
    assert marked_ip["assigned_object_type"] == "virtualization.vminterface"
    assert marked_ip["assigned_object_id"] in {i["id"] for i in interfaces.json()["results"]}
    assert {t["slug"] for t in marked_ip["tags"]} == {"proxbox"}
    # Without the marker the address stays the operator's, unassigned and untagged.
    assert plain_ip["assigned_object_id"] is None and plain_ip["tags"] == []
    assert plain_ip["description"] == "operator's"
