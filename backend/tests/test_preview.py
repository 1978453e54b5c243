"""The preview (dry run): its NetBox client never sends a write and records what the run
would write; the CLI's `run --dry-run` and the HTTP service's preview route show the plan.

The run against a real NetBox and the simulator (no write reaches NetBox; the plan equals
what the real run then writes) is e2e/test_sync_preview.py.
"""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from proxbox_backend import api, cli
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.config import Settings
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.preview import PreviewNetBoxClient, PreviewWriteRefused
from proxbox_backend.secrets import Secret
from proxbox_backend.service import RunReport

VMS = "/virtualization/virtual-machines/"
TOKEN = "preview-backend-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def fake_netbox(seen: list[httpx.Request]):
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        vm = {"id": 12, "name": "web", "memory": 2048, "status": {"value": "active"}}
        return httpx.Response(200, json={"count": 1, "next": None, "results": [vm]})

    return NetBoxClient(
        "http://netbox.test", Secret("t" * 40), transport=httpx.MockTransport(answer)
    )


@pytest.mark.asyncio
async def test_the_preview_client_records_writes_with_old_values_and_sends_none():
    seen: list[httpx.Request] = []
    recorder = PlanRecorder()
    client = PreviewNetBoxClient(fake_netbox(seen), recorder)
    await client.list(VMS, {"cluster_id": 3})
    updated = await client.bulk_update(VMS, [{"id": 12, "memory": 4096, "status": "offline"}])
    created = await client.bulk_create(VMS, [{"name": "db", "cluster": 3}])
    deleted = await client.bulk_delete(VMS, [12])
    # Answered as NetBox would, the created object with a placeholder id.
    assert set(updated.succeeded) == {0} and not updated.failed
    placeholder = created.succeeded[0]["id"]
    assert placeholder < 0 and deleted.succeeded == {0: 12}
    # Components of an object the run would create are not looked up in NetBox.
    assert (
        await client.list("/virtualization/interfaces/", {"virtual_machine_id": [placeholder]})
        == []
    )
    # A write that bypasses the bulk methods is refused, never sent.
    with pytest.raises(PreviewWriteRefused):
        await client.call("PATCH", f"{VMS}12/", json={"name": "x"})
    assert [r.method for r in seen] == ["GET"]

    plan = recorder.as_dict()
    vms = plan["object_types"]["virtualization.virtualmachine"]
    assert (vms["create"], vms["update"], vms["delete"]) == (1, 1, 1)
    assert vms["updates"][0] == {
        "id": 12,
        "label": "web",
        "changes": {
            "memory": {"old": 2048, "new": 4096},
            "status": {"old": "active", "new": "offline"},
        },
    }
    assert vms["creates"][0]["label"] == "db" and vms["deletes"][0]["label"] == "web"
    assert plan["placeholders"][str(placeholder)]["label"] == "db"


@pytest.mark.asyncio
async def test_an_update_of_an_object_the_run_would_create_amends_its_create():
    recorder = PlanRecorder()
    client = PreviewNetBoxClient(fake_netbox([]), recorder)
    placeholder = (await client.bulk_create(VMS, [{"name": "db"}])).succeeded[0]["id"]
    await client.bulk_update(VMS, [{"id": placeholder, "primary_ip4": -9}])
    vms = recorder.as_dict()["object_types"]["virtualization.virtualmachine"]
    assert vms["update"] == 0
    assert vms["creates"][0]["payload"] == {"name": "db", "primary_ip4": -9}


def planned_report() -> RunReport:
    report = RunReport(endpoint={"id": 7, "name": "pve-lab"}, dry_run=True, plan=PlanRecorder())
    report.plan.create("virtualization.virtualmachine", {"name": "db", "memory": 1024})
    report.plan.update(
        "virtualization.virtualmachine", 12, {"memory": 4096}, {"name": "web", "memory": 2048}
    )
    report.plan.delete("dcim.device", 4, {"name": "pve9"})
    report.tally.add("virtualization.virtualmachine", "created")
    report.tally.add("virtualization.virtualmachine", "updated")
    report.tally.add("dcim.device", "deleted")
    return report


def test_the_plan_is_rendered_per_object_type_with_old_and_new_values():
    console = Console(record=True, width=160)
    cli.render_plan(planned_report(), console)
    text = console.export_text()
    assert "Preview of endpoint pve-lab: nothing was written" in text
    assert "virtualization.virtualmachine: 1 to create, 1 to update, 0 to delete" in text
    assert "+ db (new #-1)" in text
    assert "~ web (#12)" in text and "memory: 2048 → 4096" in text
    assert "dcim.device: 0 to create, 0 to update, 1 to delete" in text and "- pve9 (#4)" in text


class PlanningService:
    def __init__(self):
        self.calls = []

    async def run(self, endpoint, emit=None, target=None, *, dry_run=False):
        self.calls.append((endpoint, target, dry_run))
        return planned_report()


@pytest.fixture
def service(monkeypatch):
    monkeypatch.setenv("PROXBOX_NETBOX_URL", "http://netbox.test")
    monkeypatch.setenv("PROXBOX_NETBOX_TOKEN", "x" * 40)
    planning = PlanningService()
    monkeypatch.setattr(cli, "SyncService", lambda settings, baselines=None: planning)
    return planning


def test_run_dry_run_json_prints_the_plan(service, capsys):
    assert cli.main(["run", "--endpoint", "7", "--dry-run", "--json"]) == cli.EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert service.calls == [("7", None, True)]
    assert report["dry_run"] is True and report["status"] == "previewed"
    vms = report["plan"]["object_types"]["virtualization.virtualmachine"]
    assert vms["updates"][0]["changes"] == {"memory": {"old": 2048, "new": 4096}}


def test_run_dry_run_prints_the_plan(service, capsys):
    assert cli.main(["run", "--endpoint", "7", "--dry-run"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert service.calls == [("7", None, True)]
    assert "memory: 2048 → 4096" in out and "nothing was written" in out


def test_a_run_without_dry_run_is_a_real_run(service, capsys):
    cli.main(["run", "--endpoint", "7", "--json"])
    assert service.calls == [("7", None, False)]


def _app(service):
    settings = Settings(netbox_url="http://127.0.0.1:9", netbox_token=Secret("x" * 40))
    return api.create_app(settings, service=service, api_token=TOKEN)


def test_the_preview_route_answers_with_the_plan():
    planning = PlanningService()
    with TestClient(_app(planning)) as client:
        answer = client.post("/sync/7/preview", params={"target": "qemu/100"}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dry_run"] is True and body["status"] == "previewed"
    ((endpoint, target, dry_run),) = planning.calls
    assert (endpoint, target.guest, dry_run) == (7, ("qemu", 100), True)
    vms = body["plan"]["object_types"]["virtualization.virtualmachine"]
    assert vms["updates"][0]["changes"]["memory"] == {"old": 2048, "new": 4096}
    assert body["counters"]["dcim.device"]["deleted"] == 1


def test_the_preview_route_refuses_unknown_parameters_and_bad_targets():
    planning = PlanningService()
    with TestClient(_app(planning)) as client:
        mistyped = client.post("/sync/7/preview", params={"taget": "qemu/100"}, headers=AUTH)
        bad = client.post("/sync/7/preview", params={"target": "vm/100"}, headers=AUTH)
        unauthorized = client.post("/sync/7/preview")
    assert mistyped.status_code == 422 and mistyped.json()["detail"][0]["loc"] == ["query", "taget"]
    assert bad.status_code == 422 and "target" in bad.text
    assert unauthorized.status_code == 401
    assert planning.calls == []
