"""IPAM hygiene: each rule finds its conflict and passes what is none; the checks read
NetBox in batches (many values per request) and never write.

Against a real NetBox and the simulator (REST preview, Job page): e2e/test_ipam_hygiene.py.
"""

from __future__ import annotations

import httpx
import pytest
from rich.console import Console

from proxbox_backend import cli
from proxbox_backend import hygiene as checks
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.domain import hygiene, prefixes
from proxbox_backend.domain.hygiene import ERROR, INFO, WARNING, GuestFacts
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.report import RunReport
from proxbox_backend.secrets import Secret

WEB = GuestFacts(
    7,
    "web (qemu/101)",
    addresses=(("eth0", "10.0.0.5/24"), ("eth0", "fe80::1/64")),
    macs=(("net0", "BC:24:11:00:00:01"),),
    vids=(20,),
)
NEW = GuestFacts(-4, "db (qemu/102)", addresses=(("eth0", "10.0.0.5/16"),))


def ip(obj_id, address, vm=None, device=None, interface="eth0"):
    if vm is not None:
        kind, parent = "virtualization.vminterface", {"virtual_machine": {"id": vm, "name": "x"}}
    elif device is not None:
        kind, parent = "dcim.interface", {"device": {"id": device, "name": "sw1"}}
    else:
        kind, parent = None, None
    return {
        "id": obj_id,
        "address": address,
        "assigned_object_type": kind,
        "assigned_object_id": 50 if kind else None,
        "assigned_object": {"name": interface, **parent} if parent else None,
    }


def test_a_duplicate_is_the_same_host_in_the_vrf_on_another_vm_or_device_or_guest():
    present = [
        ip(1, "10.0.0.5/24", vm=7),  # the guest's own address: the one the sync keeps
        ip(2, "10.0.0.5/32", device=3, interface="ge-0/0/1"),  # another mask, same host
    ]
    found = hygiene.duplicate_addresses([WEB, NEW], present, "the global table")
    assert {(f.guest, f.severity, f.where) for f in found} == {
        ("web (qemu/101)", ERROR, "device sw1 interface ge-0/0/1"),
        ("db (qemu/102)", ERROR, "device sw1 interface ge-0/0/1"),
        ("db (qemu/102)", ERROR, "VM x interface eth0"),  # web's, in NetBox already
    }
    # Two guests of the run with one address, neither in NetBox yet.
    (twice,) = hygiene.duplicate_addresses([WEB, NEW], [], "the global table")
    assert (twice.guest, twice.where) == ("db (qemu/102)", "guest web (qemu/101)")
    assert hygiene.duplicate_addresses([WEB], [ip(1, "10.0.0.5/24", vm=7)], "t") == []
    # Link-local addresses are per link: never asked for, never a duplicate.
    assert hygiene.hosts([WEB, NEW]) == ["10.0.0.5"]


def test_a_mac_on_a_device_is_an_error_on_another_vm_a_warning_on_its_own_vm_none():
    def mac(obj_id, **where):
        return {**ip(obj_id, "", **where), "mac_address": "bc:24:11:00:00:01"}

    found = hygiene.mac_collisions(
        [WEB], [mac(1, vm=7), mac(2, device=3), mac(3, vm=9), mac(4)], {9: "pve-b"}
    )
    assert [(f.severity, f.where) for f in hygiene.ordered(found)] == [
        (ERROR, "device sw1 interface eth0"),
        (WARNING, "VM x (cluster pve-b) interface eth0"),
    ]


def test_an_address_outside_every_prefix_names_the_prefix_the_opt_in_rule_would_create():
    host_route = GuestFacts(8, "fw (lxc/200)", addresses=(("eth0", "192.0.2.7/32"),))
    covering = [{"prefix": "10.0.0.0/8"}]
    assert hygiene.outside_prefixes([WEB], covering, "t", creates=False) == []
    (outside, route) = hygiene.outside_prefixes([WEB, host_route], [], "VRF #3", creates=False)
    assert (outside.severity, outside.prefix, outside.value) == (
        WARNING,
        "10.0.0.0/24",
        "10.0.0.5/24",
    )
    assert "prefixes_mode" in outside.detail and "VRF #3" in outside.detail
    assert (route.severity, route.prefix) == (WARNING, None)
    # With the rule on, the run's own plan creates it: information, not a warning.
    (planned,) = hygiene.outside_prefixes([WEB], [], "t", creates=True)
    assert planned.severity == INFO and planned.prefix == "10.0.0.0/24"
    # A prefix of the other family containing the same bits covers nothing.
    assert len(hygiene.outside_prefixes([WEB], [{"prefix": "::/0"}], "t", creates=False)) == 1


def test_a_vlan_clash_is_the_guests_vid_under_another_name_in_the_syncs_group():
    group = "proxbox-cluster-4"
    assert hygiene.vlan_clashes([WEB], [{"id": 1, "vid": 20, "name": "VLAN 20"}], group) == []
    (clash,) = hygiene.vlan_clashes([WEB], [{"id": 2, "vid": 20, "name": "mgmt"}], group)
    assert (clash.rule, clash.severity, clash.value) == ("vlan_clash", WARNING, "20")
    assert "mgmt" in clash.where and group in clash.where


# -- the reads ---------------------------------------------------------------------------


def fake_netbox(seen: list[httpx.Request]) -> NetBoxGateway:
    answers = {
        "/api/ipam/ip-addresses/": [ip(11, "10.0.1.5/24", device=3)],
        "/api/dcim/mac-addresses/": [{**ip(12, "", vm=99), "mac_address": "BC:24:11:00:00:01"}],
        "/api/ipam/prefixes/": [],
        "/api/ipam/vlans/": [{"id": 5, "vid": 20, "name": "mgmt"}],
        "/api/virtualization/virtual-machines/": [{"id": 99, "cluster": {"name": "pve-b"}}],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        assert request.method == "GET"
        found = answers[request.url.path]
        return httpx.Response(200, json={"count": len(found), "next": None, "results": found})

    client = NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(answer)
    )
    return NetBoxGateway(client)


@pytest.mark.asyncio
async def test_the_checks_read_every_value_of_a_kind_in_one_request_and_write_nothing():
    guests = [
        GuestFacts(
            n,
            f"g{n}",
            addresses=(("eth0", f"10.0.{n}.5/24"),),
            macs=(("net0", f"BC:24:11:00:00:{n:02X}"),),
            vids=(20,),
        )
        for n in range(1, 41)
    ]
    seen: list[httpx.Request] = []
    found = await checks.findings(
        fake_netbox(seen), guests, vrf_id=None, cluster_id=4, creates_prefixes=False
    )
    by_path = {}
    for request in seen:
        by_path.setdefault(request.url.path, []).append(request)
    addresses = by_path["/api/ipam/ip-addresses/"]
    assert len(addresses) == 1 and len(addresses[0].url.params.get_list("address")) == 40
    assert addresses[0].url.params["vrf_id"] == "null"
    assert len(by_path["/api/dcim/mac-addresses/"]) == 1
    assert by_path["/api/ipam/vlans/"][0].url.params["group"] == "proxbox-cluster-4"
    assert len(by_path["/api/virtualization/virtual-machines/"]) == 1
    # The 40 networks' supernets, 50 a request.
    supernets = prefixes.supernets(hygiene.networks(guests))
    assert len(by_path["/api/ipam/prefixes/"]) == -(-len(supernets) // 50) < len(guests)
    assert {f.rule for f in found} == set(hygiene.RULES)
    assert found[0].severity == ERROR
    mac = next(f for f in found if f.rule == "mac_collision" and f.guest == "g1")
    assert mac.where == "VM x (cluster pve-b) interface eth0"


@pytest.mark.asyncio
async def test_a_run_without_guests_to_check_reads_nothing():
    seen: list[httpx.Request] = []
    assert (
        await checks.findings(
            fake_netbox(seen),
            [GuestFacts(1, "g", addresses=(("eth0", "fe80::2/64"),))],
            vrf_id=3,
            cluster_id=-1,  # a cluster the run would create: no VLAN group yet
            creates_prefixes=False,
        )
        == []
    )
    assert seen == []


def test_the_cli_prints_each_finding_of_a_preview_and_of_a_run():
    report = RunReport(endpoint={"name": "pve"}, dry_run=True, plan=PlanRecorder())
    report.hygiene = [
        hygiene.Finding(
            "mac_collision",
            ERROR,
            "web (qemu/101)",
            "BC:24:11:00:00:01",
            "the MAC of net0 is already on a device's interface",
            "device sw1 interface eth0",
        ).as_dict()
    ]
    for render in (cli.render_plan, cli.render_summary):
        console = Console(record=True, width=200)
        render(report, console)
        assert (
            "error mac_collision web (qemu/101): the MAC of net0 is already on a device's "
            "interface (device sw1 interface eth0)"
        ) in console.export_text()


@pytest.mark.asyncio
async def test_a_vlan_group_netbox_does_not_know_yet_has_no_clash():
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/ipam/vlans/"
        return httpx.Response(400, json={"group": ["Select a valid choice."]})

    client = NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(answer)
    )
    assert await NetBoxGateway(client).group_vlans("proxbox-cluster-9", [20]) == []
