"""PVE 9 HA rules in NetBox: an operator adds a node-affinity and a resource-affinity rule
in Proxmox (its API, as a user's script would), and the sync records both as HA rules
with their member HA resources, beside the HA group PVE 9 has not yet turned into a rule;
a rule disabled or removed in Proxmox is so in NetBox after the next run.

The simulator speaks PVE 9.2 (its bundled release). The tests run in file order and
build on each other (one NetBox, one simulator).
"""

from __future__ import annotations

import asyncio

import pytest
from sync_fixtures import (
    Simulator,
    create_endpoint,
    create_site,
    list_all,
    run_sync,
    settings_for,
)

from proxbox_backend.service import SyncService

RULES = "/plugins/proxbox/inventory/ha-rules/"
RESOURCES = "/plugins/proxbox/inventory/ha-resources/"
PIN, APART = "pin-to-pve2", "keep-apart"


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    # Two nodes, the showcase's HA guest in an HA group (seed 3, as the majors' matrix).
    sim = Simulator("harules", "pair", 3, sync_workdir)
    try:
        sim.start().renumber("10.82.0")
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    site = create_site(netbox_server, "pbsync-harules")
    return create_endpoint(netbox_server, "pve-harules", simulator, site=site)


def ok(response) -> None:
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def rules(simulator) -> dict:
    """A second guest put under HA, pinned to pve2 by a strict node-affinity rule, and
    kept apart from the seeded HA guest by a resource-affinity rule."""
    with simulator.api() as pve:
        assert pve.get("/version").json()["data"]["version"].startswith("9.")
        (seeded,) = pve.get("/cluster/ha/resources").json()["data"]
        guests = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
        other = next(
            g
            for g in sorted(guests, key=lambda g: g["vmid"])
            if g["type"] == "qemu" and not g.get("template") and f"vm:{g['vmid']}" != seeded["sid"]
        )
        second = f"vm:{other['vmid']}"
        # The state it is in, so that HA has nothing to start or stop meanwhile.
        state = "started" if other["status"] == "running" else "stopped"
        ok(pve.post("/cluster/ha/resources", data={"sid": second, "state": state}))
        ok(
            pve.post(
                "/cluster/ha/rules",
                data={
                    "rule": PIN,
                    "type": "node-affinity",
                    "resources": second,
                    "nodes": "pve2:2,pve1",
                    "strict": 1,
                    "comment": "licence bound to pve2",
                },
            )
        )
        ok(
            pve.post(
                "/cluster/ha/rules",
                data={
                    "rule": APART,
                    "type": "resource-affinity",
                    "resources": f"{seeded['sid']},{second}",
                    "affinity": "negative",
                },
            )
        )
    return {"seeded": seeded, "second": second}


def sync(netbox_server, simulator, endpoint):
    report = run_sync(netbox_server, simulator, endpoint["id"])
    assert report.ok, (report.error, report.as_dict())
    # PVE 9: nothing about HA groups (nor anything else) to warn about.
    assert report.warnings == [] and report.read_failures == [], report.as_dict()
    assert report.tally.failed == 0, report.tally.failures
    return report


def test_a_preview_plans_both_rules_with_their_members(netbox_server, simulator, endpoint, rules):
    service = SyncService(settings_for(netbox_server, simulator))
    preview = asyncio.run(service.preview(endpoint["id"]))
    assert preview.ok, (preview.error, preview.as_dict())
    planned = preview.plan.as_dict()["object_types"]["netbox_proxbox.proxmoxharule"]
    creates = {c["label"]: c["payload"] for c in planned["creates"]}
    assert set(creates) == {PIN, APART}
    # The members are the HA resources the same run would create (placeholders).
    assert len(creates[PIN]["resources"]) == 1 and len(creates[APART]["resources"]) == 2
    assert all(i < 0 for i in creates[APART]["resources"])


def test_both_rules_are_in_netbox_with_their_members(netbox_server, simulator, endpoint, rules):
    report = sync(netbox_server, simulator, endpoint)
    cluster_id = report.cluster["id"]
    assert report.tally.of("netbox_proxbox.proxmoxharule").created == 2
    resources = {r["sid"]: r for r in list_all(netbox_server, RESOURCES, cluster_id=cluster_id)}
    assert set(resources) == {rules["seeded"]["sid"], rules["second"]}
    found = {r["name"]: r for r in list_all(netbox_server, RULES, cluster_id=cluster_id)}
    assert set(found) == {PIN, APART}

    pin, apart = found[PIN], found[APART]
    assert (pin["rule_type"]["value"], pin["affinity"]["value"]) == ("node-affinity", "positive")
    assert (pin["nodes"], pin["strict"], pin["enabled"]) == ("pve1,pve2:2", True, True)
    assert (pin["comment"], pin["errors"]) == ("licence bound to pve2", "")
    assert [m["id"] for m in pin["resources"]] == [resources[rules["second"]]["id"]]
    assert (apart["rule_type"]["value"], apart["affinity"]["value"], apart["nodes"]) == (
        "resource-affinity",
        "negative",
        "",
    )
    assert {m["sid"] for m in apart["resources"]} == set(resources)
    # A member links back: the HA resources a rule lists, by the rule.
    listed = list_all(netbox_server, RESOURCES, rule_id=apart["id"])
    assert {r["sid"] for r in listed} == set(resources)
    # The seeded group is one PVE 9 has not yet turned into a rule: it stays a group, and
    # the rule PVE 9 has (none of its name here) is not recorded as a group as well.
    (group,) = list_all(
        netbox_server, "/plugins/proxbox/inventory/ha-groups/", cluster_id=cluster_id
    )
    assert group["name"] == rules["seeded"]["group"]
    assert resources[rules["seeded"]["sid"]]["group"]["id"] == group["id"]
    assert resources[rules["second"]]["group"] is None


def test_a_rule_disabled_or_removed_in_proxmox_follows_in_netbox(
    netbox_server, simulator, endpoint, rules
):
    with simulator.api() as pve:
        ok(pve.put(f"/cluster/ha/rules/{APART}", data={"type": "resource-affinity", "disable": 1}))
        ok(pve.delete(f"/cluster/ha/rules/{PIN}"))
    report = sync(netbox_server, simulator, endpoint)
    tally = report.tally.of("netbox_proxbox.proxmoxharule")
    assert (tally.created, tally.updated, tally.deleted) == (0, 1, 1)
    (apart,) = list_all(netbox_server, RULES, cluster_id=report.cluster["id"])
    assert (apart["name"], apart["enabled"], len(apart["resources"])) == (APART, False, 2)
