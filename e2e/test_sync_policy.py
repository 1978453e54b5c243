"""An endpoint's sync policy, set through the plugin's REST API, in real syncs against the
simulator: exclusions (VMID, name pattern, node, Proxmox tag, pool), protected fields (name,
status), create-only guests, operator-added components, the node, component, VLAN and tag
modes, templates, the removed-guests policy, the records mode of the storage and
data-protection records.

The tests run in file order and build on each other (one endpoint, one small simulator).
"""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    of_vms,
    run_sync,
    settings_for,
)

from proxbox_backend.domain.policy import Target
from proxbox_backend.service import SyncService

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"


@pytest.fixture(scope="module")
def policy_simulator(sync_workdir):
    simulator = fixtures.Simulator("policy", "single", 4, sync_workdir)
    try:
        simulator.start().renumber("10.79.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, policy_simulator):
    site = create_site(netbox_server, "pbsync-policy")
    return create_endpoint(netbox_server, "pve-policy", policy_simulator, site=site)


def set_policy(netbox, endpoint, **policy) -> dict:
    with netbox.api() as api:
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json=policy)
    assert response.status_code == 200, response.text
    return response.json()


def vms(netbox, cluster_id) -> dict[str, dict]:
    found = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    return {vm["custom_fields"]["proxbox_source"]: vm for vm in found}


def guest_ref(key: str, vm: dict) -> tuple[str, str, str]:
    """(kind, vmid, node) of a synced VM, from its key `cluster-<id>/<kind>/<vmid>#…`."""
    kind, vmid = key.split("#")[0].split("/")[1:]
    return kind, vmid, vm["device"]["name"]


def destroy_guest(simulator, kind: str, vmid: str, node: str) -> None:
    """Stop the guest if it runs, then destroy it, as `qm stop` + `qm destroy` would."""
    with simulator.api() as pve:
        status = pve.get(f"/nodes/{node}/{kind}/{vmid}/status/current").json()["data"]
        if status["status"] == "running":
            stopped = pve.post(f"/nodes/{node}/{kind}/{vmid}/status/stop")
            assert stopped.status_code == 200, stopped.text
            simulator.wait_task(stopped.json()["data"])
        destroyed = pve.delete(f"/nodes/{node}/{kind}/{vmid}")
        assert destroyed.status_code == 200, destroyed.text
        simulator.wait_task(destroyed.json()["data"])


@pytest.fixture(scope="module")
def guests(policy_simulator):
    return sorted(policy_simulator.inventory()["guests"])  # [(kind, vmid), ...]


@pytest.fixture(scope="module")
def first_run(netbox_server, policy_simulator, endpoint, guests):
    excluded_kind, excluded_vmid = guests[0]
    # Records off from the start: every sync of this file until the records tests runs so.
    set_policy(netbox_server, endpoint, exclude_vmids=str(excluded_vmid), records_mode="off")
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    return report


def test_an_excluded_guest_is_not_synced(netbox_server, first_run, guests):
    synced = vms(netbox_server, first_run.cluster["id"])
    keys = {key.split("/", 1)[1].split("#")[0] for key in synced}
    kind, vmid = guests[0]
    assert f"{kind}/{vmid}" not in keys
    assert {f"{k}/{v}" for k, v in guests[1:]} <= keys


def test_protected_name_and_operator_components_survive_a_resync(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    vm = next(iter(vms(netbox_server, cluster_id).values()))
    set_policy(netbox_server, endpoint, protected_fields=["name"])
    with netbox_server.api() as api:
        assert api.patch(
            f"/virtualization/virtual-machines/{vm['id']}/", json={"name": "operator-name"}
        ).is_success
        nic = api.post(
            "/virtualization/interfaces/", json={"virtual_machine": vm["id"], "name": "mgmt9"}
        )
        disk = api.post(
            "/virtualization/virtual-disks/",
            json={"virtual_machine": vm["id"], "name": "operator-disk", "size": 10},
        )
        assert nic.status_code == 201 and disk.status_code == 201, (nic.text, disk.text)

    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    with netbox_server.api() as api:
        assert api.get(f"/virtualization/virtual-machines/{vm['id']}/").json()["name"] == (
            "operator-name"
        )
        assert api.get(f"/virtualization/interfaces/{nic.json()['id']}/").status_code == 200
        assert api.get(f"/virtualization/virtual-disks/{disk.json()['id']}/").status_code == 200

    # Switched off, the sync deletes what it did not create too; unprotected, it renames.
    set_policy(netbox_server, endpoint, protected_fields=[], keep_operator_objects=False)
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    with netbox_server.api() as api:
        assert (
            api.get(f"/virtualization/virtual-machines/{vm['id']}/").json()["name"] == (vm["name"])
        )
        assert api.get(f"/virtualization/interfaces/{nic.json()['id']}/").status_code == 404
        assert api.get(f"/virtualization/virtual-disks/{disk.json()['id']}/").status_code == 404


def test_a_targeted_sync_touches_only_that_guest(
    netbox_server, policy_simulator, endpoint, first_run, guests
):
    cluster_id = first_run.cluster["id"]
    synced = sorted(vms(netbox_server, cluster_id).items())
    assert len(synced) >= 2, "the profile has at least two synced guests"
    (target_key, target_vm), (other_key, other_vm) = synced[0], synced[1]
    with netbox_server.api() as api:
        for vm in (target_vm, other_vm):
            assert api.patch(
                f"/virtualization/virtual-machines/{vm['id']}/", json={"status": "planned"}
            ).is_success
    kind, vmid, _node = guest_ref(target_key, target_vm)
    marker = change_marker(netbox_server)
    service = SyncService(settings_for(netbox_server, policy_simulator))
    report = asyncio.run(service.run(endpoint["id"], target=Target.parse(guest=f"{kind}/{vmid}")))
    assert report.ok, (report.error, report.as_dict())
    assert report.endpoint["target"] == f"{kind}/{vmid}"
    after = vms(netbox_server, cluster_id)
    assert after[target_key]["status"]["value"] != "planned"  # the target was synced
    assert after[other_key]["status"]["value"] == "planned"  # the other VM was not touched
    touched = {
        (c["changed_object_type"], c["changed_object_id"])
        for c in object_changes_since(netbox_server, marker)
    }
    vm_changes = {oid for kind_, oid in touched if kind_ == "virtualization.virtualmachine"}
    assert vm_changes == {target_vm["id"]}
    assert not {k for k, _ in touched} & {"dcim.device", "dcim.interface"}

    # A full sync puts the other one back in line.
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert vms(netbox_server, cluster_id)[other_key]["status"]["value"] != "planned"


def test_create_only_guests_are_not_updated_and_lifting_the_exclusion_creates(
    netbox_server, policy_simulator, endpoint, first_run, guests
):
    cluster_id = first_run.cluster["id"]
    vm = next(iter(vms(netbox_server, cluster_id).values()))
    set_policy(netbox_server, endpoint, guests_mode="create_only", exclude_vmids="")
    with netbox_server.api() as api:
        assert api.patch(
            f"/virtualization/virtual-machines/{vm['id']}/", json={"status": "planned"}
        ).is_success
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    after = vms(netbox_server, cluster_id)
    assert after[vm["custom_fields"]["proxbox_source"]]["status"]["value"] == "planned"
    assert len(after) == len(guests)  # the guest no longer excluded was created
    assert report.tally.counters["virtualization.virtualmachine"].created == 1
    assert report.tally.counters["virtualization.virtualmachine"].updated == 0


def storages(netbox, cluster_id) -> list[dict]:
    return list_all(netbox, "/plugins/proxbox/inventory/storages/", cluster_id=cluster_id)


def record_types(plan: dict) -> dict:
    return {name: p for name, p in plan["object_types"].items() if "proxmox" in name}


def test_records_mode_off_writes_no_record_and_the_preview_plans_none(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    assert storages(netbox_server, cluster_id) == []  # several syncs of this file ran
    service = SyncService(settings_for(netbox_server, policy_simulator))
    preview = asyncio.run(service.preview(endpoint["id"]))
    assert preview.ok, (preview.error, preview.as_dict())
    assert record_types(preview.plan.as_dict()) == {}


def test_create_only_records_are_created_and_not_updated(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    set_policy(netbox_server, endpoint, records_mode="create_only")
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    stored = storages(netbox_server, cluster_id)
    assert stored and report.tally.of("netbox_proxbox.proxmoxstorage").created == len(stored)
    storage = stored[0]
    with netbox_server.api() as api:
        changed = api.patch(
            f"/plugins/proxbox/inventory/storages/{storage['id']}/",
            json={"content": "operator-edit"},
        )
    assert changed.status_code == 200, changed.text
    service = SyncService(settings_for(netbox_server, policy_simulator))
    preview = asyncio.run(service.preview(endpoint["id"]))
    assert all(p["update"] == 0 for p in record_types(preview.plan.as_dict()).values())
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("netbox_proxbox.proxmoxstorage").updated == 0
    with netbox_server.api() as api:
        now = api.get(f"/plugins/proxbox/inventory/storages/{storage['id']}/").json()
    assert now["content"] == "operator-edit"

    # Back to always, the sync corrects it.
    set_policy(netbox_server, endpoint, records_mode="always")
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    with netbox_server.api() as api:
        now = api.get(f"/plugins/proxbox/inventory/storages/{storage['id']}/").json()
    assert now["content"] == storage["content"]


# -- every other switch, each through REST and its effect in a real sync ----------------------


def synced(netbox, path: str, cluster_id: int) -> list[dict]:
    """The sync's own objects at `path` (tagged `proxbox`) of the cluster's VMs."""
    found = of_vms(netbox, path, [vm["id"] for vm in vms(netbox, cluster_id).values()])
    return [o for o in found if "proxbox" in {t["slug"] for t in o["tags"]}]


def identity(obj: dict) -> tuple:
    return (obj.get("virtual_machine") or {}).get("id"), obj.get("name") or obj.get("address")


@pytest.mark.parametrize(
    ("field", "path", "object_type"),
    [
        ("interfaces_mode", "/virtualization/interfaces/", "virtualization.vminterface"),
        ("ips_mode", "/ipam/ip-addresses/", "ipam.ipaddress"),
        ("disks_mode", "/virtualization/virtual-disks/", "virtualization.virtualdisk"),
    ],
    ids=["interfaces", "ips", "disks"],
)
def test_a_component_type_switched_off_is_not_written_until_switched_on(
    netbox_server, policy_simulator, endpoint, first_run, field, path, object_type
):
    cluster_id = first_run.cluster["id"]
    set_policy(netbox_server, endpoint, guests_mode="always", **{field: "off"})
    victim = synced(netbox_server, path, cluster_id)[0]
    with netbox_server.api() as api:
        assert api.delete(f"{path}{victim['id']}/").status_code == 204
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of(object_type).created == 0
    assert identity(victim) not in {identity(o) for o in synced(netbox_server, path, cluster_id)}

    set_policy(netbox_server, endpoint, **{field: "always"})
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of(object_type).created >= 1
    assert identity(victim) in {identity(o) for o in synced(netbox_server, path, cluster_id)}


def test_tags_mode_off_leaves_the_vms_tags_alone(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    vm = next(v for v in vms(netbox_server, cluster_id).values() if v["tags"])
    set_policy(netbox_server, endpoint, tags_mode="off")
    with netbox_server.api() as api:
        assert api.patch(f"/virtualization/virtual-machines/{vm['id']}/", json={"tags": []})
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert vms(netbox_server, cluster_id)[vm["custom_fields"]["proxbox_source"]]["tags"] == []
    set_policy(netbox_server, endpoint, tags_mode="always")
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    again = vms(netbox_server, cluster_id)[vm["custom_fields"]["proxbox_source"]]
    assert {t["slug"] for t in again["tags"]} >= {"proxbox"}


@pytest.mark.parametrize("kind", ["names", "nodes", "tags"])
def test_an_exclusion_keeps_the_guest_out_until_lifted(
    netbox_server, policy_simulator, endpoint, first_run, kind
):
    cluster_id = first_run.cluster["id"]
    set_policy(netbox_server, endpoint, guests_mode="always")
    key, vm = sorted(vms(netbox_server, cluster_id).items())[-1]
    guest_kind, vmid, node = guest_ref(key, vm)
    if kind == "tags":
        with policy_simulator.api() as pve:
            answer = pve.put(
                f"/nodes/{node}/{guest_kind}/{vmid}/config", data={"tags": "pbx-keep-out"}
            )
            assert answer.status_code == 200, answer.text
    exclusion = {
        "names": [vm["name"][:-1] + "*"],  # a pattern, as operators write them
        "nodes": [node],
        "tags": ["pbx-keep-out"],
    }[kind]
    set_policy(netbox_server, endpoint, **{f"exclude_{kind}": exclusion})
    with netbox_server.api() as api:
        assert api.delete(f"/virtualization/virtual-machines/{vm['id']}/").status_code == 204
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("virtualization.virtualmachine").created == 0
    assert vm["name"] not in {v["name"] for v in vms(netbox_server, cluster_id).values()}

    set_policy(netbox_server, endpoint, **{f"exclude_{kind}": []})
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("virtualization.virtualmachine").created == 1
    assert vm["name"] in {v["name"] for v in vms(netbox_server, cluster_id).values()}


def devices(netbox, cluster_id) -> list[dict]:
    return list_all(netbox, "/dcim/devices/", cluster_id=cluster_id)


def test_nodes_mode_off_leaves_the_node_device_as_the_operator_set_it(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    (device,) = devices(netbox_server, cluster_id)
    set_policy(netbox_server, endpoint, nodes_mode="off")
    with netbox_server.api() as api:
        answer = api.patch(f"/dcim/devices/{device['id']}/", json={"status": "planned"})
        assert answer.status_code == 200, answer.text
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert devices(netbox_server, cluster_id)[0]["status"]["value"] == "planned"
    set_policy(netbox_server, endpoint, nodes_mode="always")
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert devices(netbox_server, cluster_id)[0]["status"]["value"] == "active"


def test_vlans_mode_off_creates_no_vlan_until_switched_on(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    key, vm = sorted(vms(netbox_server, cluster_id).items())[0]
    guest_kind, vmid, node = guest_ref(key, vm)
    with policy_simulator.api() as pve:
        config = pve.get(f"/nodes/{node}/{guest_kind}/{vmid}/config").json()["data"]
        answer = pve.put(
            f"/nodes/{node}/{guest_kind}/{vmid}/config", data={"net0": config["net0"] + ",tag=42"}
        )
        assert answer.status_code == 200, answer.text

    def vlan_42() -> list[dict]:
        return list_all(
            netbox_server, "/ipam/vlans/", vid=42, group=f"proxbox-cluster-{cluster_id}"
        )

    set_policy(netbox_server, endpoint, vlans_mode="off")
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert vlan_42() == []
    set_policy(netbox_server, endpoint, vlans_mode="always")
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("ipam.vlan").created == 1 and len(vlan_42()) == 1


def test_a_protected_status_survives_and_unprotected_is_restored(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    key, vm = sorted(vms(netbox_server, cluster_id).items())[0]
    set_policy(netbox_server, endpoint, protected_fields=["status"])
    with netbox_server.api() as api:
        answer = api.patch(
            f"/virtualization/virtual-machines/{vm['id']}/", json={"status": "decommissioning"}
        )
        assert answer.status_code == 200, answer.text
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert vms(netbox_server, cluster_id)[key]["status"]["value"] == "decommissioning"
    set_policy(netbox_server, endpoint, protected_fields=[])
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert vms(netbox_server, cluster_id)[key]["status"]["value"] == vm["status"]["value"]


def test_a_pool_exclusion_and_the_template_switch(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    node = devices(netbox_server, cluster_id)[0]["name"]
    policy_simulator.create_template(node, 960, "tpl-pool")
    with policy_simulator.api() as pve:
        assert pve.post("/pools", data={"poolid": "golden"}).status_code == 200
        assert pve.put("/pools/golden", data={"vms": "960"}).status_code == 200

    def tpl_pool() -> list[dict]:
        found = list_all(netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id)
        return [vm for vm in found if vm["name"] == "tpl-pool"]

    set_policy(netbox_server, endpoint, sync_templates=False)
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert tpl_pool() == []  # templates stay out
    set_policy(netbox_server, endpoint, sync_templates=True, exclude_pools=["golden"])
    assert run_sync(netbox_server, policy_simulator, endpoint["id"]).ok
    assert tpl_pool() == []  # a template now, but in an excluded pool
    set_policy(netbox_server, endpoint, exclude_pools=[])
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert len(tpl_pool()) == 1


def test_the_removed_guests_policy_keeps_then_deletes_a_destroyed_guest(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    key, vm = sorted(vms(netbox_server, cluster_id).items())[0]
    guest_kind, vmid, node = guest_ref(key, vm)
    destroy_guest(policy_simulator, guest_kind, vmid, node)

    set_policy(netbox_server, endpoint, removed_guests="keep")
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    kept = vms(netbox_server, cluster_id).get(key)
    assert kept is not None and kept["status"]["value"] == vm["status"]["value"]

    set_policy(netbox_server, endpoint, removed_guests="delete")
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("virtualization.virtualmachine").deleted == 1
    assert key not in vms(netbox_server, cluster_id)


def test_offline_then_delete_counts_days_from_when_the_guest_went(
    netbox_server, policy_simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    key, vm = sorted(vms(netbox_server, cluster_id).items())[0]
    guest_kind, vmid, node = guest_ref(key, vm)
    destroy_guest(policy_simulator, guest_kind, vmid, node)
    set_policy(netbox_server, endpoint, removed_guests="offline-then-delete", removed_guests_days=7)

    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    gone = vms(netbox_server, cluster_id)[key]
    today = datetime.now(UTC).date()
    assert gone["status"]["value"] == "offline"
    assert gone["custom_fields"]["proxbox_gone_since"] == today.isoformat()
    # Still counting: the next run leaves it as it is.
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.tally.of("virtualization.virtualmachine").writes == 0
    assert key in vms(netbox_server, cluster_id)

    # Seven days on (the operator may move the date too: it is an ordinary custom field).
    with netbox_server.api() as api:
        week_ago = (today - timedelta(days=7)).isoformat()
        moved = api.patch(
            f"/virtualization/virtual-machines/{gone['id']}/",
            json={"custom_fields": {"proxbox_gone_since": week_ago}},
        )
        assert moved.status_code == 200, moved.text
    report = run_sync(netbox_server, policy_simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    assert report.tally.of("virtualization.virtualmachine").deleted == 1
    assert key not in vms(netbox_server, cluster_id)
