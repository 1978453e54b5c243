"""Reading PVE status entries and guest configs into the domain (pure, table-driven)."""

import httpx
import pytest

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials
from proxbox_backend.domain import proxmox_config as parse
from proxbox_backend.domain.models import (
    CLUSTER,
    STANDALONE,
    ClusterIdentity,
    GuestAddress,
    GuestDisk,
    Platform,
    ProxmoxInventory,
)
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.secrets import Secret


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            [
                {"type": "cluster", "name": "prod", "nodes": 2, "quorate": 1},
                {"type": "node", "name": "pve2", "online": 1},
                {"type": "node", "name": "pve1", "online": 1},
            ],
            ("prod", CLUSTER, ("pve1", "pve2"), True),
        ),
        (
            [{"type": "cluster", "name": "lab", "quorate": 0}, {"type": "node", "name": "a"}],
            ("lab", CLUSTER, ("a",), False),
        ),
        ([{"type": "node", "name": "pve", "nodeid": 0}], ("pve", STANDALONE, ("pve",), True)),
    ],
)
def test_cluster_identity(status, expected):
    identity = parse.cluster_identity(status)
    assert (identity.name, identity.mode, identity.nodes, identity.quorate) == expected


def test_cluster_identity_refuses_nodes_without_a_cluster():
    with pytest.raises(parse.ConfigError):
        parse.cluster_identity([{"type": "node", "name": "a"}, {"type": "node", "name": "b"}])


@pytest.mark.parametrize(
    ("value", "mb"),
    [("32G", 32768), ("512M", 512), ("1T", 1048576), ("1.5G", 1536), ("4194304", 4), ("8g", 8192)],
)
def test_size_mb(value, mb):
    assert parse.size_mb(value) == mb


def test_size_mb_rejects_garbage():
    with pytest.raises(parse.ConfigError):
        parse.size_mb("lots")


QEMU_CONFIG = {
    "name": "web-001",
    "cores": 2,
    "sockets": 2,
    "memory": "4096",
    "scsi0": "local-lvm:vm-101-disk-0,iothread=1,size=32G",
    "virtio1": "shared-nfs:101/vm-101-disk-1.qcow2,size=8G",
    "ide2": "local:iso/debian.iso,media=cdrom,size=600M",
    "efidisk0": "local-lvm:vm-101-disk-2,size=4M",
    "net0": "virtio=bc:24:11:00:0c:a0,bridge=vmbr0,firewall=1",
    "net1": "e1000=BC:24:11:00:0C:A1,bridge=vmbr1,link_down=1",
    "smbios1": "uuid=ABCDEF",
}


def test_qemu_guest():
    guest = parse.guest(
        {"type": "qemu", "vmid": 101, "node": "pve1", "status": "running", "name": "web-001"},
        QEMU_CONFIG,
    )
    assert guest.vcpus == 4.0 and guest.memory_mb == 4096
    assert guest.creation_id == "uuid:abcdef"
    assert [(n.name, n.mac, n.enabled) for n in guest.nics] == [
        ("net0", "BC:24:11:00:0C:A0", True),
        ("net1", "BC:24:11:00:0C:A1", False),
    ]
    assert guest.nics[0].description == "virtio on vmbr0"
    # CD-ROMs and EFI vars are not disks of the guest's data.
    assert guest.disks == (
        GuestDisk("scsi0", 32768, "local-lvm:vm-101-disk-0"),
        GuestDisk("virtio1", 8192, "shared-nfs:101/vm-101-disk-1.qcow2"),
    )
    assert guest.disk_mb == 40960


def test_meta_ctime_is_preferred_creation_identity():
    config = {**QEMU_CONFIG, "meta": "creation-qemu=9.0.2,ctime=1712345678"}
    assert parse.creation_id("qemu", config) == "ctime:1712345678"


def test_lxc_guest_addresses_from_config():
    config = {
        "hostname": "db-002",
        "cores": 1,
        "memory": 2048,
        "rootfs": "local-lvm:vm-102-disk-0,size=16G",
        "mp0": "local-lvm:vm-102-disk-1,mp=/data,size=100G",
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:0C:C0,ip=10.0.0.5/24,gw=10.0.0.1",
        "net1": "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:00:0C:C1,ip=dhcp,ip6=fd00::5/64",
    }
    guest = parse.guest({"type": "lxc", "vmid": 102, "node": "pve2", "status": "stopped"}, config)
    assert guest.name == "db-002" and guest.creation_id is None
    assert [n.name for n in guest.nics] == ["eth0", "eth1"]
    assert guest.addresses == (
        GuestAddress("eth0", "10.0.0.5/24"),
        GuestAddress("eth1", "fd00::5/64"),
    )
    assert [d.key for d in guest.disks] == ["mp0", "rootfs"]


def test_agent_addresses_match_nics_by_mac_and_skip_loopback_and_link_local():
    nics = parse.nics("qemu", QEMU_CONFIG)
    agent = [
        {
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}],
        },
        {
            "name": "ens18",
            "hardware-address": "bc:24:11:00:0c:a0",
            "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "10.1.0.7", "prefix": 24},
                {"ip-address-type": "ipv6", "ip-address": "fe80::1", "prefix": 64},
            ],
        },
        {
            "name": "docker0",
            "hardware-address": "02:42:ac:11:00:01",
            "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "172.17.0.1", "prefix": 16}],
        },
    ]
    assert parse.agent_addresses(agent, nics) == [GuestAddress("net0", "10.1.0.7/24")]


def test_lxc_runtime_addresses():
    nics = parse.nics("lxc", {"net0": "name=eth0,hwaddr=BC:24:11:00:00:01,ip=dhcp"})
    entries = [
        {"name": "lo", "inet": "127.0.0.1/8"},
        {"name": "eth0", "hwaddr": "bc:24:11:00:00:01", "inet": "192.168.1.9/24"},
    ]
    assert parse.lxc_runtime_addresses(entries, nics) == [GuestAddress("eth0", "192.168.1.9/24")]


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("pve.example.com", 8006, "https://pve.example.com:8006"),
        ("10.0.0.5", 443, "https://10.0.0.5:443"),
        ("fd00::5", 8006, "https://[fd00::5]:8006"),
        ("https://pve.example.com", 8006, "https://pve.example.com:8006"),
        ("https://pve.example.com:9000/", 8006, "https://pve.example.com:9000"),
        ("http://[::1]:8006", 1, "http://[::1]:8006"),
    ],
)
def test_endpoint_url(host, port, url):
    from proxbox_backend.domain.endpoint import Endpoint

    endpoint = Endpoint(1, "e", host, port, True, True, "cluster", None, None, None, None)
    assert endpoint.url == url


CLOUD_INIT_CONFIG = {
    **QEMU_CONFIG,
    "ipconfig0": "ip=10.1.0.7/24,gw=10.1.0.1,ip6=2001:db8::7/64,gw6=2001:db8::1",
    "ipconfig1": "ip=dhcp,ip6=auto",
    "ipconfig5": "ip=10.5.0.7/24",  # no net5: nothing to attach it to
}


def test_cloud_init_static_addresses_belong_to_their_nic():
    guest = parse.guest(
        {"type": "qemu", "vmid": 101, "node": "pve1", "status": "stopped", "name": "web-001"},
        CLOUD_INIT_CONFIG,
    )
    assert guest.addresses == (
        GuestAddress("net0", "10.1.0.7/24"),
        GuestAddress("net0", "2001:db8::7/64"),
    )
    # From config alone the guest did not say which addresses it has now.
    assert guest.addresses_reported is False


def test_reported_addresses_follow_the_configured_ones_once():
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": "running"}
    reported = [GuestAddress("net0", "10.1.0.7/24"), GuestAddress("net1", "192.168.5.9/24")]
    guest = parse.guest(resource, CLOUD_INIT_CONFIG, reported)
    assert guest.addresses == (
        GuestAddress("net0", "10.1.0.7/24"),
        GuestAddress("net0", "2001:db8::7/64"),
        GuestAddress("net1", "192.168.5.9/24"),
    )
    assert guest.addresses_reported is True
    # An agent that answered with nothing still answered: its silence is not an outage.
    assert parse.guest(resource, CLOUD_INIT_CONFIG, []).addresses_reported is True


@pytest.mark.parametrize(
    ("config", "reported", "platform"),
    [
        (CLOUD_INIT_CONFIG, [GuestAddress("net1", "192.168.5.9/24")], None),
        # a reported address the config names too is listed once, where the config has it
        (CLOUD_INIT_CONFIG, [GuestAddress("net0", "10.1.0.7/24")], Platform("debian-12", "D")),
        ({**QEMU_CONFIG, "ostype": "win11"}, [], Platform("mswindows-11", "Windows 11")),
        ({**QEMU_CONFIG, "ostype": "win11"}, [], None),
    ],
)
def test_a_report_added_to_the_parsed_config_is_the_guest_parsed_with_it(
    config, reported, platform
):
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": "running"}
    draft = parse.guest(resource, config)
    assert parse.reported(draft, reported, platform) == parse.guest(
        resource, config, reported, platform
    )


# -- the gateway: when does a guest count as having reported its addresses --------------

AGENT_ANSWER = {
    "result": [
        {
            "name": "ens18",
            "hardware-address": "bc:24:11:00:0c:a0",
            "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "10.1.0.50", "prefix": 24}],
        }
    ]
}


def blank_inventory() -> ProxmoxInventory:
    """What a guest's read adds to: its warnings and its config's digest."""
    return ProxmoxInventory(ClusterIdentity("pve1", STANDALONE, ("pve1",), True), [], [])


def _pve(config: dict, agent: int | dict, lxc: int | list | None = None):
    """A Proxmox answering one guest's config, its agent (status code or answer) and the
    container runtime interfaces; remembers the paths asked."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        asked.append(path)
        if path.endswith("/config"):
            return httpx.Response(200, json={"data": config})
        body = agent if path.endswith("/agent/network-get-interfaces") else lxc
        if isinstance(body, int):
            reason = b"QEMU guest agent is not running"
            return httpx.Response(body, extensions={"reason_phrase": reason}, json={"data": None})
        return httpx.Response(200, json={"data": body})

    client = ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    return ProxmoxGateway(client), asked


@pytest.mark.parametrize(
    ("status", "agent_setting", "agent", "reported", "addresses", "agent_asked"),
    [
        ("running", "1", AGENT_ANSWER, True, ["10.1.0.7/24", "10.1.0.50/24"], True),
        # the agent is configured but does not answer: not a report
        ("running", "enabled=1,fstrim_cloned_disks=1", 500, False, ["10.1.0.7/24"], True),
        # no agent configured: Proxmox is not asked, and nothing was reported
        ("running", "0", AGENT_ANSWER, False, ["10.1.0.7/24"], False),
        ("stopped", "1", AGENT_ANSWER, False, ["10.1.0.7/24"], False),
    ],
)
@pytest.mark.asyncio
async def test_gateway_qemu_addresses_reported_only_by_an_answering_agent(
    status, agent_setting, agent, reported, addresses, agent_asked
):
    config = {**QEMU_CONFIG, "agent": agent_setting, "ipconfig0": "ip=10.1.0.7/24"}
    gateway, asked = _pve(config, agent)
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": status, "name": "w"}
    inventory = blank_inventory()
    guest = await gateway._guest(resource, inventory)
    warnings = inventory.warnings
    assert guest.addresses_reported is reported
    assert [a.address for a in guest.addresses] == addresses
    assert any(p.endswith("/agent/network-get-interfaces") for p in asked) is agent_asked
    assert bool(warnings) is (agent == 500)


@pytest.mark.parametrize(
    ("status", "runtime", "reported", "addresses"),
    [
        (
            "running",
            [{"name": "eth0", "inet": "10.0.0.9/24"}],
            True,
            ["10.0.0.5/24", "10.0.0.9/24"],
        ),
        ("running", 500, False, ["10.0.0.5/24"]),
        ("stopped", [{"name": "eth0", "inet": "10.0.0.9/24"}], False, ["10.0.0.5/24"]),
    ],
)
@pytest.mark.asyncio
async def test_gateway_container_addresses_reported_by_its_runtime(
    status, runtime, reported, addresses
):
    config = {
        "hostname": "db-002",
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:0C:C0,ip=10.0.0.5/24",
    }
    gateway, _ = _pve(config, 500, runtime)
    resource = {"type": "lxc", "vmid": 102, "node": "pve2", "status": status}
    guest = await gateway._guest(resource, blank_inventory())
    assert guest.addresses_reported is reported
    assert [a.address for a in guest.addresses] == addresses


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("prod;staging", ("prod", "staging")),
        ("prod, web  prod", ("prod", "web")),
        ("", ()),
        (None, ()),
    ],
)
def test_guest_tags(value, expected):
    assert parse.guest_tags(value) == expected


def test_guest_reads_its_tags_from_config():
    config = {**QEMU_CONFIG, "tags": "prod;staging"}
    guest = parse.guest({"type": "qemu", "vmid": 101, "node": "pve1", "status": "stopped"}, config)
    assert guest.tags == ("prod", "staging")


def test_nic_vlans_from_tag_and_trunks():
    config = {
        "net0": "virtio=BC:24:11:00:0C:A0,bridge=vmbr0,tag=10",
        "net1": "virtio=BC:24:11:00:0C:A1,bridge=vmbr0,tag=20,trunks=30;31-33;30",
        "net2": "virtio=BC:24:11:00:0C:A2,bridge=vmbr1,tag=5000,trunks=x",
    }
    assert [(n.vlan, n.trunks) for n in parse.nics("qemu", config)] == [
        (10, ()),
        (20, (30, 31, 32, 33)),
        (None, ()),  # outside 1-4094, or not a number: no VLAN
    ]
    lxc = {"net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:0C:C0,tag=42,ip=dhcp"}
    assert parse.nics("lxc", lxc)[0].vlan == 42


@pytest.mark.parametrize(
    ("osinfo", "expected"),
    [
        (
            {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12"},
            ("debian-12", "Debian GNU/Linux 12"),
        ),
        (
            {"id": "mswindows", "name": "Microsoft Windows", "version-id": "11"},
            ("mswindows-11", "Microsoft Windows 11"),
        ),
        ({"id": "rhel", "version-id": "9.4"}, ("rhel-9-4", "rhel 9.4")),
        ({"name": "no id"}, None),
    ],
)
def test_agent_platform(osinfo, expected):
    platform = parse.agent_platform(osinfo)
    assert (platform and (platform.slug, platform.name)) == expected


def test_platform_from_ostype_is_a_hint_not_a_report():
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": "stopped"}
    guest = parse.guest(resource, {**QEMU_CONFIG, "ostype": "win11"})
    assert (guest.platform.slug, guest.platform_reported) == ("mswindows-11", False)
    assert parse.guest(resource, {**QEMU_CONFIG, "ostype": "other"}).platform is None
    lxc = {"type": "lxc", "vmid": 102, "node": "pve1", "status": "stopped"}
    assert parse.guest(lxc, {"ostype": "alpine"}).platform.slug == "alpine"


@pytest.mark.parametrize(
    ("osinfo_status", "slug", "reported"),
    [(200, "debian-12", True), (500, "mswindows-11", False)],
)
@pytest.mark.asyncio
async def test_gateway_asks_the_agent_for_the_os(osinfo_status, slug, reported):
    config = {**QEMU_CONFIG, "agent": "1", "ostype": "win11"}
    osinfo = {"result": {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12"}}

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/config"):
            return httpx.Response(200, json={"data": config})
        if path.endswith("/agent/get-osinfo"):
            if osinfo_status != 200:
                return httpx.Response(osinfo_status, json={"data": None})
            return httpx.Response(200, json={"data": osinfo})
        return httpx.Response(200, json={"data": AGENT_ANSWER})

    client = ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": "running", "name": "w"}
    guest = await ProxmoxGateway(client)._guest(resource, blank_inventory())
    assert (guest.platform.slug, guest.platform_reported) == (slug, reported)
    assert guest.addresses_reported  # the interfaces answer stands on its own


NODE_NETWORK = [
    {"iface": "eno1", "type": "eth", "active": 1, "method": "manual"},
    {"iface": "eno2", "type": "eth", "active": 0, "mtu": "9000"},
    {"iface": "bond0", "type": "bond", "active": 1, "slaves": "eno1 eno2", "mtu": 9000},
    {
        "iface": "vmbr0",
        "type": "bridge",
        "active": 1,
        "bridge_ports": "bond0",
        "comments": "mgmt\n",
    },
    {"iface": "bond0.100", "type": "vlan", "active": 1},
    {"iface": "vlan200", "type": "vlan", "active": 1, "vlan-raw-device": "vmbr0"},
    {"iface": "vmbr0:1", "type": "alias", "active": 1},
    {"iface": "weird0", "type": "unknown"},
]


def test_node_interfaces_types_and_links():
    by_name = {i.name: i for i in parse.node_interfaces(NODE_NETWORK)}
    assert sorted(by_name) == ["bond0", "bond0.100", "eno1", "eno2", "vlan200", "vmbr0"]
    assert {n: i.type for n, i in by_name.items()} == {
        "bond0": "lag",
        "bond0.100": "virtual",
        "eno1": "other",
        "eno2": "other",
        "vlan200": "virtual",
        "vmbr0": "bridge",
    }
    assert by_name["eno1"].lag == by_name["eno2"].lag == "bond0"
    assert by_name["bond0"].bridge == "vmbr0" and by_name["bond0"].mtu == 9000
    assert by_name["eno2"].mtu == 9000 and by_name["eno2"].enabled is False
    assert by_name["bond0.100"].parent == "bond0" and by_name["vlan200"].parent == "vmbr0"
    assert by_name["vmbr0"].description == "mgmt" and by_name["vmbr0"].bridge is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"tag-style": "color-map=prod:FF0000:ffffff;staging:00ff00,shape=circle"},
            {"prod": "ff0000", "staging": "00ff00"},
        ),
        ({"tag-style": "shape=none"}, {}),
        ({"tag-style": "color-map=bad:red;ok:123abc"}, {"ok": "123abc"}),
        ({}, {}),
    ],
)
def test_tag_colors_from_the_cluster_tag_style(options, expected):
    assert parse.tag_colors(options) == expected


@pytest.mark.parametrize("options_status", [200, 403])
@pytest.mark.asyncio
async def test_gateway_inventory_reads_tag_style_and_node_networks(options_status):
    from proxbox_backend.domain.models import ClusterIdentity, ProxmoxNode

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        if path == "/cluster/resources":
            return httpx.Response(200, json={"data": []})
        if path == "/cluster/options":
            if options_status != 200:
                return httpx.Response(options_status, json={"data": None})
            return httpx.Response(200, json={"data": {"tag-style": "color-map=prod:aa0000"}})
        if path == "/nodes/pve1/network":
            return httpx.Response(200, json={"data": NODE_NETWORK})
        return httpx.Response(500, json={"data": None})  # pve2's network

    client = ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    nodes = [ProxmoxNode("pve1", True), ProxmoxNode("pve2", True), ProxmoxNode("pve3", False)]
    identity = ClusterIdentity("c", "cluster", ("pve1", "pve2", "pve3"), True)
    inventory = await ProxmoxGateway(client).inventory(identity, nodes)
    assert inventory.tag_colors == ({"prod": "aa0000"} if options_status == 200 else {})
    # pve2 did not answer and pve3 is offline: neither is in (so neither loses interfaces)
    assert list(inventory.node_networks) == ["pve1"]
    assert len(inventory.node_networks["pve1"]) == 6
    # A failed read, not a remark: it makes the run degraded.
    assert [f for f in inventory.read_failures if "pve2: network unreadable" in f]
    assert not inventory.warnings


# -- guest names: the OS's interface names, the guest's DNS name, the NICs' bridges ------


def test_nics_name_their_bridge_and_a_containers_its_own_interface_name():
    qemu = parse.nics("qemu", QEMU_CONFIG)
    assert [(n.bridge, n.guest_name) for n in qemu] == [("vmbr0", None), ("vmbr1", None)]
    lxc = parse.nics("lxc", {"net0": "name=eth0,bridge=vmbr2,hwaddr=BC:24:11:00:0C:C0"})
    assert [(n.name, n.bridge, n.guest_name) for n in lxc] == [("eth0", "vmbr2", "eth0")]
    # No bridge: QEMU's user-mode network.
    assert parse.nics("qemu", {"net0": "virtio=BC:24:11:00:0C:A0"})[0].bridge is None


def test_agent_nic_names_match_by_mac_the_first_listed_interface_wins():
    nics = parse.nics("qemu", QEMU_CONFIG)
    agent = [
        {"name": "lo", "hardware-address": "00:00:00:00:00:00"},
        {"name": "ens18", "hardware-address": "bc:24:11:00:0c:a0"},
        # a VLAN interface inside the guest shares its parent's MAC
        {"name": "ens18.100", "hardware-address": "bc:24:11:00:0c:a0"},
        {"name": "docker0", "hardware-address": "02:42:ac:11:00:01"},
    ]
    named = parse.agent_nic_names(agent, nics)
    assert [(n.name, n.guest_name) for n in named] == [("net0", "ens18"), ("net1", None)]
    assert [n.mac for n in named] == [n.mac for n in nics]


@pytest.mark.parametrize(
    ("hostname", "search", "expected"),
    [
        ("web01", None, "web01"),
        ("web01", "", "web01"),
        ("web01", "example.com lab.local", "web01.example.com"),
        ("web01", "example.com,lab.local", "web01.example.com"),
        ("db.example.org", "other.net", "db.example.org"),  # a dotted name is whole
        ("WIN-AGENT", "Corp.Example.", "win-agent.corp.example"),
        ("host.", None, "host"),
        ("bad name", "example.com", None),  # no DNS name NetBox would take
        ("", "example.com", None),
        (None, None, None),
    ],
)
def test_fqdn(hostname, search, expected):
    assert parse.fqdn(hostname, search) == expected


@pytest.mark.parametrize(
    ("config", "node_search", "expected"),
    [
        ({"hostname": "ct1", "searchdomain": "lab.local"}, "example.com", "ct1.lab.local"),
        # without its own, a container inherits its node's search domains
        ({"hostname": "ct1"}, "example.com", "ct1.example.com"),
        ({"hostname": "ct1"}, "", "ct1"),
        # the node's could not be read: a short name's domain is unknown
        ({"hostname": "ct1"}, None, None),
        ({"hostname": "ct1.corp.net"}, None, "ct1.corp.net"),
        ({}, "example.com", None),
    ],
)
def test_container_dns_name(config, node_search, expected):
    assert parse.container_dns_name(config, node_search) == expected
    resource = {"type": "lxc", "vmid": 102, "node": "pve2", "status": "stopped"}
    guest = parse.guest(resource, config, node_search_domains=node_search)
    assert guest.dns_name == expected
    assert guest.guest_names_known  # a container's names are in its config


def test_agent_dns_name_takes_the_cloud_init_search_domain():
    assert parse.agent_dns_name("web01", {"searchdomain": "example.com"}) == "web01.example.com"
    assert parse.agent_dns_name("web01", {}) == "web01"
    assert parse.agent_dns_name(None, {"searchdomain": "example.com"}) is None


def _agent_pve(config: dict, interfaces: int | dict, host_name: int | dict):
    """A Proxmox answering one QEMU guest's config and its agent's interfaces and host
    name (a status code: the call fails with it)."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/config"):
            return httpx.Response(200, json={"data": config})
        body = {
            "network-get-interfaces": interfaces,
            "get-host-name": host_name,
        }.get(path.rsplit("/", 1)[-1], 501)
        if isinstance(body, int):
            reason = b"QEMU guest agent is not running"
            return httpx.Response(body, extensions={"reason_phrase": reason}, json={"data": None})
        return httpx.Response(200, json={"data": body})

    return ProxmoxGateway(
        ProxmoxClient(
            "https://pve.test:8006",
            ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
            transport=httpx.MockTransport(answer),
            retry=RetryPolicy(attempts=1),
        )
    )


@pytest.mark.parametrize(
    ("interfaces", "host_name", "dns_name", "names"),
    [
        (AGENT_ANSWER, {"result": {"host-name": "Web01"}}, "web01.example.com", ("ens18", None)),
        # an agent too old for get-host-name still names the interfaces
        (AGENT_ANSWER, 500, None, ("ens18", None)),
        # a silent agent says nothing: the names stay unknown (kept in NetBox)
        (500, {"result": {"host-name": "web01"}}, None, (None, None)),
    ],
)
@pytest.mark.asyncio
async def test_gateway_reads_the_guests_names_from_its_agent(
    interfaces, host_name, dns_name, names
):
    config = {**QEMU_CONFIG, "agent": "1", "searchdomain": "example.com"}
    gateway = _agent_pve(config, interfaces, host_name)
    resource = {"type": "qemu", "vmid": 101, "node": "pve1", "status": "running", "name": "w"}
    guest = await gateway._guest(resource, blank_inventory())
    assert guest.dns_name == dns_name
    assert tuple(n.guest_name for n in guest.nics) == names
    assert guest.guest_names_known is (interfaces != 500)


@pytest.mark.asyncio
async def test_gateway_reads_the_dns_of_the_nodes_holding_containers_only():
    from proxbox_backend.domain.models import ProxmoxNode

    asked: list[str] = []
    resources = [
        {"type": "lxc", "vmid": 102, "node": "pve1", "status": "stopped"},
        {"type": "qemu", "vmid": 101, "node": "pve2", "status": "stopped"},
    ]
    configs = {
        "/nodes/pve1/lxc/102/config": {
            "hostname": "ct1",
            "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:0C:C0",
        },
        "/nodes/pve2/qemu/101/config": QEMU_CONFIG,
    }

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        asked.append(path)
        if path == "/cluster/resources":
            return httpx.Response(200, json={"data": resources})
        if path in configs:
            return httpx.Response(200, json={"data": configs[path]})
        if path == "/nodes/pve1/dns":
            return httpx.Response(200, json={"data": {"search": "lab.example", "dns1": "1.1.1.1"}})
        return httpx.Response(200, json={"data": []})

    client = ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    nodes = [ProxmoxNode("pve1", True), ProxmoxNode("pve2", True)]
    identity = ClusterIdentity("c", "cluster", ("pve1", "pve2"), True)
    inventory = await ProxmoxGateway(client).inventory(identity, nodes)
    assert [p for p in asked if p.endswith("/dns")] == ["/nodes/pve1/dns"]
    assert inventory.node_search_domains == {"pve1": "lab.example"}
    by_kind = {g.kind: g for g in inventory.guests}
    assert by_kind["lxc"].dns_name == "ct1.lab.example"
    assert by_kind["qemu"].dns_name is None  # stopped: its agent was not asked


@pytest.mark.parametrize(
    ("config", "maxcpu", "vcpus"),
    [
        ({}, None, 1.0),  # qemu-server's defaults, before the status broadcast has it
        ({"sockets": 2}, 2, 2.0),  # maxcpu is sockets × cores already: not counted twice
        ({"cores": 4, "sockets": 2}, 8, 8.0),
        ({"cores": 4, "sockets": 2, "vcpus": 3}, 3, 3.0),
    ],
)
def test_a_qemu_guests_vcpus_follow_its_config_and_qemu_servers_defaults(config, maxcpu, vcpus):
    resource = {"type": "qemu", "vmid": 150, "node": "pve1", "status": "running"}
    if maxcpu is not None:
        resource["maxcpu"] = maxcpu
    assert parse.guest(resource, config).vcpus == vcpus


def test_a_container_without_cores_may_use_its_nodes_cores():
    resource = {"type": "lxc", "vmid": 151, "node": "pve1", "status": "running", "maxcpu": 16}
    assert parse.guest(resource, {"hostname": "ct151"}).vcpus == 16.0
    assert parse.guest(resource, {"hostname": "ct151", "cores": 2}).vcpus == 2.0
