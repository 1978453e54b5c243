"""SDN through proxmoxer as PVE behaves: the global lock and its token, rollback
to the applied config, VNet IP mappings kept by the built-in IPAM, and the
node views (zones, bridges, VRFs) derived from what was applied."""

from __future__ import annotations

import uuid

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import assert_conforms, close_proxmoxer, proxmoxer_client


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _name(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:5]


def _refused(call, status: int, fragment: str) -> None:
    with pytest.raises(ResourceException) as caught:
        call()
    assert caught.value.status_code == status, str(caught.value)
    assert fragment in str(caught.value), str(caught.value)


def _ok(prox, upid) -> None:
    status = Tasks.blocking_status(prox, upid, polling_interval=0.02)
    assert status["exitstatus"] == "OK", status


def _apply(prox, **params) -> None:
    _ok(prox, prox.cluster.sdn.put(**params))


def _ids(entries, key: str) -> set[str]:
    return {e[key] for e in entries}


def test_global_lock_guards_writes_and_rollback_restores_the_applied_config(prox):
    sdn = prox.cluster.sdn
    kept, gone, dropped = _name("k"), _name("g"), _name("d")
    sdn.zones.post(zone=kept, type="simple", mtu=1450)
    sdn.zones.post(zone=gone, type="simple")
    _apply(prox)

    # Pending changes block the lock unless the caller accepts them.
    sdn.zones(kept).put(mtu=1400)
    sdn.zones.post(zone=dropped, type="simple")
    _refused(
        lambda: sdn.lock.post(),
        500,
        "could not acquire lock for SDN config: configuration has pending changes",
    )
    token = sdn.lock.post(**{"allow-pending": 1})

    # While locked, writes need the token; a second lock is refused.
    vnet = _name("v")
    _refused(
        lambda: sdn.vnets.post(vnet=vnet, zone=dropped),
        500,
        "create sdn vnet object failed: invalid lock token provided!",
    )
    _refused(lambda: sdn.zones(dropped).delete(), 500, "invalid lock token provided!")
    _refused(lambda: sdn.lock.post(**{"allow-pending": 1}), 500, "invalid lock token")
    _refused(lambda: sdn.put(), 500, "could not commit SDN config: invalid lock token")
    sdn.vnets.post(vnet=vnet, zone=dropped, **{"lock-token": token})
    sdn.zones(gone).delete(**{"lock-token": token})
    _refused(lambda: sdn.rollback.post(), 500, "could not rollback SDN configuration")

    # Rollback: the files are the running config again, and the lock is released.
    sdn.rollback.post(**{"lock-token": token})
    zones = {z["zone"]: z for z in sdn.zones.get()}
    assert dropped not in zones and gone in zones and zones[kept]["mtu"] == 1450
    assert vnet not in _ids(sdn.vnets.get(), "vnet")
    assert "state" not in sdn.zones(kept).get(pending=1)

    # Nothing is pending now: the lock is free for a plain request.
    token = sdn.lock.post()
    _refused(
        lambda: sdn.lock.delete(**{"lock-token": "wrong"}),
        500,
        "could not release lock: invalid lock token provided!",
    )
    sdn.zones(kept).put(mtu=1380, **{"lock-token": token})
    _apply(prox, **{"lock-token": token})  # applying releases the lock by default
    assert {z["zone"]: z for z in sdn.zones.get(running=1)}[kept]["mtu"] == 1380
    token = sdn.lock.post()
    _apply(prox, **{"lock-token": token, "release-lock": 0})
    _refused(lambda: sdn.zones(kept).delete(), 500, "invalid lock token")
    sdn.lock.delete(force=1)
    sdn.zones(kept).delete()
    sdn.zones(gone).delete()
    _apply(prox)


def _ipam_subnet(prox, cidr: str, gateway: str):
    sdn = prox.cluster.sdn
    zone, vnet = _name("i"), _name("w")
    sdn.zones.post(zone=zone, type="simple", ipam="pve")
    sdn.vnets.post(vnet=vnet, zone=zone)
    sdn.vnets(vnet).subnets.post(subnet=cidr, type="subnet", gateway=gateway)
    _apply(prox)
    return zone, vnet


def _ipam_entries(prox, zone: str) -> dict[str, dict]:
    status = prox.cluster.sdn.ipams("pve").status.get()
    assert_conforms("/cluster/sdn/ipams/{ipam}/status", "GET", status, majors=(9,))
    return {e["ip"]: e for e in status if e["zone"] == zone}


def test_vnet_ip_mappings_live_in_the_ipam(prox):
    zone, vnet = _ipam_subnet(prox, "10.77.0.0/24", "10.77.0.1")
    ips = prox.cluster.sdn.vnets(vnet).ips
    mac = "BC:24:11:77:00:10"

    ips.post(zone=zone, ip="10.77.0.10", mac=mac)
    entries = _ipam_entries(prox, zone)
    assert entries["10.77.0.10"]["mac"] == mac and entries["10.77.0.10"]["vnet"] == vnet
    assert entries["10.77.0.1"]["gateway"] == 1
    _refused(lambda: ips.post(zone=zone, ip="10.77.0.10"), 500, "IP '10.77.0.10' already exist")
    _refused(lambda: ips.post(zone=zone, ip="10.77.0.1"), 500, "IP '10.77.0.1' already exist")
    _refused(lambda: ips.post(zone=zone, ip="10.77.0.300"), 400, "valid IP address")
    # An address outside every applied subnet of the vnet is no IPAM business.
    ips.post(zone=zone, ip="192.0.2.9", mac=mac)
    assert "192.0.2.9" not in _ipam_entries(prox, zone)

    # Update moves the MAC's address; the old one is free again.
    ips.put(zone=zone, ip="10.77.0.11", mac=mac, vmid=4242)
    entries = _ipam_entries(prox, zone)
    assert "10.77.0.10" not in entries
    assert entries["10.77.0.11"]["vmid"] == 4242 and entries["10.77.0.11"]["mac"] == mac

    subnet_id = f"{zone}-10.77.0.0-24"
    _refused(
        lambda: prox.cluster.sdn.vnets(vnet).subnets(subnet_id).delete(),
        500,
        "cannot delete subnet '10.77.0.0/24', not empty",
    )
    ips.delete(zone=zone, ip="10.77.0.11", mac=mac)
    assert "10.77.0.11" not in _ipam_entries(prox, zone)
    _refused(
        lambda: ips.delete(zone=zone, ip="10.77.0.11"),
        500,
        "IP '10.77.0.11' does not exist in IPAM DB",
    )
    prox.cluster.sdn.vnets(vnet).subnets(subnet_id).delete()


def test_node_views_show_the_applied_config(prox, unique_vmid):
    sdn = prox.cluster.sdn
    controller, evpn, simple = _name("c"), _name("e"), _name("s")
    vnet, plain = _name("n"), _name("p")
    sdn.controllers.post(controller=controller, type="evpn", asn=65000, peers="10.0.0.1")
    sdn.zones.post(zone=evpn, type="evpn", controller=controller, nodes="pve1")
    sdn.zones.post(zone=simple, type="simple")
    sdn.vnets.post(vnet=vnet, zone=evpn, tag=11000)
    sdn.vnets.post(vnet=plain, zone=simple, vlanaware=1)
    sdn.vnets(vnet).subnets.post(subnet="10.88.0.0/24", type="subnet", gateway="10.88.0.1")
    pve1 = prox.nodes("pve1").sdn

    # Pending until applied: no node runs the new zones yet.
    assert evpn not in _ids(pve1.zones.get(), "zone")
    _refused(lambda: pve1.zones(evpn).bridges.get(), 400, "zone does not exist")
    _apply(prox)

    zones = pve1.zones.get()
    assert_conforms("/nodes/{node}/sdn/zones", "GET", zones, majors=(9,))
    assert {z["zone"]: z["status"] for z in zones}[evpn] == "available"
    assert evpn not in _ids(prox.nodes("pve2").sdn.zones.get(), "zone")  # nodes=pve1
    assert simple in _ids(prox.nodes("pve2").sdn.zones.get(), "zone")
    assert pve1.zones(evpn).content.get() == [{"vnet": vnet, "status": "available"}]

    # A running guest's NIC on the vnet is a port of that bridge.
    mac = "BC:24:11:88:00:05"
    _ok(
        prox,
        prox.nodes("pve1").qemu.post(
            vmid=unique_vmid, net0=f"virtio={mac},bridge={vnet}", net1=f"virtio,bridge={plain}"
        ),
    )
    bridges = {b["name"]: b for b in pve1.zones(evpn).bridges.get()}
    assert bridges == {vnet: {"name": vnet, "vlan_filtering": "0", "ports": []}}
    _ok(prox, prox.nodes("pve1").qemu(unique_vmid).status.start.post())
    bridges = pve1.zones(evpn).bridges.get()
    assert_conforms("/nodes/{node}/sdn/zones/{zone}/bridges", "GET", bridges, majors=(9,))
    assert bridges[0]["ports"] == [
        {"name": f"tap{unique_vmid}i0", "vmid": unique_vmid, "index": "net0"}
    ]
    (aware,) = pve1.zones(simple).bridges.get()
    assert aware["vlan_filtering"] == "1"
    assert aware["ports"][0]["index"] == "net1" and aware["ports"][0]["primary_vlan"] == 1

    routes = pve1.zones(evpn)("ip-vrf").get()
    assert_conforms("/nodes/{node}/sdn/zones/{zone}/ip-vrf", "GET", routes, majors=(9,))
    assert [r["ip"] for r in routes] == ["10.88.0.0/24"] and routes[0]["nexthops"] == [vnet]
    _refused(lambda: pve1.zones(simple)("ip-vrf").get(), 400, "zone is not an EVPN zone")
    _refused(
        lambda: prox.nodes("pve2").sdn.zones(evpn)("ip-vrf").get(),
        400,
        "zone does not exist on node pve2",
    )

    sdn.vnets(vnet).ips.post(zone=evpn, ip="10.88.0.5", mac=mac)
    (entry,) = pve1.vnets(vnet)("mac-vrf").get()
    assert_conforms("/nodes/{node}/sdn/vnets/{vnet}/mac-vrf", "GET", [entry], majors=(9,))
    assert entry["mac"] == mac.lower() and entry["ip"] == "10.88.0.5" and entry["nexthop"]
    _refused(lambda: pve1.vnets(plain)("mac-vrf").get(), 400, "is not an EVPN zone.")

    # Stopped guests leave the bridge; a deleted zone leaves the node once applied.
    _ok(prox, prox.nodes("pve1").qemu(unique_vmid).status.stop.post())
    assert pve1.zones(evpn).bridges.get()[0]["ports"] == []
    _ok(prox, prox.nodes("pve1").qemu(unique_vmid).delete())
    sdn.vnets(vnet).ips.delete(zone=evpn, ip="10.88.0.5")
    sdn.vnets(vnet).subnets(f"{evpn}-10.88.0.0-24").delete()
    sdn.vnets(vnet).delete()
    sdn.zones(evpn).delete()
    assert evpn in _ids(pve1.zones.get(), "zone")
    _apply(prox)
    assert evpn not in _ids(pve1.zones.get(), "zone")


def test_dry_run_diffs_the_node_files_an_apply_would_write(prox):
    sdn = prox.cluster.sdn
    controller, zone, vnet = _name("c"), _name("z"), _name("x")
    sdn.controllers.post(controller=controller, type="evpn", asn=65001, peers="10.0.0.7")
    sdn.zones.post(zone=zone, type="evpn", controller=controller, nodes="pve1")
    sdn.vnets.post(vnet=vnet, zone=zone, tag=12000)
    sdn.vnets(vnet).subnets.post(subnet="10.99.0.0/24", type="subnet", gateway="10.99.0.1")

    diff = sdn("dry-run").get(node="pve1")
    assert_conforms("/cluster/sdn/dry-run", "GET", diff, majors=(9,))
    added = {line for line in diff["interfaces-diff"].splitlines() if line.startswith("+")}
    assert {f"+auto {vnet}", f"+iface {vnet}", "+\taddress 10.99.0.1/24"} <= added
    assert "+\tvxlan-id 12000" in added
    assert "+ neighbor 10.0.0.7 remote-as 65001" in diff["frr-diff"].splitlines()
    # The zone is not on pve2: nothing of it in pve2's files.
    assert f"auto {vnet}" not in sdn("dry-run").get(node="pve2").get("interfaces-diff", "")

    _apply(prox)
    assert "interfaces-diff" not in sdn("dry-run").get(node="pve1")
    sdn.vnets(vnet).subnets(f"{zone}-10.99.0.0-24").delete()
    sdn.vnets(vnet).delete()
    removed = sdn("dry-run").get(node="pve1")["interfaces-diff"].splitlines()
    assert f"-auto {vnet}" in removed
    sdn.zones(zone).delete()
    sdn.controllers(controller).delete()
    _apply(prox)


def test_prefix_lists_number_their_entries_and_stay_pending_until_applied(prox):
    lists = prox.cluster.sdn("prefix-lists")
    name = _name("pl-")
    lists.post(
        id=name,
        entries=["action=permit,prefix=192.0.2.0/24,le=28", "action=deny,prefix=10.0.0.0/8"],
    )
    _refused(
        lambda: lists.post(id=name), 500, f"prefix list already exists in configuration: {name}"
    )
    _refused(lambda: lists.post(id="only_default"), 400, "is currently reserved")
    shown = lists(name).get()
    assert shown["type"] == "prefix-list"
    assert shown["entries"] == [
        "action=permit,prefix=192.0.2.0/24,le=28,seq=5",
        "action=deny,prefix=10.0.0.0/8,seq=10",
    ]

    entries = lists(name).entries
    entries.post(action="permit", prefix="198.51.100.0/24", ge=25, le=26)  # next: 10 + 5
    entries.post(action="deny", prefix="203.0.113.0/24", seq=7)
    assert [e["seq"] for e in entries.get()] == [5, 10, 15, 7]
    assert entries(15).get() == {
        "action": "permit",
        "prefix": "198.51.100.0/24",
        "ge": 25,
        "le": 26,
        "seq": 15,
    }
    _refused(
        lambda: entries.post(action="deny", prefix="203.0.113.0/24", seq=7),
        500,
        "creating prefix list entry failed: entry with sequence number 7 already exists!",
    )
    _refused(
        lambda: entries.post(action="permit", prefix="192.0.2.0/24", le=16),
        500,
        "Prefix <= must not be less than 24",
    )
    _refused(
        lambda: entries.post(action="permit", prefix="192.0.2.0/24", ge=28, le=26),
        500,
        "Prefix >= (28) must not be greater than Prefix <= (26)",
    )
    _refused(lambda: entries(99).get(), 400, f"entry 99 in prefix list {name} doesn't exist")

    # Update renumbers and edits; a taken number is refused and the entry stays.
    entries(7).put(seq=20, action="permit", delete="")
    _refused(lambda: entries(20).put(seq=5), 500, "entry with sequence number 5 already exists!")
    entries(15).put(delete="ge")
    assert entries(15).get().get("ge") is None and entries(20).get()["action"] == "permit"
    entries(5).delete()
    _refused(lambda: entries(5).delete(), 500, "could not find prefix list entry with seq 5")

    # Pending until applied; the dry-run shows the FRR lines an apply would write.
    assert {p["id"]: p for p in lists.get(pending=1)}[name]["state"] == "new"
    assert name not in _ids(lists.get(running=1), "id")
    frr = prox.cluster.sdn("dry-run").get(node="pve1")["frr-diff"].splitlines()
    assert f"+ip prefix-list {name} seq 20 permit 203.0.113.0/24" in frr
    _apply(prox)
    running = {p["id"]: p for p in lists.get(running=1)}[name]
    # PVE keeps written order: an updated entry moves to the end.
    assert [e.split(",seq=")[1] for e in running["entries"]] == ["10", "20", "15"]

    lists(name).put(delete="entries")
    assert "entries" not in lists(name).get()
    lists(name).delete()
    _refused(lambda: lists(name).delete(), 500, f"could not find prefix list with id: {name}")
    _refused(lambda: lists(name).get(), 400, f"{name} doesn't exist")
    _apply(prox)


def test_route_map_entries_are_keyed_by_map_and_order(prox):
    maps = prox.cluster.sdn("route-maps")
    name = _name("rm-")
    match = "key=ip-address-prefix-list,value=edge"
    maps.entries.post(**{"route-map-id": name, "order": 10, "action": "permit", "match": [match]})
    maps.entries.post(**{"route-map-id": name, "order": 20, "action": "deny"})
    _refused(
        lambda: maps.entries.post(**{"route-map-id": name, "order": 10, "action": "deny"}),
        500,
        f"creating route map entry failed: route map entry already exists in configuration: {name}_10",
    )
    assert name in _ids(maps.get(), "id") and name not in _ids(maps.get(running=1), "id")
    assert name not in _ids(maps.entries.get(running=1), "route-map-id")
    entry = maps.entries(name).entry(10).get()
    assert entry == {"route-map-id": name, "order": 10, "action": "permit", "match": [match]}
    _refused(lambda: maps.entries(name).entry(30).get(), 400, f"{name}_30 doesn't exist")

    maps.entries(name).entry(10).put(action="deny", call=name, delete="match")
    entry = maps.entries(name).entry(10).get()
    assert entry["action"] == "deny" and entry["call"] == name and "match" not in entry
    _refused(
        lambda: maps.entries(name).entry(30).put(action="deny"),
        500,
        f"updating route map entry failed: Could not find route map with id: {name}_30",
    )
    pending = [e for e in maps.entries(name).get(pending=1)]
    assert {(e["order"], e["state"]) for e in pending} == {(10, "new"), (20, "new")}
    assert f"+route-map {name} deny 10" in prox.cluster.sdn("dry-run").get(node="pve1")["frr-diff"]

    _apply(prox)
    assert [e["order"] for e in maps.entries(name).get(running=1)] == [10, 20]
    maps.entries(name).entry(20).delete()
    _refused(
        lambda: maps.entries(name).entry(20).delete(),
        500,
        f"deleting route map entry failed: could not find route map entry with id: {name}_20",
    )
    assert {e["order"]: e.get("state") for e in maps.entries(name).get(pending=1)}[20] == "deleted"
    assert [e["order"] for e in maps.entries(name).get(running=1)] == [10, 20]  # until applied
    maps.entries(name).entry(10).delete()
    assert name not in _ids(maps.get(), "id")
    _apply(prox)


def test_subnets_read_back_as_pve_returns_them(prox):
    """A subnet carries the fields its ID encodes and its DHCP ranges as
    objects, in the current and (once applied) the running configuration."""
    sdn = prox.cluster.sdn
    zone, vnet = _name("s"), _name("n")
    sdn.zones.post(zone=zone, type="vlan", bridge="vmbr0")
    sdn.vnets.post(vnet=vnet, zone=zone, tag=310)
    subnets = sdn.vnets(vnet).subnets
    ranges = [
        "start-address=10.31.0.100,end-address=10.31.0.150",
        "start-address=10.31.0.200,end-address=10.31.0.210",
    ]
    subnets.post(
        subnet="10.31.0.0/24", type="subnet", gateway="10.31.0.1", snat=1, **{"dhcp-range": ranges}
    )
    subnets.post(subnet="10.32.0.0/24", type="subnet")
    subnet_id = f"{zone}-10.31.0.0-24"
    expected = {
        "subnet": subnet_id,
        "id": subnet_id,
        "type": "subnet",
        "vnet": vnet,
        "zone": zone,
        "cidr": "10.31.0.0/24",
        "network": "10.31.0.0",
        "mask": "24",
        "gateway": "10.31.0.1",
        "snat": 1,
        "dhcp-range": [
            {"start-address": "10.31.0.100", "end-address": "10.31.0.150"},
            {"start-address": "10.31.0.200", "end-address": "10.31.0.210"},
        ],
    }

    def without_digest(entry: dict) -> dict:
        return {k: v for k, v in entry.items() if k != "digest"}

    listed = {s["subnet"]: s for s in subnets.get()}
    assert without_digest(listed[subnet_id]) == expected
    assert listed[f"{zone}-10.32.0.0-24"]["dhcp-range"] == []
    assert without_digest(subnets(subnet_id).get()) == expected
    assert subnets.get(running=1) == []
    # Pending: the new subnet's options wait under "pending" (its ranges joined, as PVE
    # compares them), its VNet and the ID fields at the top.
    pending = {s["subnet"]: s for s in subnets.get(pending=1)}[subnet_id]
    assert (pending["state"], pending["vnet"], pending["cidr"]) == ("new", vnet, "10.31.0.0/24")
    assert pending["dhcp-range"] == []  # nothing of it runs yet
    assert pending["pending"] == {
        "gateway": "10.31.0.1",
        "snat": 1,
        "dhcp-range": ",".join(sorted(ranges)),
    }

    _apply(prox)
    running = {s["subnet"]: s for s in subnets.get(running=1)}
    assert without_digest(running[subnet_id]) == expected
    assert "state" not in {s["subnet"]: s for s in subnets.get(pending=1)}[subnet_id]
    # A changed and a removed option: the running values at the top, the change pending.
    subnets(subnet_id).put(gateway="10.31.0.254", delete="snat")
    pending = {s["subnet"]: s for s in subnets.get(pending=1)}[subnet_id]
    assert (pending["state"], pending["gateway"], pending["snat"]) == ("changed", "10.31.0.1", 1)
    assert pending["pending"] == {"gateway": "10.31.0.254", "snat": "deleted"}
    _apply(prox)

    _refused(
        lambda: subnets.post(
            subnet="10.33.0.0/24", type="subnet", **{"dhcp-range": ["start-address=10.33.0.5"]}
        ),
        400,
        "dhcp-range",
    )
    _refused(
        lambda: subnets.post(
            subnet="10.34.0.0/24",
            type="subnet",
            **{"dhcp-range": ["start-address=10.34.0.5,end-address=10.99.0.9"]},
        ),
        400,
        "dhcp-range",
    )
    assert {s["cidr"] for s in subnets.get()} == {"10.31.0.0/24", "10.32.0.0/24"}
    for cidr_id in (subnet_id, f"{zone}-10.32.0.0-24"):
        subnets(cidr_id).delete()
    sdn.vnets(vnet).delete()
    sdn.zones(zone).delete()
    _apply(prox)
