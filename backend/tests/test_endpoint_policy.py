"""The endpoint's sync policy in the planners: default VM role, descriptions, VRF."""

from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Guest, GuestAddress, GuestNic
from proxbox_backend.gateways.netbox import SOURCE_FIELD
from proxbox_backend.stages import guests, ips

MANAGED = [{"id": 1, "slug": "proxbox"}]
NOTES = "Web frontend\n\nOwner: **team-a**"


def guest(**fields) -> Guest:
    base = dict(
        kind="qemu",
        vmid=101,
        name="web-001",
        node="pve1",
        status="running",
        vcpus=2.0,
        memory_mb=2048,
        description=NOTES,
    )
    return Guest(**{**base, **fields})


def placement(**fields) -> guests.GuestPlacement:
    return guests.GuestPlacement(7, 3, None, {"pve1": 11}, **fields)


def vm(**fields) -> dict:
    base = {
        "id": 50,
        "name": "web-001",
        "status": {"value": "active"},
        "vcpus": 2.0,
        "memory": 2048,
        "cluster": {"id": 7},
        "device": {"id": 11},
        "site": {"id": 3},
        "tenant": None,
        "custom_fields": {SOURCE_FIELD: "cluster-7/qemu/101"},
        "tags": MANAGED,
        "description": "",
        "comments": "",
    }
    return {**base, **fields}


def test_endpoint_record_reads_the_policy():
    endpoint = Endpoint.from_api(
        {
            "id": 1,
            "name": "pve",
            "host": "pve",
            "vrf": {"id": 4},
            "vm_role": {"id": 9},
            "sync_descriptions": True,
        }
    )
    assert (endpoint.vrf_id, endpoint.vm_role_id, endpoint.sync_descriptions) == (4, 9, True)
    bare = Endpoint.from_api({"id": 1, "name": "pve", "host": "pve"})
    assert (bare.vrf_id, bare.vm_role_id, bare.sync_descriptions) == (None, None, False)


def test_the_default_role_is_given_on_creation_only():
    (create,) = guests.plan([guest()], [], placement(role_id=9)).creates
    assert create.payload["role"] == 9
    operator_chose = vm(role={"id": 12})
    assert guests.plan([guest()], [operator_chose], placement(role_id=9)).writes == 0


def test_descriptions_are_synced_only_when_the_endpoint_opts_in():
    assert guests.plan([guest()], [vm()], placement()).writes == 0
    (update,) = guests.plan([guest()], [vm()], placement(sync_descriptions=True)).updates
    assert update.changes == {"description": "Web frontend", "comments": NOTES}
    synced = vm(description="Web frontend", comments=NOTES)
    assert guests.plan([guest()], [synced], placement(sync_descriptions=True)).writes == 0


def test_addresses_are_created_in_the_endpoints_vrf_and_moved_into_it():
    nic = GuestNic("net0", "net0", "AA:BB:CC:00:00:01", True)
    owned = [(50, guest(nics=(nic,), addresses=(GuestAddress("net0", "10.0.0.5/24"),)))]
    interface_ids = {(50, "net0"): 70}
    (create,) = ips.plan(owned, interface_ids, [], vrf_id=4).creates
    assert create.payload["vrf"] == 4
    current = {
        "id": 80,
        "address": "10.0.0.5/24",
        "vrf": None,
        "assigned_object_type": "virtualization.vminterface",
        "assigned_object_id": 70,
        "tags": MANAGED,
    }
    (update,) = ips.plan(owned, interface_ids, [current], vrf_id=4).updates
    assert update.changes == {"vrf": 4}
    assert ips.plan(owned, interface_ids, [{**current, "vrf": {"id": 4}}], vrf_id=4).writes == 0
    assert ips.plan(owned, interface_ids, [current]).writes == 0
