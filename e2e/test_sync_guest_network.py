"""Guest names and NIC bridges against a real NetBox and simulator: each VM interface
carries the guest OS's name of it (QEMU guest agent, by MAC; a container's `name=`) and
the node bridge it plugs into (the node device's interface, a relation a NetBox user
follows); each VM's primary addresses carry the guest's DNS name (agent host name, a
container's hostname with its node's search domain), unless the policy protects it. A
guest whose agent falls silent keeps what it had; a migrated guest's NIC follows it to
the new node's bridge, in an incremental, a targeted and a previewed run.

The tests run in file order and build on each other (one simulator, one baseline store).
"""

import pytest
from sync_fixtures import (
    Simulator,
    create_endpoint,
    create_site,
    list_all,
    props,
    run_sync,
)

from proxbox_backend.baselines import MemoryBaselines
from proxbox_backend.domain.policy import Target

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
QEMU_NIC_MODELS = ("virtio", "e1000", "e1000e", "rtl8139", "vmxnet3")


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("guestnet", "pair", 15, sync_workdir)
    try:
        sim.start().renumber("10.88.0")
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    site = create_site(netbox_server, "pbsync-guestnet")
    return create_endpoint(netbox_server, "pve-guestnet", simulator, site=site)


@pytest.fixture(scope="module")
def sync(netbox_server, simulator, endpoint):
    """A run keeping its baseline for the next (which may then be incremental)."""
    baselines = MemoryBaselines()

    def run(target: Target | None = None, dry_run: bool = False):
        report = run_sync(
            netbox_server, simulator, endpoint["id"], target=target, baselines=baselines,
            dry_run=dry_run,
        )  # fmt: skip
        assert report.ok, (report.error, report.as_dict())
        return report

    return run


@pytest.fixture(scope="module")
def first_run(sync, simulator):
    with simulator.api() as pve:
        # One QEMU guest's cloud-init search domain: its short agent host name gets it.
        qemu = agent_guests(simulator)[0]
        path = f"/nodes/{qemu['node']}/qemu/{qemu['vmid']}/config"
        assert pve.put(path, data={"searchdomain": "corp.example"}).status_code == 200
    return sync()


def guests(simulator) -> dict:
    return {vmid: g for (_kind, vmid), g in sorted(simulator.inventory()["guests"].items())}


def agent_on(config: dict) -> bool:
    """The config's `agent` (`1`, `enabled=1,fstrim_cloned_disks=1`, …) switched on."""
    first = str(config.get("agent", "0")).split(",")[0]
    return first.split("=", 1)[-1] in ("1", "yes", "on", "true")


def agent_guests(simulator, *, movable: bool = True) -> list[dict]:
    """Running QEMU guests whose agent is on (the simulator's agent answers for them);
    `movable`: the HA-managed showcase guest left out (it must not be migrated)."""
    with simulator.api() as pve:
        managed = {r["sid"] for r in pve.get("/cluster/ha/resources").json()["data"]}
    return [
        g["resource"]
        for g in guests(simulator).values()
        if g["resource"]["type"] == "qemu"
        and g["resource"]["status"] == "running"
        and agent_on(g["config"])
        and not (movable and f"vm:{g['resource']['vmid']}" in managed)
    ]


def agent_vmids(simulator) -> set[int]:
    return {r["vmid"] for r in agent_guests(simulator, movable=False)}


def config_macs(config: dict, kind: str) -> dict[str, str]:
    """net key → the NIC's MAC, upper case, as the config holds it."""
    out = {}
    for key, value in config.items():
        if not key.startswith("net") or not key[3:].isdigit():
            continue
        if kind == "lxc":
            out[key] = props(value)["hwaddr"].upper()
        else:
            model = next(p for p in value.split(",") if p.split("=")[0] in QEMU_NIC_MODELS)
            out[key] = model.split("=")[1].upper()
    return out


def vm_interfaces(netbox, cluster_id: int, vm_name: str) -> dict[str, dict]:
    """The VM's interfaces by MAC."""
    found = list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id)
    return {
        i["primary_mac_address"]["mac_address"].upper(): i
        for i in found
        if i["virtual_machine"]["name"] == vm_name
    }


def node_bridge(netbox, cluster_id: int, node: str, bridge: str) -> int:
    (device,) = list_all(netbox, "/dcim/devices/", cluster_id=cluster_id, name=node)
    (interface,) = list_all(netbox, "/dcim/interfaces/", device_id=device["id"], name=bridge)
    assert interface["type"]["value"] == "bridge"
    return interface["id"]


def primary_address(netbox, cluster_id: int, vm_name: str) -> dict:
    (vm,) = list_all(
        netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=vm_name
    )
    assert vm["primary_ip4"], vm_name
    with netbox.api() as api:
        return api.get(f"/ipam/ip-addresses/{vm['primary_ip4']['id']}/").json()


def agent_names(simulator, resource: dict) -> dict[str, str]:
    """MAC → the guest's name of that interface, as its agent reports it."""
    path = f"/nodes/{resource['node']}/qemu/{resource['vmid']}/agent/network-get-interfaces"
    with simulator.api() as pve:
        reported = pve.get(path).json()["data"]["result"]
    return {i["hardware-address"].upper(): i["name"] for i in reported if i["name"] != "lo"}


def test_first_sync_names_each_nic_and_plugs_it_into_its_nodes_bridge(
    netbox_server, simulator, first_run
):
    cluster_id = first_run.cluster["id"]
    checked = {"qemu": 0, "lxc": 0}
    for guest in guests(simulator).values():
        resource, config = guest["resource"], guest["config"]
        interfaces = vm_interfaces(netbox_server, cluster_id, resource["name"])
        running_agent = resource["vmid"] in agent_vmids(simulator)
        names = agent_names(simulator, resource) if running_agent else {}
        for key, mac in config_macs(config, resource["type"]).items():
            nic = props(config[key])
            fields = interfaces[mac]["custom_fields"]
            bridge = node_bridge(netbox_server, cluster_id, resource["node"], nic["bridge"])
            assert fields["proxbox_bridge"]["id"] == bridge, (resource["name"], key)
            if resource["type"] == "lxc":
                assert fields["proxbox_guest_interface"] == nic["name"]
                checked["lxc"] += 1
            elif running_agent:
                assert fields["proxbox_guest_interface"] == names[mac]
                assert names[mac] != interfaces[mac]["name"]  # ens18 beside net0
                checked["qemu"] += 1
            else:
                assert fields["proxbox_guest_interface"] is None
    assert checked["qemu"] and checked["lxc"], checked
    # The relation is one a NetBox user follows: filter the VM interfaces by the bridge.
    node = agent_guests(simulator)[0]["node"]
    bridge = node_bridge(netbox_server, cluster_id, node, "vmbr0")
    plugged = list_all(netbox_server, "/virtualization/interfaces/", cf_proxbox_bridge=bridge)
    assert plugged and all(i["custom_fields"]["proxbox_bridge"]["id"] == bridge for i in plugged)
    by_name = list_all(
        netbox_server, "/virtualization/interfaces/", cluster_id=cluster_id,
        cf_proxbox_guest_interface="ens18",
    )  # fmt: skip
    assert by_name and all(
        i["custom_fields"]["proxbox_guest_interface"] == "ens18" for i in by_name
    )


def test_primary_addresses_carry_the_guests_dns_name(netbox_server, simulator, first_run):
    cluster_id = first_run.cluster["id"]
    with simulator.api() as pve:
        search = {
            n["node"]: pve.get(f"/nodes/{n['node']}/dns").json()["data"].get("search", "")
            for n in pve.get("/nodes").json()["data"]
        }
    searched = agent_guests(simulator)[0]
    seen = set()
    for guest in guests(simulator).values():
        resource, config = guest["resource"], guest["config"]
        if resource["type"] == "lxc":
            expected = f"{config['hostname']}.{search[resource['node']].split()[0]}"
        elif resource["vmid"] in agent_vmids(simulator):
            path = f"/nodes/{resource['node']}/qemu/{resource['vmid']}/agent/get-host-name"
            with simulator.api() as pve:
                host = pve.get(path).json()["data"]["result"]["host-name"]
            domain = ".corp.example" if resource["vmid"] == searched["vmid"] else ""
            expected = f"{host}{domain}".lower()
        else:
            expected = ""  # a stopped VM, or one without an agent: nothing says its name
        assert primary_address(netbox_server, cluster_id, resource["name"])["dns_name"] == (
            expected
        ), resource["name"]
        seen.add(resource["type"] if expected else "unnamed")
    assert {"qemu", "lxc"} <= seen, seen


def test_a_silent_agent_leaves_the_names_as_they_are(netbox_server, simulator, sync, first_run):
    cluster_id = first_run.cluster["id"]
    resource = agent_guests(simulator)[-1]
    before_ifaces = vm_interfaces(netbox_server, cluster_id, resource["name"])
    before_dns = primary_address(netbox_server, cluster_id, resource["name"])["dns_name"]
    assert before_dns and all(
        i["custom_fields"]["proxbox_guest_interface"] for i in before_ifaces.values()
    )
    with simulator.api() as pve:
        # Paused: Proxmox lists it running, but its agent does not answer.
        upid = pve.post(f"/nodes/{resource['node']}/qemu/{resource['vmid']}/status/suspend")
        simulator.wait_task(upid.json()["data"])
    try:
        report = sync()
        assert any(resource["name"] in w for w in report.warnings), report.warnings
        after = vm_interfaces(netbox_server, cluster_id, resource["name"])
        assert {m: i["custom_fields"] for m, i in after.items()} == {
            m: i["custom_fields"] for m, i in before_ifaces.items()
        }
        assert primary_address(netbox_server, cluster_id, resource["name"])["dns_name"] == (
            before_dns
        )
    finally:
        with simulator.api() as pve:
            upid = pve.post(f"/nodes/{resource['node']}/qemu/{resource['vmid']}/status/resume")
            simulator.wait_task(upid.json()["data"])


def set_policy(netbox, endpoint, **policy) -> None:
    with netbox.api() as api:
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json=policy)
    assert response.status_code == 200, response.text


def test_a_protected_dns_name_stays_as_the_operator_set_it(
    netbox_server, simulator, endpoint, sync, first_run
):
    cluster_id = first_run.cluster["id"]
    resource = agent_guests(simulator)[0]
    address = primary_address(netbox_server, cluster_id, resource["name"])
    synced = address["dns_name"]
    with netbox_server.api() as api:
        edited = api.patch(
            f"/ipam/ip-addresses/{address['id']}/", json={"dns_name": "operator.example.net"}
        )
        assert edited.status_code == 200, edited.text
    set_policy(netbox_server, endpoint, protected_fields=["dns_name"])
    try:
        sync()
        kept = primary_address(netbox_server, cluster_id, resource["name"])["dns_name"]
        assert kept == "operator.example.net"
    finally:
        set_policy(netbox_server, endpoint, protected_fields=[])
    sync()
    assert primary_address(netbox_server, cluster_id, resource["name"])["dns_name"] == synced


def migrate(simulator, resource: dict, target: str) -> None:
    with simulator.api() as pve:
        answer = pve.post(
            f"/nodes/{resource['node']}/qemu/{resource['vmid']}/migrate",
            data={"target": target, "online": 1},
        )
        assert answer.status_code == 200, answer.text
    simulator.wait_task(answer.json()["data"])


def bridges_of(netbox, cluster_id: int, vm_name: str) -> dict[str, int | None]:
    return {
        i["name"]: (i["custom_fields"]["proxbox_bridge"] or {}).get("id")
        for i in vm_interfaces(netbox, cluster_id, vm_name).values()
    }


def test_a_migrated_guests_nic_follows_it_to_the_new_nodes_bridge(
    netbox_server, simulator, sync, first_run
):
    cluster_id = first_run.cluster["id"]
    sync()  # the baseline of the policy as it is now: the next run may be incremental
    resource = agent_guests(simulator)[0]
    source = resource["node"]
    target = next(
        e["name"]
        for e in simulator.inventory()["status"]
        if e.get("type") == "node" and e["name"] != source
    )
    old = node_bridge(netbox_server, cluster_id, source, "vmbr0")
    new = node_bridge(netbox_server, cluster_id, target, "vmbr0")
    assert bridges_of(netbox_server, cluster_id, resource["name"])["net0"] == old
    migrate(simulator, resource, target)

    preview = sync(dry_run=True)
    updates = preview.plan.as_dict()["object_types"]["virtualization.vminterface"]["updates"]
    assert {"old": {"proxbox_bridge": old}, "new": {"proxbox_bridge": new}} in [
        u["changes"].get("custom_fields") for u in updates
    ]
    report = sync()
    assert report.run_mode["mode"] == "incremental", report.run_mode
    assert bridges_of(netbox_server, cluster_id, resource["name"])["net0"] == new

    # Back again, and a targeted "Sync now" of that guest only.
    moved = {**resource, "node": target}
    migrate(simulator, moved, source)
    sync(target=Target.parse(guest=f"qemu/{resource['vmid']}"))
    assert bridges_of(netbox_server, cluster_id, resource["name"])["net0"] == old
