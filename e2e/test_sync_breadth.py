"""Sync breadth: tags, VLANs, platforms, templates.

Every managed object carries `proxbox`; Proxmox guest tags become `pve-*` tags on the
VM, merged with the operator's; removing a tag in Proxmox removes only that one. NIC
`tag=`/`trunks=` become VLANs in the endpoint's VLAN group and the interface's 802.1Q
mode. The guest agent's OS (else `ostype`) becomes the VM's platform. Templates stay
out unless the backend is asked to sync them.

The tests run in file order and build on each other (one NetBox, one simulator).
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

from proxbox_backend.domain.policy import Target


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("tags", "single", 6, sync_workdir)
    try:
        sim.start().renumber("10.80.0")
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    site = create_site(netbox_server, "pbsync-tags")
    return create_endpoint(netbox_server, "pve-tags", simulator, site=site)


def sync(netbox_server, simulator, endpoint, **overrides):
    report = run_sync(netbox_server, simulator, endpoint["id"], **overrides)
    summary = report.as_dict()
    assert report.ok, (summary["error"], summary["failures"], summary["warnings"])
    return report


def proxmox_tags(config: dict) -> set[str]:
    return {t for t in config.get("tags", "").replace(",", ";").split(";") if t}


def slugs(obj: dict) -> set[str]:
    return {t["slug"] for t in obj["tags"]}


def tag_slugs_in_netbox(netbox_server) -> set[str]:
    return {t["slug"] for t in list_all(netbox_server, "/extras/tags/")}


@pytest.fixture(scope="module")
def tags_before(netbox_server, endpoint):
    """Tags other suites of the session may have created already."""
    return tag_slugs_in_netbox(netbox_server)


@pytest.fixture(scope="module")
def first_run(netbox_server, simulator, endpoint, tags_before):
    return sync(netbox_server, simulator, endpoint)


def test_first_sync_tags_every_managed_object(netbox_server, simulator, first_run, tags_before):
    cluster_id = first_run.cluster["id"]
    guests = simulator.inventory()["guests"]
    assert any(proxmox_tags(g["config"]) for g in guests.values()), "the seed has guest tags"
    vms = list_all(netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    by_name = {vm["name"]: vm for vm in vms}
    for guest in guests.values():
        vm = by_name[guest["resource"]["name"]]
        expected = {"proxbox"} | {f"pve-{t}" for t in proxmox_tags(guest["config"])}
        assert slugs(vm) == expected, vm["name"]
    vm_ids = [vm["id"] for vm in vms]
    components = (
        list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
        + list_all(netbox_server, "/virtualization/interfaces/", cluster_id=cluster_id)
        + list_all(netbox_server, "/virtualization/virtual-disks/", virtual_machine_id=vm_ids)
        + list_all(netbox_server, "/ipam/ip-addresses/", virtual_machine_id=vm_ids)
    )
    assert components and all("proxbox" in slugs(obj) for obj in components)
    seen = sorted({t for g in guests.values() for t in proxmox_tags(g["config"])})
    with netbox_server.api() as api:
        cluster = api.get(f"/virtualization/clusters/{cluster_id}/").json()
        tag = api.get("/extras/tags/", params={"slug": f"pve-{seen[0]}"}).json()["results"]
    assert slugs(cluster) == {"proxbox"}
    assert [t["name"] for t in tag] == [f"pve:{seen[0]}"]
    needed = {"proxbox"} | {f"pve-{t}" for t in seen}
    assert needed <= tag_slugs_in_netbox(netbox_server)
    assert first_run.tally.of("extras.tag").created == len(needed - tags_before)


def test_resync_writes_nothing(netbox_server, simulator, endpoint, first_run):
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.writes == 0, report.as_dict()["counters"]
    assert_only_reflection_written(object_changes_since(netbox_server, since))


def test_proxmox_tag_changes_leave_the_operators_tags(
    netbox_server, simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    guests = simulator.inventory()["guests"]
    resource, config = next(
        (g["resource"], g["config"]) for g in guests.values() if proxmox_tags(g["config"])
    )
    before = tag_slugs_in_netbox(netbox_server)
    removed = sorted(proxmox_tags(config))[0]
    remaining = proxmox_tags(config) - {removed}
    (vm,) = list_all(
        netbox_server,
        "/virtualization/virtual-machines/",
        cluster_id=cluster_id,
        name=resource["name"],
    )
    with netbox_server.api() as api:
        made = api.post("/extras/tags/", json={"name": "owner-team-a", "slug": "owner-team-a"})
        assert made.status_code == 201, made.text
        tags = [{"slug": s} for s in slugs(vm) | {"owner-team-a"}]
        answer = api.patch(f"/virtualization/virtual-machines/{vm['id']}/", json={"tags": tags})
        assert answer.status_code == 200, answer.text
    with simulator.api() as pve:
        answer = pve.put(
            f"/nodes/{resource['node']}/{resource['type']}/{resource['vmid']}/config",
            data={"tags": ";".join(sorted(remaining | {"blue-team"}))},
        )
        assert answer.status_code == 200, answer.text

    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("virtualization.virtualmachine").updated == 1
    # pve-blue-team, on demand (unless another suite's guests made it already)
    assert report.tally.of("extras.tag").created == int("pve-blue-team" not in before)
    with netbox_server.api() as api:
        after = api.get(f"/virtualization/virtual-machines/{vm['id']}/").json()
        still = api.get("/extras/tags/", params={"slug": f"pve-{removed}"}).json()["count"]
    assert slugs(after) == {"proxbox", "owner-team-a", "pve-blue-team"} | {
        f"pve-{t}" for t in remaining
    }
    assert still == 1  # the tag object stays: other VMs may carry it


# -- VLANs ----------------------------------------------------------------------------------


def set_nic(simulator: Simulator, resource: dict, config: dict, extra: str) -> None:
    """Rewrite net0 with its MAC and bridge kept, plus `extra` (e.g. tag=10)."""
    kept = [p for p in config["net0"].split(",") if not p.startswith(("tag=", "trunks="))]
    path = f"/nodes/{resource['node']}/{resource['type']}/{resource['vmid']}/config"
    with simulator.api() as pve:
        answer = pve.put(path, data={"net0": ",".join([*kept, *([extra] if extra else [])])})
        assert answer.status_code == 200, answer.text


def interface_of(netbox_server, cluster_id: int, vm_name: str, name: str) -> dict:
    found = list_all(netbox_server, "/virtualization/interfaces/", cluster_id=cluster_id)
    return next(i for i in found if i["virtual_machine"]["name"] == vm_name and i["name"] == name)


def test_nic_vlans_become_vlans_of_the_endpoints_group(
    netbox_server, simulator, endpoint, first_run
):
    cluster_id = first_run.cluster["id"]
    guests = simulator.inventory()["guests"]
    qemu = next(g for (kind, _), g in sorted(guests.items()) if kind == "qemu")
    lxc = next((g for (kind, _), g in sorted(guests.items()) if kind == "lxc"), None)
    set_nic(simulator, qemu["resource"], qemu["config"], "tag=10,trunks=20;30")
    if lxc is not None:
        set_nic(simulator, lxc["resource"], lxc["config"], "tag=10")

    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("ipam.vlan").created == 3
    assert report.tally.of("ipam.vlangroup").created == 1
    (group,) = list_all(netbox_server, "/ipam/vlan-groups/", slug=f"proxbox-cluster-{cluster_id}")
    assert (group["scope_type"], group["scope_id"]) == ("virtualization.cluster", cluster_id)
    vlans = {v["vid"]: v for v in list_all(netbox_server, "/ipam/vlans/", group_id=group["id"])}
    assert set(vlans) == {10, 20, 30}
    assert all("proxbox" in slugs(v) for v in vlans.values())

    trunk = interface_of(netbox_server, cluster_id, qemu["resource"]["name"], "net0")
    assert trunk["mode"]["value"] == "tagged"
    assert trunk["untagged_vlan"]["id"] == vlans[10]["id"]
    assert {v["id"] for v in trunk["tagged_vlans"]} == {vlans[20]["id"], vlans[30]["id"]}
    if lxc is not None:
        name = next(p[5:] for p in lxc["config"]["net0"].split(",") if p.startswith("name="))
        access = interface_of(netbox_server, cluster_id, lxc["resource"]["name"], name)
        assert access["mode"]["value"] == "access"
        assert access["untagged_vlan"]["id"] == vlans[10]["id"]

    # Nothing changed in Proxmox: nothing written.
    assert sync(netbox_server, simulator, endpoint).tally.writes == 0

    # The trunk goes: the port becomes an access port, its tagged VLANs are cleared, and
    # the VLAN objects stay for whoever documents them.
    set_nic(simulator, qemu["resource"], qemu["config"], "tag=10")
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("virtualization.vminterface").updated == 1
    trunk = interface_of(netbox_server, cluster_id, qemu["resource"]["name"], "net0")
    assert (trunk["mode"]["value"], trunk["tagged_vlans"]) == ("access", [])
    assert len(list_all(netbox_server, "/ipam/vlans/", group_id=group["id"])) == 3


# -- platforms and templates ------------------------------------------------------------------

# What the simulator's agent answers per ostype (Debian 12 for Linux), and PVE's ostype
# hints: derived here independently of the backend's tables.
AGENT_OS = {"l26": "debian-12", "win11": "mswindows-11", "win10": "mswindows-10"}
OSTYPE = {"l26": "linux", "win11": "mswindows-11", "win10": "mswindows-10", "debian": "debian"}


def test_vm_platforms_from_the_agent_else_the_ostype(netbox_server, simulator, first_run):
    cluster_id = first_run.cluster["id"]
    vms = list_all(netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    platform_of = {vm["name"]: (vm["platform"] or {}).get("slug") for vm in vms}
    checked = set()
    for (kind, _), guest in simulator.inventory()["guests"].items():
        resource, config = guest["resource"], guest["config"]
        ostype = config.get("ostype", "l26")
        agent = config.get("agent", "0").startswith("1")
        if kind == "qemu" and agent and resource["status"] == "running":
            expected = AGENT_OS.get(ostype, "debian-12")
        else:
            expected = OSTYPE.get(ostype)
        assert platform_of[resource["name"]] == expected, resource["name"]
        checked.add(expected)
    assert len(checked) >= 2, checked
    with netbox_server.api() as api:
        debian = api.get("/dcim/platforms/", params={"slug": "debian-12"}).json()["results"]
    assert [p["name"] for p in debian] == ["Debian GNU/Linux 12"]


def test_templates_stay_out_unless_asked_for(netbox_server, simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    node = next(iter(simulator.inventory()["guests"].values()))["resource"]["node"]
    simulator.create_template(node, 950, "tpl-base", memory=1024)

    def template_vms():
        return list_all(
            netbox_server,
            "/virtualization/virtual-machines/",
            cluster_id=cluster_id,
            name="tpl-base",
        )

    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("virtualization.virtualmachine").created == 0
    assert template_vms() == []

    report = sync(netbox_server, simulator, endpoint, templates="sync")
    assert report.tally.of("virtualization.virtualmachine").created == 1
    (template,) = template_vms()
    assert {"proxbox", "proxbox-template"} <= slugs(template)
    assert template["status"]["value"] == "offline"
    assert sync(netbox_server, simulator, endpoint, templates="sync").tally.writes == 0


# -- node networking -------------------------------------------------------------------------


def test_node_interfaces_from_the_node_network(netbox_server, simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    (device,) = list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
    with simulator.api() as pve:
        network = pve.get(f"/nodes/{device['name']}/network").json()["data"]
    kinds = {"eth": "other", "bridge": "bridge", "bond": "lag", "vlan": "virtual"}
    expected = {n["iface"]: kinds[n["type"]] for n in network if n["type"] in kinds}
    interfaces = {
        i["name"]: i for i in list_all(netbox_server, "/dcim/interfaces/", device_id=device["id"])
    }
    assert {name: i["type"]["value"] for name, i in interfaces.items()} == expected
    assert all("proxbox" in slugs(i) for i in interfaces.values())
    for entry in network:
        for port in (entry.get("bridge_ports") or "").split():
            assert interfaces[port]["bridge"]["id"] == interfaces[entry["iface"]]["id"]
    assert any(i["bridge"] for i in interfaces.values()), "the seed bridges a NIC"

    # An operator's interface on the node stays; the sync's unchanged ones write nothing.
    with netbox_server.api() as api:
        made = api.post(
            "/dcim/interfaces/", json={"device": device["id"], "name": "bmc", "type": "1000base-t"}
        )
        assert made.status_code == 201, made.text
    report = sync(netbox_server, simulator, endpoint, templates="sync")
    assert report.tally.writes == 0, report.as_dict()["counters"]
    assert report.tally.of("dcim.interface").unchanged == len(expected)
    names = {
        i["name"] for i in list_all(netbox_server, "/dcim/interfaces/", device_id=device["id"])
    }
    assert names == set(expected) | {"bmc"}


def device_addresses(netbox_server, device_id: int) -> dict[str, dict]:
    found = list_all(netbox_server, "/ipam/ip-addresses/", device_id=device_id)
    return {ip["address"]: ip for ip in found}


def test_node_addresses_and_primary_ip(netbox_server, simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    (device,) = list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
    given = simulator.node_addresses(0)  # what renumber gave the one node, through its API
    with simulator.api() as pve:
        network = {
            n["iface"]: n for n in pve.get(f"/nodes/{device['name']}/network").json()["data"]
        }
    assert network["vmbr0"]["cidr"] == given["vmbr0"]["cidr"]
    interfaces = {
        i["name"]: i["id"]
        for i in list_all(netbox_server, "/dcim/interfaces/", device_id=device["id"])
    }
    addresses = device_addresses(netbox_server, device["id"])
    expected = {
        given["vmbr0"]["cidr"]: "vmbr0",
        given["vmbr0"]["cidr6"]: "vmbr0",
        given["vmbr1"]["cidr"]: "vmbr1",
    }
    name_of = {interface_id: name for name, interface_id in interfaces.items()}
    assert {a: name_of[ip["assigned_object_id"]] for a, ip in addresses.items()} == expected
    assert all("proxbox" in slugs(ip) for ip in addresses.values())
    assert all(ip["vrf"] is None for ip in addresses.values())  # the endpoint has no VRF
    # /cluster/status's address is not on the node any more: the gateway bridge's addresses
    with netbox_server.api() as api:
        device = api.get(f"/dcim/devices/{device['id']}/").json()
    assert device["primary_ip4"]["id"] == addresses[given["vmbr0"]["cidr"]]["id"]
    assert device["primary_ip6"]["id"] == addresses[given["vmbr0"]["cidr6"]]["id"]

    # Readdressed in Proxmox, next to an address the operator documented on the same bridge:
    # the old synced one goes, the new one comes, the operator's stays.
    old = given["vmbr1"]["cidr"]
    new = old.rsplit(".", 1)[0] + ".99/24"
    mine = old.rsplit(".", 1)[0] + ".200/24"
    with netbox_server.api() as api:
        made = api.post(
            "/ipam/ip-addresses/",
            json={
                "address": mine,
                "assigned_object_type": "dcim.interface",
                "assigned_object_id": interfaces["vmbr1"],
            },
        )
        assert made.status_code == 201, made.text
    with simulator.api() as pve:
        answer = pve.put(
            f"/nodes/{device['name']}/network/vmbr1", data={"type": "bridge", "cidr": new}
        )
        assert answer.status_code == 200, answer.text
        simulator.wait_if_task(pve.put(f"/nodes/{device['name']}/network"))
    report = sync(netbox_server, simulator, endpoint, templates="sync")
    counted = report.tally.of("ipam.ipaddress")
    assert (counted.created, counted.deleted, counted.updated) == (1, 1, 0)
    assert set(device_addresses(netbox_server, device["id"])) == set(expected) - {old} | {
        new,
        mine,
    }
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint, templates="sync")
    assert report.tally.writes == 0, report.as_dict()["counters"]
    assert_only_reflection_written(object_changes_since(netbox_server, since))


def test_a_node_targeted_sync_refreshes_that_nodes_network(
    netbox_server, simulator, endpoint, first_run
):
    """ "Sync now" on a node's page: its interfaces and addresses follow Proxmox too."""
    cluster_id = first_run.cluster["id"]
    (device,) = list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
    node = device["name"]
    with simulator.api() as pve:
        vmbr1 = pve.get(f"/nodes/{node}/network/vmbr1").json()["data"]
        moved = vmbr1["cidr"].rsplit(".", 1)[0] + ".98/24"
        answer = pve.put(
            f"/nodes/{node}/network/vmbr1",
            data={"type": "bridge", "cidr": moved, "comments": "storage network"},
        )
        assert answer.status_code == 200, answer.text
        simulator.wait_if_task(pve.put(f"/nodes/{node}/network"))
    report = run_sync(
        netbox_server, simulator, endpoint["id"], target=Target.parse(node=node), templates="sync"
    )
    assert report.ok, (report.error, report.as_dict()["failures"])
    interfaces = {
        i["name"]: i for i in list_all(netbox_server, "/dcim/interfaces/", device_id=device["id"])
    }
    assert interfaces["vmbr1"]["description"] == "storage network"
    on_vmbr1 = {
        ip["address"]
        for ip in device_addresses(netbox_server, device["id"]).values()
        if ip["assigned_object_id"] == interfaces["vmbr1"]["id"] and "proxbox" in slugs(ip)
    }
    assert on_vmbr1 == {moved}
    assert report.tally.of("dcim.interface").updated == 1


# -- storages and data protection (last: HA requests act on guests) ---------------------------


def records_of(netbox_server, kind: str, **params) -> list[dict]:
    return list_all(netbox_server, f"/plugins/proxbox/inventory/{kind}/", **params)


def test_storage_and_data_protection_records(netbox_server, simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    guests = simulator.inventory()["guests"]
    qemu = next(g["resource"] for (kind, _), g in sorted(guests.items()) if kind == "qemu")
    node, vmid = qemu["node"], qemu["vmid"]
    guest = f"/nodes/{node}/qemu/{vmid}"
    with simulator.api() as pve:
        simulator.wait_if_task(
            pve.post(
                f"{guest}/snapshot", data={"snapname": "before-upgrade", "description": "pre"}
            ),
        )
        simulator.wait_if_task(
            pve.post(
                "/cluster/backup",
                data={
                    "id": "nightly",
                    "schedule": "02:00",
                    "storage": "local",
                    "all": 1,
                    "prune-backups": "keep-daily=7",
                },
            ),
        )
        simulator.wait_if_task(
            pve.post("/cluster/ha/groups", data={"group": "prefer", "nodes": f"{node}:2"}),
        )
        state = "started" if qemu["status"] == "running" else "stopped"
        simulator.wait_if_task(
            pve.post(
                "/cluster/ha/resources",
                data={"sid": f"vm:{vmid}", "group": "prefer", "state": state},
            ),
        )
        storages = pve.get(f"/nodes/{node}/storage").json()["data"]
        volumes = {
            v["volid"]
            for s in storages
            if "backup" in s.get("content", "")
            for v in pve.get(
                f"/nodes/{node}/storage/{s['storage']}/content", params={"content": "backup"}
            ).json()["data"]
        }
    assert volumes, "the seed has a vzdump archive"

    report = sync(netbox_server, simulator, endpoint)
    counters = report.tally.counters
    for model in ("proxmoxsnapshot", "proxmoxbackupjob", "proxmoxhagroup", "proxmoxharesource"):
        assert counters[f"netbox_proxbox.{model}"].created == 1, model
    assert report.as_dict()["counters"]["netbox_proxbox.proxmoxsnapshot"]["created"] == 1

    stored = records_of(netbox_server, "storages", cluster_id=cluster_id)
    assert {(s["name"], s["node"]) for s in stored} == {
        (s["storage"], "" if s.get("shared") else node) for s in storages
    }
    assert all("proxbox" in slugs(s) for s in stored)
    backups = records_of(netbox_server, "backups", cluster_id=cluster_id)
    assert {b["volume"] for b in backups} == volumes
    (vm,) = list_all(
        netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id, name=qemu["name"]
    )
    (snapshot,) = records_of(netbox_server, "snapshots", virtual_machine_id=vm["id"])
    assert (snapshot["name"], snapshot["description"]) == ("before-upgrade", "pre")
    (job,) = records_of(netbox_server, "backup-jobs", cluster_id=cluster_id)
    assert (job["selection"], job["storage"], job["retention"]) == ("all", "local", "keep-daily=7")
    (group,) = records_of(netbox_server, "ha-groups", cluster_id=cluster_id)
    (resource,) = records_of(netbox_server, "ha-resources", cluster_id=cluster_id)
    assert group["nodes"] == f"{node}:2"
    assert (resource["group"]["id"], resource["virtual_machine"]["id"]) == (group["id"], vm["id"])
    assert resource["state"]["value"] == state

    # Nothing changed in Proxmox: nothing written.
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.writes == 0, report.as_dict()["counters"]
    assert_only_reflection_written(object_changes_since(netbox_server, since))

    # A snapshot removed in Proxmox disappears; everything else stays.
    with simulator.api() as pve:
        simulator.wait_if_task(pve.delete(f"{guest}/snapshot/before-upgrade"))
    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("netbox_proxbox.proxmoxsnapshot").deleted == 1
    assert report.tally.writes == 1, report.as_dict()["counters"]
    assert records_of(netbox_server, "snapshots", virtual_machine_id=vm["id"]) == []
    assert len(records_of(netbox_server, "ha-resources", cluster_id=cluster_id)) == 1


def test_endpoint_policy_vrf_role_and_descriptions(netbox_server, simulator, endpoint, first_run):
    cluster_id = first_run.cluster["id"]
    with netbox_server.api() as api:
        vrf = api.post("/ipam/vrfs/", json={"name": "pbsync-tags-vrf"}).json()
        role = api.post(
            "/dcim/device-roles/",
            json={"name": "pbsync-vm", "slug": "pbsync-vm", "vm_role": True},
        ).json()
        answer = api.patch(
            f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/",
            json={"vrf": vrf["id"], "vm_role": role["id"], "sync_descriptions": True},
        )
        assert answer.status_code == 200, answer.text
    node = next(iter(simulator.inventory()["guests"].values()))["resource"]["node"]
    with simulator.api() as pve:
        simulator.wait_if_task(
            pve.post(
                f"/nodes/{node}/qemu",
                data={
                    "vmid": 960,
                    "name": "notes-vm",
                    "memory": 512,
                    "description": "Billing API\n\nOwner: team-b",
                },
            ),
        )

    report = sync(netbox_server, simulator, endpoint)
    vms = list_all(netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    (made,) = [vm for vm in vms if vm["name"] == "notes-vm"]
    assert (made["role"]["id"], made["description"]) == (role["id"], "Billing API")
    assert made["comments"] == "Billing API\n\nOwner: team-b"
    assert all(vm["role"] is None for vm in vms if vm["name"] != "notes-vm")  # only on creation
    ips = list_all(
        netbox_server, "/ipam/ip-addresses/", virtual_machine_id=[vm["id"] for vm in vms]
    )
    assert ips and all((ip["vrf"] or {}).get("id") == vrf["id"] for ip in ips)
    # The nodes' synced addresses move too; the operator's stay where the operator put them.
    devices = list_all(netbox_server, "/dcim/devices/", cluster_id=cluster_id)
    on_nodes = list_all(netbox_server, "/ipam/ip-addresses/", device_id=[d["id"] for d in devices])
    synced = [ip for ip in on_nodes if "proxbox" in slugs(ip)]
    assert synced and all((ip["vrf"] or {}).get("id") == vrf["id"] for ip in synced)
    assert all(ip["vrf"] is None for ip in on_nodes if "proxbox" not in slugs(ip))
    assert report.tally.of("ipam.ipaddress").updated == len(ips) + len(synced)
    assert sync(netbox_server, simulator, endpoint).tally.writes == 0


def test_guests_sharing_a_name_each_get_a_vm(netbox_server, simulator, endpoint, first_run):
    """NetBox names VMs uniquely per cluster (case-insensitively), Proxmox does not: the
    lowest VMID keeps the name, the others get theirs appended, and it stays that way."""
    cluster_id = first_run.cluster["id"]
    (kind, vmid), first = min(
        ((key, g) for key, g in simulator.inventory()["guests"].items() if key[0] == "qemu"),
        key=lambda item: item[0][1],
    )
    name, node = first["resource"]["name"], first["resource"]["node"]
    with simulator.api() as pve:
        for new_vmid, new_name in ((970, name), (971, name.upper())):
            simulator.wait_if_task(
                pve.post(
                    f"/nodes/{node}/qemu",
                    data={"vmid": new_vmid, "name": new_name, "memory": 512},
                ),
            )

    report = sync(netbox_server, simulator, endpoint)
    assert report.tally.of("virtualization.virtualmachine").created == 2

    def vm_names() -> dict[int, str]:
        vms = list_all(netbox_server, "/virtualization/virtual-machines/", cluster_id=cluster_id)
        return {
            int(vm["custom_fields"]["proxbox_source"].split("/")[2].partition("#")[0]): vm["name"]
            for vm in vms
            if vm["custom_fields"].get("proxbox_source")
        }

    names = vm_names()
    assert (names[vmid], names[970], names[971]) == (name, f"{name} (970)", f"{name.upper()} (971)")
    assert sync(netbox_server, simulator, endpoint).tally.writes == 0
    # A node-targeted run names them alike.
    targeted = sync(netbox_server, simulator, endpoint, target=Target.parse(node=node))
    assert targeted.tally.of("virtualization.virtualmachine").updated == 0
    assert vm_names() == names
