"""Proxmox SDN against a real NetBox and simulator: a VLAN zone's VNet becomes a VLAN in
the zone's VLAN group, VXLAN and EVPN VNets L2VPNs with their VNI, subnets prefixes in
the endpoint's VRF with their gateway address and DHCP ranges, and guest NICs on a VNet
are linked to it (untagged VLAN, L2VPN termination). A VNet removed in Proxmox goes
from NetBox; with `sdn_mode` off nothing SDN is written.

The tests run in file order and build on each other (one simulator).
"""

import json

import pytest
from proxbox_processes import wait_until
from sync_fixtures import Simulator, create_endpoint, create_site, list_all, pve_ok, run_sync

from proxbox_backend.domain.sdn import KEY_FIELD

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
# Networks of this module alone (its guests are renumbered into 10.98.0.0/24).
WEB, TUN, EV = "10.98.10.0/24", "10.98.20.0/24", "10.98.30.0/24"


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("sdn", "pair", 21, sync_workdir)
    try:
        sim.start().renumber("10.98.0")
        yield sim
    finally:
        sim.stop()


def apply_sdn(simulator) -> None:
    with simulator.api() as pve:
        simulator.wait_task(pve_ok(pve.put("/cluster/sdn")))


@pytest.fixture(scope="module")
def scene(netbox_server, simulator):
    """The endpoint (in a VRF of its own, SDN switched off) and the simulator's SDN: a
    VLAN zone, a VXLAN and an EVPN zone, a VNet in each with a subnet, and one QEMU
    guest with a NIC on the VLAN VNet and one on the VXLAN VNet."""
    site = create_site(netbox_server, "pbsync-sdn")
    endpoint = create_endpoint(netbox_server, "pve-sdn", simulator, site=site)
    with netbox_server.api() as api:
        vrf = api.post("/ipam/vrfs/", json={"name": "pbsync-sdn"})
        assert vrf.status_code == 201, vrf.text
        response = api.patch(
            f"{ENDPOINTS}{endpoint['id']}/", json={"vrf": vrf.json()["id"], "sdn_mode": "off"}
        )
        assert response.status_code == 200, response.text
    with simulator.api() as pve:
        sdn = "/cluster/sdn"
        pve_ok(
            pve.post(
                f"{sdn}/controllers",
                data={
                    "controller": "evpnctl",
                    "type": "evpn",
                    "asn": 65000,
                    "peers": "10.98.0.250",
                },
            )
        )
        pve_ok(pve.post(f"{sdn}/zones", data={"zone": "lan", "type": "vlan", "bridge": "vmbr0"}))
        pve_ok(
            pve.post(
                f"{sdn}/zones",
                data={"zone": "ovl", "type": "vxlan", "peers": "10.98.0.251,10.98.0.252"},
            )
        )
        pve_ok(
            pve.post(
                f"{sdn}/zones",
                data={"zone": "fab", "type": "evpn", "controller": "evpnctl", "vrf-vxlan": 9000},
            )
        )
        pve_ok(pve.post(f"{sdn}/vnets", data={"vnet": "web", "zone": "lan", "tag": 310}))
        pve_ok(pve.post(f"{sdn}/vnets", data={"vnet": "tun", "zone": "ovl", "tag": 5010}))
        pve_ok(pve.post(f"{sdn}/vnets", data={"vnet": "ev", "zone": "fab", "tag": 6010}))
        pve_ok(
            pve.post(
                f"{sdn}/vnets/web/subnets",
                data={
                    "subnet": WEB,
                    "type": "subnet",
                    "gateway": "10.98.10.1",
                    "snat": 1,
                    "dhcp-range": ["start-address=10.98.10.100,end-address=10.98.10.150"],
                },
            )
        )
        pve_ok(
            pve.post(
                f"{sdn}/vnets/tun/subnets",
                data={"subnet": TUN, "type": "subnet", "gateway": "10.98.20.1"},
            )
        )
        pve_ok(
            pve.post(
                f"{sdn}/vnets/ev/subnets",
                data={
                    "subnet": EV,
                    "type": "subnet",
                    "gateway": "10.98.30.1",
                    "dhcp-range": [
                        "start-address=10.98.30.50,end-address=10.98.30.60",
                        "start-address=10.98.30.70,end-address=10.98.30.80",
                    ],
                },
            )
        )
    apply_sdn(simulator)
    guest = next(
        g["resource"]
        for _key, g in sorted(simulator.inventory()["guests"].items())
        if g["resource"]["type"] == "qemu" and not g["resource"].get("template")
    )
    with simulator.api() as pve:
        config = f"/nodes/{guest['node']}/qemu/{guest['vmid']}/config"
        pve_ok(pve.put(config, data={
            "net7": "virtio=BC:24:11:98:00:07,bridge=web",
            "net8": "virtio=BC:24:11:98:00:08,bridge=tun"}))  # fmt: skip
    return {"endpoint": endpoint, "vrf": vrf.json()["id"], "guest": guest}


def sync(netbox_server, simulator, scene):
    report = run_sync(netbox_server, simulator, scene["endpoint"]["id"])
    answer = report.as_dict()
    assert report.ok, (report.error, answer["failures"], answer["read_failures"])
    return report


def set_policy(netbox, endpoint, **policy) -> None:
    with netbox.api() as api:
        response = api.patch(f"{ENDPOINTS}{endpoint['id']}/", json=policy)
    assert response.status_code == 200, response.text


def sdn_objects(netbox, cluster_id: int, vrf: int) -> dict[str, list[dict]]:
    """Everything SDN-shaped NetBox holds for the cluster, whoever wrote it."""
    return {
        "groups": [
            g
            for g in list_all(netbox, "/ipam/vlan-groups/", scope_id=cluster_id)
            if g["slug"].startswith("proxbox-sdn-")
        ],
        "vlans": [
            v for v in list_all(netbox, "/ipam/vlans/") if (v["group"] or {}).get("slug", "")
            .startswith(f"proxbox-sdn-{cluster_id}-")
        ],
        "l2vpns": list_all(netbox, "/vpn/l2vpns/", slug__isw=f"proxbox-sdn-{cluster_id}-"),
        "prefixes": list_all(netbox, "/ipam/prefixes/", vrf_id=vrf),
        "gateways": list_all(netbox, "/ipam/ip-addresses/", vrf_id=vrf, role="anycast"),
        "ranges": list_all(netbox, "/ipam/ip-ranges/", vrf_id=vrf),
    }  # fmt: skip


def nics(netbox, cluster_id: int, guest: dict) -> dict[str, dict]:
    found = list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id)
    return {i["name"]: i for i in found if i["virtual_machine"]["name"] == guest["name"]}


def test_sdn_mode_off_writes_nothing_sdn(netbox_server, simulator, scene):
    report = sync(netbox_server, simulator, scene)
    cluster_id = report.cluster["id"]
    assert all(not found for found in sdn_objects(netbox_server, cluster_id, scene["vrf"]).values())
    interfaces = nics(netbox_server, cluster_id, scene["guest"])
    assert interfaces["net7"]["untagged_vlan"] is None
    assert list_all(netbox_server, "/vpn/l2vpn-terminations/", vminterface_id=[
        interfaces["net7"]["id"], interfaces["net8"]["id"]]) == []  # fmt: skip
    assert not list_all(netbox_server, "/extras/custom-fields/", name=KEY_FIELD)


def test_a_preview_plans_the_sdn_objects(netbox_server, simulator, scene):
    set_policy(netbox_server, scene["endpoint"], sdn_mode="always")
    report = run_sync(netbox_server, simulator, scene["endpoint"]["id"], dry_run=True)
    assert report.ok, (report.error, report.as_dict())
    plan = report.plan.as_dict()["object_types"]
    assert plan["ipam.vlangroup"]["create"] == 1
    assert plan["vpn.l2vpn"]["create"] == 2
    assert plan["ipam.prefix"]["create"] == 3
    assert plan["ipam.iprange"]["create"] == 3
    assert plan["vpn.l2vpntermination"]["create"] == 1
    assert not sdn_objects(netbox_server, report.cluster["id"], scene["vrf"])["l2vpns"]


def test_the_sdn_is_synced_and_guest_nics_are_linked_to_their_vnets(
    netbox_server, simulator, scene
):
    report = sync(netbox_server, simulator, scene)
    cluster_id, vrf = report.cluster["id"], scene["vrf"]
    found = sdn_objects(netbox_server, cluster_id, vrf)
    (group,) = found["groups"]
    assert (group["name"], group["scope_type"], group["scope_id"]) == (
        "SDN lan", "virtualization.cluster", cluster_id
    )  # fmt: skip
    (vlan,) = found["vlans"]
    assert (vlan["vid"], vlan["name"], vlan["group"]["id"]) == (310, "web", group["id"])
    l2vpns = {v["slug"]: v for v in found["l2vpns"]}
    tun, ev = l2vpns[f"proxbox-sdn-{cluster_id}-tun"], l2vpns[f"proxbox-sdn-{cluster_id}-ev"]
    assert (tun["type"]["value"], tun["identifier"]) == ("vxlan", 5010)
    assert (ev["type"]["value"], ev["identifier"]) == ("vxlan-evpn", 6010)
    prefixes = {p["prefix"]: p for p in found["prefixes"]}
    assert set(prefixes) == {WEB, TUN, EV}
    assert prefixes[WEB]["vlan"]["id"] == vlan["id"] and prefixes[TUN]["vlan"] is None
    gateways = {g["address"]: g for g in found["gateways"]}
    assert set(gateways) == {"10.98.10.1/24", "10.98.20.1/24", "10.98.30.1/24"}
    assert "Gateway" in gateways["10.98.10.1/24"]["description"]
    assert {(r["start_address"], r["end_address"]) for r in found["ranges"]} == {
        ("10.98.10.100/24", "10.98.10.150/24"),
        ("10.98.30.50/24", "10.98.30.60/24"),
        ("10.98.30.70/24", "10.98.30.80/24"),
    }
    for obj in [vlan, group, *l2vpns.values(), *prefixes.values(), *found["ranges"]]:
        assert "proxbox" in {t["slug"] for t in obj["tags"]}
        assert obj["custom_fields"][KEY_FIELD].startswith(f"{cluster_id}/")
    interfaces = nics(netbox_server, cluster_id, scene["guest"])
    assert interfaces["net7"]["mode"]["value"] == "access"
    assert interfaces["net7"]["untagged_vlan"]["id"] == vlan["id"]
    (termination,) = list_all(
        netbox_server, "/vpn/l2vpn-terminations/", vminterface_id=interfaces["net8"]["id"]
    )
    assert termination["l2vpn"]["id"] == tun["id"]
    # A second run finds everything as it left it.
    again = sync(netbox_server, simulator, scene)
    for kind in ("ipam.vlangroup", "vpn.l2vpn", "ipam.prefix", "ipam.iprange"):
        counter = again.tally.counters[kind]
        assert (counter.created, counter.updated, counter.deleted) == (0, 0, 0), kind


def test_a_vnet_removed_in_proxmox_goes_from_netbox(netbox_server, simulator, scene):
    guest = scene["guest"]
    with simulator.api() as pve:
        config = f"/nodes/{guest['node']}/qemu/{guest['vmid']}/config"
        pve_ok(pve.put(config, data={"delete": "net8"}))
        for vnet in ("web", "tun"):
            (subnet,) = pve_ok(pve.get(f"/cluster/sdn/vnets/{vnet}/subnets"))
            pve_ok(pve.delete(f"/cluster/sdn/vnets/{vnet}/subnets/{subnet['subnet']}"))
            pve_ok(pve.delete(f"/cluster/sdn/vnets/{vnet}"))
        pve_ok(pve.delete("/cluster/sdn/zones/lan"))
    apply_sdn(simulator)
    report = sync(netbox_server, simulator, scene)
    cluster_id = report.cluster["id"]
    found = sdn_objects(netbox_server, cluster_id, scene["vrf"])
    assert found["groups"] == [] and found["vlans"] == []
    assert [v["slug"] for v in found["l2vpns"]] == [f"proxbox-sdn-{cluster_id}-ev"]
    assert [p["prefix"] for p in found["prefixes"]] == [EV]
    assert [g["address"] for g in found["gateways"]] == ["10.98.30.1/24"]
    assert len(found["ranges"]) == 2
    interfaces = nics(netbox_server, cluster_id, guest)
    assert interfaces["net7"]["untagged_vlan"] is None and "net8" not in interfaces


def test_a_cluster_without_sdn_keeps_what_netbox_has(netbox_server, simulator, scene, sync_workdir):
    """PVE without its SDN package has no handler for `/cluster/sdn/...` (501): nothing
    to sync, no read failure, and nothing synced from it removed."""
    rules = sync_workdir / "sdn-absent.json"
    rules.write_text(json.dumps([{
        "kind": "http_error", "methods": ["GET"], "path": "/cluster/sdn/*", "status": 501,
        "message": "Method 'GET /cluster/sdn/zones' not implemented"}]))  # fmt: skip
    simulator.cli("faults", "enable", "sdn-absent", "--rules", str(rules), "--seed", "1")
    try:
        with simulator.api() as pve:
            wait_until(
                lambda: pve.get("/cluster/sdn/zones").status_code == 501,
                15,
                "the simulator to answer SDN with 501",
                interval=0.1,
            )
        report = sync(netbox_server, simulator, scene)
        assert report.as_dict()["read_failures"] == []
        cluster_id = report.cluster["id"]
        found = sdn_objects(netbox_server, cluster_id, scene["vrf"])
        assert [v["slug"] for v in found["l2vpns"]] == [f"proxbox-sdn-{cluster_id}-ev"]
        assert [p["prefix"] for p in found["prefixes"]] == [EV]
        assert len(found["ranges"]) == 2
    finally:
        simulator.cli("faults", "disable")
