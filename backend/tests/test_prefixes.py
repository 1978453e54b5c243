"""Guest network prefixes: which network an address lives in, which networks get a prefix
(none where one covers them, an SDN subnet's included), that only the sync's own go, the
opt-in switch, targeted runs, and the stage's reads."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from proxbox_backend.clients.netbox import BulkResult
from proxbox_backend.domain import prefixes
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.policy import ACTIVE, OFF, SyncPolicy, Target
from proxbox_backend.stages import prefixes as stage

CLUSTER, VRF, SITE = 7, 3, 11
ON = SyncPolicy(modes={"prefixes": "always"})


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("10.0.0.5/24", "10.0.0.0/24"),
        ("10.0.0.5/16", "10.0.0.0/16"),
        ("2001:db8:0:5::10/64", "2001:db8:0:5::/64"),
        ("10.0.0.5/32", None),  # a host route
        ("2001:db8::1/128", None),
        ("fe80::1/64", None),  # link-local
        ("169.254.3.4/16", None),
        ("127.0.0.1/8", None),  # loopback
        ("not an address", None),
    ],
)
def test_an_address_lives_in_the_network_of_its_own_prefix_length(address, network):
    assert prefixes.network_of(address) == network


def test_networks_are_each_named_once_broadest_first():
    found = prefixes.networks(["10.0.1.7/24", "10.0.0.5/24", "10.0.0.6/24", "10.9.0.1/16"])
    assert found == ["10.9.0.0/16", "10.0.0.0/24", "10.0.1.0/24"]


def test_the_supernets_asked_for_are_every_prefix_containing_or_equal_to_a_network():
    asked = prefixes.supernets(["10.0.0.0/24"])
    assert len(asked) == 25 and "10.0.0.0/24" in asked and "0.0.0.0/0" in asked
    assert "10.0.0.0/23" in asked and "10.0.0.0/25" not in asked


def prefix(network: str, object_id: int, source: str | None = None, **fields) -> dict:
    """A prefix as NetBox answers it; `source`: the sync's key field, `proxbox_sdn`: an
    SDN subnet's."""
    custom = {prefixes.KEY_FIELD: source}
    custom.update(fields.pop("custom_fields", {}))
    return {
        "id": object_id,
        "prefix": network,
        "vrf": {"id": VRF},
        "scope_type": "dcim.site",
        "scope_id": SITE,
        "status": {"value": "active"},
        "description": prefixes.payload(network, VRF, SITE)["description"],
        "tags": [{"slug": "proxbox"}] if source else [],
        "custom_fields": custom,
        **fields,
    }


def own(network: str, object_id: int) -> dict:
    return prefix(network, object_id, prefixes.key(CLUSTER, network))


def test_a_network_gets_a_marked_prefix_in_the_vrf_scoped_to_the_site():
    desired, gone = prefixes.decide(CLUSTER, ["10.0.0.0/24"], [], [], set())
    assert (desired, gone) == (["10.0.0.0/24"], set())
    (create,) = prefixes.plan(CLUSTER, desired, [], VRF, SITE, gone=gone).creates
    assert create.payload["prefix"] == "10.0.0.0/24" and create.payload["vrf"] == VRF
    assert (create.payload["scope_type"], create.payload["scope_id"]) == ("dcim.site", SITE)
    assert create.payload["custom_fields"] == {prefixes.KEY_FIELD: "7/10.0.0.0/24"}
    assert [t["slug"] for t in create.payload["tags"]] == ["proxbox"]
    # An endpoint without a site: an unscoped prefix.
    unscoped = prefixes.plan(CLUSTER, desired, [], None, None).creates[0].payload
    assert (unscoped["scope_type"], unscoped["scope_id"], unscoped["vrf"]) == (None, None, None)


@pytest.mark.parametrize(
    "existing",
    [
        prefix("10.0.0.0/24", 1),  # an operator's, equal
        prefix("10.0.0.0/8", 1),  # an operator's, broader
        prefix("10.0.0.0/24", 1, custom_fields={"proxbox_sdn": "7/subnet/lan-10.0.0.0-24"}),
        prefix("10.0.0.0/16", 1, "9/10.0.0.0/16"),  # another cluster's
    ],
    ids=["equal", "broader", "sdn-subnet", "other-cluster"],
)
def test_a_network_an_existing_prefix_covers_gets_none(existing):
    desired, gone = prefixes.decide(CLUSTER, ["10.0.0.0/24"], [existing], [], set())
    assert (desired, gone) == ([], set())
    assert prefixes.plan(CLUSTER, desired, [], VRF, SITE, gone=gone).writes == 0


def test_a_narrower_prefix_covers_nothing_and_a_broader_own_network_covers_a_narrower_one():
    narrower = prefix("10.0.0.0/25", 1)
    desired, _ = prefixes.decide(CLUSTER, ["10.0.0.0/16", "10.0.1.0/24"], [narrower], [], set())
    assert desired == ["10.0.0.0/16"]


def test_the_sync_keeps_its_own_prefix_as_it_is():
    mine = own("10.0.0.0/24", 5)
    desired, gone = prefixes.decide(CLUSTER, ["10.0.0.0/24"], [mine], [mine], set())
    the_plan = prefixes.plan(CLUSTER, desired, [mine], VRF, SITE, gone=gone)
    assert the_plan.unchanged == {"10.0.0.0/24": 5} and the_plan.writes == 0


def test_only_the_syncs_own_prefix_goes_once_no_address_lives_in_it():
    mine, theirs = own("10.0.5.0/24", 5), prefix("10.0.6.0/24", 6)
    # `theirs` carries no key of the sync's: never its to remove, whatever a read returns.
    desired, gone = prefixes.decide(CLUSTER, [], [mine, theirs], [mine, theirs], set())
    assert (desired, gone) == ([], {"10.0.5.0/24"})
    the_plan = prefixes.plan(CLUSTER, desired, [mine, theirs], VRF, SITE, gone=gone)
    assert [(d.key, d.id) for d in the_plan.deletes] == [("10.0.5.0/24", 5)]
    # Nor does the planner delete it when told its network went.
    both = prefixes.plan(
        CLUSTER, [], [mine, theirs], VRF, SITE, gone={"10.0.5.0/24", "10.0.6.0/24"}
    )
    assert [d.id for d in both.deletes] == [5]
    # An address of a guest the run did not sync (excluded, unreadable) keeps it.
    desired, gone = prefixes.decide(CLUSTER, [], [mine], [mine], {"10.0.5.0/24"})
    assert (desired, gone) == (["10.0.5.0/24"], set())


def test_the_syncs_prefix_goes_once_another_covers_it():
    """An operator's prefix made later, equal or broader: the network has one now."""
    mine, operators = own("10.0.5.0/24", 5), prefix("10.0.0.0/16", 6)
    desired, gone = prefixes.decide(CLUSTER, ["10.0.5.0/24"], [mine, operators], [mine], set())
    the_plan = prefixes.plan(CLUSTER, desired, [mine], VRF, SITE, gone=gone)
    assert [d.id for d in the_plan.deletes] == [5] and the_plan.creates == []


def test_a_run_that_did_not_sync_every_guest_removes_nothing():
    mine, operators = own("10.0.5.0/24", 5), prefix("10.0.5.0/24", 6)
    desired, gone = prefixes.decide(CLUSTER, ["10.0.5.0/24"], [mine, operators], [mine], None)
    assert (desired, gone) == ([], None)
    the_plan = prefixes.plan(CLUSTER, desired, [mine], VRF, SITE, gone=gone)
    assert the_plan.deletes == [] and the_plan.unchanged == {"10.0.5.0/24": 5}


def test_an_own_prefix_in_another_vrf_moves_to_the_endpoints():
    moved = own("10.0.0.0/24", 5) | {"vrf": {"id": 99}}
    the_plan = prefixes.plan(CLUSTER, ["10.0.0.0/24"], [moved], VRF, SITE, gone=set())
    assert [(u.id, u.changes) for u in the_plan.updates] == [(5, {"vrf": VRF})]


def test_the_switch_is_off_unless_the_policy_says_otherwise():
    assert SyncPolicy().family_mode("prefixes") == OFF
    assert SyncPolicy.from_api({"modes": {"guests": "always"}}).family_mode("prefixes") == OFF
    assert ON.family_mode("prefixes") == "always"
    run = SimpleNamespace(policy=SyncPolicy())
    assert stage.STAGE.left_out(run) == {}  # left out: nothing read or written
    assert stage.STAGE.left_out(SimpleNamespace(policy=ON)) is None
    the_plan = prefixes.plan(
        CLUSTER, ["10.0.0.0/24"], [own("10.1.0.0/24", 5)], VRF, SITE, gone={"10.1.0.0/24"}
    )
    create_only = SyncPolicy(modes={"prefixes": "create_only"}).restrict(the_plan)
    assert len(create_only.creates) == 1 and create_only.deletes == []
    # The SDN's switch is not this one's (the SDN's prefixes answer to `sdn_mode`).
    assert SyncPolicy(modes={"sdn": "off", "prefixes": "always"}).restrict(the_plan).writes == 2


def test_a_targeted_sync_creates_its_guests_prefixes_and_leaves_the_rest_to_full_runs():
    the_plan = prefixes.plan(
        CLUSTER, ["10.0.0.0/24"], [own("10.1.0.0/24", 5)], VRF, SITE, gone={"10.1.0.0/24"}
    )
    restricted = ON.targeting(Target.parse(guest="qemu/100")).restrict(the_plan)
    assert [c.key for c in restricted.creates] == ["10.0.0.0/24"]
    assert restricted.deletes == [] and restricted.unchanged == {"10.1.0.0/24": 5}


class FakeNetBox:
    """The stage's gateway: answers its reads from `prefixes_in_vrf` (NetBox's prefixes)
    and `addresses`, records every call and write."""

    def __init__(self, prefixes_in_vrf=(), addresses=(), field_exists=True):
        self.prefixes_in_vrf = list(prefixes_in_vrf)
        self.addresses = list(addresses)
        self.field = field_exists
        self.calls: list[str] = []
        self.writes: list[tuple[str, list]] = []
        self.client = self

    async def prefix_field_exists(self):
        self.calls.append("field")
        return self.field

    async def ensure_prefix_field(self, tally):
        self.calls.append("ensure field")

    async def own_prefixes(self, cluster_id):
        self.calls.append("own")
        return [p for p in self.prefixes_in_vrf if prefixes.is_own(p, cluster_id)]

    async def covering_prefixes(self, vrf_id, networks):
        self.calls.append("covering")
        asked = set(prefixes.supernets(networks))
        return [p for p in self.prefixes_in_vrf if p["prefix"] in asked]

    async def vm_addresses_within(self, vrf_id, networks):
        self.calls.append("addresses")
        import ipaddress

        return [
            {"id": i, "address": a}
            for i, a in enumerate(self.addresses)
            if any(ipaddress.ip_interface(a).ip in ipaddress.ip_network(n) for n in networks)
        ]

    async def bulk_create(self, path, payloads):
        self.writes.append(("create", payloads))
        return BulkResult(succeeded={i: {"id": 900 + i} for i in range(len(payloads))})

    async def bulk_update(self, path, changes):
        self.writes.append(("update", changes))
        return BulkResult(succeeded={i: c for i, c in enumerate(changes)})

    async def bulk_delete(self, path, ids):
        self.writes.append(("delete", ids))
        return BulkResult(succeeded={i: {"id": id_} for i, id_ in enumerate(ids)})


def run_stage(netbox: FakeNetBox, addresses: list[str], complete: bool) -> dict:
    async def go():
        token = ACTIVE.set(ON)
        try:
            state = await stage.read(netbox, CLUSTER, VRF, addresses, complete)
            return await stage.apply(netbox, CLUSTER, VRF, SITE, state, Tally())
        finally:
            ACTIVE.reset(token)

    return asyncio.run(go())


def test_an_incremental_run_that_synced_no_guest_reads_nothing():
    netbox = FakeNetBox([own("10.0.0.0/24", 5)])
    assert run_stage(netbox, [], complete=False) == {}
    assert netbox.calls == [] and netbox.writes == []


def test_a_full_run_finds_its_prefixes_as_it_left_them_without_writing():
    netbox = FakeNetBox([own("10.0.0.0/24", 5), prefix("10.0.0.0/8", 6, custom_fields={})])
    netbox.prefixes_in_vrf[1]["prefix"] = "192.168.0.0/16"  # elsewhere: not asked for
    ids = run_stage(netbox, ["10.0.0.5/24", "10.0.0.6/24"], complete=True)
    assert ids == {"10.0.0.0/24": 5} and netbox.writes == []
    assert sorted(netbox.calls) == ["covering", "field", "own"]


def test_a_full_run_creates_the_missing_removes_the_empty_and_keeps_an_excluded_guests():
    netbox = FakeNetBox(
        [own("10.0.5.0/24", 5), own("10.0.6.0/24", 6), prefix("10.0.7.0/24", 7)],
        # An address of a guest this run did not sync lives in 10.0.6.0/24; the one in
        # 10.0.5.0/24 lies in the network but lives in a narrower one.
        addresses=["10.0.6.9/24", "10.0.5.9/28"],
    )
    run_stage(netbox, ["10.0.1.5/24", "10.0.7.5/24", "10.0.1.9/32"], complete=True)
    assert netbox.writes[0] == ("delete", [5])
    (kind, (created,)), *_ = netbox.writes[1:]
    assert kind == "create" and created["prefix"] == "10.0.1.0/24"
    assert len(netbox.writes) == 2
    assert "ensure field" not in netbox.calls


def test_the_key_field_is_made_with_the_first_prefix():
    netbox = FakeNetBox(field_exists=False)
    run_stage(netbox, ["10.0.1.5/24"], complete=True)
    assert netbox.calls.count("ensure field") == 1 and "own" not in netbox.calls
    assert [kind for kind, _ in netbox.writes] == ["create"]
