"""What a run reports and records on its cluster's sidecar when it breaks off or is degraded.

A run that stops at its first Proxmox read must not leave the sidecar at the previous run's
`succeeded`; a run whose Proxmox reads failed after retries is `degraded`, never a clean
success, with the failed reads counted and named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials
from proxbox_backend.config import Settings
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import ClusterIdentity, ProxmoxNode
from proxbox_backend.domain.policy import SyncPolicy
from proxbox_backend.gateways.netbox import NetBoxGateway
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.pipeline import Scheduler, Stage
from proxbox_backend.secrets import Secret
from proxbox_backend.service import RunReport, SyncService, reflection
from proxbox_backend.stages import records
from proxbox_backend.stages.context import StageRun

NETBOX_TOKEN = Secret("n" * 40)
PVE_SECRET = "5d7c9a1e-2222-3333-4444-outcome00001"
ENDPOINT_PATH = "/api/plugins/proxbox/endpoints/proxmox/5/"
SIDECARS = "/api/plugins/proxbox/cluster-sync-states/"


class FakeNetBox:
    """The plugin's REST API as a run meets it before its stages: the endpoint (and its
    assignment rules: none), its credentials and the sidecar of the native cluster it owns (id 41, sidecar 9)."""

    def __init__(self, *, owns_cluster=True, credentials=True, secret=PVE_SECRET):
        self.owns_cluster, self.credentials, self.secret = owns_cluster, credentials, secret
        self.sidecar_writes: list[dict] = []
        self.unexpected: list[str] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == ENDPOINT_PATH:
            return httpx.Response(
                200,
                json={
                    "id": 5,
                    "name": "pve-outcome",
                    "host": "pve-outcome.test",
                    "port": 8006,
                    "token_id": "sync@pve!outcome",
                    "enabled": True,
                    "mode": {"value": "cluster"},
                    "netbox_cluster": {"id": 41} if self.owns_cluster else None,
                },
            )
        if request.method == "GET" and path == ENDPOINT_PATH + "credentials/":
            if not self.credentials:
                return httpx.Response(403, json={"detail": "no"})
            return httpx.Response(
                200, json={"token_id": "sync@pve!outcome", "token_secret": self.secret}
            )
        if request.method == "GET" and path == "/api/plugins/proxbox/assignment-rules/":
            assert request.url.params["endpoint_id"] == "5"
            return httpx.Response(200, json={"count": 0, "next": None, "results": []})
        if request.method == "GET" and path == SIDECARS:
            assert request.url.params["cluster_id"] == "41"
            return httpx.Response(200, json={"count": 1, "next": None, "results": [{"id": 9}]})
        if request.method == "PATCH" and path == f"{SIDECARS}9/":
            self.sidecar_writes.append(json.loads(request.content))
            return httpx.Response(200, json={"id": 9})
        self.unexpected.append(f"{request.method} {path}")
        return httpx.Response(404, json={"detail": "not here"})

    def client(self) -> NetBoxClient:
        return NetBoxClient(
            "http://netbox.test",
            NETBOX_TOKEN,
            transport=httpx.MockTransport(self.answer),
            retry=RetryPolicy(attempts=1),
        )


def unreachable_proxmox(asked: list[str]):
    """A Proxmox that answers every read with 503 (after the client's retries)."""

    def factory(endpoint, credentials):
        def answer(request: httpx.Request) -> httpx.Response:
            asked.append(request.url.path)
            return httpx.Response(503, json={"data": None})

        return ProxmoxClient(
            endpoint.url,
            credentials,
            transport=httpx.MockTransport(answer),
            retry=RetryPolicy(attempts=2, backoff=0.0),
        )

    return factory


def service(netbox: FakeNetBox, asked: list[str]) -> SyncService:
    settings = Settings(netbox_url="http://netbox.test", netbox_token=NETBOX_TOKEN)
    return SyncService(settings, netbox=netbox.client(), proxmox_factory=unreachable_proxmox(asked))


@pytest.mark.asyncio
async def test_a_run_failing_at_its_first_proxmox_read_marks_the_sidecar_failed_with_why():
    netbox, asked = FakeNetBox(), []
    report = await service(netbox, asked).run(5)
    assert asked == ["/api2/json/cluster/status"] * 2  # the first read, retried once
    assert report.status == "failed" and not report.ok
    assert "/cluster/status" in report.error and "503" in report.error
    assert report.sync_state == "recorded"
    assert netbox.unexpected == []
    [written] = netbox.sidecar_writes
    assert written["status"] == "failed"
    assert written["message"].splitlines()[0] == report.error
    assert (written["errors"], written["objects_created"]) == (0, 0)
    assert PVE_SECRET not in json.dumps(written) + json.dumps(report.as_dict())


@pytest.mark.asyncio
async def test_a_run_without_credentials_marks_the_sidecar_failed():
    netbox = FakeNetBox(credentials=False)
    report = await service(netbox, []).run(5)
    assert report.error.startswith("no Proxmox credentials for endpoint 'pve-outcome'")
    assert [w["status"] for w in netbox.sidecar_writes] == ["failed"]
    assert netbox.sidecar_writes[0]["message"].startswith("no Proxmox credentials")


@pytest.mark.parametrize("secret", [PVE_SECRET + "\n", "5d7c9a1e 2222", "5d7c\r\n9a1e"])
@pytest.mark.asyncio
async def test_a_secret_with_a_line_break_fails_before_proxmox_is_asked(secret):
    netbox, asked = FakeNetBox(secret=secret), []
    report = await service(netbox, asked).run(5)
    assert asked == []  # no request, so nothing retried
    assert report.error == (
        "unusable Proxmox credentials for endpoint 'pve-outcome': the Proxmox secret "
        "contains whitespace or control characters (a pasted line break?); enter it again"
    )
    assert [w["status"] for w in netbox.sidecar_writes] == ["failed"]
    assert secret.strip() not in json.dumps(report.as_dict())


@pytest.mark.asyncio
async def test_an_endpoint_that_owns_no_cluster_yet_says_the_failure_is_not_recorded():
    netbox = FakeNetBox(owns_cluster=False)
    report = await service(netbox, []).run(5)
    assert report.status == "failed"
    assert report.sync_state == "not recorded: the endpoint owns no native cluster yet"
    assert netbox.sidecar_writes == [] and netbox.unexpected == []


@pytest.mark.asyncio
async def test_a_preview_failing_at_its_first_read_writes_no_sidecar():
    netbox = FakeNetBox()
    report = await service(netbox, []).preview(5)
    assert report.status == "failed" and report.dry_run
    assert netbox.sidecar_writes == []


def failing_reads_proxmox(answer_ok):
    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api2/json")
        body = answer_ok(path)
        if body is None:
            return httpx.Response(500, json={"data": None})
        return httpx.Response(200, json={"data": body})

    return ProxmoxClient(
        "https://pve.test:8006",
        ProxmoxCredentials("sync@pve!outcome", Secret(PVE_SECRET)),
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(attempts=2, backoff=0.0),
    )


@pytest.mark.asyncio
async def test_reads_failing_after_retries_are_read_failures_not_remarks():
    guests = [
        {"type": "qemu", "vmid": 101, "node": "pve1", "status": "stopped", "name": "web"},
        {"type": "lxc", "vmid": 102, "node": "pve1", "status": "stopped", "name": "db"},
    ]

    def answers(path):
        if path == "/cluster/resources":
            return guests
        if path == "/nodes/pve1/qemu/101/config":
            return {"name": "web", "memory": 1024, "cores": 1}
        return None  # lxc 102's config, pve1's network, status and DNS, every record list

    client = failing_reads_proxmox(answers)
    nodes = [ProxmoxNode("pve1", True)]
    identity = ClusterIdentity("c", "cluster", ("pve1",), True)
    inventory = await ProxmoxGateway(client).inventory(identity, nodes)
    assert [g.vmid for g in inventory.guests] == [101]
    failures = sorted(inventory.read_failures)
    assert len(failures) == 4 and inventory.warnings == []
    assert "lxc/102: config unreadable" in failures[0]
    # pve1 holds a container: its search domain names the container (`dns_name`)
    assert "node pve1: DNS settings unreadable" in failures[1]
    assert "node pve1: network unreadable" in failures[2]
    # its hardware facts (the device keeps the ones it has)
    assert "node pve1: status unreadable" in failures[3]

    # The records stage hands the lists that did not answer to the run's report.
    report = RunReport(cluster={"created": True})  # a new cluster: no NetBox reads
    endpoint = Endpoint.from_api(
        {"id": 5, "name": "pve-outcome", "host": "pve.test", "netbox_cluster": {"id": 41}}
    )
    netbox = NetBoxGateway(FakeNetBox().client())
    settings = Settings(netbox_url="http://netbox.test", netbox_token=NETBOX_TOKEN)
    run = StageRun(
        settings,
        endpoint,
        netbox,
        ProxmoxGateway(client),
        report,
        lambda _e: None,
        None,
        SyncPolicy(),
        None,
        41,
        nodes,
        None,
    )
    run.guests = inventory.guests

    async def earlier_stages(_run, _gate) -> dict:
        return {"inventory": inventory, "guests.owned": Owned([]), "nodes.devices": {}}

    earlier = Stage("earlier", earlier_stages, gives=("inventory", "guests.owned", "nodes.devices"))
    await Scheduler((earlier, records.STAGE), run, lambda _e: None).execute()
    assert len(report.read_failures) >= 4  # storage, backup jobs, replication, HA lists
    assert all("unreadable" in failure for failure in report.read_failures)
    assert reflection(report.tally, read_failures=report.read_failures)["status"] == "degraded"


@dataclass
class Owned:
    owned: list


def test_a_degraded_run_reports_and_records_its_failed_reads():
    report = RunReport()
    report.tally.add("virtualization.virtualmachine", "created", 3)
    report.tally.add("virtualization.virtualmachine", "updated", 1)
    report.read_failures = [f"node pve1: storage {n} unreadable: 503" for n in range(11)]
    report.warnings.append("vm web: no runtime addresses: agent not running")
    shown = report.as_dict()
    assert (shown["ok"], shown["status"], shown["error"]) == (False, "completed_with_errors", None)
    assert len(shown["read_failures"]) == 11
    state = reflection(report.tally, read_failures=report.read_failures)
    assert (state["status"], state["errors"]) == ("degraded", 11)
    assert (state["objects_created"], state["objects_updated"]) == (3, 1)
    lines = state["message"].splitlines()
    assert lines[0] == "11 Proxmox read(s) failed, 0 NetBox write(s) failed"
    assert lines[1] == "read failed: node pve1: storage 0 unreadable: 503"
    assert len(lines) == 12
    # A run whose writes failed too counts both; a remark alone changes nothing.
    report.tally.fail("ipam.ipaddress", "10.0.0.5/24", "refused")
    assert reflection(report.tally, read_failures=report.read_failures)["errors"] == 12
    clean = RunReport()
    clean.warnings.append("vm web: no runtime addresses: agent not running")
    assert clean.ok and reflection(clean.tally)["status"] == "succeeded"
    assert reflection(clean.tally, error="claim refused")["status"] == "failed"
