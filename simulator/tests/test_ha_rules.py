"""PVE 9 HA rules: the allOf/oneOf contract becomes real parameters, and
/cluster/ha/rules creates, lists, updates and deletes rules as PVE does."""

from __future__ import annotations

import uuid

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from simtest_support import ROOT_PASSWORD, expect_data, expect_error, make_vm

from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.contracts.sources import FAKEPVE_SCHEMA_VERSION, parse_artifact, read_fakepve


@pytest.fixture(scope="module")
def pve9() -> Contract:
    return parse_artifact(read_fakepve(), FAKEPVE_SCHEMA_VERSION).contract


def _params(contract: Contract, path: str, method: str) -> dict:
    return {p.name: p for p in contract.endpoint(path, method).parameters}


def test_all_of_one_of_schemas_become_parameters_and_survive_a_round_trip(pve9):
    create = _params(pve9, "/cluster/ha/rules", "POST")
    assert set(create) == {
        "rule", "type", "resources", "nodes", "strict", "affinity", "disable", "comment"
    }  # fmt: skip
    # Required by every type stays required; required by one type only is
    # left to the type's own set (node-affinity's ``nodes``).
    assert not create["rule"].optional and not create["resources"].optional
    assert not create["type"].optional
    assert create["type"].enum == ("node-affinity", "resource-affinity")
    assert create["nodes"].optional and create["nodes"].format == "pve-ha-node-list"
    # node-affinity defaults ``affinity`` to positive, resource-affinity has no
    # default: no default may leak onto the other type.
    assert create["affinity"].default is None
    variants = pve9.endpoint("/cluster/ha/rules", "POST").variants
    assert variants.type_property == "type"
    node_affinity = {p.name: p for p in variants.for_type("node-affinity")}
    assert not node_affinity["nodes"].optional and node_affinity["affinity"].default == "positive"
    assert "nodes" not in {p.name for p in variants.for_type("resource-affinity")}
    assert node_affinity["nodes"].extra["typetext"] == "<node>[:<pri>]{,<node>[:<pri>]}*"

    update = _params(pve9, "/cluster/ha/rules/{rule}", "PUT")
    assert {"delete", "digest", "rule", "type", "resources", "nodes"} <= set(update)
    # A per-parameter oneOf (SDN fabrics) keeps the optional its alternatives declare.
    fabric = _params(pve9, "/cluster/sdn/fabrics/fabric", "POST")
    assert fabric["redistribute"].optional and fabric["redistribute"].type == "array"
    assert "oneOf" in fabric["redistribute"].extra

    again = Contract.from_dict(pve9.to_dict())
    assert again.to_json() == pve9.to_json()
    assert again.endpoint("/cluster/ha/rules", "POST").variants.to_dict() == variants.to_dict()


def _ha_guest(root, vmid: int) -> str:
    make_vm(root, "pve1", vmid)
    expect_data(root.post("/cluster/ha/resources", data={"sid": f"vm:{vmid}", "state": "stopped"}))
    return f"vm:{vmid}"


def test_node_affinity_rule_lifecycle(root, unique_vmid):
    first, second = _ha_guest(root, unique_vmid), _ha_guest(root, unique_vmid + 1)
    rule = f"prefer-pve2-{uuid.uuid4().hex[:6]}"
    expect_data(
        root.post(
            "/cluster/ha/rules",
            data={
                "rule": rule,
                "type": "node-affinity",
                "resources": f"{second},{first}",
                "nodes": "pve3,pve2:2",
                "strict": 1,
                "comment": "database pair",
            },
        )
    )
    listed = expect_data(root.get("/cluster/ha/rules"), "/cluster/ha/rules")
    entry = next(r for r in listed if r["rule"] == rule)
    assert entry["type"] == "node-affinity" and entry["affinity"] == "positive"
    assert entry["resources"] == ",".join(sorted([first, second]))
    assert entry["nodes"] == "pve2:2,pve3" and entry["strict"] == 1
    assert entry["comment"] == "database pair" and "errors" not in entry
    assert len(entry["digest"]) == 40 and entry["order"] >= 1
    single = expect_data(root.get(f"/cluster/ha/rules/{rule}"), "/cluster/ha/rules/{rule}")
    assert single == entry
    by_resource = expect_data(root.get("/cluster/ha/rules", params={"resource": first}))
    assert rule in {r["rule"] for r in by_resource}
    by_type = expect_data(root.get("/cluster/ha/rules", params={"type": "resource-affinity"}))
    assert rule not in {r["rule"] for r in by_type}

    expect_error(
        root.post(
            "/cluster/ha/rules",
            data={"rule": rule, "type": "node-affinity", "resources": first, "nodes": "pve1"},
        ),
        500,
        f"HA rule '{rule}' already defined",
    )

    # PUT: the digest guards, ``delete`` drops optional settings only.
    expect_error(
        root.put(
            f"/cluster/ha/rules/{rule}",
            data={"type": "node-affinity", "comment": "x", "digest": "0" * 40},
        ),
        500,
        "detected modified configuration",
    )
    expect_data(
        root.put(
            f"/cluster/ha/rules/{rule}",
            data={
                "type": "node-affinity",
                "nodes": "pve1",
                "delete": "strict,comment",
                "digest": entry["digest"],
            },
        )
    )
    updated = expect_data(root.get(f"/cluster/ha/rules/{rule}"))
    assert updated["nodes"] == "pve1" and "strict" not in updated and "comment" not in updated
    assert updated["digest"] != entry["digest"]
    expect_error(
        root.put(f"/cluster/ha/rules/{rule}", data={"type": "node-affinity", "delete": "nodes"}),
        500,
        "unable to delete required option 'nodes'",
    )
    expect_error(
        root.put(
            f"/cluster/ha/rules/{rule}",
            data={"type": "node-affinity", "comment": "a", "delete": "comment"},
        ),
        500,
        "cannot set and delete property 'comment' at the same time!",
    )
    expect_error(
        root.put(f"/cluster/ha/rules/{rule}", data={"type": "resource-affinity", "comment": "a"}),
        500,
        "unexpected property 'type'",
    )

    expect_data(root.delete(f"/cluster/ha/rules/{rule}"))
    assert rule not in {r["rule"] for r in expect_data(root.get("/cluster/ha/rules"))}
    expect_error(root.get(f"/cluster/ha/rules/{rule}"), 500, f"no such ha rule '{rule}'")


def test_type_specific_parameters_are_checked_against_the_rule_type(root, unique_vmid):
    first, second = _ha_guest(root, unique_vmid), _ha_guest(root, unique_vmid + 1)
    # ``nodes`` and ``strict`` belong to node-affinity only.
    wrong = root.post(
        "/cluster/ha/rules",
        data={
            "rule": "keep-apart-wrong",
            "type": "resource-affinity",
            "resources": f"{first},{second}",
            "affinity": "negative",
            "nodes": "pve1",
            "strict": 1,
        },
    )
    expect_error(wrong, 400, "Parameter verification failed")
    assert set(wrong.json()["errors"]) == {"nodes", "strict"}
    assert "not defined in schema" in wrong.json()["errors"]["nodes"]
    # Each type's own required parameters.
    missing = root.post(
        "/cluster/ha/rules",
        data={"rule": "keep-apart-missing", "type": "resource-affinity", "resources": first},
    )
    expect_error(missing, 400, "Parameter verification failed")
    assert missing.json()["errors"] == {"affinity": "property is missing and it is not optional"}
    no_nodes = root.post(
        "/cluster/ha/rules",
        data={"rule": "pin-missing", "type": "node-affinity", "resources": first},
    )
    assert no_nodes.json()["errors"] == {"nodes": "property is missing and it is not optional"}
    bad_type = root.post(
        "/cluster/ha/rules", data={"rule": "odd-type", "type": "location", "resources": first}
    )
    assert set(bad_type.json()["errors"]) == {"type"}
    assert not any(
        r["rule"] in {"keep-apart-wrong", "keep-apart-missing", "pin-missing", "odd-type"}
        for r in expect_data(root.get("/cluster/ha/rules"))
    )

    # References and feasibility.
    expect_error(
        root.post(
            "/cluster/ha/rules",
            data={"rule": "ghost", "type": "node-affinity", "resources": "vm:4", "nodes": "pve1"},
        ),
        500,
        "cannot use unmanaged resource(s) vm:4.",
    )
    expect_error(
        root.post(
            "/cluster/ha/rules",
            data={"rule": "far", "type": "node-affinity", "resources": first, "nodes": "nowhere"},
        ),
        500,
        "cannot use non-existant node(s) nowhere.",
    )
    lonely = root.post(
        "/cluster/ha/rules",
        data={
            "rule": "lonely",
            "type": "resource-affinity",
            "resources": first,
            "affinity": "positive",
        },
    )
    expect_error(lonely, 400, "Rule 'lonely' is invalid.")
    assert lonely.json()["errors"] == {
        "resources": "rule is ineffective as there are less than two resources"
    }
    apart = f"keep-apart-{uuid.uuid4().hex[:6]}"
    expect_data(
        root.post(
            "/cluster/ha/rules",
            data={
                "rule": apart,
                "type": "resource-affinity",
                "resources": f"{first},{second}",
                "affinity": "negative",
            },
        )
    )
    together = root.post(
        "/cluster/ha/rules",
        data={
            "rule": "together",
            "type": "resource-affinity",
            "resources": f"{first},{second}",
            "affinity": "positive",
        },
    )
    expect_error(together, 400, "Rule 'together' is invalid.")
    entry = expect_data(root.get(f"/cluster/ha/rules/{apart}"))
    assert entry["affinity"] == "negative" and "errors" not in entry
    expect_data(root.delete(f"/cluster/ha/rules/{apart}"))


def test_proxmoxer_creates_and_reads_a_rule(server, root, unique_vmid):
    first, second = _ha_guest(root, unique_vmid), _ha_guest(root, unique_vmid + 1)
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    prox = ProxmoxAPI(
        "127.0.0.1", port=server.port, verify_ssl=str(cert), user="root@pam", password=ROOT_PASSWORD
    )
    rule = f"spread-{uuid.uuid4().hex[:6]}"
    prox.cluster.ha.rules.post(
        rule=rule, type="resource-affinity", resources=f"{first},{second}", affinity="negative"
    )
    assert prox.cluster.ha.rules(rule).get()["affinity"] == "negative"
    with pytest.raises(ResourceException) as refused:
        prox.cluster.ha.rules(rule).put(type="resource-affinity", nodes="pve1")
    assert refused.value.status_code == 400 and "nodes" in refused.value.errors
    prox.cluster.ha.rules(rule).delete()
