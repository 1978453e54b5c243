"""Nodes as hardware: the device type the endpoint configures (a node's override wins),
the node's /nodes/{node}/status facts as custom fields, shaped per PVE major by
capability, in the plan, the endpoint record, the incremental digest and the preview."""

from __future__ import annotations

import httpx
import pytest

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials
from proxbox_backend.domain import proxmox_config as parse
from proxbox_backend.domain.capabilities import Capabilities
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import ClusterIdentity, NodeFacts, ProxmoxNode
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import NODE_FACT_FIELDS, RUN_FIELDS
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.incremental import node_digest
from proxbox_backend.secrets import Secret
from proxbox_backend.stages import nodes

GIB = 1024**3
KVERSION = "Linux 5.15.158-2-pve #1 SMP PVE 5.15.158-2 (2024-07-26T14:12Z)"
CPUINFO = {"model": "AMD EPYC 7313P", "sockets": 1, "cores": 16, "cpus": 32, "mhz": "3000"}
# What each major's pve-manager answers (the parts the facts read): 6.4 and 7.4 name the
# kernel in `kversion` only; 8 on add `current-kernel` (and `boot-info`); 9 adds
# `memory.available`.
STATUS_6_7 = {
    "cpuinfo": CPUINFO,
    "memory": {"total": 128 * GIB, "used": GIB, "free": 127 * GIB},
    "kversion": KVERSION,
    "pveversion": "pve-manager/7.4-16/0f39f621",
    "uptime": 1234,
}
STATUS_8_9 = {
    **STATUS_6_7,
    "kversion": "Linux 6.8.12-8-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-8 (2025-01-24T12:32Z)",
    "pveversion": "pve-manager/8.4.5/57892e8e",
    "current-kernel": {
        "sysname": "Linux",
        "release": "6.8.12-8-pve",
        "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-8 (2025-01-24T12:32Z)",
        "machine": "x86_64",
    },
    "boot-info": {"mode": "efi", "secureboot": 0},
}


@pytest.mark.parametrize(
    ("release", "status", "kernel"),
    [
        ("6.4-15", {**STATUS_6_7, "kversion": KVERSION.replace("5.15.158-2", "5.4.203-1")}, None),
        ("7.4-16", STATUS_6_7, "5.15.158-2-pve"),
        ("8.4.5", STATUS_8_9, "6.8.12-8-pve"),
        ("9.2.12", {**STATUS_8_9, "memory": {**STATUS_8_9["memory"], "available": 1}}, None),
    ],
)
def test_each_majors_status_gives_the_same_facts(release, status, kernel):
    facts = parse.node_facts(status, Capabilities(release))
    assert facts.cpu_model == "AMD EPYC 7313P"
    assert (facts.cpu_sockets, facts.cpu_cores, facts.cpu_threads) == (1, 16, 32)
    assert facts.memory_mb == 128 * 1024
    assert facts.pve_version == status["pveversion"]
    assert facts.kernel == (kernel or status["kversion"].split()[1])


def test_the_kernel_comes_from_current_kernel_only_where_the_release_has_it():
    assert Capabilities("7.4-16").current_kernel is False
    assert Capabilities("8.0.3").current_kernel is True
    # 8 on: current-kernel's release, even where kversion would say otherwise.
    status = {**STATUS_8_9, "kversion": "Linux 9.9.9-stale #1"}
    assert parse.node_facts(status, Capabilities("8.4.5")).kernel == "6.8.12-8-pve"
    # Before 8 a current-kernel is not read: kversion is what 6.4 and 7.4 report.
    assert parse.node_facts(status, Capabilities("7.4-16")).kernel == "9.9.9-stale"
    # An 8.x answer without current-kernel still names its kernel.
    bare = {k: v for k, v in STATUS_8_9.items() if k != "current-kernel"}
    assert parse.node_facts(bare, Capabilities("8.4.5")).kernel == "6.8.12-8-pve"


def test_unreported_facts_are_none_not_zero():
    facts = parse.node_facts({"cpuinfo": {"model": "unknown", "cpus": "4"}}, Capabilities("9.2"))
    assert facts == NodeFacts(cpu_threads=4)


@pytest.mark.asyncio
async def test_the_gateway_reads_each_online_nodes_status():
    asked = []

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        asked.append(path)
        if path == "/nodes/pve1/status":
            return httpx.Response(200, json={"data": STATUS_8_9})
        if path == "/nodes/pve2/status":
            return httpx.Response(403, json={"data": None})  # no Sys.Audit on the node
        return httpx.Response(200, json={"data": []})

    client = ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!proxbox", Secret("5d7c9a1e-0000")),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=1),
    )
    nodes = [ProxmoxNode("pve1", True), ProxmoxNode("pve2", True), ProxmoxNode("pve3", False)]
    identity = ClusterIdentity("c", "cluster", ("pve1", "pve2", "pve3"), True, "8.4.5")
    inventory = await ProxmoxGateway(client).inventory(identity, nodes)
    assert inventory.node_facts == {"pve1": parse.node_facts(STATUS_8_9, Capabilities("8.4.5"))}
    assert inventory.node_facts["pve1"].kernel == "6.8.12-8-pve"
    # pve2 refused (a failed read: the run is degraded, its device keeps its facts); the
    # offline pve3 is not asked.
    assert [f for f in inventory.read_failures if "pve2: status unreadable" in f]
    assert "/nodes/pve3/status" not in asked


def test_the_fact_fields_are_ensured_with_the_run_fields():
    for name, kind, *_ in NODE_FACT_FIELDS.values():
        assert RUN_FIELDS[name]["object_types"] == ["dcim.device"]
        assert RUN_FIELDS[name]["type"] == kind
        assert len(RUN_FIELDS[name]["description"]) <= 200  # NetBox's limit


# -- the device type and the facts in the nodes plan --------------------------------------

GENERIC, R640, R750 = 2, 40, 50
FACTS = NodeFacts("AMD EPYC 7313P", 1, 16, 32, 131072, "6.8.12-8-pve", "pve-manager/8.4.5/x")
FACT_FIELDS = {
    "proxbox_cpu_model": "AMD EPYC 7313P",
    "proxbox_cpu_sockets": 1,
    "proxbox_cpu_cores": 16,
    "proxbox_cpu_threads": 32,
    "proxbox_memory_mb": 131072,
    "proxbox_kernel": "6.8.12-8-pve",
    "proxbox_pve_version": "pve-manager/8.4.5/x",
}


def placement(**device_types):
    return nodes.NodePlacement(7, 3, None, 1, GENERIC, device_types=device_types)


def device(id_, name, device_type, custom_fields=None):
    return {
        "id": id_,
        "name": name,
        "status": {"value": "active"},
        "site": {"id": 3, "slug": "site"},
        "tenant": None,
        "cluster": {"id": 7},
        "device_type": {"id": device_type, "slug": f"type-{device_type}"},
        "custom_fields": custom_fields or {},
        "tags": [{"id": 1, "slug": "proxbox", "name": "proxbox"}],
    }


def test_a_new_device_gets_the_configured_type_and_the_facts():
    plan = nodes.plan(
        [ProxmoxNode("pve1", True), ProxmoxNode("pve2", True), ProxmoxNode("pve3", True)],
        [],
        placement(pve1=R640, pve2=R750),
        facts={"pve1": FACTS},
    )
    created = {c.key: c.payload for c in plan.creates}
    assert {k: p["device_type"] for k, p in created.items()} == {
        "pve1": R640,
        "pve2": R750,
        "pve3": GENERIC,  # none configured: the generic type, as before
    }
    assert created["pve1"]["custom_fields"] == FACT_FIELDS
    assert "custom_fields" not in created["pve2"]  # its status was not read


def test_a_configured_type_is_kept_on_every_run_and_none_configured_leaves_it_alone():
    current = [device(11, "pve1", GENERIC), device(12, "pve2", R640)]
    plan = nodes.plan([ProxmoxNode("pve1", True), ProxmoxNode("pve2", True)], current, placement())
    # Nothing configured: an operator's type (or the generic one) stays.
    assert plan.updates == [] and set(plan.unchanged) == {"pve1", "pve2"}
    plan = nodes.plan(
        [ProxmoxNode("pve1", True), ProxmoxNode("pve2", True)],
        current,
        placement(pve1=R750, pve2=R640),
    )
    assert {u.key: u.changes for u in plan.updates} == {"pve1": {"device_type": R750}}
    assert set(plan.unchanged) == {"pve2"}


def test_the_facts_are_written_when_they_differ_and_kept_when_unread():
    current = [
        device(11, "pve1", GENERIC, FACT_FIELDS),
        device(12, "pve2", GENERIC, {**FACT_FIELDS, "proxbox_kernel": "6.8.4-2-pve"}),
        device(13, "pve3", GENERIC, FACT_FIELDS),
    ]
    plan = nodes.plan(
        [ProxmoxNode(n, True) for n in ("pve1", "pve2", "pve3")],
        current,
        placement(),
        facts={"pve1": FACTS, "pve2": FACTS},  # pve3's status was not read
    )
    assert {u.key: u.changes for u in plan.updates} == {
        "pve2": {"custom_fields": {"proxbox_kernel": "6.8.12-8-pve"}}
    }
    assert set(plan.unchanged) == {"pve1", "pve3"}


def test_an_adopted_device_gets_the_configured_type_and_the_facts():
    marked = {
        **device(21, "pve1", GENERIC),
        "cluster": None,
        "tags": [{"id": 2, "slug": "proxbox-adopt", "name": "proxbox-adopt"}],
    }
    where = nodes.NodePlacement(7, 3, None, 1, GENERIC, adopt=True, device_types={"pve1": R640})
    plan = nodes.plan([ProxmoxNode("pve1", True)], [], where, [marked], facts={"pve1": FACTS})
    (update,) = plan.updates
    assert update.adopts and update.changes["device_type"] == R640
    assert update.changes["custom_fields"] == FACT_FIELDS


# -- the endpoint record, the incremental digest, the preview --------------------------------


def test_the_endpoint_record_reads_the_node_device_types():
    record = {
        "id": 1,
        "name": "pve",
        "host": "pve.example",
        "node_device_type": {"id": R640, "slug": "r640"},
        "node_device_types": {"pve2": R750},
    }
    endpoint = Endpoint.from_api(record)
    assert endpoint.node_device_type("pve1") == R640
    assert endpoint.node_device_type("pve2") == R750
    bare = Endpoint.from_api({"id": 1, "name": "pve", "host": "pve.example"})
    assert bare.node_device_type("pve1") is None


def test_changed_facts_make_the_nodes_input_differ():
    pve1 = [ProxmoxNode("pve1", True)]
    same = node_digest(pve1, {}, {"pve1": FACTS})
    assert node_digest(pve1, {}, {"pve1": FACTS}) == same
    upgraded = NodeFacts(**{**FACTS.__dict__, "kernel": "6.8.12-9-pve"})
    assert node_digest(pve1, {}, {"pve1": upgraded}) != same


def test_the_preview_shows_a_device_type_change_by_id_before_and_after():
    recorder = PlanRecorder()
    recorder.update("dcim.device", 11, {"device_type": R750}, device(11, "pve1", GENERIC))
    (update,) = recorder.as_dict()["object_types"]["dcim.device"]["updates"]
    assert update == {
        "id": 11,
        "label": "pve1",
        "changes": {"device_type": {"old": GENERIC, "new": R750}},
    }
