"""SDN fabrics (PVE 9.x) through proxmoxer: the whole-file validation PVE's Rust side
does on every write, pending/running views, the SDN lock token and rollback, and the
node views (interfaces, neighbors, routes) that only follow an apply."""

from __future__ import annotations

import random
import uuid

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, proxmoxer_client


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _name() -> str:
    return "f" + uuid.uuid4().hex[:6]


_USED: set[int] = set()


def _octet() -> int:
    """A second octet no other fabric of this session uses (prefixes must not overlap)."""
    value = random.randint(16, 250)
    while value in _USED:
        value = random.randint(16, 250)
    _USED.add(value)
    return value


def _refused(call, status: int, fragment: str) -> None:
    with pytest.raises(ResourceException) as caught:
        call()
    assert caught.value.status_code == status, str(caught.value)
    assert fragment in str(caught.value), str(caught.value)


def _apply(prox, **params) -> None:
    status = Tasks.blocking_status(prox, prox.cluster.sdn.put(**params), polling_interval=0.02)
    assert status["exitstatus"] == "OK", status


def _by(entries, key: str) -> dict:
    return {e[key]: e for e in entries}


def test_every_write_is_checked_against_the_whole_fabric_config(prox):
    fabrics = prox.cluster.sdn.fabrics
    name, other, net = _name(), _name(), _octet()

    _refused(
        lambda: fabrics.fabric.post(id=name, protocol="openfabric"),
        500,
        f"adding fabric failed: fabric '{name}' does not have an IP prefix configured",
    )
    _refused(lambda: fabrics.fabric.post(id="a_b", protocol="openfabric"), 400, "id")
    _refused(
        lambda: fabrics.fabric.post(id=name, protocol="wireguard", ip_prefix="10.9.0.0/16"),
        400,
        "protocol",
    )
    _refused(
        lambda: fabrics.fabric.post(id=name, protocol="openfabric", ip_prefix="fd00::/64"),
        400,
        "ip_prefix",
    )
    # The prefix is stored as its network address.
    fabrics.fabric.post(
        id=name, protocol="openfabric", ip_prefix=f"10.{net}.0.7/24", hello_interval=3
    )
    fabric = fabrics.fabric(name).get()
    assert fabric["ip_prefix"] == f"10.{net}.0.0/24" and fabric["hello_interval"] == 3
    assert fabric["protocol"] == "openfabric" and len(fabric["digest"]) == 64
    _refused(
        lambda: fabrics.fabric.post(id=name, protocol="openfabric", ip_prefix="10.1.0.0/30"),
        500,
        f"adding fabric failed: fabric '{name}' already exists in config",
    )
    _refused(
        lambda: fabrics.fabric.post(
            id=other, protocol="openfabric", ip_prefix=f"10.{net}.0.128/25"
        ),
        500,
        f"IP prefix 10.{net}.0.128/25 in fabric '{other}' overlaps with IPv4 prefix 10.{net}.0.0/24",
    )

    nodes = fabrics.node(name)
    _refused(
        lambda: nodes.post(node_id="pve1", protocol="openfabric", ip=f"10.{net}.1.1"),
        500,
        f"adding node failed: node IP 10.{net}.1.1 is outside the IP prefix 10.{net}.0.0/24",
    )
    _refused(
        lambda: nodes.post(node_id="pve1", protocol="openfabric"),
        500,
        f"node '{name}_pve1' does not have an IP configured for this fabric prefix",
    )
    _refused(
        lambda: nodes.post(node_id="pve1", protocol="ospf", ip=f"10.{net}.0.1"),
        500,
        "node has a different protocol than the referenced fabric",
    )
    _refused(
        lambda: nodes.post(
            node_id="pve1", protocol="openfabric", ip=f"10.{net}.0.1", interfaces=["name=-bad"]
        ),
        400,
        "invalid network interface name",
    )
    nodes.post(
        node_id="pve1",
        protocol="openfabric",
        ip=f"10.{net}.0.1",
        interfaces=["name=ens19,hello_multiplier=3", "name=ens20"],
    )
    _refused(
        lambda: nodes.post(node_id="pve2", protocol="openfabric", ip=f"10.{net}.0.1"),
        500,
        f"fabric {name} contains nodes with duplicated IPs",
    )
    node = nodes("pve1").get()
    assert node["interfaces"] == ["name=ens19,hello_multiplier=3", "name=ens20"]
    assert (node["fabric_id"], node["node_id"], node["ip"]) == (name, "pve1", f"10.{net}.0.1")

    # The prefix can't go while nodes have addresses in it; a stale digest is refused.
    _refused(
        lambda: fabrics.fabric(name).put(protocol="openfabric", delete="ip_prefix"),
        500,
        f"updating fabric failed: fabric '{name}' does not have an IP prefix configured for the node IP 10.{net}.0.1",
    )
    _refused(lambda: fabrics.fabric(name).put(protocol="openfabric", delete="area"), 400, "delete")
    stale = fabric["digest"]
    _refused(
        lambda: fabrics.fabric(name).put(protocol="openfabric", csnp_interval=5, digest=stale),
        500,
        "updating fabric failed: detected modified configuration",
    )
    fabrics.fabric(name).put(protocol="openfabric", csnp_interval=5, delete="hello_interval")
    assert "hello_interval" not in fabrics.fabric(name).get()

    # An interface belongs to one fabric of a node.
    second = _octet()
    fabrics.fabric.post(id=other, protocol="openfabric", ip6_prefix=f"fd{second:02x}::/64")
    _refused(
        lambda: fabrics.node(other).post(
            node_id="pve1",
            protocol="openfabric",
            ip6=f"fd{second:02x}::1",
            interfaces=["name=ens19"],
        ),
        500,
        "adding node failed: interface is already in use by another fabric",
    )

    # Deleting a fabric takes its nodes along.
    fabrics.fabric(name).delete()
    _refused(
        lambda: fabrics.fabric(name).get(), 500, f"fabric '{name}' does not exist in configuration"
    )
    assert not [n for n in fabrics.node.get() if n["fabric_id"] == name]
    _refused(
        lambda: fabrics.node(name)("pve1").delete(),
        500,
        f"deleting node failed: fabric '{name}' does not exist in configuration",
    )
    fabrics.fabric(other).delete()


def test_ospf_needs_ipv4_an_area_of_its_own_and_no_ipv6(prox):
    fabrics = prox.cluster.sdn.fabrics
    name, other, net = _name(), _name(), _octet()
    area = random.randint(1, 1 << 20)
    _refused(
        lambda: fabrics.fabric.post(id=name, protocol="ospf", ip_prefix=f"10.{net}.0.0/24"),
        500,
        "adding fabric failed: missing field `area`",
    )
    _refused(
        lambda: fabrics.fabric.post(
            id=name,
            protocol="ospf",
            area=area,
            ip_prefix=f"10.{net}.0.0/24",
            ip6_prefix="fd00:1::/64",
        ),
        500,
        "IPv6 is currently not supported for protocol ospf",
    )
    _refused(
        lambda: fabrics.fabric.post(
            id=name, protocol="ospf", area="x.y", ip_prefix=f"10.{net}.0.0/24"
        ),
        400,
        "area",
    )
    fabrics.fabric.post(id=name, protocol="ospf", area=area, ip_prefix=f"10.{net}.0.0/24")
    dotted = ".".join(str((area >> s) & 255) for s in (24, 16, 8, 0))
    _refused(
        lambda: fabrics.fabric.post(
            id=other, protocol="ospf", area=dotted, ip_prefix=f"10.{_octet()}.0.0/24"
        ),
        500,
        "adding fabric failed: duplicate OSPF area",
    )
    _refused(
        lambda: fabrics.node(name).post(
            node_id="pve1", protocol="ospf", ip=f"10.{net}.0.1", ip6="fd00::1"
        ),
        500,
        # the address checks come first: the fabric has no IPv6 prefix to hold it
        f"adding node failed: fabric '{name}' does not have an IP prefix configured for the node IP fd00::1",
    )
    _refused(
        lambda: fabrics.node(name).post(node_id="pve1", protocol="ospf"),
        500,
        f"node '{name}_pve1' does not have an IP configured for this fabric prefix 10.{net}.0.0/24",
    )
    fabrics.fabric(name).delete()


def test_lock_token_and_rollback_cover_fabrics(prox):
    sdn, name, net = prox.cluster.sdn, _name(), _octet()
    token = sdn.lock.post(**{"allow-pending": 1})
    try:
        _refused(
            lambda: sdn.fabrics.fabric.post(
                id=name, protocol="openfabric", ip_prefix=f"10.{net}.0.0/24"
            ),
            500,
            "adding fabric failed: invalid lock token provided!",
        )
        sdn.fabrics.fabric.post(
            id=name, protocol="openfabric", ip_prefix=f"10.{net}.0.0/24", **{"lock-token": token}
        )
        assert name in _by(sdn.fabrics.fabric.get(), "id")
        _refused(
            lambda: sdn.fabrics.fabric(name).delete(),
            500,
            "deleting fabric failed: invalid lock token provided!",
        )
    finally:
        sdn.rollback.post(**{"lock-token": token})
    # The fabric was never applied: rolling back drops it, and the lock is gone.
    assert name not in _by(sdn.fabrics.fabric.get(), "id")
    sdn.lock.post()
    sdn.lock.delete(force=1)


def _openfabric(prox, net: int, members: dict[str, list[str]]) -> str:
    fabrics, name = prox.cluster.sdn.fabrics, _name()
    fabrics.fabric.post(id=name, protocol="openfabric", ip_prefix=f"10.{net}.0.0/24")
    for index, (node, interfaces) in enumerate(members.items(), start=1):
        params = {"interfaces": interfaces} if interfaces else {}
        fabrics.node(name).post(
            node_id=node, protocol="openfabric", ip=f"10.{net}.0.{index}", **params
        )
    return name


def test_node_views_follow_the_applied_fabric_not_the_pending_one(prox):
    sdn, net = prox.cluster.sdn, _octet()
    name = _openfabric(
        prox,
        net,
        {"pve1": ["name=ens19", "name=ens20"], "pve2": ["name=ens19"], "pve3": ["name=ens19"]},
    )
    view = prox.nodes("pve1").sdn.fabrics(name)

    # Pending: a new fabric and its nodes; nothing of it runs yet.
    entries = [
        f for f in sdn.fabrics.fabric.get(pending=1) if f.get("pending", {}).get("id") == name
    ]
    assert entries and entries[0]["state"] == "new"
    assert entries[0]["pending"]["ip_prefix"] == f"10.{net}.0.0/24"
    assert name not in _by(sdn.fabrics.fabric.get(running=1), "id")
    new_nodes = [
        n
        for n in sdn.fabrics.all.get(pending=1)["nodes"]
        if (n.get("pending") or {}).get("fabric_id") == name
    ]
    assert sorted(n["pending"]["node_id"] for n in new_nodes) == ["pve1", "pve2", "pve3"]
    assert all(n["state"] == "new" for n in new_nodes)
    with pytest.raises(ResourceException) as caught:
        view.routes.get()
    assert caught.value.status_code == 500
    assert "does not exist in configuration" in str(caught.value) or "no fabrics configured" in str(
        caught.value
    )
    frr = sdn("dry-run").get(node="pve1")["frr-diff"]
    digits = f"010{net:03d}000001"  # the NET spells out router ID 10.<net>.0.1
    assert f"+router openfabric {name}" in frr
    assert f"+ net 49.0001.{digits[:4]}.{digits[4:8]}.{digits[8:]}.00" in frr
    assert f"+iface dummy_{name} inet static" in sdn("dry-run").get(node="pve1")["interfaces-diff"]
    _refused(
        lambda: sdn.lock.post(),
        500,
        "could not acquire lock for SDN config: configuration has pending changes",
    )

    _apply(prox)
    assert "state" not in _by(sdn.fabrics.fabric.get(pending=1), "id")[name]
    assert name in _by(sdn.fabrics.fabric.get(running=1), "id")
    neighbors = view.neighbors.get()
    assert sorted(n["neighbor"] for n in neighbors) == ["pve2", "pve3"]
    assert all(n["status"] == "Up" and n["uptime"].endswith("s") for n in neighbors)
    assert view.routes.get() == [
        {"route": f"10.{net}.0.2/32", "via": [f"10.{net}.0.2"]},
        {"route": f"10.{net}.0.3/32", "via": [f"10.{net}.0.3"]},
    ]
    assert view.interfaces.get() == [
        {"name": f"dummy_{name}", "state": "Up", "type": "Loopback"},
        {"name": "ens19", "state": "Up", "type": "Point-To-Point"},
        {"name": "ens20", "state": "Up", "type": "Point-To-Point"},
    ]

    # Removing a node is pending until the next apply: the node still runs it.
    sdn.fabrics.node(name)("pve3").delete()
    gone = _by(sdn.fabrics.node(name).get(pending=1), "node_id")["pve3"]
    assert gone["state"] == "deleted"
    assert "pve3" not in _by(sdn.fabrics.node(name).get(), "node_id")
    assert sorted(n["neighbor"] for n in view.neighbors.get()) == ["pve2", "pve3"]
    assert len(prox.nodes("pve3").sdn.fabrics(name).routes.get()) == 2
    _apply(prox)
    assert [n["neighbor"] for n in view.neighbors.get()] == ["pve2"]
    assert prox.nodes("pve3").sdn.fabrics(name).routes.get() == []
    assert prox.nodes("pve3").sdn.fabrics(name).interfaces.get() == []

    # A member without interfaces has no adjacency.
    sdn.fabrics.node(name)("pve2").put(protocol="openfabric", delete="interfaces")
    assert sdn.fabrics.node(name)("pve2").get()["interfaces"] == []
    _apply(prox)
    assert view.neighbors.get() == [] and view.routes.get() == []

    sdn.fabrics.fabric(name).delete()
    _apply(prox)
    _refused(lambda: view.neighbors.get(), 500, f"fabric '{name}' does not exist in configuration")
    _refused(lambda: prox.nodes("nosuch").sdn.fabrics(name).routes.get(), 500, "hostname lookup")


def test_ospf_neighbors_on_numbered_links_have_roles_and_link_nexthops(prox):
    sdn, net, name = prox.cluster.sdn, _octet(), _name()
    sdn.fabrics.fabric.post(
        id=name,
        protocol="ospf",
        area=random.randint(1 << 21, 1 << 30),
        ip_prefix=f"10.{net}.0.0/24",
    )
    members = {
        "pve1": ["name=ens19,ip=192.0.2.1/24", "name=ens20,network_type=point-to-point"],
        "pve2": ["name=ens19,ip=192.0.2.2/24"],
        "pve3": ["name=ens21"],
    }
    for index, (node, interfaces) in enumerate(members.items(), start=1):
        sdn.fabrics.node(name).post(
            node_id=node, protocol="ospf", ip=f"10.{net}.0.{index}", interfaces=interfaces
        )
    _apply(prox)
    view = prox.nodes("pve1").sdn.fabrics(name)
    assert view.interfaces.get() == [
        {"name": f"dummy_{name}", "state": "up", "type": "Loopback"},
        {"name": "ens19", "state": "up", "type": "Broadcast"},
        {"name": "ens20", "state": "up", "type": "Point-To-Point"},
    ]
    neighbors = _by(view.neighbors.get(), "neighbor")
    # pve2 shares 192.0.2.0/24 with pve1 and has the higher router ID there: it is
    # the designated router; pve3 is reached unnumbered.
    assert neighbors["192.0.2.2"]["status"] == "Full/DR"
    assert neighbors[f"10.{net}.0.3"]["status"] == "Full/-"
    assert view.routes.get() == [
        {"route": f"10.{net}.0.2/32", "via": ["192.0.2.2"]},
        {"route": f"10.{net}.0.3/32", "via": [f"10.{net}.0.3"]},
    ]
    assert "+router ospf" not in (sdn("dry-run").get(node="pve1").get("frr-diff") or "")
    sdn.fabrics.fabric(name).delete()
    _apply(prox)


def test_lists_show_only_what_the_caller_may_see_and_delete_needs_the_nodes(prox, server):
    fabrics, seen, hidden = prox.cluster.sdn.fabrics, _name(), _name()
    for name in (seen, hidden):
        net = _octet()
        fabrics.fabric.post(id=name, protocol="openfabric", ip_prefix=f"10.{net}.0.0/24")
        for index, node in enumerate(("pve1", "pve2"), start=1):
            fabrics.node(name).post(node_id=node, protocol="openfabric", ip=f"10.{net}.0.{index}")
    user = f"fab{uuid.uuid4().hex[:6]}@pve"
    prox.access.users.post(userid=user, password="fabric-password-1")
    prox.access.acl.put(path=f"/sdn/fabrics/{seen}", roles="PVESDNAdmin", users=user)
    prox.access.acl.put(path="/nodes/pve1", roles="PVEAuditor", users=user)
    api = proxmoxer_client(server, user, "fabric-password-1")
    try:
        mine = api.cluster.sdn.fabrics
        assert [f["id"] for f in mine.fabric.get()] == [seen]
        assert [(n["fabric_id"], n["node_id"]) for n in mine.node.get()] == [(seen, "pve1")]
        everything = mine.all.get()
        assert [f["id"] for f in everything["fabrics"]] == [seen]
        assert [(n["fabric_id"], n["node_id"]) for n in everything["nodes"]] == [(seen, "pve1")]
        assert [n["node_id"] for n in mine.node(seen).get()] == ["pve1"]
        _refused(lambda: mine.node(hidden).get(), 403, f"/sdn/fabrics/{hidden}")
        _refused(lambda: mine.node(seen)("pve2").get(), 403, "/nodes/pve2")
        # Its nodes' Sys.Modify is needed to delete a fabric, not just the fabric's own.
        _refused(
            lambda: mine.fabric(seen).delete(),
            500,
            "deleting fabric failed: permission check failed: missing 'Sys.Modify' on node pve1",
        )
    finally:
        close_proxmoxer(api)
    for name in (seen, hidden):
        fabrics.fabric(name).delete()
