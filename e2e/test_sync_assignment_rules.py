"""Assignment rules, created through the plugin's REST API, in real syncs against the
simulator: a guest's VM gets the tenant, role, platform and site of the first enabled rule
(by order) that matches its Proxmox tag, pool, node, VMID range or name; a changed rule
takes effect on the next run, incremental runs included, and a run with nothing changed
writes nothing; a protected field stays as the operator set it; a preview lists a rule's
change and names the rule.

The tests run in file order and build on each other (one endpoint, one small simulator,
one baseline store).
"""

from __future__ import annotations

import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    assert_only_reflection_written,
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    run_sync,
)

from proxbox_backend.baselines import MemoryBaselines

ENDPOINTS = "/plugins/proxbox/endpoints/proxmox/"
RULES = "/plugins/proxbox/assignment-rules/"
VMS = "/virtualization/virtual-machines/"


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    simulator = fixtures.Simulator("rules", "single", 8, sync_workdir)
    try:
        simulator.start().renumber("10.100.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def site(netbox_server):
    return create_site(netbox_server, "pbsync-rules")


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator, site):
    return create_endpoint(netbox_server, "pve-rules", simulator, site=site)


@pytest.fixture(scope="module")
def baselines():
    return MemoryBaselines()


def post(netbox, path: str, body: dict) -> dict:
    with netbox.api() as api:
        response = api.post(path, json=body)
    assert response.status_code == 201, response.text
    return response.json()


def patch(netbox, path: str, body: dict) -> dict:
    with netbox.api() as api:
        response = api.patch(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def refs(netbox_server):
    """Tenants, VM roles and a platform the rules assign (ids by name)."""
    made = {}
    for name in ("rules-acme", "rules-globex", "rules-initech"):
        made[name] = post(netbox_server, "/tenancy/tenants/", {"name": name, "slug": name})["id"]
    for name in ("rules-web", "rules-operator-role"):
        made[name] = post(
            netbox_server, "/dcim/device-roles/", {"name": name, "slug": name, "vm_role": True}
        )["id"]
    made["rules-os"] = post(
        netbox_server, "/dcim/platforms/", {"name": "rules-os", "slug": "rules-os"}
    )["id"]
    return made


@pytest.fixture(scope="module")
def guests(simulator):
    """The simulator's guests: the first carries Proxmox tag `pbx-web`, the second is in
    pool `pbx-db`, the rest only match the catch-all VMID range."""
    found = sorted(simulator.inventory()["guests"].items())
    assert len(found) >= 3, "the rules tests need three guests"
    (web_kind, web_vmid), web = found[0]
    (_, db_vmid), _db = found[1]
    with simulator.api() as pve:
        tagged = pve.put(
            f"/nodes/{web['resource']['node']}/{web_kind}/{web_vmid}/config",
            data={"tags": "pbx-web"},
        )
        assert tagged.status_code == 200, tagged.text
        assert pve.post("/pools", data={"poolid": "pbx-db"}).status_code == 200
        # Seeded guests are in pools already: moved, as `allow-move` lets PVE do.
        pooled = pve.put("/pools/pbx-db", data={"vms": str(db_vmid), "allow-move": 1})
        assert pooled.status_code == 200, pooled.text
    return {"web": web_vmid, "db": db_vmid, "rest": [vmid for (_, vmid), _ in found[2:]]}


@pytest.fixture(scope="module")
def rules(netbox_server, endpoint, refs, site, guests):
    """Created through REST, listed out of order; the disabled rule would match all."""
    rule = {"endpoint": endpoint["id"]}
    return {
        "catch-all": post(
            netbox_server,
            RULES,
            {**rule, "weight": 30, "vmid_min": 100, "tenant": refs["rules-initech"]},
        ),
        "web": post(
            netbox_server,
            RULES,
            {
                **rule,
                "weight": 10,
                "description": "web servers",
                "proxmox_tag": "pbx-web",
                "tenant": refs["rules-acme"],
                "vm_role": refs["rules-web"],
                "platform": refs["rules-os"],
                "site": site,
            },
        ),
        "db": post(
            netbox_server,
            RULES,
            {**rule, "weight": 20, "pool": "pbx-db", "tenant": refs["rules-globex"]},
        ),
        "disabled": post(
            netbox_server,
            RULES,
            {
                **rule,
                "weight": 5,
                "enabled": False,
                "name_pattern": ".*",
                "tenant": refs["rules-globex"],
            },
        ),
    }


def sync(netbox, simulator, endpoint, baselines, **kw):
    report = run_sync(netbox, simulator, endpoint["id"], baselines=baselines, **kw)
    assert report.ok, (report.error, report.as_dict())
    return report


def by_vmid(netbox, cluster_id: int) -> dict[int, dict]:
    found = list_all(netbox, VMS, cluster_id=cluster_id)
    return {
        int(vm["custom_fields"]["proxbox_source"].split("#")[0].split("/")[2]): vm for vm in found
    }


def ref(value) -> int | None:
    return value["id"] if value else None


@pytest.fixture(scope="module")
def first_run(netbox_server, simulator, endpoint, baselines, rules):
    return sync(netbox_server, simulator, endpoint, baselines)


def test_bad_rules_are_refused_naming_the_field(netbox_server, endpoint, refs):
    other_site = create_site(netbox_server, "pbsync-rules-elsewhere")
    with netbox_server.api() as api:
        before = api.get(RULES, params={"endpoint_id": endpoint["id"]}).json()["count"]
        for body, field in (
            ({"name_pattern": "web-(", "tenant": refs["rules-acme"]}, "name_pattern"),
            ({"vmid_min": 500, "vmid_max": 400, "tenant": refs["rules-acme"]}, "vmid_max"),
            ({"node": "pve1"}, "tenant"),
            ({"node": "pve1", "site": other_site}, "site"),
        ):
            response = api.post(RULES, json={"endpoint": endpoint["id"], "weight": 99, **body})
            assert response.status_code == 400, response.text
            assert field in response.json(), response.text
        assert api.get(RULES, params={"endpoint_id": endpoint["id"]}).json()["count"] == before


def test_each_vm_gets_what_the_first_matching_rule_assigns(
    netbox_server, first_run, guests, refs, site
):
    vms = by_vmid(netbox_server, first_run.cluster["id"])
    web = vms[guests["web"]]
    assert ref(web["tenant"]) == refs["rules-acme"]  # not the catch-all's: first match wins
    assert ref(web["role"]) == refs["rules-web"]
    assert ref(web["platform"]) == refs["rules-os"]
    assert ref(web["site"]) == site
    assert ref(vms[guests["db"]]["tenant"]) == refs["rules-globex"]
    assert vms[guests["db"]]["role"] is None  # its rule assigns no role
    for vmid in guests["rest"]:
        # The disabled rule (first by order, matching every name) is skipped.
        assert ref(vms[vmid]["tenant"]) == refs["rules-initech"], vmid


def test_a_resync_with_nothing_changed_writes_nothing(
    netbox_server, simulator, endpoint, baselines, first_run
):
    since = change_marker(netbox_server)
    report = sync(netbox_server, simulator, endpoint, baselines)
    assert report.run_mode["mode"] == "incremental"
    assert report.tally.writes == 0
    assert_only_reflection_written(object_changes_since(netbox_server, since))


def test_a_changed_rule_takes_effect_on_the_next_run(
    netbox_server, simulator, endpoint, baselines, first_run, rules, guests, refs
):
    patch(netbox_server, f"{RULES}{rules['db']['id']}/", {"tenant": refs["rules-acme"]})
    report = sync(netbox_server, simulator, endpoint, baselines)
    assert report.run_mode["mode"] == "full"  # the rules are part of the run's context
    vms = by_vmid(netbox_server, first_run.cluster["id"])
    assert ref(vms[guests["db"]]["tenant"]) == refs["rules-acme"]
    # Only that VM changed; and the run after is incremental again, writing nothing.
    assert report.tally.of("virtualization.virtualmachine").updated == 1
    again = sync(netbox_server, simulator, endpoint, baselines)
    assert again.run_mode["mode"] == "incremental" and again.tally.writes == 0


def test_a_protected_field_keeps_the_operators_value(
    netbox_server, simulator, endpoint, baselines, first_run, rules, guests, refs
):
    cluster_id = first_run.cluster["id"]
    web = by_vmid(netbox_server, cluster_id)[guests["web"]]
    patch(netbox_server, f"{ENDPOINTS}{endpoint['id']}/", {"protected_fields": ["role"]})
    patch(netbox_server, f"{VMS}{web['id']}/", {"role": refs["rules-operator-role"]})
    patch(netbox_server, f"{RULES}{rules['web']['id']}/", {"tenant": refs["rules-initech"]})
    sync(netbox_server, simulator, endpoint, baselines)
    web = by_vmid(netbox_server, cluster_id)[guests["web"]]
    assert ref(web["role"]) == refs["rules-operator-role"]  # protected: kept
    assert ref(web["tenant"]) == refs["rules-initech"]  # not protected: the rule's
    # Unprotected, the rule's role comes back.
    patch(netbox_server, f"{ENDPOINTS}{endpoint['id']}/", {"protected_fields": []})
    sync(netbox_server, simulator, endpoint, baselines)
    assert ref(by_vmid(netbox_server, cluster_id)[guests["web"]]["role"]) == refs["rules-web"]


def test_a_preview_lists_a_rules_change_and_names_the_rule(
    netbox_server, simulator, endpoint, baselines, first_run, rules, guests, refs
):
    cluster_id = first_run.cluster["id"]
    db = by_vmid(netbox_server, cluster_id)[guests["db"]]
    patch(
        netbox_server,
        f"{RULES}{rules['db']['id']}/",
        {"tenant": refs["rules-globex"], "description": "databases"},
    )
    since = change_marker(netbox_server)
    preview = run_sync(netbox_server, simulator, endpoint["id"], dry_run=True)
    assert preview.ok, (preview.error, preview.as_dict())
    plan = preview.plan.as_dict()["object_types"]["virtualization.virtualmachine"]
    (update,) = [u for u in plan["updates"] if u["id"] == db["id"]]
    # A reference changes by id on both sides, as the run writes it.
    assert update["changes"]["tenant"] == {"old": refs["rules-acme"], "new": refs["rules-globex"]}
    assert update["because"] == "rule 20 (databases)"
    assert [u["id"] for u in plan["updates"]] == [db["id"]]  # nothing else would change
    assert object_changes_since(netbox_server, since) == []  # a preview writes nothing
    assert ref(by_vmid(netbox_server, cluster_id)[guests["db"]]["tenant"]) == refs["rules-acme"]
