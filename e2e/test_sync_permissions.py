"""The backend's NetBox user with exactly the permissions `proxbox-sync permissions`
lists, as an operator sets it up: not a superuser, one ObjectPermission per row of the
command's output, a token provisioned for it. In a NetBox that has never seen a sync (so
the run must create its custom fields, tag, cluster type and device type itself, and
widen an earlier version's source field to devices), every
feature a policy can switch on is on: SDN (a VLAN zone's VNet and a VXLAN zone's, with
subnets and a DHCP range), opt-in prefixes, records (the showcase's snapshots,
replication and HA), and the Proxmox token comes from the endpoint through the
credentials API. The first run creates everything, a second deletes what Proxmox lost;
both exit 0 through the CLI and record themselves on the cluster's sidecar, and NetBox's
change log shows the user wrote each family.

A NetBox of its own (a fresh database). The tests run in file order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sync_fixtures import (
    NetBoxServer,
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    object_changes_since,
    pve_ok,
    run_cli,
)

from proxbox_backend.gateways.netbox import RUN_FIELDS, SOURCE_FIELD
from proxbox_devstack.redis_databases import url_names_database

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
NETWORK = "10.105.0"  # the renumber below (e2e/test_fixture_networks.py)
VLAN_SUBNET, VXLAN_SUBNET = "10.105.10.0/24", "10.105.20.0/24"
USERNAME, PASSWORD = "pbsync-backend", "Pbsync-Backend-Pass-1"
# What a first run in an empty NetBox creates, family by family.
CREATED = {
    "extras.customfield",
    "extras.tag",
    "virtualization.clustertype",
    "dcim.devicerole",
    "dcim.manufacturer",
    "dcim.devicetype",
    "dcim.platform",
    "virtualization.cluster",
    "dcim.device",
    "dcim.interface",
    "virtualization.virtualmachine",
    "virtualization.vminterface",
    "virtualization.virtualdisk",
    "ipam.ipaddress",
    "ipam.vlangroup",
    "ipam.vlan",
    "ipam.prefix",
    "ipam.iprange",
    "vpn.l2vpn",
    "vpn.l2vpntermination",
    "netbox_proxbox.proxmoxstorage",
    "netbox_proxbox.proxmoxsnapshot",
    "netbox_proxbox.proxmoxreplicationjob",
    "netbox_proxbox.proxmoxharesource",
}


@pytest.fixture(scope="module")
def workdir(sync_workdir):
    path = sync_workdir / "permissions"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def netbox(workdir):
    server = NetBoxServer(workdir)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def simulator(workdir):
    simulator = Simulator("permissions", "pair", 47, workdir)
    try:
        simulator.start().renumber(NETWORK)
        yield simulator
    finally:
        simulator.stop()


def listed_permissions() -> dict[str, list[str]]:
    """`proxbox-sync permissions --json`, as the operator reads it."""
    done = subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", "permissions", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def backend_token(netbox) -> str:
    """A user holding exactly the listed permissions: one ObjectPermission per set of
    actions, as the operator guide sets it up."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for object_type, actions in listed_permissions().items():
        groups.setdefault(tuple(actions), []).append(object_type)
    with netbox.api() as api:
        user = api.post("/users/users/", json={"username": USERNAME, "password": PASSWORD})
        assert user.status_code == 201, user.text
        for actions, object_types in groups.items():
            permission = api.post(
                "/users/permissions/",
                json={
                    "name": f"proxbox backend: {', '.join(actions)}",
                    "object_types": object_types,
                    "actions": list(actions),
                    "users": [user.json()["id"]],
                },
            )
            assert permission.status_code == 201, permission.text
    return netbox.provision_token(USERNAME, PASSWORD)


def qemu_guests(simulator) -> list[dict]:
    """The simulator's QEMU guests (templates aside), in key order."""
    return [
        g["resource"]
        for _key, g in sorted(simulator.inventory()["guests"].items())
        if g["resource"]["type"] == "qemu" and not g["resource"].get("template")
    ]


@pytest.fixture(scope="module")
def endpoint(netbox, simulator) -> dict:
    """An earlier version's source custom field (VMs only: the run widens it to devices);
    every opt-in on; SDN in Proxmox: a VLAN zone and a VXLAN zone, a VNet and a subnet
    in each (the VLAN one with a DHCP range), one QEMU guest with a NIC on each VNet."""
    with netbox.api() as api:
        older = {**RUN_FIELDS[SOURCE_FIELD], "object_types": ["virtualization.virtualmachine"]}
        response = api.post("/extras/custom-fields/", json=older)
        assert response.status_code == 201, response.text
    site = create_site(netbox, "pbsync-permissions")
    endpoint = create_endpoint(netbox, "pve-permissions", simulator, site=site)
    with netbox.api() as api:
        vrf = api.post("/ipam/vrfs/", json={"name": "pbsync-permissions"})
        assert vrf.status_code == 201, vrf.text
        tenant = api.post(
            "/tenancy/tenants/", json={"name": "pbsync-perms", "slug": "pbsync-perms"}
        )
        assert tenant.status_code == 201, tenant.text
        policy = {
            "vrf": vrf.json()["id"],
            "tenant": tenant.json()["id"],
            "sdn_mode": "always",
            "prefixes_mode": "always",
            "removed_guests": "delete",
        }
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json=policy)
        assert response.status_code == 200, response.text
    sdn = "/cluster/sdn"
    with simulator.api() as pve:
        pve_ok(pve.post(f"{sdn}/zones", data={"zone": "lan", "type": "vlan", "bridge": "vmbr0"}))
        pve_ok(pve.post(f"{sdn}/zones", data={"zone": "ovl", "type": "vxlan", "peers": "10.105.0.251"}))  # fmt: skip
        pve_ok(pve.post(f"{sdn}/vnets", data={"vnet": "web", "zone": "lan", "tag": 410}))
        pve_ok(pve.post(f"{sdn}/vnets", data={"vnet": "tun", "zone": "ovl", "tag": 5410}))
        pve_ok(
            pve.post(
                f"{sdn}/vnets/web/subnets",
                data={
                    "subnet": VLAN_SUBNET,
                    "type": "subnet",
                    "gateway": "10.105.10.1",
                    "dhcp-range": ["start-address=10.105.10.100,end-address=10.105.10.150"],
                },
            )
        )
        pve_ok(
            pve.post(
                f"{sdn}/vnets/tun/subnets",
                data={"subnet": VXLAN_SUBNET, "type": "subnet", "gateway": "10.105.20.1"},
            )
        )
        simulator.wait_task(pve_ok(pve.put(sdn)))
    guest = qemu_guests(simulator)[0]
    with simulator.api() as pve:
        pve_ok(
            pve.put(
                f"/nodes/{guest['node']}/qemu/{guest['vmid']}/config",
                data={
                    "net7": "virtio=BC:24:11:A5:00:07,bridge=web",
                    "net8": "virtio=BC:24:11:A5:00:08,bridge=tun",
                },
            )
        )
    return endpoint


def baselines_redis(netbox) -> str:
    """Where the runs keep their baselines (incremental runs read NetBox's change log):
    this NetBox's own tasks database, under keys of the backend's."""
    url = os.environ["PROXBOX_REDIS_URL"]
    if netbox.redis_lease is None or url_names_database(url):
        return url
    return f"{url.rstrip('/')}/{netbox.redis_lease.databases.tasks}"


def sync_as_backend(netbox, simulator, endpoint, token) -> dict:
    """`proxbox-sync run --json` with the backend user's token and no Proxmox token of its
    own: the endpoint's comes through the credentials API (`reveal_credentials`); with
    baselines, so the change log is read; no warning (the IPAM checks read too)."""
    done = run_cli(
        netbox,
        simulator,
        "run",
        "--endpoint",
        str(endpoint["id"]),
        "--json",
        token=token,
        PROXBOX_PROXMOX_CA_BUNDLE=simulator.ca_bundle,
        PROXBOX_BACKEND_REDIS_URL=baselines_redis(netbox),
    )
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    assert done.returncode == 0, (done.stderr[-2000:], report.get("error"), report.get("failures"))
    assert report["ok"] and not report["read_failures"], report
    assert report["sync_state"] == "recorded", report["sync_state"]  # on the cluster's sidecar
    assert not report["warnings"], report["warnings"]
    return report


def written_by_backend(netbox, since: int) -> dict[str, set[str]]:
    """Object type → the actions NetBox's change log records the backend user doing."""
    written: dict[str, set[str]] = {}
    for change in object_changes_since(netbox, since):
        if (change.get("user") or {}).get("username") == USERNAME:
            written.setdefault(change["changed_object_type"], set()).add(change["action"]["value"])
    return written


def test_the_listed_permissions_sync_every_feature_into_an_empty_netbox(
    netbox, simulator, endpoint, backend_token
):
    since = change_marker(netbox)
    sync_as_backend(netbox, simulator, endpoint, backend_token)
    written = written_by_backend(netbox, since)
    created = {object_type for object_type, actions in written.items() if "create" in actions}
    assert created >= CREATED, sorted(CREATED - created)
    with netbox.api() as api:
        (source,) = api.get("/extras/custom-fields/", params={"name": SOURCE_FIELD}).json()[
            "results"
        ]
    assert set(source["object_types"]) == {"dcim.device", "virtualization.virtualmachine"}


def test_the_listed_permissions_change_and_delete_what_proxmox_changed(
    netbox, simulator, endpoint, backend_token
):
    guest, other = qemu_guests(simulator)[:2]
    qemu = f"/nodes/{guest['node']}/qemu/{guest['vmid']}"
    with simulator.api() as pve:
        # Another guest's NIC gets a new MAC (NetBox moves it to a new MAC address object).
        other_config = f"/nodes/{other['node']}/qemu/{other['vmid']}/config"
        net0 = pve_ok(pve.get(other_config))["net0"]
        model, _, rest = net0.partition("=")
        new_net0 = f"{model}=BC:24:11:A5:00:99,{rest.partition(',')[2]}"
        pve_ok(pve.put(other_config, data={"net0": new_net0}))
        # The guest with the SDN NICs goes, and with it the VXLAN VNet's subnet and VNet.
        if pve_ok(pve.get(f"{qemu}/status/current"))["status"] == "running":
            simulator.wait_task(pve_ok(pve.post(f"{qemu}/status/stop")))
        # purge: out of its HA resource and replication job too (PVE refuses without it).
        simulator.wait_task(pve_ok(pve.delete(qemu, params={"purge": 1})))
        (subnet,) = pve_ok(pve.get("/cluster/sdn/vnets/tun/subnets"))
        pve_ok(pve.delete(f"/cluster/sdn/vnets/tun/subnets/{subnet['subnet']}"))
        pve_ok(pve.delete("/cluster/sdn/vnets/tun"))
        simulator.wait_task(pve_ok(pve.put("/cluster/sdn")))
    since = change_marker(netbox)
    sync_as_backend(netbox, simulator, endpoint, backend_token)
    written = written_by_backend(netbox, since)
    deleted = {object_type for object_type, actions in written.items() if "delete" in actions}
    gone = {
        "virtualization.virtualmachine",
        "virtualization.vminterface",
        "virtualization.virtualdisk",
        "vpn.l2vpn",
        "vpn.l2vpntermination",
        "ipam.prefix",
        "netbox_proxbox.proxmoxharesource",
        "netbox_proxbox.proxmoxsnapshot",
    }
    assert deleted >= gone, written
    assert "dcim.macaddress" in written, written
