"""Assignment rules: which rule decides a guest (each matcher, order, first match, disabled
rules), what the guests planner writes from it, what the policy's protected fields keep,
how a preview names the rule, and that a changed rule makes the next run a full one."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.domain.assignment import AssignmentRule, first_match, placeable
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Platform
from proxbox_backend.domain.policy import PolicyError, SyncPolicy
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.incremental import context_digest
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import guests

from .test_planners import GUEST_PLACEMENT, guest, vm

KEY = "cluster-7/qemu/101"


def rule(id_=1, weight=10, **kw) -> AssignmentRule:
    kw.setdefault("tenant", 50)
    return AssignmentRule(id=id_, weight=weight, **kw)


@pytest.mark.parametrize(
    ("matcher", "matching", "other"),
    [
        ({"name_pattern": r"web-\d+"}, guest(name="web-001"), guest(name="db-001")),
        # the whole name, not a part of it
        ({"name_pattern": "web"}, guest(name="web"), guest(name="web-001")),
        ({"tag": "prod"}, guest(tags=("lab", "Prod")), guest(tags=("lab",))),
        ({"pool": "webpool"}, guest(pool="webpool"), guest(pool=None)),
        ({"node": "pve2"}, guest(node="pve2"), guest(node="pve1")),
        ({"vmid_min": 200}, guest(vmid=200), guest(vmid=199)),
        ({"vmid_max": 199}, guest(vmid=199), guest(vmid=200)),
        ({"vmid_min": 100, "vmid_max": 100}, guest(vmid=100), guest(vmid=101)),
        # every set matcher must match
        ({"node": "pve1", "pool": "web"}, guest(node="pve1", pool="web"), guest(node="pve1")),
    ],
)
def test_each_matcher(matcher, matching, other):
    the_rule = rule(**matcher)
    assert the_rule.matches(matching)
    assert not the_rule.matches(other)
    assert first_match([the_rule], matching) is the_rule
    assert first_match([the_rule], other) is None


def test_rules_are_tried_in_order_and_the_first_match_wins():
    broad = rule(1, weight=50, node="pve1", tenant=1)
    narrow = rule(2, weight=20, name_pattern="web-.*", tenant=2)
    last = rule(3, weight=90, vmid_min=100, tenant=3)
    rules = [last, broad, narrow]  # as listed, not as ordered
    assert first_match(rules, guest(name="web-001", node="pve1")) is narrow
    assert first_match(rules, guest(name="db-001", node="pve1")) is broad
    assert first_match(rules, guest(name="db-001", node="pve2")) is last


def test_a_disabled_rule_is_skipped():
    off = rule(1, weight=10, node="pve1", tenant=1, enabled=False)
    on = rule(2, weight=20, node="pve1", tenant=2)
    assert first_match([off, on], guest()) is on
    assert first_match([off], guest()) is None


def test_a_rule_from_the_plugin():
    data = {
        "rule": {
            "id": 4,
            "weight": 30,
            "enabled": True,
            "description": "web",
            "match": {"name_pattern": "web-.*", "proxmox_tag": None, "vmid_min": 100},
            "assign": {"tenant": 5, "vm_role": 6, "platform": 7, "site": None, "location": 9},
        }
    }
    parsed = AssignmentRule.from_api(data)
    assert (parsed.name_pattern, parsed.tag, parsed.vmid_min) == ("web-.*", None, 100)
    assert parsed.assignments() == {"tenant": 5, "role": 6, "platform": 7}  # no location
    assert parsed.label == "rule 30 (web)"
    data["rule"]["match"]["name_pattern"] = "web-("
    with pytest.raises(PolicyError, match="name pattern"):
        AssignmentRule.from_api(data)


def placement(*rules, **kw):
    return replace(GUEST_PLACEMENT, rules=tuple(rules), **kw)


def test_a_new_vm_gets_what_its_rule_assigns():
    the_rule = rule(tenant=50, role=60, platform=70, site=3)
    plan = guests.plan([guest()], [], placement(the_rule, role_id=99))
    payload = plan.creates[0].payload
    assert (payload["tenant"], payload["role"], payload["platform"], payload["site"]) == (
        50,
        60,
        70,
        3,
    )
    # No rule: the endpoint's defaults.
    plan = guests.plan([guest(node="pve2")], [], placement(rule(node="pve1"), role_id=99))
    assert (plan.creates[0].payload["tenant"], plan.creates[0].payload["role"]) == (None, 99)


def test_an_existing_vm_follows_its_rule_and_then_stays_unchanged():
    the_rule = rule(tenant=50, role=60, platform=70)
    current = vm(1, KEY)
    plan = guests.plan([guest()], [current], placement(the_rule))
    assert plan.updates[0].changes == {"tenant": 50, "role": 60, "platform": 70}
    # Once written, the next run has nothing to write.
    current = {**current, "tenant": {"id": 50}, "role": {"id": 60}, "platform": {"id": 70}}
    plan = guests.plan([guest()], [current], placement(the_rule))
    assert not plan.updates and plan.unchanged == {KEY: 1}


def test_protected_fields_keep_what_the_operator_set():
    the_rule = rule(tenant=50, role=60)
    plan = guests.plan([guest()], [vm(1, KEY)], placement(the_rule))
    kept = SyncPolicy(protected_fields=frozenset({"tenant"})).restrict(plan)
    assert kept.updates[0].changes == {"role": 60}


def test_a_rule_site_away_from_the_cluster_site_is_not_written():
    rules, warnings = placeable([rule(site=4, tenant=50)], cluster_site=3)
    assert rules[0].site is None and rules[0].tenant == 50
    assert "rule 10" in warnings[0] and "site 4" in warnings[0]
    assert placeable([rule(site=4)], cluster_site=None) == ((rule(site=4),), [])
    plan = guests.plan([guest()], [vm(1, KEY)], placement(*rules))
    assert plan.updates[0].changes == {"tenant": 50}


def test_a_preview_names_the_rule_beside_the_fields_it_decides():
    recorder = PlanRecorder()
    placeholder = recorder.create("virtualization.virtualmachine", {"name": "a", "tenant": 50})
    recorder.update("virtualization.virtualmachine", 1, {"tenant": 50}, {"name": "b"})
    recorder.update("virtualization.virtualmachine", 2, {"status": "active"}, {"name": "c"})
    for obj_id in (placeholder, 1, 2):
        recorder.explain("virtualization.virtualmachine", obj_id, {"tenant"}, "rule 10 (web)")
    plan = recorder.as_dict()["object_types"]["virtualization.virtualmachine"]
    assert plan["creates"][0]["because"] == "rule 10 (web)"
    assert plan["updates"][0]["because"] == "rule 10 (web)"
    assert "because" not in plan["updates"][1]  # its change is not the rule's


def test_a_changed_rule_changes_the_incremental_context():
    endpoint = Endpoint(1, "pve", "pve.example", 8006, True, True, "cluster", None, 3, None, 7)

    def context(rules):
        return context_digest(replace(endpoint, assignment_rules=rules), 7, "offline", "skip", {})

    before = context((rule(tenant=50),))
    assert context((rule(tenant=50),)) == before
    assert context((rule(tenant=51),)) != before
    assert context((rule(tenant=50, enabled=False),)) != before
    assert context(()) != before


def netbox_answering(rules_status: int, rules: list[dict]):
    """A NetBox with endpoint 5 and, at `rules_status`, its assignment rules."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/plugins/proxbox/endpoints/proxmox/5/":
            return httpx.Response(
                200, json={"id": 5, "name": "pve", "host": "pve.test", "site": {"id": 3}}
            )
        if path == "/api/plugins/proxbox/assignment-rules/":
            assert request.url.params["endpoint_id"] == "5"
            body = {"count": len(rules), "next": None, "results": rules}
            return httpx.Response(rules_status, json=body if rules_status == 200 else {})
        return httpx.Response(500, json={"detail": f"unexpected {path}"})

    client = NetBoxClient(
        "http://netbox.test",
        Secret("0123456789abcdef0123456789abcdef01234567"),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    return NetBoxGateway(client)


def plugin_rule(id_, weight, **match):
    return {
        "id": id_,
        "rule": {
            "id": id_,
            "weight": weight,
            "enabled": True,
            "description": "",
            "match": match,
            "assign": {"tenant": 50},
        },
    }


@pytest.mark.asyncio
async def test_the_endpoint_is_read_with_its_rules_in_order():
    gateway = netbox_answering(200, [plugin_rule(8, 40, node="b"), plugin_rule(9, 20, node="a")])
    endpoint = await gateway.endpoint(5)
    assert [(r.id, r.weight, r.node) for r in endpoint.assignment_rules] == [
        (9, 20, "a"),
        (8, 40, "b"),
    ]
    # A plugin that has no rules yet (404 for the list): none, the run goes on.
    assert (await netbox_answering(404, []).endpoint(5)).assignment_rules == ()
    with pytest.raises(NetBoxError):
        await netbox_answering(500, []).endpoint(5)
    # Rules it may not see would be ignored in silence: the run stops naming the grant.
    with pytest.raises(NetBoxError, match="view_proxmoxassignmentrule"):
        await netbox_answering(403, []).endpoint(5)


def test_a_rules_platform_wins_over_the_one_the_guest_reports():
    reported = guest(platform=Platform("debian", "Debian"), platform_reported=True)
    known = {"platforms": frozenset({"debian"})}
    plan = guests.plan([reported], [], placement(rule(platform=70), **known))
    assert plan.creates[0].payload["platform"] == 70
    # Without a platform in the rule, the guest's own still counts.
    plan = guests.plan([reported], [], placement(rule(tenant=50), **known))
    assert plan.creates[0].payload["platform"] == {"slug": "debian"}
