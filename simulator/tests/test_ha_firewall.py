"""HA (groups, resources, status, migrate, arming) and the firewall through HTTP."""

from __future__ import annotations

import threading
import uuid

import httpx
from simtest_support import Session, assert_conforms, expect_data, expect_error, make_vm


def test_ha_groups_resources_and_status(root, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    group = f"g{uuid.uuid4().hex[:8]}"
    expect_data(root.post("/cluster/ha/groups", data={"group": group, "nodes": "pve1:2,pve2"}))
    expect_error(
        root.post("/cluster/ha/groups", data={"group": f"{group}x", "nodes": "nowhere"}),
        500,
        "no such node",
    )
    groups = expect_data(root.get("/cluster/ha/groups"), "/cluster/ha/groups")
    assert {"group": group, "nodes": "pve1:2,pve2"}.items() <= next(
        g for g in groups if g["group"] == group
    ).items()

    expect_data(
        root.post(
            "/cluster/ha/resources",
            data={"sid": str(vmid), "group": group, "max_restart": 2, "comment": "db"},
        )
    )
    expect_error(
        root.post("/cluster/ha/resources", data={"sid": f"vm:{vmid}"}), 500, "already defined"
    )
    expect_error(root.post("/cluster/ha/resources", data={"sid": f"ct:{vmid}"}), 500, "not a ct")
    sid = f"vm:{vmid}"
    resources = expect_data(root.get("/cluster/ha/resources"), "/cluster/ha/resources")
    resource = expect_data(root.get(f"/cluster/ha/resources/{sid}"), "/cluster/ha/resources/{sid}")
    assert resource in resources
    assert (resource["state"], resource["group"], resource["max_restart"]) == ("started", group, 2)

    status = expect_data(root.get("/cluster/ha/status/current"), "/cluster/ha/status/current")
    service = next(s for s in status if s["id"] == f"service:{sid}")
    assert service["node"] == "pve1" and service["request_state"] == "started"
    manager = expect_data(
        root.get("/cluster/ha/status/manager_status"), "/cluster/ha/status/manager_status"
    )
    assert sid in manager["manager_status"]["service_status"]

    expect_error(root.delete(f"/cluster/ha/groups/{group}"), 500, "is used by")
    expect_error(root.delete(f"/nodes/pve1/qemu/{vmid}"), 500, "used in HA resources")
    expect_data(
        root.put(f"/cluster/ha/resources/{sid}", data={"state": "disabled", "delete": "group"})
    )
    resource = expect_data(root.get(f"/cluster/ha/resources/{sid}"))
    assert resource["state"] == "disabled" and "group" not in resource
    expect_data(root.delete(f"/cluster/ha/groups/{group}"))
    # purge removes the guest from HA along with the guest.
    upid = expect_data(root.delete(f"/nodes/pve1/qemu/{vmid}", params={"purge": 1}))
    assert root.wait(upid)["exitstatus"] == "OK"
    assert sid not in {r["sid"] for r in expect_data(root.get("/cluster/ha/resources"))}


def test_ha_migrate_moves_the_service_and_arming(root, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    sid = f"vm:{vmid}"
    expect_data(root.post("/cluster/ha/resources", data={"sid": sid, "state": "stopped"}))
    answer = expect_data(root.post(f"/cluster/ha/resources/{sid}/migrate", data={"node": "pve3"}))
    # The suite serves 9.2, which describes the request; 6.4-8.4 declare null here.
    assert_conforms("/cluster/ha/resources/{sid}/migrate", "POST", answer, majors=(9,))
    assert answer == {"sid": sid, "requested-node": "pve3"}
    tasks = expect_data(
        root.get(
            "/nodes/pve1/tasks", params={"vmid": vmid, "typefilter": "qmigrate", "source": "all"}
        )
    )
    assert tasks and tasks[0]["user"] == "root@pam"
    root.wait(tasks[0]["upid"])
    assert expect_data(root.get(f"/nodes/pve3/qemu/{vmid}/status/current"))["ha"]["managed"] == 1
    expect_error(
        root.post(f"/cluster/ha/resources/{sid}/migrate", data={"node": "pve3"}),
        500,
        "already on node",
    )

    expect_data(root.post("/cluster/ha/status/disarm-ha", data={"resource-mode": "freeze"}))
    expect_error(
        root.post("/cluster/ha/status/disarm-ha", data={"resource-mode": "freeze"}),
        500,
        "already disarmed",
    )
    master = next(
        s for s in expect_data(root.get("/cluster/ha/status/current")) if s["id"] == "master"
    )
    assert master["armed-state"] == "disarmed"
    expect_data(root.post("/cluster/ha/status/arm-ha"))
    expect_data(root.delete(f"/cluster/ha/resources/{sid}"))


def test_guest_firewall_rules_keep_pve_order_and_digests(root, unique_vmid):
    vmid = make_vm(root, "pve2", unique_vmid)
    rules = f"/nodes/pve2/qemu/{vmid}/firewall/rules"
    template = "/nodes/{node}/qemu/{vmid}/firewall/rules"
    assert expect_data(root.get(rules), template) == []
    for port in ("22", "80", "443"):
        expect_data(
            root.post(
                rules,
                data={"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": port, "pos": 5},
            )
        )
    listed = expect_data(root.get(rules), template)
    # New rules go to the top regardless of pos, disabled unless asked (as PVE does).
    assert [(r["pos"], r["dport"], r["enable"]) for r in listed] == [
        (0, "443", 0),
        (1, "80", 0),
        (2, "22", 0),
    ]
    expect_data(root.put(f"{rules}/0", data={"moveto": 3}))
    assert [r["dport"] for r in expect_data(root.get(rules))] == ["80", "22", "443"]
    rule = expect_data(root.get(f"{rules}/1"), template + "/{pos}")
    assert rule["dport"] == "22"
    expect_data(root.put(f"{rules}/1", data={"enable": 1, "digest": rule["digest"]}))
    expect_error(
        root.put(f"{rules}/1", data={"comment": "late", "digest": rule["digest"]}),
        500,
        "changed by other user",
    )
    expect_error(root.get(f"{rules}/7"), 400, "no rule at position 7")
    expect_error(
        root.post(rules, data={"type": "group", "action": "nosuchgroup"}),
        400,
        "security group 'nosuchgroup' does not exist",
    )
    expect_error(root.post(rules, data={"type": "in", "action": "ALLOW"}), 400, "action")
    expect_data(root.delete(f"{rules}/0"))
    assert [r["dport"] for r in expect_data(root.get(rules))] == ["22", "443"]
    # The firewall file goes with the guest.
    upid = expect_data(root.delete(f"/nodes/pve2/qemu/{vmid}"))
    assert root.wait(upid)["exitstatus"] == "OK"
    make_vm(root, "pve2", vmid)
    assert expect_data(root.get(rules)) == []


def test_security_groups_aliases_ipsets_refs_and_options(root, unique_vmid):
    vmid = make_vm(root, "pve3", unique_vmid)
    group = f"sg{uuid.uuid4().hex[:6]}"
    alias = f"net{uuid.uuid4().hex[:6]}"
    ipset = f"set{uuid.uuid4().hex[:6]}"
    expect_data(root.post("/cluster/firewall/groups", data={"group": group, "comment": "web"}))
    expect_data(
        root.post(f"/cluster/firewall/groups/{group}", data={"type": "in", "action": "ACCEPT"})
    )
    groups = expect_data(root.get("/cluster/firewall/groups"), "/cluster/firewall/groups")
    assert {"group": group, "comment": "web"}.items() <= next(
        g for g in groups if g["group"] == group
    ).items()
    assert len(expect_data(root.get(f"/cluster/firewall/groups/{group}"))) == 1

    expect_data(root.post("/cluster/firewall/aliases", data={"name": alias, "cidr": "10.1.0.0/16"}))
    expect_error(
        root.post("/cluster/firewall/aliases", data={"name": alias.upper(), "cidr": "10.2.0.1"}),
        500,
        "already exists",
    )
    expect_error(
        root.post("/cluster/firewall/aliases", data={"name": "bad", "cidr": "10.300.0.0/16"}),
        400,
        "cidr",
    )
    aliases = expect_data(root.get("/cluster/firewall/aliases"), "/cluster/firewall/aliases")
    assert any(a["name"] == alias and a["cidr"] == "10.1.0.0/16" for a in aliases)
    base = f"/nodes/pve3/qemu/{vmid}/firewall"
    expect_data(root.post(f"{base}/ipset", data={"name": ipset, "comment": "clients"}))
    expect_data(root.post(f"{base}/ipset/{ipset}", data={"cidr": "192.0.2.0/24", "nomatch": 1}))
    entries = expect_data(
        root.get(f"{base}/ipset/{ipset}"), "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}"
    )
    assert [(e["cidr"], e.get("nomatch")) for e in entries] == [("192.0.2.0/24", 1)]
    expect_error(root.delete(f"{base}/ipset/{ipset}"), 500, "is not empty")

    refs = expect_data(root.get(f"{base}/refs"), "/nodes/{node}/qemu/{vmid}/firewall/refs")
    names = {(r["type"], r["name"]) for r in refs}
    assert {("alias", alias), ("ipset", ipset)} <= names
    # Rules may name aliases, IP sets and security groups that exist, nothing else.
    expect_data(root.post(f"{base}/rules", data={"type": "group", "action": group, "enable": 1}))
    expect_data(
        root.post(
            f"{base}/rules",
            data={"type": "in", "action": "DROP", "source": f"+{ipset}", "dest": alias},
        )
    )
    expect_error(
        root.post(f"{base}/rules", data={"type": "in", "action": "DROP", "source": "nosuchalias"}),
        400,
        "no such alias",
    )
    expect_error(root.delete(f"/cluster/firewall/groups/{group}"), 500, "not empty")

    options = expect_data(root.get(f"{base}/options"), "/nodes/{node}/qemu/{vmid}/firewall/options")
    expect_data(
        root.put(
            f"{base}/options", data={"enable": 1, "policy_in": "DROP", "digest": options["digest"]}
        )
    )
    options = expect_data(root.get(f"{base}/options"))
    assert (options["enable"], options["policy_in"]) == (1, "DROP")
    expect_data(root.put(f"{base}/options", data={"delete": "policy_in"}))
    assert "policy_in" not in expect_data(root.get(f"{base}/options"))
    assert expect_data(root.get(f"{base}/log"), "/nodes/{node}/qemu/{vmid}/firewall/log") == []
    cluster = expect_data(root.get("/cluster/firewall/options"), "/cluster/firewall/options")
    assert "digest" in cluster


def test_concurrent_rule_writers_are_serialized_not_lost(server, root, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    rules = f"/nodes/pve1/qemu/{vmid}/firewall/rules"
    errors: list[str] = []

    def add(port: int) -> None:
        with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as own:
            session = Session(own)
            response = session.post(rules, data={"type": "in", "action": "ACCEPT", "dport": port})
            if response.status_code != 200:
                errors.append(response.text)

    threads = [threading.Thread(target=add, args=(2000 + i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(r["dport"] for r in expect_data(root.get(rules))) == [
        str(2000 + i) for i in range(8)
    ]


def test_vnet_firewall_rules_need_the_vnet(root):
    tag = uuid.uuid4().hex[:5]
    zone, vnet = f"f{tag}", f"n{tag}"
    expect_data(root.post("/cluster/sdn/zones", data={"zone": zone, "type": "simple"}))
    expect_data(root.post("/cluster/sdn/vnets", data={"vnet": vnet, "zone": zone}))
    rules = f"/cluster/sdn/vnets/{vnet}/firewall/rules"
    expect_data(
        root.post(
            rules, data={"type": "forward", "action": "ACCEPT", "proto": "tcp", "dport": "443"}
        )
    )
    listed = expect_data(root.get(rules), "/cluster/sdn/vnets/{vnet}/firewall/rules")
    assert [(r["type"], r["dport"]) for r in listed] == [("forward", "443")]
    expect_error(root.get("/cluster/sdn/vnets/nosuch/firewall/rules"), 500, "does not exist")
    expect_data(root.put(f"/cluster/sdn/vnets/{vnet}/firewall/options", data={"enable": 1}))
    assert expect_data(root.get(f"/cluster/sdn/vnets/{vnet}/firewall/options"))["enable"] == 1
