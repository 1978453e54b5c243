"""A VM interface's guest OS name and node bridge, and the DNS name of a VM's primary
addresses: the planners of the interfaces and ips stages (pure), the bridges' lookup,
the policy's protection and the preview's rendering."""

from dataclasses import replace

import pytest

from proxbox_backend.domain import baseline as bl
from proxbox_backend.domain.models import Guest, GuestAddress, GuestNic, NodeInterface
from proxbox_backend.domain.plan import Plan, Update
from proxbox_backend.domain.policy import SyncPolicy
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import BRIDGE_FIELD, GUEST_INTERFACE_FIELD
from proxbox_backend.stages import interfaces, ips

TAGS = [{"id": 1, "slug": "proxbox"}]
NET0 = GuestNic("net0", "net0", "BC:24:11:00:00:01", True, "virtio on vmbr0", bridge="vmbr0")
NET1 = GuestNic("net1", "net1", "BC:24:11:00:00:02", True, "virtio on vmbr1", bridge="vmbr1")


def guest(node="pve1", nics=(NET0, NET1), **fields) -> Guest:
    return Guest("qemu", 101, "web-001", node, "running", 2.0, 2048, nics=nics, **fields)


def iface(id_, name, *, guest_name=None, bridge=None, fields=True) -> dict:
    return {
        "id": id_,
        "name": name,
        "virtual_machine": {"id": 1},
        "enabled": True,
        "description": f"virtio on vmbr{name[-1]}",
        "primary_mac_address": {"mac_address": f"BC:24:11:00:00:0{int(name[-1]) + 1}"},
        "tags": TAGS,
        **(
            {
                "custom_fields": {
                    GUEST_INTERFACE_FIELD: guest_name,
                    BRIDGE_FIELD: {"id": bridge, "name": "vmbr"} if bridge else None,
                }
            }
            if fields
            else {}
        ),
    }


# -- the interfaces' custom fields ----------------------------------------------------------


def test_a_new_interface_names_its_guest_name_and_bridge():
    named = guest(nics=(replace(NET0, guest_name="ens18"), NET1), guest_names_known=True)
    bridges = {("pve1", "vmbr0"): 31, ("pve1", "vmbr1"): None}
    plan = interfaces.plan([(1, named)], [], {}, bridges)
    payloads = {c.key: c.payload for c in plan.creates}
    assert payloads[(1, "net0")]["custom_fields"] == {
        GUEST_INTERFACE_FIELD: "ens18",
        BRIDGE_FIELD: 31,
    }
    # nothing known to set: no custom fields sent
    assert "custom_fields" not in payloads[(1, "net1")]


def test_a_migrated_guests_nics_follow_it_to_the_new_nodes_bridge():
    current = [iface(5, "net0", bridge=31), iface(6, "net1", bridge=32)]
    bridges = {("pve2", "vmbr0"): 41, ("pve2", "vmbr1"): 42}
    plan = interfaces.plan([(1, guest(node="pve2"))], current, {}, bridges)
    assert {u.key: u.changes for u in plan.updates} == {
        (1, "net0"): {"custom_fields": {BRIDGE_FIELD: 41}},
        (1, "net1"): {"custom_fields": {BRIDGE_FIELD: 42}},
    }
    # on the old node nothing changes
    same = interfaces.plan(
        [(1, guest())], current, {}, {("pve1", "vmbr0"): 31, ("pve1", "vmbr1"): 32}
    )
    assert same.updates == [] and len(same.unchanged) == 2


def test_a_bridge_the_node_lacks_is_cleared_and_an_unknown_one_kept():
    current = [iface(5, "net0", bridge=31), iface(6, "net1", bridge=32)]
    # vmbr0: the node has none now; vmbr1: not known this run (left as it is)
    plan = interfaces.plan([(1, guest())], current, {}, {("pve1", "vmbr0"): None})
    assert {u.key: u.changes for u in plan.updates} == {
        (1, "net0"): {"custom_fields": {BRIDGE_FIELD: None}}
    }


@pytest.mark.parametrize(
    ("known", "reported", "changes"),
    [
        # the agent answered: its name replaces the old one, or clears it
        (True, "eth0", {GUEST_INTERFACE_FIELD: "eth0"}),
        (True, None, {GUEST_INTERFACE_FIELD: None}),
        # a silent agent: the name the interface has is kept
        (False, None, {}),
    ],
)
def test_the_guest_name_follows_the_agent_and_stays_while_it_is_silent(known, reported, changes):
    nic = replace(NET0, guest_name=reported)
    current = [iface(5, "net0", guest_name="ens18", bridge=31)]
    plan = interfaces.plan(
        [(1, guest(nics=(nic,), guest_names_known=known))], current, {}, {("pve1", "vmbr0"): 31}
    )
    assert {u.key: u.changes.get("custom_fields", {}) for u in plan.updates} == (
        {(1, "net0"): changes} if changes else {}
    )


class LookupGateway:
    def __init__(self, found):
        self.found, self.asked = found, []

    async def named_device_interfaces(self, device_ids, names):
        self.asked.append((device_ids, names))
        return self.found


@pytest.mark.asyncio
async def test_bridges_of_synced_nodes_are_known_others_are_read_in_one_request():
    netbox = LookupGateway([{"id": 77, "name": "vmbr0", "device": {"id": 12}}])
    owned = [(1, guest()), (2, guest(node="pve2")), (3, guest(node="pve9"))]
    devices = {"pve1": 11, "pve2": 12}
    synced = {(11, "vmbr0"): 31}
    bridges = await interfaces.bridge_ids(netbox, owned, devices, synced, frozenset({11}))
    # pve1's interfaces were synced this run: vmbr1 is not one of them
    assert bridges[("pve1", "vmbr0")] == 31 and bridges[("pve1", "vmbr1")] is None
    # pve2's were not (an incremental run): read from NetBox, once
    assert netbox.asked == [([12], ["vmbr0", "vmbr1"])]
    assert bridges[("pve2", "vmbr0")] == 77 and bridges[("pve2", "vmbr1")] is None
    # pve9 has no device: its guests' bridges are not known
    assert not any(node == "pve9" for node, _ in bridges)
    nothing = LookupGateway([])
    await interfaces.bridge_ids(nothing, owned[:1], devices, synced, frozenset({11}))
    assert nothing.asked == []


# -- the DNS name of the primary addresses --------------------------------------------------

V4, V4B, V6 = "10.0.0.5/24", "10.0.0.6/24", "fd00::5/64"
INTERFACE_IDS = {(1, "net0"): 50, (1, "net1"): 51}


def ip(id_, address, interface_id=50, dns_name="") -> dict:
    return {
        "id": id_,
        "address": address,
        "vrf": None,
        "dns_name": dns_name,
        "assigned_object_type": "virtualization.vminterface",
        "assigned_object_id": interface_id,
        "tags": TAGS,
    }


def addressed(*addresses, dns_name="web-001.example.com", reported=True) -> Guest:
    return guest(
        addresses=tuple(GuestAddress(nic, a) for nic, a in addresses),
        addresses_reported=reported,
        dns_name=dns_name,
    )


def test_a_new_vms_first_address_of_each_family_gets_the_dns_name():
    g = addressed(("net0", V4), ("net0", V4B), ("net1", V6))
    plan = ips.plan([(1, g)], INTERFACE_IDS, [], primaries={})
    names = {c.key: c.payload.get("dns_name") for c in plan.creates}
    assert names == {
        (50, V4): "web-001.example.com",
        (50, V4B): None,
        (51, V6): "web-001.example.com",
    }


def test_the_primary_set_keeps_the_name_and_a_wrong_name_is_corrected():
    g = addressed(("net0", V4), ("net0", V4B))
    current = [ip(1, V4), ip(2, V4B, dns_name="old.example.com")]
    # an operator made the second address the primary: it is the named one
    plan = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 2}})
    assert {u.key: u.changes for u in plan.updates} == {
        (50, V4B): {"dns_name": "web-001.example.com"}
    }
    # a primary on an address the sync does not keep is not named, nor is any other
    foreign = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 99}})
    assert foreign.updates == []


def test_a_deleted_primary_passes_the_name_to_the_next_primary():
    g = addressed(("net0", V4B))
    current = [ip(1, V4, dns_name="web-001.example.com"), ip(2, V4B)]
    plan = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 1}})
    assert [d.key for d in plan.deletes] == [(50, V4)]
    assert {u.key: u.changes for u in plan.updates} == {
        (50, V4B): {"dns_name": "web-001.example.com"}
    }


def test_a_guest_without_a_name_this_run_leaves_the_names_as_they_are():
    silent = addressed(("net0", V4), dns_name=None, reported=False)
    current = [ip(1, V4, dns_name="web-001.example.com")]
    plan = ips.plan([(1, silent)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 1}})
    assert plan.updates == [] and list(plan.unchanged) == [(50, V4)]
    # nor does a run that does not say the VMs' primaries (a caller without them)
    renamed = addressed(("net0", V4), dns_name="other.example.com")
    assert ips.plan([(1, renamed)], INTERFACE_IDS, current).updates == []


def test_a_kept_unconfirmed_primary_is_named_too():
    silent = addressed(dns_name="ct.example.com", reported=False)
    current = [ip(1, V4)]
    plan = ips.plan([(1, silent)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 1}})
    (update,) = plan.updates
    assert update.changes["dns_name"] == "ct.example.com"
    assert "proxbox-unconfirmed" in {t["slug"] for t in update.changes["tags"]}


def test_dns_name_is_a_protected_field_of_the_policy():
    g = addressed(("net0", V4))
    current = [ip(1, V4, dns_name="operator.example.com")]
    plan = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {"primary_ip4": 1}})
    assert plan.updates[0].changes == {"dns_name": "web-001.example.com"}
    protected = SyncPolicy.from_api({"protected_fields": ["dns_name"]}).restrict(plan)
    assert protected.updates == [] and protected.unchanged[(50, V4)] == 1
    # a create still carries it: protection is of what exists
    new = ips.plan([(1, g)], INTERFACE_IDS, [], primaries={})
    assert SyncPolicy.from_api({"protected_fields": ["dns_name"]}).restrict(new).creates[0].payload[
        "dns_name"
    ] == ("web-001.example.com")


# -- the preview ------------------------------------------------------------------------------


def test_the_preview_shows_only_the_custom_fields_an_update_writes():
    recorder = PlanRecorder()
    current = iface(5, "net0", guest_name="ens18", bridge=31)
    current["custom_fields"]["other_field"] = "kept"
    recorder.update("virtualization.vminterface", 5, {"custom_fields": {BRIDGE_FIELD: 41}}, current)
    (update,) = recorder.of("virtualization.vminterface").updates
    assert update["changes"] == {
        "custom_fields": {"old": {BRIDGE_FIELD: 31}, "new": {BRIDGE_FIELD: 41}}
    }


def test_an_unprotected_update_keeps_its_dns_name():
    plan = Plan(
        "ipam.ipaddress", updates=[Update((50, V4), "a", 1, {"dns_name": "web.example.com"})]
    )
    assert SyncPolicy.from_api({"protected_fields": ["primary_ip"]}).restrict(plan).updates


# -- incremental runs -------------------------------------------------------------------------


def test_a_bridge_appearing_on_its_node_makes_the_guest_dirty():
    g = guest()  # its NICs on vmbr0 and vmbr1
    vmbr0, vmbr1 = NodeInterface("vmbr0", "bridge", True), NodeInterface("vmbr1", "bridge", True)
    before = bl.digest(bl.guest_input(g, {"pve1": [vmbr0]}))
    # another interface of the node, or another node's bridge: nothing this guest uses
    eno1 = NodeInterface("eno1", "other", True, mtu=9000)
    assert bl.digest(bl.guest_input(g, {"pve1": [vmbr0, eno1], "pve2": [vmbr1]})) == before
    assert bl.digest(bl.guest_input(g, {"pve1": [vmbr0, vmbr1]})) != before
    assert bl.digest(bl.guest_input(g, {})) != before  # its node's network not read
    plain = guest(nics=(replace(NET0, bridge=None),))
    assert bl.guest_input(plain, {"pve1": [vmbr0]}) is plain


@pytest.mark.parametrize(
    "policy",
    [{"protected_fields": ["primary_ip"]}, {"modes": {"guests": "create_only"}}],
)
def test_a_primary_the_policy_holds_back_is_not_named_in_its_place(policy):
    held = SyncPolicy.from_api(policy)
    assert held.holds_back("virtualization.virtualmachine", "primary_ip4")
    g = addressed(("net0", V4))
    current = [ip(1, V4)]
    # The VM has no primary, and the policy keeps it so: no address becomes its primary.
    frozen = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {}}, frozen={1})
    assert frozen.updates == []
    free = ips.plan([(1, g)], INTERFACE_IDS, current, primaries={1: {}})
    assert [u.changes for u in free.updates] == [{"dns_name": "web-001.example.com"}]
    assert not SyncPolicy().holds_back("virtualization.virtualmachine", "primary_ip4")


# -- the custom fields, ensured with the prerequisites ----------------------------------------


def fields_netbox(existing: list[dict]):
    """A NetBox holding these custom fields; records the requests to them."""
    import json

    import httpx

    from proxbox_backend.clients.http import RetryPolicy
    from proxbox_backend.clients.netbox import NetBoxClient
    from proxbox_backend.gateways.netbox import NetBoxGateway
    from proxbox_backend.secrets import Secret

    sent: list[tuple[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            names = request.url.params.get_list("name")
            sent.append(("GET", sorted(names)))
            found = [f for f in existing if f["name"] in names]
            return httpx.Response(200, json={"results": found, "next": None})
        items = json.loads(request.content)
        sent.append((request.method, items))
        return httpx.Response(
            201 if request.method == "POST" else 200,
            json=[{"id": 90 + n, **item} for n, item in enumerate(items)],
        )

    client = NetBoxClient(
        "http://netbox.test",
        Secret("t" * 40),
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(answer),
    )
    return NetBoxGateway(client), sent


@pytest.mark.asyncio
async def test_the_run_fields_are_read_at_once_and_the_missing_ones_created():
    from proxbox_backend.domain.counters import Tally
    from proxbox_backend.gateways.netbox import NODE_FACT_FIELDS, RUN_FIELDS, SOURCE_FIELD

    old_source = {"id": 3, "name": SOURCE_FIELD, "object_types": ["virtualization.virtualmachine"]}
    netbox, sent = fields_netbox([old_source])
    tally = Tally()
    await netbox.ensure_run_fields(tally)
    assert sent[0] == ("GET", sorted(RUN_FIELDS))
    # the old source field learns devices; the two interface fields and the node devices'
    # facts are created together
    assert sent[1] == (
        "PATCH",
        [{"id": 3, "object_types": ["dcim.device", "virtualization.virtualmachine"]}],
    )
    method, created = sent[2]
    facts = [name for name, *_ in NODE_FACT_FIELDS.values()]
    assert method == "POST" and [f["name"] for f in created] == [
        GUEST_INTERFACE_FIELD,
        BRIDGE_FIELD,
        *facts,
    ]
    bridge = created[1]
    assert (bridge["type"], bridge["related_object_type"]) == ("object", "dcim.interface")
    assert bridge["object_types"] == ["virtualization.vminterface"]
    assert len(sent) == 3 and tally.of("extras.customfield").created == 2 + len(facts)
    # all there: one read, nothing written
    netbox, sent = fields_netbox([{**f, "id": n} for n, f in enumerate(RUN_FIELDS.values())])
    await netbox.ensure_run_fields(Tally())
    assert [method for method, _ in sent] == ["GET"]
